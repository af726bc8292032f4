"""Machine-readable output of the commands: the JSON document that ``--json`` prints.

Each ``lmra check | history | compare | validate | judge-check --json`` prints exactly one
JSON document on stdout (warnings and progress go to stderr) and exits with the same status
as without ``--json``. Every document has a ``"schema"`` key naming its shape and version
(``"lmra.check/2"`` …; a new version number means a key was renamed or removed, added keys
do not change it). Numbers are numbers, not formatted strings; a value that is not defined
(NaN: a task not tested, a p-value not computed) or not finite (an unbounded interval end) is
``null``, so every document is strict JSON (``allow_nan=False``). A command that fails with
an input error (exit 2) or an I/O or model-call failure (exit 1) prints the usual paragraph
on stderr and an ``"lmra.error/1"`` document on stdout (:func:`error_document`). The shapes
are documented in docs/nightly.md, "Machine-readable output".
"""

from __future__ import annotations

import dataclasses
import functools
import json
import math
import sys
from pathlib import Path
from typing import Any, Callable

import pandas as pd

from lmra.errors import LmraInputError, LmraIOError
from lmra.runfolder import jsonable

SCHEMA_CHECK = "lmra.check/2"
SCHEMA_HISTORY = "lmra.history/1"
SCHEMA_TASK_TREND = "lmra.task_trend/1"
SCHEMA_COMPARE = "lmra.compare/1"
SCHEMA_VALIDATE = "lmra.validate/1"
SCHEMA_JUDGE_CHECK = "lmra.judge_check/1"
SCHEMA_ERROR = "lmra.error/1"


# -- conversion ------------------------------------------------------------------------
def plain(o: Any) -> Any:
    """``o`` as strict-JSON values: DataFrames → lists of row objects, dataclasses → objects,
    numpy scalars → Python numbers, NaN / ±inf / ``pd.NA`` / ``NaT`` → None, paths → str;
    dicts, lists and tuples recursively."""
    if isinstance(o, pd.DataFrame):
        return [plain(r) for r in o.to_dict(orient="records")]
    if dataclasses.is_dataclass(o) and not isinstance(o, type):
        return {f.name: plain(getattr(o, f.name)) for f in dataclasses.fields(o)}
    if isinstance(o, dict):
        return {str(k): plain(v) for k, v in o.items()}
    if isinstance(o, (list, tuple)):
        return [plain(v) for v in o]
    if o is pd.NA or o is pd.NaT:
        return None
    return jsonable(o)


def dumps(doc: dict) -> str:
    """The document as indented strict JSON (no NaN or Infinity: they become ``null``).

    Raises:
        ValueError: a value that :func:`plain` could not make strict JSON (a bug, not input).
    """
    return json.dumps(plain(doc), indent=2, ensure_ascii=False, allow_nan=False)


def emit(doc: dict) -> None:
    """Print the document on stdout, followed by a newline, and flush. A reader that went away (a
    broken pipe) is not the command's failure: nothing more is printed. A stdout that cannot be
    written (a full disk) loses the document: :class:`~lmra.errors.LmraIOError`, exit 1 — except
    for an ``lmra.error/1`` document, whose command keeps its own status (break-it finding, s38:
    three chained tracebacks, and an input error's 2 turned into 1)."""
    import os

    try:
        sys.stdout.write(dumps(doc) + "\n")
        sys.stdout.flush()
    except BrokenPipeError:
        _to_devnull()
    except (OSError, ValueError, AttributeError) as exc:
        _to_devnull()
        if str(doc.get("schema", "")).startswith("lmra.error"):
            return
        from lmra.errors import LmraIOError

        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else "the stream is closed"
        raise LmraIOError(f"the JSON document could not be written to standard output ({reason})",
                          path=os.devnull if sys.stdout is None else "<stdout>") from None


def _to_devnull() -> None:
    """Point standard output at ``/dev/null`` (its descriptor when it has one), so that nothing
    printed later fails again."""
    import os

    try:
        fd = os.open(os.devnull, os.O_WRONLY)
        try:
            os.dup2(fd, sys.stdout.fileno())
        finally:
            os.close(fd)
    except (OSError, ValueError, AttributeError):
        sys.stdout = open(os.devnull, "w", encoding="utf-8")  # noqa: SIM115 (lives as long as the process)


# -- documents -------------------------------------------------------------------------
_CHECK_FIELDS = {"run_id", "baseline_id", "margin", "alpha", "tests", "only_in_run", "only_in_baseline",
                 "judge_status_run", "judge_status_base", "judge_failed", "judge_waived_by"}


def _decision(t: dict) -> str:
    if t.get("regression_withheld"):  # a rise against a baseline whose LMRA left more pairs unrated (lmra.unrated_rise)
        return "no_conclusion"
    if t.get("regressed"):
        return "regression"
    if t.get("improved"):
        return "improvement"
    return "no_change" if t.get("p_regress") is not None else "not_tested"


def check_document(result, *, exit_status: int, allow_unvalidated_judge: bool = False) -> dict:
    """The ``lmra check --json`` document of a :class:`lmra.monitor.CheckResult`.

    Args:
        result: the check.
        exit_status: the status the command exits with (0, 3, 2 when nothing could be tested,
            5 when a judge failed validation; what the caller returns).
        allow_unvalidated_judge: ``--allow-unvalidated-judge`` was given.

    Returns:
        ``{schema, run_id, baseline_id, margin, alpha, exit_status, verdict, judge_status,
        n_tested, tests, regressions, improvements, only_in_run, only_in_baseline, overall,
        overall_regressions, overall_improvements, not_evidence}``:
        ``verdict`` is ``regression`` (a task or an overall row) / ``no_regression`` /
        ``no_conclusion`` (nothing could be tested, neither a task nor an overall row, or every
        chatbot answer of the run was replayed from the call cache: ``replayed``, or no row
        regressed but the LMRA left significantly more pairs without a usable rating than at the
        baseline: ``unrated_rise`` says where, else null; each row's ``unrated_run``/``pairs_run``,
        ``unrated_base``/``pairs_base``, ``p_unrated_rise``, ``unrated_rise``: :mod:`lmra.unrated_rise`);
        ``n_tested`` counts the tasks tested; ``judge_status`` is ``{run, baseline, gated_failure, waived_by}`` (see
        :func:`judge_status_object`); ``tests`` has one
        object per (comparison, domain, task) with every column of ``result.tests`` (counts as
        integers, H in [−1, 1], p-values in [0, 1] or null when not tested, ``mde``/``mde_rate``/
        ``base_rate``, ``mde_lower_bound`` (the detectable rise is larger than ``mde``: reverse-stereotyped
        prompts), ``regressed``/``improved`` booleans, ``note`` or null, ``mde_note``: why a
        tested task has no detectable rise, else null) plus ``decision``
        (``regression`` / ``improvement`` / ``no_change`` / ``not_tested``) and, for ``no_change``,
        ``decision_words`` (the console's ``rise, not significant`` / ``fall, not significant`` /
        ``no significant change``; else null); ``regressions`` and
        ``not_evidence``: why the verdict is no evidence about the chatbot — a partial run, a
        judge that failed validation (waived), for a ``no_regression`` also no row able to detect
        a rise — else null; ``improvements`` list ``{comparison, domain, task}`` (for a replay, ``replayed``: every
        tested row's ``decision`` is ``replayed``, ``regressed``/``improved`` false, both lists
        empty — its rises are the replayed answers', p-values kept); ``overall``: one object per
        comparison with at least 2 tasks in both runs — its net rating over all of them, tested in
        the same Holm family (the columns of ``tests`` plus ``n_tasks``; ``domain`` "", ``task``
        "all tasks") — and ``overall_regressions``/``overall_improvements`` list those
        comparisons (a regression there makes the verdict ``regression``). Fields that later versions add to
        ``CheckResult`` appear under their own names: ``identity_changes``, ``judge_failed``,
        ``judge_waived_by``, ``run_status``/``baseline_status`` (each run's manifest status:
        ``complete``, ``partial`` …) and ``run_failed_share``/``baseline_failed_share`` (share of
        the planned pairs lost to failed calls, in [0, 1], or null).
    """
    tests, overall = plain(result.tests), plain(result.overall)
    replayed = bool(getattr(result, "replayed", False))
    from lmra.monitor import undecided_words

    for t in tests + overall:
        t["note"] = t.get("note") or None
        t["mde_note"] = t.get("mde_note") or None
        t["decision"] = _decision(t)
        # the console's words for a row neither regressed nor improved — "rise, not significant", "fall, not
        # significant", "no significant change" — else null (fresh-user finding, s39: "no_change" lost the direction)
        t["decision_words"] = (undecided_words(t.get("diff"), float(result.margin)) if t["decision"] == "no_change"
                               else None)
        if replayed and t["decision"] != "not_tested":  # rows of replayed answers decide nothing (review
            t["decision"] = "replayed"  # finding: a jq filter on .regressed printed them as regressions)
            t["regressed"] = t["improved"] = False
    keys = ["comparison", "domain", "task"]
    overall_regs = [t["comparison"] for t in overall if t["regressed"]]
    verdict = result.verdict
    kept = (lambda frame: frame.iloc[0:0]) if replayed else (lambda frame: frame)  # noqa: E731
    doc = {
        "schema": SCHEMA_CHECK, "run_id": result.run_id, "baseline_id": result.baseline_id,
        "margin": result.margin, "alpha": result.alpha, "exit_status": int(exit_status), "verdict": verdict,
        "judge_status": judge_status_object(result, allow_unvalidated_judge=allow_unvalidated_judge),
        "n_tested": result.n_tested, "tests": tests,
        "regressions": plain(kept(result.regressions[keys])), "improvements": plain(kept(result.improvements[keys])),
        "only_in_run": list(result.only_in_run), "only_in_baseline": list(result.only_in_baseline),
        "overall": overall, "overall_regressions": overall_regs,
        "overall_improvements": [t["comparison"] for t in overall if t["improved"]],
        # without a regression: why the LMRA's unrated pairs leave no conclusion (lmra.unrated_rise), else null
        "unrated_rise": (getattr(result, "unrated_rise", "") or None) if verdict == "no_conclusion" and not replayed
        else None,
        # why the verdict is no evidence about the chatbot, else null: a regression's (a partial run, a judge that
        # failed validation: fresh-user finding, s39 — 'check --json' on a partial run said "regression" alone),
        # a no-regression's (those, or no row able to detect a rise: CheckResult.not_evidence)
        "not_evidence": _not_evidence(result, verdict),
    }
    for f in dataclasses.fields(result):  # fields added to CheckResult later (gates, model identity …)
        if f.name not in _CHECK_FIELDS and f.name not in doc:
            doc[f.name] = plain(getattr(result, f.name))
    return doc


def _not_evidence(result, verdict: str) -> str | None:
    """The check document's ``not_evidence``: why its ``regression`` or ``no_regression`` says
    nothing sure of the chatbot (:func:`lmra.monitor.regression_caveat`,
    :attr:`lmra.monitor.CheckResult.not_evidence`), else None (also for ``no_conclusion``)."""
    if verdict == "regression":
        from lmra.monitor import regression_caveat

        return regression_caveat(result.judge_status_run, getattr(result, "run_status", None),
                                 result.judge_status_base, getattr(result, "baseline_status", None)) or None
    return (getattr(result, "not_evidence", "") or None) if verdict == "no_regression" else None


def judge_status_object(result, *, allow_unvalidated_judge: bool = False) -> dict:
    """The ``judge_status`` object of the check document.

    Returns:
        ``{run, baseline, gated_failure, waived_by}``: ``run`` and ``baseline`` are each run's
        judge status as ``lmra history`` shows it (``passed``, ``failed``, ``failed (waived)``,
        ``not_checked``, ``unknown``); ``gated_failure`` is true when the check's verdict is void
        because a run's judge failed validation and nobody waived it (the check then exits 5);
        ``waived_by`` says who waived a failed validation the verdict would otherwise be void
        for: ``"command line"`` (this check's ``--allow-unvalidated-judge``, or the audit's,
        recorded in the run), ``"config"`` (the run's ``[judge_check] gate = false``), or null
        when no failure was waived.
    """
    recorded = set((getattr(result, "judge_waived_by", None) or {}).values())
    waived_here = bool(result.judge_failed and allow_unvalidated_judge)
    waived_by = ("command line" if waived_here or "command line" in recorded else "config" if recorded else None)
    return {"run": result.judge_status_run, "baseline": result.judge_status_base,
            "gated_failure": bool(result.judge_failed and not allow_unvalidated_judge), "waived_by": waived_by}


def history_document(path: Path, runs: pd.DataFrame, overall: pd.DataFrame, *, name: str | None = None,
                     verdicts: dict[str, dict] | None = None, not_finished: list[dict] | None = None) -> dict:
    """The ``lmra history --json`` document.

    Args:
        path: the history file; runs: :meth:`lmra.history.History.runs`; overall:
            :meth:`lmra.history.History.overall_trend`; name: the ``--name`` filter;
            verdicts: ``{run_id: {"check": …, "gates": …}}`` — a run's
            :meth:`lmra.history.History.check_summary` and :func:`lmra.gates.read_gates`;
            not_finished: :meth:`lmra.history.History.not_finished`.

    Returns:
        ``{schema, history, name, runs, not_finished}`` (``not_finished``: the run folders that
        did not finish — failed, interrupted, stopped by the budget, stale, running — as
        ``{run_id, name, status, started, stop_reason}``, oldest first; not in ``runs``); ``runs`` oldest first, one object per run with every
        column of the history's ``runs`` table (``run_id, run_dir, name, status, started,
        target_model, judge_model, judge_status, n_pairs, n_invalid, n_failed, …``),
        ``comparisons`` as a list, ``pinned`` (bool), ``overall``: one object per comparison
        with ``n_pairs, net_rating, ci_low, ci_high, p_value, forward_rate, reverse_rate …``,
        ``check``: the run's regression check (its audit's own, else the latest:
        :meth:`lmra.history.History.latest_check`) ``{baseline_id, checked, source, verdict,
        refused (why the night's check was refused: its baseline not comparable — e.g. the judge's
        served model changed; null for a check that ran), n_tested, detectable (``{min, max,
        n_undetectable}``: the rises the tested tasks detect with 80% power, smallest and largest,
        and how many detect none — what a quiet night rules out; null when not recorded), warnings, identity_changes
        (served-model change lines since the baseline, null when not recorded), regressed, improved, n_overall_tested, overall_regressed,
        overall_improved, replayed, unrated_rise, not_evidence, notes, quality_gap}`` (``not_evidence``: why its
        verdict says nothing sure of the chatbot, as ``lmra check --json`` has it — for a
        ``regression`` or a ``no_regression`` either run's judge failed validation or either run
        is not complete; for a ``no_regression`` also tonight's groups refused at significantly
        different rates, or the LMRA's position preference fell — null otherwise; ``notes``: the check's notes, as ``lmra check`` prints them; ``quality_gap``:
        tonight's significant quality gaps between the groups in words, which the check does not test
        (null: none, or not recorded); ``unrated_rise``: the rows whose share of pairs
        without a usable LMRA rating rose significantly over the baseline's, in words, when that
        left the check without a conclusion, else null; ``replayed``: every chatbot answer of the run came from the
        call cache, a same-seed re-run repeating a night; ``verdict``: ``regression`` / ``no_regression`` / ``no_conclusion`` —
        nothing tested, or every chatbot answer replayed, whose rows then flag nothing;
        ``warnings``: the check's comparability warnings, :mod:`lmra.comparable`; ``regressed``
        and ``improved`` lists of ``{comparison, domain, task}``; the ``overall_`` lists name the
        comparisons whose net rating over all their tasks regressed / improved), null when
        never checked, and ``gates``: its recorded release gates ``{passed, checked, unmet,
        breaches, unreadable}`` (as ``lmra gate --json`` lists them), null when it has none;
        ``folder_gone``: true when the run's folder is neither beside the history nor where it was
        recorded (the row is what the history recorded).
    """
    out = []
    rows = plain(runs)
    status_of = {r.get("run_id"): (r.get("judge_status"), r.get("status")) for r in rows}
    # each run's overall rows, converted once (a mask and a conversion per run grew as the square of the nights)
    overall_of: dict = {}
    for run_id, o in zip(overall["run_id"] if "run_id" in overall else [],
                         plain(overall.drop(columns=["run_id", "started", "name"], errors="ignore"))):
        overall_of.setdefault(run_id, []).append(o)
    for r in rows:
        try:
            r["comparisons"] = json.loads(r["comparisons"]) if r.get("comparisons") else []
        except (TypeError, ValueError):
            pass
        r["overall"] = overall_of.get(r["run_id"], [])
        v = (verdicts or {}).get(r["run_id"]) or {}
        check, gates = v.get("check"), v.get("gates")
        flagged = lambda keyed: [{"comparison": c, "domain": d, "task": t} for c, d, t in sorted(keyed, key=str)]  # noqa: E731
        r["check"] = None if check is None else {
            "baseline_id": check["baseline_id"], "checked": check["checked"], "source": check.get("source"),
            "warnings": None if check.get("warnings") is None else list(check["warnings"]),
            "identity_changes": (None if check.get("identity_changes") is None
                                 else list(check["identity_changes"])),
            "verdict": check.get("verdict"), "refused": check.get("refused"), "n_tested": check["n_tested"],
            # every chatbot answer replayed from the call cache (a same-seed re-run): a night repeated
            "replayed": bool(check.get("replayed")),
            # no regression, but the LMRA left more pairs unrated than at the baseline (lmra.unrated_rise): where
            "unrated_rise": (check.get("unrated_rise") or None) if check.get("verdict") == "no_conclusion" else None,
            "detectable": check.get("detectable"),
            # why its "no regression" is not evidence of none (a refusal gap tonight, the LMRA's position
            # preference fell); null otherwise, or for a check an older lmra recorded; its notes
            "not_evidence": _stored_not_evidence(check, status_of.get(r["run_id"], (None, None)),
                                                 status_of.get(check["baseline_id"], (None, None))),
            "notes": list(check.get("notes") or []),
            # tonight's significant quality gaps, which the check does not test (null: none, or not recorded)
            "quality_gap": check.get("quality_gap") or None,
            "regressed": flagged(check["regressed"]), "improved": flagged(check["improved"]),
            "n_overall_tested": check.get("n_overall_tested", 0),
            "overall_regressed": sorted(check.get("overall_regressed") or {}, key=str),
            "overall_improved": sorted(check.get("overall_improved") or {}, key=str)}
        r["folder_gone"] = bool(v.get("folder_gone"))  # its folder is neither beside the history nor where recorded
        # the steps after its folder (gates, warehouse) that the process that wrote it left undone (lmra.afterrun)
        r["after_run_pending"] = list(v.get("after_run_pending") or [])
        r["gates"] = None if gates is None else {k: gates[k] for k in ("passed", "checked", "unmet", "unreadable")} | {
            "breaches": [{k: b[k] for k in ("gate", "comparison", "task", "value", "bound")} for b in gates["breaches"]]}
        out.append(r)
    return {"schema": SCHEMA_HISTORY, "history": str(path), "name": name, "runs": out,
            "not_finished": list(not_finished or [])}


def _stored_not_evidence(check: dict, run_status: tuple, base_status: tuple) -> str | None:
    """A stored check's ``not_evidence`` in ``lmra history --json``, as ``lmra check --json`` gives it
    (break-it round 2, s39: "run partial" there, null here for the same check): why its ``regression``
    or ``no_regression`` says nothing sure of the chatbot — either run's judge failed validation or
    either run is not complete (:func:`lmra.monitor.not_evidence_reason`, from the history's rows),
    and, for a ``no_regression``, its recorded caveats (position drift, a refusal gap); else None."""
    from lmra.monitor import not_evidence_reason

    verdict = check.get("verdict")
    if verdict not in ("regression", "no_regression"):
        return None
    why = [not_evidence_reason(*run_status), not_evidence_reason(*base_status, whose="baseline")]
    if verdict == "no_regression":
        why.append(check.get("not_evidence") or "")
    return "; ".join(w for w in why if w) or None


def task_trend_document(path: Path, task: str, trend: pd.DataFrame, *, comparison: str | None = None,
                        name: str | None = None) -> dict:
    """The ``lmra history --task T --json`` document.

    Returns:
        ``{schema, history, task, comparison, name, points}``; ``points`` oldest run first, one
        object per (run, comparison) with the columns of :meth:`lmra.history.History.task_trend`
        (``run_id, started, name, status, target_model, judge_provider, judge_model, judge_status,
        combiner, comparison, domain, task, n_pairs, net_rating, ci_low, ci_high, p_value, forward_rate,
        reverse_rate, replayed``; ``replayed`` true for a night whose every chatbot answer came from
        the call cache, as its check found: a repeat of an earlier night's point).
    """
    return {"schema": SCHEMA_TASK_TREND, "history": str(path), "task": task, "comparison": comparison,
            "name": name, "points": plain(trend)}


def _interval_fit(fit) -> dict | None:
    if fit is None:
        return None
    d = plain(fit)
    d["ci_unbounded"] = bool(math.isinf(fit.ci_low) or math.isinf(fit.ci_high))
    return d


def compare_document(cmp, *, run_a: str, run_b: str, comparison: str | None = None, alpha: float = 0.05,
                     status_a: str | None = None, status_b: str | None = None) -> dict:
    """The ``lmra compare --json`` document of a :class:`lmra.compare.RunComparison`.

    Returns:
        ``{schema, run_a, run_b, status_a, status_b, comparison, ci_level, n_tasks, pearson,
        eiv_slope, ols_slope, notes, tasks}`` (``status_*``: each run's manifest status,
        ``complete`` or ``partial``): ``pearson`` is ``{r, p, r_disattenuated, r_disattenuated_ci_low,
        r_disattenuated_ci_high, r_disattenuated_withheld, reliability_a, reliability_b, caveat}``
        (``r_disattenuated`` null when withheld — a reliability below 0.5, a value outside ±1 —
        and ``r_disattenuated_withheld`` says why); ``eiv_slope`` (null without prompt scores) ``{slope, ci_low, ci_high, n, var_a,
        var_b, ci_method, n_resamples, identified, a_zero_p, ci_unbounded}`` — an interval end that is ±∞ is null with
        ``ci_unbounded`` true; ``ols_slope`` ``{slope, se, ci_low, ci_high, n, ci_unbounded}``;
        ``tasks`` one object per task measured in both runs (``comparison, domain, task, h_a, h_b,
        ci_low_a, ci_high_a, ci_low_b, ci_high_b, n_pairs_a, n_pairs_b``, with prompt scores
        ``n_prompts_a, n_prompts_b, var_h_a, var_h_b``); ``only_in_a``/``only_in_b`` the tasks
        (``{comparison, domain, task}``) with a net rating in one run only, left out.
    """
    return {
        "schema": SCHEMA_COMPARE, "run_a": run_a, "run_b": run_b, "status_a": status_a, "status_b": status_b,
        "comparison": comparison,
        "ci_level": 1 - alpha, "n_tasks": int(len(cmp.pairs)),
        "pearson": {"r": cmp.pearson_r, "p": cmp.pearson_p, "r_disattenuated": cmp.pearson_r_disattenuated,
                    "r_disattenuated_ci_low": cmp.pearson_r_disattenuated_ci[0],
                    "r_disattenuated_ci_high": cmp.pearson_r_disattenuated_ci[1],
                    "r_disattenuated_withheld": cmp.pearson_r_disattenuated_withheld or None,
                    "reliability_a": cmp.reliability_a, "reliability_b": cmp.reliability_b,
                    "caveat": cmp.r_caveat},
        "eiv_slope": _interval_fit(cmp.eiv), "ols_slope": _interval_fit(cmp.fit),
        "notes": list(cmp.notes), "tasks": plain(cmp.pairs),
        "only_in_a": plain(cmp.only_in_a), "only_in_b": plain(cmp.only_in_b),
    }


def validate_document(config: str, **fields) -> dict:
    """The ``lmra validate --json`` document: ``{schema, config, valid: true, kind, …fields}``
    (an invalid config exits 2 with an :func:`error_document` instead)."""
    return {"schema": SCHEMA_VALIDATE, "config": str(config), "valid": True} | fields


def judge_check_document(verdict: dict, *, exit_status: int) -> dict:
    """The ``lmra judge-check --json`` document: ``{schema, exit_status}`` followed by every key
    of the verdict (:func:`lmra.judge_check.evaluate` plus ``combiner``, ``judge``, ``calls``),
    as written to ``judge_check.json``."""
    return {"schema": SCHEMA_JUDGE_CHECK, "exit_status": int(exit_status)} | verdict


# -- errors ----------------------------------------------------------------------------
def error_document(command: str | None, exc: BaseException, *, exit_status: int, kind: str, message: str) -> dict:
    """The ``lmra.error/1`` document of a command that failed under ``--json``.

    Returns:
        ``{schema, command, exit_status, error: {kind, message, file, line, field}}``; ``kind``
        is ``input`` (exit 2), ``io`` (exit 1) or ``failure`` (exit 1, e.g. a model endpoint that
        is down); ``message`` is the paragraph printed on stderr; ``file``/``line``/``field`` are
        null when unknown (an I/O error's path is its ``file``).
    """
    err = {"kind": kind, "message": message, "file": None, "line": None, "field": None}
    if isinstance(exc, LmraInputError):
        err |= {"file": exc.file, "line": exc.line, "field": exc.field}
    elif isinstance(exc, LmraIOError):
        err["file"] = exc.path
    elif isinstance(exc, OSError) and getattr(exc, "filename", None):
        err["file"] = str(exc.filename)
    return {"schema": SCHEMA_ERROR, "command": command, "exit_status": int(exit_status), "error": err}


def _failure(exc: BaseException, args) -> tuple[BaseException, int, str, str] | None:
    """The error as ``lmra.cli.main`` reports it (an input error with the config's file and line
    filled in), its exit status, kind and stderr text; None for what gets no document (Ctrl-C)."""
    import sqlite3

    from lmra.providers.base import ProviderError

    if isinstance(exc, LmraInputError):
        from lmra.cli.common import in_config

        exc = in_config(exc, args)
        return exc, 2, "input", exc.format()
    if isinstance(exc, LmraIOError):
        return exc, 1, "io", exc.format()
    if isinstance(exc, (OSError, sqlite3.Error)):
        where = getattr(exc, "filename", None)
        return exc, 1, "io", (f"{where}: " if where else "") + f"{type(exc).__name__}: {exc}"
    if isinstance(exc, (UnicodeError, LookupError)):
        return exc, 2, "input", f"{type(exc).__name__}: {exc}"
    if isinstance(exc, ProviderError):
        return exc, 1, "failure", str(exc)
    return None


def json_errors(handler: Callable) -> Callable:
    """Decorate a command handler so that, under ``--json``, a failure also prints an
    :func:`error_document` on stdout before ``lmra.cli.main`` reports it on stderr and exits
    with the same status (2 input error; 1 I/O or model-call failure). The exception is
    re-raised unchanged; without ``--json`` the handler is untouched."""

    @functools.wraps(handler)
    def wrapper(args):
        try:
            return handler(args)
        except Exception as exc:
            if getattr(args, "json", False):
                found = _failure(exc, args)
                if found is not None:
                    reported, status, kind, message = found
                    emit(error_document(getattr(args, "command", None), reported, exit_status=status, kind=kind,
                                        message=message))
            raise

    return wrapper
