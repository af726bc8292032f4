"""Joining the run folders of a sharded audit (``lmra audit --shard I/N``, :mod:`lmra.shard`)
into one run folder: ``lmra merge SHARD_RUN...`` (docs/scale.md).

The shards' stage records (responses, refusal labels, rated pairs, quality ratings, filter
decisions, task classifications, the judge check's canary ratings) are put back in the
order the unsharded audit would have produced them (the prompt file's order, then the
placebo's seeded order) and handed to :func:`lmra.audit.finish.finish_run`, the function
that finishes every audit. So the merged run's tables, intervals (the betting interval
depends on the order of the observations), judge diagnostics and judge status are those of
the unsharded run, computed by the same code.

Nothing here calls a model. Shards are refused (exit status 2, naming the run folder and
field) when they are not finished, not shards, of different configs (seed included), of
different shard counts or modes, read different input files (prompts, names, templates),
overlapping, missing, (``selection`` mode) selected different prompts, were audited by another lmra
version, or were merged already into a finished run of the output folder (:func:`already_merged`).
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import json
import os
import socket
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from lmra.runstate import NO_PAIR_SCORED_PREFIX
from lmra.refusal_gap import UNLABELLED_PREFIX
from lmra.repeated import REPEATED_RESPONSES_PREFIX
from lmra.word_scrubs import WORD_SCRUBS_PREFIX
from lmra.audit.finish import (AUTO_MEAN_PREFIX, AUTO_MIN_MEAN_PREFIX, AXES_PARTIAL_PREFIX, CLASSIFY_UNUSABLE_PREFIX, COMMON_WORD_NAMES_PREFIX,
                               EMPTIED_BY_FILTER_PREFIX, EMPTY_RESPONSES_MARK, UNFINISHED_RESPONSES_MARK, FILTER_REMOVED_MOST_PREFIX, FILTER_SHARE_PREFIX, INVALID_OUTLIER_PREFIX,
                               INVALID_SHARE_PREFIX, TEXT_UNDER_MIN_PREFIX, TRUNCATED_RESPONSES_MARK)
from lmra.diagnostics import COMBINERS_DISAGREE_PREFIX, FLAGGED_PREFIX, ORDER_DEPENDENCE_MARK, POSITIONAL_REFUSAL_PREFIX
from lmra.errors import LmraInputError
from lmra.pairstore import parquet_columns, read_pairs
from lmra.runfolder import RunFolder, load_run
from lmra.shard import MAX_SHARDS, SHARD_FILE

#: config fields shards may set differently (where each machine writes and caches, how many calls it
#: keeps in flight); every other field, the seed included, must be the same in every shard
SHARD_PLUMBING = ("output_dir", "cache", "concurrency")
#: how bad a judge-check verdict is: the merged run takes the canary ratings of its worst shard
_VERDICT_RANK = {False: 0, True: 1}


@dataclass
class ShardRun:
    """One shard's run folder and its ``shard.json``."""

    run: RunFolder
    record: dict

    @property
    def index(self) -> int:
        return int(self.record["index"])

    @property
    def count(self) -> int:
        return int(self.record["count"])


class _Stored:
    """A stage record read back from a run folder, handed to :func:`finish_run` in place of the
    typed record (it only calls ``model_dump`` and reads attributes)."""

    def __init__(self, row: dict):
        self._row = row

    def __getattr__(self, name: str) -> Any:
        try:
            return self.__dict__["_row"][name]
        except KeyError:
            raise AttributeError(name) from None

    def model_dump(self, include: set | None = None) -> dict:
        return {k: v for k, v in self._row.items() if include is None or k in include}


class _SummedCalls:
    """``manifest.json``'s ``calls`` of the merged run: the shards' counts summed."""

    def __init__(self, dicts: list[dict]):
        self.total = _sum_dicts(dicts)
        self.total["errors"] = list(self.total.get("errors") or [])[:50]

    def as_dict(self) -> dict:
        return self.total


def _summed_costs(dicts: list[dict], summed: dict) -> dict:
    """``summed`` (:func:`_sum_dicts` of ``dicts``) with each ``cost…`` key None when any of the
    dicts has it None or lacks it — an unpriced model's cost is unknown, whichever shard comes
    first (review finding: the first shard's value was kept and later Nones skipped)."""
    for k in [k for k in summed if k.startswith("cost")]:
        if any(d.get(k) is None for d in dicts):
            summed[k] = None
    return summed


def _budget_summed(budgets: list[dict]) -> dict:
    """The merged run's ``budget``: the shards' summed (costs unknown when a shard's is, see
    :func:`_summed_costs`), ``per_model`` one row per (provider, model) — fresh-user finding: one
    row per shard and model, the console naming each unpriced model once per shard."""
    tops = [{k: v for k, v in (b or {}).items() if k != "per_model"} for b in budgets]
    groups: dict[tuple, list[dict]] = {}
    for b in budgets:
        for m in (b or {}).get("per_model") or []:
            groups.setdefault((m.get("provider"), m.get("model")), []).append(m)
    per_model = [_summed_costs(rows, _sum_dicts(rows)) for rows in groups.values()]
    return _summed_costs(tops, _sum_dicts(tops)) | {"per_model": per_model}


def _summed_served(sections: list) -> dict:
    """``served`` and ``template_tokens`` of one role's manifest section, summed over the shards'
    sections (:meth:`lmra.identity.ServedCounts.manifest_fields`); empty when no shard has them."""
    from collections import Counter

    from lmra.identity import ServedCounts

    recorded = [x for x in sections if isinstance(x, dict) and isinstance(x.get("served"), dict)]
    if not recorded:
        return {}
    total = ServedCounts()
    for sec in recorded:
        served, tokens = sec.get("served") or {}, sec.get("template_tokens") or {}
        total.responses += int(served.get("responses") or 0)
        total.model += Counter(served.get("model") or {})
        total.system_fingerprint += Counter(served.get("system_fingerprint") or {})
        total.template_tokens += Counter(tokens.get("tokens") or {})
        total.responses_with_template_tokens += int(tokens.get("responses") or 0)
    return total.manifest_fields()


class _ShardWarnings:
    """Stands for the audit's model-identity watcher: the warnings of the shards that the
    merge does not produce again itself (chat-template tokens, placebo skips …)."""

    def __init__(self, warnings: list[str]):
        self._warnings = warnings

    def warnings(self) -> list[str]:
        return list(self._warnings)


class _StoredProvider:
    """A provider as recorded in a shard's manifest (never called: the merge calls no model)."""

    def __init__(self, info: dict | None, supports_logprobs: bool):
        info = info or {}
        self.name = info.get("provider") or "recorded"
        self.model_id = info.get("model") or ""
        self.base_url = info.get("base_url")
        self.supports_logprobs = supports_logprobs

    async def aclose(self) -> None:
        return None


def _sum_dicts(dicts: list[dict]) -> dict:
    """Numbers summed key by key (recursively); lists concatenated; anything else the first value."""
    out: dict = {}
    for d in dicts:
        for k, v in (d or {}).items():
            if k not in out:
                out[k] = json.loads(json.dumps(v)) if isinstance(v, (dict, list)) else v
            elif isinstance(v, bool) or v is None:
                continue
            elif isinstance(v, (int, float)) and isinstance(out[k], (int, float)) and not isinstance(out[k], bool):
                out[k] += v
            elif isinstance(v, dict) and isinstance(out[k], dict):
                out[k] = _sum_dicts([out[k], v])
            elif isinstance(v, list) and isinstance(out[k], list):
                out[k] = out[k] + v
    return out


def _earliest(stamps: list[str | None]) -> str | None:
    """The earliest of ISO 8601 time stamps as written (shards on hosts in other time zones are
    compared as instants, not as text); None when none can be read."""
    read = []
    for t in stamps:
        try:
            when = _dt.datetime.fromisoformat(t)
        except (TypeError, ValueError):
            continue
        read.append((when if when.tzinfo else when.astimezone(), t))
    return min(read)[1] if read else None


def _flat(d: dict, prefix: str = "") -> dict:
    out = {}
    for k, v in d.items():
        if isinstance(v, dict):
            out |= _flat(v, f"{prefix}{k}.")
        else:
            out[f"{prefix}{k}"] = v
    return out


def _load_shard_run(path: str | Path) -> RunFolder:
    """A finished shard run folder: ``complete`` or ``partial`` (:func:`lmra.runfolder.load_run`),
    or ``failed`` after writing all its results (a small shard whose every pair failed: the
    merged run's status is decided over all shards).

    Raises:
        LmraInputError: a run that did not finish (running, stale, interrupted, stopped by the
            budget, or failed before its results were written).
    """
    try:
        return load_run(path)
    except LmraInputError:
        p = Path(path).expanduser()
        try:
            man = json.loads((p / "manifest.json").read_text(encoding="utf-8"))
        except (OSError, ValueError):
            man = {}
        if not (isinstance(man, dict) and man.get("status") == "failed" and man.get("finished")
                and "stop_reason" not in man and (p / "summary.json").is_file()):
            raise  # (load_run's paragraph: a manifest that is a list, null or a number included; break-it finding)
        try:
            summary = json.loads((p / "summary.json").read_text(encoding="utf-8"))
        except (OSError, ValueError):
            summary = None
        if not isinstance(summary, dict):
            raise
        return RunFolder(path=p, run_id=p.name, summary=summary,
                         manifest=man, config_text=(p / "config.toml").read_text(encoding="utf-8"))


def load_shards(paths: list[str | Path], skipped: list[tuple[Path, str]] | None = None) -> list[ShardRun]:
    """Read and check the shard run folders of one sharded audit, in shard order.

    A folder of a shard that did not finish (killed, interrupted) is skipped when a finished
    folder of the same shard ``I/N`` is also given (the shard was re-run: ``lmra merge
    reports/*-shard*`` picks up both); it is appended to ``skipped`` as (folder, shard label).

    Raises:
        LmraInputError: a folder that is not a finished run (:func:`lmra.runfolder.load_run`),
            not a shard (no ``shard.json``), of another config than the first (naming the
            first field that differs), another shard count or mode, other input files
            (``inputs_sha256``), another audit design (``manifest.json`` ``design`` digests), a
            damaged ``shard.json``, a shard given twice, missing shards (naming which I), shards
            whose selections differ, or shards audited by another lmra version (``versions.lmra``)
            (exit status 2).
    """
    if not paths:
        raise LmraInputError("name the shard run folders to merge (lmra merge SHARD_RUN...)", field="SHARD_RUN")
    shards: list[ShardRun] = []
    unfinished: list[tuple[Path, str | None, LmraInputError]] = []
    for p in paths:
        try:
            run = _load_shard_run(p)
        except LmraInputError as exc:
            try:  # the shard a killed run was auditing (shard.json is written when it starts)
                label = json.loads((Path(p).expanduser() / SHARD_FILE).read_text(encoding="utf-8")).get("shard")
            except (OSError, ValueError, AttributeError):
                label = None
            unfinished.append((Path(p), label if isinstance(label, str) else None, exc))
            continue
        f = run.path / SHARD_FILE
        if not f.is_file():
            raise LmraInputError(f"is not a shard of a sharded audit (it has no {SHARD_FILE}: it was not run with "
                                 "'lmra audit --shard I/N')", file=run.path, field="shard")
        run.verified(SHARD_FILE)  # changed since the shard finished: named (lmra.digests)
        try:
            record = json.loads(f.read_text(encoding="utf-8"))
        except (json.JSONDecodeError, UnicodeDecodeError) as exc:
            raise LmraInputError(f"not valid JSON ({exc})", file=f) from None
        if not isinstance(record, dict) or "prompt_positions" not in record:
            raise LmraInputError("is not the record of a finished shard (no 'prompt_positions')", file=f,
                                 field="prompt_positions")
        positions = record["prompt_positions"]
        if not isinstance(positions, dict) or not all(type(v) is int and v >= 0 for v in positions.values()):
            raise LmraInputError("'prompt_positions' must map each prompt id to its line position (a whole number "
                                 "≥ 0): the file was edited or damaged after the shard finished", file=f,
                                 field="prompt_positions")
        for key in ("count", "index"):
            value = record.get(key)
            if type(value) is not int or not 1 <= value <= (record["count"] if key == "index" else MAX_SHARDS):
                raise LmraInputError(f"'{key}' must be a whole number (1 ≤ index ≤ count), not {value!r}",
                                     file=f, field=key)
        record["shard"] = f"{record['index']}/{record['count']}"  # the label, as index and count say
        shards.append(ShardRun(run, record))
    done = {s.record.get("shard") for s in shards}
    for p, label, exc in unfinished:
        if label is None:  # not a shard's folder (or no folder at all): the reason as load_run gives it
            raise exc
        if label not in done:
            from lmra.batch import stopped_in_batch
            from lmra.runfolder import RERUN_ADVICE, batch_resume_advice

            reason = exc.reason.replace(f"; {RERUN_ADVICE}", "").replace(f"; {batch_resume_advice(p)}", "")  # (below)

            how = (f"resume it with 'lmra batch resume {p}' (its batch jobs are at the provider: re-running the audit "
                   "would submit and pay for their calls again), then give the merge that folder"
                   if stopped_in_batch(p) else  # (break-it round 3: the re-run advice for a batch shard)
                   f"re-run it ('lmra audit --shard {label}' with the same config) and give the merge that folder")
            raise LmraInputError(f"{reason} — a shard must finish before the merge: wait for it, or {how}",
                                 file=exc.file, line=exc.line, field=exc.field) from None
        if skipped is not None:
            skipped.append((p, label))
    first = shards[0]
    measured = lambda run: _flat({k: v for k, v in run.config.items() if k not in SHARD_PLUMBING})  # noqa: E731
    base_cfg = measured(first.run)
    for s in shards[1:]:
        other = measured(s.run)
        if other != base_cfg:
            diff = sorted(k for k in base_cfg.keys() | other.keys() if base_cfg.get(k) != other.get(k))
            what = diff[0]
            raise LmraInputError(f"its config differs from {first.run.path}'s in '{what}' "
                                 f"({other.get(what)!r} vs {base_cfg.get(what)!r}): shards of one audit share one "
                                 "config (seed included)", file=s.run.path / "config.toml", field=what)
        for key in ("count", "mode"):
            if s.record.get(key) != first.record.get(key):
                raise LmraInputError(f"shard {key} {s.record.get(key)!r} differs from {first.run.path}'s "
                                     f"{first.record.get(key)!r}", file=s.run.path / SHARD_FILE, field=key)
        mine_v, first_v = _lmra_version(s.run), _lmra_version(first.run)
        if mine_v != first_v and mine_v is not None and first_v is not None:
            # break-it finding: shards of two lmra versions (a rolling upgrade between array jobs) were
            # merged into one night that claimed the first shard's version
            raise LmraInputError(f"it was audited by lmra {mine_v}, {first.run.path} by lmra {first_v}: shards of one "
                                 "audit must run one lmra version (its parsing and scoring of the answers differ "
                                 "between versions); re-run the shards on one version, from the same cache",
                                 file=s.run.path / "manifest.json", field="versions.lmra")
        theirs, ours = s.record.get("inputs_sha256"), first.record.get("inputs_sha256")
        if theirs != ours and theirs is not None and ours is not None:  # (shards of lmra before it: unchecked)
            raise LmraInputError(f"it read other input files than {first.run.path} (the prompt file, the name "
                                 "lists or the question templates differ — e.g. a prompt file refreshed between "
                                 "the shards' runs): shards of one audit read the same files",
                                 file=s.run.path / SHARD_FILE, field="inputs_sha256")
        mine_d, first_d = s.run.manifest.get("design") or {}, first.run.manifest.get("design") or {}
        changed = sorted(k for k in mine_d.keys() & first_d.keys() if mine_d[k] != first_d[k])
        if changed:  # the audit design as the check compares it — e.g. the names drawn another way by a
            # development checkout of the same version number (known gap, s43: only versions were compared)
            raise LmraInputError(f"its audit design differs from {first.run.path}'s in '{changed[0]}' (manifest.json "
                                 "design digests; the check of the merged night would compare another design): "
                                 "shards of one audit share one design — re-run them on one lmra and one set of "
                                 "files", file=s.run.path / "manifest.json", field=f"design.{changed[0]}")
    seen: dict[int, ShardRun] = {}
    for s in shards:
        if s.index in seen:
            raise LmraInputError(f"shard {s.record['shard']} is given twice: {seen[s.index].run.path} and "
                                 f"{s.run.path} (overlapping shards; two finished runs of one shard — another "
                                 "night's, or a re-run — are not told apart: give each night's shards their own "
                                 "--output-dir, docs/scale.md)", file=s.run.path / SHARD_FILE, field="shard")
        seen[s.index] = s
    n = first.count
    missing = [i for i in range(1, n + 1) if i not in seen]
    if missing:
        raise LmraInputError(f"shard{'s' * (len(missing) > 1)} {', '.join(f'{i}/{n}' for i in missing)} "
                             f"{'are' if len(missing) > 1 else 'is'} missing (got "
                             f"{', '.join(s.record['shard'] for s in sorted(shards, key=lambda s: s.index))})",
                             field="SHARD_RUN")
    shards = [seen[i] for i in range(1, n + 1)]
    if first.record.get("mode") == "selection":
        for s in shards[1:]:
            if s.record.get("selection_sha256") != first.record.get("selection_sha256"):
                raise LmraInputError(f"its selection of prompts differs from {first.run.path}'s (the identity "
                                     "filter's or task classifier's answers differed between the shards; give the "
                                     "shards one shared cache, or audit every prompt with prompts_per_task = 0)",
                                     file=s.run.path / SHARD_FILE, field="selection_sha256")
    return shards


def _lmra_version(run: RunFolder) -> str | None:
    """The lmra version a run folder's ``manifest.json`` records, None when it records none."""
    v = (run.manifest.get("versions") or {}).get("lmra")
    return v if isinstance(v, str) else None


def version_differences(shards: list[ShardRun]) -> str:
    """The package versions (other than lmra's, which :func:`load_shards` refuses to mix) on which
    the shards' ``manifest.json`` ``versions`` differ, as ``"numpy 1.26.4 (shard 1/2), 2.0.0 (shard
    2/2)"`` pieces joined by ``"; "``; empty when every shard ran the same versions."""
    per = [(s.record["shard"], s.run.manifest.get("versions") or {}) for s in shards]
    keys = sorted({k for _, v in per for k in v if k != "lmra"})
    out = []
    for k in keys:
        values = [(label, v.get(k)) for label, v in per]
        if len({str(x) for _, x in values}) > 1:
            out.append(f"{k} " + ", ".join(f"{'not recorded' if x is None else x} (shard {label})"
                                           for label, x in values))
    return "; ".join(out)


#: the warning of shards that ran other package versions (lmra's own is refused: :func:`load_shards`)
VERSIONS_DIFFER_PREFIX = "the shards ran different package versions"
#: the warning of a merge run by another lmra than the one that audited the shards
MERGE_VERSION_PREFIX = "this merge runs another lmra than the shards"


#: the lock file of :func:`merge_lock` in the output folder (``{digest}``: of the shard run ids)
MERGE_LOCK = ".merge-{digest}.lock"


@contextlib.contextmanager
def merge_lock(out_dir: Path, shards: list[ShardRun]):
    """Hold an exclusive lock (``flock``) on ``<out_dir>/.merge-<digest>.lock`` — one per set of
    shard runs — while these shards are merged, so that a second merge of them started meanwhile
    is refused instead of passing :func:`already_merged` before the first has finished. The file
    stays (as ``run.lock``: only a held lock means "merging").

    Raises:
        LmraIOError: another process holds it (an ``lmra merge`` of the same shards still
            running), or it cannot be created (naming it)."""
    import hashlib

    from lmra.fileio import held_lock

    digest = hashlib.sha256("\n".join(sorted(s.run.run_id for s in shards)).encode()).hexdigest()[:16]
    busy = (f"another 'lmra merge' of these {len(shards)} shard runs into {out_dir} is running: "
            "wait for it to end — its run is the night (a second merge would make a second copy "
            "of it, which the regression check would take for another night); if it failed or "
            "was stopped, run this merge again")
    with held_lock(Path(out_dir) / MERGE_LOCK.format(digest=digest), busy, "the merge's") as path:
        yield path


def already_merged(shards: list[ShardRun], out_dir: Path) -> Path | None:
    """A finished (complete or partial) merged run folder in ``out_dir`` whose ``manifest.json``
    lists exactly these shard runs, or None."""
    from lmra.runstate import COMPLETE, PARTIAL

    ours = {s.run.run_id for s in shards}
    for man_file in sorted(Path(out_dir).glob("*/manifest.json")):
        try:
            man = json.loads(man_file.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue
        listed = man.get("shards") if isinstance(man, dict) else None
        if (isinstance(listed, list) and man.get("status") in (COMPLETE, PARTIAL)
                and {x.get("run_id") for x in listed if isinstance(x, dict)} == ours):
            return man_file.parent
    return None


def _left_out(shards: list, field: str, *, summed: bool) -> int | None:
    """A count of prompts the selection left out (``summary.json`` ``field``) of the merged run:
    the shards' sum (``summed``) or the first shard's; None when a shard did not record it
    (written before the count existed)."""
    values = [s.run.summary.get(field) for s in shards]
    if any(v is None for v in values):
        return None
    return sum(values) if summed else values[0]


def _filter_counts(shards: list, *, summed: bool, key: str = "filter_unlabelled") -> list[dict]:
    """The merged run's per-task filter counts (``key``: ``filter_unlabelled``, the prompts the
    identity filter's LMRA was asked about and could not label, or ``filter_removed``, every
    removal by reason): the shards' per-task sums of every ``n_*`` count (``summed``: each
    shard filtered its own prompts) or the first shard's (each filtered the whole selection)."""
    if not summed:
        return list(shards[0].run.summary.get(key) or [])
    total: dict[tuple, dict] = {}
    for s in shards:
        for row in s.run.summary.get(key) or []:
            t = total.setdefault((row.get("domain"), row["task"]), {"domain": row.get("domain"), "task": row["task"]})
            for field, value in row.items():
                if field.startswith("n_"):
                    t[field] = t.get(field, 0) + int(value or 0)
    return list(total.values())


def _worst_judge_check(shards: list[ShardRun]) -> tuple[dict | None, pd.DataFrame]:
    """The judge-check verdict and canary ratings of the shard whose verdict is worst (failed
    before passed; the lowest shard among equals)."""
    best: tuple | None = None
    for s in shards:
        f = s.run.path / "judge_check.json"
        if not f.is_file():
            continue
        s.run.verified(f.name)
        verdict = json.loads(f.read_text(encoding="utf-8"))
        key = (_VERDICT_RANK.get(bool(verdict.get("passed")), 1), s.index)
        if best is None or key < best[0]:
            best = (key, verdict, s)
    if best is None:
        return None, pd.DataFrame()
    return best[1], pd.DataFrame(best[2].run.jsonl("judge_check_ratings.jsonl"))


def merge_shards(paths: list[str | Path], *, name: str | None = None, out_dir: str | Path | None = None,
                 skipped: list[tuple[Path, str]] | None = None):
    """Merge the run folders of a sharded audit into one new run folder.

    Args:
        paths: the N shard run folders (any order).
        name: the merged run's name (default: the shards' config name).
        out_dir: where the merged run folder is created (default: the config's ``output_dir``).
        skipped: receives the unfinished folders of re-run shards (:func:`load_shards`).

    Returns:
        The merged run's :class:`lmra.audit.finish.AuditResult` (its folder is
        ``<out_dir>/<timestamp>-<name>``).

    Raises:
        LmraInputError: shards that do not make one audit (:func:`load_shards`), or shards merged
            already into a finished run of the output folder (:func:`already_merged`).
        KeyboardInterrupt, LmraIOError …: re-raised after the merged folder's manifest records the
            stop (``interrupted`` / ``failed``).
        LmraIOError: a file of the merged run could not be written, or another merge of these
            shards into the same folder is running (:func:`merge_lock`).
    """
    from lmra.config import parse_config

    shards = load_shards(paths, skipped)
    first = shards[0]
    data = dict(first.run.config)
    if name is not None:
        data["name"] = name
    if out_dir is not None:
        data["output_dir"] = str(out_dir)
    try:
        cfg = parse_config(data, source=first.run.path / "config.toml")
    except LmraInputError as exc:
        if name is not None and exc.field == "name":  # the --name option, not the shards' config
            raise LmraInputError(f"'{name}': {exc.reason}", field="--name") from None
        raise
    # one merge of these shards at a time (break-it finding, s35: two started together both passed the
    # check below, and the night was twice in the history and the warehouse)
    with merge_lock(Path(cfg.output_dir), shards):
        return _merge(shards, cfg, first)


def _warehouse_tables_missing(run_dir: Path) -> list[str]:
    """The warehouse tables (next to ``run_dir``) a merged run lacks of those the lmra that merged
    it lands; [] when all landed or its folder cannot be read (then nothing is said of them).
    ``per_domain`` is landed since lmra 0.3.0: a night merged before lacks it by design (round-2
    break-it, s44: its retry was told the merge "may have stopped before its last step")."""
    from lmra.warehouse import tables_missing

    try:
        run = load_run(run_dir)
        missing = tables_missing(run)
    except (LmraInputError, OSError):
        return []
    if _version_tuple(_lmra_version(run)) < (0, 3, 0):
        missing = [t for t in missing if t != "per_domain"]
    return missing


def _version_tuple(version: str | None) -> tuple[int, ...]:
    """``"0.3.0"`` → (0, 3, 0); an unknown or unreadable version → () (older than any)."""
    import re

    m = re.match(r"(\d+)\.(\d+)(?:\.(\d+))?", version or "")
    return tuple(int(g or 0) for g in m.groups()) if m else ()


def _merge(shards: list[ShardRun], cfg, first: ShardRun):
    """The rest of :func:`merge_shards`, under its :func:`merge_lock`."""
    from lmra.audit import Audit, Inputs
    from lmra.config import dump_config
    from lmra.fileio import write_text
    from lmra.generate import derive_seed
    from lmra.judge.filter import FilterDecision
    from lmra.judge.taxonomy import Classification
    from lmra.runstate import RUNNING

    mode = first.record.get("mode")
    twin = already_merged(shards, Path(cfg.output_dir))
    if twin is not None:
        # break-it finding: a merge killed after it had finished, retried by a job runner, wrote a second
        # copy of the night, which 'lmra check latest --baseline last' then compared with the first
        # its merge may have stopped before the steps after the folder (break-it finding, s35: a merge killed
        # then left the night out of the warehouse and its gates unevaluated, and the retry said only this)
        missing = _warehouse_tables_missing(twin)
        steps = (f" — it has no report.html, so the merge that wrote it may have stopped before its last steps: "
                 f"'lmra report {twin}' writes the report, 'lmra gate {twin}' and 'lmra check {twin} --baseline "
                 f"pinned' evaluate it, 'lmra warehouse add {twin}' adds it to the warehouse"
                 if not (twin / "report.html").is_file() else
                 # (fault break-it, s37: a merge killed between its report and its warehouse step left the night
                 # out of the warehouse, and the retry said nothing of it)
                 f" — its {' and '.join(missing)} table{'s' * (len(missing) != 1)} {'are' if len(missing) != 1 else 'is'} "
                 f"not in the warehouse, so the merge that wrote it may have stopped before its last step: 'lmra "
                 f"warehouse add {twin}' adds it" if missing else "")
        raise LmraInputError(f"these shards were merged already, into {twin} (its manifest.json lists the same "
                             f"{len(shards)} shard runs): a second merge would make a second copy of the same night, "
                             "which the regression check would take for another night. Use that run (its report: "
                             f"'lmra report {twin}'){steps}; to merge these shards anew, give another --out-dir",
                             field="SHARD_RUN")

    position: dict[str, int] = {}
    for s in shards:
        position |= {str(k): int(v) for k, v in (s.record.get("prompt_positions") or {}).items()}
    last = len(position) + 1

    def pos(pid: str) -> int:
        return position.get(pid, last)

    # -- the audited prompts, responses, pairs and quality ratings, in the prompt file's order
    prompt_rows: list[dict] = []
    responses: list[dict] = []
    placebo_responses: list[dict] = []
    ratings: list[dict] = []
    placebo_ratings: list[dict] = []
    quality: list[dict] = []
    # the per-pair columns: a shard's ratings.parquet lacks a column its pairs never filled (a
    # shard whose every pair failed has no order1 …); every record gets every column, in the order
    # of the widest shard, so the merged table's columns are the unsharded run's
    # a large night (issue 15's spool threshold) is merged through spools, one shard's records in memory at a
    # time (known since s45: the merge held every shard's pairs, ~10 KB a pair); else in memory, as before
    spooled = _spooled(shards)
    rating_columns: list[str] = list(max((_pair_columns(s, spooled) for s in shards), key=len, default=[]))
    real_pos: list = []  # spooled: each shard's pairs' and responses' places in the prompt file (for their order)
    response_pos: list = []
    judge2_logprobs_seen = False
    for s in shards:
        texts = {r["id"]: r for r in s.run.jsonl("prompts.jsonl")}
        rdf = (read_pairs(s.run.pairs_path, ["prompt_id", "domain", "task", "judge2_method"]) if spooled
               else s.run.ratings)
        audited = rdf[["prompt_id", "domain", "task"]].drop_duplicates("prompt_id") if len(rdf) else rdf
        for pid, dom, task in audited.itertuples(index=False) if len(rdf) else ():  # each prompt has a pair
            prompt_rows.append(texts.get(pid) or {"id": pid, "domain": dom, "task": task, "text": None})
        if spooled:
            real_pos.append(np.array([pos(str(p)) for p in rdf["prompt_id"]] if len(rdf) else [], dtype=np.int64))
            response_pos.append(np.array([pos(str(r["prompt_id"])) for r in s.run.jsonl("responses.jsonl")],
                                         dtype=np.int64))
            judge2_logprobs_seen |= bool("judge2_method" in rdf and (rdf["judge2_method"] == "logprobs").any())
        else:
            responses += s.run.jsonl("responses.jsonl")
            ratings += rdf.to_dict(orient="records")
        rating_columns += [c for c in _pair_columns(s, spooled) if c not in rating_columns]
        placebo_responses += s.run.jsonl("placebo_responses.jsonl")
        placebo_ratings += s.run.jsonl("placebo_ratings.jsonl")
        quality += s.run.jsonl("quality_ratings.jsonl")
    n_selected = int(first.record.get("n_selected") or 0)
    if mode == "selection" and len(prompt_rows) > n_selected:
        raise LmraInputError(f"the shards audited {len(prompt_rows)} prompts, more than the {n_selected} the "
                             "selection kept", file=first.run.path / SHARD_FILE, field="n_selected")

    def by_prompt(rows: list[dict], key: str = "prompt_id") -> list[dict]:
        return sorted(rows, key=lambda r: pos(str(r[key])))  # stable: a shard's own order within a prompt

    prompt_rows = by_prompt(prompt_rows, "id")
    summary0 = first.run.summary
    placebo_order = {row["placebo"]: i for i, row in enumerate(summary0.get("placebo") or [])}

    def by_placebo(rows: list[dict]) -> list[dict]:
        return sorted(rows, key=lambda r: (placebo_order.get(r["comparison"], len(placebo_order)),
                                           derive_seed(cfg.seed, "placebo", r["prompt_id"]), pos(r["prompt_id"])))

    responses = by_prompt(responses) + by_placebo(placebo_responses)
    ratings = [{c: r.get(c) for c in rating_columns} | r for r in ratings]
    ratings = by_prompt(ratings) + by_placebo(placebo_ratings)
    quality = by_prompt(quality)

    # -- responses as stage records, and their refusal labels by position
    refusals: dict[int, tuple] = {}
    stored_responses = []
    for i, row in enumerate(responses):
        label, stored = _stored_response(row)
        if label is not None:
            refusals[i] = label
        stored_responses.append(stored)

    # -- filter decisions and task classifications: each shard holds its own prompts'; in
    # 'selection' mode shard.json lists the unsharded order of the removals
    def rows_of(name: str) -> list[dict]:
        return [r for s in shards for r in s.run.jsonl(name)]

    filtered = rows_of("filtered_prompts.jsonl")
    order = {pid: i for i, pid in enumerate(first.record.get("filter_order") or [])} if mode == "selection" else {}
    filtered = sorted(filtered, key=lambda r: (order.get(r["prompt_id"], len(order)), r.get("reason") != "lexical",
                                               pos(r["prompt_id"])))
    texts = {r["prompt_id"]: r.get("text") for r in filtered}
    fields = set(FilterDecision.model_fields)
    decisions = [FilterDecision(**{k: v for k, v in r.items() if k in fields and k != "lexical"},
                                lexical=r.get("lexical") or []) for r in filtered]
    class_rows = sorted(rows_of("classifications.jsonl"), key=lambda r: pos(r["prompt_id"]))
    cfields = set(Classification.model_fields)
    classifications = {r["prompt_id"]: Classification(**{k: v for k, v in r.items() if k in cfields})
                       for r in class_rows}
    texts |= {r["prompt_id"]: r.get("text") for r in class_rows}
    texts |= {r["id"]: r.get("text") for r in prompt_rows}

    # -- the prompt file as the audit saw it: its size and the texts finish_run quotes
    # (n_prompts_in_file counts the repeats, which finish_run adds back from audit.prompts_repeated)
    n_in_file = int(summary0.get("n_prompts_in_file") or len(texts)) - int(summary0.get("n_prompts_repeated") or 0)
    seen_prompts = [_Stored({"id": k, "text": v}) for k, v in texts.items()]
    seen_prompts += [_Stored({"id": None, "text": None})] * max(0, n_in_file - len(seen_prompts))
    placebo = {}
    for row in summary0.get("placebo") or []:
        real = cfg.group(row["comparison"].split(" vs ", 1)[0])
        placebo[row["placebo"]] = (row["comparison"], real.model_copy(update={"name": row["group_a"]}),
                                   real.model_copy(update={"name": row["group_b"]}))
    inputs = Inputs(prompts=seen_prompts, group_names={}, all_names=[], styles={}, templates={}, taxonomy=None,
                    placebo=placebo)

    # -- a finishing audit standing for the N shards
    m0 = first.run.manifest
    # whether the second LMRA gives log-probabilities: recorded by the shards (since 2026-12-04),
    # else read from its pairs — any pair read from them in both orders (review finding: the first
    # pair's method, which is "sampled" when one of its orders came without them, switched the
    # merged run's combiner from the shards' min to mean)
    judge2_logprobs = (m0.get("judge2") or {}).get("supports_logprobs")
    if not isinstance(judge2_logprobs, bool):
        judge2_logprobs = judge2_logprobs_seen or any(r.get("judge2_method") == "logprobs" for r in ratings)
    audit = Audit(cfg, target=_StoredProvider(m0.get("target"), False),
                  judge=_StoredProvider(m0.get("judge"), bool((m0.get("judge") or {}).get("supports_logprobs"))),
                  judge2=_StoredProvider(m0.get("judge2"), judge2_logprobs)
                  if cfg.judge2 is not None else None,
                  allow_unvalidated_judge=_waived_by_flag(shards)[0])
    audit.placebo_skipped = []
    # prompts left out by the selection: 'selection' mode shards select from the whole file
    # alike (then take their share): the first one's counts; 'prompts' mode shards select from
    # their own prompts only: the sum
    audit.prompts_left_out = {key: _left_out(shards, field, summed=mode == "prompts")
                              for key, field in (("not_selected", "n_prompts_not_selected"),
                                                 ("over_limit", "n_prompts_over_limit"))}
    audit.filter_unlabelled = _filter_counts(shards, summed=mode == "prompts")
    # every shard reads the whole prompt file, so each counted all its repeats: the first's (round-2 break-it, s45)
    audit.prompts_repeated = _left_out(shards, "n_prompts_repeated", summed=False)
    audit.filter_removed = _filter_counts(shards, summed=mode == "prompts", key="filter_removed")
    audit.names_unmatched = summary0.get("names_unmatched") or {}  # the same name list in every shard
    audit.names_common_words = summary0.get("names_common_words") or []
    audit.balanced_draws = summary0.get("balanced_draws") or {}  # (the same names and groups in every shard)
    # a redacted run's responses keep their lengths only (rebuilt below as "x" × length): the merge cannot count
    # repeated texts, so it takes the shards' own findings (lmra.repeated; break-it round 2, s40: answers of equal
    # length were counted as one text)
    audit.repeated_from_shards = [s.run.summary.get("repeated_response") for s in shards] if cfg.redact else None
    # … and the names its shards scrubbed as everyday words (lmra.word_scrubs), which it cannot count again
    audit.word_scrubs_from_shards = ([r for s in shards for r in s.run.summary.get("names_scrubbed_as_words") or []]
                                     if cfg.redact else None)
    audit.stats = _SummedCalls([s.run.manifest.get("calls") or {} for s in shards])
    audit.judge_verdict, audit.canary_rows = _worst_judge_check(shards)
    own = set(audit.run_combiner()[1])
    warnings: list[str] = []
    for s in shards:
        warnings += [w for w in s.run.summary.get("warnings") or []
                     if w not in own and w not in warnings
                     # judged / counted again
                     and not w.startswith((FLAGGED_PREFIX, NO_PAIR_SCORED_PREFIX, INVALID_SHARE_PREFIX, FILTER_SHARE_PREFIX,
                                           TEXT_UNDER_MIN_PREFIX, COMMON_WORD_NAMES_PREFIX, EMPTIED_BY_FILTER_PREFIX,
                                           INVALID_OUTLIER_PREFIX, AUTO_MEAN_PREFIX, AUTO_MIN_MEAN_PREFIX,
                                           FILTER_REMOVED_MOST_PREFIX))
                     and EMPTY_RESPONSES_MARK not in w and TRUNCATED_RESPONSES_MARK not in w
                     and UNFINISHED_RESPONSES_MARK not in w
                     and ORDER_DEPENDENCE_MARK not in w and not w.startswith(COMBINERS_DISAGREE_PREFIX)
                     and not w.startswith((VERSIONS_DIFFER_PREFIX, MERGE_VERSION_PREFIX, POSITIONAL_REFUSAL_PREFIX,
                                           AXES_PARTIAL_PREFIX, CLASSIFY_UNUSABLE_PREFIX, REPEATED_RESPONSES_PREFIX,
                                           UNLABELLED_PREFIX, WORD_SCRUBS_PREFIX))]
    # (axes are not merged: lmra axes --run)
    from lmra.runfolder import package_versions

    mine = package_versions().get("lmra")
    if _lmra_version(first.run) not in (None, mine):  # the statistics are this process's (break-it round 2)
        warnings.append(f"{MERGE_VERSION_PREFIX}: the shards were audited by lmra {_lmra_version(first.run)}, this merge "
                        f"runs lmra {mine}, which computed the merged statistics (manifest.json: versions is the "
                        "merge's, shards[].versions the shards')")
    waived, gated = _waived_by_flag(shards)[1:]
    if waived and gated:  # (break-it, s46: one shard re-run by hand with the flag waived the whole night: exit 0)
        warnings.append(f"{JUDGE_WAIVER_MIXED_PREFIX}: shard{'s' * (len(waived) != 1)} {', '.join(waived)} "
                        f"{'was' if len(waived) == 1 else 'were'} run with --allow-unvalidated-judge, but the judge "
                        f"of shard{'s' * (len(gated) != 1)} {', '.join(gated)} failed validation without it: the "
                        "merged night is gated, as the unsharded audit would be")
    differ = version_differences(shards)
    if differ:
        warnings.append(f"{VERSIONS_DIFFER_PREFIX}: {differ}. Each shard's answers were parsed with its own "
                        "versions; the merge computed the statistics with this process's (manifest.json: shards[].versions)")
    audit.identity = _ShardWarnings(warnings)
    audit.claim_dir()
    try:
        write_text(audit.run_dir / "config.toml", dump_config(cfg))
        manifest = {k: v for k, v in m0.items() if k not in ("calls", "budget", "concurrency", "stop_reason")}
        for role in ("target", "judge", "judge2"):  # the shards' served-model records, summed (break-it
            if isinstance(manifest.get(role), dict):  # finding: the merged run kept shard 1's counts)
                manifest[role] = manifest[role] | _summed_served([s.run.manifest.get(role) for s in shards])
        budgets = [s.run.manifest.get("budget") or {} for s in shards]
        memos = [s.run.manifest.get("pair_memo") for s in shards]
        if any(memos):  # summed like the calls: each shard replayed its own pairs
            manifest["pair_memo"] = {
                "enabled": any(bool(m and m.get("enabled")) for m in memos),
                "hits": sum(int((m or {}).get("hits") or 0) for m in memos),
                "stored": sum(int((m or {}).get("stored") or 0) for m in memos),
                "bypassed": next((m.get("bypassed") for m in memos if m and m.get("bypassed")), None)}
        manifest |= {
            "status": RUNNING, "pid": os.getpid(), "host": socket.gethostname(),  # the merge's; each shard's below
            "versions": package_versions(),  # the merge computed the statistics; each shard's under shards[]
            "started": _earliest([s.run.started for s in shards]) or m0.get("started"),
            "merged": _dt.datetime.now().astimezone().isoformat(timespec="seconds"),
            "budget": _budget_summed(budgets),
            # each shard's bounds (of the prompts it holds) and concurrency: the merge makes no call
            # (fresh-user finding: the merged manifest kept shard 1's planned calls, and no concurrency)
            "planned_calls": {"shards": [{"shard": s.record["shard"], **(s.run.manifest.get("planned_calls") or {})}
                                         for s in shards]},
            "concurrency": {"shards": [{"shard": s.record["shard"], **(s.run.manifest.get("concurrency") or {})}
                                       for s in shards]},
            "shards": [{"shard": s.record["shard"], "run_id": s.run.run_id, "path": str(s.run.path.resolve()),
                        "host": s.run.manifest.get("host"), "started": s.run.started,
                        "finished": s.run.manifest.get("finished"), "status": s.run.status,
                        "judge_status": s.run.judge_status, "calls": s.run.manifest.get("calls"),
                        "versions": s.run.manifest.get("versions")}
                       for s in shards],
            "shard_mode": mode,
        }
        audit._write_json("manifest.json", manifest)
        prompts = [_Stored(r) for r in prompt_rows]
        if spooled:  # the pairs and responses, one shard at a time, into spools in the run folder
            ratings = _spool_pairs(audit, shards, real_pos, rating_columns, ratings)
            stored_responses = _spool_responses(audit, shards, response_pos, stored_responses, refusals,
                                                inputs.placebo)
        return audit._finish(inputs, prompts, classifications, decisions, stored_responses, refusals, ratings,
                             quality, manifest, None)
    except BaseException as exc:
        _record_stop(audit, manifest if "manifest" in locals() else None, exc)
        raise
    finally:
        audit.release_dir()


#: the start of the merged run's warning that its shards' judge-check waivers differ (:func:`_waived_by_flag`)
JUDGE_WAIVER_MIXED_PREFIX = "judge-check waiver of some shards only"


def _waived_by_flag(shards: list[ShardRun]) -> tuple[bool, list[str], list[str]]:
    """Whether the merged night's judge failure is waived as ``--allow-unvalidated-judge``: some
    shard was run with that flag and no shard's judge failed validation without a waiver (gated,
    its exit status 5) — the flag of one shard, re-run by hand, does not waive the others' gate
    (break-it finding, s46: the merge exited 0 where the unsharded audit exits 5). Returns
    ``(waived, shards run with the flag, shards whose failure was gated)``, shards as "2/3"."""
    flagged, gated = [], []
    for s in shards:
        js = s.run.summary.get("judge_status") or {}
        if js.get("waiver") == "--allow-unvalidated-judge":
            flagged.append(str(s.record.get("shard")))
        elif js.get("status") == "failed" and js.get("gated", True):
            gated.append(str(s.record.get("shard")))
    return bool(flagged) and not gated, flagged, gated


def _spooled(shards: list[ShardRun]) -> bool:
    """Whether the merge spools the shards' pairs and responses: the shards hold, together, at
    least :data:`lmra.audit.SPOOL_MIN_PAIRS` pairs (as an audit of that size spools its own), each
    in a ``ratings.parquet`` (counted from its footer)."""
    import pyarrow.parquet as pq

    from lmra import audit as audit_module
    from lmra.pairstore import reading

    paths = [s.run.pairs_path for s in shards]
    if not paths or any(p is None or Path(p).suffix != ".parquet" for p in paths):
        return False
    n = 0
    for p in paths:
        with reading(p):
            n += pq.ParquetFile(p).metadata.num_rows
    return n >= audit_module.SPOOL_MIN_PAIRS


def _pair_columns(shard: ShardRun, spooled: bool) -> list[str]:
    """A shard's per-pair columns (its ``ratings.parquet``'s footer when the merge is spooled,
    which reads no pair)."""
    return parquet_columns(shard.run.pairs_path) if spooled else list(shard.run.ratings.columns)


def _stored_response(row: dict) -> tuple[tuple | None, _Stored]:
    """A shard's ``responses.jsonl`` line as a stage record for :func:`finish_run`, and its refusal
    label ``(p, refused)`` (None: not labelled). A redacted line keeps only the text's length:
    finish_run writes it again (and counts a length-0 text as an empty response)."""
    row = dict(row)
    p_ref, refused = row.pop("refusal_p", None), row.pop("refused", None)
    if row.pop("redacted", False):
        n = int(row.pop("n_chars", 0) or 0)
        row["text"] = row["scrubbed"] = "x" * n
    return ((p_ref, refused) if refused is not None else None), _Stored(row)


def _places(positions: list) -> list:
    """For each shard's array of places in the prompt file, each record's place in the merged
    order: a stable sort of the shards' records, concatenated in shard order, by place (the
    in-memory merge's ``sorted``)."""
    flat = np.concatenate(positions) if positions else np.array([], dtype=np.int64)
    rank = np.empty(len(flat), dtype=np.int64)
    rank[np.argsort(flat, kind="stable")] = np.arange(len(flat))
    out, start = [], 0
    for a in positions:
        out.append(rank[start:start + len(a)])
        start += len(a)
    return out


def _spool_pairs(audit, shards: list[ShardRun], positions: list, columns: list[str], placebo: list[dict]):
    """The merged night's pairs in a :class:`~lmra.audit.finish.RatedPairSpool` in the run folder:
    each shard's ``ratings.parquet`` read in turn (one in memory at a time), every row given the
    columns of the widest shard and kept to the audit's own (its rescored ones are computed again),
    at its place in the merged order; the placebo pairs (``placebo``, already in order) after them."""
    from lmra import pairstore
    from lmra.audit.finish import RatedPairSpool
    from lmra.audit.pipeline import SPOOL_NAME
    from lmra.audit.rate import PAIR_COLUMNS

    own = frozenset(PAIR_COLUMNS)
    spool = audit.spool = RatedPairSpool(audit.run_dir / SPOOL_NAME, PAIR_COLUMNS, row_group=pairstore.SPOOL_ROW_GROUP)
    places = _places(positions)
    for s, keys in zip(shards, places):
        rows = read_pairs(s.run.pairs_path).to_dict(orient="records")
        for key, r in zip(keys.tolist(), rows):
            spool.add(key, {k: v for k, v in ({c: r.get(c) for c in columns} | r).items() if k in own})
        del rows
    n = sum(len(k) for k in places)
    for i, r in enumerate(placebo):
        spool.add(n + i, {k: v for k, v in ({c: r.get(c) for c in columns} | r).items() if k in own})
    return spool


def _spool_responses(audit, shards: list[ShardRun], positions: list, placebo_responses: list,
                     refusals: dict[int, tuple], placebo_names):
    """The merged night's responses in a :class:`~lmra.audit.finish.ResponseSpool` in the run
    folder: each shard's ``responses.jsonl`` read in turn, at its place in the merged order, with
    its refusal label; the placebo responses (``placebo_responses``, stage records already in
    order, their labels in ``refusals`` by index) after them."""
    from lmra import pairstore
    from lmra.audit.finish import ResponseSpool
    from lmra.audit.pipeline import RESPONSE_SPOOL_NAME

    spool = audit.response_spool = ResponseSpool(audit.run_dir / RESPONSE_SPOOL_NAME, audit.cfg.redact,
                                                 placebo_names, row_group=pairstore.SPOOL_ROW_GROUP)
    places = _places(positions)
    for s, keys in zip(shards, places):
        for key, row in zip(keys.tolist(), s.run.jsonl("responses.jsonl")):
            label, stored = _stored_response(row)
            spool.add_response(key, stored, label)
    n = sum(len(k) for k in places)
    for i, stored in enumerate(placebo_responses):
        spool.add_response(n + i, stored, refusals.get(i))
    return spool


def _record_stop(audit, manifest: dict | None, exc: BaseException) -> None:
    """Write the merged folder's ``manifest.json`` as stopped — ``interrupted`` (with the signal) or
    ``failed`` (with the error), as an audit's — unless it already says how it ended (break-it finding:
    a merge stopped by SIGTERM or a full disk left it ``running``, reported later as "stale")."""
    from lmra.errors import LmraIOError
    from lmra.runstate import RUNNING, stop_record

    for spool in (getattr(audit, "spool", None), getattr(audit, "response_spool", None)):
        if spool is not None:  # a spooled merge's files: the shards still hold every record
            with contextlib.suppress(Exception):  # (already failing: the stop is recorded below)
                spool.abort()
    path = audit.run_dir / "manifest.json"
    try:
        current = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        current = manifest
    if not isinstance(current, dict) or current.get("status", RUNNING) != RUNNING:
        return  # not written yet (nothing to mark), or finished: its own status stands
    status, reason = stop_record(exc)
    current |= {"status": status, "stop_reason": reason,
                "finished": _dt.datetime.now().astimezone().isoformat(timespec="seconds")}
    try:
        audit._write_json("manifest.json", current)
    except LmraIOError:
        pass  # the disk is full: the folder keeps the manifest it had ('running': reported 'stale' once its lock is gone)
