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
:mod:`~lmra.recsys.permutation` (the SNSR/SNSV test), :mod:`~lmra.recsys.bias_disparity`, :mod:`~lmra.recsys.config`, :mod:`~lmra.recsys.run` (a run's stages:
:mod:`~lmra.recsys.inputs` → :mod:`~lmra.recsys.generate` → :mod:`~lmra.recsys.records` →
:mod:`~lmra.recsys.scoring` → :mod:`~lmra.recsys.outputs`), :mod:`~lmra.recsys.lists`,
:mod:`~lmra.recsys.bias_files`, :mod:`~lmra.recsys.report`; the command line is :mod:`lmra.cli.recsys`.
"""

#: the Python API and the modules it comes from, imported on first use (PEP 562), so that
#: ``lmra recsys --help`` and ``lmra.recsys.conventions`` load neither pandas nor the run
_API = {
    **dict.fromkeys(("RecsysConfig", "load_recsys_config"), "lmra.recsys.config"),
    **dict.fromkeys(("CONVENTIONS", "METRICS", "MissingItemError", "fairness_table", "jaccard", "prag",
                     "score_pairs", "serp", "similarity_table", "snsr", "snsv", "top_k"), "lmra.recsys.metrics"),
    **dict.fromkeys(("CatalogMatcher", "ParsedList", "normalize_title", "parse_fairllm_code", "parse_list"),
                    "lmra.recsys.parse"),
    **dict.fromkeys(("RecsysResult", "RecsysRun", "score_lists"), "lmra.recsys.run"),
    "unfairness_pvalues": "lmra.recsys.permutation",
}


def __getattr__(name: str):
    """``lmra.recsys.serp`` & co. (:data:`_API`), imported when first asked for."""
    if name in _API:
        import importlib

        value = getattr(importlib.import_module(_API[name]), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'lmra.recsys' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_API))


__all__ = [
    "CONVENTIONS", "METRICS", "CatalogMatcher", "MissingItemError", "ParsedList", "RecsysConfig", "RecsysResult",
    "RecsysRun", "fairness_table", "jaccard", "load_recsys_config", "normalize_title", "parse_fairllm_code",
    "parse_list", "prag", "score_lists", "score_pairs", "serp", "similarity_table", "snsr", "snsv", "top_k",
]
