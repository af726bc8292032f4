"""Axes step 1 — the pairs: read a run's usable pairs and split them by prompt into disjoint
discovery and test sets (methodology §4 step 1).

Reads ``config.toml``, ``responses.jsonl`` and the ratings (``ratings.parquet``; ``ratings.jsonl``
in runs of earlier versions) of a run folder, or the in-memory frames of an audit, and the
prompt file; writes :class:`AxisPair` records, grouped per comparison in :class:`AxesInputs`,
for the brainstorm (:mod:`lmra.axes.brainstorm`) and labelling (:mod:`lmra.axes.label`) steps.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from lmra.config import AuditConfig, load_config
from lmra.errors import LmraInputError
from lmra.generate import derive_seed
from lmra.pairstore import pair_flag


@dataclass(frozen=True)
class AxisPair:
    """One usable pair ``(y_A, y_B)`` of an audit run: both responses scrubbed of names.

    Attributes:
        pair_id: the run's pair id (``prompt|comparison|sample``).
        prompt_id, domain, task: the prompt's identity and labels.
        comparison: ``"A vs B"``; group_a, group_b: the two group names.
        sample: sample index k.
        prompt: the prompt text shown to the LMRA.
        response_a, response_b: the scrubbed responses given to group A and group B.
    """

    pair_id: str
    prompt_id: str
    domain: str
    task: str
    comparison: str
    group_a: str
    group_b: str
    sample: int
    prompt: str
    response_a: str
    response_b: str


def _read_jsonl(path: Path) -> pd.DataFrame:
    from lmra.data import iter_jsonl

    if not path.is_file():
        raise LmraInputError("file not found (is this an lmra run folder?)", file=path)
    from lmra.errors import read_input_text

    return pd.DataFrame([obj for _, obj in iter_jsonl(read_input_text(path, "run file"), path)])


def read_run(run_dir: str | Path) -> tuple[AuditConfig, pd.DataFrame, pd.DataFrame]:
    """Read a finished audit run folder: its resolved config, responses and ratings.

    Args:
        run_dir: folder with ``config.toml``, ``responses.jsonl`` and ``ratings.jsonl``.

    Returns:
        (config, responses frame, ratings frame) — the frames have the columns
        :mod:`lmra.audit` writes.

    Raises:
        LmraInputError: the folder or a file is missing or malformed.
    """
    run = Path(run_dir)
    if not run.is_dir():
        raise LmraInputError("run folder not found", file=run)
    if not (run / "config.toml").is_file():
        raise LmraInputError("config.toml not found (is this an lmra run folder?)", file=run / "config.toml")
    from lmra.digests import verify_files

    verify_files(run, "config.toml", "responses.jsonl", "ratings.parquet", "ratings.jsonl")
    cfg = load_config(run / "config.toml")
    responses = _read_jsonl(run / "responses.jsonl")
    if cfg.redact or ("redacted" in responses and responses["redacted"].fillna(False).astype(bool).any()):
        raise LmraInputError("this run was redacted: responses.jsonl holds no response text. Run the axes step "
                             "inside the audit instead ([axes] enabled = true)", file=run / "responses.jsonl")
    from lmra.pairstore import PARQUET_NAME, read_pairs  # ratings.parquet since issue 15; ratings.jsonl before

    return cfg, responses, (read_pairs(run / PARQUET_NAME) if (run / PARQUET_NAME).is_file()
                            else _read_jsonl(run / "ratings.jsonl"))


def load_prompt_texts(cfg: AuditConfig, run_dir: str | Path | None = None, prompts: str | Path | None = None
                      ) -> dict[str, str]:
    """Prompt id → text from the run's prompt file (run folders never store prompt text in
    ``ratings.jsonl``, and a redacted run stores none at all).

    Args:
        cfg: the run's config (``prompts``, ``text_field``).
        run_dir: the run folder; a relative prompt path that does not exist from the current
            folder is also looked for two levels above it (the folder the audit ran in).
        prompts: a prompt file to use instead of ``cfg.prompts``.

    Raises:
        LmraInputError: the prompt file is missing or malformed.
    """
    from lmra.data import load_prompts
    from lmra.resources import resolve_resource

    raw = Path(prompts or cfg.prompts)
    path = resolve_resource(raw, "prompts")
    if not path.exists() and run_dir is not None and not raw.is_absolute():
        alt = Path(run_dir).resolve().parent.parent / raw
        if alt.exists():
            path = alt
    return {p.id: p.text for p in load_prompts(path, text_field=cfg.text_field, auto_id=True)}


def usable_pairs(responses: pd.DataFrame, ratings: pd.DataFrame, prompts: Mapping[str, str]
                 ) -> tuple[list[AxisPair], dict[str, int]]:
    """Join a run's ratings with its scrubbed responses and prompt texts.

    Pairs whose target call failed, in which either response is a refusal, or whose refusal
    label could not be obtained (``unlabelled``: a response might be a refusal) are excluded and
    counted, as for the stereotype metric (methodology §1 step 7; statistics-review finding:
    unlabelled pairs entered discovery and the tests).

    Args:
        responses: ``responses.jsonl`` rows (prompt_id, comparison, group, sample, scrubbed, error).
        ratings: ``ratings.jsonl`` rows (pair_id, prompt_id, domain, task, comparison, group_a,
            group_b, sample, refused, failed).
        prompts: prompt id → text.

    Returns:
        (usable pairs in the ratings' order, counts ``n_pairs_total``, ``n_failed``, ``n_refused``,
        ``n_unlabelled``).

    Raises:
        LmraInputError: a column is missing, a response of a pair is missing, or a prompt id
            is not in ``prompts``.
    """
    need_r = {"prompt_id", "comparison", "group", "sample", "scrubbed"}
    need_p = {"pair_id", "prompt_id", "task", "comparison", "group_a", "group_b", "sample", "refused", "failed"}
    # (``unlabelled`` is optional: runs made before refusal labels could fail have none)
    for df, need, what in ((responses, need_r, "responses.jsonl"), (ratings, need_p, "ratings.jsonl")):
        missing = need - set(df.columns)
        if len(df) and missing:
            raise LmraInputError(f"missing columns {sorted(missing)}", file=what)
    counts = {"n_pairs_total": len(ratings), "n_failed": 0, "n_refused": 0, "n_unlabelled": 0}
    if ratings.empty:
        return [], counts
    text = {(r.prompt_id, r.comparison, r.group, int(r.sample)): r.scrubbed
            for r in responses.itertuples(index=False)}
    out: list[AxisPair] = []
    missing_prompts: set[str] = set()
    for r in ratings.to_dict(orient="records"):
        if bool(r.get("failed")):
            counts["n_failed"] += 1
            continue
        if bool(r.get("refused")):
            counts["n_refused"] += 1
            continue
        if pair_flag(r.get("unlabelled")):
            counts["n_unlabelled"] += 1
            continue
        ka = (r["prompt_id"], r["comparison"], r["group_a"], int(r["sample"]))
        kb = (r["prompt_id"], r["comparison"], r["group_b"], int(r["sample"]))
        if ka not in text or kb not in text:
            raise LmraInputError(f"pair '{r['pair_id']}' has no response for one of its groups", file="responses.jsonl")
        if r["prompt_id"] not in prompts:
            missing_prompts.add(str(r["prompt_id"]))
            continue
        out.append(AxisPair(pair_id=str(r["pair_id"]), prompt_id=str(r["prompt_id"]),
                            domain=str(r.get("domain") or "unlabelled"), task=str(r["task"]),
                            comparison=str(r["comparison"]), group_a=str(r["group_a"]), group_b=str(r["group_b"]),
                            sample=int(r["sample"]), prompt=prompts[r["prompt_id"]], response_a=str(text[ka] or ""),
                            response_b=str(text[kb] or "")))
    if missing_prompts:
        some = ", ".join(sorted(missing_prompts)[:5])
        raise LmraInputError(f"{len(missing_prompts)} prompt id(s) of the run are not in the prompt file ({some}); "
                             "pass the prompt file the audit used", field="prompts")
    return out, counts



def split_by_prompt(pairs: list[AxisPair], discovery_pairs: int, test_pairs: int | None, seed: int
                    ) -> tuple[list[AxisPair], list[AxisPair]]:
    """Split pairs into disjoint discovery and test sets by prompt (methodology §4 step 1).

    Prompts are ordered by a seeded hash of their id (stable when prompts are added).
    Discovery takes whole prompts in that order until it holds ``discovery_pairs`` pairs, but
    never more than half of the prompts (rounded down), so the held-out set is at least as
    large; its pairs are then cut to ``discovery_pairs``. The test set takes the following
    prompts' pairs up to ``test_pairs`` (None = all of them). Pairs cut by a budget are used
    by neither set, so no prompt ever contributes to both.

    Args:
        pairs: usable pairs of one comparison.
        discovery_pairs: brainstorm budget (≥ 1).
        test_pairs: labelling budget (≥ 1) or None.
        seed: split seed.

    Returns:
        (discovery pairs, test pairs), each ordered by (prompt hash, sample).

    Raises:
        LmraInputError: fewer than 2 prompts have usable pairs.
    """
    by_prompt: dict[str, list[AxisPair]] = {}
    for p in pairs:
        by_prompt.setdefault(p.prompt_id, []).append(p)
    if len(by_prompt) < 2:
        raise LmraInputError(f"axes of difference need usable pairs from at least 2 prompts (discovery and test "
                             f"sets are disjoint by prompt); this comparison has {len(by_prompt)}",
                             field="axes.discovery_pairs")
    order = sorted(by_prompt, key=lambda pid: (derive_seed(seed, "axes-split", pid), pid))
    max_disc_prompts = max(1, len(order) // 2)
    disc: list[AxisPair] = []
    i = 0
    while i < len(order) and i < max_disc_prompts and len(disc) < discovery_pairs:
        disc += sorted(by_prompt[order[i]], key=lambda p: p.sample)
        i += 1
    disc = disc[:discovery_pairs]
    test: list[AxisPair] = []
    for pid in order[i:]:
        test += sorted(by_prompt[pid], key=lambda p: p.sample)
    if test_pairs is not None:
        test = test[:test_pairs]
    return disc, test


@dataclass
class AxesInputs:
    """The pairs an axes run will use, per comparison.

    Attributes:
        splits: comparison → (discovery pairs, test pairs).
        counts: comparison → exclusion counts (``n_pairs_total``, ``n_failed``, ``n_refused``,
            ``n_unlabelled``, ``n_usable``).
        seed: the split/presentation seed.
    """

    splits: dict[str, tuple[list[AxisPair], list[AxisPair]]]
    counts: dict[str, dict[str, int]]
    seed: int


def prepare_axes(cfg: AuditConfig, *, run_dir: str | Path | None = None, responses: pd.DataFrame | None = None,
                 ratings: pd.DataFrame | None = None, prompts: Mapping[str, str] | str | Path | None = None
                 ) -> AxesInputs:
    """Load the usable pairs (from ``run_dir`` or the in-memory frames) and split them.

    Args:
        cfg: the audit config (``axes`` section, ``seed``, ``prompts``).
        run_dir: a finished run folder (used when the frames are not given).
        responses, ratings: the run's frames (``AuditResult.responses`` / ``.ratings``).
        prompts: prompt id → text, or a prompt file; default: the config's prompt file.

    Raises:
        LmraInputError: missing inputs, or a comparison with fewer than 2 usable prompts.
    """
    if responses is None or ratings is None:
        if run_dir is None:
            raise LmraInputError("give a run folder or the responses and ratings frames", field="run")
        _, responses, ratings = read_run(run_dir)
    if prompts is None or isinstance(prompts, (str, Path)):
        prompts = load_prompt_texts(cfg, run_dir, prompts)
    pairs, counts = usable_pairs(responses, ratings, prompts)
    seed = cfg.seed if cfg.axes.seed is None else cfg.axes.seed
    by_comp: dict[str, list[AxisPair]] = {}
    for p in pairs:
        by_comp.setdefault(p.comparison, []).append(p)
    if not by_comp:
        raise LmraInputError(f"the run has no usable pair ({counts['n_pairs_total']} pairs, {counts['n_failed']} "
                             f"failed, {counts['n_refused']} with a refusal, {counts['n_unlabelled']} without a "
                             "refusal label)", field="run")
    splits = {c: split_by_prompt(ps, cfg.axes.discovery_pairs, cfg.axes.test_pairs, seed) for c, ps in by_comp.items()}
    per_comp = {}
    for c in by_comp:
        sub = ratings[ratings["comparison"] == c]
        failed, refused = sub["failed"].astype(bool), sub["refused"].astype(bool) & ~sub["failed"].astype(bool)
        unlabelled = (sub["unlabelled"].map(pair_flag) if "unlabelled" in sub else pd.Series(False, index=sub.index))
        per_comp[c] = {"n_pairs_total": len(sub), "n_failed": int(failed.sum()), "n_refused": int(refused.sum()),
                       "n_unlabelled": int((unlabelled.astype(bool) & ~failed & ~refused).sum()),
                       "n_usable": len(by_comp[c])}
    return AxesInputs(splits=splits, counts=per_comp, seed=seed)
