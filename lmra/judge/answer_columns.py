"""The LMRA's answers of many pairs as columns of numbers instead of one dict per answer (issue 15).

An answer — an :class:`~lmra.judge.options.OptionProbs` dict, as ``ratings.parquet`` holds it
as JSON text — is reduced to what rescoring (:func:`lmra.judge.calibration.rescore`) and the
judge diagnostics (:mod:`lmra.diagnostics`) read of it: its *kind*, its option probabilities
``A``, ``B``, ``C``, its valid-option mass, its counts of unparseable and refused samples, its
method and its number of samples (the replies it was read from). A large run's pair spool stores these numbers next to each answer's JSON text
(:class:`lmra.audit.finish.RatedPairSpool`), so that finishing the run scores a million pairs
with numpy instead of decoding two million JSON objects.

Only *regular* answers are reduced: a dict with a ``probs`` key holding None or exactly the
options ``A``, ``B``, ``C`` in that order as finite floats, a finite float ``mass``, integer
counts and a text (or no) method — the values its JSON text decodes to. Any other value
(kind :data:`OTHER`) must be read from its JSON text, so that every result is the same float
as the dict-based code gives.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

#: answer kinds: no answer (None or NaN: the pair was not rated); an answer whose ``probs``
#: is None (unusable); a regular answer with probabilities; anything else (read its JSON)
NONE, UNUSABLE, PROBS, OTHER = 0, 1, 2, 3
#: the numbers stored per answer, in this order (all as float64)
FIELDS = ("kind", "A", "B", "C", "mass", "n_unparseable", "n_refused", "method", "n_samples")

_NAN = math.nan
_NONE_FIELDS = (float(NONE), _NAN, _NAN, _NAN, _NAN, 0.0, 0.0, -1.0, 0.0)
_OTHER_FIELDS = (float(OTHER), _NAN, _NAN, _NAN, _NAN, 0.0, 0.0, -1.0, 0.0)
_MAX_COUNT = 2**31
_ABC = ("A", "B", "C")


def answer_fields(answer, methods: dict) -> tuple:
    """The :data:`FIELDS` of one answer, as a tuple of 8 floats.

    Args:
        answer: an OptionProbs dict (or None / NaN for a pair that was not rated).
        methods: method text (or None) → its code; a new method is added with the next code.

    Returns:
        (kind, A, B, C, mass, n_unparseable, n_refused, method code, n_samples): NaN
        probabilities unless the kind is :data:`PROBS`; ``n_samples`` 1 when the answer has
        none (an older run's); kind :data:`OTHER` for any answer that is not regular.
    """
    if answer is None or (type(answer) is float and answer != answer):
        return _NONE_FIELDS
    if type(answer) is not dict or "probs" not in answer:
        return _OTHER_FIELDS
    mass, method = answer.get("mass", 0.0), answer.get("method")
    nu, nr, ns = answer.get("n_unparseable", 0), answer.get("n_refused", 0), answer.get("n_samples", 1)
    if (type(mass) is not float or not math.isfinite(mass) or type(nu) is not int or type(nr) is not int
            or type(ns) is not int or not 0 <= ns < _MAX_COUNT
            or not -_MAX_COUNT < nu < _MAX_COUNT or not -_MAX_COUNT < nr < _MAX_COUNT
            or (method is not None and type(method) is not str)):
        return _OTHER_FIELDS
    code = methods.get(method)
    if code is None:
        code = methods[method] = len(methods)
    probs = answer["probs"]
    if probs is None:
        return (float(UNUSABLE), _NAN, _NAN, _NAN, mass, float(nu), float(nr), float(code), float(ns))
    if type(probs) is not dict or tuple(probs) != _ABC:
        return _OTHER_FIELDS
    a, b, c = probs["A"], probs["B"], probs["C"]
    if (type(a) is not float or type(b) is not float or type(c) is not float
            or not (math.isfinite(a) and math.isfinite(b) and math.isfinite(c))):
        return _OTHER_FIELDS
    return (float(PROBS), a, b, c, mass, float(nu), float(nr), float(code), float(ns))


@dataclass
class AnswerColumns:
    """One presentation order's answers of n pairs as arrays (see :data:`FIELDS`).

    Attributes:
        kind: (n,) int8, :data:`NONE` … :data:`OTHER`.
        probs: (n, 3) float64, options A, B, C (NaN unless the kind is :data:`PROBS`).
        mass: (n,) float64, the valid-option mass (NaN without an answer).
        n_unparseable, n_refused: (n,) int64 counts.
        method: (n,) object array of the answers' method texts (None without one).
        n_samples: (n,) int64, the replies each answer was read from (0 without an answer).
    """

    kind: np.ndarray
    probs: np.ndarray
    mass: np.ndarray
    n_unparseable: np.ndarray
    n_refused: np.ndarray
    method: np.ndarray
    n_samples: np.ndarray

    @classmethod
    def from_fields(cls, fields: np.ndarray, methods: dict) -> "AnswerColumns":
        """Columns from an (n, 8) float array of :func:`answer_fields` rows and the ``methods``
        codes they were made with."""
        fields = np.asarray(fields, dtype=np.float64).reshape(-1, len(FIELDS))
        names = np.empty(len(methods) + 1, dtype=object)  # code -1 (no answer) → None
        for m, code in methods.items():
            names[code] = m
        return cls(kind=fields[:, 0].astype(np.int8), probs=fields[:, 1:4], mass=fields[:, 4],
                   n_unparseable=fields[:, 5].astype(np.int64), n_refused=fields[:, 6].astype(np.int64),
                   method=names[fields[:, 7].astype(np.int64)], n_samples=fields[:, 8].astype(np.int64))

    def __len__(self) -> int:
        return len(self.kind)

    def take(self, index) -> "AnswerColumns":
        """The answers at ``index`` (a bool mask or positions)."""
        return AnswerColumns(self.kind[index], self.probs[index], self.mass[index], self.n_unparseable[index],
                             self.n_refused[index], self.method[index], self.n_samples[index])
