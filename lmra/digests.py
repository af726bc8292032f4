"""SHA-256 digests of a finished audit's data files, so that a file changed or damaged after
the run is an input error naming it, never a silently different result.

When an audit (or a merge of shards) finishes, ``manifest.json`` records, under ``"files"``,
the size and SHA-256 of each data file in :data:`RECORDED` that the run folder holds. Commands
that read a run back (``lmra check``, ``compare``, ``export``, ``history``, the report, ``axes``
…, through :class:`lmra.runfolder.RunFolder`) compare a file with its record before using it.
A damaged Parquet page that still decodes, a flipped bit in a number of ``per_task.csv`` or an
edited ``summary.json`` then stop the command with exit 2 and a paragraph naming the file,
instead of changing a regression verdict. The only writer that changes a finished run's file,
``lmra gate`` (``summary.json`` gets the gate results), records the new digest
(:func:`rerecord`). Run folders written before these records, and files not in them, are read
as they are.
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
            "filtered_prompts.jsonl", "classifications.jsonl", "judge_check.json", "judge_check_ratings.jsonl")


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


def verify(path: str | Path, manifest: dict, data: bytes | None = None) -> None:
    """Check a run folder's file against the digest its ``manifest`` recorded; no record (an
    older run, a file not in :data:`RECORDED`): nothing to check.

    Args:
        path: the file (its name is looked up in ``manifest["files"]``).
        manifest: the run's parsed ``manifest.json``.
        data: the file's bytes when the caller has read them already (not read again).

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
        same = size == rec.get("bytes") and (
            hashlib.sha256(data).hexdigest() if data is not None else file_digest(path)) == rec["sha256"]
    except FileNotFoundError:
        raise LmraInputError("missing, though manifest.json records it: the run folder was changed after the "
                             "run; restore the file or run the audit again (its calls are cached)",
                             file=path) from None
    if not same:
        raise LmraInputError(
            f"changed or damaged since the run finished: its {'size' if size != rec.get('bytes') else 'SHA-256'} "
            "differs from the one manifest.json recorded, so results read from it could be wrong; restore "
            "the file from a backup or run the audit again (its calls are cached)", file=path)


def verify_files(run_dir: str | Path, *names: str) -> None:
    """:func:`verify` the files ``names`` of a run folder read without
    :class:`lmra.runfolder.RunFolder` (``lmra axes RUN``); a folder without a readable
    ``manifest.json`` has no records to check against.

    Raises:
        LmraInputError: as :func:`verify`.
    """
    run_dir = Path(run_dir)
    try:
        manifest = json.loads((run_dir / "manifest.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return
    for name in names:
        verify(run_dir / name, manifest)


def rerecord(run_dir: str | Path, name: str) -> None:
    """After a command rewrote ``name`` in a finished run folder on purpose (``lmra gate`` adds
    its results to ``summary.json``), record the new digest in ``manifest.json`` (written
    atomically). A manifest without records is left as it is.

    Raises:
        LmraIOError: manifest.json could not be written.
    """
    from lmra.fileio import write_json

    run_dir = Path(run_dir)
    mpath = run_dir / "manifest.json"
    manifest = json.loads(mpath.read_text(encoding="utf-8"))
    files = manifest.get("files")
    if not isinstance(files, dict):
        return
    p = run_dir / name
    files[name] = {"bytes": p.stat().st_size, "sha256": file_digest(p)}
    write_json(mpath, manifest)
