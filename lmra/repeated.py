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
"Hello Maria, we are down" differs only in the name), stripped; failed calls (no text) are not
counted. Responses labelled refusals are counted, and how many of the repeated text's were is
said: an LMRA calls a maintenance page or a gateway's "temporarily unavailable" a refusal, and
left out they hid it (break-it round 2, s40: a fallback on 2 of 3 prompts ended complete, exit 0).

The run's rule (:func:`repeated_response_warning`): more than ``max_repeated_share`` of the counted
responses (default 0.5; 1 turns the rule off) are one text, given to :data:`MIN_PROMPTS` different
prompts or more — then the run is ``partial`` (exit status 1) with a warning quoting the text (a
redacted run: its length).
"""

from __future__ import annotations

import hashlib

#: counters of the frequent-items summary (memory: this many texts' digests, a preview and prompt ids)
SLOTS = 32
#: different prompts the repeated text must answer before it says anything about the endpoint
MIN_PROMPTS = 3
#: characters of the repeated text quoted in the warning
PREVIEW_CHARS = 60
#: the start of the warning (a merge recomputes it from the merged responses — a redacted merge takes its
#: shards' findings — not a shard's warning)
REPEATED_RESPONSES_PREFIX = "the target gave one answer to most prompts"


class RepeatedResponses:
    """The most frequent target response text, counted in one pass (Misra–Gries summary).

    Attributes:
        n: responses counted (answered: every call that did not fail, refusals included).
    """

    def __init__(self) -> None:
        self.n = 0
        # digest → [count, preview, first prompt ids (up to MIN_PROMPTS), how many were labelled refusals]
        self._slots: dict[bytes, list] = {}

    def add(self, text: str | None, prompt_id: str, *, failed: bool = False, refused: bool | None = None) -> None:
        """Count one response's scrubbed ``text`` to ``prompt_id`` (``refused``: its refusal label,
        counted with the text); a ``failed`` call is not counted."""
        if failed:
            return
        text = (text or "").strip()
        self.n += 1
        key = hashlib.blake2b(text.encode("utf-8", "surrogatepass"), digest_size=16).digest()
        slot = self._slots.get(key)
        if slot is not None:
            slot[0] += 1
            slot[3] += bool(refused)
            if len(slot[2]) < MIN_PROMPTS and prompt_id not in slot[2]:
                slot[2].append(prompt_id)
        elif len(self._slots) < SLOTS:
            self._slots[key] = [1, text[:PREVIEW_CHARS + 1], [prompt_id], int(bool(refused))]
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
        count, preview, prompts, _ = max(self._slots.values(), key=lambda s: s[0])
        return count, preview, len(prompts)

    def refused_of_top(self) -> int:
        """Of the most frequent text's counted responses, those labelled refusals (0 when none)."""
        return max(self._slots.values(), key=lambda s: s[0])[3] if self._slots else 0


def repeated_response(counter: RepeatedResponses, max_share: float, *, redacted: bool = False) -> dict | None:
    """``{"count", "n", "share", "preview", "chars", "refused"}`` (summary.json ``repeated_response``) when one
    text is more than ``max_share`` (in (0, 1]; 1 turns the rule off) of the counted responses and
    answers :data:`MIN_PROMPTS` different prompts or more — the run is then partial; None
    otherwise. ``count`` is a lower bound of the text's responses (:class:`RepeatedResponses`).
    ``redacted``: the run keeps no response text (``redact = true``), so ``preview`` is None and
    ``chars`` says only how long the text is (break-it round 2, s40: the warning quoted it into
    summary.json, the console and the cron mail)."""
    top = counter.top()
    if top is None or max_share >= 1:
        return None
    count, preview, prompts = top
    if prompts < MIN_PROMPTS or count <= max_share * counter.n:  # (more than: one group refused alike is 50%)
        return None
    return {"count": count, "n": counter.n, "share": count / counter.n, "preview": None if redacted else preview,
            "chars": len(preview) if len(preview) <= PREVIEW_CHARS else None, "refused": counter.refused_of_top()}


def repeated_phrase(d: dict) -> str:
    """``"400 of the 400 target responses were one text, 'C'"``: the run-status line's cause (a
    redacted run's: ``"… were one text (1 character; redacted)"``)."""
    preview = d.get("preview")
    if preview is None and d.get("chars") != 0:  # redacted: its length only (None: longer than the preview)
        n = d.get("chars")
        quoted = f"(redacted; {n} character{'s' * (n != 1)})" if isinstance(n, int) else "(redacted)"
        return f"{d.get('count')} of the {d.get('n')} target responses were one text {quoted}"
    quoted = "an empty answer" if not preview else repr(
        preview if len(preview) <= PREVIEW_CHARS else preview[:PREVIEW_CHARS] + "…")
    return f"{d.get('count')} of the {d.get('n')} target responses were one text, {quoted}"


def repeated_response_warning(d: dict, max_share: float, *, refusal_labels: bool = True) -> str:
    """The run's warning for :func:`repeated_response`'s ``d``; ``refusal_labels``: the run labels
    refusals (else a canned refusal counts too, and the warning says so)."""
    refused = d.get("refused") or 0
    counted = ("failed calls not counted" + (f"; the refusal labels call {refused} of them refusals — a canned refusal, "
                                             "or a fallback page the LMRA took for one" if refused else "")
               if refusal_labels else "failed calls not counted; refusal labels are off")
    return (f"{REPEATED_RESPONSES_PREFIX}: {repeated_phrase(d)} ({d['share']:.0%}; {counted}), given to different "
            "prompts. An endpoint that does not answer the prompts (a base_url "
            "pointing at another server, a maintenance page, a gateway's fallback)? Identical answers rate as no "
            "stereotype, so the run is partial and its numbers are no evidence about the chatbot "
            f"(max_repeated_share = {max_share:g}; responses.jsonl has the answers)")
