"""Recommendation fairness (methodology §6, §7): FaiRLLM list-similarity metrics, CFaiRLLM
true-preference and intersectional analysis on MovieLens-format data, and bias disparity.

Python API::

    from lmra.recsys import jaccard, serp, prag, snsr, snsv, score_pairs, similarity_table
    serp(["a", "b", "c"], ["b", "a"], k=3)                      # paper convention
    serp(["a", "b", "c"], ["b", "a"], k=3, convention="paper-k")   # normalised by K even for short lists
    serp(["a", "b", "c"], ["b", "a"], k=3, convention="fairllm-code")

    from lmra.recsys import RecsysRun, load_recsys_config
    result = RecsysRun(load_recsys_config("examples/recsys.toml")).run()
    result.fairness  # SNSR/SNSV per attribute, metric and k

Submodules: :mod:`~lmra.recsys.metrics`, :mod:`~lmra.recsys.parse`,
:mod:`~lmra.recsys.instructions`, :mod:`~lmra.recsys.movielens`,
:mod:`~lmra.recsys.bias_disparity`, :mod:`~lmra.recsys.config`, :mod:`~lmra.recsys.run` (a run's stages:
:mod:`~lmra.recsys.inputs` → :mod:`~lmra.recsys.generate` → :mod:`~lmra.recsys.records` →
:mod:`~lmra.recsys.scoring` → :mod:`~lmra.recsys.outputs`), :mod:`~lmra.recsys.lists`,
:mod:`~lmra.recsys.bias_files`, :mod:`~lmra.recsys.report`; the command line is :mod:`lmra.cli.recsys`.
"""

from lmra.recsys.config import RecsysConfig, load_recsys_config
from lmra.recsys.metrics import (CONVENTIONS, METRICS, MissingItemError, fairness_table, jaccard, prag, score_pairs,
                                 serp, similarity_table, snsr, snsv, top_k)
from lmra.recsys.parse import CatalogMatcher, ParsedList, normalize_title, parse_fairllm_code, parse_list
from lmra.recsys.run import RecsysResult, RecsysRun, score_lists

__all__ = [
    "CONVENTIONS", "METRICS", "CatalogMatcher", "MissingItemError", "ParsedList", "RecsysConfig", "RecsysResult",
    "RecsysRun", "fairness_table", "jaccard", "load_recsys_config", "normalize_title", "parse_fairllm_code",
    "parse_list", "prag", "score_lists", "score_pairs", "serp", "similarity_table", "snsr", "snsv", "top_k",
]
