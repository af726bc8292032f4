"""Handing a llama.cpp worker thread's outcome to the caller waiting on its future."""

from __future__ import annotations

import concurrent.futures
from typing import Any


def settle(future: concurrent.futures.Future, result: Any = None, *, error: BaseException | None = None) -> None:
    """Set ``future``'s outcome — ``error`` if given, else ``result`` — unless its caller
    cancelled it meanwhile (then the outcome is dropped)."""
    try:
        if error is not None:
            future.set_exception(error)
        else:
            future.set_result(result)
    except concurrent.futures.InvalidStateError:
        pass
