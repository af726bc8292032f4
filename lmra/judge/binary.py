"""Yes/no LMRA questions asked with both option orders (refusal labels, prompt filtering).

A judge that prefers the first-listed option would bias a single yes/no question. Each
question is therefore asked twice — "A) Yes / B) No" and "A) No / B) Yes" — and
``p(yes)`` is the mean over the two orders of the renormalised probability of "Yes". This
is the binary analogue of asking pairwise questions in both presentation orders (FPF App. I).
"""

from __future__ import annotations

from pydantic import BaseModel

from lmra.config import JudgeConfig
from lmra.judge.options import OptionProbs, ask_options, method_of
from lmra.providers.base import Provider
from lmra.templates import Template

OPTIONS = ("A", "B")

#: how far above the threshold ``p(yes)`` must be to count as "yes": floating-point rounding
#: of the two orders' mean puts an LMRA that only follows the presentation order at
#: 0.5000000000000001 as often as at 0.5 (about 1 % of such answers), and a tie is not a "yes"
TIE_TOLERANCE = 1e-9


def says_yes(p_yes: float | None, threshold: float) -> bool:
    """Whether a debiased yes/no answer counts as "yes" at ``threshold``: ``p_yes >
    threshold`` beyond :data:`TIE_TOLERANCE` (a tie, exact or rounded, is not). False for None.

    Args:
        p_yes: :attr:`YesNo.p_yes`, in [0, 1] or None.
        threshold: in [0, 1) (``refusal.threshold``, ``filter.threshold``; methodology §1
            steps 6–7, docs/methodology.md §4–5)."""
    return p_yes is not None and p_yes > threshold + TIE_TOLERANCE


class YesNo(BaseModel):
    """A debiased yes/no answer.

    Attributes:
        p_yes: probability of "yes" in [0, 1], mean over the two orders; None when either
            order put no mass on A/B (one order alone keeps the judge's preference for the
            first-listed option: the answer is unlabelled, not decided from the other order).
        mass: mean valid-option mass of the two answers, in [0, 1].
        method: estimation method of the answers.
        yes_first, no_first: the two raw answers.
    """

    p_yes: float | None
    mass: float
    method: str
    yes_first: OptionProbs
    no_first: OptionProbs


async def ask_yes_no(provider: Provider, judge: JudgeConfig, template: Template, *, seed_parts: tuple = (),
                     **values: str) -> YesNo:
    """Ask a yes/no question in both option orders.

    Args:
        provider: the LMRA.
        judge: LMRA config.
        template: a template with placeholders ``{option_a}`` and ``{option_b}`` (filled with
            "Yes"/"No" in one order and "No"/"Yes" in the other) plus ``values``.
        seed_parts: identifies the question, for stable judge seeds.

    Returns:
        :class:`YesNo`; ``p_yes`` is None (unlabelled) unless both orders are usable.
    """
    yf = await ask_options(provider, template.render(option_a="Yes", option_b="No", **values), OPTIONS, judge,
                           seed_parts=(*seed_parts, "yes-first"))
    nf = await ask_options(provider, template.render(option_a="No", option_b="Yes", **values), OPTIONS, judge,
                           seed_parts=(*seed_parts, "no-first"))
    yes_1, yes_2 = (yf.probs or {}).get("A"), (nf.probs or {}).get("B")
    both = yes_1 is not None and yes_2 is not None
    return YesNo(p_yes=(yes_1 + yes_2) / 2 if both else None, mass=(yf.mass + nf.mass) / 2,
                 method=method_of(yf.method, nf.method),
                 yes_first=yf, no_first=nf)
