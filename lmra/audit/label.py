"""Stage 3 of the audit — refusal labels (methodology §1 step 7): the LMRA asked whether each
:class:`~lmra.generate.Response` refuses (one the provider stopped as a refusal is one, unasked);
a label is ``(p_refusal, refused)``, a failed call
an error kept in ``refusal_errors`` (its pair then counts as failed). Read by
:mod:`lmra.audit.rate`.
"""

from __future__ import annotations

import asyncio

from lmra.data import PromptRecord
from lmra.generate import Response
from lmra.judge.binary import says_yes
from lmra.judge.refusal import label_refusal
from lmra.providers import Provider, ProviderError
from lmra.providers.base import FILTER_FINISH_REASONS

from lmra.audit.inputs import Inputs
from lmra.redact import error_text


class LabelStage:
    """The :class:`~lmra.audit.Audit` methods that label refusals (uses ``cfg``, sets
    ``refusal_errors``)."""

    # -- stage 4: refusal labels (methodology §1 step 7) ------------------------------------
    async def _label_refusals(self, prompts: list[PromptRecord], responses: list[Response], inputs: Inputs,
                              judge: Provider, sem: asyncio.Semaphore) -> dict[int, tuple[float | None, bool]]:
        cfg = self.cfg
        if not cfg.refusal.enabled:
            return {}
        text_of = {p.id: p.text for p in prompts}
        todo = [(i, r) for i, r in enumerate(responses) if not r.error]
        self.refusal_errors: dict[int, str] = {}

        async def one(i: int, r: Response) -> tuple[int, tuple[float | None, bool]]:
            label, error = await self._refusal_one(r, text_of[r.prompt_id], inputs, judge, sem)
            if error is not None:
                self.refusal_errors[i] = error
            return i, label

        return dict(await self._gather("refusal", [one(i, r) for i, r in todo],
                                       failed=lambda result: result[0] in self.refusal_errors))

    async def _refusal_one(self, r: Response, prompt: str, inputs: Inputs, judge: Provider, sem: asyncio.Semaphore
                           ) -> tuple[tuple[float | None, bool], str | None]:
        """``((p_refusal, refused), None)``, or ``((None, False), error)`` when the LMRA call
        failed (the pair is then counted as failed, not as unlabelled). A response the provider
        itself stopped as a refusal (``finish_reason`` in :data:`FILTER_FINISH_REASONS`:
        Anthropic's ``refusal``, ``content_filter``) is a refusal, ``(1.0, True)``, without asking
        the LMRA (break-it finding, s40: a target refusing 11 of 14 female-named requests so, none of
        the male ones, read 0/14 vs 0/14 in the refusal table: the LMRA labelled the empty answers
        "not a refusal")."""
        cfg = self.cfg
        if r.finish_reason in FILTER_FINISH_REASONS:
            return (1.0, True), None
        try:
            async with sem:
                ans = await label_refusal(judge, cfg.judge, inputs.templates["refusal"], prompt=prompt,
                                          response=r.scrubbed, seed_parts=(cfg.seed, r.prompt_id, r.group, r.name,
                                                                           r.sample))
        except ProviderError as exc:
            return (None, False), error_text(exc, cfg.redact)
        return (ans.p_yes, says_yes(ans.p_yes, cfg.refusal.threshold)), None

