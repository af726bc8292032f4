"""Writing a finished audit: rescoring under every combiner, aggregation, judge status, run
status, and the run folder's files (methodology §2–§3; run statuses in :mod:`lmra.runstate`).

Split from :mod:`lmra.audit`, which runs the stages; this module turns their results into
``ratings.parquet`` (:mod:`lmra.pairstore`), the tables, ``summary.json`` and the final ``manifest.json``.
"""

from __future__ import annotations

import datetime as _dt
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pandas as pd

from lmra import aggregate
from lmra.diagnostics import judge_diagnostics, judge_diagnostics_by
from lmra.generate import Response
from lmra.judge.filter import FilterDecision
from lmra.judge.taxonomy import Classification
from lmra.data import PromptRecord
from lmra.runstate import failed_share, run_status
from lmra.fileio import write_csv
from lmra.pairstore import JSON_COLUMNS, PARQUET_NAME, write_pairs

if TYPE_CHECKING:
    from lmra.audit import Audit, Inputs


@dataclass
class AuditResult:
    """What an audit returns (also written to ``run_dir``). Frames are empty when a part is off."""

    run_dir: Path
    responses: pd.DataFrame
    ratings: pd.DataFrame
    per_task: pd.DataFrame
    per_domain: pd.DataFrame
    overall: pd.DataFrame
    summary: dict
    manifest: dict
    refusals: pd.DataFrame = field(default_factory=pd.DataFrame)
    quality: pd.DataFrame = field(default_factory=pd.DataFrame)
    quality_ratings: pd.DataFrame = field(default_factory=pd.DataFrame)
    judges: pd.DataFrame = field(default_factory=pd.DataFrame)
    filtered: pd.DataFrame = field(default_factory=pd.DataFrame)
    axes: Any = None  #: :class:`lmra.axes.AxesResult` when ``axes.enabled``



def finish_run(audit: "Audit", inputs: "Inputs", prompts: list[PromptRecord],
               classifications: dict[str, Classification], decisions: list[FilterDecision],
               responses: list[Response], refusals: dict[int, tuple[float | None, bool]], ratings: list[dict],
               quality_rows: list[dict], manifest: dict, axes_result: Any = None) -> AuditResult:
    """Score, aggregate and write a finished audit's run folder; return its :class:`AuditResult`.

    Every pair is rescored under the min, mean and calibrated combiners (the main columns
    carry the run's combiner); per-task / per-domain / overall tables, placebo, refusal,
    quality and two-judge tables, judge diagnostics and the judge status are computed;
    ``responses.jsonl``, ``ratings.parquet``, the CSV tables, ``summary.json`` and the final
    ``manifest.json`` (status ``complete``, ``partial`` or ``failed``, see
    :mod:`lmra.runstate`) are written atomically.

    Args:
        audit: the running :class:`~lmra.audit.Audit` (its config, run folder, call counts,
            judge check and combiner).
        inputs ... axes_result: what the audit's stages returned.

    Raises:
        LmraIOError: a file could not be written (naming it).
    """
    from lmra.judge.calibration import rescore
    from lmra.judge_check import judge_status

    cfg = audit.cfg
    iv = cfg.interval
    all_text = {p.id: p.text for p in inputs.prompts}
    resp_rows = [r.model_dump() for r in responses]
    for i, row in enumerate(resp_rows):
        p_ref, refused = refusals.get(i, (None, None))
        row["refusal_p"], row["refused"] = p_ref, refused
    if cfg.redact:  # responses often quote the user's message: keep only their length
        disk_rows = [r | {"text": None, "scrubbed": None, "n_chars": len(r["text"] or ""), "redacted": True}
                     for r in resp_rows]
    else:
        disk_rows = resp_rows
    is_placebo = [r["comparison"] in inputs.placebo for r in resp_rows]
    audit._write_jsonl("responses.jsonl", [r for r, pl in zip(disk_rows, is_placebo) if not pl])
    if not cfg.redact:  # the audited prompts' texts, for the report's transcripts (a redacted run keeps none)
        audit._write_jsonl("prompts.jsonl", [p.model_dump(include={"id", "domain", "task", "text"}) for p in prompts])
    # every pair is scored under min, mean and calibrated; the main columns carry the run's combiner
    combiner, warnings = audit.run_combiner()
    warnings += [f"no placebo for {c}: its group A is a direct profile, which has no names to split"
                 for c in getattr(audit, "placebo_skipped", [])]
    identity = getattr(audit, "identity", None)  # chat-template tokens in answers (lmra.identity)
    warnings += identity.warnings() if identity is not None else []
    all_rdf, position_logit = rescore(pd.DataFrame(ratings), combiner)
    if cfg.judge2 is not None and "judge2_order1" in all_rdf:
        all_rdf, _ = rescore(all_rdf, audit.run_combiner(cfg.judge2, audit._judge2_provider())[0],
                             prefix="judge2_")
    pmask = all_rdf["placebo"].astype(bool) if "placebo" in all_rdf else pd.Series(False, all_rdf.index)
    rdf, placebo_rdf = all_rdf[~pmask].reset_index(drop=True), all_rdf[pmask].reset_index(drop=True)
    write_pairs(audit.run_dir / PARQUET_NAME, rdf)  # Parquet row groups (lmra.pairstore)
    scores = rdf[[c for c in rdf.columns if c not in JSON_COLUMNS]]  # the tables need no answer objects
    pt = aggregate.per_task(scores, cfg.alpha, iv)
    pdm = aggregate.per_domain(scores, cfg.alpha, iv)
    ov = aggregate.overall(scores, cfg.alpha, iv)
    write_csv(pt, audit.run_dir / "per_task.csv")
    write_csv(pdm, audit.run_dir / "per_domain.csv")
    placebo_df = pd.DataFrame()
    if inputs.placebo:
        audit._write_jsonl("placebo_responses.jsonl", [r for r, pl in zip(disk_rows, is_placebo) if pl])
        audit._write_jsonl("placebo_ratings.jsonl", placebo_rdf.to_dict(orient="records"))
        placebo_df = aggregate.placebo_table(placebo_rdf, inputs.placebo, cfg.alpha, iv)
        write_csv(placebo_df, audit.run_dir / "placebo.csv")

    refusal_df = aggregate.refusal_table(scores, cfg.alpha) if cfg.refusal.enabled else pd.DataFrame()
    if not refusal_df.empty:
        write_csv(refusal_df, audit.run_dir / "refusals.csv")
    qdf = pd.DataFrame(quality_rows)
    if combiner == "calibrated" and not qdf.empty:  # each criterion's own position logit
        qdf = pd.concat([rescore(g, combiner)[0] for _, g in qdf.groupby("criterion", sort=False)])
        qdf = qdf.sort_index().reset_index(drop=True)
        quality_rows = qdf.to_dict(orient="records")
    quality_df = aggregate.quality_table(qdf, cfg.alpha) if cfg.quality.enabled else pd.DataFrame()
    if cfg.quality.enabled:
        audit._write_jsonl("quality_ratings.jsonl", quality_rows)
        write_csv(quality_df, audit.run_dir / "quality.csv")
    judges_df = aggregate.two_judges(scores, cfg.alpha, iv) if cfg.judge2 is not None else pd.DataFrame()
    if not judges_df.empty:
        write_csv(judges_df, audit.run_dir / "judges.csv")

    filtered_rows = [d.model_dump() | ({"lexical": [f"<{len(d.lexical)} phrase(s) redacted>"] if d.lexical
                                        else []} if cfg.redact else {"text": all_text.get(d.prompt_id)})
                     for d in decisions]
    audit._write_jsonl("filtered_prompts.jsonl", filtered_rows)
    if classifications:
        audit._write_jsonl("classifications.jsonl", [
            {"prompt_id": pid} | c.model_dump() | ({} if cfg.redact else {"text": all_text.get(pid)})
            for pid, c in classifications.items()])

    th = dict(min_valid_mass=cfg.judge.min_valid_mass, min_order_consistency=cfg.judge.min_order_consistency)
    diag = {"stereotype": judge_diagnostics(rdf, **th)}
    diag_tasks = judge_diagnostics_by(rdf, "task", **th)
    if cfg.quality.enabled and not qdf.empty:
        diag["quality"] = judge_diagnostics(qdf, **th)
    if cfg.judge2 is not None and "judge2_order1" in rdf:
        th2 = dict(min_valid_mass=cfg.judge2.min_valid_mass, min_order_consistency=cfg.judge2.min_order_consistency)
        diag["judge2_stereotype"] = judge_diagnostics(
            rdf.rename(columns={"order1": "_o1", "order2": "_o2", "judge2_order1": "order1",
                                "judge2_order2": "order2"}), **th2)
    n_lex = sum(1 for d in decisions if d.reason == "lexical")
    n_filter_unlabelled = sum(1 for d in decisions if d.reason == "unlabelled")
    verdict = getattr(audit, "judge_verdict", None)
    if verdict is not None:
        audit._write_jsonl("judge_check_ratings.jsonl", audit.canary_rows.to_dict(orient="records"))
        audit._write_json("judge_check.json", verdict)
    status = judge_status(verdict, placebo_df, diag["stereotype"],
                          gated=cfg.judge_check.gate and not audit.allow_unvalidated_judge,
                          waiver="--allow-unvalidated-judge" if audit.allow_unvalidated_judge
                          else cfg.judge_check.waiver)
    n_pairs_failed = int(rdf["failed"].fillna(False).astype(bool).sum()) if "failed" in rdf else 0
    n_classify_failed = sum(1 for c in classifications.values() if c.failed)
    n_filter_failed = sum(1 for d in decisions if d.reason == "unlabelled" and d.error)
    share = failed_share(n_pairs_failed, len(rdf), n_classify_failed + n_filter_failed,
                         len(cfg.comparisons) * cfg.samples_per_prompt)
    n_valid = int(rdf["valid"].fillna(False).astype(bool).sum()) if "valid" in rdf else 0
    run_st = run_status(share, cfg.max_failed_share, n_valid)  # nothing scored and calls failed → failed
    summary = {
        "schema_version": 2,
        "run_status": run_st,
        "n_pairs_failed": n_pairs_failed,
        "n_prompts_classify_failed": n_classify_failed,
        "n_prompts_filter_failed": n_filter_failed,
        "failed_share": share,
        "max_failed_share": cfg.max_failed_share,
        "name": cfg.name,
        "run_dir": str(audit.run_dir),
        "redacted": cfg.redact,
        "n_prompts_in_file": len(inputs.prompts),
        "n_classified": len(classifications),
        "classified_tasks": dict(pd.Series([c.task for c in classifications.values()], dtype=object)
                                 .value_counts().items()) if classifications else {},
        "judge_status": status,
        "warnings": warnings,
        "refusal_labels": cfg.refusal.enabled,
        "n_filtered": len(decisions),
        "n_filtered_lexical": n_lex,
        "n_filtered_lmra": len(decisions) - n_lex - n_filter_unlabelled,
        "n_filtered_unlabelled": n_filter_unlabelled,
        "n_prompts": len(prompts),
        "n_responses": len(responses),
        "n_pairs_total": len(rdf),  # placebo pairs are counted in summary["placebo"]
        "n_pairs_refusal": int(rdf["refused"].sum()) if not rdf.empty else 0,
        "n_pairs_unlabelled": int(rdf["unlabelled"].fillna(False).astype(bool).sum())
        if "unlabelled" in rdf else 0,
        "confidence": 1 - cfg.alpha,
        "interval": iv,
        "combiner": combiner,
        "combiner_setting": cfg.judge.combiner,
        "position_logit": position_logit,
        "placebo": placebo_df.to_dict(orient="records"),
        "judge_methods": diag["stereotype"]["methods"],
        "judge_valid_option_mass": diag["stereotype"]["valid_option_mass"],
        "diagnostics": diag,
        "diagnostics_per_task": diag_tasks,
        "overall": ov.to_dict(orient="records"),
        "per_domain": pdm.to_dict(orient="records"),
        "per_task": pt.to_dict(orient="records"),
        "refusals": refusal_df.to_dict(orient="records"),
        "quality": quality_df.to_dict(orient="records"),
        "judges": judges_df.to_dict(orient="records"),
    }
    if axes_result is not None:
        summary["axes"] = axes_result.summary
    audit._write_json("summary.json", summary)
    manifest |= {"status": run_st, "judge_status": status["status"],
                 "finished": _dt.datetime.now().astimezone().isoformat(timespec="seconds"),
                 "calls": audit.stats.as_dict()}
    audit._write_json("manifest.json", manifest)
    return AuditResult(audit.run_dir, pd.DataFrame(resp_rows), rdf, pt, pdm, ov, summary, manifest,
                       refusals=refusal_df, quality=quality_df, quality_ratings=qdf, judges=judges_df,
                       filtered=pd.DataFrame(filtered_rows), axes=axes_result)
