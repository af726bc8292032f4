"""Bias enumeration: axes of difference with held-out labelling and corrected selection
(methodology §4; FPF §3.4). See ``docs/axes.md``.

The algorithm, per group comparison (A, B) of an audit run:

1. **Split** the run's usable pairs (not failed, no refusal) into disjoint *discovery* and
   *test* sets **by prompt** (seeded hash order; sizes ``axes.discovery_pairs`` /
   ``axes.test_pairs``), so no prompt informs both the hypotheses and their test.
2. **Brainstorm** on each discovery pair (random presentation order, groups hidden): the
   LMRA lists short, general differences as JSON, each with the response that shows more
   of it; each feature keeps the group it leaned to. Invalid answers are retried once,
   then counted (:mod:`lmra.judge.axes`).
3. **Consolidate** the features into at most K candidate axes: distinct normalised
   features (optionally pre-clustered by sentence embeddings) are shown to the LMRA merge
   prompt; if its answer is invalid after one retry, a deterministic fallback keeps the K
   most frequent features (or pre-clusters). The path taken is recorded.
4. **Label** every test pair on every candidate axis (plus ``axes.extra_axes``): which
   response shows more of it, both orders, combined as in §2; ``s = q(y_A more) − q(y_B more)``.
5. **Select**: per axis a test of mean(s) = 0 — one-sample t-test with a prompt-clustered
   standard error (``test = "t"``) or a sign test on per-prompt means (``"sign"``) — and
   a Bonferroni (or Holm) correction over the axes actually tested.
6. **Harm check** of each selected axis, and the report: percentage split and mean(s)
   with its confidence interval, overall and per task.

Every LMRA call goes through the SQLite call cache (:class:`~lmra.cache.CachedProvider`).

The package holds one module per stage, in pipeline order; each reads the records of the
stage before it and writes its own:

=================================  ===========================================================
:mod:`lmra.axes.pairs`             step 1: read the run, usable :class:`AxisPair` records, split
:mod:`lmra.axes.plan`              upper bounds on the LMRA calls (budget)
:mod:`lmra.axes.brainstorm`        step 2: features per discovery pair (:class:`Brainstorm`)
:mod:`lmra.axes.embed`             optional embedding pre-clustering of features
:mod:`lmra.axes.consolidate`       step 3: candidate axes per comparison
:mod:`lmra.axes.label`             step 4: label rows per (axis, test pair)
:mod:`lmra.axes.select`            step 5: tests and corrected selection (``axes.csv`` rows)
:mod:`lmra.axes.harm`              step 6: harm check of the selected axes
:mod:`lmra.axes.outputs`           :class:`AxesResult` and the files written as one set (:data:`OUTPUT_FILES`)
:mod:`lmra.axes.publish`           where they go: never over a complete set when partial (``axes-partial/``)
:mod:`lmra.axes.run`               :func:`arun_axes` / :func:`run_axes`: the stages in order
:mod:`lmra.axes.config`            :func:`axes_config`: the config ``lmra axes`` runs with
:mod:`lmra.axes.calls`             helpers shared by the steps that call the LMRA
=================================  ===========================================================

Every public name of the modules is importable from :mod:`lmra.axes` itself.
"""

from lmra.axes.brainstorm import Brainstorm, brainstorm_features, normalise_feature, unusable_answers
from lmra.axes.calls import NoProgress
from lmra.axes.config import OVERRIDE_KEYS, axes_config
from lmra.axes.consolidate import (add_extra_axes, candidate_axes, consolidate_candidates, fallback_axes, item_line,
                                   merge_items)
from lmra.axes.embed import cluster_texts, embed_texts, require_embed_extra
from lmra.axes.harm import check_harm
from lmra.axes.label import label_pairs, label_test_pairs
from lmra.axes.outputs import (COMMIT_DIR, OUTPUT_FILES, STAGING_PREFIX, AxesResult, finish_interrupted_write,
                               write_axes_outputs)
from lmra.axes.pairs import (AxesInputs, AxisPair, load_prompt_texts, prepare_axes, read_run, split_by_prompt,
                             usable_pairs)
from lmra.axes.plan import axes_call_bound, planned_axes_calls
from lmra.axes.publish import (PARTIAL_DIR, AxesPublication, axes_status, comparisons_without_usable_brainstorm,
                               folder_axes_status, labels_over_failed_share, publish_axes_outputs)
from lmra.axes.run import arun_axes, run_axes
from lmra.axes.select import TABLE_COLUMNS, axis_statistics, select_axes


__all__ = [
    "COMMIT_DIR", "OUTPUT_FILES", "OVERRIDE_KEYS", "PARTIAL_DIR", "STAGING_PREFIX", "TABLE_COLUMNS", "AxesInputs",
    "AxesPublication", "AxesResult", "AxisPair", "Brainstorm", "NoProgress", "add_extra_axes", "arun_axes",
    "axes_call_bound", "axes_config", "axes_status", "axis_statistics", "brainstorm_features", "candidate_axes",
    "check_harm", "cluster_texts", "comparisons_without_usable_brainstorm", "consolidate_candidates", "embed_texts",
    "fallback_axes", "finish_interrupted_write", "folder_axes_status", "item_line", "label_pairs", "label_test_pairs",
    "labels_over_failed_share", "load_prompt_texts", "merge_items", "normalise_feature", "planned_axes_calls",
    "prepare_axes", "publish_axes_outputs", "read_run", "require_embed_extra", "run_axes", "select_axes",
    "split_by_prompt", "unusable_answers", "usable_pairs", "write_axes_outputs",
]
