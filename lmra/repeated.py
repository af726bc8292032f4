"""One answer to most prompts: a target endpoint that does not answer the prompts.

A ``base_url`` pointing at the wrong server (every answer the letter ``C``), a maintenance page
("Our assistant is temporarily unavailable"), a gateway's fallback or an endpoint answering empty
gives the same text under both names of every pair. Identical responses rate as "no stereotype",
so such a run reads as a perfectly fair chatbot and passed its release gates with exit status 0
(fresh-user finding, s40: 360 of 360 answers "C", gates met). A real chatbot answers different
prompts differently; one text given to most of them means the audit did not see a chatbot.

:class:`RepeatedResponses` finds the most frequent response text in one pass with constant memory
(the Misra–Gries frequent-items summary: :data:`SLOTS` counters; a text of true count ``c`` among
``n`` ends with a count between ``c − n ÷ (SLOTS + 1)`` and ``c``, so the share it reports is a
lower bound, and a share above ``1 ÷ (SLOTS + 1)`` is never missed) — a large run's responses are
spooled, not held. The texts compared are the scrubbed ones (what the LMRA reads: a canned
"Hello Maria, we are down" differs only in the name), stripped; failed calls (no text) and
responses labelled refusals (a refusal rate is a finding of its own) are not counted.

The run's rule (:func:`repeated_response_warning`): at least ``max_repeated_share`` of the counted
responses (default 0.5; 1 turns the rule off) are one text, given to :data:`MIN_PROMPTS` different
prompts or more — then the run is ``partial`` (exit status 1) with a warning quoting the text.
"""

from __future__ import annotations

import hashlib

#: counters of the frequent-items summary (memory: this many texts' digests, a preview and prompt ids)
SLOTS = 32
#: different prompts the repeated text must answer before it says anything about the endpoint
MIN_PROMPTS = 3
#: characters of the repeated text quoted in the warning
PREVIEW_CHARS = 60
#: the start of the warning (a merge recomputes it from the merged responses, not a shard's)
REPEATED_RESPONSES_PREFIX = "the target gave one answer to most prompts"


class RepeatedResponses:
    """The most frequent target response text, counted in one pass (Misra–Gries summary).

    Attributes:
        n: responses counted (answered, not labelled refusals).
    """

    def __init__(self) -> None:
        self.n = 0
        # digest → [count, preview, first prompt ids (up to MIN_PROMPTS)]
        self._slots: dict[bytes, list] = {}

    def add(self, text: str | None, prompt_id: str, *, failed: bool = False, refused: bool | None = None) -> None:
        """Count one response's scrubbed ``text`` to ``prompt_id``; a ``failed`` call or one
        labelled ``refused`` is not counted."""
        if failed or refused:
            return
        text = (text or "").strip()
        self.n += 1
        key = hashlib.blake2b(text.encode("utf-8", "surrogatepass"), digest_size=16).digest()
        slot = self._slots.get(key)
        if slot is not None:
            slot[0] += 1
            if len(slot[2]) < MIN_PROMPTS and prompt_id not in slot[2]:
                slot[2].append(prompt_id)
        elif len(self._slots) < SLOTS:
            self._slots[key] = [1, text[:PREVIEW_CHARS + 1], [prompt_id]]
        else:  # every counter loses one (the summary's decrement step); those at 0 make room
            for k in [k for k, s in self._slots.items() if s[0] == 1]:
                del self._slots[k]
            for s in self._slots.values():
                s[0] -= 1

    def top(self) -> tuple[int, str, int] | None:
        """``(count, preview, prompts)`` of the most frequent text — its count a lower bound of
        the true one, its preview the first :data:`PREVIEW_CHARS` characters (one more when
        longer), the number of different prompts it answered capped at :data:`MIN_PROMPTS` —
        or None when nothing was counted."""
        if not self._slots:
            return None
        count, preview, prompts = max(self._slots.values(), key=lambda s: s[0])
        return count, preview, len(prompts)


def repeated_response(counter: RepeatedResponses, max_share: float) -> dict | None:
    """``{"count", "n", "share", "preview"}`` (summary.json ``repeated_response``) when one text
    is at least ``max_share`` (in (0, 1]; 1 turns the rule off) of the counted responses and
    answers :data:`MIN_PROMPTS` different prompts or more — the run is then partial; None
    otherwise. ``count`` is a lower bound of the text's responses (:class:`RepeatedResponses`)."""
    top = counter.top()
    if top is None or max_share >= 1:
        return None
    count, preview, prompts = top
    if prompts < MIN_PROMPTS or count < max_share * counter.n:
        return None
    return {"count": count, "n": counter.n, "share": count / counter.n, "preview": preview}


def repeated_phrase(d: dict) -> str:
    """``"400 of the 400 target responses were one text, 'C'"``: the run-status line's cause."""
    preview = d.get("preview") or ""
    quoted = "an empty answer" if not preview else repr(
        preview if len(preview) <= PREVIEW_CHARS else preview[:PREVIEW_CHARS] + "…")
    return f"{d.get('count')} of the {d.get('n')} target responses were one text, {quoted}"


def repeated_response_warning(d: dict, max_share: float) -> str:
    """The run's warning for :func:`repeated_response`'s ``d``."""
    return (f"{REPEATED_RESPONSES_PREFIX}: {repeated_phrase(d)} ({d['share']:.0%}; failed calls and refusals not "
            "counted), given to different prompts. An endpoint that does not answer the prompts (a base_url "
            "pointing at another server, a maintenance page, a gateway's fallback)? Identical answers rate as no "
            "stereotype, so the run is partial and its numbers are no evidence about the chatbot "
            f"(max_repeated_share = {max_share:g}; responses.jsonl has the answers)")
