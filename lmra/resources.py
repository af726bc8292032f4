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


def shadowed_input(given: str | Path, resolved: str | Path, config_path: str | Path | None, field: str) -> str | None:
    """A warning when a relative input path (``given``, a config field) was read as ``resolved``
    while a file of that name lies beside the config file: relative paths are looked up in the
    working folder, then among the shipped files (:func:`resolve_resource`), never beside the
    config — so a nightly config run by cron from another folder silently read lmra's shipped
    ``tasks.jsonl`` instead of the user's (break-it finding, s47). None otherwise."""
    if config_path is None:
        return None
    p = Path(given).expanduser()
    if p.is_absolute():
        return None
    beside = Path(config_path).expanduser().resolve().parent / p
    try:
        if not beside.is_file() or beside.resolve() == Path(resolved).resolve():
            return None
    except OSError:
        return None
    return (f"{field} = '{given}' was read as {shipped_label(str(Path(resolved).resolve()))}, not as {beside} beside "
            "the config: "
            f"relative paths are looked up in the working folder ({Path.cwd()}), then among lmra's shipped files, "
            "never beside the config file — give an absolute path in a config run from elsewhere (cron, CI: "
            "docs/config.md)")


def shipped_label(path: str) -> str:
    """An input file as lmra names it: its path, with "(shipped with lmra)" for one of lmra's own
    files (a relative path not found in the working folder falls back to them)."""
    for kind in ("prompts", "names", "examples"):
        try:
            if Path(path).is_relative_to(resource_dir(kind).resolve()):
                return f"{path} (shipped with lmra)"
        except FileNotFoundError:
            continue
    return path
