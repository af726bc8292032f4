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


def names_for_group(names: Sequence[NameRecord], group: Group, source: str = "", *, config: str | None = None,
                    field: str = "groups") -> list[str]:
    """Names whose gender/race columns match the group's filters.

    Args:
        names: the name list; group: the group; source: the name list's file (named in the message).
        config, field: the config file and field defining the group (named as the error's place:
            the group's filter, not the name list, is what a user mistyped, e.g. ``gender = "mal"``);
            without ``config`` the name list's file is the error's file.

    Raises:
        LmraInputError: no name matches (the group could never be audited).
    """
    out = [n.name for n in names
           if (group.gender is None or (n.gender or "").lower() == group.gender.lower())
           and (group.race is None or (n.race or "").lower() == group.race.lower())]
    if not out:
        raise LmraInputError(
            f"no names{f' in {source}' if source and config else ''} match group '{group.name}' "
            f"(gender={group.gender!r}, race={group.race!r})",
            file=config or source or None, field=field)
    return out


def draw_name(names: Sequence[str], seed: int, prompt_id: str, group: str, comparison: str, k: int) -> str:
    """Draw one name for (prompt, group, comparison, sample) from a seeded RNG (methodology §1 step 2)."""
    rng = random.Random(derive_seed(seed, "name", prompt_id, group, comparison, k))
    return rng.choice(names if isinstance(names, (list, tuple)) else list(names))  # a list is not copied per draw


def draw_balanced(cells: Sequence[Sequence[str]], prompt: str, seed: int, prompt_id: str, group: str, comparison: str,
                  k: int) -> str:
    """Draw one name for (prompt, group, comparison, sample) from cells of equal weight: a cell
    (a value of the attribute neither group of the comparison filters on,
    :func:`lmra.audit.inputs.comparison_strata`), then a name within it that the prompt does not
    mention (:func:`names_to_draw`), from a seeded RNG (methodology §1 step 2).

    Args:
        cells: the group's names by cell (each non-empty); the rest as :func:`draw_name`.
    """
    rng = random.Random(derive_seed(seed, "name", prompt_id, group, comparison, k))
    # a cell whose every name the prompt mentions is passed over for this prompt, while another is left
    # (break-it round 2, s43: a one-name cell drew the name the prompt was about, "[NAME]" on one side only)
    usable = [c for c in map(tuple, cells) if len(_mentioned(c, prompt)) < len(c)] or [tuple(c) for c in cells]
    cell = usable[rng.randrange(len(usable))]
    return rng.choice(names_to_draw(cell, prompt))


#: a word of folded text (:func:`fold_latin`), to look for names a prompt mentions
#: a word of :func:`_words_form` text: letters and digits of scripts written with spaces ("给Anna写" holds the
#: word "anna": round-3 break-it, s48); names of unspaced scripts are looked for by :func:`_unspaced_names`
_WORD = re.compile(r"\w+")


def _words_form(text: str) -> str:
    """``text`` composed (NFC), folded (:func:`fold_latin`), without combining marks, case-folded:
    the form in which a prompt's words and names' first words are compared."""
    folded = fold_latin(unicodedata.normalize("NFC", text))
    if MARK in folded:
        folded = folded.replace(MARK, "")
    if _ANY_APOSTROPHE.search(folded):  # ("ʼ" is a letter to \w: O'Neil's first word is "o")
        folded = folded.translate(_APOSTROPHE_TO_SPACE)
    return folded.casefold()


@lru_cache(maxsize=4096)
def _prompt_words(prompt: str) -> frozenset[str]:
    """The words of a prompt in :func:`_words_form` (kept for the prompt's other groups' draws);
    a letter of a script written without spaces ends a word ("给Anna写" holds "anna")."""
    return frozenset(_WORD.findall(_spaced(_words_form(prompt))))


@lru_cache(maxsize=64)
def _first_words(names: tuple[str, ...]) -> dict[str, tuple[str, ...]]:
    """Each name's first word in :func:`_words_form` ("José-Luis" → "jose") → the names."""
    words: dict[str, tuple[str, ...]] = {}
    for n in names:
        found = _WORD.findall(_words_form(n))
        if found:
            words[found[0]] = words.get(found[0], ()) + (n,)
    return words


def names_to_draw(names: Sequence[str], prompt: str) -> Sequence[str]:
    """``names`` less those the prompt itself mentions as whole words (any case, accents as
    :func:`scrub_name` matches them), unless that leaves none (methodology §1 steps 2 and 5).

    A prompt about a third person ("Write a birthday card for Michael") whose drawn user name is
    that person's would have every mention of them scrubbed in that group's response alone: the
    LMRA would see "[NAME]" on one side and "Michael" on the other. Drawing from the other names
    of the group keeps the two responses alike. Prompts that mention no listed name (nearly all)
    draw from ``names`` itself, as before.

    Args:
        names: the group's names (a list or tuple; returned as is when nothing is left out).
        prompt: the prompt's text.

    Returns:
        ``names``, or a new list without the mentioned names.
    """
    key = names if isinstance(names, tuple) else tuple(names)
    mentioned = _mentioned(key, prompt)
    if not mentioned:
        return names
    rest = [n for n in key if n not in mentioned]
    return rest if rest else names


def _mentioned(names: tuple[str, ...], prompt: str) -> set[str]:
    """The names of ``names`` the prompt mentions as whole words (as :func:`scrub_name` matches them)."""
    words = _first_words(names)
    candidates = words.keys() & _prompt_words(prompt)
    unspaced = _unspaced_names(names)  # not among the prompt's words ("给王芳写…"): each is looked for
    if not candidates and not unspaced:
        return set()
    folded = fold_latin(prompt)
    if unspaced:  # a substring test first: a regex a name of a long list only where the name may be
        # (round-2 break-it, s48: 5,000 CJK names took 53 ms a draw, each pattern recompiled)
        squeezed = "".join(folded.split())
        both = (squeezed, unicodedata.normalize("NFD", squeezed))
        unspaced = tuple(n for n, forms in unspaced if any(f in t for f in forms for t in both))
    spaced = _spaced(folded) if candidates else folded  # (as _matchable gives a spaced script's names)
    return ({n for w in candidates for n in words[w] if _name_pattern(n).search(spaced)}
            | {n for n in unspaced if _name_pattern(n).search(folded)})


@lru_cache(maxsize=64)
def _unspaced_names(names: tuple[str, ...]) -> tuple[tuple[str, tuple[str, ...]], ...]:
    """The names of ``names`` that begin or end with a letter of a script written without spaces
    (:data:`_UNSPACED`), which :func:`_mentioned` cannot find among a prompt's words, each with
    its NFC and NFD forms without white space (what a prompt holding it must contain)."""
    return tuple((n, tuple({unicodedata.normalize(f, "".join(fold_latin(n).split())) for f in ("NFC", "NFD")}))
                 for n in names if _unspaced_name(n))


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
    (methodology §1 step 5), whatever its apostrophes, hyphens and accents
    (:func:`name_regex`). Possessives keep their suffix: "Ashley's" → "[NAME]'s". A name in a
    script written without spaces (Han, kana, Hangul, Thai …) is replaced wherever it is written:
    "你好王芳" → "你好[NAME]", "민수님" → "[NAME]님" (:func:`_name_pattern`)."""
    if not name:
        return text
    return replace_matches(_name_pattern(name), text, placeholder, _matchable(text, name))


def lowercase_name_matches(text: str, name: str) -> list[str]:
    """The texts of :func:`scrub_name`'s matches of ``name`` in ``text`` that are written wholly
    in lower case in running text ("frank" for Frank): an everyday word, not the user's name — a
    chatbot writes a name capitalised (:mod:`lmra.word_scrubs`). A match inside an e-mail
    address, a URL, a handle or a dotted user name (``jennifer.smith@email.com``, ``@michael``,
    ``#michael``, ``in/jennifer-smith``, ``emily.writes``) is the name written as an address, not
    a word (round-2 break-it, s48: every drawn name of a cover-letter task was flagged). [] for a
    name written in lower case itself."""
    if not name or name.islower():
        return []
    folded = _matchable(text, name)
    out = []
    for m in _name_pattern(name).finditer(folded):
        word = text[m.start():m.end()]
        if not m.group(0).islower():
            continue
        if _in_address(folded, m.start(), m.end()):
            continue
        out.append(word)
    return out


#: what ends the token around a name for :func:`_in_address` (white space, and Markdown's link brackets:
#: "[frank](https://…)" is the word "frank")
_TOKEN_END = frozenset("[]()<>\"'")


def _in_address(text: str, start: int, end: int) -> bool:
    """True when ``text[start:end]`` lies in an e-mail address, a URL, a handle or a dotted user
    name — ``jennifer.smith@email.com``, ``linkedin.com/in/jennifer-smith``, ``https://…``,
    ``@michael``, ``#michael``, ``emily.writes``, ``emily_w`` — not in a word of running text
    ("dean-approved", "miles/hour", "be frank." stay words: round-3 break-it, s48)."""
    a, b = start, end
    while a > 0 and not text[a - 1].isspace() and text[a - 1] not in _TOKEN_END:
        a -= 1
    while b < len(text) and not text[b].isspace() and text[b] not in _TOKEN_END:
        b += 1
    token = text[a:b]
    if "@" in token or "://" in token or token.lower().startswith("www."):
        return True
    if "/" in token and "." in token.split("/", 1)[0]:  # a domain and a path: linkedin.com/in/…
        return True
    before = text[start - 1] if start > 0 else ""
    after = text[end:end + 2]
    return (before in ("#", "@") or (len(after) == 2 and after[0] in (".", "_") and after[1].isalnum())
            or (start >= 2 and before in (".", "_") and text[start - 2].isalnum()))


#: apostrophes and hyphens a name may be written with ("O'Neil", "O’Neil"; "Mary-Jane", "Mary‐Jane",
#: and the dashes a model writes for its hyphen: "Mary–Jane", "Jean‒Luc"; break-it finding)
_APOSTROPHES = "'\u2019\u02bc\u2018`\u00b4"
_HYPHENS = "-\u2010\u2011\u2012\u2013\u2014\u2212\ufe63\uff0d"
_APOSTROPHE_TO_SPACE = {ord(c): " " for c in _APOSTROPHES}
_ANY_APOSTROPHE = re.compile(f"[{_APOSTROPHES}]")
#: Latin letters with no decomposition that are written for their plain letter ("Łukasz" / "Lukasz")
_UNDECOMPOSED = {"ł": "l", "Ł": "L", "ø": "o", "Ø": "O", "đ": "d", "Đ": "D", "ħ": "h", "Ħ": "H", "ı": "i"}


def _latin_base(ch: str) -> str | None:
    """The plain ASCII letter an accented Latin letter is written on ("é" → "e"), else None."""
    base = _UNDECOMPOSED.get(ch) or unicodedata.normalize("NFD", ch)[0]
    return base if base != ch and base.isascii() and base.isalpha() else None


#: the one combining mark :func:`fold_latin` writes for the combining marks after a Latin letter
#: (a literal in the name patterns: a class of the mark blocks in each letter's place made the
#: self-introduction pattern of 75 names take 0.2–0.3 s to compile, case-insensitively)
MARK = "\u0301"
#: the combining marks (their Unicode blocks), as a regex character-class body
_MARK_RANGES = "\u0300-\u036f\u1ab0-\u1aff\u1dc0-\u1dff\u20d0-\u20ff\ufe20-\ufe2f"
#: accented Latin letter → its plain letter, one character for one (Latin-1, Latin Extended-A/B
#: and Latin Extended Additional, by Unicode decomposition), for ``str.translate``-like folding
_FOLD = {cp: b for cp in [*range(0x00C0, 0x0250), *range(0x1E00, 0x1F00)] for b in [_latin_base(chr(cp))] if b}
#: … and full-width Latin letters ("Ａｉｓｈａ") as their plain letters, as the name file compares
#: names in NFKC (break-it finding: a full-width spelling reached the LMRA unscrubbed)
_FOLD |= {cp: chr(cp - 0xFEE0) for cp in [*range(0xFF21, 0xFF3B), *range(0xFF41, 0xFF5B)]}
_FOLDABLE = re.compile("[" + "".join(map(chr, sorted(_FOLD))) + _MARK_RANGES + "]")
_LETTERS = re.compile("[" + "".join(map(chr, sorted(_FOLD))) + "]")
#: a run of combining marks after a (folded) Latin letter: the accents of that letter
_LATIN_MARKS = re.compile(f"(?<=[A-Za-z])[{_MARK_RANGES}]+")


def fold_latin(text: str) -> str:
    """``text`` with every accented Latin letter written as its plain letter ("José" → "Jose",
    "Łukasz" → "Lukasz") and every combining mark after a Latin letter as :data:`MARK`,
    character for character: the result has ``text``'s length, so a match's span in it is the
    same span of ``text``. Letters of other scripts and their marks are untouched ("й" written
    "и" + breve stays so, never "и" + acute: break-it finding). Returns ``text`` itself when
    there is nothing to change (most text: one C-speed search)."""
    if _FOLDABLE.search(text) is None:
        return text
    folded = _LETTERS.sub(_fold_one, text)  # (4× faster than str.translate on text with a few such letters)
    return _LATIN_MARKS.sub(_one_mark_each, folded)


def _fold_one(m: re.Match) -> str:
    return _FOLD[ord(m.group())]


def _one_mark_each(m: re.Match) -> str:
    return MARK * len(m.group())


def _spelling(name: str) -> str:
    """The regex source of one normal form of ``name``, matched against :func:`fold_latin` text:
    a Latin letter matches its plain letter followed by any combining marks (its accents,
    decomposed), apostrophes and hyphens any of their kinds, anything else itself."""
    out: list[str] = []
    folded = False
    text = fold_latin(name)
    for i, ch in enumerate(text):
        if folded and ch == MARK:  # an accent of the Latin letter before: allowed by it
            continue
        folded = ch.isascii() and ch.isalpha()
        if folded:
            out.append(f"{ch}{MARK}*")
        elif ch in _APOSTROPHES:
            out.append(f"[{_APOSTROPHES}]")
        elif ch in _HYPHENS:
            out.append(f"[{_HYPHENS}]")
        elif ch.isspace():
            # "Jo Ann" written with two spaces, a line break or a no-break space; between letters of a script
            # written without spaces, with or without one ("佐藤 さくら" is "佐藤さくら" in running text:
            # round-2 break-it, s48)
            prev, nxt = text[:i].rstrip()[-1:], text[i:].lstrip()[:1]
            space = r"\s*" if _UNSPACED.match(prev) and _UNSPACED.match(nxt) else r"\s+"
            if not (out and out[-1] in (r"\s*", r"\s+")):
                out.append(space)
        else:
            pair = i > 0 and _UNSPACED.match(text[i - 1]) and _UNSPACED.match(ch)
            out.append((r"\s*" if pair else "") + re.escape(ch))  # "王芳" written "王 芳" too
    return "".join(out)


def name_regex(name: str) -> str:
    """The regex source (no flags, no word boundaries) matching, in :func:`fold_latin` text,
    ``name`` however it is written: any apostrophe for any apostrophe ("O'Neil" matches
    "O’Neil"), any hyphen for a hyphen, its accents composed or decomposed (Unicode NFC and
    NFD), and its Latin letters with or without accents ("Jose" matches "José" and "JOSÉ",
    "Zoë" matches "Zoe", "Lukasz" matches "Łukasz": a model may drop the accents of the name it
    was given, or add some; break-it finding: "Jesús" stayed in the text the LMRA read for a
    user named Jesus). Letters of other scripts match as written, in either normal form
    ("Андрей" does not match "Андреи"). Used by :func:`scrub_name` and the filter's
    self-introduction check (methodology §1 steps 5 and 6; docs/names.md)."""
    forms = list(dict.fromkeys(_spelling(unicodedata.normalize(n, name)) for n in ("NFC", "NFD")))
    return forms[0] if len(forms) == 1 else "(?:" + "|".join(forms) + ")"


def replace_matches(pattern: re.Pattern, text: str, placeholder: str, folded: str | None = None) -> str:
    """Replace every match of ``pattern`` in :func:`fold_latin` of ``text`` by ``placeholder``, in
    ``text`` itself (methodology §1 step 5).

    Args:
        pattern: a compiled :func:`name_regex` pattern (as :func:`_name_pattern` makes it: whole
            word, case-insensitive), matched against ``fold_latin(text)``.
        text: the response; placeholder: what replaces each match (literally).
        folded: the text matched, of ``text``'s length (default :func:`fold_latin` of it;
            :func:`scrub_name` gives :func:`_matchable`'s).

    Returns:
        ``text`` with each match's span replaced (the spans are ``text``'s own: folding keeps
        the length).
    """
    folded = fold_latin(text) if folded is None else folded
    if folded is text:
        return pattern.sub(lambda _: placeholder, text)  # (literally, as below: no \g<0> expansion)
    out, last = [], 0
    for m in pattern.finditer(folded):
        out += [text[last:m.start()], placeholder]
        last = m.end()
    return "".join(out) + text[last:]


#: letters of scripts written without spaces between words — Thai, Lao, Myanmar, Hangul (its particles and
#: honorifics attached: "민수님"), Khmer, kana, Han — where a name has no word boundary to find (break-it
#: finding, s48: "你好王芳，…", "さくらさん" were never scrubbed, and the LMRA read the user's name)
_UNSPACED_RANGES = ("\u3005-\u3007\u0e00-\u0eff\u1000-\u109f\u1100-\u11ff\u1780-\u17ff\u3040-\u30ff"
                    "\u3130-\u318f\u31f0-\u31ff\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af\uf900-\ufaff"
                    "\uff66-\uff9f\U00020000-\U0003ffff")
_UNSPACED = re.compile(f"[{_UNSPACED_RANGES}]")
#: what may not follow a name for it to be a whole word, in :func:`fold_latin` text: a letter or
#: digit, or a combining mark (the name would end inside its last letter's accents), nor
#: underscores and then a letter or digit (an identifier: "Ann_Arbor", "grace_period"). Markdown
#: emphasis may: "_Zoë_", "__Zoë__" (break-it findings, both ways). A letter of an unspaced script
#: next to a name of a spaced one is not a letter of its word (:func:`_matchable`)
NAME_END = rf"(?![^\W_]|[{_MARK_RANGES}])(?!_+[^\W_])"
#: … and what may not come before it: a letter or digit, or one with one or two underscores
#: after it ("my_ann.txt")
NAME_START = r"(?<![^\W_])(?<![^\W_]_)(?<![^\W_]__)"
#: a name in a script written without spaces is matched wherever it is written, but not inside a syllable:
#: not after a Thai or Lao vowel written before its consonant, nor before a vowel sign or tone mark
#: (Thai, Lao, Myanmar, Khmer) that belongs to its last letter (round-3 break-it, s48: "สม" in "สมัคร")
_UNSPACED_START = "(?<![\u0e40-\u0e44\u0ec0-\u0ec4])"
_UNSPACED_END = "(?![\u0e30-\u0e3a\u0e45\u0e47-\u0e4e\u0eb0-\u0ebc\u0ec8-\u0ecd\u102b-\u103e\u17b6-\u17d3])"


def _unspaced_name(name: str) -> bool:
    """True when ``name`` begins or ends with a letter of a script written without spaces."""
    return bool(_UNSPACED.match(name[:1]) or _UNSPACED.match(name[-1:]))


def _matchable(text: str, name: str) -> str:
    """The text :func:`_name_pattern` of ``name`` is matched against: :func:`fold_latin` of
    ``text`` (the same length, so that a match's span is ``text``'s), and for a name of a spaced
    script its letters of unspaced scripts as spaces — a Latin name inside Chinese or Japanese
    text is a word of its own ("亲爱的Anna，你好", "Annaさん": round-3 break-it, s48). (A regex
    class of those letters in the name patterns took 17 ms to compile a name.)"""
    folded = fold_latin(text)
    return folded if _unspaced_name(name) else _spaced(folded)


def _spaced(text: str) -> str:
    """``text`` with each letter of an unspaced script (:data:`_UNSPACED`) as a space (the same
    length: a match's span is ``text``'s); ``text`` itself when it holds none."""
    return _UNSPACED.sub(" ", text) if _UNSPACED.search(text) else text


def unspaced_end(name: str) -> bool:
    """True when ``name`` ends with a letter of a script written without spaces (:data:`_UNSPACED`):
    no word end follows it in running text ("王芳です", "민수님")."""
    return bool(_UNSPACED.match(name[-1:]))


@lru_cache(maxsize=4096)
def _name_pattern(name: str) -> re.Pattern:
    """The whole-word, case-insensitive pattern of ``name`` (compiled once per name). A name that
    begins (ends) with a letter of a script written without spaces (:data:`_UNSPACED`: Han, kana,
    Hangul, Thai …) has no word boundary before (after) it: it is matched wherever it is written."""
    start = _UNSPACED_START if _UNSPACED.match(name[:1]) else NAME_START
    end = _UNSPACED_END if _UNSPACED.match(name[-1:]) else NAME_END
    return re.compile(rf"{start}{name_regex(name)}{end}", re.IGNORECASE)


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
