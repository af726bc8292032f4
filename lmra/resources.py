"""Locate the files that ship with lmra: templates and prompt sets (``prompts/``),
name lists (``names/``) and example configs (``examples/``).

In a source checkout or an editable install they are the top-level folders of the
repository; a regular ``pip install .`` copies them into ``lmra/_data/`` (see
``setup.py``).
"""

from __future__ import annotations

from pathlib import Path

_PKG = Path(__file__).resolve().parent


def resource_dir(kind: str) -> Path:
    """Return the folder holding the shipped ``kind`` files.

    Args:
        kind: one of ``"prompts"``, ``"names"``, ``"examples"``.

    Returns:
        An existing directory path.

    Raises:
        FileNotFoundError: if neither the checkout folder nor the installed copy exists.
    """
    for candidate in (_PKG / "_data" / kind, _PKG.parent / kind):
        if candidate.is_dir():
            return candidate
    raise FileNotFoundError(f"lmra's shipped '{kind}/' folder was not found next to {_PKG}")


def resolve_resource(path: str | Path, kind: str) -> Path:
    """Resolve a user-given path: as given if it exists, else inside the shipped ``kind`` folder.

    ``prompts/tasks.jsonl`` and ``tasks.jsonl`` both resolve to the shipped prompt set when
    no such file exists relative to the working directory; a path starting with ``prompts/``,
    ``names/`` or ``examples/`` looks in that shipped folder.
    """
    p = Path(path).expanduser()
    if p.exists() or p.is_absolute():
        return p
    if p.parts and p.parts[0] in ("prompts", "names", "examples"):
        kind = p.parts[0]
    base = resource_dir(kind)
    parts = p.parts[1:] if p.parts and p.parts[0] == kind else p.parts
    shipped = base.joinpath(*parts) if parts else base
    return shipped if shipped.exists() else p
