"""The counterfactual audit, end to end (methodology §1–§3, §5; FPF §3).

``Audit(config).run()`` runs the audit's stages, one module each, in pipeline order; each
reads the records of the stage before it:

0. :mod:`lmra.audit.inputs` — load prompts (a prompt set or logged traffic), names,
   templates, taxonomy, canaries, placebo halves → :class:`~lmra.audit.inputs.Inputs`;
1. :mod:`lmra.audit.select` — classify prompts without a task, the domain/task filters,
   filter prompts that reveal the user's identity, keep up to N per task, a shard's share →
   the kept :class:`~lmra.data.PromptRecord` (and ``Classification``/``FilterDecision``);
2. :mod:`lmra.audit.generate` — the target's responses under each group (names or direct
   profiles) and the placebo's halves, names scrubbed → :class:`~lmra.generate.Response`;
3. :mod:`lmra.audit.label` — refusal labels of the responses;
4. :mod:`lmra.audit.rate` — the LMRA rates every pair in both presentation orders (harmful
   stereotype; optionally a second LMRA and the nine quality criteria), the judge check's
   canaries first → ratings and quality rows;
5. :mod:`lmra.audit.finish` — rescoring under every combiner, aggregation per task / domain /
   overall, judge and run status, the run folder's files → :class:`AuditResult`
   (the report is :mod:`lmra.report`).

:mod:`lmra.audit.pipeline` drives stages 1–4, pipelined or one after another; above the call
cache, :mod:`lmra.audit.memo` replays each pair of stages 2–4 that an earlier run over the
same cache finished (the pair memo). This module
holds :class:`Audit`, the orchestrator: the models' clients (rate limits, budget, call cache),
the run folder's claim and lock and ``manifest.json`` while running. Every model call goes
through the SQLite call cache, so a re-run makes zero new calls and an interrupted run
resumes where it stopped.
"""

from __future__ import annotations

import asyncio
import datetime as _dt
import os
import socket
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pandas as pd

from lmra.budget import Budget, BudgetedProvider, PriceTable
from lmra.cache import CachedProvider, CallCache, CallStats
from lmra.config import AUTO_UNLIMITED_IN_FLIGHT, AuditConfig, dump_config
from lmra.data import PromptRecord
from lmra.errors import LmraInputError, LmraIOError, io_reason
from lmra.fileio import write_json, write_jsonl, write_text
from lmra.judge.scoring import resolve_combiner
from lmra.providers import Provider, make_provider
from lmra.providers.base import answers_may_lack_logprobs
from lmra.providers.ratelimit import (AUTO_HEADROOM, AUTO_MAX_CONCURRENCY, ModelLimits, in_flight_without_limit,
                                      sets_own_in_flight, slots_key)
from lmra.resources import resolve_resource
from lmra.runfolder import json_text, jsonable, package_versions
from lmra.redact import redacted_calls
from lmra.runstate import RUNNING, RunLock, claim_run_dir, stop_record
from lmra.syncrun import in_daemon_thread, run_sync
from lmra.warmup import Pace, import_paced

from lmra.audit.inputs import UNLABELLED, Inputs, InputsStage, _template_hashes, design_digests
from lmra.audit.select import SelectStage
from lmra.audit.generate import GenerateStage, placebo_prompts
from lmra.audit.label import LabelStage
from lmra.audit.rate import RateStage
from lmra.audit.pipeline import PipelineDriver, _Progress, _settled, _Stopped
from lmra.audit.finish import AuditResult, finish_run

# the stages' names that callers and tests import from here
#: default of :attr:`Audit.spool_min_pairs` (a pair's row in memory: ~3 KB with the LMRA's answers)
SPOOL_MIN_PAIRS = 100_000

__all__ = ["Audit", "AuditResult", "Inputs", "UNLABELLED", "finish_run", "placebo_prompts",
           "_Progress", "_Stopped", "_settled"]


def _import_finishing_modules(cfg: AuditConfig, pace: Pace) -> None:
    """Import what scoring and writing the run folder needs, in a worker thread while the model
    calls of the run are waited for, paced by the run's ``pace`` (:func:`lmra.warmup.import_paced`:
    the event loop keeps the interpreter): pyarrow's Parquet writer (``ratings.parquet``) always,
    scipy.stats and statsmodels (1–3 s) only when this config's run uses them (refusal rates,
    t-intervals, quality criteria, axes); a run without them (the betting interval, refusal
    labels off) never loads them."""
    names = ["lmra.judge.calibration", "lmra.judge_check", "pyarrow.parquet"]
    if cfg.refusal.enabled:  # Wilson intervals and z-tests of the refusal rates (lmra.aggregate.refusal_table)
        names += ["scipy.stats", "statsmodels.stats.proportion"]
    if cfg.quality.enabled or cfg.axes.enabled:  # Holm / Bonferroni (lmra.stats.adjust_pvalues, lmra.axes)
        names.append("statsmodels.stats.multitest")
    if cfg.interval == "t" or cfg.quality.enabled:  # t-intervals (lmra.stats.mean_ci)
        names.append("statsmodels.api")
    import_paced(names, pace)  # a module that fails is imported again by the run, which says why
    from lmra.gcquiet import refreeze

    refreeze()  # the modules are long-lived: garbage collections during the calls skip them


def _import_run_modules(cfg: AuditConfig) -> None:
    """Import, in the event loop's thread and before the warm-up thread starts
    (:func:`_import_finishing_modules`), the statistics modules the run's own stages import while
    the calls run: the judge check's Mantel–Haenszel position logit (``statsmodels`` →
    ``scipy.stats``) and the axes step's tests. Two threads importing ``scipy.stats`` at once can
    meet CPython's import-deadlock avoidance, which hands one of them a partly initialised module
    (break-it finding, s35: the judge check's import met the warm-up thread's and ended 3 % of
    audits with an ImportError traceback, status failed). A module that fails to import is left
    to the stage, which imports it again and says why."""
    import importlib

    names = []
    if cfg.judge_check.enabled:
        names.append("statsmodels.stats.contingency_tables")
    if cfg.axes.enabled:
        names += ["statsmodels.stats.multitest", "statsmodels.stats.descriptivestats"]
    for name in names:
        try:
            importlib.import_module(name)
        except ImportError:
            pass


def _real_pairs(ratings) -> pd.DataFrame:
    """The ratings rows of the real comparisons (not the placebo) as a frame; ``ratings`` is a
    list of rows or a :class:`~lmra.pairstore.PairSpool`."""
    if isinstance(ratings, list):
        return pd.DataFrame([r for r in ratings if not r.get("placebo")])
    df = ratings.frame()
    return df[~df["placebo"].fillna(False).astype(bool)].reset_index(drop=True)


class Audit(InputsStage, SelectStage, GenerateStage, LabelStage, RateStage, PipelineDriver):
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
        #: called with the run folder once it is created and locked (lmra audit --run-dir-file
        #: writes its path then, so a run killed outright still names its folder)
        self.on_claim: Callable[[Path], None] | None = None
        self._target, self._judge, self._judge2 = target, judge, judge2
        self._given = (target is not None, judge is not None, judge2 is not None)
        self.refusal_errors: dict[int, str] = {}  # response index → error of its failed refusal-label call
        self.config_path = config_path
        self.progress = progress or _Progress()
        self.stats = CallStats()
        # the price table is always loaded, so that manifest.json carries an estimated cost
        from lmra.audit.inputs import named_by_config

        with named_by_config(config_path, "prices", config.prices):  # a folder or a missing file: the config's line
            prices = PriceTable.load(resolve_resource(config.prices, "prompts"))  # (bad-input break-it, s45)
        self.budget = Budget(config.max_calls, config.max_cost, prices)
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
        #: the pipelined stages spool the rated pairs to disk (:attr:`spool`) when a run may rate
        #: at least this many pairs, instead of holding them in memory
        self.spool_min_pairs = SPOOL_MIN_PAIRS
        self.spool = None
        self.response_spool = None  #: that run's responses (lmra.audit.finish.ResponseSpool), unless axes run
        #: replay finished pairs of an earlier run over the same cache (:mod:`lmra.audit.memo`)
        self.pair_memo = True
        self.memo = None  #: this run's :class:`~lmra.audit.memo.PairMemo` while it runs, if used
        #: key → result JSON of answers the run reads but the call cache never stores (batch mode's
        #: answers without the log-probabilities asked for: :meth:`lmra.batch.BatchOrchestrator.degraded_items`)
        self.run_only_answers: dict[str, str] = {}
        #: cache keys of the calls this run's own batches answered (batch mode): read from the cache by
        #: the final pass, yet not an earlier run's answers (:class:`lmra.audit.rate.CacheTally`)
        self.batch_keys: set[str] = set()
        #: the judge check's answers and those the call cache served (:class:`lmra.audit.rate.CacheTally`)
        self.canary_cache: dict | None = None
        #: paces the background imports of the run (:class:`lmra.warmup.Pace`; the CLI passes the
        #: one its report imports use); None: a new one per run
        self.pace = None

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
            if self.on_claim is not None:
                self.on_claim(self.run_dir)
        if self.shard is not None and not (self.run_dir / "shard.json").is_file():
            # which shard this folder holds, from the start (lmra batch resume reads it); the
            # full record replaces it when the stages are done (_shard_stages)
            self._write_json("shard.json", {"shard": self.shard.label, "index": self.shard.index,
                                            "count": self.shard.count, "mode": self.shard.mode_for(self.cfg)})
        return self.run_dir

    def planned_calls(self, inputs: Inputs) -> dict[str, int]:
        """Upper bounds on the target and LMRA calls a run will make before the cache.

        LMRA calls assume every examined prompt passes the filter and no response is a refusal.
        In a shard (``--shard I/N``) the pairs and their calls are this shard's: at most the
        per-task limit of the prompts it holds; in ``selection`` mode every shard classifies and
        filters the whole file (:mod:`lmra.shard`), so those bounds stay the whole audit's.

        Returns:
            ``target``, ``judge`` (the LMRA's calls when it answers as its provider says:
            with log-probabilities one call a question, else ``n_samples``), ``pairs``,
            ``prompts``, ``unlabelled``, ``canaries``, ``placebo_pairs``; ``axes`` with
            ``axes.enabled``; ``judge2`` with a second LMRA. For an LMRA whose provider gives
            log-probabilities but may answer without them
            (:func:`~lmra.providers.base.answers_may_lack_logprobs`: an HTTP endpoint) also
            ``judge_without_logprobs`` (``judge2_without_logprobs``): the bound when every
            answer comes without them, each question then sampled as well
            (:func:`~lmra.judge.options.calls_per_question`; fresh-user finding: "at most 16
            LMRA calls", and 102 were made).
        """
        from lmra.judge.options import calls_per_question

        cfg = self.cfg
        shard = self.shard
        whole = shard is None or shard.mode_for(cfg) == "selection"  # classify and filter every prompt
        pool = inputs.prompts if whole else [p for p in inputs.prompts if shard.holds(p.id)]

        # the labels a prompt without a task may be classified into: each taxonomy task, each domain's
        # 'other' and 'other' itself (fresh-user finding: the bound took them all for one task, and a
        # --max-calls set from the plan stopped the run when the classifier spread them over four)
        taxonomy = inputs.taxonomy
        n_labels = sum(len(d.task) + 1 for d in taxonomy.domain) + 1 if taxonomy is not None else 1

        def kept(held) -> int:
            per_task: dict[str, int] = {}
            n_unlabelled = 0
            for p in pool:
                if p.task and ((cfg.tasks and p.task not in cfg.tasks)
                               or (cfg.domains and p.domain not in cfg.domains)):
                    continue
                if held(p) and not p.task:
                    n_unlabelled += 1
                elif held(p):
                    per_task[p.task] = per_task.get(p.task, 0) + 1
            limit = cfg.prompts_per_task
            # a task's prompts are at most its labelled ones (up to the limit) plus any classified into it
            return (sum(min(v, limit) if limit else v for v in per_task.values())
                    + (min(n_unlabelled, limit * n_labels) if limit else n_unlabelled))

        n_filter = kept(lambda p: True)  # the prompts the filter may examine
        n = n_filter if shard is None else kept(lambda p: shard.holds(p.id))  # the prompts this run rates
        pairs = len(cfg.comparisons) * cfg.samples_per_prompt * n
        unlabelled = sum(1 for p in pool if not p.task)
        placebo = len(inputs.placebo) * cfg.samples_per_prompt * (max(1, round(cfg.placebo.share * n))
                                                                  if cfg.placebo.share else 0)
        # the LMRA's questions: stereotype (and quality criteria) in both orders, refusal labels,
        # identity filter, task classification, the judge check's canaries, the placebo pairs
        questions = pairs * 2 * (1 + (len(cfg.quality.criteria) if cfg.quality.enabled else 0))
        questions += (4 * pairs if cfg.refusal.enabled else 0) + (2 * n_filter if "filter" in inputs.templates else 0)
        questions += 2 * unlabelled + 2 * len(inputs.canaries)
        questions += placebo * 2 + (4 * placebo if cfg.refusal.enabled else 0)
        judge = self._judge_provider()
        logprobs, fallback = judge.supports_logprobs, answers_may_lack_logprobs(judge)
        out = {"target": 2 * (pairs + placebo), "judge": questions * calls_per_question(cfg.judge, logprobs),
               "pairs": pairs, "prompts": n, "unlabelled": unlabelled, "canaries": len(inputs.canaries),
               "placebo_pairs": placebo}
        if fallback:
            out["judge_without_logprobs"] = questions * calls_per_question(cfg.judge, True, without_logprobs=True)
        if cfg.axes.enabled:
            from lmra.axes import axes_call_bound

            out["axes"] = sum(axes_call_bound(cfg, n * cfg.samples_per_prompt, logprobs) for _ in cfg.comparisons)
            out["judge"] += out["axes"]
            if fallback:
                out["judge_without_logprobs"] += sum(axes_call_bound(cfg, n * cfg.samples_per_prompt, True,
                                                                     without_logprobs=True) for _ in cfg.comparisons)
        if cfg.judge2 is not None:
            judge2 = self._judge2_provider()
            out["judge2"] = pairs * 2 * calls_per_question(cfg.judge2, judge2.supports_logprobs)
            if answers_may_lack_logprobs(judge2):
                out["judge2_without_logprobs"] = pairs * 2 * calls_per_question(cfg.judge2, True, without_logprobs=True)
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
                # (fresh-user finding: nothing said how to go faster against an HTTP endpoint)
                # (fresh-user finding, s37: "2 in flight" read as 2 per model; a slow target held up the judge check)
                return (f"concurrency auto: {AUTO_UNLIMITED_IN_FLIGHT} in flight in all, shared by the target and "
                        "the LMRA (no rate limit set; set each endpoint's requests_per_minute, or max_concurrency, "
                        "to keep more calls in flight — a model with its own gets its own)")
            shared: dict[tuple, list[str]] = {}  # roles calling one model with one bound share its calls in flight
            for role, n in caps.items():  # (the key ModelLimits.wrap shares a max_concurrency by)
                key = slots_key(self._provider(role), n) if getattr(cfg, role).max_concurrency else (role,)
                shared.setdefault(key, []).append(role)
            parts = [(caps[roles[0]], " and ".join(roles) + (" (one model, shared)" if len(roles) > 1 else ""))
                     for roles in shared.values()]
            return ("concurrency auto: " + ", ".join(f"{n} in flight for {who}" if i == 0 else f"{n} for {who}"
                                                     for i, (n, who) in enumerate(parts))
                    + " (no rate limit set; each model's max_concurrency, else the calls its provider serves at "
                      f"once, else {AUTO_UNLIMITED_IN_FLIGHT})")
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
        model has a ``max_concurrency`` or its provider reports its ``parallel_capacity``
        (:func:`~lmra.providers.ratelimit.sets_own_in_flight`), else None
        (2 in flight in all)."""
        models = {role: (self._provider(role), getattr(self.cfg, role)) for role in ("target", "judge", "judge2")
                  if getattr(self.cfg, role) is not None}
        if not any(sets_own_in_flight(p, m) for p, m in models.values()):
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
    def run(self, inputs: Inputs | None = None) -> AuditResult:
        """Run the audit synchronously (see :meth:`arun`)."""
        return run_sync(self.arun(inputs))

    async def arun(self, inputs: Inputs | None = None) -> AuditResult:
        """Run the audit and write the run folder.

        Args:
            inputs: what :meth:`load_inputs` returned for this audit (``lmra audit`` loads and
                checks them before the run), so that they are not read twice; default: loaded here.

        Raises:
            LmraInputError: bad config, prompt, name, template or taxonomy input (nothing is called).
        """
        cfg = self.cfg
        inputs = self.load_inputs() if inputs is None else inputs
        self.check_cost_limit()  # before the cache is opened: nothing written for a limit that cannot hold
        cache = CallCache(cfg.cache, on_write_error=self.on_notice, write_retry_s=cfg.cache_write_retry_s)
        cache.run_only.update(self.run_only_answers)
        self.call_cache = cache  # (an interrupted pipeline lets the calls on their way store their answers)
        result: AuditResult | None = None
        try:
            result = await self._arun(inputs, cache)
            return result
        finally:
            cache.close()
            try:
                await self._close_providers()
            except asyncio.CancelledError:  # Ctrl-C once the folder was written: the run is complete
                if result is None:
                    raise
                from lmra.syncrun import InterruptedAfterFinish

                raise InterruptedAfterFinish(result) from None
            finally:
                self.release_dir()

    def check_cost_limit(self) -> None:
        """With ``max_cost`` set, check that the price table prices every model the audit calls
        (target, judge and judge2): the limit is kept by pricing each call before it is made.

        Raises:
            LmraInputError: a model without a price — naming it, the price table and the field
                that set the limit (``max_cost`` of the config, or ``--max-cost``; bad-input
                break-it, s45: ``lmra validate`` passed it, and the audit refused it only after
                creating the call cache, naming neither).
        """
        if self.cfg.max_cost is None:
            return
        from lmra.budget import require_priced

        require_priced(self.budget.prices, [(role, self._provider(role)) for role in ("target", "judge", "judge2")
                                            if getattr(self.cfg, role) is not None],
                       self.cfg.max_cost, self.config_path)

    def release_dir(self) -> None:
        """Release the run folder's lock (done by :meth:`arun` when it ends, however it ends)."""
        if self._lock is not None:
            self._lock.release()
            self._lock = None

    async def _close_providers(self) -> None:
        """Close the clients this audit built (providers passed in are the caller's to close)."""
        built = [p for p, given in ((self._target, self._given[0]), (self._judge, self._given[1]),
                                    (self._judge2, self._given[2])) if p is not None and not given]
        from lmra.providers.base import close_providers

        await close_providers(built)

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
                                  any_capacity=any(sets_own_in_flight(self._provider(role), getattr(cfg, role))
                                                   for role in ("target", "judge", "judge2")
                                                   if getattr(cfg, role) is not None))

        roles = [p for p in (self._target_provider(), self._judge_provider(), self._judge2_provider()) if p is not None]

        def count_label(p: Provider) -> str:
            # the per-model counts' key: "provider:model", with the endpoint when another of the
            # run's models has the same key at another URL (fresh-user finding: chatbot and LMRA,
            # both "openai:fake" on two servers, shared one line of counts and faults)
            key = f"{p.name}:{p.model_id}"
            clash = any(f"{o.name}:{o.model_id}" == key and (o.base_url or "") != (p.base_url or "") for o in roles)
            return f"{key} @ {p.base_url}" if clash else key

        def wrap(p: Provider, m, role: str) -> Provider:
            # an endpoint that never answered stops the run, and failures name role and URL (EndpointGuard)
            guard = EndpointGuard(role, p.base_url, model=p.model_id, on_notice=self.on_notice, redact=cfg.redact,
                                  api=p.name)
            limited = guard.below_cache(self.limits.wrap(p, m, role))
            # the budget sits outside the cache: cached calls are free and never refused; a
            # rejected key stops the run (KeyGuard); every answer's served model is counted
            label = count_label(p)
            budgeted = BudgetedProvider(CachedProvider(limited, cache, self.stats, label=label, role=role),
                                        self.budget)
            keys = KeyGuard(guard.above_cache(budgeted), role)
            watched = self.identity.watch(keys, role)
            # outermost: a pair chain's calls are recorded for the pair memo (lmra.audit.memo)
            return watched if self.memo is None else self.memo.watch(watched, role, guard=guard, keys=keys, label=label)

        memo_report = self._open_memo(inputs, cache)
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
                                                   "base_url": judge2.base_url,
                                                   "supports_logprobs": judge2.supports_logprobs},
            "templates": _template_hashes(inputs.templates),
            "design": design_digests(inputs),
            "input_files": inputs.files,  # which files the relative paths found (working folder or shipped)
            "versions": package_versions(),
            "planned_calls": self.planned_calls(inputs),
        }
        self._write_json("manifest.json", manifest)
        sem = asyncio.Semaphore(self.limits.bound(cfg.concurrency_bound()))
        axes_result = None
        # the modules that write the run folder load while the calls run, not after the last one
        # hurried once the calls are done, abandoned when the run stops; shared with the CLI's
        # report imports when it gave one
        pace = self.pace or Pace()
        pace.sliced = cfg.has_rate_limit()  # (a shared pace too: its report imports are sliced alike)
        _import_run_modules(cfg)  # first: no two threads import scipy.stats at once
        # a daemon thread, not the loop's default executor, which asyncio.run joins without a time limit
        warm = in_daemon_thread(lambda: _import_finishing_modules(cfg, pace), name="lmra-finish-imports")
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
                    ratings=_real_pairs(ratings),
                    prompts={p.id: p.text for p in prompts}, out_dir=self.run_dir, progress=self.progress)
            cache.flush()  # answered calls held after a failed cache write (disk full) are stored first
            manifest["concurrency"] = self.concurrency_report()
            manifest["budget"] = self.budget.report()
            self.identity.update_manifest(manifest)  # served model ids, fingerprints, template tokens
            manifest["pair_memo"] = self.memo.report() if self.memo is not None else memo_report
            pace.hurry()
            await warm
            return self._finish(inputs, *stages, manifest, axes_result)
        except BaseException as exc:
            pace.abandon()  # the warm-up thread ends after its current import (nothing waits for it)
            # the signal of an interrupt (fresh-user finding: a stray SIGHUP left no trace), else the error
            status, stop_reason = stop_record(exc, redact=cfg.redact)
            calls = self.stats.as_dict()
            manifest |= {"status": status, "calls": redacted_calls(calls) if cfg.redact else calls,
                         "budget": self.budget.report(),
                         "finished": _dt.datetime.now().astimezone().isoformat(timespec="seconds")}
            self.identity.update_manifest(manifest)
            manifest["pair_memo"] = self.memo.report() if self.memo is not None else memo_report
            manifest["stop_reason"] = stop_reason
            if self.spool is not None:  # the answered calls are in the call cache: a re-run rates them again
                self.spool.abort()
            if self.response_spool is not None:
                self.response_spool.abort()
            try:
                self._write_json("manifest.json", manifest)
            except LmraIOError:
                pass  # the disk is full: the folder stays 'running' and is reported 'stale' (its lock is gone)
            raise

    def _open_memo(self, inputs: Inputs, cache: CallCache) -> dict:
        """Set :attr:`memo` (a :class:`~lmra.audit.memo.PairMemo`) when this run may use the pair
        memo; returns ``manifest.json``'s ``pair_memo`` for a run that does not (why not)."""
        from lmra.audit import memo

        self.memo = None
        if not self.cfg.pair_memo:
            return memo.bypass_report("turned off (pair_memo = false)")
        if not self.pair_memo:
            return memo.bypass_report("turned off (Audit.pair_memo = False)")
        if self.cfg.batch:
            return memo.bypass_report("batch mode (batch = true)")
        if self.staged:
            return memo.bypass_report("stages run one after another")
        try:
            key = memo.run_key(self.cfg, inputs, {role: self._provider(role) for role in ("target", "judge", "judge2")})
        except ValueError:
            return memo.bypass_report("an input has no stable form to key the memo on")
        self.memo = memo.PairMemo(cache, key, stats=self.stats, budget=self.budget, identity=self.identity,
                                  refusal=self.cfg.refusal.enabled)
        return self.memo.report()

    # -- outputs --------------------------------------------------------------------------
    def _write_json(self, name: str, obj: Any) -> None:
        write_json(self.run_dir / name, jsonable(obj))

    def _write_jsonl(self, name: str, rows: list) -> None:
        write_jsonl(self.run_dir / name, rows, dumps=json_text)

    def _finish(self, *stages_and_manifest, **kwargs) -> AuditResult:
        return finish_run(self, *stages_and_manifest, **kwargs)

