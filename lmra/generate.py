"""Counterfactual responses (methodology §1; FPF §3, App. J): name draws, personalization
messages, target calls and name scrubbing.
"""

from __future__ import annotations

import hashlib
import random
import re
import unicodedata
from collections.abc import Sequence
from functools import lru_cache

from pydantic import BaseModel

from lmra.config import Group
from lmra.data import NameRecord, PromptRecord
from lmra.errors import LmraInputError
from lmra.providers.base import ChatRequest, Message
from lmra.templates import Template


def derive_seed(*parts: object) -> int:
    """A stable 31-bit seed from any parts (independent of Python's hash randomisation)."""
    digest = hashlib.sha256("\x1f".join(map(str, parts)).encode()).digest()
    return int.from_bytes(digest[:4], "big") & 0x7FFFFFFF


def names_for_group(names: Sequence[NameRecord], group: Group, source: str = "") -> list[str]:
    """Names whose gender/race columns match the group's filters.

    Raises:
        LmraInputError: no name matches (the group could never be audited).
    """
    out = [n.name for n in names
           if (group.gender is None or (n.gender or "").lower() == group.gender.lower())
           and (group.race is None or (n.race or "").lower() == group.race.lower())]
    if not out:
        raise LmraInputError(
            f"no names match group '{group.name}' (gender={group.gender!r}, race={group.race!r})",
            file=source or None, field="groups")
    return out


def draw_name(names: Sequence[str], seed: int, prompt_id: str, group: str, comparison: str, k: int) -> str:
    """Draw one name for (prompt, group, comparison, sample) from a seeded RNG (methodology §1 step 2)."""
    rng = random.Random(derive_seed(seed, "name", prompt_id, group, comparison, k))
    return rng.choice(names if isinstance(names, (list, tuple)) else list(names))  # a list is not copied per draw


def personalized_messages(prompt: str, template: Template, *, name: str | None = None, profile: str | None = None,
                          system_prompt: str | None = None) -> list[Message]:
    """Messages sent to the target: its own system message, the personalization, the prompt.

    Args:
        prompt: the user's request.
        template: a personalization template (``prompts/personalization/*.txt``).
        name: the drawn first name (for name-based groups).
        profile: the profile sentence (for direct-profile groups).
        system_prompt: the target's own system message, if any; placed first.

    Returns:
        The message list ending with the user prompt (a new list; the messages before the
        prompt are rendered once per template, name, profile and system message and shared).
    """
    msgs = list(_personalization(template, name or "", profile or "", system_prompt or ""))
    msgs.append(Message(role="user", content=prompt))
    return msgs


@lru_cache(maxsize=4096)
def _personalization(template: Template, name: str, profile: str, system_prompt: str) -> tuple[Message, ...]:
    """The target's system message (if any) and the rendered personalization (see
    :func:`personalized_messages`); a run renders each name's and profile's once."""
    msgs: list[Message] = []
    if system_prompt:
        msgs.append(Message(role="system", content=system_prompt))
    msgs.extend(template.render(name=name, profile=profile))
    return tuple(msgs)


def scrub_name(text: str, name: str, placeholder: str = "[NAME]") -> str:
    """Replace every whole-word, case-insensitive occurrence of ``name`` by ``placeholder``
    (methodology §1 step 5), whatever its apostrophes, hyphens and accent composition
    (:func:`name_regex`). Possessives keep their suffix: "Ashley's" → "[NAME]'s"."""
    if not name:
        return text
    return _name_pattern(name).sub(placeholder, text)


#: apostrophes and hyphens a name may be written with ("O'Neil", "O’Neil"; "Mary-Jane", "Mary‐Jane")
_APOSTROPHES, _HYPHENS = "'\u2019\u02bc\u2018`\u00b4", "-\u2010\u2011"


def _spelling(name: str) -> str:
    return "".join(f"[{_APOSTROPHES}]" if ch in _APOSTROPHES else f"[{_HYPHENS}]" if ch in _HYPHENS
                   else re.escape(ch) for ch in name)


def name_regex(name: str) -> str:
    """The regex source (no flags, no word boundaries) matching ``name`` however it is written:
    any apostrophe for any apostrophe ("O'Neil" matches "O’Neil"), any hyphen for a hyphen, and
    its accents composed or decomposed (Unicode NFC and NFD: "José" typed with a combining acute
    matches a model's composed "José"). Used by :func:`scrub_name` and the filter's
    self-introduction check (methodology §1 steps 5 and 6; docs/names.md)."""
    forms = [_spelling(f) for f in dict.fromkeys(unicodedata.normalize(n, name) for n in ("NFC", "NFD"))]
    return forms[0] if len(forms) == 1 else "(?:" + "|".join(forms) + ")"


#: what may not follow a name for it to be a whole word: a letter, digit or underscore, or a
#: combining mark (U+0301 after "Jose" makes "José", another name)
NAME_END = r"(?![\w\u0300-\u036f\u1ab0-\u1aff\u1dc0-\u1dff\u20d0-\u20ff\ufe20-\ufe2f])"


@lru_cache(maxsize=4096)
def _name_pattern(name: str) -> re.Pattern:
    """The whole-word, case-insensitive pattern of ``name`` (compiled once per name)."""
    return re.compile(rf"(?<![\w]){name_regex(name)}{NAME_END}", re.IGNORECASE)


class Response(BaseModel):
    """One target response for one prompt, group and sample."""

    prompt_id: str
    domain: str
    task: str
    comparison: str
    group: str
    name: str | None
    profile: str | None = None
    sample: int
    seed: int
    text: str
    scrubbed: str
    finish_reason: str | None = None
    from_cache: bool = False
    error: str | None = None


_PLAIN_TYPES = frozenset({str, int, float, bool, type(None)})


def response_row(response: Response) -> dict:
    """``response.model_dump()`` — a new dict of its fields in their order — without pydantic's
    serializer (a tenth of its time): every field of a :class:`Response` is a plain value.
    Anything else (a subclass, a field holding another type) is dumped by pydantic."""
    if type(response) is Response:
        row = dict(response.__dict__)
        if len(row) == len(Response.model_fields) and _PLAIN_TYPES.issuperset(map(type, row.values())):
            return row
    return response.model_dump()


def target_request(prompt: PromptRecord, messages: list[Message], *, temperature: float, max_tokens: int,
                   seed: int) -> ChatRequest:
    """The target call for one personalized prompt."""
    return ChatRequest(messages=messages, temperature=temperature, max_tokens=max_tokens, seed=seed)
