"""Axes step 4 — label (methodology §4 step 4): every test pair on every candidate axis, both
presentation orders, combined as in §2; ``s = q(y_A more) − q(y_B more)``.

Reads the test :class:`~lmra.axes.pairs.AxisPair` records and the axis list of
:func:`~lmra.axes.consolidate.candidate_axes`; writes one label row per (axis, pair)
(``axes_labels.jsonl``) for selection (:mod:`lmra.axes.select`).
"""

from __future__ import annotations

import asyncio
import math

import pandas as pd

from lmra.axes.calls import NoProgress, bounded, nan_if_none
from lmra.axes.pairs import AxisPair
from lmra.config import AuditConfig
from lmra.judge.axes import label_axis
from lmra.providers import Provider, ProviderError
from lmra.providers.ratelimit import wrapped_bound
from lmra.templates import Template, load_template


async def label_test_pairs(judge: Provider, cfg: AuditConfig, tpl: Template, test: list[AxisPair], axes: list[str],
                           seed: int, sem: asyncio.Semaphore, progress) -> pd.DataFrame:
    """Label every test pair on every axis (methodology §4 step 4), advancing ``progress``
    (``axes-label``) once per (pair, axis); a failed call gives a row with ``failed`` true.

    Returns:
        One row per (pair, axis), in pair order: the columns of :func:`label_pairs`.
    """
    async def one(p: AxisPair) -> list[dict]:
        rows = []
        for axis in axes:  # one pair's questions in a row: they share the KV prefix
            base = {"comparison": p.comparison, "group_a": p.group_a, "group_b": p.group_b, "axis": axis,
                    "pair_id": p.pair_id, "prompt_id": p.prompt_id, "domain": p.domain, "task": p.task,
                    "sample": p.sample}
            try:
                r = await bounded(sem, label_axis(judge, cfg.judge, tpl, axis=axis, task=p.task, prompt=p.prompt,
                                                  response_a=p.response_a, response_b=p.response_b,
                                                  seed_parts=(seed, p.pair_id)))
            except ProviderError as exc:
                rows.append(base | {"failed": True, "error": str(exc), "valid": False, "method": None,
                                    "q_F": math.nan, "q_R": math.nan, "q_N": math.nan, "s": math.nan})
                progress.advance("axes-label", True)
                continue
            rows.append(base | {"failed": False, "error": None, "valid": r.valid, "method": r.method,
                                "q_F": nan_if_none(r.q_F), "q_R": nan_if_none(r.q_R), "q_N": nan_if_none(r.q_N),
                                "s": nan_if_none(r.h), "order1": r.order1.model_dump(),
                                "order2": r.order2.model_dump()})
            progress.advance("axes-label")
        return rows

    rows = [r for rs in await asyncio.gather(*(one(p) for p in test)) for r in rs]
    cols = ["comparison", "group_a", "group_b", "axis", "pair_id", "prompt_id", "domain", "task", "sample", "failed",
            "error", "valid", "method", "q_F", "q_R", "q_N", "s"]
    return pd.DataFrame(rows) if rows else pd.DataFrame(columns=cols)


async def label_pairs(judge: Provider, cfg: AuditConfig, pairs: list[AxisPair], axes: list[str], *,
                      template: Template | None = None, seed: int = 0) -> pd.DataFrame:
    """Label test pairs on axes (methodology §4 step 4), without the cache or a run folder.

    Args:
        judge: the LMRA (any provider; :func:`run_axes` passes it through the cache).
        cfg: config (``judge``, ``concurrency``).
        pairs: test pairs; axes: axis statements.
        template: default ``prompts/judge/axes_label.txt``.
        seed: seed part of the judge calls.

    Returns:
        One row per (axis, pair): comparison, group_a, group_b, axis, pair_id, prompt_id,
        domain, task, sample, failed, valid, method, q_F, q_R, q_N, s (and both raw orders).
    """
    tpl = template or load_template("axes_label", "judge")
    sem = asyncio.Semaphore(wrapped_bound(judge, cfg.concurrency))  # as in an audit (concurrency = "auto")
    return await label_test_pairs(judge, cfg, tpl, pairs, axes, seed, sem, NoProgress())


def combined_labels(labels: pd.DataFrame, setting: str, supports_logprobs: bool
                    ) -> tuple[pd.DataFrame, str, str | None]:
    """The labels scored under the audit's order combiner, as its stereotype ratings are
    (methodology §2 step 4; statistics-review finding: labels were combined by ``min`` for a
    log-probability LMRA whatever was configured — ``calibrated`` was scored as ``mean``, and
    ``auto`` never turned to ``mean`` when the answers came without log-probabilities).

    ``auto`` resolves by the LMRA's provider and then by how the answers came
    (:func:`lmra.audit.finish.auto_combiner_for_answers`); ``calibrated`` removes each axis's own
    position logit, estimated from that axis's labels (:func:`lmra.judge.calibration.rescore`, as
    each quality criterion's own). Failed labels are left as they are.

    Args:
        labels: :func:`label_test_pairs` rows (``axis``, ``order1``, ``order2``, ``s`` …).
        setting: ``judge.combiner`` as configured; supports_logprobs: the LMRA provider's.

    Returns:
        (the labels with ``q_F, q_R, q_N, s, valid`` from the combiner and ``s_min``, ``s_mean``,
        ``s_calibrated`` added; the combiner used; the note of an ``auto`` switched to
        ``mean``, or None).
    """
    from lmra.audit.finish import combined_by_answers
    from lmra.judge.scoring import resolve_combiner

    names = {"h": "s", "h_min": "s_min", "h_mean": "s_mean", "h_calibrated": "s_calibrated"}
    rows, combiner, note = combined_by_answers(
        labels.rename(columns={"s": "h"}), setting, resolve_combiner(setting, "logprobs" if supports_logprobs else "sampled"),
        by="axis", question="to the axis-label question")
    return rows.rename(columns=names), combiner, note


def label_diagnostics(labels: pd.DataFrame) -> dict | None:
    """The judge diagnostics (:func:`lmra.diagnostics.judge_diagnostics`: valid-option mass, order
    consistency, position preference, answers without usable option mass, unparseable and
    declined answers) of one comparison's label answers — both orders of every label that did not
    fail; None when there is none.

    Args:
        labels: :func:`label_test_pairs` rows (``failed``, ``order1``, ``order2``).
    """
    from lmra.diagnostics import judge_diagnostics

    if labels.empty or "order1" not in labels:
        return None
    answered = labels[~labels["failed"].astype(bool)]
    if answered.empty:
        return None
    return judge_diagnostics(answered)
