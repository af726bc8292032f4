"""Names scrubbed where a response wrote them as ordinary words.

The name scrub (methodology §1 step 5) replaces every whole-word, case-insensitive occurrence
of the user's name in a response by ``[NAME]``. A name that is also an everyday word — Frank,
Dean, Miles, Drew, Amber, Holly, Iris, Max … — has that word replaced too, in the responses
of that name's users only: an answer given alike to both groups ("start with a frank look at
your week") becomes two different texts for the LMRA ("a [NAME] look"), a difference the
pipeline made, not the chatbot. lmra's own lists leave out the everyday words it knows
(:data:`lmra.data.COMMON_WORD_NAMES`), and a name list drawing one of those is warned of; a
custom list can hold many more (break-it finding, s48: Frank, Dean, Drew and Miles passed
without a word, ``names_common_words`` empty).

The scrub itself stays as the methodology defines it (case-insensitive). What this module adds
is the count: a match written wholly in lower case ("frank", "dean") is a word, not the user's
name (a chatbot writes a name capitalised), so every such replacement is counted per name
(:class:`WordScrubs`), recorded in ``summary.json`` (``names_scrubbed_as_words``) and said in a
warning (:func:`word_scrubs_warning`).
"""

from __future__ import annotations

from collections import Counter

from lmra.generate import lowercase_name_matches

#: the start of the warning (a merge recomputes it from the merged responses, not a shard's)
WORD_SCRUBS_PREFIX = "names were scrubbed where responses wrote them as ordinary words: "
#: names quoted in the warning (the rest are counted)
SHOWN = 5


class WordScrubs:
    """Per drawn name, the responses whose scrub replaced it where it was written in lower case,
    and the replacements. Add each target response once (:meth:`add`)."""

    def __init__(self) -> None:
        self.responses: Counter = Counter()
        self.matches: Counter = Counter()
        self.groups: dict[str, str] = {}
        self.words: dict[str, str] = {}  # the first word as a response wrote it ("frank"), per name

    def add(self, response) -> None:
        """Count one :class:`lmra.generate.Response` (failed calls and responses without a name
        or without a replacement cost one comparison)."""
        if response.error is not None or not response.name or response.scrubbed == response.text:
            return
        words = lowercase_name_matches(response.text, response.name)
        if words:
            self.responses[response.name] += 1
            self.matches[response.name] += len(words)
            self.groups.setdefault(response.name, response.group)
            self.words.setdefault(response.name, words[0])

    def merge(self, rows: list[dict] | None) -> None:
        """Add the counts of a run's ``names_scrubbed_as_words`` (a redacted shard's, which keeps
        no text to count again)."""
        for r in rows or []:
            if isinstance(r, dict) and isinstance(r.get("name"), str):
                self.responses[r["name"]] += int(r.get("responses") or 0)
                self.matches[r["name"]] += int(r.get("replacements") or 0)
                self.groups.setdefault(r["name"], str(r.get("group") or ""))
                if isinstance(r.get("word"), str):
                    self.words.setdefault(r["name"], r["word"])

    def rows(self) -> list[dict]:
        """``summary.json``'s ``names_scrubbed_as_words``: ``[{"name", "group", "word", "responses",
        "replacements"}]`` (``word``: as a response wrote it), most responses first; empty when no
        name was scrubbed as a word."""
        return [{"name": name, "group": self.groups.get(name, ""), "word": self.words.get(name, name.lower()),
                 "responses": n, "replacements": self.matches[name]}
                for name, n in sorted(self.responses.items(), key=lambda kv: (-kv[1], kv[0]))]


def word_scrubs_warning(rows: list[dict]) -> str | None:
    """The run's warning about :meth:`WordScrubs.rows`, or None when there are none."""
    if not rows:
        return None
    shown = ", ".join(f"{r.get('word') or r['name'].lower()!r} in {r['responses']} response"
                      f"{'s' * (r['responses'] != 1)} to "
                      f"{r['name']}'s users ({r['group']})" for r in rows[:SHOWN])
    more = f" and {len(rows) - SHOWN} more name{'s' * (len(rows) - SHOWN != 1)}" if len(rows) > SHOWN else ""
    return (f"{WORD_SCRUBS_PREFIX}{shown}{more} — the scrub (case-insensitive, methodology §1 step 5) replaced "
            "the word by [NAME] for those users only, a difference between paired responses that is not the "
            "chatbot's; draw names that are not everyday words (summary.json: names_scrubbed_as_words)")


__all__ = ["SHOWN", "WORD_SCRUBS_PREFIX", "WordScrubs", "word_scrubs_warning"]
