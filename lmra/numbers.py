"""Numbers typed by users — on the command line, in a CSV cell or a data file — read strictly:
ASCII decimal syntax as TOML writes a float, finite; whole numbers in ASCII digits (break-it
findings: Python's ``float`` and ``int`` also take ``0_1``, full-width and Arabic-Indic digits
— ``--seed ٢٣`` was seed 23, ``--seed 1_0`` seed 10 — and ``float`` takes ``inf`` and ``nan``)."""

from __future__ import annotations

import math
import re

#: a decimal number as TOML writes a float (ASCII digits only, no underscores, no inf/nan)
DECIMAL_NUMBER = re.compile(r"[+-]?(?:\d+(?:\.\d+)?|\.\d+)(?:[eE][+-]?\d+)?", re.ASCII)
#: a whole number: ASCII digits with an optional sign (no underscores, no other digits, no point)
WHOLE_NUMBER = re.compile(r"[+-]?\d+", re.ASCII)
#: the most digits a typed whole number may have (a 64-bit seed has 19; Python's ``int`` gives up
#: past 4,300 with a message of its own)
MAX_DIGITS = 30


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
        raise ValueError(f"not a finite number (too large): {text!r}")
    mantissa = re.split("[eE]", t)[0]
    if v == 0 and any(c in "123456789" for c in mantissa):
        raise ValueError(f"too small: {text!r} rounds to 0")
    return v


def strict_int(text: str) -> int:
    """A whole number typed by a user (an option, a data-file field): ASCII digits with an
    optional sign (:data:`WHOLE_NUMBER`, e.g. ``20``, ``-1``, ``+3``; not ``1_0``, ``٢٣``,
    full-width digits, ``1.0`` or ``1e3``), surrounding spaces and tabs ignored, at most
    :data:`MAX_DIGITS` digits. Ranges are the caller's.

    Raises:
        ValueError: the reason, in words (callers name the option or field).
    """
    t = text.strip(" \t")
    if not WHOLE_NUMBER.fullmatch(t):
        raise ValueError(f"not a whole number: {text!r} (ASCII digits, e.g. 20)")
    if len(t.lstrip("+-")) > MAX_DIGITS:
        raise ValueError(f"{text!r} is too large (more than {MAX_DIGITS} digits)")
    return int(t)


__all__ = ["DECIMAL_NUMBER", "MAX_DIGITS", "WHOLE_NUMBER", "strict_float", "strict_int"]
