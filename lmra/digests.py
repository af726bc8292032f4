"""SHA-256 digests of a finished audit's data files, so that a file changed or damaged after
the run is an input error naming it, never a silently different result.

When an audit (or a merge of shards) finishes, ``manifest.json`` records, under ``"files"``,
the size and SHA-256 of each data file in :data:`RECORDED` that the run folder holds. Commands
that read a run back (``lmra check``, ``compare``, ``export``, ``history``, the report, ``axes``
…, through :class:`lmra.runfolder.RunFolder`) compare a file with its record before using it.
A damaged Parquet page that still decodes, a flipped bit in a number of ``per_task.csv`` or an
edited ``summary.json`` then stop the command with exit 2 and a paragraph naming the file,
instead of changing a regression verdict. The only writer that changes a finished run's files,
``lmra gate --record`` / ``lmra audit --gate`` (``gates.json``, and ``summary.json`` gets the
gate results), records their new digests in steps that no interruption or concurrent reader
can catch half done (:func:`rewrite`). Run folders written before these records, and files
not in them, are read as they are. ``manifest.json`` itself (model ids, versions, call counts)
holds the records and is not covered by them (its ``status`` is checked against the covered
``summary.json``'s ``run_status`` by :func:`lmra.runfolder.load_run`): treat the run folder as a
whole as the record, and keep it where only lmra writes.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from lmra.errors import LmraInputError

#: the data files of an audit run folder whose digests the manifest records (those present)
RECORDED = ("summary.json", "config.toml", "per_task.csv", "per_domain.csv", "ratings.parquet", "ratings.jsonl",
            "responses.jsonl", "prompts.jsonl", "refusals.csv", "quality.csv", "quality_ratings.jsonl",
            "judges.csv", "placebo.csv", "placebo_ratings.jsonl", "placebo_responses.jsonl",
            "filtered_prompts.jsonl", "classifications.jsonl", "judge_check.json", "judge_check_ratings.jsonl",
            "shard.json", "gates.json")


def file_digest(path: str | Path) -> str:
    """The SHA-256 of a file's bytes as 64 hex digits (read in chunks: any size).

    Raises:
        OSError: the file cannot be read.
    """
    with open(path, "rb") as fh:
        return hashlib.file_digest(fh, "sha256").hexdigest()


def record(run_dir: str | Path) -> dict[str, dict]:
    """``{file name: {"bytes": size, "sha256": hex}}`` for each :data:`RECORDED` file the run
    folder holds (the value of ``manifest["files"]``).

    Raises:
        OSError: a file cannot be read.
    """
    run_dir = Path(run_dir)
    out = {}
    for name in RECORDED:
        p = run_dir / name
        if p.is_file():
            out[name] = {"bytes": p.stat().st_size, "sha256": file_digest(p)}
    return out


def _accepted(rec: dict) -> list[dict]:
    """The versions a record accepts: its own and, while a rewrite was under way (or was cut
    short), the one before it (:func:`rewrite`)."""
    return [rec, *[p for p in rec.get("previous") or [] if isinstance(p, dict)]]


def verify(path: str | Path, manifest: dict, data: bytes | None = None, reload=None) -> None:
    """Check a run folder's file against the digest its ``manifest`` recorded; no record (an
    older run, a file not in :data:`RECORDED`): nothing to check.

    Args:
        path: the file (its name is looked up in ``manifest["files"]``).
        manifest: the run's parsed ``manifest.json``.
        data: the file's bytes when the caller has read them already (not read again).
        reload: called once, on a difference, for the manifest as it is now (a reader that
            read the manifest just before ``lmra gate --record`` rewrote the file and its
            record); None: the difference stands.

    Raises:
        LmraInputError: the file's size or SHA-256 differs from the record (naming the file), or
            it is missing though recorded.
    """
    path = Path(path)
    rec = (manifest.get("files") or {}).get(path.name) if isinstance(manifest, dict) else None
    if not isinstance(rec, dict) or "sha256" not in rec:
        return
    try:
        size = len(data) if data is not None else path.stat().st_size
        same = any(size == r.get("bytes") for r in _accepted(rec)) and (
            hashlib.sha256(data).hexdigest() if data is not None else file_digest(path)) in \
            {r.get("sha256") for r in _accepted(rec) if r.get("bytes") == size}
    except FileNotFoundError:
        if reload is not None:
            return verify(path, reload(), data)
        raise LmraInputError("missing, though manifest.json records it: the run folder was changed after the "
                             "run; restore the file or run the audit again (its calls are cached)",
                             file=path) from None
    if not same:
        if reload is not None:
            return verify(path, reload(), data)
        raise LmraInputError(
            f"changed or damaged since the run finished: its {'size' if size != rec.get('bytes') else 'SHA-256'} "
            "differs from the one manifest.json recorded, so results read from it could be wrong; restore "
            "the file from a backup or run the audit again (its calls are cached)", file=path)


def recorded(manifest: dict, name: str) -> bool:
    """Whether ``manifest`` records a digest of the file ``name``."""
    files = manifest.get("files") if isinstance(manifest, dict) else None
    return isinstance(files, dict) and isinstance(files.get(name), dict)


def read_manifest(run_dir: str | Path) -> dict:
    """The run folder's ``manifest.json`` as it is now ({} when it cannot be read)."""
    try:
        doc = json.loads((Path(run_dir) / "manifest.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return doc if isinstance(doc, dict) else {}


def verify_files(run_dir: str | Path, *names: str) -> None:
    """:func:`verify` the files ``names`` of a run folder read without
    :class:`lmra.runfolder.RunFolder` (``lmra axes RUN``, ``gates.json``); a folder without a
    readable ``manifest.json`` has no records to check against.

    Raises:
        LmraInputError: as :func:`verify`.
    """
    run_dir = Path(run_dir)
    manifest = read_manifest(run_dir)
    for name in names:
        verify(run_dir / name, manifest, reload=lambda: read_manifest(run_dir))


def verify_recorded(run_dir: str | Path) -> None:
    """:func:`verify` every file the run folder's ``manifest.json`` records (each read whole once):
    for a command that reads few of them and still vouches for the run — ``lmra gate`` (bad-input
    break-it, s43: with a cut ``ratings.parquet`` it exited 0 while report, export, compare and
    check refused the run as damaged).

    Raises:
        LmraInputError: as :func:`verify`, for the first file that differs or is missing.
    """
    run_dir = Path(run_dir)
    manifest = read_manifest(run_dir)
    files = manifest.get("files") if isinstance(manifest, dict) else None
    for name in (n for n in RECORDED if isinstance(files, dict) and n in files):
        verify(run_dir / name, manifest, reload=lambda: read_manifest(run_dir))


def rewrite(run_dir: str | Path, contents: dict[str, bytes]) -> None:
    """Replace data files of a finished run folder on purpose (``lmra gate --record``:
    ``gates.json`` and the ``gates`` of ``summary.json``) and their records, so that no reader
    and no interruption ever sees a file its record does not accept: first ``manifest.json``
    accepts both the current and the new version of each recorded file, then each file is
    written (atomically), then the manifest keeps only the new version. A kill between two steps
    leaves a folder that reads (at worst a record that still accepts the version before). A file
    recorded for the first time is recorded once it is written. A manifest without records (an
    older run) is left as it is.

    Args:
        run_dir: the run folder.
        contents: file name → its new bytes.

    Raises:
        LmraIOError: a file could not be written (naming it).
    """
    from lmra.fileio import atomic_open, write_json

    run_dir = Path(run_dir)
    manifest = read_manifest(run_dir)
    files = manifest.get("files")
    new = {name: {"bytes": len(data), "sha256": hashlib.sha256(data).hexdigest()} for name, data in contents.items()}
    if isinstance(files, dict):
        for name, rec in new.items():
            old = files.get(name)
            if isinstance(old, dict) and "sha256" in old:
                files[name] = rec | {"previous": [{k: old.get(k) for k in ("bytes", "sha256")}]}
        write_json(run_dir / "manifest.json", manifest)
    for name, data in contents.items():
        with atomic_open(run_dir / name, "wb") as fh:
            fh.write(data)
    if isinstance(files, dict):
        files.update(new)
        write_json(run_dir / "manifest.json", manifest)
