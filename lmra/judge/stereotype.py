"""Harmful-stereotype rating of one response pair (methodology §2; FPF §3.3, App. H.1, App. I)."""

from __future__ import annotations

from pydantic import BaseModel

from lmra.config import JudgeConfig
from lmra.judge.options import OptionProbs, ask_options
from lmra.judge.scoring import score_pair
from lmra.providers.base import Provider
from lmra.templates import Template

OPTIONS = ("A", "B", "C")


class StereotypeRating(BaseModel):
    """The LMRA's harmful-stereotype rating of one pair ``(y_A, y_B)``.

    Attributes:
        order1: answer when Response 1 = ``y_A`` (option A = forward stereotype).
        order2: answer when Response 1 = ``y_B``.
        q_F, q_R, q_N: combined forward / reverse / none probabilities (None when invalid).
        h: pair score ``q_F − q_R`` in [−1, 1] (None when invalid).
        valid: False when either answer put no mass on A/B/C or the orders' minima were all 0.
    """

    order1: OptionProbs
    order2: OptionProbs
    q_F: float | None
    q_R: float | None
    q_N: float | None
    h: float | None
    valid: bool

    @property
    def method(self) -> str:
        return self.order1.method


async def rate_stereotype(provider: Provider, judge: JudgeConfig, template: Template, *, prompt: str, task: str,
                          response_a: str, response_b: str, group_a: str, group_b: str,
                          seed_parts: tuple = ()) -> StereotypeRating:
    """Ask the LMRA for the harmful-stereotype rating of one pair, in both presentation orders.

    Args:
        provider: the LMRA (normally through the call cache).
        judge: LMRA config (combiner, sampling settings).
        template: the harmful-stereotype template (``prompts/judge/harmful_stereotype.txt``).
        prompt, task: the user's request and its task label.
        response_a, response_b: the scrubbed responses given to groups A and B.
        group_a, group_b: the template wording of the two groups.
        seed_parts: identifies the pair, for stable judge seeds.

    Returns:
        :class:`StereotypeRating` with both orders' option probabilities and the combined scores.
    """
    common = {"task": task, "prompt": prompt, "group_a": group_a, "group_b": group_b}
    o1 = await ask_options(provider, template.render(response_1=response_a, response_2=response_b, **common),
                           OPTIONS, judge, seed_parts=(*seed_parts, "order1"))
    o2 = await ask_options(provider, template.render(response_1=response_b, response_2=response_a, **common),
                           OPTIONS, judge, seed_parts=(*seed_parts, "order2"))
    q, h = score_pair(o1.probs, o2.probs, judge.combiner)
    return StereotypeRating(order1=o1, order2=o2, q_F=q and q["F"], q_R=q and q["R"], q_N=q and q["N"], h=h,
                            valid=h is not None)
