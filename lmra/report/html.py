"""The self-contained HTML report of a run (``report.html``): the release gates recorded for
the run (:func:`lmra.gates.read_gates`), tables, per-task bars with CIs,
trend lines from the run history, the comparison scatter (FPF Figs. 7, 8, 10), the
regression check, sample-size adequacy (methodology §8), judge diagnostics and the
transcripts of the top tasks' response pairs (:mod:`lmra.report.transcripts`).

Rendered with Jinja2 from ``prompts/report/report.html.j2`` (autoescaped); figures are
inline SVG made by :mod:`lmra.report.plots`. The file has no scripts and loads nothing.
"""

from __future__ import annotations

import datetime as _dt
import functools
from pathlib import Path
from typing import Any

import pandas as pd

from lmra.compare import RunComparison
from lmra.console import percent_level
from lmra.report.console import JUDGE2_NOT_VALIDATED, judge_status_text, refusal_gap_warnings
from lmra.errors import LmraInputError, LmraIOError
from lmra.runfolder import RunFolder, finite, load_run
from lmra.runstate import partial_advice, partial_text
from lmra.fileio import write_text

#: summary.json / manifest.json keys shown by dedicated parts of the report
KNOWN_SUMMARY_KEYS = {"schema_version", "name", "run_dir", "n_prompts", "n_responses", "n_pairs_total", "confidence",
                      "combiner", "judge_methods", "judge_valid_option_mass", "overall", "per_domain", "per_task",
                      "diagnostics", "diagnostics_per_task", "redacted", "gates", "judge_status"}
KNOWN_MANIFEST_KEYS = {"status", "started", "finished", "seed", "target", "judge", "judge2", "templates", "versions",
                       "planned_calls", "calls", "judge_status", "judge_waived"}
#: the words of a summary/manifest key part in the report's fact tables (else its own, "_" as spaces,
#: a leading "n" as "number of"); the key itself is shown beside them, as summary.json spells it
FACT_WORDS = {"pid": "process id", "sha256": "SHA-256", "bytes": "size (bytes)", "setting": "setting",
              "failed_share": "share of pairs lost to failed calls", "max_failed_share": "max share of lost pairs",
              "max_invalid_share": "max share of invalid pairs", "unrated_bounds": "net rating bounds over unrated pairs",
              "filter_removed": "prompts removed by the identity filter", "per_model": "per model",
              "combiner_setting": "order combiner (config)", "interval": "interval method",
              "position_logit": "position logit", "design": "design digests", "input_files": "input files",
              "files": "files written", "pair_memo": "pair memo", "cost_usd": "cost (USD)",
              "max_cost_usd": "max cost (USD)", "classify_unusable_over_limit": "classification answers unusable, over the limit"}
#: fact sections folded away by default: the run's record for reference, not findings
FOLDED_SECTIONS = ("other-summary", "other-manifest")


def fact_label(key: str) -> str:
    """The words of a dotted summary/manifest key for the report's fact tables (fresh-user finding:
    the bottom of the report read as a dump of raw keys): ``n_prompts_in_file`` → "number of
    prompts in file", ``budget.cost_usd`` → "budget › cost (USD)"."""
    words = []
    for part in key.split("."):
        w = FACT_WORDS.get(part) or part.replace("_", " ")
        words.append("number of " + w[2:] if w.startswith("n ") else w)
    return " › ".join(words)
#: sections for the remaining keys: (id, title, predicate on the key), first match wins
SUMMARY_SECTIONS = [
    ("refusals", "Refusals", lambda k: "refus" in k),
    ("filters", "Prompt classification and identity filter", lambda k: "filter" in k or "classif" in k
     or k in ("n_prompts_in_file", "n_prompts_not_selected", "n_prompts_over_limit", "prompts_per_task")),
    ("quality", "Response quality (nine criteria)", lambda k: k.startswith("quality")),
    ("judges", "Second LMRA", lambda k: k.startswith("judges")),
    ("other-summary", "Other run results", lambda k: True),
]
#: a sentence above a section's tables: the second LMRA is not validated (the console's words)
SECTION_NOTES = {"judges": JUDGE2_NOT_VALIDATED}
MANIFEST_SECTIONS = [
    ("budget", "Cost and budget", lambda k: k in ("budget", "cost")),
    ("batch", "Batch API", lambda k: k == "batch"),
    ("other-manifest", "Other run facts", lambda k: True),
]
#: (``unusable`` counts answers; ``unparseable`` and ``judge_refused`` count replies, ``n_replies`` in all:
#: a sampled answer is its samples; ``position_preference``/``position_bias`` are "—" when no pair —
#: ``position_pairs`` — told position from content)
DIAGNOSTIC_ROWS = ["n_answers", "n_replies", "order_consistency", "position_pairs", "position_preference",
                   "position_bias", "valid_option_mass", "unusable", "unparseable", "judge_refused", "contradicting",
                   "methods", "flagged", "flag_reasons"]
#: the diagnostics table's rows named with their scale: three position figures on three scales
#: (fresh-user finding, s35: "position_preference 0.6674" beside "position_bias 0.2044" and the
#: console's logit +0.681, and no saying which one the max_position_logit gate reads)
DIAGNOSTIC_LABELS = {"position_preference": "position preference (share of decisive probability on Response 1's "
                                            "option; 0.5 = none)",
                     "position_bias": "position bias (mean p(A) − p(B); 0 = none)",
                     "position_pairs": "position pairs (decisive in both orders)"}
TREND_MAX_RUNS = 30


# -- formatting filters ------------------------------------------------------------------
def _num(x: Any, digits: int = 4, sign: bool = True) -> str:
    f = finite(x)
    if f is None:
        return "—"
    return f"{f:+.{digits}f}" if sign else f"{f:.{digits}f}"


def _pval(x: Any) -> str:
    f = finite(x)
    return "—" if f is None else (f"{f:.3g}" if f >= 1e-4 else "<1e-4")


def _int_or_dash(x: Any) -> str:
    f = finite(x)
    return "—" if f is None else str(int(f))


def _prompts_needed(x: Any) -> str:
    """A ``prompts_needed`` cell: a count, "> 10,000" beyond the search limit, or a dash."""
    from lmra.power import ADEQUACY_MAX_PROMPTS

    if isinstance(x, (int, float)) and x == float("inf"):
        return f"> {ADEQUACY_MAX_PROMPTS:,}"
    return _int_or_dash(x)


def _ci_class(row: dict) -> str:
    lo, hi = finite(row.get("ci_low")), finite(row.get("ci_high"))
    if lo is not None and lo > 0:
        return "pos"
    if hi is not None and hi < 0:
        return "neg"
    return ""


def _records(df: pd.DataFrame) -> list[dict]:
    """Frame → list of dicts with NaN/NA as None."""
    return [{k: (None if not isinstance(v, (str, list, dict, bool)) and pd.isna(v) else v) for k, v in r.items()}
            for r in df.to_dict(orient="records")]


def _cell(v: Any) -> str:
    """One table cell: floats to 4 significant digits, missing as an em dash."""
    if v is None:
        return "—"
    if isinstance(v, bool):
        return "yes" if v else "no"
    if isinstance(v, float):
        f = finite(v)
        return "—" if f is None else f"{f:.4g}"
    if isinstance(v, dict):
        return ", ".join(f"{k}: {_cell(x)}" for k, x in v.items()) or "—"
    if isinstance(v, list):
        return ", ".join(_cell(x) for x in v) or "—"
    return str(v)


def _add(section: dict, key: str, value: Any) -> None:
    """Put a JSON value into a section: lists of objects become tables, objects are
    flattened into dotted key/value rows, anything else is one row; empty lists and objects
    (a part of the audit that was switched off) are left out."""
    if isinstance(value, (list, dict)) and not value:
        return
    if isinstance(value, list) and all(isinstance(x, dict) for x in value):
        cols = list(dict.fromkeys(c for row in value for c in row))
        section["tables"].append({"title": key, "label": fact_label(key), "columns": cols,
                                  "rows": [[_cell(row.get(c)) for c in cols] for row in value]})
    elif isinstance(value, dict):
        for k, v in value.items():
            _add(section, f"{key}.{k}", v)
    else:
        section["kv"].append((fact_label(key), key, _cell(value)))


def _extra_sections(run: RunFolder) -> list[dict]:
    """Sections for summary/manifest fields without a dedicated part of the report: refusals,
    the identity filter, quality, a second judge, cost/budget, batch, and any field a later
    audit version adds. Absent keys simply give no section."""
    sections: dict[str, dict] = {}
    for source, known, rules in ((run.summary, KNOWN_SUMMARY_KEYS, SUMMARY_SECTIONS),
                                 (run.manifest, KNOWN_MANIFEST_KEYS, MANIFEST_SECTIONS)):
        for key, value in source.items():
            if key in known:
                continue
            sid, title, _ = next(r for r in rules if r[2](key.lower()))
            _add(sections.setdefault(sid, {"id": sid, "title": title, "kv": [], "tables": [],
                                           "note": SECTION_NOTES.get(sid), "folded": sid in FOLDED_SECTIONS}),
                 key, value)
    # a section of missing values only says nothing (fresh-user finding: "Response quality (nine
    # criteria)" in a run without quality ratings, its one row "quality_combiner —")
    return [s for s in sections.values() if s["tables"] or any(v != "—" for _, _, v in s["kv"])]


def _judge_context(run: RunFolder) -> dict:
    """Judge diagnostics (``summary.diagnostics``; older runs: methods and mean mass only)."""
    summary = run.summary
    overall = summary.get("overall") or []
    diag = summary.get("diagnostics") or {}
    questions = list(diag)
    table = [[DIAGNOSTIC_LABELS.get(name, name)] + [_cell(diag[q].get(name)) for q in questions] for name in DIAGNOSTIC_ROWS
             if any(name in diag[q] for q in questions)]
    per_task = [{"task": t, **{k: _cell(d.get(k)) for k in ("n_answers", "order_consistency", "position_bias",
                                                           "valid_option_mass")}, "flagged": bool(d.get("flagged"))}
                for t, d in sorted((summary.get("diagnostics_per_task") or {}).items())]
    flagged = [q for q in questions if diag[q].get("flagged")]
    return {"methods": summary.get("judge_methods") or {},
            "valid_option_mass": summary.get("judge_valid_option_mass"), "combiner": run.combiner,
            "n_invalid": sum(int(r.get("n_invalid") or 0) for r in overall),
            "n_failed": sum(int(r.get("n_failed") or 0) for r in overall),
            # refusals of a run without refusal labels: not measured, shown as such
            "n_refusal": sum(int(r.get("n_refusal") or 0) for r in overall)
            if summary.get("refusal_labels", True) else "not labelled ([refusal] enabled = false)",
            "n_unlabelled": sum(int(r.get("n_unlabelled") or 0) for r in overall)
            if summary.get("refusal_labels", True) else "not labelled ([refusal] enabled = false)",
            "questions": questions, "table": table, "per_task": per_task,
            "flagged": [f"{q}: " + ", ".join(diag[q].get("flag_reasons") or []) for q in flagged],
            # (its position logit null or NaN when not estimable: shown as such, never formatted)
            "status": ({**summary["judge_status"], "position_logit": finite(summary["judge_status"].get("position_logit"))}
                       if summary.get("judge_status") else {"status": "unknown", "reasons": []}),
            # the PASSED banner: the console's sentence (one wording of the judge check's figures)
            "passed_text": judge_status_text(summary["judge_status"]).plain
            if (summary.get("judge_status") or {}).get("status") == "passed" else None,
            "position_logit": finite(summary.get("position_logit")),  # None: not estimated (shown so)
            "combiner_nets": [{"comparison": f"{r.get('group_a')} vs {r.get('group_b')}",
                               **{m: finite(r.get(f"net_rating_{m}")) for m in ("min", "mean", "calibrated")}}
                              for r in overall if "net_rating_min" in r],
            "placebo": [r for r in summary.get("placebo") or [] if r.get("n_pairs")]}


# -- context -----------------------------------------------------------------------------
def _check_context(check, run: RunFolder | None = None, history=None) -> dict | None:
    """Normalise a :class:`lmra.monitor.CheckResult` or a stored check (dict) for the template.

    ``not_evidence``: why a "no regression" is not evidence of none (the check's
    :attr:`~lmra.monitor.CheckResult.not_evidence`; for a stored check
    :func:`lmra.monitor.no_regression_caveat` on ``run``'s statuses and, when ``history`` knows
    the baseline, the baseline's); "" when it is, or when ``run`` is not given."""
    if check is None:
        return None
    if isinstance(check, dict):  # History.latest_check
        tests, only_run, only_base = check["result"], [], []
        overall = check.get("overall")
        base_id, margin, alpha = check["baseline_id"], check["margin"], check["alpha"]
        warnings = list(check.get("warnings") or [])
        replayed = bool(check.get("replayed"))
    else:
        tests, only_run, only_base = check.tests, check.only_in_run, check.only_in_baseline
        overall = getattr(check, "overall", None)
        base_id, margin, alpha = check.baseline_id, check.margin, check.alpha
        warnings = list(getattr(check, "comparability", []) or [])
        replayed = bool(getattr(check, "replayed", False))
    from lmra.monitor import MDE_POWER, format_detectable, undecided_words

    # the tasks, then each comparison's overall row (its net rating over all its tasks, in the same Holm family)
    overall_rows = [r | {"overall": True} for r in _records(overall)] if overall is not None and len(overall) else []
    rows = [r | {"overall": False} for r in _records(tests)] + overall_rows
    n_tested = sum(1 for r in rows if finite(r.get("p_regress")) is not None)
    for r in rows:
        r["tested"] = finite(r.get("p_regress")) is not None
        r["label"] = (f"{r['task']} ({r['comparison']})" if not r.get("overall") else
                      f"overall net rating over all {_int_or_dash(r.get('n_tasks'))} tasks ({r['comparison']})")
        # the check's sensitivity (issue 12); absent from checks stored before it existed
        r["detectable"] = format_detectable(r.get("mde"), r.get("base_rate"), r.get("mde_rate"),
                                            r.get("mde_lower_bound", False))
        r["undecided"] = undecided_words(r.get("diff"), float(margin))  # (neither a regression nor an improvement)
    from lmra.power import STEREOTYPED_THRESHOLD

    sensitivity = {"power_pct": int(round(100 * MDE_POWER)), "n_tested": n_tested,
                   "threshold": f"{STEREOTYPED_THRESHOLD:g}",  # a stereotyped prompt's score, at least
                   "alpha_task": (float(alpha) / n_tested) if n_tested else None,
                   "shown": any("mde" in r for r in rows)}
    from lmra.history import refusal_reason
    from lmra.monitor import NOT_EVIDENCE_HEAD, no_regression_caveat

    from lmra.monitor import regression_caveat

    if not isinstance(check, dict):
        not_evidence = check.not_evidence
        statuses = (check.judge_status_run, check.run_status, check.judge_status_base, check.baseline_status)
    elif run is not None:  # a stored check: the night's statuses from its folder, the baseline's from the history
        base = history.get(base_id) if history is not None else None
        statuses = (run.judge_status, run.status, base.get("judge_status") if base else None,
                    base.get("status") if base else None)
        not_evidence = no_regression_caveat(rows, run_judge_status=statuses[0], run_status=statuses[1],
                                            baseline_judge_status=statuses[2], baseline_status=statuses[3])
        # the check's own recorded caveat: the LMRA's position preference fell (break-it round 2, s38: the stored
        # check's report said a plain "No regression" where the history and Prometheus said "not evidence")
        not_evidence = "; ".join(w for w in (not_evidence, check.get("position_drift") or "") if w)
    else:
        not_evidence, statuses = "", (None, None, None, None)
    refusal_notes = []
    if run is not None and not replayed:  # tonight's refusal gaps, which the check does not test (lmra.refusal_gap;
        # break-it round 2, s37: a stored check's report said a plain "No regression", and no surface but the
        # console named the improvement a refusal gap may explain)
        from lmra.refusal_gap import check_refusal_notes

        improved = [(str(r["comparison"]), str(r.get("domain")), str(r["task"])) for r in rows
                    if r.get("improved") and not r.get("overall")]
        refusal_notes, gap = check_refusal_notes(run.summary.get("refusals") or [], improved, float(alpha))
        if gap and isinstance(check, dict):  # (a live check's not_evidence has it already)
            not_evidence = "; ".join(w for w in (not_evidence, gap) if w)
    quality_notes = []
    if run is not None and not replayed:  # tonight's quality gaps, which the check does not test (lmra.quality_gap)
        from lmra.quality_gap import check_quality_notes

        base_quality = []  # the baseline's overall quality rows, for the largest gap's value there (as the check says it)
        where = history.folder_of(base_id) if history is not None else None
        if where is not None:
            try:
                base_quality = load_run(where).summary.get("quality") or []
            except (LmraInputError, LmraIOError, OSError):  # (a baseline folder unreadable: no value beside the note)
                base_quality = []
        quality_notes = check_quality_notes(run.summary.get("quality") or [], float(alpha), base_quality,
                                            run.summary.get("confidence"))[0]
    # a regression under a failed judge or from a partial run is no evidence either (as the console says it)
    caveat = regression_caveat(*statuses)
    from lmra.unrated_rise import unrated_rise_reason

    # no regression, but the LMRA left more pairs unrated than at the baseline: no conclusion (lmra.unrated_rise)
    unrated = ("" if replayed or any(r.get("regressed") for r in rows)
               else unrated_rise_reason(rows, base_id, task_label=lambda r: r["label"]))
    return {"baseline_id": base_id, "margin": margin, "alpha": alpha, "tests": rows, "sensitivity": sensitivity,
            "unrated_rise": unrated,
            # rises withheld: the baseline's unrated pairs could explain them (lmra.unrated_rise's mirror)
            "withheld": any(bool(r.get("regression_withheld")) for r in rows),
            "regression_caveat": caveat,
            "not_evidence": not_evidence, "not_evidence_head": NOT_EVIDENCE_HEAD,
            "replayed": replayed,  # every chatbot answer replayed: no verdict (said before "nothing tested")
            "refused": refusal_reason(warnings),  # the check was refused: its baseline not comparable (why)
            "regressions": [r for r in rows if r.get("regressed")],
            "improvements": [r for r in rows if r.get("improved")],
            "only_in_run": only_run, "only_in_baseline": only_base,
            "refusal_notes": refusal_notes,
            "quality_notes": quality_notes,
            "warnings": warnings}  # not a night-to-night comparison of one chatbot (lmra.comparable)


def _trend_context(run: RunFolder, history) -> list[dict]:
    from lmra.report import plots

    if history is None:
        return []
    metrics = history.metrics(name=run.name)
    me = history.get(run.run_id)
    if me is not None and me.get("started_utc"):
        metrics = metrics[(metrics["started_utc"] <= me["started_utc"]) | (metrics["run_id"] == run.run_id)]
    runs = list(dict.fromkeys(metrics["run_id"]))[-TREND_MAX_RUNS:]
    metrics = metrics[metrics["run_id"].isin(runs)]
    if len(runs) < 2:
        return []
    out = []
    for comp, m in metrics.groupby("comparison", sort=True):
        out.append({"comparison": comp, "n_runs": m["run_id"].nunique(),
                    "svg": plots.trend(m, run.run_id, f"{comp}: net rating by task across runs")})
    return out


def _comparison_context(cmp: RunComparison | None) -> dict | None:
    from lmra.report import plots

    if cmp is None:
        return None
    has_points = len(cmp.pairs) > 0
    eiv = cmp.eiv
    eiv_slope = eiv.slope if eiv is not None else None
    return {"label_a": cmp.label_a, "label_b": cmp.label_b, "pearson_r": cmp.pearson_r, "pearson_p": cmp.pearson_p,
            # least-squares (OLS) slope: kept under its old keys
            "slope": cmp.fit.slope, "slope_ci_low": cmp.fit.ci_low, "slope_ci_high": cmp.fit.ci_high,
            # errors-in-variables slope (None without per-prompt scores) and the disattenuated r
            "eiv": None if eiv is None else {"slope": _slope_num(eiv.slope), "ci_low": _slope_num(eiv.ci_low),
                                             "ci_high": _slope_num(eiv.ci_high), "n": eiv.n,
                                             "ci_method": eiv.ci_method, "n_resamples": eiv.n_resamples},
            "pearson_r_disattenuated": cmp.pearson_r_disattenuated,
            "pearson_r_disattenuated_ci": cmp.pearson_r_disattenuated_ci,
            "pearson_r_disattenuated_withheld": cmp.pearson_r_disattenuated_withheld, "reliability_a": cmp.reliability_a,
            "reliability_b": cmp.reliability_b, "r_caveat": cmp.r_caveat,
            "n": cmp.fit.n, "notes": list(cmp.notes), "pairs": _records(cmp.pairs),
            "svg": plots.comparison_scatter(cmp.pairs, cmp.label_a, cmp.label_b, cmp.fit.slope, cmp.pearson_r,
                                            eiv_slope=eiv_slope)
            if has_points else None}


def _slope_num(x: Any) -> str:
    """A slope or CI bound with 3 decimals; ±inf (an unbounded CI end) as ∞, missing as —."""
    try:
        f = float(x)
    except (TypeError, ValueError):
        return "—"
    if f != f:
        return "—"
    if f in (float("inf"), float("-inf")):
        return "∞" if f > 0 else "−∞"
    return f"{f:.3f}"


def adequacy_args(run: RunFolder, *, history=None, check=None, delta: float | None = None,
                  power: float = 0.8) -> dict:
    """The arguments :func:`build_context` gives :func:`lmra.power.sample_adequacy` besides
    ``run`` — ``delta`` (the given one, else the check's margin when it is > 0, else None),
    ``alpha`` (the run's) and ``power`` — so that the sample-size table can be computed
    elsewhere (another process, :mod:`lmra.report.worker`) with the same result."""
    if check is None and history is not None:
        check = history.latest_check(run.run_id)
    check_ctx = _check_context(check)
    if delta is None and check_ctx and 0 < check_ctx["margin"] <= 2:  # (a margin stored by an older lmra
        delta = float(check_ctx["margin"])  # that took any number is left out, not refused)
    alpha = 1 - float(run.summary.get("confidence", 0.95))
    if not 0 < alpha < 1:  # a confidence recorded as 1.0 (an alpha below 1e-16, accepted by an older lmra:
        # break-it finding, s36 — every report of the run failed naming an '--alpha' never given): its config's
        configured = finite(run.config.get("alpha"))
        alpha = configured if configured is not None and 0 < configured < 1 else 0.05
    return {"delta": delta, "alpha": alpha, "power": power}


def build_context(run: RunFolder, *, history=None, check=None, comparison: RunComparison | None = None,
                  delta: float | None = None, power: float = 0.8, transcripts: int | None = None,
                  adequacy=None) -> dict:
    """Everything the template shows, as plain Python values.

    Args:
        run: the run to report on.
        history: an open :class:`lmra.history.History` (trend lines, latest stored check); optional.
        check: a :class:`lmra.monitor.CheckResult`; default: the latest check of this run
            stored in ``history`` (if any).
        comparison: a :class:`lmra.compare.RunComparison` for the scatter; optional.
        delta: net rating the sample-size table tests each task against (default: the
            check's margin when it is > 0, else none); power: for that table.
        transcripts: tasks per comparison whose response pairs the *Transcripts* section shows
            (0 = none; default the run config's ``[report] transcripts``); never any for a
            redacted run (:mod:`lmra.report.transcripts`).
        adequacy: a callable returning the sample-size table, ``sample_adequacy(run,
            **adequacy_args(...))``, computed elsewhere meanwhile (called last, after every other
            part; its None means "compute it here"); default: computed here.
    """
    from lmra import __version__
    from lmra.gates import read_gates
    from lmra.identity import served_lines
    from lmra.power import sample_adequacy
    from lmra.report import plots
    from lmra.report.transcripts import transcripts_context

    if check is None and history is not None:
        check = history.latest_check(run.run_id)
    check_ctx = _check_context(check, run, history)
    args = adequacy_args(run, check=check, delta=delta, power=power)
    delta, alpha = args["delta"], args["alpha"]
    conf_pct = percent_level(1 - alpha)
    per_task = []
    for comp, pt in run.per_task.groupby("comparison", sort=True):
        title, caption = _bars_words(comp, pt, conf_pct)
        per_task.append({"comparison": comp, "rows": _records(pt), "caption": caption,
                         "svg": plots.task_bars(pt, title)})
    overall = run.summary.get("overall") or []
    from lmra.report.verdict import comparison_verdict

    # each comparison's answer in words, as on the console (fresh-user finding, s36)
    verdicts = [comparison_verdict(r, run.per_task.loc[(run.per_task["group_a"] == r.get("group_a"))
                                                       & (run.per_task["group_b"] == r.get("group_b")),
                                                       "ci_low"].tolist(), run.summary) for r in overall]
    tpl_hash, tpl_src = run.judge_template
    calls = {k: (run.manifest.get("calls") or {}).get(k, "—") for k in
             ("fresh", "cached", "failed", "retries", "prompt_tokens_fresh", "completion_tokens_fresh")}
    from lmra.report.console import call_counts_line

    calls_by_model = [(label, call_counts_line(c))
                      for label, c in ((run.manifest.get("calls") or {}).get("by_model") or {}).items()]
    context = {
        "lmra_version": __version__,
        "generated": _dt.datetime.now().astimezone().isoformat(timespec="seconds"),
        "confidence_pct": conf_pct,
        # refusal labels off: the tables' refusal and unlabelled cells say "off", as the console's
        # (fresh-user finding: "off" on the console, "—" in report.html)
        "refusal_labels": bool(run.summary.get("refusal_labels", True)),
        "interval_words": ("betting confidence intervals (Waudby-Smith & Ramdas 2024; they keep their coverage "
                           "when stereotypes are rare)" if run.summary.get("interval", "t") == "betting"
                           else "t-intervals"),
        "run": {"run_id": run.run_id, "name": run.name, "started": run.started, "status": run.status,
                "target_provider": run.target_provider, "target_model": run.target_model,
                "judge_provider": run.judge_provider, "judge_model": run.judge_model,
                "judge_template_sha256": tpl_hash, "judge_template_source": tpl_src,
                "config_hash": run.config_hash, "design_hash": run.design_hash,
                "n_prompts": run.summary.get("n_prompts"), "n_pairs_total": run.summary.get("n_pairs_total"),
                # the pairs scored, beside those written (nightly trial, s46: "313 / 313" on a night that scored 173)
                "n_pairs_scored": (sum(int(r.get("n_pairs") or 0) for r in run.summary["overall"])
                                   if isinstance(run.summary.get("overall"), list) else None),
                "n_pairs_failed": run.summary.get("n_pairs_failed"),
                "redacted": bool(run.summary.get("redacted")),
                "summary": {"failed_share": finite(run.summary.get("failed_share")),
                            "max_failed_share": finite(run.summary.get("max_failed_share"))},
                # what made the run partial: lost pairs and/or secondary metrics (lmra.runstate)
                "partial_text": partial_text(run.summary),
                "partial_advice": partial_advice(run.summary),  # re-run, or look at the LMRA
                "run_dir": str(run.path)},
        # the console's warning when groups are refused at significantly different rates (fresh-user
        # finding: 57/120 against 0/120 was said on the console only; report.html dumped the table)
        "refusal_warnings": refusal_gap_warnings(pd.DataFrame(run.summary.get("refusals") or []),
                                                 1 - float(run.summary.get("confidence", 0.95))),
        "check": check_ctx,
        "gates": read_gates(run.path),  # the release gates recorded by lmra audit / lmra gate, or None
        "overall": overall,
        "verdicts": verdicts,
        # worst-case bounds for the pairs without a usable rating (lmra.aggregate.unrated_bounds)
        "unrated_bounds": [b for b in run.summary.get("unrated_bounds") or [] if b.get("n_unrated")],
        "per_task": per_task,
        "trends": _trend_context(run, history),
        "comparison": _comparison_context(comparison),
        "judge": _judge_context(run),
        "calls": calls,
        "calls_by_model": calls_by_model,
        "served": served_lines(run.manifest),  # model ids / fingerprints the servers reported
        "extra_sections": _extra_sections(run),
        "transcripts": transcripts_context(run, transcripts),
    }
    table = adequacy() if adequacy is not None else None  # last: computed elsewhere meanwhile
    if table is None:
        table = sample_adequacy(run, **args)
    context["adequacy"] = {"delta": delta, "alpha": round(alpha, 4), "power": power} | _adequacy_rows(table)
    return context


def _bars_words(comparison: str, per_task: pd.DataFrame, conf_pct) -> tuple[str, str]:
    """The per-task bar chart's title and caption: they promise intervals only where the chart
    draws them, and say why the others have none (fresh-user finding: the default demo's chart,
    1 prompt per task, was titled "(95% CI)" and drew none)."""
    from lmra.report.console import NO_INTERVAL_WHY

    n = len(per_task)
    n_ci = int((per_task["ci_low"].notna() & per_task["ci_high"].notna()).sum())
    if n_ci == n:
        return (f"{comparison}: net rating per task ({conf_pct}% CI)",
                f"Net rating per task with {conf_pct}% CI ({comparison}).")
    if n_ci == 0:
        return (f"{comparison}: net rating per task (no CI: every task has < 2 prompts)",
                f"Net rating per task ({comparison}), without intervals: every task has {NO_INTERVAL_WHY}, "
                f"too few for a {conf_pct}% CI.")
    k = n - n_ci
    return (f"{comparison}: net rating per task ({conf_pct}% CI; none for {k} task{'s' * (k != 1)})",
            f"Net rating per task with {conf_pct}% CI ({comparison}); {k} of {n} tasks {'have' if k != 1 else 'has'} "
            f"no interval ({NO_INTERVAL_WHY}).")


def _adequacy_rows(table: pd.DataFrame) -> dict:
    """The sample-size table's rows for the template: ``rows`` the tasks it says something about,
    ``too_few`` the others — fewer than 2 prompts with a scored pair, so neither a detectable net
    rating nor the prompts needed — as ``{"n", "all", "labels"}`` for one sentence instead of a row
    of dashes each (fresh-user finding: the default demo's table was 27 rows of "— (none)")."""
    rows = _records(table)
    empty = [(r.get("n_prompts") or 0) < 2 and r.get("detectable") is None and r.get("prompts_needed") is None
             for r in rows]
    blank = [r for r, e in zip(rows, empty) if e]
    many = len({r["comparison"] for r in blank}) > 1  # name the comparison only when there are several
    return {"rows": [r for r, e in zip(rows, empty) if not e],
            "too_few": {"n": len(blank), "all": bool(blank) and len(blank) == len(rows),
                        "labels": [f"{r['task']} ({r['comparison']})" if many else str(r["task"]) for r in blank]}}


@functools.lru_cache(maxsize=1)
def _environment():
    """The reports' Jinja2 environment, one per process: a template is compiled once (0.1 s) and
    reused by every report the process writes (the file is checked for changes on each use)."""
    import jinja2

    from lmra.resources import resource_dir

    env = jinja2.Environment(loader=jinja2.FileSystemLoader(resource_dir("prompts") / "report"), autoescape=True,
                             undefined=jinja2.StrictUndefined, trim_blocks=True, lstrip_blocks=True)
    env.filters.update(num=_num, pval=_pval, ci_class=_ci_class, int_or_dash=_int_or_dash,
                       prompts_needed=_prompts_needed)
    return env


def report_template():
    """The compiled ``report.html.j2`` (a :class:`jinja2.Template`; compiled on first use)."""
    return _environment().get_template("report.html.j2")


def render_report(run: RunFolder, **kwargs) -> str:
    """The report as an HTML string (keyword arguments as in :func:`build_context`)."""
    return report_template().render(**build_context(run, **kwargs))


def write_report(run: RunFolder, out: str | Path | None = None, **kwargs) -> Path:
    """Write ``report.html`` (default ``<run_dir>/report.html``) and return its path.

    Keyword arguments as in :func:`build_context`. Raises ``LmraInputError`` only through
    its inputs (e.g. a bad ``delta``).
    """
    path = Path(out) if out else run.path / "report.html"
    write_text(path, render_report(run, **kwargs))
    return path
