"""Axes step 2 — brainstorm (methodology §4 step 2): on each discovery pair, in a seeded random
presentation order with the groups hidden, the LMRA lists short, general differences; each
feature keeps the group it leaned to.

Reads the discovery :class:`~lmra.axes.pairs.AxisPair` records; writes a :class:`Brainstorm`
(feature rows for ``axes_features.jsonl`` and answer counts) for consolidation
(:mod:`lmra.axes.consolidate`).
"""

from __future__ import annotations

import asyncio
import random
import re
import unicodedata
from collections.abc import Mapping
from typing import NamedTuple

from lmra.axes.calls import bounded
from lmra.axes.pairs import AxisPair
from lmra.config import AuditConfig
from lmra.generate import derive_seed
from lmra.judge.axes import BrainstormResult, brainstorm_pair
from lmra.judge.options import is_judge_refusal
from lmra.providers import Provider, ProviderError
from lmra.templates import Template


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


class Brainstorm(NamedTuple):
    """What the brainstorm step of one comparison yields.

    Attributes:
        features: one dict per feature (``id``, ``comparison``, ``pair_id``, ``prompt_id``,
            ``task``, ``feature``, ``normalised``, ``lean_group``, ``lean`` ``"a"``/``"b"``,
            ``flipped``, ``attempt``), ids numbered from 0.
        counts: answer counts (``pairs``, ``valid``, ``invalid`` — of them ``refused``: the LMRA
            declined to compare —, ``retried``,
            ``valid_after_retry``, ``failed``, ``empty``, ``items_dropped``) and the lists
            ``invalid_pairs`` and ``answers`` (one entry per pair).
    """

    features: list[dict]
    counts: dict


def unusable_answers(counts: Mapping) -> int:
    """How many of a comparison's brainstorm answers yielded nothing usable: invalid after their
    retry, or calls that failed after every retry. ``counts`` is a :attr:`Brainstorm.counts`
    (or its copy in ``axes_summary.json``). A valid answer that lists no difference is usable:
    it is the LMRA's finding."""
    return int(counts.get("invalid", 0)) + int(counts.get("failed", 0))


async def brainstorm_features(judge: Provider, cfg: AuditConfig, tpl: Template, disc: list[AxisPair], seed: int,
                              sem: asyncio.Semaphore, progress) -> Brainstorm:
    """Brainstorm on every discovery pair of one comparison (methodology §4 step 2).

    Args:
        judge: the LMRA; cfg: config (``axes`` settings); tpl: the brainstorm template.
        disc: discovery pairs; seed: seed of the presentation order and the calls.
        sem: calls-in-flight bound; progress: advanced once per pair (``axes-brainstorm``).

    Returns:
        :class:`Brainstorm` (a failed call counts as ``failed``; an invalid answer after its
        retry as ``invalid``; neither yields features).
    """
    async def one(p: AxisPair) -> tuple[AxisPair, BrainstormResult | None, str | None]:
        flipped = random.Random(derive_seed(seed, "axes-order", p.pair_id)).random() < 0.5
        try:
            res = await bounded(sem, brainstorm_pair(judge, cfg.axes, tpl, task=p.task, prompt=p.prompt,
                                                     response_a=p.response_a, response_b=p.response_b,
                                                     group_a=p.group_a, group_b=p.group_b, flipped=flipped,
                                                     seed_parts=(seed, p.pair_id)))
            err = None
        except ProviderError as exc:
            res, err = None, str(exc)
        progress.advance("axes-brainstorm", err is not None)
        return p, res, err

    results = await asyncio.gather(*(one(p) for p in disc))
    features: list[dict] = []
    counts = {"pairs": len(disc), "valid": 0, "invalid": 0, "retried": 0, "valid_after_retry": 0, "failed": 0,
              "empty": 0, "items_dropped": 0, "invalid_pairs": [], "answers": [], "refused": 0}
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
            # of them, the LMRA declining to compare ("I'm sorry, I can't …"), as the label step counts its
            # refusals (break-it finding, s47: counted as invalid only)
            counts["refused"] += int(bool(res.raw_texts) and is_judge_refusal(res.raw_texts[-1]))
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
    return Brainstorm(features, counts)
