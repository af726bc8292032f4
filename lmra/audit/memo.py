"""The pair memo: a re-run over the same call cache replays each finished pair instead of
redoing it (issue 14, goal 2: a cached re-run ≤ 0.25× the fresh run's time).

A cache hit saves the model call but not the work around it (names, seeds, request
rendering, the wrapper stack, parsing, scoring): ≈ 200 µs per pair with zero-latency models.
The memo sits one level above the call cache, around a pair's whole chain in
:meth:`lmra.audit.pipeline.PipelineDriver._pipelined` (its two responses, their refusal labels,
the LMRA's ratings, the second LMRA's and the quality rows):

* **Where**: the table ``pair_memo`` of the call cache's SQLite file
  (:meth:`lmra.cache.CallCache.memo_get` / ``memo_put``): deleting the cache deletes the memo,
  and a cache shared by several processes shares it. A pair is written only after its chain
  finished and only once every call it made is written to the cache (same connection, in the
  transaction of the calls' batch or a later one; the rest when the cache closes), so a memo
  row written by a run that later crashed is valid (a row lost with the process only means its
  pair is run again, from the cached calls).
* **Key**: SHA-256 of a run-level part — :data:`MEMO_VERSION`, the lmra version and a hash
  of its source files and of the package versions (:func:`code_hash`: new code never
  replays rows the old code built), the whole dumped config except the fields in
  :data:`NOT_IN_KEY` (run control and the finish's statistics, which never reach a pair's
  calls or row), every template and personalization style's text, the name lists, the
  placebo halves, and each model's provider, model, base URL and ``supports_logprobs`` —
  and the pair's own part: its prompt record (id, text, domain, task …), comparison, the two
  groups and the sample index. The names drawn and the
  seeds follow from these (the seed and the name lists are in the run part). A pair's key
  starts with 32 hex digits of the run part: a run whose part no row starts with (a first
  run) looks no pair up (:meth:`lmra.cache.CallCache.memo_holds`).
* **Value**: the chain's result (both :class:`~lmra.generate.Response`, their refusal labels
  and label errors, the ratings row, the quality rows) and every call the chain made, with
  what the call's wrappers count: role, tokens, served model id and fingerprint, chat-template
  tokens in the answer. JSON (never pickle: the file may be shared).
* **Replay**: a hit counts each recorded call as the same call served by the cache would
  have been (``CallStats.cached`` and its tokens, overall and per model; the budget's cached
  ledger; the served-model record and its template-token notices; the endpoint guard's
  ``answered``), advances the progress bars as the chain would, and marks both responses
  ``from_cache``. The run folder is therefore the same as a re-run with the memo off
  (tests/test_pair_memo.py compares them byte for byte), except ``manifest.json``'s own
  ``pair_memo`` counters — and, for a priced model, possibly the last digits of the budget's
  ``cost_saved_usd``, a float sum whose rounding depends on the order the calls are counted
  in (pair by pair here, as they finish otherwise).
* **Never memoised**: a pair with a failed or degraded call (neither is cached: a re-run asks
  again), a failed pair, a pair whose rating is invalid (not refused, not unlabelled, no
  valid answer). **Not used** (``manifest.json`` says why in ``pair_memo.bypassed``): batch
  mode (``batch = true``: its dry passes run the stages one after another) and the staged
  order (the memo hooks the pipelined chain only); a pair whose roles' endpoint breaker
  tripped or whose key was rejected goes the normal way (the calls would raise).

Counts in ``manifest.json`` → ``pair_memo``: ``enabled``, ``hits`` (pairs replayed),
``stored`` (pairs written), ``bypassed`` (why it is off, else null); the console's "Model
calls" line names the pairs replayed.
"""

from __future__ import annotations

import contextvars
import functools
import hashlib
import json
from collections.abc import Awaitable, Callable
from typing import Any

from pydantic_core import to_json

from lmra.cache import CallCache, CallStats, record_cache_hits
from lmra.generate import Response
from lmra.identity import IdentityRecorder, RunIdentity, template_tokens_in
from lmra.providers.base import ChatRequest, ChatResult, Provider, wrap_identity
from lmra.runfolder import json_value

#: bumped whenever the memo's key or value changes meaning (older rows are then never hit)
MEMO_VERSION = 1

#: config fields that never reach a pair's calls or its row: run control (where and under which
#: name to write, the cache file, calls in flight, the budget's limits and prices — cached
#: calls are free and never refused; the budget is not asked on a hit), batch polling, which
#: prompts are audited (the task and domain filters, prompts per task: a pair's names, seeds and
#: requests depend on its own prompt, groups and sample only, so a run with more prompts per
#: task replays the pairs it shares with a smaller one), the judge check (its canaries are rated
#: beside the pairs), and what the finish computes from the rows (intervals, gates, the
#: report's layout). Every other field is in the key.
NOT_IN_KEY = ("name", "output_dir", "cache", "cache_write_retry_s", "pair_memo", "concurrency", "max_calls", "max_cost", "prices",
              "batch_poll_interval_s", "batch_max_wait_s", "tasks", "domains", "prompts_per_task", "judge_check",
              "alpha", "interval", "max_failed_share", "max_invalid_share", "gates", "report")

#: the pair chain being run in this task and the tasks it spawned (:class:`_Recording`), or None
_RECORDING: contextvars.ContextVar["_Recording | None"] = contextvars.ContextVar("lmra_pair_memo", default=None)


class _Recording:
    """The calls one pair chain made: ``calls`` (one list per call, see :meth:`MemoRecorder.complete`)
    and ``spoilt`` (a call failed or was degraded: the pair is not memoised)."""

    __slots__ = ("calls", "spoilt")

    def __init__(self) -> None:
        self.calls: list[list] = []
        self.spoilt = False


class MemoRecorder:
    """The outermost provider wrapper of a role: records each call made inside a pair chain
    (:data:`_RECORDING`) for :class:`PairMemo`. Outside a chain (the judge check, the filter)
    it only passes the call on."""

    def __init__(self, inner: Provider, role: str):
        self.role = role
        wrap_identity(self, inner)  # inner, name, model_id, base_url, supports_logprobs

    async def complete(self, request: ChatRequest) -> ChatResult:
        rec = _RECORDING.get()
        if rec is None:
            return await self.inner.complete(request)
        try:
            result = await self.inner.complete(request)
        except BaseException:
            rec.spoilt = True
            raise
        if result.degraded is not None:  # not cached: a re-run asks again
            rec.spoilt = True
        else:
            rec.calls.append([self.role, result.usage.prompt_tokens, result.usage.completion_tokens,
                              result.served_model, result.system_fingerprint, template_tokens_in(result.text)])
        return result

    async def aclose(self) -> None:
        await self.inner.aclose()


class _Answer:
    """What the served-model record reads of an answer (:meth:`lmra.identity.ServedCounts.observe`):
    its served model, fingerprint, a text holding exactly its template tokens, and that it came
    from the call cache (every call of a replayed pair would be served by it)."""

    __slots__ = ("served_model", "system_fingerprint", "text")
    from_cache = True

    def __init__(self, served_model, system_fingerprint, tokens: list[str]):
        self.served_model, self.system_fingerprint = served_model, system_fingerprint
        self.text = " ".join(tokens)  # no token holds a space, and none holds another (see tests)


class _Usage:
    """A recorded call's token counts, as :class:`~lmra.providers.base.Usage` gives them (the
    call counts and the budget read only these two)."""

    __slots__ = ("prompt_tokens", "completion_tokens")

    def __init__(self, prompt_tokens: int, completion_tokens: int):
        self.prompt_tokens, self.completion_tokens = prompt_tokens, completion_tokens


def _stable_repr(obj: Any) -> str:
    """``repr(obj)`` for the key; raises ValueError when it names an object's address (not stable)."""
    text = repr(obj)
    if " at 0x" in text:
        raise ValueError("unstable repr")
    return text


@functools.lru_cache(maxsize=1)
def code_hash() -> str:
    """SHA-256 of lmra's own source (every ``.py`` file of the package, by relative path) and
    the versions of Python and the packages a run records: any change of the code that renders
    requests, parses answers or builds rows — even without a new version number — misses the
    memo. Computed once per process (a few milliseconds)."""
    from pathlib import Path

    import lmra
    from lmra.runfolder import package_versions

    root = Path(lmra.__file__).resolve().parent
    h = hashlib.sha256(json.dumps(package_versions(), sort_keys=True).encode())
    for path in sorted(root.rglob("*.py")):
        h.update(str(path.relative_to(root)).encode() + b"\0")
        h.update(path.read_bytes())
    return h.hexdigest()


def run_key(cfg, inputs, providers: dict[str, Provider]) -> str:
    """The run-level part of every pair's key (see the module docstring), a hex SHA-256.

    Args:
        cfg: the audit config; inputs: its :class:`~lmra.audit.inputs.Inputs`;
        providers: role → the role's provider (name, model_id, base_url, supports_logprobs).

    Raises:
        ValueError: some input has no stable text form (the memo is then not used).
    """
    import lmra

    config = cfg.model_dump(mode="json")
    for k in NOT_IN_KEY:
        config.pop(k, None)
    parts = {
        "memo": MEMO_VERSION, "lmra": lmra.__version__, "code": code_hash(), "config": config,
        "templates": {k: _stable_repr(t.sections) for k, t in sorted(inputs.templates.items())},
        "styles": {k: _stable_repr(t.sections) for k, t in sorted(inputs.styles.items())},
        "names": _stable_repr(inputs.group_names), "all_names": _stable_repr(inputs.all_names),
        "strata": _stable_repr(inputs.strata),
        "placebo": _stable_repr(inputs.placebo),
        "models": {role: [p.name, p.model_id, p.base_url, bool(p.supports_logprobs)]
                   for role, p in sorted(providers.items()) if p is not None},
    }
    return hashlib.sha256(json.dumps(parts, sort_keys=True, default=_stable_repr).encode()).hexdigest()


def _encode(out: tuple, calls: list[list]) -> str | None:
    """The memo row of a chain's result ``(a, b, row, quality)`` (``a``/``b``: ``(Response,
    label, error)``), or None when it holds something JSON does not give back as it was (a
    numpy integer …). Written by pydantic-core's serializer: ``json.loads`` reads back what it
    reads of ``json.dumps(value, allow_nan=True)`` (every float bit for bit, NaN as a literal;
    non-ASCII kept as it is). The rows hold JSON values only (str, numbers, bools, None,
    lists/tuples, dicts); pydantic-core would also write a set, a date or an enum, which the
    stages never put in a row."""
    (ra, la, ea), (rb, lb, eb), row, quality = out
    # a Response's fields are its __dict__ (flat, no serializers): what model_dump gives, 4× faster
    value = {"a": [vars(ra), la, ea], "b": [vars(rb), lb, eb], "row": row, "quality": quality,
             "calls": calls}
    try:  # pydantic-core's serializer: the same values as the json.dumps below, about 3× faster
        return to_json(value, inf_nan_mode="constants", fallback=_refuse).decode()
    except (TypeError, ValueError, RecursionError):  # a value JSON does not give back (or an old pydantic-core)
        pass
    try:
        return json.dumps(value, allow_nan=True, check_circular=False, separators=(",", ":"), default=_refuse)
    except (TypeError, ValueError, RecursionError):
        return None


def _refuse(obj: Any):
    raise TypeError(type(obj).__name__)


#: a Response from its fields, validated (``Response.model_validate`` without its wrapper: 1.2 µs, not 1.8)
_VALIDATE_RESPONSE = Response.__pydantic_validator__.validate_python


def _response(side: list) -> tuple:
    r, label, error = side
    r["from_cache"] = True  # each of its calls would be served by the cache
    return _VALIDATE_RESPONSE(r), (tuple(label) if label is not None else None), error


def _memoisable(row: dict, quality: list[dict]) -> bool:
    """A pair whose row is final and complete: not failed, rated validly (or refused or
    unlabelled), the second LMRA's and every quality rating without error."""
    if row.get("failed") or row.get("judge2_error") is not None:
        return False
    if not row.get("valid") and not row.get("refused") and not row.get("unlabelled"):
        return False
    return not any(q.get("failed") for q in quality)


class PairMemo:
    """The memo of one audit run (see the module docstring).

    Args:
        cache: the run's call cache (holds the ``pair_memo`` table).
        key: :func:`run_key` of the run.
        stats, budget, identity: the run's call counts, budget and served-model record
            (replayed on a hit).
        refusal: whether refusal labels run (a hit advances their progress bar).

    Attributes:
        hits: pairs replayed from the memo; stored: pairs written to it.
    """

    def __init__(self, cache: CallCache, key: str, *, stats: CallStats, budget, identity: RunIdentity,
                 refusal: bool):
        self.cache = cache
        self.key = key
        self.stats = stats
        self.budget = budget
        self.identity = identity
        self.refusal = refusal
        self.hits = 0
        self.stored = 0
        self._roles: dict[str, tuple] = {}  # role → (provider, its stats targets, endpoint guard, key guard)
        self._served: dict[str, IdentityRecorder] = {}  # role → its served-model record, fed recorded answers
        #: every pair key of this run starts with it; no row does (a first run): no lookups
        self.prefix = key[:32]
        self._lookups = cache.memo_holds(self.prefix)

    def watch(self, provider: Provider, role: str, *, guard=None, keys=None, label: str | None = None) -> MemoRecorder:
        """Wrap ``role``'s whole provider chain (outermost) so that the calls of a pair chain
        are recorded; ``guard`` (:class:`~lmra.providers.endpoint.EndpointGuard`) and ``keys``
        (:class:`~lmra.providers.keys.KeyGuard`) are the role's, asked before a replay; ``label``:
        the key of its per-model counts (default ``provider:model``, as the call cache's)."""
        label = label or f"{provider.name}:{provider.model_id}"
        self._roles[role] = (provider, [self.stats, self.stats.model(label), self.stats.role(role)], guard, keys)
        counts = self.identity.counts.get(role)
        if counts is not None:
            self._served[role] = IdentityRecorder(provider, role, counts, self.identity.on_notice)
        return MemoRecorder(provider, role)

    def pair_key(self, job_a: tuple, job_b: tuple) -> str:
        """The key of the pair of generations ``job_a``/``job_b`` (``(prompt, comparison,
        group, sample)`` each)."""
        p, comp, ga, k = job_a
        # the groups' definitions (config groups, placebo halves) are in the run part
        own = repr((comp, ga.name, job_b[2].name, k, job_b[0].id, job_b[1], job_b[3]))  # str and int: unambiguous
        return self.prefix + hashlib.sha256(f"{self.key}|{p.model_dump_json()}|{own}".encode()).hexdigest()

    def _blocked(self) -> bool:
        """True when a role's calls would raise before the cache (breaker tripped, key rejected)."""
        return any((g is not None and g.tripped is not None) or (kg is not None and kg.rejected is not None)
                   for _, _, g, kg in self._roles.values())

    def replay(self, job_a: tuple, job_b: tuple, progress) -> tuple[str, tuple | None]:
        """``(key, out)``: the pair's :meth:`pair_key` and, when the memo holds the pair (and no
        role's calls would raise before the cache), its ``(a, b, row, quality)`` replayed —
        its recorded calls counted as cache hits and its ``generate`` (and ``refusal``)
        progress advanced — else None (run it with :meth:`chain`, passing ``key``).
        Synchronous: a replayed pair needs no task of its own."""
        key = self.pair_key(job_a, job_b)
        if self._lookups and not self._blocked():
            text = self.cache.memo_get(key)
            if text is not None:
                return key, self._replay(text, progress)
        return key, None

    async def chain(self, rated_pair: Callable[[tuple, tuple], Awaitable[tuple]], job_a: tuple, job_b: tuple,
                    progress, go_on: Callable[[], None], key: str | None = None) -> tuple:
        """The pair's ``(a, b, row, quality)``: replayed from the memo, or ``rated_pair(job_a,
        job_b)`` run while its calls are recorded and then memoised (when it may be).

        ``progress`` gets the chain's ``generate`` (and ``refusal``) advances on a hit;
        ``go_on`` raises when the run is stopping (as the chain's first call would); ``key``:
        the pair's key from a :meth:`replay` that found nothing (the memo is then not asked
        again)."""
        if key is None:
            go_on()
            key, out = self.replay(job_a, job_b, progress)
            if out is not None:
                return out
        rec = _Recording()
        token = _RECORDING.set(rec)
        try:
            out = await rated_pair(job_a, job_b)
        finally:
            _RECORDING.reset(token)
        if not rec.spoilt and _memoisable(out[2], out[3]):
            text = _encode(out, rec.calls)
            if text is not None:
                self.cache.memo_put(key, text)
                self.stored += 1
        return out

    def _replay(self, text: str, progress) -> tuple | None:
        """Count the recorded calls as cache hits and advance the bars; the pair's result, or
        None when the row cannot be read (it is then run again)."""
        try:
            value = json_value(text)
            a, b = _response(value["a"]), _response(value["b"])
            row, quality = value["row"], value["quality"]
            calls = [(role, int(pt), int(ct), served, fp, list(tokens))
                     for role, pt, ct, served, fp, tokens in value["calls"]]
            roles = self._roles
            if (not isinstance(row, dict) or not all(isinstance(q, dict) for q in quality)
                    or any(c[0] not in roles for c in calls)):
                return None
        except (ValueError, KeyError, TypeError, IndexError):  # a row this code cannot read: run the pair
            return None
        # a role's calls counted at once, and a model's in the budget (call by call, they were 6 % of a cached
        # re-run): the same counts, and each model's saved cost summed in the calls' order, as before
        by_role: dict[str, list[int]] = {}
        by_model: dict[tuple[str, str], list] = {}
        for role, pt, ct, served, fingerprint, tokens in calls:
            counts = by_role.setdefault(role, [0, 0, 0])
            counts[0] += 1
            counts[1] += pt
            counts[2] += ct
            provider = roles[role][0]
            by_model.setdefault((provider.name, provider.model_id), []).append(_Usage(pt, ct))
            served_record = self._served.get(role)
            if served_record is not None:  # counted and announced as the wrapper does
                served_record.note(_Answer(served, fingerprint, tokens))
        for role, (n, pt, ct) in by_role.items():
            _, targets, guard, _ = roles[role]
            record_cache_hits(targets, n, pt, ct)
            if guard is not None:
                guard.answered = True
        for (name, model_id), usages in by_model.items():
            self.budget.record_cached_calls(name, model_id, usages)
        for _ in range(2):
            progress.advance("generate")
            if self.refusal:
                progress.advance("refusal")
        self.hits += 1
        return a, b, row, quality

    def report(self) -> dict:
        """``manifest.json``'s ``pair_memo``: enabled, hits, stored, bypassed (None)."""
        return {"enabled": True, "hits": self.hits, "stored": self.stored, "bypassed": None}


def bypass_report(reason: str) -> dict:
    """``manifest.json``'s ``pair_memo`` of a run that does not use the memo, saying why."""
    return {"enabled": False, "hits": 0, "stored": 0, "bypassed": reason}


__all__ = ["MEMO_VERSION", "NOT_IN_KEY", "MemoRecorder", "PairMemo", "bypass_report", "run_key"]
