"""Error messages of a redacted run (``redact = true`` / ``--redact``).

A model call's error message is the provider's text, and providers often quote the request
in it ("backend rejected prompt: <the user's message>", an HTTP 400 body echoing the input).
A redacted run promises that no prompt text reaches its run folder, exports or warehouse, so
its errors are kept as their exception type and kind only: :func:`error_text` where an
error becomes a row's ``error`` (target responses, ratings, quality ratings, refusal labels,
classifications, the identity filter) and :func:`redacted_calls` for the first error
messages ``manifest.json`` keeps per model. The counts (``failed``, ``failed_by_kind``) are
unchanged, so a redacted run still says how many calls failed and how.
"""

from __future__ import annotations

#: what a redacted error says instead of its message
WITHHELD = "message withheld (redact = true)"


def error_text(exc: BaseException, redact: bool) -> str:
    """The text of a failed call's error as a row stores it: ``str(exc)``, or when ``redact``
    its type and kind only (``"ProviderError (timeout): message withheld (redact = true)"``)."""
    if not redact:
        return str(exc)
    kind = getattr(exc, "kind", None)
    return f"{type(exc).__name__}{f' ({kind})' if isinstance(kind, str) else ''}: {WITHHELD}"


def redacted_message(message: str) -> str:
    """One recorded error message (``"ProviderError: <text>"``, as the call counts keep them)
    with its text withheld: ``"ProviderError: message withheld (redact = true)"``."""
    head = message.split(":", 1)[0] if ":" in message else ""
    return f"{head}: {WITHHELD}" if head.isidentifier() else WITHHELD


def redacted_calls(calls: dict) -> dict:
    """``manifest.json``'s ``calls`` (:meth:`lmra.cache.CallStats.as_dict`) with every error
    message withheld (:func:`redacted_message`), in its ``errors`` and in each model's."""
    out = dict(calls)
    if "errors" in out:
        out["errors"] = [redacted_message(str(e)) for e in out["errors"]]
    for part in ("by_model", "by_role"):
        if isinstance(out.get(part), dict):
            out[part] = {k: redacted_calls(v) if isinstance(v, dict) else v for k, v in out[part].items()}
    return out


__all__ = ["WITHHELD", "error_text", "redacted_calls", "redacted_message"]
