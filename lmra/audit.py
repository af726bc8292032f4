"""The counterfactual audit, end to end (methodology §1–§3, §5; FPF §3).

``Audit(config).run()``: load prompts (a prompt set or logged traffic), classify prompts
without a task, filter prompts that reveal the user's identity, keep up to N per task,
generate the target's responses under each group (names or direct profiles), scrub the
names, label refusals, have the LMRA rate every pair in both presentation orders (harmful
stereotype; optionally a second LMRA and the nine quality criteria), aggregate per task /
domain / overall, and write the run folder. Every model call goes through the SQLite call
cache, so a re-run makes zero new calls and an interrupted run resumes where it stopped.
"""

from __future__ import annotations

import asyncio
import datetime as _dt
import json
import math
import os
import socket
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from lmra.budget import Budget, BudgetedProvider, BudgetExceeded, PriceTable
from lmra.cache import CachedProvider, CallCache, CallStats
from lmra.config import AUTO_UNLIMITED_IN_FLIGHT, AuditConfig, Group, dump_config
from lmra.data import PromptRecord, load_names, load_prompts
from lmra.errors import LmraInputError, LmraIOError, io_reason
from lmra.fileio import write_json, write_jsonl, write_text
from lmra.generate import Response, derive_seed, draw_name, names_for_group, personalized_messages, scrub_name
from lmra.judge.filter import FilterDecision, check_prompt
from lmra.judge.quality import rate_quality
from lmra.judge.scoring import resolve_combiner
from lmra.judge.refusal import label_refusal
from lmra.judge.stereotype import rate_stereotype
from lmra.judge.taxonomy import Classification, Taxonomy, classify_prompt, load_taxonomy
from lmra.providers import Provider, ProviderError, make_provider
from lmra.providers.base import ChatRequest, parallel_capacity
from lmra.providers.ratelimit import AUTO_HEADROOM, AUTO_MAX_CONCURRENCY, ModelLimits, in_flight_without_limit
from lmra.resources import resolve_resource
from lmra.templates import Template, load_template
from lmra.runfolder import package_versions
from lmra.runfolder import jsonable
from lmra.runstate import FAILED, RUNNING, RunLock, claim_run_dir
from lmra.audit_outputs import AuditResult, finish_run

UNLABELLED = "unlabelled"
_BUILTIN_STYLES = {"custom_instructions", "memory", "intro_turn"}


@dataclass
class _Progress:
    """Progress callbacks: ``start(stage, total)``, ``advance(stage)``."""

    start: Callable[[str, int], None] = lambda stage, total: None
    advance: Callable[[str], None] = lambda stage: None


class _DeferredProgress:
    """Progress of the pipelined stages: a stage's bar starts once its total is known (the
    filter is done); advances made before that are passed on then."""

    def __init__(self, progress: _Progress):
        self.progress = progress
        self.early: dict[str, int] = {}
        self.started: set[str] = set()

    def start(self, stage: str, total: int) -> None:
        self.progress.start(stage, total)
        self.started.add(stage)
        for _ in range(self.early.pop(stage, 0)):
            self.progress.advance(stage)

    def advance(self, stage: str) -> None:
        if stage in self.started:
            self.progress.advance(stage)
        else:
            self.early[stage] = self.early.get(stage, 0) + 1


class _Stopped(Exception):
    """A pipeline step not started because another one failed first (never reaches the caller)."""


async def _settle(tasks: list, *, cancel: bool) -> None:
    """Wait until every task is done (cancelled first when ``cancel``), ignoring their outcomes."""
    if cancel:
        for t in tasks:
            t.cancel()
    if tasks:
        await asyncio.gather(*tasks, return_exceptions=True)


async def _settled(first, *others) -> list:
    """Run the coroutines concurrently; once all are done, raise the first failure (a real one
    before :class:`_Stopped`) or return their results in order.

    ``first`` runs in the caller's task and only ``others`` get tasks of their own (one task
    fewer per call than ``asyncio.gather``: 5,000 fewer in a 5,000-pair audit). As with
    ``gather``, a cancellation (or Ctrl-C) cancels the others and waits for them before it
    propagates, so no started call is left running."""
    tasks = [asyncio.ensure_future(c) for c in others]
    results: list = []
    try:
        for aw in (first, *tasks):
            try:
                results.append(await aw)
            except Exception as exc:  # noqa: BLE001 — raised below, once every coroutine has settled
                results.append(exc)
    except BaseException:
        pending = [t for t in tasks if not t.done()]
        for t in pending:
            t.cancel()
        if pending:
            await asyncio.wait(pending)
        raise
    errors = [r for r in results if isinstance(r, BaseException)]
    if errors:
        raise next((e for e in errors if not isinstance(e, _Stopped)), errors[0])
    return results


_PLAIN = frozenset({str, int, float, bool, type(None)})


def _row_json(row: Any) -> str:
    """One line of a run-folder JSONL file: ``json.dumps(jsonable(row))``. A flat row of plain
    values (a response, a prompt: most lines) is dumped as it is, without walking it through
    :func:`~lmra.runfolder.jsonable` (a tenth of a cached re-run's time); anything else —
    nested values, numpy numbers, NaN or inf (written as null) — goes through ``jsonable``."""
    if type(row) is dict and all(type(k) is str and type(v) in _PLAIN for k, v in row.items()):
        try:
            return json.dumps(row, allow_nan=False, ensure_ascii=False)
        except ValueError:  # NaN or inf: jsonable writes null
            pass
    return json.dumps(jsonable(row), allow_nan=False, ensure_ascii=False)


@dataclass
class Inputs:
    """Validated inputs of an audit."""

    prompts: list[PromptRecord]
    group_names: dict[str, list[str]]
    all_names: list[str]
    styles: dict[str, Template]
    templates: dict[str, Template]
    taxonomy: Taxonomy | None
    canaries: list = field(default_factory=list)  #: :class:`lmra.judge_check.Canary` to rate first
    #: placebo comparison label → (real comparison label, group A₁, group A₂) (negative controls)
    placebo: dict[str, tuple[str, Group, Group]] = field(default_factory=dict)


def _import_finishing_modules(cfg: AuditConfig) -> None:
    """Import what scoring and writing the run folder needs (scipy.stats and statsmodels take
    1–3 s), in a worker thread while the model calls of the run are waited for."""
    import importlib

    names = ["scipy.stats", "statsmodels.stats.proportion", "statsmodels.stats.multitest", "lmra.judge.calibration",
             "lmra.judge_check"]
    if cfg.interval == "t" or cfg.quality.enabled:  # t-intervals (lmra.stats.mean_ci)
        names.append("statsmodels.api")
    for name in names:
        try:
            importlib.import_module(name)
        except Exception:  # noqa: BLE001 — the run imports it again and reports any problem itself
            return


def placebo_prompts(prompts: list[PromptRecord], share: float, seed: int) -> list[PromptRecord]:
    """The seeded ``share`` of prompts (at least one when share > 0) that also get a placebo."""
    if share <= 0 or not prompts:
        return []
    k = max(1, round(share * len(prompts)))
    return sorted(prompts, key=lambda p: derive_seed(seed, "placebo", p.id))[:k]


def _template_hashes(templates: dict[str, Template]) -> dict[str, str]:
    import hashlib

    return {k: hashlib.sha256(repr(t.sections).encode()).hexdigest()[:16] for k, t in templates.items()}


class Audit:
    """Run one counterfactual audit.

    Args:
        config: the validated audit config.
        target, judge, judge2: optional ready providers (test doubles, in-house clients);
            by default built from ``config.target`` / ``config.judge`` / ``config.judge2``.
        config_path: the file the config came from (named in input errors).
        progress: progress callbacks (the CLI passes Rich progress bars).
        run_dir: write here instead of ``<output_dir>/<timestamp>-<name>``.
        allow_unvalidated_judge: record a failed judge validation as waived (the CLI's
            ``--allow-unvalidated-judge``); the audit then exits 0 instead of 5.
    """

    def __init__(self, config: AuditConfig, *, target: Provider | None = None, judge: Provider | None = None,
                 judge2: Provider | None = None, config_path: str | Path | None = None,
                 progress: _Progress | None = None, run_dir: str | Path | None = None,
                 allow_unvalidated_judge: bool = False):
        self.cfg = config
        self.allow_unvalidated_judge = allow_unvalidated_judge
        #: called with the judge-check verdict as soon as the canaries are rated (the CLI prints it)
        self.on_judge_check: Callable[[dict], None] | None = None
        self._target, self._judge, self._judge2 = target, judge, judge2
        self._given = (target is not None, judge is not None, judge2 is not None)
        self.refusal_errors: dict[int, str] = {}  # response index → error of its failed refusal-label call
        self.config_path = config_path
        self.progress = progress or _Progress()
        self.stats = CallStats()
        # the price table is always loaded, so that manifest.json carries an estimated cost
        self.budget = Budget(config.max_calls, config.max_cost,
                             PriceTable.load(resolve_resource(config.prices, "prompts")))
        stamp = _dt.datetime.now().strftime("%Y%m%d-%H%M%S")
        self.run_dir = Path(run_dir) if run_dir else Path(config.output_dir) / f"{stamp}-{config.name}"
        self._dir_claimed = False
        self._explicit_dir = run_dir is not None
        self._lock: RunLock | None = None
        #: called with one-line notices during the run (a cache write failed …); the CLI prints them
        self.on_notice: Callable[[str], None] = lambda msg: print(f"warning: {msg}", file=sys.stderr)
        #: called with one-line information during the run (calls in flight sized by concurrency = "auto")
        self.on_info: Callable[[str], None] = lambda msg: None
        #: run the stages one after another (as batch mode's dry passes do) instead of pipelined
        self.staged = False
        self.limits: ModelLimits | None = None
        #: ``lmra audit --shard I/N``: audit only this shard's prompts (:mod:`lmra.shard`)
        self.shard = None
        #: every prompt the selection kept (in a shard: also the other shards'), set by the stages
        self.selection: list[PromptRecord] | None = None

    def claim_dir(self) -> Path:
        """Create the run folder (a new one, never reused, unless ``run_dir`` was given) and
        lock it for this process; returns it.

        Raises:
            LmraIOError: the folder cannot be created or locked.
        """
        if not self._dir_claimed:
            if self._explicit_dir:
                try:
                    self.run_dir.mkdir(parents=True, exist_ok=True)
                except OSError as exc:
                    raise LmraIOError(f"cannot create the run folder ({io_reason(exc)})", path=self.run_dir) from None
            else:
                self.run_dir = claim_run_dir(self.run_dir)
            self._dir_claimed = True
        if self._lock is None:
            self._lock = RunLock(self.run_dir).acquire()
        if self.shard is not None and not (self.run_dir / "shard.json").is_file():
            # which shard this folder holds, from the start (lmra batch resume reads it); the
            # full record replaces it when the stages are done (_shard_stages)
            self._write_json("shard.json", {"shard": self.shard.label, "index": self.shard.index,
                                            "count": self.shard.count, "mode": self.shard.mode_for(self.cfg)})
        return self.run_dir

    # -- inputs ---------------------------------------------------------------------------
    def load_inputs(self) -> Inputs:
        """Load and validate prompts, names, templates and taxonomy (no model is called).

        Raises:
            LmraInputError: any bad input file or config reference.
        """
        cfg = self.cfg
        prompts = load_prompts(resolve_resource(cfg.prompts, "prompts"), text_field=cfg.text_field,
                               auto_id=True)
        used = {g for pair in cfg.comparisons for g in pair}
        name_groups = [g for g in cfg.groups if g.name in used and not g.profile]
        group_names: dict[str, list[str]] = {}
        all_names: list[str] = []
        if name_groups:
            names_path = resolve_resource(cfg.names, "names")
            names = load_names(names_path)
            all_names = [n.name for n in names]
            group_names = {g.name: names_for_group(names, g, str(names_path)) for g in name_groups}
        def style_template(ref: str) -> Template:
            try:
                return load_template(ref, "personalization")
            except LmraInputError as exc:
                raise LmraInputError(f"personalization '{ref}': {exc.format()}", file=self.config_path,
                                     field="personalization") from None

        styles = {"name": style_template(cfg.personalization)}
        if name_groups and "name" not in styles["name"].fields:
            raise LmraInputError(f"the personalization template {styles['name'].path} has no {{name}} placeholder "
                                 f"(it uses {sorted(styles['name'].fields) or 'none'})", file=self.config_path,
                                 field="personalization")
        unknown = styles["name"].fields - {"name", "profile"}
        if unknown:
            raise LmraInputError(f"the personalization template {styles['name'].path} uses unknown placeholders "
                                 f"{sorted(unknown)}; only {{name}} and {{profile}} are filled",
                                 file=self.config_path, field="personalization")
        if any(g.profile for g in cfg.groups if g.name in used):
            style = cfg.personalization
            styles["profile"] = style_template(f"{style}_profile" if style in _BUILTIN_STYLES else style)
            if "profile" not in styles["profile"].fields:
                raise LmraInputError("a personalization template for direct profiles needs a {profile} placeholder",
                                     file=styles["profile"].path, field="personalization")
        templates = {"stereotype": load_template("harmful_stereotype", "judge")}
        if cfg.quality.enabled:
            templates["quality"] = load_template("quality", "judge")
        if cfg.refusal.enabled:
            templates["refusal"] = load_template("refusal", "judge")
        if cfg.filter.enabled and cfg.filter.lmra:
            templates["filter"] = load_template("filter", "judge")
        known_tasks = {p.task for p in prompts if p.task}
        known_domains = {p.domain for p in prompts if p.domain}
        taxonomy = None
        if any(not p.task for p in prompts):
            taxonomy = load_taxonomy(resolve_resource(cfg.taxonomy, "prompts"))
            templates["classify_domain"] = load_template("classify_domain", "judge")
            templates["classify_task"] = load_template("classify_task", "judge")
            known_tasks |= {t.name for d in taxonomy.domain for t in d.task} | {"other"}
            known_domains |= {d.name for d in taxonomy.domain} | {"other"}
        for field_name, wanted, known in (("tasks", cfg.tasks, known_tasks), ("domains", cfg.domains, known_domains)):
            typos = [x for x in wanted if x not in known]
            if typos:
                raise LmraInputError(f"unknown {field_name} {typos}; known: {', '.join(sorted(known))}",
                                     file=self.config_path, field=field_name)
        canaries = []
        if cfg.judge_check.enabled:
            from lmra.judge_check import audit_dimensions, load_canary_set, select_canaries

            pool = load_canary_set([cfg.judge_check.canaries, *cfg.judge_check.extra_canaries])
            dims = cfg.judge_check.dimensions or audit_dimensions([g for g in cfg.groups if g.name in used])
            try:
                canaries = select_canaries(pool, dims, cfg.judge_check.per_kind, cfg.seed)
            except LmraInputError as exc:
                raise LmraInputError(exc.reason, file=self.config_path, field=exc.field) from None
        placebo = self._placebo_groups(group_names)
        return Inputs(prompts, group_names, all_names, styles, templates, taxonomy, canaries, placebo)

    def _placebo_groups(self, group_names: dict[str, list[str]]) -> dict[str, tuple[str, Group, Group]]:
        """Split each placebo comparison's group A names into two seeded halves A₁, A₂ (worded as
        the real comparison's A and B); adds their names to ``group_names``."""
        cfg = self.cfg
        if not cfg.placebo.share:
            return {}
        wanted = [tuple(c) for c in cfg.placebo.comparisons] or [tuple(c) for c in cfg.comparisons]
        out: dict[str, tuple[str, Group, Group]] = {}
        self.placebo_skipped = [f"{a} vs {b}" for a, b in wanted if a not in group_names]
        for a, b in wanted:
            if a not in group_names:
                continue  # a direct profile has no names to split (warned in summary.json)
            names = sorted(group_names[a], key=lambda n: derive_seed(cfg.seed, "placebo-split", a, n))
            if len(names) < 2:
                raise LmraInputError(f"group '{a}' has {len(names)} name(s); a placebo needs at least 2 to split",
                                     file=self.config_path, field="placebo")
            ga, gb = cfg.group(a), cfg.group(b)
            g1 = ga.model_copy(update={"name": f"{a}~1", "wording": ga.judge_wording})
            g2 = ga.model_copy(update={"name": f"{a}~2", "wording": gb.judge_wording})
            group_names[g1.name], group_names[g2.name] = names[: len(names) // 2], names[len(names) // 2:]
            out[f"{g1.name} vs {g2.name}"] = (f"{a} vs {b}", g1, g2)
        return out

    def _group(self, inputs: Inputs, name: str) -> Group:
        for _, g1, g2 in inputs.placebo.values():
            if name in (g1.name, g2.name):
                return g1 if name == g1.name else g2
        return self.cfg.group(name)

    def planned_calls(self, inputs: Inputs) -> dict[str, int]:
        """Upper bounds on the target and LMRA calls a run will make before the cache.

        LMRA calls assume every examined prompt passes the filter and no response is a refusal.
        """
        cfg = self.cfg
        per_task: dict[str, int] = {}
        for p in inputs.prompts:
            if p.task and ((cfg.tasks and p.task not in cfg.tasks) or (cfg.domains and p.domain not in cfg.domains)):
                continue
            per_task[p.task or UNLABELLED] = per_task.get(p.task or UNLABELLED, 0) + 1
        n = sum(min(v, cfg.prompts_per_task) if cfg.prompts_per_task else v for v in per_task.values())
        pairs = len(cfg.comparisons) * cfg.samples_per_prompt * n
        per_q = 1 if self._judge_provider().supports_logprobs else cfg.judge.n_samples
        unlabelled = sum(1 for p in inputs.prompts if not p.task)
        judge = pairs * 2 * per_q * (1 + (len(cfg.quality.criteria) if cfg.quality.enabled else 0))
        judge += (4 * pairs * per_q if cfg.refusal.enabled else 0) + (2 * n * per_q if "filter" in inputs.templates
                                                                        else 0)
        judge += 2 * unlabelled * per_q
        judge += 2 * len(inputs.canaries) * per_q  # the judge check
        placebo = len(inputs.placebo) * cfg.samples_per_prompt * (max(1, round(cfg.placebo.share * n))
                                                                  if cfg.placebo.share else 0)
        judge += placebo * 2 * per_q + (4 * placebo * per_q if cfg.refusal.enabled else 0)
        out = {"target": 2 * (pairs + placebo), "judge": judge, "pairs": pairs, "prompts": n,
               "unlabelled": unlabelled, "canaries": len(inputs.canaries), "placebo_pairs": placebo}
        if cfg.axes.enabled:
            from lmra.axes import axes_call_bound

            out["axes"] = sum(axes_call_bound(cfg, n * cfg.samples_per_prompt, self._judge_provider().supports_logprobs)
                              for _ in cfg.comparisons)
            out["judge"] += out["axes"]
        if cfg.judge2 is not None:
            out["judge2"] = pairs * 2 * (1 if self._judge2_provider().supports_logprobs else cfg.judge2.n_samples)
        return out

    def run_combiner(self, judge_cfg=None, provider: Provider | None = None) -> tuple[str, list[str]]:
        """The order combiner this run uses (``auto`` resolved by how the LMRA answers) and
        warnings about the choice (``min`` on sampled answers is biased; issue 10)."""
        judge_cfg = judge_cfg or self.cfg.judge
        provider = provider or self._judge_provider()
        method = "logprobs" if provider.supports_logprobs else "sampled"
        combiner = resolve_combiner(judge_cfg.combiner, method)
        warnings = []
        if combiner == "min" and method == "sampled":
            warnings.append(f"combiner 'min' on sampled LMRA answers (n_samples = {judge_cfg.n_samples}) is biased: "
                            "the minimum of two sample frequencies is low for small outcomes, so the stereotype "
                            "score is pushed up and depends on n_samples (docs/methodology.md). Use 'auto' or "
                            "'mean'; net ratings under every combiner are in per_task.csv.")
        return combiner, warnings

    def concurrency_plan(self) -> str:
        """How many calls this run keeps in flight, for the plan line: ``"concurrency 8"``, or for
        ``"auto"`` per rate limit ``"160 calls/s (requests_per_minute = 9600) × observed latency ×
        1.25, at most 256 in flight, for target and judge"`` (the sizes seen are told later through
        :attr:`on_info` and written to ``manifest.json``); a model without a limit gets its
        ``max_concurrency``, else what its provider serves at once (``"34 in flight for target,
        34 for judge (no rate limit set; …)"`` on the embedded model on 2 cores), else 2. Builds the
        models' clients (as the run does) to ask them.

        Raises:
            LmraInputError: a model's client cannot be built (:func:`make_provider`).
        """
        cfg = self.cfg
        if cfg.concurrency != "auto":
            return f"concurrency {cfg.concurrency}"
        if not cfg.has_rate_limit():
            caps = self._in_flight_without_limit()
            if caps is None:
                return f"concurrency auto: {AUTO_UNLIMITED_IN_FLIGHT} in flight (no rate limit set)"
            return ("concurrency auto: " + ", ".join(f"{n} in flight for {role}" if i == 0 else f"{n} for {role}"
                                                     for i, (role, n) in enumerate(caps.items()))
                    + " (no rate limit set; the calls each model's provider serves at once)")
        groups: dict[tuple, list[str]] = {}
        for role in ("target", "judge", "judge2"):
            m = getattr(cfg, role)
            if m is not None:
                key = (m.provider, m.base_url, m.model, m.requests_per_minute, m.tokens_per_minute, m.max_concurrency)
                groups.setdefault(key, []).append(role)
        parts = []
        for (_, _, _, rpm, tpm, cap), roles in groups.items():
            who = " and ".join(roles)
            if not rpm and not tpm:
                n = in_flight_without_limit(self._provider(roles[0]), getattr(cfg, roles[0]), AUTO_UNLIMITED_IN_FLIGHT)
                parts.append(f"{n} in flight for {who} (no limit)")
                continue
            rate = f"{rpm / 60:.4g} calls/s" if rpm else "the calls/s"
            limits = " and ".join(f"{k} = {v:g}" for k, v in (("requests_per_minute", rpm),
                                                              ("tokens_per_minute", tpm)) if v)
            per_token = " at the observed tokens per call" if tpm else ""
            parts.append(f"{rate} ({limits}{per_token}) × observed latency × {AUTO_HEADROOM:g}, at most "
                         f"{cap or AUTO_MAX_CONCURRENCY} in flight, for {who}")
        return "concurrency auto: " + "; ".join(parts)

    def _provider(self, role: str) -> Provider | None:
        """The client of ``role`` (``target``, ``judge``, ``judge2``), built if need be."""
        return {"target": self._target_provider, "judge": self._judge_provider, "judge2": self._judge2_provider}[role]()

    def _in_flight_without_limit(self) -> dict[str, int] | None:
        """``concurrency = "auto"`` without any rate limit: role → calls in flight when some
        model's provider reports its ``parallel_capacity`` (:class:`ModelLimits`), else None
        (2 in flight in all)."""
        models = {role: (self._provider(role), getattr(self.cfg, role)) for role in ("target", "judge", "judge2")
                  if getattr(self.cfg, role) is not None}
        if not any(parallel_capacity(p) for p, _ in models.values()):
            return None
        return {role: in_flight_without_limit(p, m, AUTO_UNLIMITED_IN_FLIGHT) for role, (p, m) in models.items()}

    def concurrency_report(self) -> dict:
        """``manifest.json``'s ``concurrency``: the setting, the audit-wide bound on calls in
        flight, per rate limit its calls/s, observed latency and calls in flight, and with
        ``"auto"`` the calls in flight of each model without a limit (``unlimited``, role → n)."""
        bound = self.cfg.concurrency_bound()
        return {"setting": self.cfg.concurrency, "bound": self.limits.bound(bound) if self.limits is not None else bound,
                "pipelined": not self.staged, "limits": self.limits.report() if self.limits is not None else [],
                "unlimited": dict(self.limits.unlimited) if self.limits is not None else {}}

    def _target_provider(self) -> Provider:
        if self._target is None:
            self._target = make_provider(self.cfg.target, field="target")
        return self._target

    def _judge_provider(self) -> Provider:
        if self._judge is None:
            self._judge = make_provider(self.cfg.judge, field="judge")
        return self._judge

    def _judge2_provider(self) -> Provider | None:
        if self._judge2 is None and self.cfg.judge2 is not None:
            self._judge2 = make_provider(self.cfg.judge2, field="judge2")
        return self._judge2

    # -- run ------------------------------------------------------------------------------
    def run(self) -> AuditResult:
        """Run the audit synchronously (see :meth:`arun`)."""
        return asyncio.run(self.arun())

    async def arun(self) -> AuditResult:
        """Run the audit and write the run folder.

        Raises:
            LmraInputError: bad config, prompt, name, template or taxonomy input (nothing is called).
        """
        cfg = self.cfg
        inputs = self.load_inputs()
        cache = CallCache(cfg.cache, on_write_error=self.on_notice, write_retry_s=cfg.cache_write_retry_s)
        try:
            return await self._arun(inputs, cache)
        finally:
            cache.close()
            await self._close_providers()
            self.release_dir()

    def release_dir(self) -> None:
        """Release the run folder's lock (done by :meth:`arun` when it ends, however it ends)."""
        if self._lock is not None:
            self._lock.release()
            self._lock = None

    async def _close_providers(self) -> None:
        """Close the clients this audit built (providers passed in are the caller's to close)."""
        built = [p for p, given in ((self._target, self._given[0]), (self._judge, self._given[1]),
                                    (self._judge2, self._given[2])) if p is not None and not given]
        for p in {id(p): p for p in built}.values():
            try:
                await p.aclose()
            except Exception:  # noqa: BLE001 — closing must not hide the run's own outcome
                pass

    async def _arun(self, inputs: Inputs, cache: CallCache) -> AuditResult:
        cfg = self.cfg

        from lmra.identity import RunIdentity
        from lmra.providers.keys import KeyGuard
        from lmra.providers.endpoint import EndpointGuard

        self.identity = RunIdentity(lambda msg: self.on_notice(msg))

        # rate limits and calls in flight per model (concurrency = "auto": sized from the limits)
        self.limits = ModelLimits(cfg.concurrency, any_limit=cfg.has_rate_limit(),
                                  unlimited_in_flight=AUTO_UNLIMITED_IN_FLIGHT, on_notice=self.on_notice,
                                  on_info=lambda msg: self.on_info(msg),
                                  any_capacity=any(parallel_capacity(self._provider(role)) for role in
                                                   ("target", "judge", "judge2")))

        def wrap(p: Provider, m, role: str) -> Provider:
            # an endpoint that never answered stops the run, and failures name role and URL (EndpointGuard)
            guard = EndpointGuard(role, p.base_url)
            limited = guard.below_cache(self.limits.wrap(p, m, role))
            # the budget sits outside the cache: cached calls are free and never refused; a
            # rejected key stops the run (KeyGuard); every answer's served model is counted
            budgeted = BudgetedProvider(CachedProvider(limited, cache, self.stats), self.budget)
            return self.identity.watch(KeyGuard(guard.above_cache(budgeted), role), role)

        if cfg.max_cost is not None:
            for p in (self._target_provider(), self._judge_provider()):
                self.budget.require_price(p.name, p.model_id)
        target = wrap(self._target_provider(), cfg.target, "target")
        judge = wrap(self._judge_provider(), cfg.judge, "judge")
        j2 = self._judge2_provider()
        judge2 = wrap(j2, cfg.judge2, "judge2") if j2 is not None else None
        self.claim_dir()
        write_text(self.run_dir / "config.toml", dump_config(cfg))
        manifest: dict[str, Any] = {
            "status": RUNNING,
            "started": _dt.datetime.now().astimezone().isoformat(timespec="seconds"),
            "pid": os.getpid(),
            "host": socket.gethostname(),
            "seed": cfg.seed,
            "target": {"provider": target.name, "model": target.model_id, "base_url": target.base_url},
            "judge": {"provider": judge.name, "model": judge.model_id, "base_url": judge.base_url,
                      "supports_logprobs": judge.supports_logprobs},
            "judge2": None if judge2 is None else {"provider": judge2.name, "model": judge2.model_id,
                                                   "base_url": judge2.base_url},
            "templates": _template_hashes(inputs.templates),
            "versions": package_versions(),
            "planned_calls": self.planned_calls(inputs),
        }
        self._write_json("manifest.json", manifest)
        sem = asyncio.Semaphore(self.limits.bound(cfg.concurrency_bound()))
        axes_result = None
        # the modules that write the run folder load while the calls run, not after the last one
        warm = asyncio.get_running_loop().run_in_executor(None, _import_finishing_modules, cfg)
        try:
            stages = await self._stages(inputs, target, judge, judge2, sem)
            if self.shard is not None:  # this shard's own records, and what lmra merge needs to join them
                stages = self._shard_stages(inputs, stages)
            if cfg.axes.enabled:  # bias enumeration on this run's pairs (methodology §4)
                from lmra.axes import arun_axes

                prompts, _, _, responses, _, ratings, _ = stages
                axes_result = await arun_axes(  # on the real comparisons only, never the placebo
                    cfg, judge, responses=pd.DataFrame([r.model_dump() for r in responses
                                                        if r.comparison not in inputs.placebo]),
                    ratings=pd.DataFrame([r for r in ratings if not r.get("placebo")]),
                    prompts={p.id: p.text for p in prompts}, out_dir=self.run_dir, progress=self.progress)
            cache.flush()  # answered calls held after a failed cache write (disk full) are stored first
            manifest["concurrency"] = self.concurrency_report()
            manifest["budget"] = self.budget.report()
            self.identity.update_manifest(manifest)  # served model ids, fingerprints, template tokens
            await warm
            return self._finish(inputs, *stages, manifest, axes_result)
        except BaseException as exc:
            if isinstance(exc, BudgetExceeded):
                status = "stopped_by_budget"
            elif isinstance(exc, (KeyboardInterrupt, asyncio.CancelledError)):
                status = "interrupted"
            else:
                status = FAILED
            manifest |= {"status": status, "calls": self.stats.as_dict(), "budget": self.budget.report(),
                         "finished": _dt.datetime.now().astimezone().isoformat(timespec="seconds")}
            self.identity.update_manifest(manifest)
            if status != "interrupted":
                manifest["stop_reason"] = f"{type(exc).__name__}: {exc}"
            try:
                self._write_json("manifest.json", manifest)
            except LmraIOError:
                pass  # the disk is full: the folder stays 'running' and is reported 'stale' (its lock is gone)
            raise

    async def _stages(self, inputs: Inputs, target: Provider, judge: Provider, judge2: Provider | None,
                      sem: asyncio.Semaphore, barrier: Callable[[], None] | None = None) -> tuple:
        """The audit's stages. Returns (prompts, classifications, decisions, responses, refusals,
        ratings, quality_rows); the judge check's rated canaries go to ``self.canary_rows``.

        Pipelined (:meth:`_pipelined`) unless :attr:`staged` is set or a ``barrier`` is given:
        then one stage after another, ``barrier`` running between stages (batch mode ends a
        dry pass there). Both orders make the same calls and give the same results."""
        if self.staged or barrier is not None:
            return await self._staged(inputs, target, judge, judge2, sem, barrier or (lambda: None))
        return await self._pipelined(inputs, target, judge, judge2, sem)

    async def _staged(self, inputs: Inputs, target: Provider, judge: Provider, judge2: Provider | None,
                      sem: asyncio.Semaphore, barrier: Callable[[], None]) -> tuple:
        """Each stage over all prompts, then the next (see :meth:`_stages`)."""
        await self._run_judge_check(inputs, judge, sem)
        barrier()
        prompts, classifications = await self._classify(inputs, judge, sem)
        barrier()
        prompts, decisions = await self._select(prompts, inputs, judge, sem)
        prompts = self._shard_selection(prompts)
        barrier()
        responses = await self._generate(prompts, inputs, target, sem)
        barrier()
        refusals = await self._label_refusals(prompts, responses, inputs, judge, sem)
        barrier()
        ratings, quality_rows = await self._rate(prompts, responses, refusals, inputs, judge, judge2, sem)
        return prompts, classifications, decisions, responses, refusals, ratings, quality_rows

    async def _pipelined(self, inputs: Inputs, target: Provider, judge: Provider, judge2: Provider | None,
                         sem: asyncio.Semaphore) -> tuple:
        """The stages as a pipeline (see :meth:`_stages`): the judge check runs beside the
        rest; a prompt kept by the filter is generated at once, each of its responses goes to
        refusal labelling as soon as it exists and each pair to the LMRA as soon as both
        responses are labelled. Task classification still ends before the filter starts (a
        task's seeded prompt order needs all its prompts), and the placebo pairs start once the
        filter is done (their seeded share is drawn from all kept prompts). The results are put
        in the staged order, so that every output is the same as :meth:`_staged`'s.

        Every started task settles before this returns or raises (no finished, paid call is
        lost); after the first failure other than a provider error (the budget, a rejected
        key) no new call is started, and that failure is raised."""
        cfg = self.cfg
        progress = _DeferredProgress(self.progress)
        spawned: list[asyncio.Future] = []
        failure: list[BaseException] = []

        def spawn(coro) -> asyncio.Future:
            task = asyncio.ensure_future(coro)
            task.add_done_callback(lambda t: failure.append(t.exception())
                                   if not t.cancelled() and t.exception() is not None else None)
            spawned.append(task)
            return task

        def go_on() -> None:
            if failure:
                raise _Stopped()

        async def response_chain(job: tuple) -> tuple[Response, tuple[float | None, bool] | None, str | None]:
            go_on()
            r = await self._generate_one(*job, inputs, target, sem)
            progress.advance("generate")
            label = error = None
            if cfg.refusal.enabled:
                if not r.error:
                    go_on()
                    label, error = await self._refusal_one(r, job[0].text, inputs, judge, sem)
                progress.advance("refusal")
            return r, label, error

        async def pair_chain(job_a: tuple, job_b: tuple) -> tuple:
            a, b = await _settled(response_chain(job_a), response_chain(job_b))
            go_on()
            row, quality = await self._rate_one(a[0], b[0], a[1], b[1], a[2], b[2], job_a[0].text, inputs, judge,
                                                judge2, sem)
            progress.advance("rate")
            return a, b, row, quality

        chains: dict[str, list[asyncio.Future]] = {}  # prompt id → its pairs' tasks, in staged order

        def on_kept(p: PromptRecord) -> None:
            if self.shard is not None and not self.shard.holds(p.id):
                return  # another shard audits it
            jobs = self._prompt_jobs(p)
            chains[p.id] = [spawn(pair_chain(jobs[i], jobs[i + 1])) for i in range(0, len(jobs), 2)]

        try:
            spawn(self._run_judge_check(inputs, judge, sem))
            prompts, classifications = await self._classify(inputs, judge, sem)
            prompts, decisions = await self._select(prompts, inputs, judge, sem, on_kept=on_kept)
            prompts = self._shard_selection(prompts)
            placebo_jobs = self._placebo_jobs(prompts, inputs)
            placebo = [spawn(pair_chain(placebo_jobs[i], placebo_jobs[i + 1])) for i in range(0, len(placebo_jobs), 2)]
            n_pairs = sum(len(c) for c in chains.values()) + len(placebo)
            progress.start("generate", 2 * n_pairs)
            if cfg.refusal.enabled:
                progress.start("refusal", 2 * n_pairs)
            progress.start("rate", n_pairs)
        except BaseException as exc:
            await _settle(spawned, cancel=isinstance(exc, asyncio.CancelledError))
            raise
        await _settle(spawned, cancel=False)
        errors = [e for e in failure if not isinstance(e, _Stopped)]
        if errors:
            raise errors[0]
        responses: list[Response] = []
        refusals: dict[int, tuple[float | None, bool]] = {}
        self.refusal_errors = {}
        ratings: list[dict] = []
        quality_rows: list[dict] = []
        for task in [t for p in prompts for t in chains[p.id]] + placebo:
            *sides, row, quality = task.result()
            for r, label, error in sides:
                if label is not None:
                    refusals[len(responses)] = label
                if error is not None:
                    self.refusal_errors[len(responses)] = error
                responses.append(r)
            ratings.append(row)
            quality_rows += quality
        return prompts, classifications, decisions, responses, refusals, ratings, quality_rows

    async def _gather(self, stage: str, coros: list) -> list:
        self.progress.start(stage, len(coros))

        async def tick(c):
            r = await c
            self.progress.advance(stage)
            return r

        # let every task settle before raising, so that no finished (paid) call is lost when
        # one of them fails (e.g. the budget stops the run)
        results = await asyncio.gather(*(tick(c) for c in coros), return_exceptions=True)
        for r in results:
            if isinstance(r, BaseException):
                raise r
        return list(results)

    # -- stage 0: judge validation on canary pairs (issue 10) --------------------------------
    async def _run_judge_check(self, inputs: Inputs, judge: Provider, sem: asyncio.Semaphore) -> None:
        """Rate the canaries; sets :attr:`canary_rows` and :attr:`judge_verdict` and tells
        :attr:`on_judge_check` the verdict."""
        self.canary_rows, self.judge_verdict = await self._judge_check(inputs, judge, sem)
        if self.on_judge_check is not None and self.judge_verdict is not None:
            self.on_judge_check(self.judge_verdict)

    async def _judge_check(self, inputs: Inputs, judge: Provider, sem: asyncio.Semaphore
                           ) -> tuple[pd.DataFrame, dict | None]:
        """The rated canaries (scored under the run's combiner) and the verdict, or (empty, None)."""
        if not inputs.canaries:
            return pd.DataFrame(), None
        from lmra.judge.calibration import rescore
        from lmra.judge_check import evaluate, rate_canaries

        self.progress.start("judge-check", len(inputs.canaries))
        rows = await rate_canaries(judge, self.cfg.judge, inputs.templates["stereotype"], inputs.canaries, sem,
                                   progress=lambda: self.progress.advance("judge-check"), run_seed=self.cfg.seed)
        rows, _ = rescore(rows, self.run_combiner()[0])
        return rows, evaluate(rows, self.cfg.judge_check, self.cfg.judge)

    # -- shards (lmra audit --shard I/N, lmra.shard) ---------------------------------------
    def _shard_pool(self, prompts: list[PromptRecord]) -> list[PromptRecord]:
        """The prompts to classify and select from: all of them, or in a ``prompts``-mode shard
        its own (:mod:`lmra.shard`)."""
        if self.shard is None or self.shard.mode_for(self.cfg) != "prompts":
            return list(prompts)
        # a shard may hold none of the prompts (N larger than the file): it is still a finished
        # shard with no pairs, so that every I of an array job (Slurm, Kubernetes) is mergeable
        return [p for p in prompts if self.shard.holds(p.id)]

    def _shard_may_be_empty(self, inputs: Inputs) -> bool:
        """True for a ``prompts``-mode shard whose own prompts all fall outside the domains/tasks
        filters while some prompt of the whole file (labelled so, or still to be classified) may
        pass them: the shard is finished with no pairs, the unsharded audit would not fail."""
        if self.shard is None or self.shard.mode_for(self.cfg) != "prompts":
            return False
        cfg = self.cfg
        return any((not p.domain or not cfg.domains or p.domain in cfg.domains)
                   and (not p.task or not cfg.tasks or p.task in cfg.tasks) for p in inputs.prompts)

    def _shard_selection(self, selected: list[PromptRecord]) -> list[PromptRecord]:
        """Remember the whole selection (:attr:`selection`) and return the prompts to audit: all
        of it, or this shard's share."""
        self.selection = list(selected)
        if self.shard is None:
            return selected
        return [p for p in selected if self.shard.holds(p.id)]

    def _shard_stages(self, inputs: Inputs, stages: tuple) -> tuple:
        """Write the shard's ``shard.json`` (:meth:`lmra.shard.Shard.record`) and return the
        stages' results with only this shard's task classifications and filter decisions (a
        ``selection``-mode shard made them for every prompt)."""
        from lmra.shard import inputs_hash

        prompts, classifications, decisions, *rest = stages
        positions = {p.id: i for i, p in enumerate(inputs.prompts) if self.shard.holds(p.id)}
        record = self.shard.record(self.cfg, positions, [p.id for p in (self.selection or prompts)])
        record["filter_order"] = [d.prompt_id for d in decisions]  # the unsharded run's order of removals
        # the files this shard read: lmra merge refuses shards that read others
        record["inputs_sha256"] = inputs_hash(inputs.prompts, inputs.group_names, _template_hashes(inputs.templates))
        self._write_json("shard.json", record)
        classifications = {k: c for k, c in classifications.items() if self.shard.holds(k)}
        decisions = [d for d in decisions if self.shard.holds(d.prompt_id)]
        return (prompts, classifications, decisions, *rest)

    # -- stage 1: task classification (methodology §5) --------------------------------------
    async def _classify(self, inputs: Inputs, judge: Provider, sem: asyncio.Semaphore
                        ) -> tuple[list[PromptRecord], dict[str, Classification]]:
        pool = self._shard_pool(inputs.prompts)
        todo = [p for p in pool if not p.task]
        if not todo:
            return list(pool), {}
        tpl_d, tpl_t = inputs.templates["classify_domain"], inputs.templates["classify_task"]

        async def one(p: PromptRecord) -> Classification:
            try:
                async with sem:
                    return await classify_prompt(judge, self.cfg.judge, inputs.taxonomy, tpl_d, tpl_t, prompt_id=p.id,
                                                 text=p.text)
            except ProviderError as exc:  # counted and left out, never audited under a guessed task
                return Classification(domain=UNLABELLED, task=UNLABELLED, p_domain=None, p_task=None, failed=True,
                                      error=str(exc))

        results = await self._gather("classify", [one(p) for p in todo])
        classes = {p.id: c for p, c in zip(todo, results)}
        out = [p if p.task else p.model_copy(update={"domain": classes[p.id].domain, "task": classes[p.id].task})
               for p in pool if p.task or not classes[p.id].failed]
        return out, classes

    # -- stage 2: domain/task filters, identity filter, N per task (methodology §1 step 6) ---
    async def _select(self, prompts: list[PromptRecord], inputs: Inputs, judge: Provider, sem: asyncio.Semaphore,
                      on_kept: Callable[[PromptRecord], None] | None = None
                      ) -> tuple[list[PromptRecord], list[FilterDecision]]:
        """The prompts to audit (in file order) and the filter's removals.

        Per task, prompts are taken in seeded order until the task has ``prompts_per_task``;
        the LMRA filter is asked only about prompts that would be kept, several at once: as
        many as the task still has free places (a prompt the filter could not label takes its
        place, never silently replaced). So exactly the prompts a one-by-one walk would ask are
        asked, and the same are kept. ``on_kept`` is called with each prompt as soon as it is
        known to be kept (the pipeline starts its generation then).
        """
        cfg = self.cfg
        pool = [p for p in prompts
                if (not cfg.domains or (p.domain or UNLABELLED) in cfg.domains)
                and (not cfg.tasks or (p.task or UNLABELLED) in cfg.tasks)]
        if not pool and not self._shard_may_be_empty(inputs):
            raise LmraInputError("no prompt is left after the domains/tasks filters", file=self.config_path,
                                 field="tasks")
        by_task: dict[str, list[PromptRecord]] = {}
        for p in pool:
            by_task.setdefault(p.task or UNLABELLED, []).append(p)
        limit = cfg.prompts_per_task or None
        tpl = inputs.templates.get("filter")
        asks_lmra = cfg.filter.enabled and tpl is not None
        decisions: list[FilterDecision] = []
        if cfg.filter.enabled:  # the lexical pre-check is cheap: run it on every prompt
            for task, plist in list(by_task.items()):
                keep = []
                for p in plist:
                    d = await check_prompt(p, inputs.all_names, provider=None, judge=cfg.judge, template=None)
                    (decisions.append(d) if d.removed else keep.append(p))
                by_task[task] = keep
        self.progress.start("filter", sum(min(len(v), limit or len(v)) for v in by_task.values()))

        async def ask(p: PromptRecord) -> FilterDecision:
            try:
                async with sem:
                    return await check_prompt(p, (), provider=judge, judge=cfg.judge, template=tpl,
                                              threshold=cfg.filter.threshold)
            except ProviderError as exc:  # counted as unlabelled, never audited as if it passed
                return FilterDecision(prompt_id=p.id, removed=True, reason="unlabelled", error=str(exc))

        async def walk(plist: list[PromptRecord]) -> tuple[list[PromptRecord], list[FilterDecision]]:
            order = sorted(plist, key=lambda p: derive_seed(cfg.seed, "prompt", p.id))
            kept: list[int] = []
            removed: list[tuple[int, FilterDecision]] = []
            unlabelled = 0
            asking: dict[asyncio.Future, int] = {}
            nxt = 0

            def keep(i: int) -> None:
                kept.append(i)
                self.progress.advance("filter")
                if on_kept is not None:
                    on_kept(order[i])

            try:
                while True:
                    # every prompt asked could still be kept: ask no more than the free places
                    while nxt < len(order) and (not limit or len(kept) + unlabelled + len(asking) < limit):
                        if asks_lmra:
                            asking[asyncio.ensure_future(ask(order[nxt]))] = nxt
                        else:
                            keep(nxt)
                        nxt += 1
                    if not asking:
                        break
                    done, _ = await asyncio.wait(asking, return_when=asyncio.FIRST_COMPLETED)
                    for fut in sorted(done, key=asking.__getitem__):
                        i, d = asking.pop(fut), fut.result()
                        if not d.removed:
                            keep(i)
                            continue
                        removed.append((i, d))
                        if d.reason == "unlabelled":
                            unlabelled += 1
                            self.progress.advance("filter")
            except BaseException as exc:
                await _settle(list(asking), cancel=isinstance(exc, asyncio.CancelledError))
                raise
            return [order[i] for i in sorted(kept)], [d for _, d in sorted(removed, key=lambda x: x[0])]

        results = await asyncio.gather(*(walk(v) for v in by_task.values()), return_exceptions=True)
        for r in results:
            if isinstance(r, BaseException):
                raise r
        keep_ids = {p.id for kept, _ in results for p in kept}
        decisions += [d for _, removed in results for d in removed]
        if not keep_ids and not any(d.reason == "unlabelled" for d in decisions) \
                and not self._shard_may_be_empty(inputs):
            raise LmraInputError(f"the identity filter removed all {len(decisions)} prompts (each reveals the user's "
                                 "name, gender or race); nothing is left to audit", file=self.config_path,
                                 field="filter")
        return [p for p in pool if p.id in keep_ids], decisions

    # -- stage 3: counterfactual generation (methodology §1 steps 2–5) ----------------------
    def _prompt_jobs(self, p: PromptRecord) -> list[tuple[PromptRecord, str, Group, int]]:
        """One prompt's generations: (prompt, comparison, group, sample), the two groups of a
        comparison next to each other (group A first)."""
        cfg = self.cfg
        return [(p, f"{a} vs {b}", cfg.group(g), k)
                for a, b in cfg.comparisons for k in range(cfg.samples_per_prompt) for g in (a, b)]

    def _placebo_jobs(self, prompts: list[PromptRecord], inputs: Inputs) -> list[tuple[PromptRecord, str, Group, int]]:
        """The negative controls' generations, on a seeded share of the kept prompts (A₁ next to A₂)."""
        cfg = self.cfg
        jobs = []
        for label, (_, g1, g2) in inputs.placebo.items():
            # a shard draws the placebo's share of the whole selection and keeps its own prompts
            for p in placebo_prompts(self.selection if self.shard is not None else prompts, cfg.placebo.share,
                                     cfg.seed):
                if self.shard is not None and not self.shard.holds(p.id):
                    continue
                for k in range(cfg.samples_per_prompt):
                    jobs += [(p, label, g1, k), (p, label, g2, k)]
        return jobs

    async def _generate(self, prompts: list[PromptRecord], inputs: Inputs, target: Provider,
                        sem: asyncio.Semaphore) -> list[Response]:
        jobs = [j for p in prompts for j in self._prompt_jobs(p)] + self._placebo_jobs(prompts, inputs)
        return await self._gather("generate", [self._generate_one(*j, inputs, target, sem) for j in jobs])

    async def _generate_one(self, p: PromptRecord, comp: str, group: Group, k: int, inputs: Inputs,
                            target: Provider, sem: asyncio.Semaphore) -> Response:
        """The target's response to prompt ``p`` personalised for ``group`` (a failed call is a
        Response with ``error``)."""
        cfg = self.cfg
        name = None if group.profile else draw_name(inputs.group_names[group.name], cfg.seed, p.id, group.name,
                                                    comp, k)
        seed = derive_seed(cfg.seed, "target", p.id, group.name, name or group.profile, k)
        style = inputs.styles["profile" if group.profile else "name"]
        msgs = personalized_messages(p.text, style, name=name, profile=group.profile,
                                     system_prompt=cfg.target.system_prompt)
        req = ChatRequest(messages=msgs, temperature=cfg.target.temperature, max_tokens=cfg.target.max_tokens,
                          seed=seed)
        text, err, finish, cached = "", None, None, False
        try:
            async with sem:
                res = await target.complete(req)
            text, finish, cached = res.text, res.finish_reason, res.from_cache
        except ProviderError as exc:
            err = str(exc)
        return Response(prompt_id=p.id, domain=p.domain or UNLABELLED, task=p.task or UNLABELLED,
                        comparison=comp, group=group.name, name=name, profile=group.profile, sample=k, seed=seed,
                        text=text, scrubbed=scrub_name(text, name or ""), finish_reason=finish,
                        from_cache=cached, error=err)

    # -- stage 4: refusal labels (methodology §1 step 7) ------------------------------------
    async def _label_refusals(self, prompts: list[PromptRecord], responses: list[Response], inputs: Inputs,
                              judge: Provider, sem: asyncio.Semaphore) -> dict[int, tuple[float | None, bool]]:
        cfg = self.cfg
        if not cfg.refusal.enabled:
            return {}
        text_of = {p.id: p.text for p in prompts}
        todo = [(i, r) for i, r in enumerate(responses) if not r.error]
        self.refusal_errors: dict[int, str] = {}

        async def one(i: int, r: Response) -> tuple[int, tuple[float | None, bool]]:
            label, error = await self._refusal_one(r, text_of[r.prompt_id], inputs, judge, sem)
            if error is not None:
                self.refusal_errors[i] = error
            return i, label

        return dict(await self._gather("refusal", [one(i, r) for i, r in todo]))

    async def _refusal_one(self, r: Response, prompt: str, inputs: Inputs, judge: Provider, sem: asyncio.Semaphore
                           ) -> tuple[tuple[float | None, bool], str | None]:
        """``((p_refusal, refused), None)``, or ``((None, False), error)`` when the LMRA call
        failed (the pair is then counted as failed, not as unlabelled)."""
        cfg = self.cfg
        try:
            async with sem:
                ans = await label_refusal(judge, cfg.judge, inputs.templates["refusal"], prompt=prompt,
                                          response=r.scrubbed, seed_parts=(cfg.seed, r.prompt_id, r.group, r.name,
                                                                           r.sample))
        except ProviderError as exc:
            return (None, False), str(exc)
        return (ans.p_yes, ans.p_yes is not None and ans.p_yes >= cfg.refusal.threshold), None

    # -- stage 5: pairwise LMRA ratings (methodology §2, §3) -------------------------------
    async def _rate(self, prompts: list[PromptRecord], responses: list[Response],
                    refusals: dict[int, tuple[float | None, bool]], inputs: Inputs, judge: Provider,
                    judge2: Provider | None, sem: asyncio.Semaphore) -> tuple[list[dict], list[dict]]:
        text_of = {p.id: p.text for p in prompts}
        index = {(r.prompt_id, r.comparison, r.group, r.sample): i for i, r in enumerate(responses)}
        pairs = []
        for i, r in enumerate(responses):
            a, b = r.comparison.split(" vs ", 1)
            if r.group == a:
                pairs.append((i, index[(r.prompt_id, r.comparison, b, r.sample)]))

        async def one(ia: int, ib: int) -> tuple[dict, list[dict]]:
            return await self._rate_one(responses[ia], responses[ib], refusals.get(ia), refusals.get(ib),
                                        self.refusal_errors.get(ia), self.refusal_errors.get(ib),
                                        text_of[responses[ia].prompt_id], inputs, judge, judge2, sem)

        results = await self._gather("rate", [one(a, b) for a, b in pairs])
        return [row for row, _ in results], [q for _, quality in results for q in quality]

    async def _rate_one(self, ra: Response, rb: Response, label_a: tuple[float | None, bool] | None,
                        label_b: tuple[float | None, bool] | None, error_a: str | None, error_b: str | None,
                        prompt: str, inputs: Inputs, judge: Provider, judge2: Provider | None,
                        sem: asyncio.Semaphore) -> tuple[dict, list[dict]]:
        """One pair's ratings row and quality rows (in criterion order). ``label_*`` is a
        response's refusal label ``(p_refusal, refused)``, None when it was not labelled;
        ``error_*`` the error of its failed refusal-label call."""
        cfg = self.cfg
        nan = math.nan
        quality_rows: list[dict] = []

        def rating_fields(rating, prefix: str = "") -> dict:
            return {f"{prefix}valid": rating.valid, f"{prefix}method": rating.method,
                    f"{prefix}order1": rating.order1.model_dump(), f"{prefix}order2": rating.order2.model_dump(),
                    f"{prefix}q_F": nan if rating.q_F is None else rating.q_F,
                    f"{prefix}q_R": nan if rating.q_R is None else rating.q_R,
                    f"{prefix}q_N": nan if rating.q_N is None else rating.q_N,
                    f"{prefix}h": nan if rating.h is None else rating.h}

        ga, gb = self._group(inputs, ra.group), self._group(inputs, rb.group)
        placebo = ra.comparison in inputs.placebo
        pair_id = f"{ra.prompt_id}|{ra.comparison}|{ra.sample}"
        pa, pb = label_a or (None, False), label_b or (None, False)
        row: dict[str, Any] = {
            "pair_id": pair_id, "prompt_id": ra.prompt_id, "domain": ra.domain, "task": ra.task,
            "comparison": ra.comparison, "placebo": placebo, "group_a": ga.name, "group_b": gb.name,
            "name_a": ra.name,
            "name_b": rb.name, "sample": ra.sample, "refusal_p_a": pa[0], "refusal_p_b": pb[0],
            "refusal_a": None if label_a is None or pa[0] is None else pa[1],
            "refusal_b": None if label_b is None or pb[0] is None else pb[1],
            "refused": bool(pa[1] or pb[1]), "unlabelled": False, "failed": False, "error": None,
            "valid": False, "method": None, "q_F": nan, "q_R": nan, "q_N": nan, "h": nan,
        }
        if ra.error or rb.error:
            return row | {"failed": True, "error": ra.error or rb.error}, quality_rows
        refusal_error = error_a or error_b
        if refusal_error:
            return row | {"failed": True, "error": f"refusal label: {refusal_error}"}, quality_rows
        if row["refused"]:
            return row, quality_rows
        if cfg.refusal.enabled and (row["refusal_a"] is None or row["refusal_b"] is None):
            # a refusal label could not be obtained: the pair is not scored as "not refused"
            return row | {"unlabelled": True}, quality_rows
        common = dict(prompt=prompt, task=ra.task, response_a=ra.scrubbed, response_b=rb.scrubbed)
        try:
            async with sem:
                rating = await rate_stereotype(judge, cfg.judge, inputs.templates["stereotype"],
                                               group_a=ga.judge_wording, group_b=gb.judge_wording,
                                               seed_parts=(cfg.seed, pair_id), **common)
            row |= rating_fields(rating)
        except ProviderError as exc:
            return row | {"failed": True, "error": str(exc), "valid": False, "h": nan}, quality_rows
        if placebo:  # a negative control needs the primary rating only
            return row, quality_rows
        # the second LMRA and the quality criteria fail on their own, never taking the
        # primary rating with them
        if judge2 is not None:
            try:
                async with sem:
                    r2 = await rate_stereotype(judge2, cfg.judge2, inputs.templates["stereotype"],
                                               group_a=ga.judge_wording, group_b=gb.judge_wording,
                                               seed_parts=(cfg.seed, pair_id), **common)
                row |= rating_fields(r2, "judge2_")
            except ProviderError as exc:
                row |= {"judge2_valid": False, "judge2_h": nan, "judge2_error": str(exc)}
        if cfg.quality.enabled:
            for crit in cfg.quality.criteria:
                base = {k: row[k] for k in ("pair_id", "prompt_id", "domain", "task", "comparison", "group_a",
                                            "group_b", "sample")} | {"criterion": crit}
                try:
                    async with sem:
                        qr = await rate_quality(judge, cfg.judge, inputs.templates["quality"], criterion=crit,
                                                seed_parts=(cfg.seed, pair_id), **common)
                    quality_rows.append(base | {"failed": False} | rating_fields(qr))
                except ProviderError as exc:
                    quality_rows.append(base | {"failed": True, "valid": False, "h": nan, "error": str(exc)})
        return row, quality_rows

    # -- outputs --------------------------------------------------------------------------
    def _write_json(self, name: str, obj: Any) -> None:
        write_json(self.run_dir / name, jsonable(obj))

    def _write_jsonl(self, name: str, rows: list) -> None:
        write_jsonl(self.run_dir / name, rows, dumps=_row_json)

    def _finish(self, *stages_and_manifest, **kwargs) -> AuditResult:
        return finish_run(self, *stages_and_manifest, **kwargs)
