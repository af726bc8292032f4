"""Axes step 3 — consolidate (methodology §4 step 3): the features of one comparison become at
most K candidate axes. Distinct normalised features (optionally pre-clustered by sentence
embeddings, :mod:`lmra.axes.embed`) are shown to the LMRA merge prompt; if its answer is
invalid after one retry, a deterministic fallback keeps the K most frequent items. The path
taken is recorded.

Reads a :class:`~lmra.axes.brainstorm.Brainstorm`'s features; writes the comparison's
candidates record (``axes_candidates.json``) and the axis list the labelling step tests
(:func:`candidate_axes`, with ``axes.extra_axes``).
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from lmra.axes.embed import cluster_texts
from lmra.config import AuditConfig
from lmra.judge.axes import consolidate_features
from lmra.providers import Provider, ProviderError
from lmra.templates import Template


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


async def consolidate_candidates(judge: Provider, cfg: AuditConfig, tpl: Template, features: list[dict], seed: int,
                                 comparison: str) -> dict:
    """Consolidate one comparison's brainstormed features into candidate axes (methodology §4
    step 3): LMRA merge prompt on the :func:`merge_items` lines, else :func:`fallback_axes`.

    Args:
        judge: the LMRA; cfg: config (``axes`` settings); tpl: the consolidate template.
        features: the comparison's :attr:`~lmra.axes.brainstorm.Brainstorm.features`.
        seed: seed part of the merge call; comparison: ``"A vs B"``.

    Returns:
        The candidates record of ``axes_candidates.json``: ``path`` (``lmra``, ``fallback`` or
        ``no_features``), ``preclustering``, counts, ``items`` shown, the LMRA's raw outputs,
        ``axes`` (each with its absorbed and opposite feature ids and texts, ``lean_a``,
        ``lean_b``) and ``unassigned`` feature ids.
    """
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


def candidate_axes(discovered: list[dict], extra: list[str]) -> tuple[list[str], dict[str, str]]:
    """The axes the labelling step tests: the discovered axes (duplicates dropped), then
    ``axes.extra_axes`` not already among them (whitespace collapsed). Two axes are the same
    when their :func:`~lmra.axes.brainstorm.normalise_feature` keys are (case, punctuation,
    spacing and leading filler words aside: "Uses formal language." is "uses formal
    language"), so one hypothesis is never labelled, paid for and counted in K twice.

    Returns:
        (axis names in that order, axis → source ``discovered`` / ``extra`` / ``discovered+extra``).
    """
    names: list[str] = []
    source: dict[str, str] = {}
    seen: dict[str, str] = {}
    from lmra.axes.brainstorm import normalise_feature

    for a in discovered:
        key = normalise_feature(a["axis"])
        if key not in seen:
            seen[key] = a["axis"]
            names.append(a["axis"])
            source[a["axis"]] = "discovered"
    for e in extra:
        key = normalise_feature(e)
        if key in seen:
            source[seen[key]] = "discovered+extra"
            continue
        seen[key] = e
        names.append(" ".join(e.split()))
        source[names[-1]] = "extra"
    return names, source


def add_extra_axes(candidates: dict, names: list[str], sources: dict[str, str]) -> None:
    """Record the ``extra_axes`` of :func:`candidate_axes` in a comparison's candidates record
    (in place): an extra-only axis is appended with no features, a discovered one that is
    also extra gets source ``discovered+extra``."""
    for name in names:
        if sources[name] == "extra":
            candidates["axes"].append({"axis": name, "source": "extra", "feature_ids": [], "opposite_ids": [],
                                       "features": [], "opposite_features": [], "n_features": 0, "lean_a": 0,
                                       "lean_b": 0})
        elif sources[name] == "discovered+extra":
            next(a for a in candidates["axes"] if a["axis"] == name)["source"] = "discovered+extra"
