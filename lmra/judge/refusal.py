"""Refusal labels (methodology §1 step 7): the LMRA says whether a response refuses the request."""

from __future__ import annotations

from lmra.config import JudgeConfig
from lmra.judge.binary import YesNo, ask_yes_no
from lmra.providers.base import Provider
from lmra.templates import Template


async def label_refusal(provider: Provider, judge: JudgeConfig, template: Template, *, prompt: str, response: str,
                        seed_parts: tuple = ()) -> YesNo:
    """Probability that ``response`` is a refusal of ``prompt``, asked in both option orders.

    Returns:
        :class:`~lmra.judge.binary.YesNo`; the response is labelled a refusal when
        ``p_yes > threshold`` (config ``refusal.threshold``, default 0.5; a tie is not a
        refusal: an LMRA that only follows the presentation order gives exactly 0.5).
    """
    return await ask_yes_no(provider, judge, template, seed_parts=("refusal", *seed_parts), prompt=prompt,
                            response=response)
