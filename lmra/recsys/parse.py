"""Turn a chatbot's free-text answer into a ranked list of items (methodology §6, last bullet).

:func:`parse_list` finds the list inside an answer — numbered (``1.``, ``1)``, ``**1.**``),
bulleted (``-``, ``*``, ``•``), one item per line, a numbered list run together on one line,
or a comma-separated list after a colon — skipping preamble and closing sentences, and
detects refusals; chat-template tokens in the answer (``<</SYS>>``, ``[/INST]``, ``</s>`` …:
:data:`lmra.identity.TEMPLATE_TOKENS`, the audit's detector) are removed before the list is read
and recorded (:attr:`ParsedList.template_tokens`), so a line of them is never an item.
:func:`extract_title` takes the title out of an item written as
``"Title" by Artist``, ``**Title** – Artist``, ``Title (1999)`` and similar, and
:func:`normalize_title` reduces a title to a comparison key (Unicode NFKC, case, Latin accents, quotes,
parentheticals such as years, trailing articles as in MovieLens' "Matrix, The",
whitespace). :class:`CatalogMatcher` optionally maps keys to a catalog with RapidFuzz and a
score threshold.

:func:`parse_fairllm_code` instead reproduces the FaiRLLM authors' released parsing
(``clean`` + ``simplified_list`` in their ``process.ipynb``) for exact replication.
"""

from __future__ import annotations

import html
import json
import re
import unicodedata
from collections.abc import Collection, Hashable, Sequence
from dataclasses import dataclass, field
from typing import Literal

ListFormat = Literal["json", "numbered", "bulleted", "inline-numbered", "table", "lines", "comma", "none"]

_NUMBERED = re.compile(
    r"^\s*(?:[*_]{2}\s*)?(?:#\s*)?\(?(\d{1,3})\s*[.)\]:](?!\d)\s*(?:[*_]{2}(?=\S))?\s*(.*?)\s*$")
_BULLET = re.compile(r"^\s*(?:[-*+•·●▪‣◦–—])\s+(.*?)\s*$")
_INLINE_NUM = re.compile(r"(?:(?<=\s)|^)(\d{1,3})[.)]\s+")
_HEADING = re.compile(r"^\s*(#{1,6}\s|\*\*[^*]+:\*\*\s*$|[^\w\"“'‘*]*$)")
#: an HTML tag of the kinds chat models put around titles (``<em>``, ``</b>``, ``<br/>``,
#: ``<a href=…>``); other text between ``<`` and ``>`` (``x<y and z>w``, ``<Title>``) is kept
_HTML_TAG = re.compile(r"</?(?:a|abbr|b|big|blockquote|br|cite|code|del|div|em|font|h[1-6]|i|ins|li|mark|ol|p|q|s|"
                       r"small|span|strike|strong|sub|sup|tt|u|ul)(?:\s[^<>]*)?/?>", re.IGNORECASE)
_MD_LINK = re.compile(r"\[([^\]]+)\]\([^)]*\)")
_BOLD = re.compile(r"^\s*(\*\*|__)(.+?)\1")
_QUOTED = re.compile(r'^\s*(?:"([^"]+)"|“([^”]+)”|«([^»]+)»|„([^“”]+)[“”]|\'([^\']+)\'(?=\s|$|[,.:;\-–—])|‘([^’]+)’)')
_RATING_SUFFIX = re.compile(r"\s*[:\-–—,]?\s*[(\[]?\d+(?:\.\d+)?\s*/\s*(?:5|10|100)[)\]]?\s*$")
_YEAR_THEN_TEXT = re.compile(r"^(.+?\(\d{4}\))\s*[:\-–—]\s*\S.*$")
_DASH_SEP = re.compile(r"\s+[-–—−]{1,2}\s+|\s+[–—]|[–—]\s+")
_BY_SEP = re.compile(r"\s+by\s+", re.IGNORECASE)
_PAREN = re.compile(r"\([^()]*\)|\[[^\[\]]*\]")
_TRAILING_OPEN_PAREN = re.compile(r"\s*[(\[][^)\]]*$")
_TRAILING_ARTICLE = re.compile(
    r"^(?P<rest>.+?),\s*(?P<art>the|a|an|les|la|le|l'|el|il|der|die|das|los|las|det|den)$", re.IGNORECASE)
_QUOTE_CHARS = dict.fromkeys(map(ord, "\"'`´“”„‟‘’‚‛«»‹›"), None)
_EDGE_PUNCT = " \t.,;:!?*_~#-–—•·|/\\"
_SPACES = re.compile(r"\s+")
_REFUSAL = re.compile(
    r"\b(i'?m sorry|i am sorry|i apologi[sz]e|i can(?:not|'t| not)\b|i'?m (?:not able|unable)|i am (?:not able|unable)"
    r"|as an ai\b|as a language model|i (?:do not|don't) (?:have|feel comfortable)|i won'?t be able"
    r"|unable to (?:provide|fulfil|fulfill|comply|recommend)|not appropriate|i must decline)", re.IGNORECASE)
_MAX_LINE_WORDS = 16
#: a quoted title inside a running sentence (``I recommend "Hello", "Halo" and "Pride and Prejudice"``)
_QUOTED_SPAN = re.compile(r'"([^"]+)"|“([^”]+)”|«([^»]+)»')
#: what may stand between the quoted titles of a comma list: separators, "and"/"or", a full stop
_BETWEEN_QUOTED = re.compile(r"^(?:[\s,;.!?]|\band\b|\bor\b)*$", re.IGNORECASE)
#: the conjunction before a comma list's last item (``A, B and C``): split at the last one
_LAST_AND = re.compile(r"^(?:(?P<head>.*\S)\s+)?(?:and|or)\s+(?P<last>\S.*)$", re.IGNORECASE)
#: a sign-off after the last item of a comma list, on its line ("…, and Skyfall. Enjoy!")
_GLUED_SIGN_OFF = re.compile(r"^(?P<last>.*?\S)(?<!\bMr)(?<!\bMrs)(?<!\bMs)(?<!\bDr)(?<!\bSt)[.!]\s+"
                             r"(?:enjoy|have fun|hope\b|happy\b|let me know|cheers|thanks|thank you|have a\b"
                             r"|good luck|i hope\b)[^.!]*[.!]$", re.IGNORECASE)
#: the serial comma's conjunction (``A, B, and C``): the last part starts with it
_SERIAL_AND = re.compile(r"^(?:and|or)\s+(?P<last>\S.*)$", re.IGNORECASE)
_ALNUM = re.compile(r"[^\W\d_]|\d", re.UNICODE)
_BARE_NUMBER = re.compile(r"^\s*#?\d{1,3}\s*[.)\]:]?\s*$")


def _roman(s: str) -> int:
    """The value of a Roman numeral of I, V and X (``iv`` → 4); 0 when it is not one."""
    values = {"i": 1, "v": 5, "x": 10}
    total, prev = 0, 0
    for ch in reversed(s.casefold()):
        v = values.get(ch, 0)
        if not v:
            return 0
        total, prev = (total - v, prev) if v < prev else (total + v, v)
    return total


#: rank markers other than ``1.`` / ``1)`` / ``1:`` (break-it finding, s39: ``1 - Hello`` kept "1" as the
#: title, so every list compared equal; ``#1 Hello``, ``1 Hello``, ``Song 1: Hello``, ``I. Hello`` and
#: ``a) Hello`` kept the rank in the title). Each is (pattern giving the rank and the item, the rank's
#: value); it makes a list only when two lines or more carry it with ranks 1, 2, 3 … in order
#: (:func:`_ranked_lines`), since a title may start with a number ("7 Rings", "99 Luftballons").
_LOOSE_RANKS = (
    (re.compile(r"^\s*(?:[*_]{2})?#?(\d{1,3})(?:[*_]{2})?\s*[-–—]\s+(\S.*?)\s*$"), int),  # 1 - X, 1- X, **1** - X
    (re.compile(r"^\s*(?:[*_]{2})?#(\d{1,3})(?:[*_]{2})?\s+(\S.*?)\s*$"), int),  # #1 X, **#1** X
    (re.compile(r"^\s*(?:song|track|movie|film|book|title|show|series|album|pick|no\.?|number|item|rank)\s*#?"
                r"(\d{1,3})\s*[.):\-–—]?\s+(\S.*?)\s*$", re.IGNORECASE), int),  # Song 1: X, No. 1 X
    (re.compile(r"^\s*\(?([ivx]{1,5})[.)]\s+(\S.*?)\s*$", re.IGNORECASE), _roman),  # I. X, ii) X
    (re.compile(r"^\s*\(?([a-z])[.)]\s+(\S.*?)\s*$", re.IGNORECASE), lambda c: ord(c.casefold()) - ord("a") + 1),
    (re.compile(r"^\s*(\d{1,3})\s+(\S.*?)\s*$"), int),  # 1 X: the most ambiguous, tried last
)


def _ranked_lines(lines: list[str]) -> tuple[list[str], int] | None:
    """The items of a list whose lines carry a rank marker of :data:`_LOOSE_RANKS`, and the index of
    its first line — the first marker that two lines or more carry with ranks 1, 2, 3 … in order, no
    rank skipped or repeated (a marked line ending in ':' is a heading, not an item) — provided the
    marked lines are the list: no short line that reads as a title follows the last of them (break-it
    round 2, s39: "1 Thing / 2 Become 1 / No Scrubs / Waterfalls" lost its last two titles), and for
    the bare ``1 X`` marker none stands between two of them either (lines between marked ones are
    otherwise sub-details, as under ``1.`` items). None when no marker does."""
    def loose(ln: str) -> bool:  # a line that may follow or interleave the items: prose, a sub-detail, a sign-off
        st = ln.strip()
        return (not _ALNUM.search(st) or ln[:1].isspace() or bool(_BULLET.match(ln)) or _sentence_like(st)
                or bool(_SIGN_OFF.match(st)) or bool(_HEADING.match(st)))

    for n_pattern, (pattern, value) in enumerate(_LOOSE_RANKS):
        found = [(i, value(m.group(1)), m.group(2)) for i, ln in enumerate(lines)  # (not a table row: "1 | X"; not
                 if (m := pattern.match(ln)) and not m.group(2).rstrip().endswith(":")  # a sub-detail indented
                 and not m.group(2).startswith("|") and not ln.startswith(("  ", "\t"))]  # under an item)
        if len(found) < 2 or [r for _, r, _ in found] != list(range(1, len(found) + 1)):
            continue
        first, last = found[0][0], found[-1][0]
        if any(_REFUSAL.search(ln) for ln in lines[:first]):  # reasons given for a refusal, not a list
            continue
        marked = {i for i, _, _ in found}
        bare = n_pattern == len(_LOOSE_RANKS) - 1  # "1 X": a title may begin with a number
        if any(not loose(ln) for ln in lines[last + 1:]):
            continue
        if bare and any(i not in marked and lines[i].strip() and not loose(lines[i]) for i in range(first, last)):
            continue
        return [t for _, _, t in found], first
    return None


def _mixed_ranks(lines: list[str]) -> list[str] | None:
    """The items of a list whose lines switch between ``1. X`` and ``1 - X`` markers part way
    (``1 - A / 2 - B / 3. C``: known gap of s39, read as the one item "C"), when the ranks of the
    two markers together run 1, 2, 3 … in line order, three or more, each marker on one line or
    more; indented lines (sub-details) are skipped. None otherwise (one marker only: the other
    layouts read it)."""
    found, kinds = [], set()
    for ln in lines:
        if ln.startswith(("  ", "\t")):
            continue
        if m := _NUMBERED.match(ln):
            found.append((int(m.group(1)), m.group(2)))
            kinds.add("dot")
        elif (m := _LOOSE_RANKS[0][0].match(ln)) and not m.group(2).rstrip().endswith(":"):
            found.append((int(m.group(1)), m.group(2)))
            kinds.add("dash")
    if len(kinds) < 2 or len(found) < 3 or [r for r, _ in found] != list(range(1, len(found) + 1)):
        return None
    return [t for _, t in found]


_TABLE_RULE = re.compile(r"^:?-+:?$")  # (GFM: hyphens, a colon at either end)
#: a table header naming the column of titles: "Title", "Song", "Song Title", "Movie Name" — short, and
#: not an artist's ("Artist Name", "Band Name": break-it round 2, s39, read the artists)
_TABLE_TITLE = re.compile(r"^(?:song|track|title|movie|film|book|show|series|tv show|recommendation|pick)s?"
                          r"(?: (?:title|name))?$", re.IGNORECASE)
#: any header word of a table of recommendations: a first row of them, with no rule under it, is the header
_TABLE_HEADER_WORD = re.compile(r"\b(?:song|track|title|movie|film|book|show|series|name|artist|singer|band|author|"
                                r"director|album|rank|position|year|genre|why|rating|#)\b|^#$", re.IGNORECASE)
#: a cell that holds a rank or a year, not a title: "1", "#1", "1.", "**1**", "1st", "1994"
_RANK_CELL = re.compile(r"^[*_]*#?\d{1,4}(?:st|nd|rd|th)?\.?[*_]*$", re.IGNORECASE)


def _cells(line: str) -> list[str]:
    return [c.strip() for c in line.strip().strip("|").split("|")]


def _table_items(lines: list[str]) -> list[str] | None:
    """The titles of a markdown table (``| 1 | Hello | Adele |``, break-it finding, s39: each row was
    one item, rank and artist included, and the header ``Title`` an item too): the column its header
    names as titles (:data:`_TABLE_TITLE`, else a header ``Name``), else the first column whose cells
    are not ranks or years (:data:`_RANK_CELL`). Header rows — the row above each rule, or, with no
    rule, a first row of header words — and rules are no items; a table without outer pipes counts
    when it has a rule. None when the answer has no table of two data rows or more."""
    rule_at = [i for i, ln in enumerate(lines) if "|" in ln and "-" in ln
               and all(_TABLE_RULE.match(c.replace(" ", "")) for c in _cells(ln))]
    pipes = {lines[i].strip().strip("|").count("|") for i in rule_at}
    rows = [(i, _cells(ln)) for i, ln in enumerate(lines)
            if (ln.strip().startswith("|") and ln.strip().endswith("|") and len(ln.strip()) > 2)
            or ("|" in ln and ln.strip().strip("|").count("|") in pipes)]
    if len(rows) < 2:
        return None
    rules = set(rule_at)
    headers = {i - 1 for i in rules}
    if not rules and all(_TABLE_HEADER_WORD.search(c) and not any(ch.isdigit() for ch in c) for c in rows[0][1] if c):
        headers = {rows[0][0]}
    header = next((cells for i, cells in rows if i in headers), [])
    data = [cells for i, cells in rows if i not in rules and i not in headers]
    if len(data) < 2:
        return None
    width = max(len(r) for r in data)
    col = next((i for i, h in enumerate(header) if _TABLE_TITLE.match(h.strip(" *_"))), None)
    if col is None:
        col = next((i for i, h in enumerate(header) if h.strip(" *_").casefold() == "name"), None)
    if col is None:
        col = next((i for i in range(width) if not all(_RANK_CELL.match(r[i] if i < len(r) else "") for r in data)),
                   None)
    if col is None:
        return None
    return [r[col] for r in data if col < len(r) and _ALNUM.search(r[col])]


@dataclass
class ParsedList:
    """A list recovered from free text.

    Attributes:
        items: the titles, in answer order, as written (markup and artists removed, not
            normalised); empty when nothing was found.
        keys: :func:`normalize_title` of each kept item (same length as ``items``).
        raw_items: each kept item's full text before title extraction (for catalog matching
            when the extracted title does not match, e.g. a title containing " - ").
        format: which layout was recognised (``numbered``, ``bulleted``, ``inline-numbered``,
            ``lines``, ``comma``) or ``none``.
        refusal: True when no list was found and the answer reads as a refusal.
        n_dropped: candidate items dropped because nothing was left after normalisation.
        n_duplicates: kept items whose key repeats an earlier key.
        template_tokens: the chat-template tokens found in the answer
            (:func:`lmra.identity.template_tokens_in`), removed before the list was read: a
            model served with another model's chat template (docs/providers.md).
    """

    items: list[str] = field(default_factory=list)
    keys: list[str] = field(default_factory=list)
    raw_items: list[str] = field(default_factory=list)
    format: ListFormat = "none"
    refusal: bool = False
    n_dropped: int = 0
    n_duplicates: int = 0
    template_tokens: list[str] = field(default_factory=list)

    @property
    def parse_failed(self) -> bool:
        """No list and no refusal: the answer could not be read as a list."""
        return not self.items and not self.refusal


def normalize_title(title: str) -> str:
    """Reduce a title to a comparison key.

    Steps: Unicode NFKC; invisible format characters (Unicode category Cf: zero-width space,
    soft hyphen, byte-order mark …) removed; HTML entities decoded and then the usual inline HTML tags removed
    (``&amp;``, ``<em>Title</em>``, ``&lt;b&gt;``); markdown emphasis and links removed; parentheticals and bracketed
    parts removed (``(1999)``, ``(feat. X)``, ``[Live]``, an unclosed trailing ``(…``); a
    trailing article moved to the front (``Matrix, The`` → ``the matrix``, as in MovieLens
    titles); ``&`` → ``and``; case folded; every quote character and apostrophe removed
    (``Don’t`` → ``dont``); the accents of Latin letters removed (``Beyoncé`` → ``beyonce``; marks of
    other scripts kept: :func:`_fold_latin_accents`); punctuation stripped at both ends; whitespace collapsed; a key
    that is only ``the`` becomes ``""`` (a fragment such as ``The (1994)``).

    Args:
        title: one title as written.

    Returns:
        The key (possibly ``""`` when nothing meaningful is left).
    """
    s = unicodedata.normalize("NFKC", title)
    if not s.isascii():  # invisible format characters (zero-width space, soft hyphen, BOM …): "Sky\u200bfall" = "Skyfall"
        s = "".join(ch for ch in s if unicodedata.category(ch) != "Cf")
    s = _HTML_TAG.sub(" ", html.unescape(s)) if "<" in s or "&" in s else s  # &amp;, <em>Title</em>
    s = _MD_LINK.sub(r"\1", s)
    s = s.replace("**", " ").replace("__", " ")
    prev = None
    while prev != s:
        prev, s = s, _PAREN.sub(" ", s)
    s = _TRAILING_OPEN_PAREN.sub("", s)
    s = _SPACES.sub(" ", s).strip(_EDGE_PUNCT)
    m = _TRAILING_ARTICLE.match(s)
    if m:
        s = f"{m.group('art')} {m.group('rest')}"
    s = s.replace("&", " and ").casefold().translate(_QUOTE_CHARS)
    if not s.isascii():  # "Beyoncé" = "Beyonce": a model writes the item with or without its accents
        s = _fold_latin_accents(s)
    s = _SPACES.sub(" ", s).strip(_EDGE_PUNCT)
    # "the" alone is a fragment, not a title (e.g. "The (1994)" from a garbled answer)
    return "" if s == "the" else s


def _fold_latin_accents(s: str) -> str:
    """``s`` without the accents of its Latin letters (``é`` → ``e``, ``ñ`` → ``n``): the
    combining marks of the canonical decomposition that follow a Latin letter are dropped, then the
    rest recomposed. Letters of their own (``æ``, ``ø``, ``ß``) and the marks of other scripts
    (Greek tonos, a Devanagari virama, a kana's dakuten) are kept: there they are part of the word."""
    out: list[str] = []
    latin = False
    for ch in unicodedata.normalize("NFD", s):
        if unicodedata.combining(ch):
            if latin:
                continue
        else:
            latin = ch.isascii() or unicodedata.name(ch, "").startswith("LATIN ")
        out.append(ch)
    return unicodedata.normalize("NFC", "".join(out))


def _is_artist(text: str, artists: Collection[str]) -> bool:
    return bool(artists) and normalize_title(text) in artists


def extract_title(item: str, artists: Collection[str] = ()) -> str:
    """The title part of one list item.

    Rules, in order: a markdown link keeps its text; a bold or quoted span at the start of the
    item is the title (``**Title** - Artist``, ``"Title" by Artist``, ``“Title” (2001)``);
    a trailing rating (``: 4/5``) is dropped, and so is text after a year in parentheses
    (``Heat (1995): a heist film``); otherwise the text before a spaced dash
    (``Title – Artist``), unless the part before the
    dash is a known artist and the part after is not (``Artist - Title``); finally a trailing
    ``by X`` is cut when X is a known artist (so that ``Stand by Me`` survives).

    Args:
        item: one item's text without its number or bullet.
        artists: normalised names (see :func:`normalize_title`) of artists that may follow
            or precede a title; empty = never cut ``by …``.

    Returns:
        The title as written (markup and surrounding quotes removed), stripped.
    """
    s = _MD_LINK.sub(r"\1", item).strip()
    m = _BOLD.match(s)
    if m:
        inner = m.group(2).strip()
        q = _QUOTED.match(inner)
        return (next(g for g in q.groups() if g) if q else inner).strip(_EDGE_PUNCT + " ")
    q = _QUOTED.match(s)
    if q:
        return next(g for g in q.groups() if g).strip()
    s = _RATING_SUFFIX.sub("", s)  # "Heat (1995): 4/5"
    y = _YEAR_THEN_TEXT.match(s)  # "Heat (1995): a heist thriller" / "Heat (1995) - Michael Mann"
    if y:
        s = y.group(1)
    parts = _DASH_SEP.split(s, maxsplit=1)
    if len(parts) == 2 and parts[0].strip() and parts[1].strip():
        left, right = parts[0].strip(), parts[1].strip()
        s = right if (_is_artist(left, artists) and not _is_artist(right, artists)) else left
        s = _QUOTED.match(s) and next(g for g in _QUOTED.match(s).groups() if g) or s
    if artists:
        by = list(_BY_SEP.finditer(s))
        if by and _is_artist(s[by[-1].end():], artists):
            s = s[: by[-1].start()]
    s = s.replace("**", "").replace("__", "")
    return s.strip().strip("\"“”'‘’«»").strip(_EDGE_PUNCT + " ")


#: words a title leaves in lower case ("Gone with the Wind"): not counted by :func:`_title_cased`
_MINOR_WORDS = frozenset("a an the and or nor but for of to in on at by with from as into per via vs".split())
_WORD = re.compile(r"[^\W\d_][\w'’-]*")


def _title_cased(line: str) -> bool:
    """Written as a title: of its words other than :data:`_MINOR_WORDS`, at least two, and at
    least three in four of them, start with a capital letter ("I Can't Make You Love Me", "Who
    Framed Roger Rabbit?") — a sentence starts most of its words in lower case ("I hope you enjoy
    these!"). Scripts without case are never title-cased."""
    words = [w for w in _WORD.findall(line) if w.casefold() not in _MINOR_WORDS]
    return len(words) >= 2 and sum(w[0].isupper() for w in words) >= 0.75 * len(words)


#: a question put to the user ("Have You Heard These Before?", "What Genres Do You Like?")
_TO_THE_USER = re.compile(r"\byou(?:r|'d|'re)?\b", re.IGNORECASE)
#: a fenced JSON block (```json … ```)
_JSON_FENCE = re.compile(r"```json\s*\n(.*?)```", re.IGNORECASE | re.DOTALL)
#: what only an assistant's own sentence says, never a title
_ASSISTANT_VOICE = re.compile(r"\bas an ai\b|\bas a language model\b|\bai (?:language )?model\b", re.IGNORECASE)


def _title_like(part: str) -> bool:
    """A comma list's part that reads as a title, its parentheticals (a year) aside:
    :func:`_title_cased`, or one capitalised word."""
    part = _PAREN.sub(" ", part).strip(_EDGE_PUNCT)
    words = part.split()
    return _title_cased(part) or (len(words) == 1 and part[:1].isupper())


#: an assistant's sign-off ("Enjoy!", "Have fun!", "Hope this helps.", "Happy listening!"): with a
#: closing "!" or "." and among the answer's last lines, never a title (fresh-user finding: "Enjoy!"
#: after a list was an item)
_SIGN_OFF = re.compile(r"^(?:enjoy|have fun|hope (?:this|that|these|it|you)\b|happy (?:listening|watching|reading)"
                       r"|let me know|cheers|thanks|thank you|have a (?:great|good|nice)|good luck)\b.*[.!]$",
                       re.IGNORECASE)


def _sentence_like(line: str) -> bool:
    """Ends with ':'; or ends with '.', '!' or '?' after at least four words; or is a refusal."""
    return line.endswith(":") or (len(line.split()) >= 4 and line[-1] in ".!?") or bool(_REFUSAL.search(line))


def _sentences(body: list[str]) -> list[bool]:
    """Per line of ``body``: a preamble/closing sentence rather than an item (:func:`_sentence_like`)
    — unless it is written as a title in a list's context (break-it finding: "I Can't Make You Love
    Me" was taken for a refusal and "Who Framed Roger Rabbit?" for a closing sentence, on lines of
    titles that a numbered list kept). A title here: :func:`_title_cased`, not ending in '.' or '!'
    ("These Are by James Cameron, …", "I Hope You Enjoy These Songs!"), not the answer's last line
    ("Is There Anything Else I Can Help With?"), not in an assistant's voice ("… As An AI I Can't
    …") — break-it round 2 —, not a question to the user ("Have You Heard These Before?"); in a
    list's context: after a preamble ending in ':', or between two
    lines that are items by themselves — a Title-Case refusal or question on its own is still a
    sentence (round 3: "I'm Sorry\nBut I Can't Help With That")."""
    like = [_sentence_like(ln) for ln in body]
    # an assistant's sign-off ("Enjoy!", "Thanks!") among the answer's closing lines — not a title such as
    # "Thank You." or "Good Luck, Babe!" in the middle of the list (break-it round 4)
    for i in range(len(body) - 1, -1, -1):
        if not (like[i] or _SIGN_OFF.match(body[i])):
            break
        like[i] = True
    out, preamble = [], False
    for i, ln in enumerate(body):
        title = (like[i] and not ln.endswith(":") and _title_cased(ln) and ln[-1] not in ".!"
                 and i < len(body) - 1 and not _ASSISTANT_VOICE.search(ln)
                 and not (ln.endswith("?") and _TO_THE_USER.search(ln))
                 and (preamble or (i > 0 and not like[i - 1] and not like[i + 1])))
        out.append(like[i] and not title)
        preamble = preamble or ln.endswith(":")
    return out


def _json_items(text: str) -> list[str] | None:
    """The titles of a JSON array in the answer — strings, or objects with a ``title`` (else
    ``name``) string — from its first ``[`` to its last ``]``; None when there is none (break-it
    finding: ``["Hello", "Skyfall", "Halo"]`` was read as a comma list that lost its first title)."""
    start, end = text.find("["), text.rfind("]")
    if start < 0 or end <= start:
        return None
    try:
        value = json.loads(text[start:end + 1])
    except ValueError:
        return None
    if not isinstance(value, list) or not value:
        return None
    if all(isinstance(v, dict) for v in value):
        value = [v.get("title", v.get("name")) for v in value]
    return [v for v in value] if all(isinstance(v, str) for v in value) else None


def _comma_items(tail: str) -> tuple[list[str], bool]:
    """The items of a comma list (the text after a colon): its quoted titles when every title is
    quoted (``"Hello", "Halo" and "Pride and Prejudice"``); else the parts between commas and
    semicolons, the last one cut at its conjunction (``A, B and C``, ``A, B, and C``). A title
    holding "and" is kept whole (break-it finding: "Rock and Roll, Pride and Prejudice, Hello, Halo"
    gave six items) — except as the last item of a list without quotes or a serial comma
    (``A, B, Pride and Prejudice`` reads as … ``Pride``, ``Prejudice``: English writes a list's
    end so). Returns the items and whether they were quoted (two or more: a list, however few
    its commas)."""
    spans = list(_QUOTED_SPAN.finditer(tail))
    quoted = [next(g for g in m.groups() if g) for m in spans]
    # titles in quotes: not a question ("Do you prefer "rock", "pop" or "jazz"?"), no quoted word in
    # lower case ("… based on "gender" or "race"" — break-it round 2: a refusal read as a list)
    if (len(spans) >= 2 and _BETWEEN_QUOTED.match(_QUOTED_SPAN.sub(" ", tail[spans[0].start():]))
            and not tail.rstrip().endswith("?") and not any(q.strip()[:1].islower() for q in quoted)):
        # (a lead-in before the first title — "I recommend" — is no item)
        return quoted, True
    parts = [p.strip() for p in re.split(r"[,;]", tail) if p.strip()]
    if parts:
        glued = _GLUED_SIGN_OFF.match(parts[-1])  # "…, and Skyfall. Enjoy!": the sign-off is no part of a title
        if glued:
            parts[-1] = glued.group("last")
        serial = _SERIAL_AND.match(parts[-1])
        if serial:  # "…, and C": the conjunction goes, the title stays whole ("…, and Pride and Prejudice")
            parts[-1] = serial.group("last")
        elif m := _LAST_AND.match(parts[-1]):  # "…, B and C"
            parts[-1:] = [x for x in (m.group("head"), m.group("last")) if x]
    return parts, False


#: rank markers written with other characters (break-it finding, s47: keycap emoji "1️⃣ Hello", full-width
#: "１．Hello" and "1.) Hello" kept the marker in every title, so identical lists compared as disjoint, SNSR
#: 1.000): a keycap digit (the digit, an optional variation selector U+FE0F, U+20E3) or 🔟; full-width
#: digits and their "．" "）" "：" (what NFKC makes ASCII); "1.)"
_KEYCAP_MARK = re.compile(r"^(\s*)((?:\d\ufe0f?\u20e3){1,3}|\U0001F51F)\ufe0f?[.):]?\s*")
_WIDE_MARK = re.compile(r"^(\s*)([０-９]{1,3}[．.）)：:])\s*")
_DOT_PAREN_MARK = re.compile(r"^(\s*\d{1,3})\.\)\s*")


def _plain_marker(line: str) -> str:
    """``line`` with a rank marker of :data:`_KEYCAP_MARK` / :data:`_WIDE_MARK` /
    :data:`_DOT_PAREN_MARK` at its start written as ``N. `` (the rest of the line as it is)."""
    if m := _KEYCAP_MARK.match(line):
        digits = "10" if m.group(2) == "\U0001F51F" else re.sub("[\ufe0f\u20e3]", "", m.group(2))
        return f"{m.group(1)}{digits}. {line[m.end():]}"
    if m := _WIDE_MARK.match(line):
        return f"{m.group(1)}{unicodedata.normalize('NFKC', m.group(2))} {line[m.end():]}"
    if m := _DOT_PAREN_MARK.match(line):
        return f"{m.group(1)}. {line[m.end():]}"
    return line


def _candidate_lines(text: str) -> tuple[ListFormat, list[str]]:
    fenced = _JSON_FENCE.search(text)  # an array the answer marks as JSON is its list, notes after it aside
    if fenced and (json_items := _json_items(fenced.group(1))):
        return "json", json_items
    lines = [_plain_marker(ln) for ln in text.replace("\r\n", "\n").replace("\r", "\n").split("\n")]
    mixed = _mixed_ranks(lines)
    if mixed:
        return "numbered", mixed
    slots = [m.group(2) for ln in lines if (m := _NUMBERED.match(ln))]
    numbered = [t for t in slots if _ALNUM.search(t)]
    if len(numbered) >= 2:
        return "numbered", slots  # empty slots are kept so that they are counted as dropped
    for ln in lines:  # "1. A 2. B 3. C" run together on one line
        marks = list(_INLINE_NUM.finditer(ln))
        if len(marks) >= 2:
            chunks = [ln[a.end(): b.start()] for a, b in zip(marks, marks[1:])] + [ln[marks[-1].end():]]
            chunks = [c.strip() for c in chunks if _ALNUM.search(c)]
            if chunks:
                return "inline-numbered", chunks
    bulleted = [(i, m.group(1)) for i, ln in enumerate(lines) if (m := _BULLET.match(ln)) and _ALNUM.search(m.group(1))]
    ranked = _ranked_lines(lines)
    # lines ranked another way ("1 - X", "a) X") are the list when they come first and are no fewer than the
    # bullets (then bullets under them are details); else the bullets are, and the ranked lines notes after
    # them (break-it round 2, s39: "Tips: 1 - play loud / 2 - enjoy" under a bulleted list replaced it)
    if ranked and (not bulleted or (len(ranked[0]) >= len(bulleted) and ranked[1] < bulleted[0][0])):
        json_items = _json_items(text)  # (a JSON array of titles before them is the list: they are notes on it)
        if not (json_items and text[:text.find("[")].count("\n") < ranked[1]):
            return "numbered", ranked[0]
    if bulleted:  # bullets that carry ranks ("- 1 - Hello"): the ranks are no part of the titles
        items = [b for _, b in bulleted]
        inner = _ranked_lines(items)
        return "bulleted", inner[0] if inner and len(inner[0]) == len(items) else items
    if numbered:
        return "numbered", numbered
    # a JSON array of titles, once no numbered or bulleted list is there (break-it round 2: a list
    # followed by 'Genres covered: ["pop", "soul"]' was read as that array)
    json_items = _json_items(text)
    if json_items:
        return "json", json_items
    table = _table_items(lines)  # (after the layouts above: a summary table under a list is no list)
    if table:
        return "table", table
    body = [ln.strip() for ln in lines if _ALNUM.search(ln) and not _BARE_NUMBER.match(ln)]
    sentence = _sentences(body)
    at = [i for i, ln in enumerate(body) if len(ln.split()) <= _MAX_LINE_WORDS
          and not sentence[i] and not _HEADING.match(ln)]
    short = [body[i] for i in at]
    around = [body[i] for i in range(len(body)) if i not in set(at)]
    sign_offs = sum(bool(_SIGN_OFF.match(x)) for x in around)  # ("Enjoy!" besides a closing sentence: round 4)
    if len(short) >= 2 and (len(short) >= len(body) - 2 - sign_offs or (
            len(short) >= 3 and at[-1] - at[0] + 1 == len(at) and not any(x.endswith("?") for x in short)
            and not any(_REFUSAL.search(x) or _ASSISTANT_VOICE.search(x) for x in around))):
        # one item per line, allowing a preamble and a closing sentence around them — or more
        # sentences before and after one unbroken block of three items or more ("I Hope You Enjoy
        # These Songs!\nLet Me Know If You Want More."), when none of them refuses (break-it round 3:
        # "Best regards,\nYour Assistant" under a refusal was read as a list)
        return "lines", short
    for ln in body:
        tail = ln.split(":", 1)[1] if ":" in ln else ln
        parts, quoted = _comma_items(tail)
        if _ASSISTANT_VOICE.search(tail) or (_REFUSAL.search(tail) and not all(_title_like(p) for p in parts)):
            # "I'm sorry, but I can't …, as …": a refusal, not a list (break-it round 2); the lead-in
            # before a colon may say so and still give the list ("I'm sorry to hear that! Some comfort
            # films: Up (2009), …" — round 3)
            continue
        # (the commas of the list itself: "Sure, here is my answer: I like Hank Williams, Jr.." has one —
        # bad-input break-it, s43: the lead-in's comma made it a list of two)
        if quoted or (tail.count(",") >= 2 and all(len(p.split()) <= 8 for p in parts)):
            return "comma", [p.rstrip(".!") for p in parts]
    return "none", []


def provider_refused(finish_reason, items: Sequence) -> bool:
    """True when the provider itself stopped an answer as a refusal (``finish_reason``
    ``refusal`` — Anthropic's stop reason — or ``content_filter``) and it holds no list
    (``items`` empty): a refusal whatever its text (break-it finding: an empty one was counted
    as a parse failure, "not a refusal"). One rule for a run's records and a re-parse of them
    (:mod:`lmra.recsys.records`, :func:`lmra.recsys.lists.read_lists`)."""
    from lmra.providers.base import FILTER_FINISH_REASONS

    return isinstance(finish_reason, str) and finish_reason in FILTER_FINISH_REASONS and not items


def without_cut_tail(text: str, finish_reason) -> tuple[str, bool]:
    """An answer cut at ``max_tokens`` (``finish_reason`` in
    :data:`~lmra.providers.base.TRUNCATED_FINISH_REASONS`) without its last, unterminated line — or,
    when that line is a comma list, its text after the last comma: that item may be half-written
    ("3. Ha" for "Halo"; break-it finding, s47: scored as a title). One rule for a run's records
    and a re-parse of them.

    Returns:
        (the text to parse, whether a tail was left out); the text unchanged when the answer was
        not cut, ends with a line break, or is one line without a comma (all of it the tail).
        A last line that is a comma list (not a numbered or bulleted item) loses its text after
        the last comma only. The caller parses the whole answer when it is a refusal
        (:func:`parse_cut`).
    """
    from lmra.providers.base import TRUNCATED_FINISH_REASONS

    if not (isinstance(finish_reason, str) and finish_reason in TRUNCATED_FINISH_REASONS) or not isinstance(text, str):
        return text, False
    body = text.rstrip(" \t")
    if not body or body.endswith(("\n", "\r")):
        return text, False
    start = max(body.rfind("\n"), body.rfind("\r")) + 1  # the last line
    last = body[start:]
    if "," in last and not (_NUMBERED.match(last) or _BULLET.match(last)):
        # a comma list (on its own line, after a preamble too: round-2 break-it, s47, lost every item): its text
        # after the last comma
        cut = start + last.rfind(",")
    else:
        cut = start - 1
    if cut < 0 or not _ALNUM.search(body[cut + 1:]):
        return text, False
    return body[:cut + 1], True


def parse_cut(text: str, finish_reason, *, artists: Collection[str] = ()) -> tuple["ParsedList", bool]:
    """:func:`parse_list` of an answer without its possibly half-written tail
    (:func:`without_cut_tail`) — unless the whole answer reads as a refusal (cut at its last
    comma, "Sorry, I can't recommend …" became "Sorry,", no refusal: round-2 break-it, s47). An
    answer whose only item was its tail then holds no list (counted as unparseable, not scored
    on a fragment). One rule for a run's records and a re-parse of them.

    Returns:
        (the parsed list, whether the tail was left out).
    """
    cut, dropped = without_cut_tail(text, finish_reason)
    whole = parse_list(text, artists=artists)
    if not dropped or whole.refusal:
        return whole, False
    return parse_list(cut, artists=artists), True


#: a preamble that declines the request: "I can't recommend …", "I won't provide …", "I'm unable to help …"
_DECLINE = re.compile(r"\b(?:can(?:no|')?t|can not|won'?t|will not|unable to|not able to|must decline"
                      r"|(?:do not|don't) feel comfortable)\b(?:\W+\w+){0,3}?\W+(?:recommend|provide|help|suggest|make|"
                      r"create|give|generate|offer|share|fulfil+|comply|assist|do (?:that|this))\b", re.IGNORECASE)
#: "I can't help but recommend …", "can't wait to share": eagerness, not a refusal
_EAGER = re.compile(r"\bcan(?:no|')?t (?:help but|wait to|resist|stop)\b", re.IGNORECASE)
#: a preamble that gives a list after all ("I can't recommend by age, but here are popular songs:"), not why not
_OFFERS = re.compile(r"\b(?:here(?:'s| are| is)|instead)\b(?!\s+(?:why|the reasons?|what)\b)", re.IGNORECASE)


def _reasons_for_refusal(text: str, cands: list[str]) -> bool:
    """The candidate items are the reasons of a refusal, not a list (break-it round 2, s39: "I'm sorry,
    but I can't recommend songs based on someone's race. Here is why:\n1 - It stereotypes people\n2 -
    Music taste is personal" was scored as a list of two titles, no refusal counted): the text before
    the first of them declines the request (:data:`_DECLINE`), and most of them read as sentences —
    three words or more, not written as titles (:func:`_title_cased`)."""
    if not cands:
        return False
    at = text.find(cands[0].strip())
    pre = text[:at]
    if at <= 0 or not _DECLINE.search(_EAGER.sub(" ", pre)) or _OFFERS.search(pre):
        return False
    prose = sum(len(c.split()) >= 3 and not _title_cased(c) for c in cands)
    return prose * 2 > len(cands)


def parse_list(text: str, *, artists: Collection[str] = (), max_items: int | None = None) -> ParsedList:
    """Parse a recommendation answer into a ranked list of titles.

    Recognised layouts: numbered lines (``1. X``, ``1) X``, ``**1.** X``, ``#1: X``; and ``1 - X``,
    ``#1 X``, ``1 X``, ``Song 1: X``, ``I. X``, ``a) X`` when their ranks run 1, 2, 3 …; ``1. X`` and
    ``1 - X`` mixed in one list when their ranks run 1, 2, 3 … together); a markdown
    table (its column of titles);
    bulleted lines (``-``, ``*``, ``•`` …); a numbered list run together on one line;
    otherwise short lines one item each (a preamble ending with ``:`` and up to two other
    sentences are skipped); otherwise a comma-separated list. When numbered lines exist,
    bullets (often sub-details) are ignored. Markdown headings are skipped. Chat-template
    tokens are removed first (:func:`lmra.identity.without_template_tokens`) and listed in
    :attr:`ParsedList.template_tokens`: a line of them (``<</SYS>>``) is no item, and
    ``Let It Be</s>`` is read as ``Let It Be``.

    Args:
        text: the model's answer.
        artists: normalised artist names used by :func:`extract_title` to cut ``by Artist``.
        max_items: keep at most this many items (None = all).

    Returns:
        A :class:`ParsedList`. A refusal ("I'm sorry, I can't …") with no list gives
        ``items == []`` and ``refusal=True``; other answers without a list give
        ``format == "none"`` (:attr:`ParsedList.parse_failed`).
    """
    from lmra.identity import without_template_tokens  # (imported when parsing: it loads the providers)

    text, tokens = without_template_tokens(text or "")
    fmt, cands = _candidate_lines(text)
    if fmt in ("numbered", "bulleted", "inline-numbered", "lines") and _reasons_for_refusal(text, cands):
        fmt, cands = "none", []  # (then a refusal, below)
    out = ParsedList(format=fmt, template_tokens=tokens)
    seen: set[str] = set()
    for c in cands:
        title = extract_title(c, artists)
        key = normalize_title(title)
        if not key:
            out.n_dropped += 1
            continue
        if key in seen:
            out.n_duplicates += 1
        seen.add(key)
        out.items.append(title)
        out.keys.append(key)
        out.raw_items.append(c.strip())
        if max_items is not None and len(out.items) >= max_items:
            break
    if not out.items:
        out.format = "none"
        out.refusal = bool(_REFUSAL.search(text))
    return out


def parse_fairllm_code(text: str) -> list[str]:
    """Parse an answer the way the FaiRLLM authors' released notebook does (for replication).

    Reproduces ``clean`` followed by ``simplified_list`` of ``process.ipynb``
    (jizhi-zhang/FaiRLLM): lower-case; delete apostrophes and newlines; split on
    ``<digits>. `` and drop the text before the first number; cut each piece at its first
    ``-``; if a piece contains a double quote keep the first quoted span (or the piece
    without quotes); strip spaces; then delete parentheticals ``( … )`` and *every* space.
    Faithful quirks: hyphenated titles are cut at the hyphen, lists that are not numbered
    ``1. `` give ``[]``, and a title ending in a digit swallows the next number.

    Args:
        text: the model's answer.

    Returns:
        The keys, in order, duplicates kept (possibly ``[]``).
    """
    s = re.sub(r"['\n]", "", (text or "").lower())
    # (?<!\d): try a match only at the start of a digit run (same splits, linear time on long digit runs)
    pieces = re.split(r"(?<!\d)\d+\. ", s)[1:]
    out = []
    for p in pieces:
        t = p.find("-")
        if t > -1:
            p = p[:t]
        if '"' in p:
            fix = re.findall(r'"([^"]*)"', p)
            p = fix[0].strip(" ") if fix else p.replace('"', "").strip(" ")
        else:
            p = p.strip(" ")
        p = re.sub(r"\([^)]*\)", "", p)
        out.append(re.sub(r"[ ]", "", p))
    return out


@dataclass(frozen=True)
class Match:
    """A catalog match: the catalog entry's id and title and the RapidFuzz score (0–100)."""

    id: Hashable
    title: str
    score: float


class CatalogMatcher:
    """Map titles to catalog entries: exact normalised match first, then RapidFuzz.

    Args:
        titles: catalog titles as written (e.g. MovieLens ``Toy Story (1995)``).
        ids: one id per title (default: the titles themselves).
        threshold: minimum RapidFuzz score in [0, 100] for a fuzzy match (default 90).
        scorer: ``ratio`` (default), ``token_sort_ratio``, ``token_set_ratio``,
            ``partial_ratio`` or ``WRatio`` from ``rapidfuzz.fuzz``.

    Raises:
        ValueError: threshold out of range, unknown scorer, or ids/titles of different lengths.
    """

    SCORERS = ("ratio", "token_sort_ratio", "token_set_ratio", "partial_ratio", "WRatio")

    def __init__(self, titles: Sequence[str], ids: Sequence[Hashable] | None = None, *, threshold: float = 90.0,
                 scorer: str = "ratio"):
        from rapidfuzz import fuzz

        if not 0 <= threshold <= 100:
            raise ValueError(f"threshold must be in [0, 100], got {threshold}")
        if scorer not in self.SCORERS:
            raise ValueError(f"unknown scorer '{scorer}' (choose one of {', '.join(self.SCORERS)})")
        ids = list(titles) if ids is None else list(ids)
        if len(ids) != len(titles):
            raise ValueError(f"{len(ids)} ids for {len(titles)} titles")
        self.threshold = float(threshold)
        self.scorer_name = scorer
        self._scorer = getattr(fuzz, scorer)
        self._keys: list[str] = []
        self._entries: list[tuple[Hashable, str]] = []
        self._exact: dict[str, int] = {}
        for i, t in zip(ids, titles):
            key = normalize_title(t)
            if not key:
                continue
            self._exact.setdefault(key, len(self._keys))
            self._keys.append(key)
            self._entries.append((i, t))

    def __len__(self) -> int:
        return len(self._keys)

    def match(self, title: str) -> Match | None:
        """Best catalog entry for ``title`` (score 100 for an exact normalised match), or None
        when no entry reaches the threshold."""
        from rapidfuzz import process

        key = normalize_title(title)
        if not key:
            return None
        if key in self._exact:
            i = self._exact[key]
            return Match(self._entries[i][0], self._entries[i][1], 100.0)
        hit = process.extractOne(key, self._keys, scorer=self._scorer, score_cutoff=self.threshold)
        if hit is None:
            return None
        _, score, i = hit
        return Match(self._entries[i][0], self._entries[i][1], float(score))

    def match_parsed(self, parsed: ParsedList) -> list[Match | None]:
        """Match every item of a :class:`ParsedList`: its extracted title, and — unless that
        matches exactly (score 100) — the item's full text without a trailing rating, keeping
        the better score (the extracted title's on a tie). This rescues titles that contain
        " - " (``Star Wars: Episode IV - A New Hope (1977)``), also when the part before the dash
        is close enough to another catalogue title to match it (break-it finding, s47).

        Returns:
            One :class:`Match` or None per item, in order.
        """
        raws = parsed.raw_items or parsed.items
        out: list[Match | None] = []
        for t, r in zip(parsed.items, raws):
            first = self.match(t)
            whole = _RATING_SUFFIX.sub("", r)
            second = self.match(whole) if whole != t and (first is None or first.score < 100) else None
            out.append(second if second is not None and (first is None or second.score > first.score) else first)
        return out
