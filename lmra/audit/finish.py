"""Stage 5 of the audit — finishing a run: rescoring under every combiner, aggregation, judge
status, run status, and the run folder's files (methodology §2–§3; run statuses in
:mod:`lmra.runstate`). Reads what :mod:`lmra.audit.pipeline` returns (or :mod:`lmra.merge`
rebuilds from shards) and writes ``ratings.parquet`` (:mod:`lmra.pairstore`), the tables,
``summary.json`` and the final ``manifest.json``; returns :class:`AuditResult`.
"""

from __future__ import annotations

import datetime as _dt
import functools
import math
import threading
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Mapping

import pandas as pd

from lmra import aggregate
from lmra.diagnostics import (combiner_dependence_warnings, combiner_disagreement_warnings, flagged_warning, judge_diagnostics,
                              judge_diagnostics_with_by, positional_refusal_warning)
from lmra.gcquiet import frozen_heap
from lmra.generate import Response, response_row
from lmra.judge.filter import FilterDecision
from lmra.judge.scoring import MIN_MEAN
from lmra.judge.taxonomy import Classification
from lmra.console import counted
from lmra.data import PromptRecord
from lmra.runstate import (COMPLETE, FAILED, NO_PAIR_SCORED_PREFIX, PARTIAL, classify_unusable_over_limit,
                           failed_share, filter_over_limit, filter_phrase, invalid_outliers, invalid_over_limit,
                           invalid_phrase, run_status)
from lmra.fileio import write_csv
from lmra.providers.base import FILTER_FINISH_REASONS, TRUNCATED_FINISH_REASONS, UNFINISHED_FINISH_REASONS
from lmra.pairstore import (JSON_COLUMNS, PARQUET_NAME, ROW_GROUP, PairSpool, PairWriter,
                           parquet_columns, read_pairs, write_pairs)
from lmra.runfolder import json_text, json_value
from lmra.redact import redacted_calls
from lmra.repeated import RepeatedResponses, repeated_response, repeated_response_warning
from lmra.word_scrubs import WordScrubs, word_scrubs_warning

if TYPE_CHECKING:
    from lmra.audit import Audit, Inputs


class FrameOnFirstRead:
    """A data-class field holding a frame that may be given as a function of no argument: the
    function is called when the field is first read, and its frame kept. ``lmra audit`` reads
    neither the responses nor the filter decisions of its result (they are in the run folder):
    built anyway, their frames were 5 % of a cached re-run (issue 14). Until then the function holds
    the rows the frame is built from (the instance's ``__dict__`` shows it under ``_<name>``).

    Args:
        default: the field's default, a function making a new frame (e.g. ``pd.DataFrame``: an
            empty one for each result); None for a field without a default.
    """

    def __init__(self, default=None):
        self.default = default

    def __set_name__(self, owner, name: str) -> None:
        self.slot = f"_{name}"

    def __get__(self, obj, objtype=None) -> pd.DataFrame:
        if obj is None:  # the class's attribute: what dataclasses take as the default (none: AttributeError)
            if self.default is None:
                raise AttributeError(self.slot[1:])
            return self.default
        try:
            value = obj.__dict__[self.slot]
        except KeyError:  # deleted
            raise AttributeError(self.slot[1:]) from None
        if callable(value):
            with _BUILDING:  # two threads reading it at once get the one frame (round-2 break-it, s49)
                value = obj.__dict__[self.slot]
                if callable(value):
                    value = obj.__dict__[self.slot] = value()
        return value

    def __set__(self, obj, value) -> None:
        obj.__dict__[self.slot] = value

    def __delete__(self, obj) -> None:
        try:
            del obj.__dict__[self.slot]
        except KeyError:
            raise AttributeError(self.slot[1:]) from None


#: held while a :class:`FrameOnFirstRead` frame is built
_BUILDING = threading.Lock()


@dataclass
class AuditResult:
    """What an audit returns (also written to ``run_dir``). Frames are empty when a part is off.

    ``ratings`` is the table of ``ratings.parquet``; of a run whose pairs were spooled to disk
    (:attr:`lmra.audit.Audit.spool_min_pairs`) only the columns the tables are computed from
    (no pair ids, names, errors or LMRA answers: read those from the file), and its
    ``responses`` frame is empty (read ``responses.jsonl``). ``responses`` and ``filtered`` are
    built when first read (:class:`FrameOnFirstRead`)."""

    run_dir: Path
    responses: pd.DataFrame = FrameOnFirstRead()
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
    filtered: pd.DataFrame = FrameOnFirstRead(default=pd.DataFrame)
    axes: Any = None  #: :class:`lmra.axes.AxesResult` when ``axes.enabled``

    def __getstate__(self) -> dict:
        """Pickled (and copied) with its frames built: a function waiting to build one is not picklable."""
        for f in ("responses", "filtered"):
            getattr(self, f, None)  # (built; one deleted stays so)
        return self.__dict__


#: the per-pair columns the tables, diagnostics and counts of a spooled run do not need in memory
_NOT_SCORES = frozenset(JSON_COLUMNS) | {"pair_id", "name_a", "name_b", "method", "judge2_method"}


#: pairs rescored at a time when ``ratings.parquet`` is written from a spool (their answers decoded)
_BATCH = 10_000


class RatedPairSpool(PairSpool):
    """The :class:`~lmra.pairstore.PairSpool` of a run's ratings rows, which also keeps, as
    the rows come, what each LMRA's position logit is estimated from
    (:class:`~lmra.judge.calibration.PositionLogitSums`, keyed by the rows' places), and
    stores next to each row the numbers rescoring and the judge diagnostics read of its four
    answers (:mod:`lmra.judge.answer_columns`, columns ``_o1_kind`` … ``_judge2_o2_n_samples``),
    so that finishing reads the spool once and decodes no answer's JSON."""

    def __init__(self, path: str | Path, columns, row_group: int):
        from lmra.judge.answer_columns import FIELDS
        from lmra.judge.calibration import PositionLogitSums

        super().__init__(path, columns, row_group, extra_columns=[
            f"_{prefix}o{j}_{f}" for prefix in _JUDGES for j in (1, 2) for f in FIELDS])
        self.logit = {prefix: PositionLogitSums() for prefix in _JUDGES}  # by column prefix
        self.methods: dict = {}  # the answers' methods → their codes in the extra columns
        #: how the LMRA's rated answers were read (method → answers; :func:`answer_methods`)
        self.method_counts: Counter = Counter()
        #: the same for the second LMRA's (``judge2_`` columns)
        self.method_counts2: Counter = Counter()
        #: the second LMRA's answers of the real pairs, reduced for its judge diagnostics
        #: (``lmra.diagnostics._Answers``; made by :func:`write_spooled_pairs` when it rescores them)
        self.judge2_answers = None

    def add(self, key: int, row: dict) -> None:
        """Spool one ratings row (see :meth:`PairSpool.add`) with its answers' numbers, and add
        its rated answers to the position-logit sums."""
        from lmra.judge.answer_columns import answer_fields

        extra = ()
        for prefix, acc in self.logit.items():
            a, c = row.get(f"{prefix}order1"), row.get(f"{prefix}order2")
            extra += answer_fields(a, self.methods) + answer_fields(c, self.methods)
            if isinstance(a, dict) and isinstance(c, dict):  # rated (as rescore counts them)
                acc.add(a, c, key=key)
                if not row.get("placebo"):
                    (self.method_counts if not prefix else self.method_counts2).update((a.get("method"),
                                                                                        c.get("method")))
        super().add(key, row, extra)

    def extra_columns_of(self, prefixes) -> list[str]:
        """The extra columns of the LMRAs with these column prefixes."""
        return [c for c in self.extra_columns if any(c.startswith(f"_{p}o") for p in prefixes)]

    def answers(self, batch, prefix: str = ""):
        """The two orders' answers (:class:`~lmra.judge.answer_columns.AnswerColumns`) of the
        rows of ``batch`` (a pyarrow record batch of the sorted spool with the extra columns)."""
        import numpy as np

        from lmra.judge.answer_columns import FIELDS, AnswerColumns

        return tuple(AnswerColumns.from_fields(np.column_stack([
            batch.column(f"_{prefix}o{j}_{f}").to_numpy(zero_copy_only=False) for f in FIELDS]), self.methods)
            for j in (1, 2))


#: the LMRAs' column prefixes in a ratings row: the LMRA, the second LMRA
_JUDGES = ("", "judge2_")


def _labelled(label: tuple | None) -> tuple:
    """A response's ``(refusal_p, refused)`` as responses.jsonl writes them: ``(None, None)``
    without a refusal label — none asked, its call failed or its answer unusable (statistics
    break-it, s42: an unlabelled response was written ``refused: false``, so a count from the
    file took it for an answer)."""
    if label is None or label[0] is None:
        return None, None
    return label


def _redacted(row: dict) -> dict:
    """A response row as a redacted run writes it: responses often quote the user's message, so
    only the text's length is kept (``n_chars``, ``redacted``)."""
    return row | {"text": None, "scrubbed": None, "n_chars": len(row["text"] or ""), "redacted": True}



def response_notes(response: Response) -> tuple[bool, bool, bool, bool]:
    """``(empty, filtered, truncated, unfinished)`` of one target response: no text although the
    call did not fail, stopped by the provider's content filter (``finish_reason`` in
    :data:`FILTER_FINISH_REASONS`), cut at ``max_tokens`` or the context window
    (:data:`TRUNCATED_FINISH_REASONS`; break-it finding: not counted, unlike the other two), a
    turn that ended in a tool call, not an answer (:data:`UNFINISHED_FINISH_REASONS`: Anthropic's
    ``tool_use``, ``pause_turn``; break-it finding, s40: "Let me search." rated as the chatbot's
    answer, uncounted): answers that are rated as they are, and counted so that a run says how
    many it had."""
    if response.error is not None:
        return False, False, False, False
    return (not (response.text or "").strip(), response.finish_reason in FILTER_FINISH_REASONS,
            response.finish_reason in TRUNCATED_FINISH_REASONS, response.finish_reason in UNFINISHED_FINISH_REASONS)


#: the start of :func:`invalid_share_warning`'s text (a merge recomputes it, not a shard's)
INVALID_SHARE_PREFIX = "too many pairs without a usable LMRA answer: "


def invalid_share_warning(d: dict, limit: float) -> str:
    """The run's warning about one task of :func:`~lmra.runstate.invalid_over_limit`."""
    return (f"{INVALID_SHARE_PREFIX}{invalid_phrase(d)}, significantly above max_invalid_share = {limit:g} "
            f"(binomial p = {d['p_value']:.2g}): its net rating rests on the pairs the LMRA chose to answer, which "
            "is biased if it declined pairs for what they hold (an LMRA refusing to rate stereotyped responses "
            "hides them); the run is partial")


#: the start of :func:`invalid_outlier_warning`'s text (a merge recomputes it, not a shard's)
INVALID_OUTLIER_PREFIX = "a task's pairs went unrated more often than the rest: "


def invalid_outlier_warning(d: dict) -> str:
    """The run's warning about one task of :func:`~lmra.runstate.invalid_outliers`, naming who
    left its pairs unrated: the chatbot (``n_failed_chatbot`` of them: its call failed, so there
    was nothing to rate — fresh-user finding, s42: a chatbot's HTTP 503s were told as "the LMRA
    gave no usable answer", sending the on-call engineer to a judge that had passed validation)
    or the LMRA (no usable answer, or its call failed)."""
    lo, hi = d["bounds"]
    failed = d.get("n_failed") or 0
    chatbot = min(d.get("n_failed_chatbot") or 0, failed)
    lmra_k, lmra_failed = d["n_unrated"] - chatbot, failed - chatbot
    parts = []
    if chatbot:
        parts.append(f"the chatbot's call failed for {'all ' if chatbot == d['n_unrated'] else ''}{chatbot}")
    if lmra_k:
        how = (f" ({'all' if lmra_failed == lmra_k else lmra_failed} of them failed calls)" if lmra_failed else "")
        parts.append(f"the LMRA gave no usable answer for {lmra_k}{how}")
    why = ("If the chatbot's calls failed on what the pairs hold (a timeout on long answers)" if not lmra_k else
           "If the LMRA declined pairs for what they hold" if not chatbot else
           "If those pairs were lost for what they hold")
    return (f"{INVALID_OUTLIER_PREFIX}{d['task']} ({d['comparison']}): {d['n_unrated']} of its {d['n_rated']} pairs "
            f"have no usable rating — {' and '.join(parts)} ({d['share']:.1%}, against {d['rest_share']:.1%} in the "
            f"comparison's other tasks; Fisher p = {d['p_value']:.2g}, Holm-adjusted). {why}, the task's net rating "
            f"{d['net_rating']:+.4f} is biased: with those pairs at −1 or +1 it would lie in [{lo:+.4f}, {hi:+.4f}]")


def chatbot_failed_pairs(scores: pd.DataFrame) -> dict[tuple[str, str, str, str], int]:
    """Failed pairs whose chatbot call failed (:func:`lmra.aggregate.chatbot_failed`), by
    ``(group_a, group_b, domain, task)``."""
    from lmra.aggregate import chatbot_failed

    hit = chatbot_failed(scores)
    if not hit.any():
        return {}
    sub = scores.loc[hit, ["group_a", "group_b", "domain", "task"]].astype(str)
    return {tuple(k): int(n) for k, n in sub.value_counts().items()}


#: the start of :func:`filter_share_warning`'s text (a merge recomputes it, not a shard's)
#: the start of the warning of an audit whose axes step is partial (:func:`lmra.axes.publish.axes_partial_reasons`)
AXES_PARTIAL_PREFIX = "the axes-of-difference step measured too little, so the run is partial"
FILTER_SHARE_PREFIX = "too many prompts the identity filter could not label: "


def filter_share_warning(d: dict, limit: float) -> str:
    """The run's warning about one task of :func:`~lmra.runstate.filter_over_limit`."""
    return (f"{FILTER_SHARE_PREFIX}{filter_phrase(d)}, significantly above max_invalid_share = {limit:g} "
            f"(binomial p = {d['p_value']:.2g}): those prompts are removed, so the task's rate rests on the "
            "prompts the LMRA chose to label (a task whose every prompt went unlabelled has no rate at all); "
            "the run is partial")




#: the start of the warning of prompts whose classification answer named no option
CLASSIFY_UNUSABLE_PREFIX = "prompts without a usable task classification answer: "


def classify_unusable_warning(n_unusable: int, n_classified: int, limit: float) -> str:
    """The run's warning about prompts without a task whose classification answer named no option
    (``Classification.unusable``): left out, counted; over ``max_invalid_share`` (significantly)
    the run is partial (:func:`~lmra.runstate.classify_unusable_over_limit`)."""
    over = classify_unusable_over_limit(n_unusable, n_classified, limit)
    return (f"{CLASSIFY_UNUSABLE_PREFIX}{n_unusable} of the {n_classified} prompts without a task whose classification "
            "call was answered got an answer naming no option (classifications.jsonl: error) and are left out, not "
            "audited under a guessed task"
            + (f"; significantly above max_invalid_share = {limit:g} (binomial p = {over['p_value']:.2g}): the tasks' "
               "rates rest on the prompts the LMRA chose to place, and the run is partial" if over else ""))


#: the start of :func:`filter_removed_most_warning`'s text (a merge recomputes it, not a shard's)
FILTER_REMOVED_MOST_PREFIX = "the identity filter's LMRA removed "
#: share of the prompts the identity filter's LMRA was asked about whose removal is warned of first
FILTER_REMOVED_MOST_SHARE = 0.5


def filter_removed_most_warning(n_lmra: int, n_asked: int) -> str | None:
    """The warning of a run whose identity filter's LMRA removed at least half (and at least 5) of
    the prompts it was asked about, or None: ordinary prompts rarely name the user's identity, so
    such a share says the LMRA's yes/no answers are wrong — a base model, a wrong template —, and
    the audit rests on the few prompts left (fresh-user finding, s37: a judge answering "Yes" to
    every filter question removed 188 of 189 prompts; the headline blamed refusal labels and the
    cause sat in a 3,000-character warning).

    Args:
        n_lmra: prompts the filter's LMRA removed; n_asked: prompts it was asked about (removed,
            kept, or left without a label)."""
    if n_asked <= 0 or n_lmra < 5 or n_lmra < FILTER_REMOVED_MOST_SHARE * n_asked:
        return None
    return (f"{FILTER_REMOVED_MOST_PREFIX}{n_lmra} of the {n_asked} prompts it was asked about ({n_lmra / n_asked:.0%}) "
            "as naming the user's identity: unless your prompts do name it, its yes/no answers are wrong (a base "
            "model, a wrong template) — check [judge], or set [filter] lmra = false (the word-match filter stays); "
            "filtered_prompts.jsonl lists the removed prompts")


def no_pair_scored_warning(scores: pd.DataFrame, n_valid: int, n_failed: int,
                           filter_most: str | None = None) -> str | None:
    """The warning of a run in which pairs were rated or labelled but none could be scored, or
    None: its stereotype rates are undefined, and the run is ``partial`` (a run whose every
    call failed is ``failed`` and says so elsewhere). Starts with
    :data:`~lmra.runstate.NO_PAIR_SCORED_PREFIX` (a merge recomputes it, not a shard's).

    Args:
        scores: one row per pair with ``refused``, ``unlabelled`` and ``valid`` (bools, NA allowed).
        n_valid, n_failed: pairs scored / failed.
        filter_most: :func:`filter_removed_most_warning` of the run, when it warned: said first,
            since the few pairs left are what the filter's LMRA kept."""
    n = len(scores)
    if not n or n_valid or n_failed == n:
        return None

    def flag(col: str) -> pd.Series:
        return scores[col].fillna(False).astype(bool) if col in scores else pd.Series(False, index=scores.index)

    failed, refused = flag("failed"), flag("refused") & ~flag("failed")
    unlabelled = flag("unlabelled") & ~refused & ~failed  # each pair in one category
    refused, unlabelled = int(refused.sum()), int(unlabelled.sum())
    invalid = n - n_failed - refused - unlabelled
    parts = [f"{k} {what}" for k, what in ((refused, "had a response the LMRA labelled a refusal"),
                                           (unlabelled, "had a response with no refusal label"),
                                           (invalid, "got no valid LMRA answer"), (n_failed, "failed")) if k]
    hint = (" — if the chatbot does not refuse, the LMRA's refusal labels are wrong: check refusals.csv and "
            "[refusal] threshold, or turn the labels off" if refused else "")
    first = (f"{filter_most.split(':', 1)[0]}, so {counted(n, 'pair')} {'was' if n == 1 else 'were'} left to rate; "
             if filter_most else "")
    return f"{NO_PAIR_SCORED_PREFIX}: {first}of the {counted(n, 'pair')}, {', '.join(parts)}{hint}"


def _all_failed_reason(scores: pd.DataFrame, n_failed: int) -> str:
    """manifest.json's ``failure`` of a run whose every rated pair failed: how many, and the
    first pair's error (as written in ratings.parquet's ``error``; redacted there when asked)."""
    errors = scores["error"].dropna().astype(str) if "error" in scores else pd.Series(dtype=str)
    first = f"; the first: {errors.iloc[0]}" if len(errors) else ""
    return f"no pair was scored: {n_failed} of {len(scores)} pairs failed after every retry{first}"


#: the start of :func:`text_under_min_warning`'s text (a merge recomputes it, not a shard's)
TEXT_UNDER_MIN_PREFIX = "LMRA answers without log-probabilities: "


def text_under_min_warning(diag: dict, combiner: str, logprobs: bool) -> str | None:
    """The warning of a run whose LMRA gives log-probabilities but answered some stereotype
    questions without them, combined with ``min``: such an answer is estimated by sampling
    (``judge.n_samples`` draws; runs of earlier versions read it as text, probability 1 on one
    option), and the minimum of a noisy sample share and the other order's probability is
    biased (low for each outcome, so the renormalised score moves away from what the LMRA's
    probabilities say; a text answer takes the pair to an extreme); None when no such answer was
    used or the combiner is not ``min``.

    Args:
        diag: the stereotype question's judge diagnostics (``methods`` counts per answer,
            ``text_read``: text answers that named an option).
        combiner: the run's order combiner; logprobs: whether the LMRA gives log-probabilities."""
    methods = diag.get("methods") or {}
    n_text, n_sampled = int(methods.get("text", 0)), int(methods.get("sampled", 0))
    read = int(diag.get("text_read") or 0)
    if combiner != "min" or not logprobs or read + n_sampled <= 0:
        return None
    how = ([f"{n_sampled} estimated by sampling"] if n_sampled else []) + \
        ([f"{read} read as text: all probability on one option"] if read else []) + \
        (["the rest unreadable"] if n_text > read else [])
    return (f"{TEXT_UNDER_MIN_PREFIX}{n_text + n_sampled} of {diag.get('n_answers')} LMRA answers to the stereotype "
            f"question came without them ({'; '.join(how)}); under combiner 'min' the minimum of such an answer "
            "and the other order's is biased" + (" (one read as text scores the pair at an extreme, h = ±1 or 0, "
                                                 "or makes it invalid)" if read else "") +
            " — which pushes the net rating away from what the LMRA's probabilities say; "
            "per_task.csv's net_rating_mean and net_rating_calibrated are less affected (docs/methodology.md)")


def answer_methods(ratings, prefix: str = "") -> Counter:
    """How the LMRA's rated stereotype answers were read: ``logprobs``, ``sampled`` or
    ``text`` → number of answers (both orders of every rated pair of the real comparisons —
    not the placebo's, as the judge diagnostics count them; a spool counted them as they came);
    ``prefix`` ``"judge2_"``: the second LMRA's."""
    if isinstance(ratings, RatedPairSpool):
        return ratings.method_counts2 if prefix else ratings.method_counts
    counts: Counter = Counter()
    for row in ([] if isinstance(ratings, PairSpool) else ratings):
        a, c = row.get(f"{prefix}order1"), row.get(f"{prefix}order2")
        if isinstance(a, dict) and isinstance(c, dict) and not row.get("placebo"):
            counts.update((a.get("method"), c.get("method")))
    return counts


#: the start of :func:`auto_combiner_for_answers`'s notes
AUTO_MEAN_PREFIX = "combiner 'auto' used 'mean': "
AUTO_MIN_MEAN_PREFIX = "combiner 'auto' used 'min+mean': "


def auto_combiner_for_answers(setting: str, combiner: str, methods: Counter) -> tuple[str, str | None]:
    """``auto`` resolved by how the answers *came*, not only by what the LMRA's provider says it
    supports: ``min`` (chosen for a provider with log-probabilities) becomes ``mean`` when more
    than half of the rated answers came without them (read as text or sampled), and
    :data:`~lmra.judge.scoring.MIN_MEAN` (``min`` for the pairs read from log-probabilities,
    ``mean`` for the others, as each pair was scored when rated) when some did, not more than
    half (statistics review: ``min`` for every pair of a run with 45 % of its answers sampled put
    the net rating 35 % low; a warning said so, the headline kept it) — ``min`` of two
    0/1 answers scores a pair at an extreme or, when its orders name different options, not at
    all (review finding: every answer of an endpoint that ignored the log-probability request
    came as text, and ``auto`` kept ``min``: 12 % of the pairs dropped as invalid, the rating
    +8 % off). Returns (the combiner, the note saying so or None). Methodology §2 step 4."""
    if setting != "auto" or combiner != "min":
        return combiner, None
    total = sum(methods.values())
    without = methods.get("text", 0) + methods.get("sampled", 0)
    if not total or not without:
        return combiner, None
    if 2 * without <= total:  # some, not most: each pair scored as it was when rated
        return MIN_MEAN, (f"{AUTO_MIN_MEAN_PREFIX}{without} of {total} rated LMRA answers to the stereotype question "
                          "came without log-probabilities (its provider supports them, but the endpoint did not return "
                          "them): the pairs with such an answer are scored with 'mean', the unbiased combiner for them, "
                          "the others with 'min' — the minimum of a sampled or text answer and the other order's is "
                          "biased (docs/methodology.md)")
    return "mean", (f"{AUTO_MEAN_PREFIX}{without} of {total} rated LMRA answers to the stereotype question came "
                    "without log-probabilities (its provider supports them, but the endpoint did not return them), "
                    "and 'mean' is the unbiased combiner for such answers (docs/methodology.md)")


def combined_by_answers(rows: pd.DataFrame, setting: str, combiner: str, *, by: str,
                        question: str) -> tuple[pd.DataFrame, str, str | None]:
    """LMRA answers in both presentation orders scored under the run's order combiner, resolved
    by how *these* answers came (:func:`auto_combiner_for_answers` on their ``order1``/``order2``
    methods), each group of ``by`` rescored on its own (:func:`lmra.judge.calibration.rescore`:
    ``calibrated`` removes each group's own position logit). One rule for the quality criteria
    (``by="criterion"``) and the axis labels (``by="axis"``), as for the stereotype ratings
    (methodology §2 step 4, §4, §8; statistics-review finding: quality rows kept the combiner
    each pair was rated with — ``min`` while the run said ``mean``, or a mixture within a
    criterion).

    Args:
        rows: one row per rated pair with ``order1``/``order2`` (OptionProbs dicts; other values
            mark pairs not rated, left as they are), ``by`` and the score columns ``h``, ``q_F``,
            ``q_R``, ``q_N``, ``valid``.
        setting: ``judge.combiner`` as configured; combiner: it resolved by the LMRA's provider
            (:meth:`lmra.audit.Audit.run_combiner`).
        question: the question's words for the note ("to the quality question").

    Returns:
        (the rows, index order kept, with ``h``/``q_*``/``valid`` under the combiner and
        ``h_min``, ``h_mean``, ``h_calibrated`` added; the combiner used; the note of an
        ``auto`` switched to ``mean``, or None).
    """
    from lmra.judge.calibration import rescore

    methods: Counter = Counter()
    for a, b in zip(rows.get("order1", []), rows.get("order2", [])):
        if isinstance(a, dict) and isinstance(b, dict):
            methods.update((a.get("method"), b.get("method")))
    combiner, note = auto_combiner_for_answers(setting, combiner, methods)
    if note is not None:  # (the audit's note, said of its stereotype answers)
        note = note.replace("to the stereotype question", question)
    if rows.empty or "order1" not in rows:
        return rows, combiner, note
    parts = [rescore(g, combiner)[0] for _, g in rows.groupby(by, sort=False)]
    return pd.concat(parts).sort_index(), combiner, note


#: the start of :func:`common_word_names_warning`'s text
COMMON_WORD_NAMES_PREFIX = "names that are also everyday words can be drawn: "


def common_word_names_warning(names: list[str]) -> str | None:
    """The run's warning about names the groups can draw that are everyday English words
    (:data:`lmra.data.COMMON_WORD_NAMES`: Hope, Joy, Mark, Will …), or None: the name scrub
    (whole word, case-insensitive; methodology §1 step 5) replaces the word in every response
    to a user of that name ("I hope" → "I [NAME]"), a difference the LMRA sees between the
    paired responses that only those users get."""
    if not names:
        return None
    return (f"{COMMON_WORD_NAMES_PREFIX}{', '.join(names)} — the name scrub replaces the word as well "
            "(case-insensitive: a user named Hope gets every \"hope\" of the response scrubbed), a difference "
            "between paired responses that is not the chatbot's; leave them out of the name list (lmra names does)")


def _asked_kept(cfg, prompts: list[PromptRecord]) -> int:
    """The audited prompts the identity filter's LMRA was asked about and kept: all of them when
    the filter's LMRA ran (``[filter] enabled`` and ``lmra``), else none."""
    return len(prompts) if cfg.filter.enabled and cfg.filter.lmra else 0


#: the start of :func:`emptied_by_filter_warning`'s text (a merge recomputes it, not a shard's)
EMPTIED_BY_FILTER_PREFIX = "the identity filter removed every prompt it checked of "


#: tasks :func:`emptied_by_filter_warning` names one by one; the rest are counted
EMPTIED_TASKS_NAMED = 5


def emptied_by_filter_warning(removed: list[dict]) -> str | None:
    """The warning naming the tasks the identity filter removed every prompt of (rows of
    ``summary.json``'s ``filter_removed``); None when every task kept a prompt. Such a task has
    no rating at all: it vanishes from the tables, and its per-task gates are not evaluated
    (break-it finding: word-match false positives emptied two tasks and the gates passed)."""
    gone = [r for r in removed if not r.get("n_kept") and r.get("n_prompts")]
    if not gone:
        return None
    def one(r: dict) -> str:
        lost = r.get("n_unlabelled", 0) + r.get("n_failed", 0)
        removed = r.get("n_lexical", 0) + r.get("n_lmra", 0) + lost
        # the rest were never asked (break-it finding: "7 of 7" when prompts_per_task let 2 be asked)
        rest = r["n_prompts"] - removed
        # (fresh-user finding: "every audited prompt" beside "2 of 7 removed" read as a contradiction)
        return (f"{r['task']}: all {removed} checked removed (word match {r.get('n_lexical', 0)}, "
                f"LMRA {r.get('n_lmra', 0)}, unlabelled or failed {lost})"
                + (f", {rest} more of its {r['n_prompts']} not checked (over prompts_per_task)" if rest > 0 else ""))

    said = "; ".join(one(r) for r in gone[:EMPTIED_TASKS_NAMED])
    if len(gone) > EMPTIED_TASKS_NAMED:  # (fresh-user finding, s37: 26 tasks one by one, 3,000 characters)
        said += f"; and {len(gone) - EMPTIED_TASKS_NAMED} more (summary.json: filter_removed)"
    return (f"{EMPTIED_BY_FILTER_PREFIX}{len(gone)} task(s), which have no rating and whose "
            f"gates are not evaluated — {said}; filtered_prompts.jsonl lists each prompt and why it was removed "
            "(the phrase matched, or the LMRA's answer)")


def failed_left_out(n_failed: int) -> str:
    """What the text-based warnings' denominator leaves out: ``" (the 16 whose call failed after
    every retry have no text and are not counted)"``, or "" when no target call failed
    (fresh-user finding: "9 of 12 … contain chat-template tokens" beside "11 of 28 … cut at
    max_tokens", the 28 holding 16 failed calls)."""
    if not n_failed:
        return ""
    return f" (the {n_failed} whose call failed after every retry have no text and are not counted)"


def empty_responses_warning(n_empty: int, n_filtered: int, n_answered: int, n_failed: int = 0,
                            refusal_labels: bool = False) -> str | None:
    """The run's warning about empty and content-filtered target responses; None when none.

    Args:
        n_empty, n_filtered: such responses (:func:`response_notes`; one may be both).
        n_answered: the target responses whose call did not fail (the denominator: a failed
            call has no text to be empty or filtered); n_failed: those whose call failed.
        refusal_labels: the run labels refusals — the filtered ones are then refusals
            (:meth:`lmra.audit.label.LabelStage._refusal_one`), left out of the ratings.
    """
    if not n_empty and not n_filtered:
        return None
    how = ("the provider's stops are labelled refusals (their pairs left out of the ratings, counted in "
           "refusals.csv by group), the other empty answers' pairs are rated as they are" if refusal_labels and n_filtered
           else "their pairs are rated as they are")
    return (f"{n_empty} of {n_answered}{EMPTY_RESPONSES_MARK}{n_filtered} were stopped by the "
            "provider's content filter (finish_reason content_filter or refusal; an answer may be both)"
            + failed_left_out(n_failed) + f"; {how} — responses.jsonl has each response's finish_reason")


#: what the empty-responses and cut-responses warnings hold (they start with their counts; a
#: merge recomputes both from the merged responses, not a shard's)
EMPTY_RESPONSES_MARK = " target responses were empty and "
TRUNCATED_RESPONSES_MARK = " target responses were cut "
UNFINISHED_RESPONSES_MARK = " target responses ended in a tool call, not an answer "


def truncated_responses_warning(n_truncated: int, n_answered: int, max_tokens: int, n_failed: int = 0,
                                reasons: Mapping[str, int] | None = None) -> str | None:
    """The run's warning about target responses cut at ``max_tokens``; None when none was.
    ``n_answered``: the target responses whose call did not fail (the denominator);
    ``n_failed``: those whose call failed, said to be left out (:func:`failed_left_out`);
    ``reasons``: how many cut responses gave each ``finish_reason`` — the warning names those
    seen, with their counts (fresh-user finding, s48: it named the context window, a cause the run
    never met, beside 19 answers cut by ``length``); None names the reasons that count as cut."""
    if not n_truncated:
        return None
    window = "model_context_window_exceeded"
    if reasons:
        seen = "; ".join(f"{n} {reason}" + (": the context window" if reason == window else "")
                         for reason, n in sorted(reasons.items(), key=lambda kv: (-kv[1], kv[0])))
        why = f"finish_reason {seen}"
        n_window = int(reasons.get(window, 0))
    else:
        why = "finish_reason length or max_tokens; model_context_window_exceeded: the context window"
        n_window = 0
    # where they were cut, and what helps: the context window is not max_tokens (round-2 break-it, s48: answers
    # all cut by the window read "cut at max_tokens", with "raise max_tokens" as the advice)
    where = (f"at max_tokens = {max_tokens}" if not n_window else "by the context window" if n_window == n_truncated
             else f"at max_tokens = {max_tokens} or by the context window")
    advice = [a for a, needed in (
        ("raise [target] max_tokens", n_window < n_truncated),
        ("shorten the prompts and system prompt, or audit a model with a larger context window", n_window > 0)) if needed]
    return (f"{n_truncated} of {n_answered}{TRUNCATED_RESPONSES_MARK}{where} ({why})" + failed_left_out(n_failed)
            + "; their pairs are rated as they are, on the text the chatbot wrote before the cut — "
            + " or ".join(advice) + " if the LMRA should see whole answers")


class ResponseSpool(PairSpool):
    """The :class:`~lmra.pairstore.PairSpool` of a spooled run's responses (see
    :class:`RatedPairSpool`): each response is kept only as its line of ``responses.jsonl``
    (or ``placebo_responses.jsonl``) — the line :func:`finish_run`'s in-memory path writes,
    refusal label included — with its place in the staged order (``2 × pair key + side``) and
    whether it answers a placebo comparison (columns ``placebo``, ``line``). No
    :class:`~lmra.generate.Response` is held; :func:`write_spooled_responses` writes the files.

    Args:
        path: the spool file (``<run_dir>/.responses-spool.parquet``).
        redact: the run's ``redact`` (a redacted line keeps only the text's length).
        placebo: the run's placebo comparisons (names).
        row_group: rows per row group.
    """

    def __init__(self, path: str | Path, redact: bool, placebo, row_group: int):
        super().__init__(path, ["placebo", "line"], row_group)
        self._writer.encoded = {"line"}  # the JSON line is stored as its text, not encoded again
        self.redact = redact
        self.placebo = frozenset(placebo)
        self.n_empty = self.n_filtered = self.n_truncated = self.n_unfinished = 0  # (response_notes)
        self.truncated_reasons: Counter = Counter()  # finish_reason of the cut responses
        self.repeated = RepeatedResponses()  # (lmra.repeated: one answer to most prompts)
        self.word_scrubs = WordScrubs()  # (lmra.word_scrubs: names scrubbed as everyday words)
        self.n_failed = 0  # responses whose call failed (no text: not among the text-based counts' denominator)

    def add_response(self, key: int, response: Response, label: tuple[float | None, bool] | None) -> None:
        """Spool one response with its refusal label ``(p, refused)`` (None: not labelled) at
        place ``key`` of the staged order.

        Raises:
            LmraIOError: the spool cannot be written.
        """
        empty, filtered, truncated, unfinished = response_notes(response)
        self.n_empty += empty
        self.n_filtered += filtered
        self.n_truncated += truncated
        if truncated:
            self.truncated_reasons[response.finish_reason] += 1
        self.n_unfinished += unfinished
        self.n_failed += response.error is not None
        self.word_scrubs.add(response)
        self.repeated.add(response.scrubbed, response.prompt_id, failed=response.error is not None,
                          refused=label[1] if label is not None else None)
        row = response_row(response)
        row["refusal_p"], row["refused"] = _labelled(label)
        if self.redact:  # as finish_run's disk rows
            row = _redacted(row)
        self.add(key, {"placebo": response.comparison in self.placebo, "line": json_text(row)})


def write_spooled_responses(spool: ResponseSpool, run_dir: Path, placebo: bool) -> int:
    """Write ``responses.jsonl`` (and, when ``placebo``, ``placebo_responses.jsonl``) from a
    run's spooled responses, in the staged order, :data:`_BATCH` lines at a time: the files of
    the in-memory path, byte for byte. Returns the number of responses (placebo included).

    Raises:
        LmraIOError: a file could not be written.
    """
    from contextlib import nullcontext

    from lmra.fileio import atomic_open

    spool.close()
    with atomic_open(run_dir / "responses.jsonl") as real, \
            (atomic_open(run_dir / "placebo_responses.jsonl") if placebo else nullcontext()) as fake:
        if spool.n_rows:
            import pyarrow.compute as pc

            for batch in spool.sorted_batches(["placebo", "line"], _BATCH):
                is_placebo, lines = batch.column(0), batch.column(1)
                for fh, keep in ((real, pc.invert(is_placebo)), (fake, is_placebo)):
                    chosen = lines.filter(keep).to_pylist() if fh is not None else ()
                    if chosen:  # a batch's lines in one write
                        fh.write("\n".join(chosen) + "\n")
    return spool.n_rows


def write_spooled_pairs(spool: RatedPairSpool, path: Path, combiner: str, combiner2: str | None,
                        **thresholds) -> tuple[pd.DataFrame, float, dict, dict]:
    """Write ``ratings.parquet`` from a run's spooled pairs: the rows in the run's order, each
    column where a frame of all the rows would have it, rescored under every combiner
    (:func:`~lmra.judge.calibration.rescore`) with the position logit of all the pairs,
    :data:`_BATCH` rows at a time, in row groups of :data:`~lmra.pairstore.ROW_GROUP` rows —
    the same file as the in-memory path writes, without holding the pairs in memory. The judge diagnostics of the written pairs are
    made in the same pass (the numbers :func:`~lmra.diagnostics.judge_diagnostics_file` gives).

    Args:
        spool: the run's :class:`RatedPairSpool` (closed here; at least one row).
        path: the ``ratings.parquet`` to write.
        combiner, combiner2: the run's combiner and the second LMRA's (None without one).
        thresholds: ``min_valid_mass``, ``min_order_consistency`` of the diagnostics.

    Returns:
        (the placebo pairs, rescored, as a frame; the position logit ``b̂``; the judge
        diagnostics overall; per task, in sorted order).

    Raises:
        LmraIOError: a file could not be written.
    """
    from lmra.diagnostics import _Answers
    from lmra.judge.answer_columns import OTHER
    from lmra.judge.calibration import rescore

    spool.close()
    columns = spool.columns()
    json_cols = [c for c in spool.json_columns if c in columns]
    b = spool.logit[""].result() if "order1" in columns and "order2" in columns else math.nan
    b2 = spool.logit["judge2_"].result()
    second = combiner2 is not None and "judge2_order1" in columns
    spool.judge2_answers = _Answers() if second else None
    placebo: list[pd.DataFrame] = []
    pending: list[pd.DataFrame] = []
    overall, per_task = _Answers(), {}  # as judge_diagnostics_file reads ratings.parquet
    with PairWriter(path, row_group=ROW_GROUP) as writer:
        writer.encoded = set(json_cols)
        judges = _JUDGES if second else _JUDGES[:1]  # the LMRAs whose answers are read
        for batch in spool.sorted_batches([*columns, *spool.extra_columns_of(judges)], _BATCH):
            df = batch.select(columns).to_pandas()
            answers = {p: spool.answers(batch, p) for p in judges}
            if any((o.kind == OTHER).any() for p in judges for o in answers[p]):
                df = _spooled_batch_decoded(df, json_cols, combiner, combiner2 if second else None, b, b2,
                                            overall, per_task, placebo, spool.judge2_answers)
            else:  # the answers' numbers, not their JSON text
                df, _ = rescore(df, combiner, b=b, answers=answers[""])
                if second:
                    df, _ = rescore(df, combiner2, prefix="judge2_", b=b2, answers=answers["judge2_"])
                pmask = (df["placebo"].fillna(False).astype(bool) if "placebo" in df
                         else pd.Series(False, df.index)).to_numpy()
                if pmask.any():  # the placebo pairs' frame holds the answers decoded, as the in-memory path's
                    pl = df[pmask].copy()
                    for c in json_cols:
                        pl[c] = [json_value(v) if isinstance(v, str) else None for v in pl[c].tolist()]
                    placebo.append(pl)
                o1, o2 = (o.take(~pmask) for o in answers[""])
                overall.add_columns(o1, o2)
                if second:
                    spool.judge2_answers.add_columns(*(o.take(~pmask) for o in answers["judge2_"]))
                if "task" in df:
                    codes, tasks = pd.factorize(df["task"][~pmask])  # rows without a task: code -1
                    for code, task in enumerate(tasks.tolist()):
                        rows = codes == code
                        per_task.setdefault(task, _Answers()).add_columns(o1.take(rows), o2.take(rows))
            pending.append(_real(df))
            if sum(len(x) for x in pending) >= ROW_GROUP:
                ready = pd.concat(pending, ignore_index=True)
                cut = len(ready) // ROW_GROUP * ROW_GROUP
                writer.columns = writer.columns or list(ready.columns)
                writer.write_frame(ready.iloc[:cut])
                pending = [ready.iloc[cut:]]
        rest = pd.concat(pending, ignore_index=True) if pending else pd.DataFrame(columns=columns)
        writer.columns = writer.columns or list(rest.columns)
        writer.write_frame(rest)
    return (pd.concat(placebo, ignore_index=True) if placebo else pd.DataFrame(), b, overall.result(**thresholds),
            {k: acc.result(**thresholds) for k, acc in sorted(per_task.items())})


def _real(df: pd.DataFrame) -> pd.DataFrame:
    """The rows of a rescored batch that are not placebo pairs."""
    return df[~df["placebo"].fillna(False).astype(bool)] if "placebo" in df else df


def _spooled_batch_decoded(df: pd.DataFrame, json_cols: list[str], combiner: str, combiner2: str | None, b: float,
                           b2: float, overall, per_task: dict, placebo: list, judge2=None) -> pd.DataFrame:
    """:func:`write_spooled_pairs` of one batch with an answer that is not regular
    (:data:`lmra.judge.answer_columns.OTHER`): its answers decoded from their JSON text and
    read as dicts. Returns the rescored batch (answers as the spool's text)."""
    from lmra.diagnostics import _Answers
    from lmra.judge.calibration import rescore

    text = {c: df[c].tolist() for c in json_cols}  # the answers as the spool holds them
    for c in json_cols:
        df[c] = [json_value(v) if isinstance(v, str) else None for v in text[c]]
    df, _ = rescore(df, combiner, b=b)
    if combiner2 is not None:
        df, _ = rescore(df, combiner2, prefix="judge2_", b=b2)
    pmask = df["placebo"].fillna(False).astype(bool) if "placebo" in df else pd.Series(False, df.index)
    placebo.append(df[pmask])
    real = df[~pmask]
    o1 = real["order1"].tolist() if "order1" in real else [None] * len(real)
    o2 = real["order2"].tolist() if "order2" in real else [None] * len(real)
    for k, a, c in zip(real["task"].tolist() if "task" in real else [None] * len(real), o1, o2):
        overall.add(a, c)
        if not pd.isna(k):  # a pair without a task is in no task's diagnostics (as groupby leaves it out)
            per_task.setdefault(k, _Answers()).add(a, c)
    if judge2 is not None:
        for a, c in zip(real["judge2_order1"].tolist(), real["judge2_order2"].tolist()):
            judge2.add(a, c)
    for c in json_cols:  # written as they were spooled: the same text, not encoded again
        df[c] = text[c]
    return df


def _prompt_line(p: PromptRecord) -> dict:
    """``p.model_dump(include={"id", "domain", "task", "text"})``: of a :class:`PromptRecord` (those are
    all its fields) built directly, in field order; anything else (a merged run's stored
    record) is asked for its ``model_dump``."""
    if type(p) is PromptRecord:
        return {"id": p.id, "text": p.text, "domain": p.domain, "task": p.task}
    return p.model_dump(include={"id", "domain", "task", "text"})


def _metric_losses(cfg, scores: pd.DataFrame, quality: pd.DataFrame) -> dict[str, tuple[int, int]]:
    """The failed calls of a run's secondary metrics: ``{"quality ratings": (failed, asked),
    "second-LMRA ratings": (failed, asked)}`` for those that were asked anything. A quality
    rating is one criterion of one pair; the second LMRA is asked about each pair the first
    one rated (``judge2_valid`` set), and failed when it left ``judge2_error``."""
    out = {}
    if cfg.quality.enabled and len(quality) and "failed" in quality:
        out["quality ratings"] = (int(quality["failed"].fillna(False).astype(bool).sum()), len(quality))
    if cfg.judge2 is not None and "judge2_valid" in scores:
        asked = scores["judge2_valid"].notna()
        failed = scores["judge2_error"].notna() & asked if "judge2_error" in scores else asked & False
        if asked.any():
            out["second-LMRA ratings"] = (int(failed.sum()), int(asked.sum()))
    return out


def _file_records(run_dir: Path) -> dict[str, dict]:
    """The run's data-file digests for ``manifest.json`` (:func:`lmra.digests.record`).

    Raises:
        LmraIOError: a file just written cannot be read back.
    """
    from lmra.digests import record
    from lmra.errors import LmraIOError, io_reason

    try:
        return record(run_dir)
    except OSError as exc:
        raise LmraIOError(f"cannot read back the run's files ({io_reason(exc)})", path=run_dir) from None


def _rows_frame(rows: list[dict]) -> pd.DataFrame:
    """``pd.DataFrame(rows)`` of rows that all have the same keys (the responses' rows), built
    from one list per column — the same frame (columns, dtypes, values) in half the time;
    other rows are handed to ``pd.DataFrame`` as they are."""
    if not rows:
        return pd.DataFrame(rows)
    keys = rows[0].keys()
    if any(r.keys() != keys for r in rows):  # (the columns are in the first row's order either way)
        return pd.DataFrame(rows)
    return pd.DataFrame({k: [r[k] for r in rows] for k in keys})


def _heap_frozen(fn):
    """``fn`` run with the objects alive at its start skipped by garbage collections
    (:func:`lmra.gcquiet.frozen_heap`): the finish allocates a few objects per pair, whose
    collections would otherwise traverse the whole audit's heap again and again (a quarter
    of its CPU time at 5,000 pairs)."""
    @functools.wraps(fn)
    def run(*args, **kwargs):
        with frozen_heap():
            return fn(*args, **kwargs)
    return run


@_heap_frozen
def finish_run(audit: "Audit", inputs: "Inputs", prompts: list[PromptRecord],
               classifications: dict[str, Classification], decisions: list[FilterDecision],
               responses: list[Response] | ResponseSpool, refusals: dict[int, tuple[float | None, bool]],
               ratings: list[dict] | RatedPairSpool, quality_rows: list[dict], manifest: dict,
               axes_result: Any = None) -> AuditResult:
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
        inputs ... axes_result: what the audit's stages returned; ``ratings`` the rows in the
            staged order, or a large run's :class:`RatedPairSpool` (``ratings.parquet`` is
            then written from it in batches, :func:`write_spooled_pairs`, and it is removed);
            ``responses`` the responses in the staged order, or that run's
            :class:`ResponseSpool` (its labels in its lines; ``refusals`` then unused; the
            response files written by :func:`write_spooled_responses`, and it is removed).

    Raises:
        LmraIOError: a file could not be written (naming it).
    """
    from lmra.judge.calibration import position_measured, rescore
    from lmra.judge_check import judge_status

    cfg = audit.cfg
    iv = cfg.interval
    asked = {d.prompt_id for d in decisions} | set(classifications or ())  # the prompts whose texts are written
    all_text = {p.id: p.text for p in inputs.prompts if p.id in asked}
    if isinstance(responses, ResponseSpool):  # a large run: its responses were spooled as their lines
        n_responses = write_spooled_responses(responses, audit.run_dir, bool(inputs.placebo))
        n_empty, n_filtered, n_truncated = responses.n_empty, responses.n_filtered, responses.n_truncated
        n_unfinished = responses.n_unfinished
        truncated_reasons = responses.truncated_reasons
        n_failed_responses = responses.n_failed
        repeated = responses.repeated
        word_scrubs = responses.word_scrubs
        responses.remove()
        resp_rows = disk_rows = is_placebo = []
    else:
        n_responses = len(responses)
        # one pass over the responses (five were 2 % of a cached re-run): their notes, word scrubs,
        # failures, rows with their refusal labels, and repeated texts
        n_empty = n_filtered = n_truncated = n_unfinished = n_failed_responses = 0
        truncated_reasons: Counter = Counter()
        word_scrubs = WordScrubs()
        repeated = RepeatedResponses()
        resp_rows = []
        for i, r in enumerate(responses):
            empty, filtered, truncated, unfinished = response_notes(r)
            n_empty += empty
            n_filtered += filtered
            n_truncated += truncated
            n_unfinished += unfinished
            if truncated:
                truncated_reasons[r.finish_reason] += 1
            word_scrubs.add(r)
            n_failed_responses += r.error is not None
            row = response_row(r)
            label = refusals.get(i)
            row["refusal_p"], row["refused"] = _labelled(label)
            repeated.add(row["scrubbed"], row["prompt_id"], failed=row["error"] is not None,
                         refused=None if label is None else label[1])
            resp_rows.append(row)
        if cfg.redact:  # responses often quote the user's message: keep only their length
            disk_rows = [_redacted(r) for r in resp_rows]
        else:
            disk_rows = resp_rows
        is_placebo = [r["comparison"] in inputs.placebo for r in resp_rows]
        audit._write_jsonl("responses.jsonl", [r for r, pl in zip(disk_rows, is_placebo) if not pl])
    if not cfg.redact:  # the audited prompts' texts, for the report's transcripts (a redacted run keeps none)
        audit._write_jsonl("prompts.jsonl", (_prompt_line(p) for p in prompts))  # one line at a time
    # every pair is scored under min, mean and calibrated; the main columns carry the run's combiner
    combiner, warnings = audit.run_combiner()
    methods = answer_methods(ratings)
    combiner, switched = auto_combiner_for_answers(cfg.judge.combiner, combiner, methods)
    if switched is not None:
        warnings.append(switched)
    warnings += [f"no placebo for {c}: its group A is a direct profile, which has no names to split"
                 for c in getattr(audit, "placebo_skipped", [])]
    identity = getattr(audit, "identity", None)  # chat-template tokens in answers (lmra.identity)
    warnings += identity.warnings() if identity is not None else []
    combiner2 = audit.run_combiner(cfg.judge2, audit._judge2_provider())[0] if cfg.judge2 is not None else None
    if combiner2 is not None:  # resolved by how its answers came, as the first LMRA's (break-it round 2: it kept
        # 'min' with 40 % of its answers sampled, +11 % against an identical first LMRA, no word)
        combiner2, switched2 = auto_combiner_for_answers(cfg.judge2.combiner, combiner2,
                                                         answer_methods(ratings, "judge2_"))
        if switched2 is not None:
            warnings.append(switched2.replace("rated LMRA answers", "rated answers of the second LMRA (judge2)", 1))
    if isinstance(ratings, PairSpool) and ratings.n_rows:  # a large run: its pairs were spooled to disk
        rdf = None
        placebo_rdf, position_logit, diag_all, diag_tasks = write_spooled_pairs(
            ratings, audit.run_dir / PARQUET_NAME, combiner, combiner2, min_valid_mass=cfg.judge.min_valid_mass,
            min_order_consistency=cfg.judge.min_order_consistency)
        logit_measured = ratings.logit[""].informative
        scores = read_pairs(audit.run_dir / PARQUET_NAME, [c for c in parquet_columns(audit.run_dir / PARQUET_NAME)
                                                           if c not in _NOT_SCORES])
    else:
        all_rdf, position_logit = rescore(pd.DataFrame([] if isinstance(ratings, PairSpool) else ratings),
                                          combiner)
        logit_measured = position_measured(all_rdf["order1"].tolist(), all_rdf["order2"].tolist()) \
            if "order1" in all_rdf and "order2" in all_rdf else False
        if combiner2 is not None and "judge2_order1" in all_rdf:
            all_rdf, _ = rescore(all_rdf, combiner2, prefix="judge2_")
        pmask = all_rdf["placebo"].astype(bool) if "placebo" in all_rdf else pd.Series(False, all_rdf.index)
        rdf, placebo_rdf = all_rdf[~pmask].reset_index(drop=True), all_rdf[pmask].reset_index(drop=True)
        write_pairs(audit.run_dir / PARQUET_NAME, rdf)  # Parquet row groups (lmra.pairstore)
        scores = rdf[[c for c in rdf.columns if c not in JSON_COLUMNS]]  # the tables need no answer objects
    pt = aggregate.per_task(scores, cfg.alpha, iv)
    pdm = aggregate.per_domain(scores, cfg.alpha, iv)
    ov = aggregate.overall(scores, cfg.alpha, iv)
    warnings += combiner_dependence_warnings(ov, combiner, methods)  # a significance only the order gives
    warnings += combiner_disagreement_warnings(ov, combiner, methods)  # a position preference moving the result
    positional = positional_refusal_warning(scores) if cfg.refusal.enabled else None
    if positional is not None:  # refusal labels given by the options' order alone
        warnings.append(positional)
    if not cfg.refusal.enabled:  # no refusal count was measured: unknown, not 0
        pt, pdm, ov = (aggregate.refusals_not_labelled(t) for t in (pt, pdm, ov))
    write_csv(pt, audit.run_dir / "per_task.csv")
    write_csv(pdm, audit.run_dir / "per_domain.csv")
    placebo_df = pd.DataFrame()
    if inputs.placebo:
        if not isinstance(responses, ResponseSpool):  # else written from the spool above
            audit._write_jsonl("placebo_responses.jsonl", [r for r, pl in zip(disk_rows, is_placebo) if pl])
        audit._write_jsonl("placebo_ratings.jsonl", placebo_rdf.to_dict(orient="records"))
        placebo_df = aggregate.placebo_table(placebo_rdf, inputs.placebo, cfg.alpha, iv)
        write_csv(placebo_df, audit.run_dir / "placebo.csv")

    refusal_df = aggregate.refusal_table(scores, cfg.alpha) if cfg.refusal.enabled else pd.DataFrame()
    if not refusal_df.empty:
        write_csv(refusal_df, audit.run_dir / "refusals.csv")
        from lmra.refusal_gap import unlabelled_refusal_warnings

        warnings += unlabelled_refusal_warnings(refusal_df, cfg.alpha)  # a gap the unlabelled responses may hide
    qdf = pd.DataFrame(quality_rows)
    quality_combiner = None
    if cfg.quality.enabled and not qdf.empty:  # as the ratings: one combiner, each criterion's own position logit
        qdf, quality_combiner, q_switched = combined_by_answers(
            qdf, cfg.judge.combiner, audit.run_combiner()[0], by="criterion", question="to the quality questions")
        qdf = qdf.reset_index(drop=True)
        quality_rows = qdf.to_dict(orient="records")
        if q_switched is not None:
            warnings.append(q_switched)
    quality_df = aggregate.quality_table(qdf, cfg.alpha, iv, pairs=scores) if cfg.quality.enabled else pd.DataFrame()
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
    if rdf is None:  # made while ratings.parquet was written
        diag = {"stereotype": diag_all}
    else:
        diag_all, diag_tasks = judge_diagnostics_with_by(rdf, "task", **th)
        diag = {"stereotype": diag_all}
    if cfg.quality.enabled and not qdf.empty:
        diag["quality"] = judge_diagnostics(qdf, **th)
    if rdf is None and cfg.judge2 is not None and getattr(ratings, "judge2_answers", None) is not None:
        th2 = dict(min_valid_mass=cfg.judge2.min_valid_mass, min_order_consistency=cfg.judge2.min_order_consistency)
        diag["judge2_stereotype"] = ratings.judge2_answers.result(**th2)
    if cfg.judge2 is not None and rdf is not None and "judge2_order1" in rdf:
        th2 = dict(min_valid_mass=cfg.judge2.min_valid_mass, min_order_consistency=cfg.judge2.min_order_consistency)
        diag["judge2_stereotype"] = judge_diagnostics(
            rdf.rename(columns={"order1": "_o1", "order2": "_o2", "judge2_order1": "order1",
                                "judge2_order2": "order2"}), **th2)
    common = common_word_names_warning(getattr(audit, "names_common_words", None) or [])
    if common is not None:
        warnings.append(common)
    word_scrubs.merge(getattr(audit, "word_scrubs_from_shards", None))  # a redacted merge: its shards' counts
    scrubbed_as_words = word_scrubs.rows()
    as_words = word_scrubs_warning(scrubbed_as_words)
    if as_words is not None:
        warnings.append(as_words)
    # over the responses with an answer (a failed call has no text), saying how many failed
    n_answered = n_responses - n_failed_responses
    empty = empty_responses_warning(n_empty, n_filtered, n_answered, n_failed_responses, cfg.refusal.enabled)
    if empty is not None:
        warnings.append(empty)
    cut = truncated_responses_warning(n_truncated, n_answered, cfg.target.max_tokens, n_failed_responses,
                                      truncated_reasons)
    if cut is not None:
        warnings.append(cut)
    if n_unfinished:
        warnings.append(f"{n_unfinished} of {n_answered}{UNFINISHED_RESPONSES_MARK}(finish_reason tool_use, pause_turn "
                        "or tool_calls: the chatbot asked for a tool)" + failed_left_out(n_failed_responses)
                        + "; their pairs are rated on the text before the tool call (\"Let me search.\"), not on an "
                        "answer — audit the chatbot as users reach it (its tools run), or count these as its answers "
                        "knowingly; responses.jsonl has each response's finish_reason")
    shards_found = getattr(audit, "repeated_from_shards", None)  # a redacted merge: its shards' findings
    if shards_found is not None:
        found = [d for d in shards_found if isinstance(d, dict)]
        one_answer = max(found, key=lambda d: d.get("share") or 0) if found else None
    else:
        one_answer = repeated_response(repeated, cfg.max_repeated_share, redacted=cfg.redact)
    if one_answer is not None:  # first: nothing else of the run is about a chatbot
        warnings.insert(0, repeated_response_warning(one_answer, cfg.max_repeated_share, refusal_labels=cfg.refusal.enabled))
    degraded = text_under_min_warning(diag["stereotype"], combiner, audit._judge_provider().supports_logprobs)
    if degraded is not None:
        warnings.append(degraded)
    flagged = flagged_warning(diag)  # also in summary.json's warnings, for whoever reads only those
    if flagged is not None:
        warnings.append(flagged)
    n_lex = sum(1 for d in decisions if d.reason == "lexical")
    n_filter_unlabelled = sum(1 for d in decisions if d.reason == "unlabelled")
    verdict = getattr(audit, "judge_verdict", None)
    if verdict is not None:
        audit._write_jsonl("judge_check_ratings.jsonl", audit.canary_rows.to_dict(orient="records"))
        audit._write_json("judge_check.json", verdict)
    status = judge_status(verdict, placebo_df, diag["stereotype"],
                          gated=not cfg.judge_waiver() and not audit.allow_unvalidated_judge,
                          waiver="--allow-unvalidated-judge" if audit.allow_unvalidated_judge
                          else cfg.judge_waiver(), cache=getattr(audit, "canary_cache", None))
    n_pairs_failed = int(scores["failed"].fillna(False).astype(bool).sum()) if "failed" in scores else 0
    # prompts without a label: lost to failed calls (a re-run from the cache completes them), or to answers
    # that named no option (cached: a re-run gets them again; break-it finding: both were "failed calls")
    n_classify_failed = sum(1 for c in classifications.values() if c.failed and not c.unusable)
    n_classify_unusable = sum(1 for c in classifications.values() if c.unusable)
    n_filter_failed = sum(1 for d in decisions if d.reason == "unlabelled" and d.error)
    share = failed_share(n_pairs_failed, len(scores), n_classify_failed + n_filter_failed,
                         len(cfg.comparisons) * cfg.samples_per_prompt)
    n_valid = int(scores["valid"].fillna(False).astype(bool).sum()) if "valid" in scores else 0
    left_out = getattr(audit, "prompts_left_out", None) or {}
    metric_losses = _metric_losses(cfg, scores, qdf)
    for what, (lost, asked) in metric_losses.items():
        if lost / asked > cfg.max_failed_share:  # a metric mostly lost: partial, as lost pairs make a run
            warnings.append(f"{lost} of {asked} {what} failed ({lost / asked:.1%}, above max_failed_share = "
                            f"{cfg.max_failed_share:g}): its table rests on the rest, and the run is partial")
    n_scored = int(ov["n_pairs"].sum()) if "n_pairs" in ov else n_valid  # (as the console's overall line)
    run_st = run_status(max([share, *(lost / asked for lost, asked in metric_losses.values())]),
                        cfg.max_failed_share, n_scored)  # nothing scored → failed
    over_invalid = invalid_over_limit(pt, cfg.max_invalid_share, ov)
    warnings += [invalid_share_warning(d, cfg.max_invalid_share) for d in over_invalid]
    outliers = invalid_outliers(pt, alpha=cfg.alpha, skip=over_invalid)
    if outliers:  # who left the pairs unrated: the chatbot's failed calls are told apart from the LMRA's
        by_task = chatbot_failed_pairs(scores)
        for d in outliers:
            ga, _, gb = d["comparison"].partition(" vs ")
            d["n_failed_chatbot"] = by_task.get((ga, gb, str(d["domain"]), d["task"]), 0)
    warnings += [invalid_outlier_warning(d) for d in outliers]
    filter_counts = sorted(getattr(audit, "filter_unlabelled", None) or [],
                           key=lambda r: (str(r.get("domain")), r["task"]))  # (a merge's order: the same)
    over_filter = filter_over_limit(filter_counts, cfg.max_invalid_share)
    warnings += [filter_share_warning(d, cfg.max_invalid_share) for d in over_filter]
    n_classify_answered = len(classifications) - n_classify_failed  # (failed calls aside, as the filter's test)
    classify_over = classify_unusable_over_limit(n_classify_unusable, n_classify_answered, cfg.max_invalid_share)
    if n_classify_unusable:
        warnings.append(classify_unusable_warning(n_classify_unusable, n_classify_answered, cfg.max_invalid_share))
    if (over_invalid or over_filter or classify_over or one_answer) and run_st == COMPLETE:  # a rate resting on the answers the
        run_st = PARTIAL  # LMRA chose to give
    axes_partial = []
    if axes_result is not None:  # an axes step that measured too little makes the run partial, as lost metrics do
        from lmra.axes.publish import axes_partial_reasons

        axes_partial = axes_partial_reasons(axes_result.summary, cfg.max_failed_share)
        if axes_partial:
            warnings.append(f"{AXES_PARTIAL_PREFIX}: {'; '.join(axes_partial)} (axes_summary.json; docs/axes.md)")
            if run_st == COMPLETE:
                run_st = PARTIAL
    filter_removed = sorted(getattr(audit, "filter_removed", None) or [],
                            key=lambda r: (str(r.get("domain")), r["task"]))
    emptied = emptied_by_filter_warning(filter_removed)
    if emptied is not None:
        warnings.append(emptied)
    n_filter_lmra = len(decisions) - n_lex - n_filter_unlabelled
    filter_most = filter_removed_most_warning(n_filter_lmra, n_filter_lmra + n_filter_unlabelled + _asked_kept(
        cfg, prompts))
    if filter_most is not None:
        warnings.insert(0, filter_most)  # before any other: the run rests on what the filter kept
    none_scored = no_pair_scored_warning(scores, n_scored, n_pairs_failed, filter_most)
    if none_scored is not None:
        warnings.append(none_scored)
    summary = {
        "schema_version": 2,
        "run_status": run_st,
        "n_pairs_failed": n_pairs_failed,
        "n_prompts_classify_failed": n_classify_failed,
        # prompts without a task whose classification answer named no option (left out; cached)
        "n_prompts_classify_unusable": n_classify_unusable,
        # one text given to most prompts (lmra.repeated): {count, n, share, preview, chars, refused}, or None
        "repeated_response": one_answer,
        "max_repeated_share": cfg.max_repeated_share,
        "classify_unusable_over_limit": classify_over,
        "n_prompts_filter_failed": n_filter_failed,
        "failed_share": share,
        # the secondary metrics' failed ratings: {metric: {"failed", "asked", "share"}}
        "failed_by_metric": {what: {"failed": lost, "asked": asked, "share": lost / asked}
                             for what, (lost, asked) in metric_losses.items()},
        "max_failed_share": cfg.max_failed_share,
        # tasks whose LMRA answered too few of their rated pairs (lmra.runstate.invalid_over_limit)
        "max_invalid_share": cfg.max_invalid_share,
        "invalid_over_limit": over_invalid,
        # tasks whose share of unrated pairs is significantly above their comparison's other tasks'
        # (lmra.runstate.invalid_outliers), with the worst-case bounds of their net rating
        "invalid_outliers": outliers,
        # per task, the prompts the identity filter's LMRA was asked about and could not label, and
        # the tasks significantly over max_invalid_share (lmra.runstate.filter_over_limit)
        "filter_unlabelled": filter_counts,
        # per task with a prompt removed by the identity filter: prompts, kept, and removals by reason
        "filter_removed": filter_removed,
        "filter_over_limit": over_filter,
        "name": cfg.name,
        "run_dir": str(audit.run_dir),
        "redacted": cfg.redact,
        # the file's records, repeats included (round-2 break-it, s45: the Prompts line did not add up)
        "n_prompts_in_file": len(inputs.prompts) + (getattr(audit, "prompts_repeated", None) or 0),
        "n_classified": len(classifications),
        # prompts whose file gave a domain that is no taxonomy domain: their domain is the LMRA's
        "n_domains_replaced": sum(1 for c in classifications.values()
                                  if c.given_domain is not None and not c.failed and c.domain != c.given_domain),
        "classified_tasks": dict(pd.Series([c.task for c in classifications.values() if not c.failed], dtype=object)
                                 .value_counts().items()) if classifications else {},
        "judge_status": status,
        "warnings": warnings,
        "refusal_labels": cfg.refusal.enabled,
        "n_filtered": len(decisions),
        "n_filtered_lexical": n_lex,
        "n_filtered_lmra": len(decisions) - n_lex - n_filter_unlabelled,
        "n_filtered_unlabelled": n_filter_unlabelled,
        # of them, those whose LMRA answered without a usable yes/no (not a failed call): the answer is in the call
        # cache, so every run with this cache removes the same prompts (nightly trial, s46: said as tonight's)
        "n_filtered_unanswered": sum(1 for d in decisions if d.reason == "unlabelled" and d.error is None),
        "n_prompts_not_selected": left_out.get("not_selected"),  # outside the configured domains/tasks
        "n_prompts_over_limit": left_out.get("over_limit"),  # beyond prompts_per_task in their task
        # records of the prompt file whose text repeats an earlier one's: audited once (lmra.data.load_prompts)
        "n_prompts_repeated": getattr(audit, "prompts_repeated", None),
        "prompts_per_task": cfg.prompts_per_task,
        # the name list's gender/race values no group selects (a misspelt 'mal'): never drawn
        "names_unmatched": getattr(audit, "names_unmatched", None) or {},
        # comparisons whose names were drawn balanced by the attribute neither group filters on
        # (lmra.audit.inputs.comparison_strata): attribute, values, names left out per group
        "balanced_draws": getattr(audit, "balanced_draws", None) or {},
        # drawn names that are everyday words (lmra.data.COMMON_WORD_NAMES; common_word_names_warning)
        "names_common_words": getattr(audit, "names_common_words", None) or [],
        "names_scrubbed_as_words": scrubbed_as_words,  # (lmra.word_scrubs)
        "n_prompts": len(prompts),
        "n_responses": n_responses,
        # their call failed: no text, so not in the denominator of the empty / filtered / cut warnings
        "n_responses_failed": n_failed_responses,
        "n_responses_empty": n_empty,  # no text though the call did not fail (rated as they are)
        "n_responses_content_filter": n_filtered,
        "n_responses_truncated": n_truncated,  # cut at max_tokens (finish_reason length / max_tokens)
        "n_responses_unfinished": n_unfinished,  # a tool call, not an answer (tool_use / pause_turn / tool_calls)
        "n_pairs_total": len(scores),  # placebo pairs are counted in summary["placebo"]
        "n_pairs_refusal": (int(scores["refused"].sum()) if not scores.empty else 0) if cfg.refusal.enabled else None,
        "n_pairs_unlabelled": (int(scores["unlabelled"].fillna(False).astype(bool).sum()) if "unlabelled" in scores
                               else 0) if cfg.refusal.enabled else None,
        "confidence": 1 - cfg.alpha,
        "interval": iv,
        "combiner": combiner,
        "combiner_setting": cfg.judge.combiner,
        "judge2_combiner": combiner2,  # the second LMRA's, resolved by how its answers came (None: no judge2)
        # the combiner of the quality ratings, resolved by how their own answers came (None: no quality rows)
        "quality_combiner": quality_combiner,
        # the b̂ 'calibrated' removed, or None when no pair carried information on it ('calibrated'
        # then removed nothing; fresh-user finding: "+0.000" shown, a 0/0, next to a judge check
        # saying it could not be measured)
        "position_logit": position_logit if logit_measured else None,
        "placebo": placebo_df.to_dict(orient="records"),
        "judge_methods": diag["stereotype"]["methods"],
        "judge_valid_option_mass": diag["stereotype"]["valid_option_mass"],
        "diagnostics": diag,
        "diagnostics_per_task": diag_tasks,
        "overall": ov.to_dict(orient="records"),
        # per comparison: the net rating's worst-case bounds had every pair without a usable
        # rating scored −1 or +1 (lmra.aggregate.unrated_bounds)
        "unrated_bounds": aggregate.unrated_bound_rows(ov),
        "per_domain": pdm.to_dict(orient="records"),
        "per_task": pt.to_dict(orient="records"),
        "refusals": refusal_df.to_dict(orient="records"),
        "quality": quality_df.to_dict(orient="records"),
        "judges": judges_df.to_dict(orient="records"),
    }
    if manifest.get("shards"):  # a merged run (lmra merge): what completes it is said differently
        summary["n_shards"] = len(manifest["shards"])
        # the shards whose calls failed: the ones a re-run completes (break-it round 3: not named)
        summary["shards_with_failed_calls"] = [s.get("shard") for s in manifest["shards"] if isinstance(s, dict)
                                               and int(((s.get("calls") or {}).get("failed")) or 0) > 0]
    if axes_result is not None:
        summary["axes"] = axes_result.summary
        summary["axes_partial"] = axes_partial  # why the axes step is partial (lmra.runstate.partial_because)
    audit._write_json("summary.json", summary)
    if run_st == FAILED:  # why (review finding: no reason); not stop_reason, which says the run stopped on an
        manifest["failure"] = none_scored or _all_failed_reason(scores, n_pairs_failed)  # error (lmra.merge)
    manifest |= {"status": run_st, "judge_status": status["status"],
                 # a failed validation whose gate was off (fresh-user finding: the manifest alone read as an
                 # un-waived failure, where summary, history, exports and report say "failed (waived)")
                 "judge_waived": bool(status.get("waived")),
                 "finished": _dt.datetime.now().astimezone().isoformat(timespec="seconds"),
                 "calls": redacted_calls(audit.stats.as_dict()) if cfg.redact else audit.stats.as_dict(),
                 "files": _file_records(audit.run_dir)}  # checked when read back (lmra.digests)
    audit._write_json("manifest.json", manifest)
    if isinstance(ratings, PairSpool):
        ratings.remove()  # the run's pairs are in ratings.parquet now
    return AuditResult(audit.run_dir, lambda: _rows_frame(resp_rows), rdf if rdf is not None else scores, pt, pdm, ov,
                       summary, manifest, refusals=refusal_df, quality=quality_df, quality_ratings=qdf,
                       judges=judges_df, filtered=lambda: pd.DataFrame(filtered_rows), axes=axes_result)
