"""Axes call plan: upper bounds on the LMRA calls of an axes run, before it starts (issue 4,
budget) — from the split pairs (:class:`~lmra.axes.pairs.AxesInputs`) or, inside an audit,
from its size alone."""

from __future__ import annotations

from lmra.axes.pairs import AxesInputs
from lmra.config import AuditConfig
from lmra.judge.axes import ATTEMPTS
from lmra.judge.options import calls_per_question


def planned_axes_calls(cfg: AuditConfig, inputs: AxesInputs, supports_logprobs: bool, *,
                       fallback: bool = False) -> dict[str, int]:
    """Upper bounds on the LMRA calls an axes run makes before the cache (issue 4, budget).

    Per comparison: brainstorm ≤ 2 × discovery pairs (first answer + one retry);
    consolidation ≤ 2; labelling = K_max × test pairs × 2 orders × q, with K_max =
    ``max_axes`` + ``len(extra_axes)`` and q = 1 with log-probabilities, else
    ``judge.n_samples`` (:func:`~lmra.judge.options.calls_per_question`); harm check ≤ K_max ×
    2 option orders × q. Cached calls are free.

    Returns:
        dict with ``brainstorm``, ``consolidate``, ``label``, ``harm``, ``total``,
        ``discovery_pairs``, ``test_pairs`` (summed over comparisons); with ``fallback`` (a
        provider with log-probabilities that may answer without them,
        :func:`~lmra.providers.base.answers_may_lack_logprobs`) also ``total_without_logprobs``:
        the bound when its answers come without them (each question then also sampled
        ``n_samples`` times).
    """
    ax = cfg.axes
    q = calls_per_question(cfg.judge, supports_logprobs)
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
    if supports_logprobs and fallback:  # q = 1: each option question's calls times the sampling fallback's
        out["total_without_logprobs"] = (out["brainstorm"] + out["consolidate"] + (out["label"] + out["harm"])
                                         * calls_per_question(cfg.judge, True, without_logprobs=True))
    return out


def axes_call_bound(cfg: AuditConfig, pairs_per_comparison: int, supports_logprobs: bool, *,
                    without_logprobs: bool = False) -> int:
    """Upper bound on the LMRA calls of the axes step of an audit, before its responses exist
    (for :meth:`lmra.audit.Audit.planned_calls`): as :func:`planned_axes_calls` with at most
    ``min(discovery_pairs, P)`` discovery and ``min(test_pairs or P, P)`` test pairs per
    comparison, P = ``pairs_per_comparison``; 0 when ``axes.enabled`` is off.
    """
    ax = cfg.axes
    if not ax.enabled or pairs_per_comparison <= 0:
        return 0
    q = calls_per_question(cfg.judge, supports_logprobs, without_logprobs=without_logprobs)
    k = ax.max_axes + len(ax.extra_axes)
    disc = min(ax.discovery_pairs, pairs_per_comparison)
    test = min(ax.test_pairs or pairs_per_comparison, pairs_per_comparison)
    per = ATTEMPTS * disc + ATTEMPTS + k * test * 2 * q + (k * 2 * q if ax.harm_check else 0)
    return per * len(cfg.comparisons)
