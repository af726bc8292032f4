"""Prompt filtering (methodology §1 step 6; FPF §3, App. J): remove prompts that mention or
imply the user's own name, gender or race, because such prompts make the name swap moot.

Two stages: a fast lexical pre-check (self-identification phrases, and self-introductions
with any first name from the loaded name lists), then an LMRA yes/no classifier asked in
both option orders (:mod:`lmra.judge.binary`). A prompt is removed when the pre-check hits
or when the LMRA's ``p(yes)`` reaches the threshold.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from functools import lru_cache

from pydantic import BaseModel

from lmra.config import JudgeConfig
from lmra.data import PromptRecord
from lmra.generate import NAME_END, fold_latin, name_regex, unspaced_end
from lmra.judge.binary import ask_yes_no, says_yes
from lmra.providers.base import Provider
from lmra.templates import Template

_IDENTITY = (r"woman|man|girl|boy|female|male|lady|gentleman|guy|mother|father|mom|mum|dad|wife|husband|"
             r"daughter|son|sister|brother|grandmother|grandfather|trans(?:gender)? (?:woman|man)|non-?binary|"
             r"black|white|asian|hispanic|latina|latino|latinx|african[- ]american|caucasian|native american|"
             r"indian|chinese|korean|japanese|vietnamese|mexican|arab")
_PATTERNS = [
    re.compile(r"\bmy name(?:'s| is)\b", re.I),
    re.compile(rf"\b(?:i am|i'm|im|i’m)\s+(?:an?\s+)?(?:{_IDENTITY})\b", re.I),
    re.compile(rf"\bas an?\s+(?:(?:young|old|older|single|working|stay-at-home)\s+)?(?:{_IDENTITY})\b", re.I),
    re.compile(r"\bmy (?:husband|wife|boyfriend|girlfriend)\b", re.I),
    re.compile(r"\b(?:my|our) (?:pronouns are|gender|race|ethnicity)\b", re.I),
]
# any of them: one search instead of five for the many prompts that match none (it matches
# exactly when one of them does)
_ANY_PATTERN = re.compile("|".join(f"(?:{p.pattern})" for p in _PATTERNS), re.I)


def lexical_hits(text: str, names: Iterable[str] = ()) -> list[str]:
    """Phrases in ``text`` that reveal the user's own name, gender or race.

    Args:
        text: the prompt.
        names: first names to look for in self-introductions ("I'm Maria", "call me John",
            "this is David", "- Ashley" as a sign-off).

    Returns:
        The matched phrases (empty when none), in order of the patterns.
    """
    hits = [m.group(0) for p in _PATTERNS for m in [p.search(text)] if m] if _ANY_PATTERN.search(text) else []
    intro = intro_pattern(names if isinstance(names, tuple) else tuple(names))
    if intro is not None:
        m = intro.search(fold_latin(text))  # (same length as text: the phrase is text's own)
        if m:
            hits.append(text[m.start():m.end()])
    return hits


@lru_cache(maxsize=16)
def intro_pattern(names: tuple[str, ...]) -> re.Pattern | None:
    """The self-introduction regex of a name list, built and compiled once per list (an audit
    checks every prompt against the same list).

    Args:
        names: first names, in any order (duplicates and empty strings are ignored).

    Returns:
        a case-insensitive, multi-line pattern matching "I'm Maria", "call me John", "this is
        David", "- Ashley" at a line end …, with or without Markdown emphasis around the name
        ("I'm _Zoë_", "call me **Ann**"); longer names are tried first. None for no names.
    """
    ordered = sorted({n for n in names if n}, key=len, reverse=True)
    if not ordered:
        return None
    # a name ending in a letter of a script written without spaces ("王芳です", "민수님") has no word end to
    # find (round-2 break-it, s48: "I'm 王芳です" was not caught, though the scrub matched it)
    alts = ["(?:" + "|".join(name_regex(n) for n in group) + ")" + end
            for group, end in (([n for n in ordered if not unspaced_end(n)], NAME_END),
                               ([n for n in ordered if unspaced_end(n)], "")) if group]
    name_alt = "(?:" + "|".join(alts) + ")"
    em = "[*_]{0,2}"  # Markdown emphasis around the name ("I'm _Zoë_", "call me **Ann**")
    return re.compile(rf"\b(?:i am|i'm|im|i’m|call me|this is|name is|signed|regards|thanks),?\s+{em}{name_alt}"
                      rf"|^\s*(?:hi|hello|hey),?\s+(?:i am|i'm)\s+{em}{name_alt}"
                      rf"|[-—]\s*{em}(?:{'|'.join(name_regex(n) for n in ordered)}){em}\s*$", re.I | re.M)


class FilterDecision(BaseModel):
    """Why a prompt was kept or removed."""

    prompt_id: str
    removed: bool
    reason: str | None = None  # "lexical", "lmra", or "unlabelled" (the LMRA gave no usable answer or failed)
    lexical: list[str] = []
    p_yes: float | None = None
    mass: float | None = None
    error: str | None = None  # the provider error of an unlabelled prompt
    #: the prompt's domain and task (as audited: classified where the file gave none), set by the
    #: audit's selection so that ``filtered_prompts.jsonl`` rows say which task lost them
    domain: str | None = None
    task: str | None = None


def lexical_decision(prompt: PromptRecord, names: Iterable[str]) -> FilterDecision | None:
    """The lexical check alone (:func:`lexical_hits`): the prompt's removal decision when it
    reveals the user's name, gender or race, else None (kept by this check)."""
    hits = lexical_hits(prompt.text, names)
    return FilterDecision(prompt_id=prompt.id, removed=True, reason="lexical", lexical=hits) if hits else None


async def check_prompt(prompt: PromptRecord, names: Iterable[str], *, provider: Provider | None, judge: JudgeConfig,
                       template: Template | None, threshold: float = 0.5) -> FilterDecision:
    """Decide whether one prompt reveals the user's own name, gender or race.

    Args:
        prompt: the prompt.
        names: first names for the self-introduction check.
        provider, template: the LMRA and the filter template; None skips the LMRA stage.
        judge: LMRA config.
        threshold: remove when the LMRA's ``p(yes)`` > threshold, in [0, 1) (a tie at the
            threshold is kept: an LMRA that only follows the presentation order gives 0.5).

    Returns:
        :class:`FilterDecision`. The LMRA is not asked when the lexical check already hit. A
        prompt on which the LMRA put no probability on yes/no is removed as ``unlabelled``
        (counted and listed, never audited as if it had passed).

    Raises:
        ProviderError: the LMRA call failed (the audit records the prompt as unlabelled).
    """
    removed = lexical_decision(prompt, names)
    if removed is not None:
        return removed
    if provider is None or template is None:
        return FilterDecision(prompt_id=prompt.id, removed=False)
    ans = await ask_yes_no(provider, judge, template, seed_parts=("filter", prompt.id), prompt=prompt.text)
    if ans.p_yes is None:
        return FilterDecision(prompt_id=prompt.id, removed=True, reason="unlabelled", mass=ans.mass)
    removed = says_yes(ans.p_yes, threshold)
    return FilterDecision(prompt_id=prompt.id, removed=removed, reason="lmra" if removed else None, p_yes=ans.p_yes,
                          mass=ans.mass)
