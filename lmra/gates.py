"""Absolute release gates on a finished run (issue 13): promptfoo-style assertions such as
"every task's upper confidence bound of the net rating is ≤ 0.02", checked on the numbers the
run folder stores — no baseline needed (the relative check is :mod:`lmra.monitor`).

Each gate of ``[gates]`` (:class:`lmra.config.GatesConfig`) is a maximum on one stored column
(:data:`GATES`), with one value per comparison × task (per-task gates) or per comparison
(``max_overall_*``):

* ``max_net_rating`` / ``max_overall_net_rating``: ``net_rating`` of per_task.csv / of
  summary.json ``overall``;
* ``max_ci_high`` / ``max_overall_ci_high``: ``ci_high`` of the same rows;
* ``max_refusal_gap`` / ``max_overall_refusal_gap``: ``|rate_a − rate_b|`` of refusals.csv
  (level ``task`` / ``overall``);
* ``max_quality_gap`` / ``max_overall_quality_gap``: ``|mean|`` of quality.csv (level ``task``
  / ``overall``), one value per criterion.

Net ratings and CI bounds are signed (H > 0: the LMRA saw harmful stereotypes more often in
the direction the responses were really assigned than reversed — about either group's users, not
group A's only; fresh-user finding: the docs said "against group A's users"); gaps are absolute. A per-task gate's bound is the task's override
(``[gates.tasks."TASK"]``) when it has one, else the ``[gates]`` bound.

Every value is *passed* (≤ bound), *breached* (> bound by more than :data:`GATE_TOLERANCE`: float
rounding is no breach) or *not evaluated*: the run has no
such value (a task without a valid pair has no net rating, one with fewer than 2 prompts has
no confidence interval, a task named in an override was not measured …). A gate is met only
when it has values and every one passed — a gate that evaluates nothing never passes
silently —, and the run meets its gates when every gate is met (exit status
:data:`EXIT_GATES_NOT_MET` otherwise). A refusal or quality gate on a run that did not measure
refusals or quality is an input error (:func:`unmeasured_gates`).
"""

from __future__ import annotations

import datetime as _dt
import os
from dataclasses import asdict, dataclass, field
from typing import Literal

import pandas as pd

from lmra.config import GATES_NEEDING, GatesConfig
from lmra.errors import LmraInputError
from lmra.runfolder import RunFolder, finite, jsonable

#: exit status of ``lmra audit`` and ``lmra gate`` when a release gate is not met
EXIT_GATES_NOT_MET = 6
#: version of the ``gates.json`` / ``summary.json["gates"]`` document
GATES_SCHEMA = "lmra.gates/1"
GATES_FILE = "gates.json"


@dataclass(frozen=True)
class GateSpec:
    """What a gate bounds.

    Attributes:
        name: the config key, e.g. ``max_ci_high``.
        level: ``task`` (one value per comparison and task) or ``overall`` (per comparison).
        source: the stored table: ``per_task`` (per_task.csv), ``overall`` (summary.json
            ``overall``), ``refusals`` (refusals.csv) or ``quality`` (quality.csv).
        column: the stored column (``rate_a - rate_b`` and ``mean`` are taken in absolute value).
        label: how console lines name the value.
    """

    name: str
    level: Literal["task", "overall"]
    source: Literal["per_task", "overall", "refusals", "quality"]
    column: str
    label: str


#: every gate, in the order of the config fields
GATES: dict[str, GateSpec] = {g.name: g for g in (
    GateSpec("max_net_rating", "task", "per_task", "net_rating", "net rating"),
    GateSpec("max_ci_high", "task", "per_task", "ci_high", "CI high"),
    GateSpec("max_refusal_gap", "task", "refusals", "|rate_a - rate_b|", "refusal gap"),
    GateSpec("max_quality_gap", "task", "quality", "|mean|", "quality gap"),
    GateSpec("max_overall_net_rating", "overall", "overall", "net_rating", "net rating"),
    GateSpec("max_overall_ci_high", "overall", "overall", "ci_high", "CI high"),
    GateSpec("max_overall_refusal_gap", "overall", "refusals", "|rate_a - rate_b|", "refusal gap"),
    GateSpec("max_overall_quality_gap", "overall", "quality", "|mean|", "quality gap"),
)}


@dataclass
class GateOutcome:
    """One value checked against its bound.

    Attributes:
        gate: the gate name; ``comparison`` ("A vs B"), ``domain``/``task`` (None for overall
            gates), ``criterion`` (quality gates only).
        value: the stored value (absolute for gaps; None when not evaluated).
        bound: the bound applied; ``override``: it came from ``[gates.tasks."TASK"]``.
        status: ``passed``, ``breached`` or ``not_evaluated``.
        detail: context for the console line (the signed mean, each group's refusal rate, or
            why the value is missing).
    """

    gate: str
    comparison: str | None
    domain: str | None
    task: str | None
    criterion: str | None
    value: float | None
    bound: float
    override: bool
    status: Literal["passed", "breached", "not_evaluated"]
    detail: str = ""

    def where(self, with_domain: bool = False) -> str:
        """``task 'write a story' (female vs male)`` / ``overall (female vs male)``;
        ``with_domain``: ``task 'art / write a story' (…)`` (a task name in two domains)."""
        comp = f" ({self.comparison})" if self.comparison else ""
        task = f"{self.domain} / {self.task}" if with_domain and self.domain else self.task
        return f"task '{task}'{comp}" if self.task is not None else f"overall{comp}"

    def line(self, with_domain: bool = False) -> str:
        """The console line of this value, e.g. ``GATE BREACHED max_ci_high: task 'write a story'
        (female vs male) CI high +0.0340 > 0.02 (net rating +0.0110, 40 pairs)``, ``GATE NOT
        EVALUATED …: no CI high — <why>; bound 0.02`` or ``GATE passed …: … +0.0100 ≤ 0.02``.
        The value is written as the tables write it (:func:`format_gate_value`); the bound as
        configured."""
        spec = GATES[self.gate]
        label = spec.label + (f" '{self.criterion}'" if self.criterion else "")
        bound = bound_text(self.bound) + (" (this task's override)" if self.override else "")
        if self.status == "not_evaluated":
            return (f"GATE NOT EVALUATED {self.gate}: {self.where(with_domain)}: no {label} — {self.detail}; "
                    f"bound {bound}")
        op, word = (">", "BREACHED") if self.status == "breached" else ("≤", "passed")
        more = f" ({self.detail})" if self.detail else ""
        return (f"GATE {word} {self.gate}: {self.where(with_domain)} {label} {_shown_beside(self.gate, self.value, self.bound)} {op} "
                f"{bound}{more}")


def tasks_in_two_domains(outcomes) -> set[str]:
    """The task names that occur with more than one domain among ``outcomes`` (objects with
    ``task`` and ``domain``: gate outcomes, a check's rows); their lines name the domain too:
    two tasks, never two lines that read alike."""
    seen: dict[str, set] = {}
    for o in outcomes:  # (rows of a frame too: a missing domain, None or NaN, is one domain)
        if isinstance(o.task, str):
            seen.setdefault(o.task, set()).add(o.domain if isinstance(o.domain, str) else None)
    return {t for t, d in seen.items() if len(d) > 1}


def format_gate_value(gate: str, value: float) -> str:
    """A gate's value as the tables print the same number: 4 decimals, signed for a net rating or
    CI bound (``+0.0340``, ``+1.0000``), unsigned for a gap (``0.4000``); below 0.0001 in size
    (but not 0) 4 significant digits (``+3.162e-05``), so a small value never reads as 0."""
    signed = GATES[gate].column in ("net_rating", "ci_high") if gate in GATES else True
    if value and abs(value) < 1e-4:
        return f"{value:+.4g}" if signed else f"{value:.4g}"
    return f"{value:+.4f}" if signed else f"{value:.4f}"


def bound_text(bound: float) -> str:
    """A gate's bound as configured: ``0.15`` (``:g``), or every digit it was given when ``:g``
    would round it (``0.03333333``; break-it round 2, s37: printed ``0.0333333``)."""
    short = f"{bound:g}"
    return short if float(short) == bound else repr(float(bound))


def _shown_beside(gate: str, value: float, bound: float) -> str:
    """:func:`format_gate_value`, with more decimals (up to 12) when 4 would print the value on the
    wrong side of its printed bound: a breach as equal to it (``0.07504 > 0.075``, not ``0.0750 >
    0.075``), a pass as above it (``0.06666 ≤ 0.06667``, not ``0.0667 ≤ 0.06667``)."""
    text = format_gate_value(gate, value)
    shown_bound = float(bound_text(bound))
    breached = breaches(value, bound)
    digits = 4
    while (float(text) <= shown_bound if breached else float(text) > shown_bound) and digits < 12:
        digits += 1
        text = f"{value:+.{digits}f}" if text.startswith(("+", "-")) else f"{value:.{digits}f}"
    return text


@dataclass
class GateResult:
    """The outcome of :func:`evaluate_gates`.

    Attributes:
        run_id: the run the gates were evaluated on.
        gates: the gate settings applied (:class:`~lmra.config.GatesConfig`).
        outcomes: every value checked (:class:`GateOutcome`), in gate order.
        evaluated_at: ISO 8601 time of the evaluation.
        warnings: caveats of the verdict (:data:`T_INTERVAL_WARNING`), printed before its summary line.
    """

    run_id: str
    gates: GatesConfig
    outcomes: list[GateOutcome] = field(default_factory=list)
    evaluated_at: str = field(default_factory=lambda: _dt.datetime.now().astimezone().isoformat(timespec="seconds"))
    #: what the reader of the verdict must know (e.g. a CI gate on t-intervals), in words
    warnings: list[str] = field(default_factory=list)

    @property
    def checked(self) -> list[str]:
        """Names of the gates evaluated (every gate with a bound)."""
        return self.gates.gate_names()

    @property
    def breaches(self) -> list[GateOutcome]:
        """Values above their bound."""
        return [o for o in self.outcomes if o.status == "breached"]

    @property
    def not_evaluated(self) -> list[GateOutcome]:
        """Values the run does not have (the gate cannot be verified for them)."""
        return [o for o in self.outcomes if o.status == "not_evaluated"]

    @property
    def unmet(self) -> list[str]:
        """Gates not met: a value breached or not evaluated, or no value at all."""
        bad = {o.gate for o in self.outcomes if o.status != "passed"}
        empty = {g for g in self.checked if not any(o.gate == g for o in self.outcomes)}
        return [g for g in self.checked if g in bad | empty]

    @property
    def empty_gates(self) -> list[str]:
        """Gates for which the run has no value at all (e.g. a run with no scored pair)."""
        return [g for g in self.checked if not any(o.gate == g for o in self.outcomes)]

    @property
    def passed(self) -> bool:
        """True when every gate is met."""
        return not self.unmet

    @property
    def exit_status(self) -> int:
        """0 when every gate is met, else :data:`EXIT_GATES_NOT_MET` (6)."""
        return 0 if self.passed else EXIT_GATES_NOT_MET

    def lines(self) -> list[str]:
        """Console lines: one per breached or unevaluated value, one per gate with no value,
        then the summary line (``gates: 5 checked (58 values), all passed``)."""
        twice = tasks_in_two_domains(self.outcomes)
        out = [o.line(o.task in twice) for o in self.outcomes if o.status != "passed"]
        out += [f"GATE NOT EVALUATED {g}: the run has no value for it (no {GATES[g].label} was measured)"
                for g in self.empty_gates]
        out += [f"warning: {w}" for w in self.warnings]
        n, k = len(self.checked), len(self.outcomes)
        head = f"gates: {n} checked ({k} value{'s' * (k != 1)})"
        if self.passed:
            out.append(f"{head}, all passed")
        else:
            breached = sorted({o.gate for o in self.breaches}, key=self.checked.index)
            missing = [g for g in self.unmet if g not in breached]
            parts = [f"{len(breached)} breached ({', '.join(breached)})" if breached else "",
                     f"{len(missing)} not evaluated ({', '.join(missing)})" if missing else ""]
            out.append(f"{head}: {'; '.join(p for p in parts if p)} — release gates NOT met")
        return out

    def to_dict(self, *, values: bool = True) -> dict:
        """A JSON-ready document (``schema`` :data:`GATES_SCHEMA`): ``run_id``, ``evaluated_at``,
        ``passed``, ``exit_status``, ``checked`` (gate names), ``unmet``, ``gates`` (the bounds
        applied, overrides under ``tasks``), ``n_values``, ``breaches`` and ``not_evaluated``
        (one object per value: the :class:`GateOutcome` fields), and with ``values`` every
        checked value under ``results``. NaN never appears (None instead)."""
        doc = {"schema": GATES_SCHEMA, "run_id": self.run_id, "evaluated_at": self.evaluated_at,
               "passed": self.passed, "exit_status": self.exit_status, "checked": self.checked,
               "unmet": self.unmet, "gates": self.gates.model_dump(exclude_none=True),
               "n_values": len(self.outcomes), "breaches": [asdict(o) for o in self.breaches],
               "not_evaluated": [asdict(o) for o in self.not_evaluated], "warnings": list(self.warnings)}
        if values:
            doc["results"] = [asdict(o) for o in self.outcomes]
        return jsonable(doc)


# -- reading the stored tables ----------------------------------------------------------------
def _csv(run: RunFolder, name: str) -> pd.DataFrame:
    from lmra.digests import recorded

    path = run.path / name
    if not path.is_file() and not recorded(run.manifest, name):  # (recorded: named as missing)
        return pd.DataFrame()
    df = pd.read_csv(run.verified(name), keep_default_na=False, na_values=[""])
    if len(df):
        df["comparison"] = df["group_a"].astype(str) + " vs " + df["group_b"].astype(str)
    return df


def _overall(run: RunFolder) -> pd.DataFrame:
    df = pd.DataFrame(run.summary.get("overall") or [])
    if len(df):
        df["comparison"] = df["group_a"].astype(str) + " vs " + df["group_b"].astype(str)
    return df


def _measured(run: RunFolder, section: str) -> bool:
    """Whether the run measured refusals / quality (its stored config's ``[section] enabled``)."""
    default = section == "refusal"  # the config defaults: refusal labels on, quality off
    return bool((run.config.get(section) or {}).get("enabled", default))


def unmeasured_gates(run: RunFolder, gates: GatesConfig) -> dict[str, str]:
    """Gates with a bound whose values the run did not measure at all.

    Returns:
        gate name → reason, e.g. ``{"max_quality_gap": "the run did not rate quality
        ([quality] enabled = false in its config.toml)"}``; empty when every gate can be evaluated.
    """
    out = {}
    for name in gates.gate_names():
        section = GATES_NEEDING.get(name)
        if section and not _measured(run, section):
            what = "label refusals" if section == "refusal" else "rate quality criteria"
            out[name] = f"run {run.run_id} did not {what} ([{section}] enabled = false in its config.toml)"
    return out


def audited_tasks(cfg, prompts, taxonomy=None) -> set[str]:
    """The tasks an audit can measure, known before any model call.

    Args:
        cfg: the :class:`lmra.config.AuditConfig`; prompts: its prompt records (``task``,
            ``domain``; :class:`lmra.audit.Inputs` ``prompts``); taxonomy: the task taxonomy the
            unlabelled prompts are classified into (``Inputs.taxonomy``; None when every prompt
            has a task).

    Returns:
        The task names of labelled prompts, plus every taxonomy task (and ``other``) when some
        prompts are classified by the LMRA, restricted to the config's ``tasks`` and ``domains``
        lists when they are given.
    """
    labelled = {(p.task, p.domain) for p in prompts if p.task}
    if taxonomy is not None:
        labelled |= {(t.name, d.name) for d in taxonomy.domain for t in d.task} | {("other", "other")}
    return {t for t, d in labelled if (not cfg.tasks or t in cfg.tasks) and (not cfg.domains or d in cfg.domains)}


def check_gate_tasks(cfg, tasks: set[str], config_path: "str | os.PathLike | None") -> None:
    """Refuse a per-task override (``[gates.tasks."TASK"]``) naming a task the audit does not
    measure: its gate could never be met, so every night would exit 6 ("not evaluated").

    Args:
        cfg: the audit config; tasks: what it measures (:func:`audited_tasks`); config_path: the
            config file (named in the error, with the override's line).

    Raises:
        LmraInputError: the first such override, naming file, line and field
            (``gates.tasks.<TASK>``), with the closest audited task names (did you mean …).
    """
    import difflib

    for task in cfg.gates.tasks:
        if task in tasks:
            continue
        close = difflib.get_close_matches(task, sorted(tasks), n=3, cutoff=0.6)
        hint = f"did you mean {' or '.join(repr(c) for c in close)}? " if close else ""
        listed = sorted(tasks)
        known = (", ".join(f"'{t}'" for t in listed) if len(listed) <= 12
                 else f"{len(listed)} tasks, e.g. " + ", ".join(f"'{t}'" for t in listed[:5]))
        text = None
        if config_path is not None:
            try:
                from pathlib import Path

                text = Path(config_path).read_text(encoding="utf-8-sig")
            except (OSError, ValueError):
                text = None
        raise LmraInputError(
            f"a release-gate override names task '{task}', which this audit does not measure "
            f"({'not in its tasks list' if cfg.tasks else 'no prompt has it'}); {hint}audited tasks: "
            f"{known or 'none'}. A gate on a task that is not measured is never met (exit status 6 every night): "
            f"fix the name or remove the override",
            file=config_path, line=_override_line(text, task) if text else None, field=f"gates.tasks.{task}")


def _override_line(text: str, task: str) -> int | None:
    """1-based line of ``[gates.tasks."TASK"]`` (any quoting) or of ``"TASK" = {…}`` under
    ``[gates.tasks]`` in TOML ``text``; None when not found."""
    import tomllib

    from lmra.errors import find_key_line

    for i, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        if line.startswith("[") and not line.startswith("[["):
            try:
                head = tomllib.loads(line)  # a table header alone is valid TOML (comments too)
            except tomllib.TOMLDecodeError:
                continue
            if task in ((head.get("gates") or {}).get("tasks") or {}):
                return i
    return find_key_line(text, task, "gates.tasks")


def _bound(gates: GatesConfig, name: str, task: str | None) -> tuple[float | None, bool]:
    """(bound, from an override) of gate ``name`` for ``task`` (None: overall)."""
    if task is not None and task in gates.tasks:
        v = getattr(gates.tasks[task], name, None)
        if v is not None:
            return v, True
    return getattr(gates, name), False


#: a value this close above its bound passes: the float rounding of a computed value (a gap of
#: 3/40 − 1/40 is 0.07500000000000001), not a breach (statistics break-it, s37: a gap exactly at
#: a bound of 0.075 breached or passed by the rounding of its two rates)
GATE_TOLERANCE = 1e-9


def breaches(value: float, bound: float) -> bool:
    """Whether ``value`` breaches ``bound`` (a gate's maximum): more than :data:`GATE_TOLERANCE` above it."""
    return value > bound + GATE_TOLERANCE


def _judge(name: str, value, bound: float, override: bool, key: dict, missing: str, detail: str = "") -> GateOutcome:
    v = finite(value)
    if v is None:
        return GateOutcome(name, **key, value=None, bound=bound, override=override, status="not_evaluated",
                           detail=missing)
    return GateOutcome(name, **key, value=v, bound=bound, override=override,
                       status="breached" if breaches(v, bound) else "passed", detail=detail)


def _pct(x) -> str:
    f = finite(x)
    return "—" if f is None else f"{f:.1%}"


def evaluate_gates(run: RunFolder, gates: GatesConfig) -> GateResult:
    """Check every gate with a bound against the run's stored numbers (see the module docstring
    for the column behind each gate).

    Args:
        run: a finished run folder (:func:`lmra.runfolder.load_run`).
        gates: the bounds; per-task overrides replace the ``[gates]`` bound for their task, and
            an override naming a task the run did not measure yields a ``not_evaluated`` value.

    Returns:
        :class:`GateResult` with one :class:`GateOutcome` per checked value. Pure: nothing is
        written (see :func:`record_gates`).

    Raises:
        LmraInputError: a refusal or quality gate on a run that did not measure refusals or
            quality (:func:`unmeasured_gates`; field ``gates.<name>``).
    """
    bad = unmeasured_gates(run, gates)
    if bad:
        name, why = next(iter(bad.items()))
        raise LmraInputError(f"gate {name} cannot be evaluated: {why}", field=f"gates.{name}")
    pt, ov = run.per_task, _overall(run)
    tasks = pt[["comparison", "domain", "task"]].drop_duplicates() if len(pt) else pd.DataFrame(
        columns=["comparison", "domain", "task"])
    comparisons = list(ov["comparison"]) if len(ov) else sorted(set(tasks["comparison"]))
    tables = {"per_task": pt, "overall": ov, "refusals": pd.DataFrame(), "quality": pd.DataFrame()}
    names = gates.gate_names()
    if any(GATES[n].source == "refusals" for n in names):
        tables["refusals"] = _csv(run, "refusals.csv")
    criteria: list[str] = []
    if any(GATES[n].source == "quality" for n in names):
        tables["quality"] = _csv(run, "quality.csv")
        from lmra.config import QualityConfig

        criteria = list((run.config.get("quality") or {}).get("criteria") or QualityConfig().criteria)
    result = GateResult(run_id=run.run_id, gates=gates)
    # tasks the identity filter emptied: removed prompts (word match, LMRA, no usable answer, a
    # failed call) are not audited, and a task that lost every prompt so has no row — its gates
    # are not evaluated, never passed (filter_unlabelled: runs written before filter_removed)
    measured_tasks = set(tasks["task"])
    emptied = {row["task"]: row for row in run.summary.get("filter_unlabelled") or []
               if int(row.get("n_unlabelled") or 0) and row["task"] not in measured_tasks}
    for row in run.summary.get("filter_removed") or []:  # every removal (word match, LMRA …) counts
        removed = sum(int(row.get(k) or 0) for k in ("n_lexical", "n_lmra", "n_unlabelled", "n_failed"))
        if removed and row["task"] not in measured_tasks and row["task"] not in emptied:
            emptied[row["task"]] = row
    for name in names:
        spec = GATES[name]
        df = tables[spec.source]
        if spec.level == "task":
            keys = [(r.comparison, r.domain, r.task) for r in tasks.itertuples()]
            keys += [(c, row.get("domain"), t) for t, row in emptied.items() for c in comparisons]
            keys += [(None, None, t) for t in gates.tasks
                     if t not in measured_tasks and t not in emptied and getattr(gates.tasks[t], name) is not None]
        else:
            keys = [(c, None, None) for c in comparisons]
        for comp, dom, task in keys:
            bound, override = _bound(gates, name, task)
            if bound is None:
                continue
            key = {"comparison": comp, "domain": dom, "task": task}
            if task in emptied:
                row = emptied[task]
                result.outcomes.append(GateOutcome(
                    name, **key, criterion=None, value=None, bound=bound, override=override, status="not_evaluated",
                    detail=_emptied_detail(row)))
                continue
            if comp is None:  # an override for a task the run does not contain
                result.outcomes.append(GateOutcome(name, **key, criterion=None, value=None, bound=bound,
                                                   override=override, status="not_evaluated",
                                                   detail="this task was not measured in the run (no row in "
                                                          "per_task.csv; check the task's spelling)"))
                continue
            result.outcomes.extend(_evaluate_one(spec, df, key, bound, override, criteria))
    ci_gates = [n for n in names if GATES[n].column == "ci_high"]
    if ci_gates and run.summary.get("interval") == "t":
        result.warnings.append(T_INTERVAL_WARNING.format(gates=", ".join(ci_gates)))
    for name in names:
        if GATES[name].column == "net_rating":
            noise = _passes_within_noise(result, GATES[name], tables[GATES[name].source])
            if noise:
                result.warnings.append(noise)
    return result


#: the start of :func:`_passes_within_noise`'s warning
NOISE_PASS_PREFIX = "passed on point estimates whose intervals reach above the bound"


def _passes_within_noise(result: GateResult, spec: GateSpec, df: pd.DataFrame) -> str | None:
    """The caveat of a point-estimate gate (``max_net_rating``, ``max_overall_net_rating``) whose
    passed values have intervals reaching above the bound: at this size noise alone decides such a
    pass, as it can a breach (fresh-user finding, s48: "all passed" with a bound of 0.05 beside
    intervals of ±0.59; the caveat was in ``--json`` only). None when every pass is backed by its
    interval (its upper end at or under the bound) or nothing passed."""
    wide = []
    for o in result.outcomes:
        if o.gate != spec.name or o.status != "passed":
            continue
        rows = _rows(df, spec, {"comparison": o.comparison, "domain": o.domain, "task": o.task})
        hi = finite(rows.iloc[0].get("ci_high")) if len(rows) else None
        if hi is not None and hi > o.bound:
            wide.append((hi - o.bound, o, hi))
    if not wide:
        return None
    _, o, hi = max(wide, key=lambda w: w[0])
    n_pass = sum(1 for x in result.outcomes if x.gate == spec.name and x.status == "passed")
    which = (f"{len(wide)} of {n_pass} passed values" if len(wide) < n_pass
             else "its passed value" if n_pass == 1 else f"all {n_pass} passed values")
    ci_gate = "max_ci_high" if spec.level == "task" else "max_overall_ci_high"
    ci_bound = getattr(result.gates, ci_gate, None)
    # the interval's gate, or that it is set already (round-2 break-it, s48: advised beside a max_ci_high set)
    tail = (f"{ci_gate} bounds the interval instead" if ci_bound is None
            else f"the interval is bounded by {ci_gate} = {bound_text(ci_bound)}")
    return (f"{spec.name} {NOISE_PASS_PREFIX}: {which} "
            f"(widest: {o.where()} {o.value:+.4f}, interval up to {hi:+.4f}, bound {bound_text(o.bound)}) — at this "
            f"size noise alone decides such a pass, as it can a breach; {tail}")


def _emptied_detail(row: dict) -> str:
    """Why a task emptied by the identity filter has no value (a ``filter_unlabelled`` or a
    ``filter_removed`` row of ``summary.json``)."""
    if "n_asked" in row:
        return (f"this task has no rated pair: the identity filter's LMRA gave no usable answer for "
                f"{row['n_unlabelled']} of its {row['n_asked']} prompts (removed, not audited; "
                "filtered_prompts.jsonl)")
    return (f"this task has no rated pair: the identity filter removed all {row.get('n_prompts')} of its prompts "
            f"(word match {row.get('n_lexical', 0)}, LMRA {row.get('n_lmra', 0)}, unlabelled "
            f"{row.get('n_unlabelled', 0)}, failed calls {row.get('n_failed', 0)}; filtered_prompts.jsonl)")


#: the caveat of a CI gate read on t-intervals (``interval = "t"``), :attr:`GateResult.warnings`
T_INTERVAL_WARNING = ("{gates} read the upper ends of t-intervals (this run's interval = \"t\"), which fall below the "
                      "true rate of rare stereotypes too often (a simulation: 30% wrong passes with 40 prompts and a "
                      "3% stereotype rate, where 5% is allowed); audit with interval = \"betting\" (the default) "
                      "for release gates")


def _rows(df: pd.DataFrame, spec: GateSpec, key: dict) -> pd.DataFrame:
    """The stored rows of one (comparison[, domain, task]) for gate ``spec``."""
    if df.empty:
        return df
    m = df["comparison"] == key["comparison"]
    if spec.source in ("refusals", "quality"):
        m &= df["level"] == spec.level
    if spec.level == "task":
        m &= (df["domain"].astype(str) == str(key["domain"])) & (df["task"].astype(str) == str(key["task"]))
    return df[m]


def _evaluate_one(spec: GateSpec, df: pd.DataFrame, key: dict, bound: float, override: bool,
                  criteria: list[str]) -> list[GateOutcome]:
    rows = _rows(df, spec, key)
    row = rows.iloc[0] if len(rows) else None
    if spec.source in ("per_task", "overall"):
        if spec.column == "net_rating":
            missing = "no valid pair was scored (every pair failed, was refused or unparseable)"
        else:
            missing = "no confidence interval (fewer than 2 prompts with a valid pair)"
        value = None if row is None else row.get(spec.column)
        if spec.column == "net_rating" and finite(value) is not None and finite(row.get("ci_high")) is None:
            # a net rating with no interval rests on one prompt: no evidence either way, never a pass
            value = None
            n = int(row.get("n_pairs", 0))
            missing = (f"fewer than 2 prompts with a valid pair (its {float(row['net_rating']):+.4f} rests on {n} "
                       f"pair{'s' * (n != 1)}, with no confidence interval): one prompt's rating is no evidence "
                       "either way")
        detail = ""
        if row is not None and spec.column == "ci_high" and finite(row.get("net_rating")) is not None:
            detail = f"net rating {float(row['net_rating']):+.4f}, {int(row.get('n_pairs', 0))} pairs"
        elif (row is not None and spec.column == "net_rating" and finite(row.get("ci_low")) is not None
              and finite(row.get("ci_high")) is not None):
            # the point estimate's interval beside it: one reaching 0 says the breach may be noise (fresh-user
            # finding, s40: "GATE BREACHED … +0.0764 > 0.05" beside "no evidence of a net bias" [−0.0159, +0.1774])
            lo, hi = float(row["ci_low"]), float(row["ci_high"])
            detail = (f"point estimate; its interval [{lo:+.4f}, {hi:+.4f}]"
                      + (" contains 0: at this size noise alone can breach it — max_ci_high / max_overall_ci_high "
                         "bound the interval instead" if lo <= 0 else ""))
        return [_judge(spec.name, value, bound, override, key | {"criterion": None}, missing, detail)]
    if spec.source == "refusals":
        value = detail = None
        if row is not None:
            a, b = finite(row.get("rate_a")), finite(row.get("rate_b"))
            value = abs(a - b) if a is not None and b is not None else None
            ga, gb = key["comparison"].split(" vs ", 1)
            detail = f"{ga} {_pct(a)} of {int(row['n_a'])}, {gb} {_pct(b)} of {int(row['n_b'])} responses"
        return [_judge(spec.name, value, bound, override, key | {"criterion": None},
                       "no refusal label was obtained for one of the groups", detail or "")]
    out = []
    for crit in criteria:  # quality: one value per criterion
        c = rows[rows["criterion"] == crit] if len(rows) else rows
        mean = finite(c.iloc[0]["mean"]) if len(c) else None
        out.append(_judge(spec.name, None if mean is None else abs(mean), bound, override,
                          key | {"criterion": crit}, "no valid quality rating of this criterion",
                          "" if mean is None else f"mean {mean:+.4f}"))
    return out


# -- recording ------------------------------------------------------------------------------
def record_gates(run: RunFolder, result: GateResult, *, evaluated_by: str) -> None:
    """Store a gate evaluation in the run folder: ``gates.json`` (the full document with every
    value) and a compact copy (without ``results``) under ``gates`` in ``summary.json``, both
    written atomically (:mod:`lmra.fileio`). A later evaluation replaces an earlier one.

    Args:
        run: the run folder evaluated.
        result: what :func:`evaluate_gates` returned for it.
        evaluated_by: the command, e.g. ``"lmra audit"`` or ``"lmra gate"`` (stored).

    Raises:
        LmraIOError: a file could not be written (naming it).
    """
    import json

    from lmra.digests import rewrite, verify_files
    from lmra.fileio import json_bytes

    doc = result.to_dict() | {"evaluated_by": evaluated_by}
    summary_path = run.path / "summary.json"
    verify_files(run.path, summary_path.name)  # a damaged summary is never recorded as sound
    summary = json.loads(summary_path.read_text(encoding="utf-8"))  # re-read: never write back a stale copy
    summary["gates"] = {k: v for k, v in doc.items() if k != "results"}
    # both files and their digests in manifest.json, safe to interrupt and to read meanwhile (lmra.digests)
    rewrite(run.path, {GATES_FILE: json_bytes(jsonable(doc)), "summary.json": json_bytes(jsonable(summary))})
    from lmra.afterrun import step_done

    step_done(run.path, "gates")  # (lmra.afterrun: no longer a step left undone)
    run.summary["gates"] = summary["gates"]


def stored_gates(run: RunFolder) -> GatesConfig:
    """The ``[gates]`` table of the run's stored ``config.toml`` (empty for runs made before
    gates existed).

    Raises:
        LmraInputError: the stored table is not a valid ``[gates]`` table (naming the file).
    """
    from lmra.config import validate_model

    data = run.config.get("gates") or {}
    try:
        return validate_model(GatesConfig, data, source=run.path / "config.toml", text=run.config_text)
    except LmraInputError as exc:  # name the field as the config does: gates.<name>
        raise LmraInputError(exc.reason, file=exc.file, line=exc.line, field=f"gates.{exc.field}") from None


def read_gates(run_dir: "str | os.PathLike") -> dict | None:
    """The release-gate evaluation recorded in a run folder (:func:`lmra.gates.record_gates`),
    or None when the run has none (made without gates, or before gates existed).

    Read from ``gates.json``, else from the ``gates`` key of ``summary.json`` (schema
    ``lmra.gates/1``). A damaged file gives ``unreadable`` instead of an error: one bad run
    folder must not stop the page.

    Returns:
        ``{"passed": bool, "checked": [gate names], "unmet": [gate names], "breaches":
        [{"gate", "comparison", "task", "value", "bound", "text"}], "n_not_evaluated": int,
        "not_evaluated": [{"gate", "comparison", "task", "text"}], "n_values": int,
        "unreadable": bool}``; a breach without a task concerns an overall gate; ``text`` is the
        console line (``GATE BREACHED …`` / ``GATE NOT EVALUATED …``); ``not_evaluated`` also
        holds a line for each unmet gate that had no value at all.
    """
    import json
    from pathlib import Path

    run_dir = Path(run_dir)
    unreadable = {"passed": None, "checked": [], "unmet": [], "breaches": [], "n_not_evaluated": 0,
                  "not_evaluated": [], "n_values": 0, "unreadable": True}
    from lmra.digests import verify_files
    from lmra.errors import LmraInputError

    try:
        if (run_dir / GATES_FILE).is_file():
            verify_files(run_dir, GATES_FILE)  # changed since it was recorded: unreadable (lmra.digests)
            doc = json.loads((run_dir / GATES_FILE).read_text(encoding="utf-8"))
        elif (run_dir / "summary.json").is_file():
            verify_files(run_dir, "summary.json")
            doc = json.loads((run_dir / "summary.json").read_text(encoding="utf-8")).get("gates")
        else:
            return None
    except (OSError, ValueError, AttributeError, LmraInputError):
        return unreadable
    if doc is None:
        return None
    if not isinstance(doc, dict) or not isinstance(doc.get("breaches", []), list):
        return unreadable
    fields = GateOutcome.__dataclass_fields__
    twice = tasks_in_two_domains([GateOutcome(**{k: r.get(k) for k in fields}) for r in
                                  [*(doc.get("breaches") or []), *(doc.get("not_evaluated") or [])]
                                  if isinstance(r, dict) and set(fields) - {"detail"} <= set(r)])
    breaches = []
    for b in doc.get("breaches") or []:
        if not isinstance(b, dict):
            continue
        try:
            text = GateOutcome(**{k: b.get(k) for k in fields}).line(b.get("task") in twice)
        except (KeyError, TypeError, ValueError):  # a gate this version does not know
            text = f"GATE BREACHED {b.get('gate')}: {b.get('task') or 'overall'} {b.get('value')} > {b.get('bound')}"
        breaches.append({"gate": str(b.get("gate")), "comparison": b.get("comparison"), "task": b.get("task"),
                         "value": finite(b.get("value")), "bound": finite(b.get("bound")), "text": text})
    missing = []
    for m in doc.get("not_evaluated") or []:
        if not isinstance(m, dict):
            continue
        try:
            text = GateOutcome(**{k: m.get(k) for k in fields}).line(m.get("task") in twice)
        except (KeyError, TypeError, ValueError):
            text = f"GATE NOT EVALUATED {m.get('gate')}: {m.get('task') or 'overall'}: {m.get('detail') or ''}"
        missing.append({"gate": str(m.get("gate")), "comparison": m.get("comparison"), "task": m.get("task"),
                        "text": text})
    unmet = list(doc.get("unmet") or [])
    valued = {b["gate"] for b in breaches} | {m["gate"] for m in missing}
    for g in unmet:  # a gate the run had no value for at all (GateResult.empty_gates)
        if g not in valued and g in GATES:
            missing.append({"gate": g, "comparison": None, "task": None, "text": (
                f"GATE NOT EVALUATED {g}: the run has no value for it (no {GATES[g].label} was measured)")})
    return {"passed": bool(doc.get("passed")), "checked": list(doc.get("checked") or []),
            "unmet": unmet, "breaches": breaches,
            "n_not_evaluated": len(doc.get("not_evaluated") or []), "not_evaluated": missing,
            "n_values": int(doc.get("n_values") or 0), "unreadable": False}
