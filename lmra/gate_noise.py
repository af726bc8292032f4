"""Release gates that an audit's sizes make useless, warned of before any call (``lmra validate``,
``lmra audit``) and by ``lmra gate``: CI-bound gates no night can meet, and gap gates that sampling
noise alone breaches on many nights (:func:`gate_warnings`).

* :func:`unmeetable_ci_gates`: ``max_ci_high`` / ``max_overall_ci_high`` below the upper bound a
  task would have even if no pair showed a stereotype (fresh-user finding).
* :func:`fragile_ci_gates`: the same gates met only if nearly every prompt gets a usable rating
  (fresh-user finding, s39: a few LMRA refusals breached one on a neutral chatbot's first night).
* :func:`chance_breached_gap_gates`: ``max_refusal_gap`` / ``max_overall_refusal_gap``, which
  compare the point estimate ``|rate_a − rate_b|`` — exact binomial chance for groups refused
  alike at :data:`REFERENCE_REFUSAL_RATE` (statistics break-it, s37).
* :func:`chance_breached_quality_gates`: ``max_quality_gap`` / ``max_overall_quality_gap``, which
  compare the point estimate ``|mean|`` of a criterion's pair scores — the normal chance for
  responses of equal quality whose pair scores spread as :data:`REFERENCE_QUALITY_SD` (statistics
  break-it, s38: 0.1 a task failed 21 of 21 healthy nights at 40 prompts a task, unwarned).

A gate is warned of when noise alone breaches at least one of its values on
:data:`CHANCE_BREACH_WARN` or more of nights (its values taken as independent).
"""

from __future__ import annotations

import functools
import math

from lmra.gates import GATE_TOLERANCE, breaches

#: a task of the audit's sizes: its name, or ``(domain, task)`` — a task name may occur in two domains,
#: each its own row of the per-task tables (break-it round 2, s37: counted as one task)
TaskKey = "str | tuple[str, str]"


def task_name(key) -> str:
    """The task name of a :data:`TaskKey` (what a per-task override ``[gates.tasks."TASK"]`` names)."""
    return str(key[1]) if isinstance(key, tuple) else str(key)


def task_labels(keys) -> dict:
    """Each :data:`TaskKey` in words: its task name, or ``domain / task`` when that name occurs in
    more than one domain."""
    from collections import Counter

    names = Counter(task_name(k) for k in keys)
    return {k: (f"{k[0]} / {k[1]}" if isinstance(k, tuple) and names[task_name(k)] > 1 else task_name(k))
            for k in keys}


@functools.cache
def ci_floor(n: int, k: int, alpha: float, method: str) -> float:
    """The upper confidence bound of ``n`` prompts (``k`` pairs each) that all score 0 — the lowest a
    task's ``ci_high`` can be at that size — with the ``method`` interval at level ``1 − alpha``;
    +inf below 2 prompts (no interval: a CI gate is "not evaluated", never met)."""
    if n < 2:
        return math.inf
    from lmra.stats import mean_interval

    return mean_interval([0.0] * (n * k), [i // k for i in range(n * k)], alpha=alpha, method=method).high


def _ci_gated(g) -> bool:
    """Some CI-bound gate is set: ``max_ci_high`` (or a task's), ``max_overall_ci_high``."""
    return (g.max_ci_high is not None or g.max_overall_ci_high is not None
            or any(t.max_ci_high is not None for t in g.tasks.values()))


#: the share of prompts that may go without a usable rating before a CI-bound gate that all of them
#: could meet is warned of as one a few unrated pairs breach (fresh-user finding, s39: a bound of 0.15
#: met at 0.140 by 28 prompts was breached at 0.174 by the 22 a neutral chatbot's night kept)
FRAGILE_LOSS = 0.15


def fragile_ci_gates(cfg, sizes: dict) -> list[str]:
    """Warnings for CI-bound gates that the audit's sizes can meet only if nearly every prompt gets
    a usable rating: ``max_ci_high`` (per task, overrides included) and ``max_overall_ci_high`` met
    by :func:`ci_floor` at the planned prompts, but not once more than :data:`FRAGILE_LOSS` of them
    lose their rating — to LMRA refusals, answers without log-probabilities, unlabelled or failed
    pairs, prompts filtered — though no pair showed a stereotype; such a breach keeps a first night
    from being pinned. Gates :func:`unmeetable_ci_gates` warns of are left to it.

    Args:
        cfg, sizes: as for :func:`unmeetable_ci_gates`.

    Returns:
        One sentence per such gate (per bound and size), naming the prompts it needs rated."""
    g = cfg.gates
    if not sizes or not _ci_gated(g):
        return []
    k = max(1, getattr(cfg, "samples_per_prompt", 1))

    def needed(n: int, bound: float) -> int | None:  # the fewest prompts whose all-zero bound meets it
        if bound <= 0 or breaches(ci_floor(n, k, cfg.alpha, cfg.interval), bound):
            return None  # (unmeetable: unmeetable_ci_gates says so; a bound ≤ 0 needs reverse ratings)
        lo, hi = 2, n  # ci_floor falls as n grows
        while lo < hi:
            mid = (lo + hi) // 2
            lo, hi = (lo, mid) if not breaches(ci_floor(mid, k, cfg.alpha, cfg.interval), bound) else (mid + 1, hi)
        return lo

    def fragile(n: int, bound: float) -> int | None:  # (m > 2: one prompt fewer still has an interval to compare)
        m = needed(n, bound)
        return m if m is not None and m > 2 and m > (1 - FRAGILE_LOSS) * n else None

    out, short = [], {}
    labels = task_labels(sizes)
    for key, n in sorted(sizes.items(), key=lambda kv: str(kv[0])):
        override = g.tasks.get(task_name(key))
        bound = override.max_ci_high if override is not None and override.max_ci_high is not None else g.max_ci_high
        if bound is not None and (m := fragile(n, bound)) is not None:
            short.setdefault((bound, n, m), []).append(labels[key])
    level = f"{100 * (1 - cfg.alpha):g}%"
    for (bound, n, m), tasks in short.items():
        which = (f"task '{tasks[0]}'" if len(tasks) == 1 else f"{len(tasks)} tasks ("
                 + ", ".join(f"'{t}'" for t in tasks[:3]) + (" …" if len(tasks) > 3 else "") + ")")
        its = "its" if len(tasks) == 1 else "their"
        out.append(f"release gate max_ci_high = {bound:g} can be met by {which} only if at least {m} of {its} {n} prompts "
                   f"{'each ' if len(tasks) > 1 else ''}"
                   f"get a usable rating: with fewer, the upper {level} confidence bound ({cfg.interval} interval) "
                   f"exceeds it even if no pair showed a stereotype ({ci_floor(n, k, cfg.alpha, cfg.interval):.3f} at "
                   f"{n}, {ci_floor(m - 1, k, cfg.alpha, cfg.interval):.3f} at {m - 1}), so a few LMRA refusals or "
                   "unrated pairs breach it (exit 6; a first night is then not pinned); loosen the gate or audit more "
                   "prompts")
    total = sum(sizes.values())
    if g.max_overall_ci_high is not None and (m := fragile(total, g.max_overall_ci_high)) is not None:
        out.append(f"release gate max_overall_ci_high = {g.max_overall_ci_high:g} can be met only if at least {m} of "
                   f"the {total} prompts get a usable rating: with fewer, the overall upper {level} confidence bound "
                   f"({cfg.interval} interval) exceeds it even if no pair showed a stereotype "
                   f"({ci_floor(total, k, cfg.alpha, cfg.interval):.3f} at {total}, "
                   f"{ci_floor(m - 1, k, cfg.alpha, cfg.interval):.3f} at {m - 1}), so a few LMRA refusals or unrated "
                   "pairs breach it (exit 6; a first night is then not pinned); loosen the gate or audit more prompts")
    return out


def unmeetable_ci_gates(cfg, sizes: dict) -> list[str]:
    """Warnings for CI-bound gates the audit's sizes can never meet: ``max_ci_high`` (per task, its
    overrides included) and ``max_overall_ci_high`` below the upper confidence bound a task (or
    the overall row) would have even if **every** pair scored 0 — no stereotype anywhere — with
    the run's interval (``cfg.interval``, level ``1 − cfg.alpha``) on its number of prompts
    (fresh-user finding: ``max_ci_high = 0.02`` on 16 prompts a task, whose best possible bound is
    about 0.22 under ``betting``, exited 6 every night, so no night was ever pinned or checked).
    The ``t`` interval of all-zero scores is [0, 0]: it never warns; nor does a bound ≤ 0, which
    only reverse ratings could meet (all-zero scores say nothing of it).

    Args:
        cfg: the audit config (``gates``, ``interval``, ``alpha``, ``samples_per_prompt``).
        sizes: prompts per task the audit takes (task or (domain, task) → n ≥ 1: :data:`TaskKey`), known before any call (the
            caller gives none when some prompts get their task during the run: their sizes are
            not known yet). A task of 1 prompt has no interval: its CI gate is never met.

    Returns:
        One sentence per unmeetable gate (empty when every gate can be met).
    """
    g = cfg.gates
    if not sizes or not _ci_gated(g):
        return []
    k = max(1, getattr(cfg, "samples_per_prompt", 1))

    def floor(n: int) -> float:
        return ci_floor(n, k, cfg.alpha, cfg.interval)

    def reached(n: int) -> str:
        return (f"{floor(n):.3f} even if no pair showed a stereotype" if math.isfinite(floor(n))
                else "undefined (one prompt has no confidence interval: the gate is not evaluated)")

    out = []
    short: dict[tuple[float, int], list[str]] = {}  # (bound, prompts) → the tasks that cannot meet it
    labels = task_labels(sizes)
    for key, n in sorted(sizes.items(), key=lambda kv: str(kv[0])):
        task = labels[key]
        override = g.tasks.get(task_name(key))
        bound = override.max_ci_high if override is not None and override.max_ci_high is not None else g.max_ci_high
        # (a bound ≤ 0 asks for reverse ratings: what no stereotype reaches says nothing of it)
        if bound is not None and bound > 0 and breaches(floor(n), bound):
            short.setdefault((bound, n), []).append(task)
    for (bound, n), tasks in short.items():  # one line per bound and size (27 tasks alike: one line)
        which = (f"task '{tasks[0]}'" if len(tasks) == 1 else f"{len(tasks)} tasks ("
                 + ", ".join(f"'{t}'" for t in tasks[:3]) + (" …" if len(tasks) > 3 else "") + ")")
        out.append(f"release gate max_ci_high = {bound:g} cannot be met by {which}: with {n} prompt{'s' * (n != 1)} a "
                   f"task the upper {100 * (1 - cfg.alpha):g}% confidence bound ({cfg.interval} interval) is "
                   f"{reached(n)}, so every night exits 6 and none becomes the pinned baseline; audit more prompts ('lmra plan') or "
                   "loosen the gate")
    total = sum(sizes.values())
    if g.max_overall_ci_high is not None and g.max_overall_ci_high > 0 and breaches(floor(total), g.max_overall_ci_high):
        out.append(f"release gate max_overall_ci_high = {g.max_overall_ci_high:g} cannot be met: with {total} "
                   f"prompt{'s' * (total != 1)} the overall upper {100 * (1 - cfg.alpha):g}% confidence bound "
                   f"({cfg.interval} interval) is {reached(total)}, so every night exits 6; audit more prompts or "
                   "loosen the gate")
    return out


#: the refusal rate, alike for both groups, at which :func:`chance_breached_gap_gates` asks how
#: often sampling noise alone breaches a refusal-gap gate
REFERENCE_REFUSAL_RATE = 0.05
#: share of nights (at least one value breached by noise alone) from which that gate is warned of
CHANCE_BREACH_WARN = 0.10


#: responses per group above which :func:`chance_gap_breach` uses the normal approximation
EXACT_GAP_MAX = 5_000


def chance_gap_breach(m: int, bound: float, rate: float = REFERENCE_REFUSAL_RATE) -> float:
    """Probability that ``|X − Y| / m`` breaches ``bound`` (:func:`breaches`) for independent
    X, Y ~ Binomial(m, ``rate``): two groups' refusal counts over ``m`` responses each, refused
    alike — the point-estimate gap a refusal-gap gate compares, by sampling noise alone. Exact
    (the two binomial pmfs convolved) up to :data:`EXACT_GAP_MAX` responses; above, the normal
    approximation of X − Y (variance 2·m·rate·(1 − rate), continuity-corrected), which is
    accurate there and fast (break-it round 2, s37: 300 tasks of up to 30,000 responses took 22 s
    exactly). Independence is the reference for a paired design too: a propensity to refuse a
    prompt that both names share cancels in X − Y.

    Args:
        m: responses per group (≥ 1); bound: the gate's maximum (≥ 0); rate: the refusal rate in [0, 1].

    Returns:
        The probability in [0, 1]."""
    import numpy as np
    from scipy.stats import binom, norm

    # the smallest |X − Y| that breaches: more than bound·m (+ the gate's tolerance)
    k = max(0, int(np.floor((bound + GATE_TOLERANCE) * m)) + 1)
    while k > 0 and breaches((k - 1) / m, bound):  # (float rounding either way: the gate's own comparison decides)
        k -= 1
    while k <= m and not breaches(k / m, bound):
        k += 1
    if k > m:
        return 0.0
    if m > EXACT_GAP_MAX:
        sd = math.sqrt(2.0 * m * rate * (1.0 - rate))
        return 0.0 if sd == 0 else float(min(1.0, 2.0 * norm.sf((k - 0.5) / sd)))
    from scipy.signal import fftconvolve

    pmf = binom.pmf(np.arange(m + 1), m, rate)
    diff = np.clip(fftconvolve(pmf, pmf[::-1]), 0.0, None)  # P(X − Y = d), d = −m … m
    return float(min(1.0, diff[np.abs(np.arange(-m, m + 1)) >= k].sum()))


def _task_values(sizes: dict, k: int, overrides: dict, default) -> list[tuple[str, int, float]]:
    """A per-task gap gate's values: ``(task label, responses or pairs per group, bound)`` of every
    task the gate bounds (its override's bound where it has one), in task order."""
    labels = task_labels(sizes)
    values = [(labels[key], n * k, overrides.get(task_name(key), default))
              for key, n in sorted(sizes.items(), key=lambda kv: str(kv[0]))]
    return [v for v in values if v[2] is not None]


def _gate_and_size_words(gate: str, values: list[tuple[str, int, float]], unit: str) -> tuple[str, str]:
    """A per-task gap gate in words (``max_refusal_gap = 0.05``, or each bound with its tasks) and
    its tasks' sizes (``40 {unit} a task``, or the range)."""
    ms = [m for _, m, _ in values]
    size = f"{ms[0]} {unit} a task" if min(ms) == max(ms) else f"{min(ms)}–{max(ms)} {unit} a task"
    bounds = sorted({b for _, _, b in values})
    said = (f"{gate} = {bounds[0]:g}" if len(bounds) == 1 else f"{gate} ("
            + ", ".join(f"{b:g} for {', '.join(repr(t) for t, _, v in values if v == b)}" for b in bounds) + ")")
    return said, size


def chance_breached_gap_gates(cfg, sizes: dict, n_comparisons: int | None = None) -> list[str]:
    """Warnings for refusal-gap gates that sampling noise alone breaches on many nights: a gate
    whose values — every task (its override's bound where it has one) of every comparison, or
    every comparison's overall row — breach at least once, for a chatbot refusing all groups
    alike at :data:`REFERENCE_REFUSAL_RATE`, on :data:`CHANCE_BREACH_WARN` or more of nights
    (:func:`chance_gap_breach` per value, values taken as independent). ``max_refusal_gap`` and
    ``max_overall_refusal_gap`` compare the point estimate ``|rate_a − rate_b|``: with 40 prompts
    a task a bound of 0.05 is breached by noise on 82% of nights over 8 tasks (statistics
    break-it, s37: 24 of 30 nights of a chatbot refusing both groups alike exited 6, while the
    run's paired McNemar test flagged none; break-it round 2: three comparisons were counted as one).

    Args:
        cfg: the audit config (``gates``, ``samples_per_prompt``, ``comparisons``).
        sizes: prompts per task (:data:`TaskKey` → n ≥ 1), as for :func:`unmeetable_ci_gates`: a task
            name in two domains is two tasks (break-it round 2, s37).
        n_comparisons: comparisons audited (default: ``cfg.comparisons``, else 1).

    Returns:
        One sentence per gate so noisy (empty when none is)."""
    g = cfg.gates
    k = max(1, getattr(cfg, "samples_per_prompt", 1))
    c = n_comparisons if n_comparisons is not None else max(1, len(getattr(cfg, "comparisons", None) or [()]))
    overrides = {t: o.max_refusal_gap for t, o in g.tasks.items() if o.max_refusal_gap is not None}
    if not sizes or (g.max_refusal_gap is None and not overrides and g.max_overall_refusal_gap is None):
        return []
    chance = functools.cache(chance_gap_breach)
    rate = f"{REFERENCE_REFUSAL_RATE:.0%}"
    per = f" of each of its {c} comparisons" if c > 1 else ""
    out = []
    values = _task_values(sizes, k, overrides, g.max_refusal_gap)
    if values:
        night = 1.0 - math.prod((1.0 - chance(m, bound)) ** c for _, m, bound in values)
        if night >= CHANCE_BREACH_WARN:
            said, size = _gate_and_size_words("max_refusal_gap", values, "responses per group")
            out.append(f"release gate {said} is breached by chance alone: with {size}, a chatbot that refuses every "
                       f"group alike {rate} of the time exceeds it in at least one of its {len(values)} "
                       f"task{'s' * (len(values) != 1)}{per} on {night:.0%} of nights (it compares the observed gap, "
                       "which sampling noise moves); gate the overall gap (max_overall_refusal_gap) instead, loosen the "
                       "bound, or audit more prompts")
    if g.max_overall_refusal_gap is not None:
        m = sum(sizes.values()) * k
        night = 1.0 - (1.0 - chance(m, g.max_overall_refusal_gap)) ** c
        if night >= CHANCE_BREACH_WARN:
            out.append(f"release gate max_overall_refusal_gap = {g.max_overall_refusal_gap:g} is breached by chance "
                       f"alone: with {m} responses per group, a chatbot that refuses every group alike {rate} of the "
                       f"time exceeds it{' in at least one of its ' + str(c) + ' comparisons' if c > 1 else ''} on "
                       f"{night:.0%} of nights; loosen the bound or audit more prompts")
    return out


#: the standard deviation of one pair's quality score ``q(y_A better) − q(y_B better)`` on responses of
#: equal quality at which :func:`chance_breached_quality_gates` asks how often noise alone breaches a
#: quality-gap gate: a decisive LMRA's (statistics break-it, s38: 0.071 per task mean at 40 prompts,
#: i.e. about 0.45 a pair; a judge that answers "about equal" more often spread 0.25)
REFERENCE_QUALITY_SD = 0.45


def chance_quality_gap_breach(m: int, bound: float, sd: float = REFERENCE_QUALITY_SD) -> float:
    """Probability that ``|mean|`` of ``m`` pair scores of standard deviation ``sd`` and true mean 0
    breaches ``bound`` (:func:`breaches`): the point estimate a quality-gap gate compares, by
    sampling noise alone — ``2·(1 − Φ(bound·√m / sd))``, the normal approximation of the mean.

    Args:
        m: pairs (≥ 1); bound: the gate's maximum (≥ 0); sd: a pair score's standard deviation (≥ 0).

    Returns:
        The probability in [0, 1] (0 when ``sd`` is 0 and the bound is not negative)."""
    from scipy.stats import norm

    if sd <= 0:
        return 0.0 if bound >= 0 else 1.0
    return float(min(1.0, 2.0 * norm.sf((bound + GATE_TOLERANCE) * math.sqrt(m) / sd)))


def chance_breached_quality_gates(cfg, sizes: dict, n_comparisons: int | None = None,
                                  sd: float | None = None) -> list[str]:
    """Warnings for quality-gap gates that sampling noise alone breaches on many nights: a gate
    whose values — every criterion of every task (its override's bound where it has one) of every
    comparison, or every criterion of every comparison's overall row — breach at least once, for
    responses of equal quality whose pair scores spread as ``sd``, on :data:`CHANCE_BREACH_WARN`
    or more of nights (:func:`chance_quality_gap_breach` per value, values taken as independent).
    ``max_quality_gap`` compares ``|mean|`` of each (task, criterion): nine values a task
    (statistics break-it, s38: a bound of 0.1 at 40 prompts a task failed 21 of 21 healthy nights
    while the run's own quality test flagged nothing).

    Args:
        cfg: the audit config (``gates``, ``samples_per_prompt``, ``comparisons``, ``quality.criteria``).
        sizes: prompts per task (:data:`TaskKey` → n ≥ 1), as for :func:`unmeetable_ci_gates`.
        n_comparisons: comparisons audited (default: ``cfg.comparisons``, else 1).
        sd: a pair score's standard deviation: a run's own (``lmra gate`` on a run:
            :func:`quality_score_sd`), else None for :data:`REFERENCE_QUALITY_SD`.

    Returns:
        One sentence per gate so noisy (empty when none is)."""
    g = cfg.gates
    overrides = {t: o.max_quality_gap for t, o in g.tasks.items() if o.max_quality_gap is not None}
    if not sizes or (g.max_quality_gap is None and not overrides and g.max_overall_quality_gap is None):
        return []
    k = max(1, getattr(cfg, "samples_per_prompt", 1))
    c = n_comparisons if n_comparisons is not None else max(1, len(getattr(cfg, "comparisons", None) or [()]))
    quality = getattr(cfg, "quality", None)
    criteria = list(getattr(quality, "criteria", None) or ())
    n_crit = len(criteria) if criteria else 9  # (the nine FPF criteria by default)
    equal = ("responses of equal quality whose pair scores spread as " + (
        f"a decisive LMRA's do (SD {REFERENCE_QUALITY_SD:g} a pair; docs/nightly.md)" if sd is None
        else f"this run's do (SD {sd:.2f} a pair)"))
    sd = REFERENCE_QUALITY_SD if sd is None else sd
    chance = functools.cache(lambda m, bound: chance_quality_gap_breach(m, bound, sd))
    per = f" of each of its {c} comparisons" if c > 1 else ""
    out = []
    values = _task_values(sizes, k, overrides, g.max_quality_gap)
    if values:
        night = 1.0 - math.prod((1.0 - chance(m, bound)) ** (c * n_crit) for _, m, bound in values)
        if night >= CHANCE_BREACH_WARN:
            said, size = _gate_and_size_words("max_quality_gap", values, "pairs")
            out.append(f"release gate {said} is breached by chance alone: with {size} and {n_crit} criteria, "
                       f"{equal} exceed it in at least one of its {len(values)} task{'s' * (len(values) != 1)}{per} "
                       f"on {night:.0%} of nights (it compares the observed mean, which sampling noise moves); gate "
                       "the overall gap (max_overall_quality_gap) instead, loosen the bound, or audit more prompts")
    if g.max_overall_quality_gap is not None:
        m = sum(sizes.values()) * k
        night = 1.0 - (1.0 - chance(m, g.max_overall_quality_gap)) ** (c * n_crit)
        if night >= CHANCE_BREACH_WARN:
            out.append(f"release gate max_overall_quality_gap = {g.max_overall_quality_gap:g} is breached by chance "
                       f"alone: with {m} pairs and {n_crit} criteria, {equal} exceed it in at least one criterion"
                       f"{per} on {night:.0%} of nights; loosen the bound or audit more prompts")
    return out


def quality_score_sd(run) -> float | None:
    """The standard deviation of a run's quality pair scores about their own means: ``h`` of the
    valid rows of ``quality_ratings.jsonl`` less the mean of its (comparison, task, criterion),
    pooled (degrees of freedom: pairs less groups) — the noise a gate's values carry, not the gaps
    between the groups (break-it round 2, s38: the raw SD counted a real gap, so the larger the gap
    the louder "breached by chance alone"). None when fewer than 2 pairs beyond the groups, or no
    such file. What :func:`chance_breached_quality_gates` takes for ``lmra gate`` on a run."""
    import pandas as pd

    path = run.path / "quality_ratings.jsonl"
    if not path.is_file():
        return None
    try:
        df = pd.read_json(path, lines=True, dtype=False)
    except ValueError:
        return None
    if df.empty or "h" not in df:
        return None
    df = df[df["valid"].astype(bool)] if "valid" in df else df
    df = df.assign(h=pd.to_numeric(df["h"], errors="coerce")).dropna(subset=["h"])
    keys = [c for c in ("comparison", "domain", "task", "criterion") if c in df]
    if keys:
        resid = df["h"] - df.groupby(keys, sort=False)["h"].transform("mean")
        dof = len(df) - df.groupby(keys, sort=False).ngroups
    else:
        resid, dof = df["h"] - df["h"].mean(), len(df) - 1
    return float((resid.pow(2).sum() / dof) ** 0.5) if dof >= 2 else None


#: the gates on a signed net rating (or its upper bound), whose bound may be set below 0
SIGNED_GATES = ("max_net_rating", "max_ci_high", "max_overall_net_rating", "max_overall_ci_high")


def negative_bound_gates(cfg) -> list[str]:
    """Warnings for net-rating gates set below 0 (``[gates]`` or a task's override; ``--gate
    max_ci_high=-1``): a net rating is signed — + the forward, − the reverse assignment is the
    harmful stereotype (methodology §2) — so such a bound is met only by a night whose ratings lean
    to the reverse stereotype, and a chatbot with no stereotype at all breaches it on most nights
    (exit 6, never pinned). Known gap (s43): accepted without a word. Sizes play no part.

    Returns:
        One sentence per gate and bound below 0 (empty when none is)."""
    g = cfg.gates
    bounds: dict[tuple[str, float], list[str]] = {}
    for name in SIGNED_GATES:
        v = getattr(g, name, None)
        if v is not None and v < 0:
            bounds.setdefault((name, v), []).append("")
    for task, t in sorted(g.tasks.items()):
        for name in SIGNED_GATES:
            v = getattr(t, name, None)
            if v is not None and v < 0:
                bounds.setdefault((name, v), []).append(task)
    out = []
    for (name, v), where in bounds.items():
        tasks = [t for t in where if t]
        named = (f"task{'s' * (len(tasks) > 1)} " + ", ".join(f"'{t}'" for t in tasks[:3])
                 + (" …" if len(tasks) > 3 else "")) if tasks else ""
        # the [gates] bound and overrides of the same value: both said (round-2 break-it: the global one hid)
        scope = (f" ([gates] and {named})" if "" in where else f" ({named})") if tasks else ""
        out.append(f"release gate {name} = {v:g}{scope} is below 0: a net rating is signed (+ the forward, − the reverse "
                   "stereotype, both harmful; methodology §2), so only a night whose ratings lean to the reverse "
                   "stereotype meets it — a chatbot with no stereotype at all breaches it on most nights (exit 6, "
                   "never pinned); the gate caps the forward direction: give a bound ≥ 0")
    return out


def gate_warnings(cfg, sizes: dict, quality_sd: float | None = None) -> list[str]:
    """What ``lmra validate``, ``lmra audit`` (before any call) and ``lmra gate`` warn of a config's
    gates at the audit's sizes (:data:`TaskKey` → prompts): :func:`unmeetable_ci_gates`,
    :func:`fragile_ci_gates`, :func:`chance_breached_gap_gates` and :func:`chance_breached_quality_gates` (``quality_sd``: a
    run's own spread of quality pair scores, None for the reference), and :func:`negative_bound_gates` (at any size)."""
    return (negative_bound_gates(cfg) + unmeetable_ci_gates(cfg, sizes) + fragile_ci_gates(cfg, sizes) + chance_breached_gap_gates(cfg, sizes)
            + chance_breached_quality_gates(cfg, sizes, sd=quality_sd))


__all__ = ["CHANCE_BREACH_WARN", "EXACT_GAP_MAX", "FRAGILE_LOSS", "ci_floor", "fragile_ci_gates", "REFERENCE_QUALITY_SD", "REFERENCE_REFUSAL_RATE",
           "chance_breached_gap_gates", "chance_breached_quality_gates", "chance_gap_breach", "negative_bound_gates",
           "chance_quality_gap_breach", "gate_warnings", "quality_score_sd", "task_labels", "task_name", "unmeetable_ci_gates"]
