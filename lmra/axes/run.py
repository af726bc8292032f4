"""Axes run: the whole axes-of-difference algorithm on one audit run, stage after stage
(pairs → brainstorm → consolidate → label → select → harm check → outputs), with the LMRA
behind the call cache, rate limits and budget."""

from __future__ import annotations

import asyncio
import math
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import pandas as pd

from lmra.redact import redacted_calls
from lmra.axes.brainstorm import brainstorm_features
from lmra.axes.calls import NoProgress
from lmra.axes.consolidate import add_extra_axes, candidate_axes, consolidate_candidates
from lmra.axes.embed import require_embed_extra
from lmra.axes.harm import check_harm
from lmra.axes.label import combined_labels, label_diagnostics, label_test_pairs
from lmra.axes.outputs import AxesResult
from lmra.axes.pairs import AxesInputs, prepare_axes
from lmra.axes.plan import planned_axes_calls
from lmra.axes.publish import axes_status, publish_axes_outputs
from lmra.axes.select import TABLE_COLUMNS, select_axes
from lmra.cache import CachedProvider, CallCache, CallStats
from lmra.config import AuditConfig
from lmra.providers import Provider, make_provider
from lmra.providers.base import answers_may_lack_logprobs
from lmra.providers.ratelimit import wrapped_bound
from lmra.syncrun import run_sync
from lmra.templates import load_template


async def arun_axes(cfg: AuditConfig, judge: Provider | None = None, *, run_dir: str | Path | None = None,
                    responses: pd.DataFrame | None = None, ratings: pd.DataFrame | None = None,
                    prompts: Mapping[str, str] | str | Path | None = None, out_dir: str | Path | None = None,
                    inputs: AxesInputs | None = None, cache: CallCache | None = None, progress: Any = None,
                    announce: Callable[[dict], None] | None = None,
                    on_notice: Callable[[str], None] | None = None) -> AxesResult:
    """Run the axes-of-difference algorithm (methodology §4; FPF §3.4) — async version of
    :func:`run_axes`; call this one from inside a running event loop (e.g. ``Audit.arun``).

    Args:
        cfg: the audit config; its ``axes`` section holds the settings, ``judge`` the LMRA,
            ``cache`` the call-cache path, ``concurrency`` the calls in flight, ``alpha`` the
            confidence level of the intervals.
        judge: the LMRA provider (default: built from ``cfg.judge``). Used as is when it is, or
            wraps (through ``.inner``, e.g. the audit's budgeted judge), a
            :class:`~lmra.cache.CachedProvider`; otherwise wrapped in ``cfg.judge``'s rate limits
            and the call cache.
        run_dir: a finished run folder to read (and, by default, to write the outputs into).
        responses, ratings: in-memory run frames instead of the folder's files.
        prompts: prompt id → text or a prompt file (default: ``cfg.prompts``).
        out_dir: where to write :data:`OUTPUT_FILES` (default ``run_dir``; None and no
            ``run_dir`` = write nothing), as one set that replaces the set there as a whole —
            unless this run is partial and that folder holds a complete set: then it stays,
            and the files go to its ``axes-partial/`` (:func:`~lmra.axes.publish.publish_axes_outputs`;
            ``result.publication`` says where they went).
        inputs: a ready :func:`prepare_axes` result (skips loading).
        cache: an open call cache (default: open ``cfg.cache``).
        progress: object with ``start(stage, total)`` and ``advance(stage)`` (stages
            ``axes-brainstorm``, ``axes-label``, ``axes-harm``).
        announce: called with :func:`planned_axes_calls` before the first LMRA call.
        on_notice: receives one-line warnings about the LMRA's endpoint (its answers come
            without the log-probabilities asked for: :class:`~lmra.providers.endpoint.EndpointGuard`),
            when this run wraps the judge itself (not a judge already behind the audit's cache).

    Returns:
        :class:`AxesResult` (``summary["status"]``: ``complete``, or ``partial`` when more
        than ``cfg.max_failed_share`` of a comparison's labels failed, or a comparison had no
        usable brainstorm answer and no extra axis: :func:`~lmra.axes.publish.axes_status`).

    Raises:
        LmraInputError: bad inputs (see :func:`prepare_axes`), or the embed extra missing when
            ``axes.embed_preclustering`` is on.
    """
    ax = cfg.axes
    progress = progress or NoProgress()
    inputs = inputs or prepare_axes(cfg, run_dir=run_dir, responses=responses, ratings=ratings, prompts=prompts)
    tpls = {k: load_template(f"axes_{k}", "judge") for k in ("brainstorm", "consolidate", "label", "harm")}
    if ax.embed_preclustering:
        require_embed_extra()  # fail before any LMRA call when the extra is missing
    built = judge is None  # closed at the end (its HTTP client's connections); a judge passed in is the caller's
    judge, stats, own_cache = _axes_judge(cfg, judge, cache, on_notice)
    plan = planned_axes_calls(cfg, inputs, judge.supports_logprobs, fallback=answers_may_lack_logprobs(judge))
    if announce is not None:
        announce(plan)
    # calls in flight as the judge's limits hold them (concurrency = "auto": sized as in an audit)
    sem = asyncio.Semaphore(wrapped_bound(judge, cfg.concurrency))
    seed = inputs.seed
    tables, label_frames, feature_rows = [], [], []
    candidates: dict[str, dict] = {}
    comp_summary: dict[str, dict] = {}
    try:
        progress.start("axes-brainstorm", sum(len(d) for d, _ in inputs.splits.values()))
        brainstorms = {}
        for comp, (disc, _) in inputs.splits.items():
            brainstorms[comp] = await brainstorm_features(judge, cfg, tpls["brainstorm"], disc, seed, sem, progress)
        merged = {}
        for comp, (feats, _) in brainstorms.items():
            merged[comp] = await consolidate_candidates(judge, cfg, tpls["consolidate"], feats, seed, comp)
        axis_lists = {c: candidate_axes(merged[c]["axes"], ax.extra_axes) for c in inputs.splits}
        progress.start("axes-label", sum(len(t) * len(axis_lists[c][0]) for c, (_, t) in inputs.splits.items()))
        for comp, (disc, test) in inputs.splits.items():
            names, sources = axis_lists[comp]
            labels = await label_test_pairs(judge, cfg, tpls["label"], test, names, seed, sem, progress)
            labels, combiner, combiner_note = combined_labels(labels, cfg.judge.combiner, judge.supports_logprobs)
            ga, gb = (test or disc)[0].group_a, (test or disc)[0].group_b
            tab = select_axes(labels, names, group_a=ga, group_b=gb, alpha=ax.alpha, correction=ax.correction,
                              test=ax.test, ci_alpha=cfg.alpha, min_test_pairs=ax.min_test_pairs, sources=sources)
            tab.insert(0, "comparison", comp)
            tab["harmful_p"] = math.nan
            tab["harmful"] = None
            tables.append(tab)
            label_frames.append(labels)
            feats, bcounts = brainstorms[comp]
            feature_rows += feats
            cand = merged[comp]
            add_extra_axes(cand, names, sources)
            cand["brainstorm"] = bcounts
            candidates[comp] = cand
            comp_summary[comp] = {"group_a": ga, "group_b": gb, **inputs.counts[comp],
                                  "combiner": combiner, "combiner_note": combiner_note,
                                  "n_discovery_pairs": len(disc), "n_discovery_prompts": len({p.prompt_id for p in disc}),
                                  "n_test_pairs": len(test), "n_test_prompts": len({p.prompt_id for p in test}),
                                  "brainstorm": {k: v for k, v in bcounts.items()
                                                 if k not in ("invalid_pairs", "answers")},
                                  "n_features": len(feats), "consolidation_path": cand["path"],
                                  "preclustering": cand["preclustering"], "n_candidate_axes": len(names),
                                  # one label per (test pair, axis): failed after every retry / unusable
                                  "n_labels": len(labels), "n_labels_failed": int(labels["failed"].sum()) if len(labels)
                                  else 0, "n_labels_invalid": int((~labels["valid"] & ~labels["failed"]).sum())
                                  if len(labels) else 0,
                                  # the LMRA's answers to the label questions, as the audit's (valid-option mass, …;
                                  # axes conformance check, s45: the axes step had no such line)
                                  "diagnostics": label_diagnostics(labels)}
        table = pd.concat(tables, ignore_index=True) if tables else pd.DataFrame(columns=TABLE_COLUMNS)
        if ax.harm_check:
            await check_harm(judge, cfg, tpls["harm"], table, seed, sem, progress)
        for c in comp_summary:
            ov = table[(table["comparison"] == c) & (table["level"] == "overall")]
            comp_summary[c] |= {"n_axes_tested": int(ov["tested"].sum()), "n_selected": int(ov["selected"].sum())}
    finally:
        if own_cache is not None:
            own_cache.close()
        if built:
            from lmra.providers.base import close_providers

            await close_providers([judge])
    labels_df = pd.concat(label_frames, ignore_index=True) if label_frames else pd.DataFrame()
    summary = {"schema_version": 1, "settings": ax.model_dump(mode="json") | {"seed": seed},
               "confidence": 1 - cfg.alpha, "judge": {"provider": judge.name, "model": judge.model_id,
                                                      "supports_logprobs": judge.supports_logprobs},
               "planned_calls": plan, "comparisons": comp_summary,
               # a redacted audit's axes step: error messages may quote the responses (lmra.redact)
               "calls": redacted_calls(stats.as_dict()) if getattr(cfg, "redact", False) else stats.as_dict()}
    # partial: more than max_failed_share of a comparison's labels failed, or a comparison measured
    # nothing (no usable brainstorm answer, no extra axis) (lmra.axes.publish)
    summary |= {"max_failed_share": cfg.max_failed_share, "status": axes_status(summary, cfg.max_failed_share)}
    result = AxesResult(table=table[[c for c in TABLE_COLUMNS if c in table.columns]], candidates=candidates,
                        features=pd.DataFrame(feature_rows), labels=labels_df, summary=summary, stats=stats)
    target = out_dir if out_dir is not None else run_dir
    if target is not None:
        result.publication = publish_axes_outputs(result, target)
        result.out_dir = result.publication.out_dir
    return result


def _axes_judge(cfg: AuditConfig, judge: Provider | None, cache: CallCache | None,
                on_notice: Callable[[str], None] | None = None) -> tuple[Provider, CallStats, CallCache | None]:
    """The LMRA an axes run calls: ``judge`` (default built from ``cfg.judge``) as is when it is
    or wraps a :class:`CachedProvider`, else behind ``cfg.judge``'s rate limits, the call cache
    and the budget. Returns (provider, its call stats, the cache opened here or None).
    """
    own_cache = None
    if judge is None:
        judge = make_provider(cfg.judge, field="judge")
    cached = _find_cached(judge)
    if cached is None:
        check_axes_cost_limit(cfg, judge=judge)  # before the cache is opened (known since s45)
    if cached is not None:  # already behind the call cache (e.g. the audit's judge): use as is
        stats = cached.stats
    else:
        from lmra.providers.ratelimit import limit_model

        if cache is None:
            # a full disk or a damaged file is said as in an audit (it was silent here)
            cache = own_cache = CallCache(cfg.cache, on_write_error=on_notice)
        stats = CallStats()
        from lmra.providers.endpoint import EndpointGuard

        limited, _ = limit_model(judge, cfg.judge, cfg.concurrency, "judge")
        # a judge endpoint that never answers stops the axes run (exit 1), as it stops an audit
        # (and answers without log-probabilities are said once, as in an audit and the judge check)
        guard = EndpointGuard("judge", limited.base_url, model=limited.model_id, on_notice=on_notice,
                              redact=getattr(cfg, "redact", False), api=limited.name)
        judge = guard.above_cache(CachedProvider(guard.below_cache(limited), cache, stats))
        from lmra.providers.keys import KeyGuard

        judge = KeyGuard(judge, "judge")  # a rejected key stops it at its first call, as an audit (was: 8 calls)
        if cfg.max_calls is not None or cfg.max_cost is not None:
            # as in the audit, the budget sits outside the cache: cached calls are free
            from lmra.budget import Budget, BudgetedProvider, PriceTable
            from lmra.resources import resolve_resource

            judge = BudgetedProvider(judge, Budget(cfg.max_calls, cfg.max_cost,
                                                   PriceTable.load(resolve_resource(cfg.prices, "prompts"))))
    return judge, stats, own_cache


def check_axes_cost_limit(cfg: AuditConfig, config_path: str | Path | None = None, *,
                          judge: Provider | None = None) -> None:
    """With ``max_cost`` set, check that the price table (``cfg.prices``) prices the LMRA
    (``judge``, default built from ``cfg.judge`` and closed here) before anything is written —
    ``lmra axes`` calls it before it creates its folder and call cache (known since s45: the
    refusal came after both were created).

    Raises:
        LmraInputError: the LMRA is not priced (:func:`lmra.budget.require_priced`: naming it,
            the table, and ``max_cost`` of ``config_path`` or ``--max-cost``).
    """
    if cfg.max_cost is None:
        return
    from lmra.budget import PriceTable, require_priced
    from lmra.resources import resolve_resource

    prices = PriceTable.load(resolve_resource(cfg.prices, "prompts"))
    if judge is not None:
        require_priced(prices, [("judge", judge)], cfg.max_cost, config_path, caller="lmra axes")
        return
    built = make_provider(cfg.judge, field="judge")
    try:
        require_priced(prices, [("judge", built)], cfg.max_cost, config_path, caller="lmra axes")
    finally:
        from lmra.providers.base import close_providers

        run_sync(close_providers([built]))


def _find_cached(provider: Any) -> CachedProvider | None:
    """The :class:`CachedProvider` in a chain of wrappers (``.inner``), or None."""
    seen = 0
    while provider is not None and seen < 10:
        if isinstance(provider, CachedProvider):
            return provider
        provider, seen = getattr(provider, "inner", None), seen + 1
    return None


def run_axes(cfg: AuditConfig, judge: Provider | None = None, **kwargs: Any) -> AxesResult:
    """Run the axes-of-difference algorithm synchronously (see :func:`arun_axes` for the
    arguments; use that one inside a running event loop).

    Example::

        cfg, _, _ = read_run("reports/20260101-000000-default")
        result = run_axes(cfg, run_dir="reports/20260101-000000-default")
        result.table[result.table.selected]
    """
    return run_sync(arun_axes(cfg, judge, **kwargs))
