"""Numbers typed by users — on the command line, in a CSV cell — read strictly: ASCII decimal
syntax as TOML writes a float, finite (break-it findings: Python's ``float`` also takes ``0_1``,
full-width and Arabic-Indic digits, ``inf`` and ``nan``)."""

from __future__ import annotations

import math
import re

#: a decimal number as TOML writes a float (ASCII digits only, no underscores, no inf/nan)
DECIMAL_NUMBER = re.compile(r"[+-]?(?:\d+(?:\.\d+)?|\.\d+)(?:[eE][+-]?\d+)?", re.ASCII)


def strict_float(text: str) -> float:
    """A number typed by a user (an option, a CSV cell): ASCII decimal syntax only (:data:`DECIMAL_NUMBER`, e.g. ``0.02``,
    ``-1``, ``5e-2``; not ``0_1``, full-width digits, ``inf`` or ``nan``), finite, and not a
    non-zero literal that rounds to 0 (``1e-400``).

    Raises:
        ValueError: the reason, in words (callers name the option).
    """
    t = text.strip(" \t")
    if t.lower().lstrip("+-") in ("inf", "infinity", "nan"):
        raise ValueError(f"not a finite number: {text!r}")
    if not DECIMAL_NUMBER.fullmatch(t):
        raise ValueError(f"not a decimal number: {text!r} (ASCII digits, e.g. 0.02 or 5e-2)")
    v = float(t)
    if not math.isfinite(v):
        raise ValueError(f"{text!r} is too large (not a finite number)")
    mantissa = re.split("[eE]", t)[0]
    if v == 0 and any(c in "123456789" for c in mantissa):
        raise ValueError(f"{text!r} is too small: it rounds to 0")
    return v


__all__ = ["DECIMAL_NUMBER", "strict_float"]
