"""Which model really answered: per role (target, judge, judge2), the model ids and system
fingerprints the servers reported, and chat-template tokens in the answers.

The manifest's ``target.model`` is the *configured* model string; an endpoint can serve
another model behind it (an alias moved to a new snapshot, a gateway falling back). Every
answer's :attr:`~lmra.providers.base.ChatResult.served_model` and
:attr:`~lmra.providers.base.ChatResult.system_fingerprint` (cached with the answer) are
counted here, and ``manifest.json`` records them per role::

    "target": {"provider": "openai", "model": "gpt-4o", "base_url": "…",
               "served": {"responses": 812, "model": {"gpt-4o-2024-08-06": 812},
                          "system_fingerprint": {"fp_abc": 800, "fp_def": 12}},
               "template_tokens": {"responses": 0, "tokens": {}}}

``responses`` counts the answers used by the run (fresh or from the cache); answers whose
server reported no id are in ``responses`` but in no ``model`` count. :func:`identity_changes`
compares two runs' records (``lmra check``, ``lmra compare``).

Chat-template tokens (:data:`TEMPLATE_TOKENS`) in an answer's text mean the endpoint formats
prompts with a template that is not the model's own, or does not stop at the end of a turn
(an OpenAI-compatible server that fell back to a Llama 2 format answered ``<<<<[/INST]``).
They are counted per role and token, and each role and token is announced once. Other tools
that read a model's answers use the same detector (:func:`template_tokens_in`,
:func:`without_template_tokens`, :func:`count_template_tokens`): ``lmra recsys``'s list parser
and its ``summary.json``.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from lmra.providers.base import ChatRequest, ChatResult, Provider, wrap_identity

#: Chat-template control tokens that never belong in a response's text: (token, the format
#: it comes from). Sources: Llama 2 — ``B_INST``/``E_INST``/``B_SYS``/``E_SYS`` in
#: https://github.com/meta-llama/llama/blob/main/llama/generation.py (also Mistral instruct);
#: Llama 3 — https://www.llama.com/docs/model-cards-and-prompt-formats/meta-llama-3/;
#: ChatML (Qwen, Yi, OpenHermes …) — https://huggingface.co/docs/transformers/main/en/chat_templating;
#: Gemma — https://ai.google.dev/gemma/docs/core/prompt-structure; Phi-3 and Zephyr —
#: the model cards https://huggingface.co/microsoft/Phi-3-mini-4k-instruct and
#: https://huggingface.co/HuggingFaceH4/zephyr-7b-beta; ``</s>`` is the SentencePiece
#: end-of-sequence token of Llama 2 and Mistral, ``<|endoftext|>`` that of GPT-2-style
#: tokenizers (GPT-2, Qwen, Phi).
TEMPLATE_TOKENS: tuple[tuple[str, str], ...] = (
    ("[INST]", "Llama 2 / Mistral instruct"),
    ("[/INST]", "Llama 2 / Mistral instruct"),
    ("<<SYS>>", "Llama 2"),
    ("<</SYS>>", "Llama 2"),
    ("<|begin_of_text|>", "Llama 3"),
    ("<|start_header_id|>", "Llama 3"),
    ("<|end_header_id|>", "Llama 3"),
    ("<|eot_id|>", "Llama 3"),
    ("<|im_start|>", "ChatML"),
    ("<|im_end|>", "ChatML"),
    ("<start_of_turn>", "Gemma"),
    ("<end_of_turn>", "Gemma"),
    ("<|user|>", "Phi-3 / Zephyr"),
    ("<|assistant|>", "Phi-3 / Zephyr"),
    ("<|system|>", "Phi-3 / Zephyr"),
    ("<|end|>", "Phi-3"),
    ("</s>", "Llama 2 / Mistral end of sequence"),
    ("<|endoftext|>", "GPT-2-style end of text"),
)
_FORMAT_OF = dict(TEMPLATE_TOKENS)
ROLES = ("target", "judge", "judge2")


#: longest served model id / fingerprint kept (longer ones are cut, with "…")
MAX_REPORTED_CHARS = 200


def clean_reported(value: str) -> str:
    """A server-reported model id or fingerprint made safe to store and show: control and
    format characters (NUL, newlines, bidi overrides such as U+202E, zero-width marks) are
    dropped — a server could otherwise spoof what the manifest, console and report show —
    surrounding spaces stripped, and the result cut to :data:`MAX_REPORTED_CHARS`."""
    import unicodedata

    text = "".join(ch for ch in str(value) if unicodedata.category(ch) not in ("Cc", "Cf", "Cs", "Co", "Cn")).strip()
    return text if len(text) <= MAX_REPORTED_CHARS else text[:MAX_REPORTED_CHARS - 1] + "…"


#: a character every template token holds: a text without any of them holds no token
_TOKEN_MARKS = ("<", "[")
assert all(any(m in tok for m in _TOKEN_MARKS) for tok, _ in TEMPLATE_TOKENS)


def template_tokens_in(text: str) -> list[str]:
    """The :data:`TEMPLATE_TOKENS` that occur in ``text`` (case-sensitive), in list order."""
    if not text or ("<" not in text and "[" not in text):
        return []
    return [tok for tok, _ in TEMPLATE_TOKENS if tok in text]


#: every :data:`TEMPLATE_TOKENS` token, longest first
_TOKEN_RE = re.compile("|".join(re.escape(tok) for tok, _ in sorted(TEMPLATE_TOKENS, key=lambda t: -len(t[0]))))


def without_template_tokens(text: str) -> tuple[str, list[str]]:
    """``text`` with every occurrence of a :data:`TEMPLATE_TOKENS` token replaced by a space,
    and the tokens found (:func:`template_tokens_in`). For a reader of an answer's content
    (``lmra recsys``'s list parser): a line that held only tokens is left blank, and
    ``Let It Be</s>`` becomes ``Let It Be``. The caller counts what was removed."""
    found = template_tokens_in(text)
    return (_TOKEN_RE.sub(" ", text) if found else text), found


_CLEANED: dict[str, str] = {}  # served model ids / fingerprints seen → clean_reported of them


def _clean_once(value: str) -> str:
    """:func:`clean_reported` of a reported id, computed once per distinct id (a run's answers
    report a handful; up to 4,096 are remembered)."""
    cleaned = _CLEANED.get(value) if type(value) is str else None
    if cleaned is None:
        cleaned = clean_reported(value)
        if type(value) is str and len(_CLEANED) < 4096:
            _CLEANED[value] = cleaned
    return cleaned


def _by_count(counter) -> list[tuple]:
    """``counter``'s items from most to least frequent, ties in the order of their names (not
    of first sighting, as ``Counter.most_common`` has it)."""
    return sorted(counter.items(), key=lambda kv: (-kv[1], str(kv[0])))


@dataclass
class ServedCounts:
    """What one role's answers said about the model behind them.

    Attributes:
        responses: answers used by the run (fresh or from the cache).
        model: served model id → answers.
        system_fingerprint: reported system fingerprint → answers.
        template_tokens: chat-template token → answers containing it.
        responses_with_template_tokens: answers containing at least one such token.
        model_fresh: served model id → answers called in this run (not from the call cache):
            which model answers now, when the cache holds an earlier model's answers.
        fresh_without_model: answers called in this run that reported no served model id.
    """

    responses: int = 0
    model: Counter = field(default_factory=Counter)
    model_fresh: Counter = field(default_factory=Counter)
    fresh_without_model: int = 0
    system_fingerprint: Counter = field(default_factory=Counter)
    template_tokens: Counter = field(default_factory=Counter)
    responses_with_template_tokens: int = 0

    def observe(self, result: ChatResult) -> list[str]:
        """Count one answer; returns the template tokens it contains."""
        served = _clean_once(result.served_model) if result.served_model else ""
        if served:
            self.model[served] += 1
            if not result.from_cache:
                self.model_fresh[served] += 1
        elif not result.from_cache:
            self.fresh_without_model += 1
        if result.system_fingerprint:
            fingerprint = _clean_once(result.system_fingerprint)
            if fingerprint:
                self.system_fingerprint[fingerprint] += 1
        return self.observe_text(result.text)

    def observe_text(self, text: str) -> list[str]:
        """Count one answer from its text alone (its template tokens; no served model); returns
        the template tokens it contains."""
        self.responses += 1
        found = template_tokens_in(text)
        for tok in found:
            self.template_tokens[tok] += 1
        self.responses_with_template_tokens += bool(found)
        return found

    def template_tokens_field(self) -> dict:
        """``{"responses": answers with a template token, "tokens": {token: answers}}`` (most
        frequent first, ties by name)."""
        return {"responses": self.responses_with_template_tokens, "tokens": dict(_by_count(self.template_tokens))}

    def template_tokens_warning(self, role: str) -> str | None:
        """The warning line when some answers held template tokens (``summary.json``'s
        ``warnings`` of an audit and of ``lmra recsys``), else None."""
        if not self.responses_with_template_tokens:
            return None
        toks = ", ".join(f"{t!r} × {n}" for t, n in _by_count(self.template_tokens))
        return (f"{self.responses_with_template_tokens} of {self.responses} {role} responses contain chat-template "
                f"tokens ({toks}): the endpoint may use another model's chat template (docs/providers.md, "
                "'Chat-template tokens')")

    def served_models_warning(self, role: str) -> str | None:
        """The warning line when the role's answers reported more than one served model id in this
        run (a deployment switched, or a router that falls back to another model): its answers mix
        models — the comparison across runs refuses such a change (:func:`identity_changes`),
        within one run it is said here (break-it finding: a judge switched after 60 answers, exit 0,
        not a word). None for one id or none — unless this run's own calls were answered both with
        an id and without one (:meth:`_partly_named`)."""
        if len(self.model) < 2:
            return self._partly_named(role)
        ids = ", ".join(f"{m!r} × {n}" for m, n in _by_count(self.model))
        if len(self.model_fresh) == 1:  # tonight's calls all answered by one model: the others are the cache's
            (now, n_now), = self.model_fresh.items()
            older = [(m, n - self.model_fresh[m]) for m, n in _by_count(self.model)
                     if n - self.model_fresh[m] > 0 and m != now]
            old = ", ".join(f"{n} of {m!r}" for m, n in older)
            what = "LMRA answers" if role.startswith("judge") else "chatbot responses"
            return (f"the {role}'s answers reported {len(self.model)} served models in this run ({ids}): all "
                    f"{n_now} answers called in this run came from {now!r}; the {old} came from the call cache, "
                    "recorded before — by this run before it was interrupted and resumed, or by earlier runs on "
                    "this cache file (answers that do not depend on the seed, such as the identity filter's and the "
                    f"refusal labels', are replayed by every run on it, so this repeats each night) — so the run's "
                    f"{what} mix those models as recorded; to have every answer from the model served now, use "
                    "another cache file (docs/providers.md, 'Served model identity')")
        what = "ratings mix LMRAs" if role.startswith("judge") else "responses mix chatbots"
        return (f"the {role}'s answers reported {len(self.model)} served models in this run ({ids}): its {what} "
                "(a deployment switched mid-run, or a router fell back to another model); the numbers average them "
                "— once the endpoint serves one model, re-run with another seed (or another cache file): a re-run "
                "with this one replays these answers from the cache (docs/providers.md, 'Served model identity')")

    def _partly_named(self, role: str) -> str | None:
        """The warning line when this run's calls of the role were answered some with a served model id
        and some without one (a router falling back to a backend that does not name its model: the
        answers may mix two models; known-items trial, s49: 100 answers of one id and 700 of none
        passed unsaid). Answers from the call cache are left out: rows cached before lmra kept the
        served id have none. None otherwise."""
        named = sum(self.model_fresh.values())
        if not named or not self.fresh_without_model:
            return None
        ids = ", ".join(f"{m!r} × {n}" for m, n in _by_count(self.model_fresh))
        what = "ratings may mix LMRAs" if role.startswith("judge") else "responses may mix chatbots"
        return (f"of the {role}'s {named + self.fresh_without_model} answers called in this run, {named} reported "
                f"a served model ({ids}) and {self.fresh_without_model} reported none: its {what} (a router that "
                "falls back to a backend that does not name its model, or a deployment switched mid-run); check the "
                "endpoint (docs/providers.md, 'Served model identity')")

    def manifest_fields(self) -> dict:
        """``{"served": {...}, "template_tokens": {...}}`` for the role's manifest section
        (counts sorted from most to least frequent, ties by name: the same fields whatever order
        the answers came in — a pipelined run's, or a re-run replaying the pair memo)."""
        top = lambda c: dict(_by_count(c))  # noqa: E731
        return {"served": {"responses": self.responses, "model": top(self.model),
                           "system_fingerprint": top(self.system_fingerprint)},
                "template_tokens": self.template_tokens_field()}


def count_template_tokens(texts: Iterable[str]) -> ServedCounts:
    """The template-token counts of answers known by their text only (``lmra recsys``'s
    ``lists.jsonl`` answers): :attr:`ServedCounts.responses` is the number of texts."""
    counts = ServedCounts()
    for text in texts:
        counts.observe_text(text)
    return counts


class IdentityRecorder:
    """Count the identity of every answer of one role (a provider wrapper, outermost).

    Args:
        inner: the role's provider chain.
        role: ``target``, ``judge`` or ``judge2``.
        counts: where to count.
        on_notice: called once per template token first seen in this role's answers.
    """

    def __init__(self, inner: Provider, role: str, counts: ServedCounts,
                 on_notice: Callable[[str], None] = lambda msg: None):
        self.role = role
        self.counts = counts
        self.on_notice = on_notice
        wrap_identity(self, inner)  # inner, name, model_id, base_url, supports_logprobs

    async def complete(self, request: ChatRequest) -> ChatResult:
        result = await self.inner.complete(request)
        self.note(result)
        return result

    def note(self, result) -> None:
        """Count ``result`` (an answer of this role: its ``served_model``,
        ``system_fingerprint`` and ``text`` are read) and announce a template token first seen."""
        for tok in self.counts.observe(result):
            if self.counts.template_tokens[tok] == 1:
                self.on_notice(f"the {self.role} ({self.name}:{self.model_id}) answered with the chat-template token "
                               f"{tok!r} ({_FORMAT_OF[tok]} format): the endpoint may format prompts with a template "
                               "that is not the model's own, or not stop at the end of a turn. Such responses are "
                               f"used as they are and counted in manifest.json ({self.role}.template_tokens); shown "
                               "once per token")

    async def aclose(self) -> None:
        await self.inner.aclose()


class RunIdentity:
    """The served-model record of one run: a :class:`ServedCounts` per role.

    Args:
        on_notice: the audit's notice callback (template tokens, once per role and token).
    """

    def __init__(self, on_notice: Callable[[str], None] = lambda msg: None):
        self.on_notice = on_notice
        self.counts: dict[str, ServedCounts] = {}

    def watch(self, provider: Provider, role: str) -> IdentityRecorder:
        """Wrap ``provider`` so that the answers of ``role`` are counted."""
        counts = self.counts.setdefault(role, ServedCounts())
        return IdentityRecorder(provider, role, counts, self.on_notice)

    def update_manifest(self, manifest: dict) -> None:
        """Add ``served`` and ``template_tokens`` to each watched role's manifest section."""
        for role, counts in self.counts.items():
            if isinstance(manifest.get(role), dict):
                manifest[role].update(counts.manifest_fields())

    def warnings(self) -> list[str]:
        """One line per role whose answers reported more than one served model, and per role whose
        answers contained template tokens (for ``summary.json``)."""
        return [w for role, c in self.counts.items()
                for w in (c.served_models_warning(role), c.template_tokens_warning(role)) if w is not None]


def _served(manifest: dict, role: str) -> dict:
    section = manifest.get(role)
    return (section.get("served") or {}) if isinstance(section, dict) else {}


def _listed(values: list[str], limit: int = 4) -> str:
    return ", ".join(values[:limit]) + (f" and {len(values) - limit} more" if len(values) > limit else "")


def served_lines(manifest: dict) -> list[tuple[str, str]]:
    """(role, one line) per role with a served-model record, for reports, e.g. ``("target",
    "gpt-4o-2024-08-06 × 812; system fingerprints fp_abc × 800, fp_def × 12")``; a role whose
    answers held chat-template tokens says so. Empty for runs that predate the record."""
    out = []
    for role in ROLES:
        served = _served(manifest, role)
        if not served:
            continue
        n = int(served.get("responses") or 0)
        models = served.get("model") or {}
        parts = [", ".join(f"{m} × {k}" for m, k in models.items()) or "no model id reported"]
        if models and sum(models.values()) < n:
            parts[0] += f" ({n - sum(models.values())} of {n} answers reported none)"
        fps = served.get("system_fingerprint") or {}
        if fps:
            parts.append("system fingerprints " + ", ".join(f"{f} × {k}" for f, k in fps.items()))
        tt = (manifest.get(role) or {}).get("template_tokens") or {}
        if tt.get("responses"):
            parts.append(f"chat-template tokens in {tt['responses']} of {n} answers ("
                         + ", ".join(f"{t} × {k}" for t, k in (tt.get("tokens") or {}).items()) + ")")
        out.append((role, "; ".join(parts)))
    return out


def served_model_change(before: dict, after: dict, role: str) -> tuple[list[str], list[str]] | None:
    """The served model ids of ``role`` in two runs' manifests when both recorded some and
    their sets differ (``(before's, after's)``, most frequent first); None otherwise — a run
    that recorded nothing (an older run, a server that reports no model) is no evidence."""
    va, vb = list(_served(before, role).get("model") or {}), list(_served(after, role).get("model") or {})
    return (va, vb) if va and vb and set(va) != set(vb) else None


def identity_changes(before: dict, after: dict) -> list[str]:
    """What changed in the served models between two runs' manifests.

    Args:
        before, after: ``manifest.json`` of the earlier run (baseline, run A) and the later
            one (tonight's run, run B).

    Returns:
        one line per role and field whose *set* of reported values differs, e.g. ``"the
        target's served model changed: gpt-4o-2024-05-13 → gpt-4o-2024-08-06"`` or ``"the
        judge's system fingerprint changed: fp_a → fp_a, fp_b"`` (values from most to least
        frequent; "(none)" when a field appears or disappears while the role's server reported
        something in both runs). Roles one of the runs did not record (older runs, servers
        that report nothing) are left out.
    """
    out = []
    for role in ROLES:
        a, b = _served(before, role), _served(after, role)
        # both runs recorded what this role's server reported: a fingerprint that appears or
        # disappears between them is a change too (shown as "(none)")
        both = bool(a.get("model") or a.get("system_fingerprint")) and bool(b.get("model") or b.get("system_fingerprint"))
        for key, words in (("model", "served model"), ("system_fingerprint", "system fingerprint")):
            va, vb = list((a.get(key) or {})), list((b.get(key) or {}))
            if (va and vb or both and (va or vb)) and set(va) != set(vb):
                out.append(f"the {role}'s {words} changed: {_listed(va) if va else '(none)'} → "
                           f"{_listed(vb) if vb else '(none)'}")
    return out
