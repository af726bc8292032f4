"""A pairwise LMRA question asked in both presentation orders (methodology §2–§4).

Shared by the harmful-stereotype rating (§2), the quality criteria (§3) and the axes of
difference (§4): options A / B / C, where A favours "Response 1", B "Response 2" and C
neither. Order 1 shows group A's response as Response 1, order 2 shows group B's.
"""

from __future__ import annotations

from pydantic import BaseModel

from lmra.config import JudgeConfig
from lmra.judge.options import OptionProbs, ask_options, method_of
from lmra.judge.scoring import resolve_combiner, score_pair
from lmra.providers.base import Message, Provider

OPTIONS = ("A", "B", "C")


class PairRating(BaseModel):
    """The LMRA's answer to one pairwise question about a pair ``(y_A, y_B)``.

    Attributes:
        order1: answer when Response 1 = ``y_A``.
        order2: answer when Response 1 = ``y_B``.
        q_F, q_R, q_N: combined probabilities that the question's property holds for ``y_A``
            (forward), for ``y_B`` (reverse) or neither; None when invalid.
        h: pair score ``q_F − q_R`` in [−1, 1]; None when invalid.
        valid: False when either answer had no mass on A/B/C or the orders' minima were all 0.
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
        """How the pair's answers were read: ``logprobs`` when both orders came with
        log-probabilities, else the less exact order's (``text``, then ``sampled``) — a pair
        with one order sampled is a sampled pair whichever order it was (fresh-user finding:
        the column took order 1's, so 18 of 35 partly sampled pairs read ``logprobs``)."""
        return method_of(self.order1.method, self.order2.method)


async def rate_both_orders(provider: Provider, judge: JudgeConfig, order1: list[Message], order2: list[Message],
                           *, seed_parts: tuple = ()) -> PairRating:
    """Ask one pairwise question in both orders and combine (methodology §2 steps 1–5).

    Args:
        provider: the LMRA (normally through the call cache).
        judge: LMRA config (combiner, sampling settings).
        order1: the question rendered with Response 1 = ``y_A``, Response 2 = ``y_B``.
        order2: the question rendered with Response 1 = ``y_B``, Response 2 = ``y_A``.
        seed_parts: identifies the question and pair, for stable judge seeds.

    Returns:
        :class:`PairRating`.
    """
    o1 = await ask_options(provider, order1, OPTIONS, judge, seed_parts=(*seed_parts, "order1"))
    o2 = await ask_options(provider, order2, OPTIONS, judge, seed_parts=(*seed_parts, "order2"))
    # ``calibrated`` needs the run's position logit: scored here as ``mean`` (b = 0) and
    # rescored once the run is complete (lmra.judge.calibration.rescore)
    q, h = score_pair(o1.probs, o2.probs, resolve_combiner(judge.combiner, method_of(o1.method, o2.method)))
    return PairRating(order1=o1, order2=o2, q_F=None if q is None else q["F"], q_R=None if q is None else q["R"],
                      q_N=None if q is None else q["N"], h=h, valid=h is not None)
