"""Power planning: how many prompts per task an audit needs (methodology §8 "Power").

The unit is the prompt: its score is the mean pair score h over its samples
(:func:`lmra.runfolder.prompt_scores`), so with ``samples_per_prompt = 1`` it is the pair
score itself and ``sd`` is the SD of h. Two designs:

* ``one-sample`` (default): detect a task net rating H = δ ≠ 0 — the t-test behind the
  report's CI and p-value (statsmodels ``TTestPower``, effect size δ / sd).
* ``two-run``: detect a rise of δ between a baseline and tonight's run of equal size with a
  one-sided test — the regression check of :mod:`lmra.monitor` (statsmodels
  ``TTestIndPower``, effect size δ / sd, equal SDs assumed; n is per run).

Numbers come from statsmodels' power solvers; nothing here is hand-rolled.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

import numpy as np
import pandas as pd

from lmra.errors import LmraInputError
from lmra.runfolder import RunFolder

Design = Literal["one-sample", "two-run"]
Alternative = Literal["two-sided", "larger"]


def _solve(design: Design, **kw) -> float:
    """statsmodels ``solve_power`` for the design (``nobs`` = per-run size for two-run)."""
    solver = _solver(design)
    if design == "two-run" and "nobs" in kw:
        kw["nobs1"] = kw.pop("nobs")
        kw["ratio"] = 1.0
    return float(np.squeeze(solver.solve_power(**kw)))


def _solver(design: Design):
    from statsmodels.stats.power import TTestIndPower, TTestPower

    if design == "one-sample":
        return TTestPower()
    if design == "two-run":
        return TTestIndPower()
    raise LmraInputError(f"unknown design '{design}' (one-sample or two-run)", field="design")


def _check(delta: float | None, sd: float | None, alpha: float, power: float) -> None:
    if delta is not None and not (0 < delta <= 2):
        raise LmraInputError(f"the net rating to detect must be in (0, 2], got {delta}", field="--rate")
    if sd is not None and not (sd > 0 and math.isfinite(sd)):
        raise LmraInputError(f"the SD of the pair scores must be a number > 0, got {sd}", field="--sd")
    if not 0 < alpha < 1:
        raise LmraInputError(f"alpha must be in (0, 1), got {alpha}", field="--alpha")
    if not 0 < power < 1:
        raise LmraInputError(f"power must be in (0, 1), got {power}", field="--power")


def _default_alt(design: Design, alternative: Alternative | None) -> Alternative:
    return alternative or ("two-sided" if design == "one-sample" else "larger")


def prompts_needed(delta: float, sd: float, *, alpha: float = 0.05, power: float = 0.8,
                   design: Design = "one-sample", alternative: Alternative | None = None) -> int:
    """Number of prompts per task (per run for ``two-run``) needed to detect ``delta``.

    Args:
        delta: net rating (one-sample) or rise of it (two-run) to detect, in (0, 2].
        sd: SD of the per-prompt score (> 0), e.g. from a pilot run (:func:`pilot_sd`).
        alpha: significance level; power: 1 − type II error, both in (0, 1).
        design: ``one-sample`` or ``two-run`` (module docstring).
        alternative: ``two-sided`` (default for one-sample) or ``larger`` (default for
            two-run, the one-sided regression test).

    Returns:
        The smallest integer n ≥ 2 with power ≥ ``power`` (statsmodels ``solve_power``,
        rounded up).

    Raises:
        LmraInputError: arguments out of range.
    """
    _check(delta, sd, alpha, power)
    n = _solve(design, effect_size=delta / sd, nobs=None, alpha=alpha, power=power,
               alternative=_default_alt(design, alternative))
    return max(2, int(math.ceil(n - 1e-9)))


def detectable_rating(n: int, sd: float, *, alpha: float = 0.05, power: float = 0.8,
                      design: Design = "one-sample", alternative: Alternative | None = None) -> float:
    """Smallest net rating (or rise, two-run) detectable with ``n`` prompts at ``alpha``/``power``.

    Returns:
        δ = effect size × sd in net-rating units; nan when n < 2 (no t-test possible).

    Raises:
        LmraInputError: arguments out of range.
    """
    _check(None, sd, alpha, power)
    if n < 2:
        return math.nan
    es = _solve(design, effect_size=None, nobs=n, alpha=alpha, power=power,
                alternative=_default_alt(design, alternative))
    return es * sd


@dataclass(frozen=True)
class PilotSD:
    """Per-prompt score SDs estimated from a pilot run.

    Attributes:
        per_task: ``comparison, domain, task, n_prompts, sd`` (sd nan with < 2 prompts).
        pooled_sd: within-task SD pooled over all tasks (root mean squared residual of an OLS
            of the prompt scores on task indicators, statsmodels); nan if no task has 2 prompts.
        pooled_df: its residual degrees of freedom (prompts − tasks).
    """

    per_task: pd.DataFrame
    pooled_sd: float
    pooled_df: int


def pilot_sd(run: RunFolder) -> PilotSD:
    """Estimate per-task and pooled SDs of the per-prompt score from a finished run."""
    import statsmodels.api as sm

    ps = run.prompt_scores
    keys = ["comparison", "domain", "task"]
    per_task = (ps.groupby(keys)["h"].agg(n_prompts="size", sd=lambda s: s.std(ddof=1)).reset_index()
                if len(ps) else pd.DataFrame(columns=keys + ["n_prompts", "sd"]))
    df = len(ps) - len(per_task)
    if df < 1:
        return PilotSD(per_task, math.nan, max(df, 0))
    dummies = pd.get_dummies(ps[keys].astype(str).agg(" / ".join, axis=1), dtype=float)
    fit = sm.OLS(ps["h"].to_numpy(float), dummies.to_numpy()).fit()
    return PilotSD(per_task, float(math.sqrt(fit.mse_resid)), int(fit.df_resid))


def plan(delta: float, *, sd: float | None = None, pilot: RunFolder | None = None, alpha: float = 0.05,
         power: float = 0.8, design: Design = "one-sample",
         alternative: Alternative | None = None) -> pd.DataFrame:
    """Prompts per task needed to detect ``delta``, from a stated SD or a pilot run.

    Returns:
        One row per pilot task plus a final ``all tasks (pooled SD)`` row (or a single row for
        a stated SD), columns ``comparison, domain, task, pilot_prompts, sd, prompts_needed``
        (``prompts_needed`` is per run for ``two-run``; nan where the SD is unknown or 0).

    Raises:
        LmraInputError: neither or both of ``sd`` and ``pilot``; a pilot too small to give any
            SD; arguments out of range.
    """
    if (sd is None) == (pilot is None):
        raise LmraInputError("give exactly one of a stated SD (--sd) or a pilot run (--pilot)", field="--sd")
    _check(delta, sd, alpha, power)

    def need(s: float) -> float:
        if not (s > 0 and math.isfinite(s)):
            return math.nan
        return prompts_needed(delta, s, alpha=alpha, power=power, design=design, alternative=alternative)

    cols = ["comparison", "domain", "task", "pilot_prompts", "sd", "prompts_needed"]
    if sd is not None:
        return pd.DataFrame([{"comparison": "", "domain": "", "task": "(stated SD)", "pilot_prompts": math.nan,
                              "sd": sd, "prompts_needed": need(sd)}], columns=cols)
    est = pilot_sd(pilot)
    if not math.isfinite(est.pooled_sd):
        raise LmraInputError("the pilot run has no task with 2 or more scored prompts, so no SD can be "
                             "estimated; run a larger pilot or state the SD with --sd", file=pilot.path)
    rows = [{"comparison": r.comparison, "domain": r.domain, "task": r.task, "pilot_prompts": r.n_prompts,
             "sd": r.sd, "prompts_needed": need(r.sd)} for r in est.per_task.itertuples()]
    rows.append({"comparison": "", "domain": "", "task": "all tasks (pooled SD)",
                 "pilot_prompts": int(est.per_task["n_prompts"].sum()), "sd": est.pooled_sd,
                 "prompts_needed": need(est.pooled_sd)})
    return pd.DataFrame(rows, columns=cols)


def sample_adequacy(run: RunFolder, delta: float | None, *, alpha: float = 0.05, power: float = 0.8,
                    design: Design = "one-sample") -> pd.DataFrame:
    """For each task of a run: can its sample detect ``delta`` (e.g. the configured margin)?

    The task's own SD is used when it has ≥ 2 scored prompts, else the run's pooled SD.

    Args:
        run: a finished run; delta: net rating to detect, in (0, 2], or None to report only
            the detectable rating; alpha, power, design: as in :func:`prompts_needed`.

    Returns:
        Columns ``comparison, domain, task, n_prompts, sd, sd_source`` (``task``/``pooled``/
        ``none``), one row per task of ``per_task.csv`` (``n_prompts`` = prompts with a scored
        pair, possibly 0), ``detectable`` (smallest detectable δ at this n; nan when n < 2 or no SD),
        ``prompts_needed`` and ``adequate`` (True / False; None when no SD or no delta).

    Source: methodology §8 "Power".
    """
    _check(delta, None, alpha, power)
    est = pilot_sd(run)
    keys = ["comparison", "domain", "task"]
    tasks = run.per_task[keys].drop_duplicates().merge(est.per_task, on=keys, how="left")
    tasks["n_prompts"] = tasks["n_prompts"].fillna(0).astype(int)
    rows = []
    for r in tasks.itertuples():
        if r.sd > 0 and r.n_prompts >= 2:
            s, src = float(r.sd), "task"
        elif est.pooled_sd > 0:
            s, src = est.pooled_sd, "pooled"
        else:
            s, src = math.nan, "none"
        if math.isfinite(s):
            det = detectable_rating(int(r.n_prompts), s, alpha=alpha, power=power, design=design)
            need = prompts_needed(delta, s, alpha=alpha, power=power, design=design) if delta else math.nan
            ok = bool(int(r.n_prompts) >= need) if delta else None
        else:
            det, need, ok = math.nan, math.nan, None
        rows.append({"comparison": r.comparison, "domain": r.domain, "task": r.task, "n_prompts": int(r.n_prompts),
                     "sd": s, "sd_source": src, "detectable": det, "prompts_needed": need, "adequate": ok})
    return pd.DataFrame(rows, columns=["comparison", "domain", "task", "n_prompts", "sd", "sd_source", "detectable",
                                       "prompts_needed", "adequate"])
