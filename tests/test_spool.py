"""A large run's rated pairs spooled to disk as they are rated (issue 15, goal 1).

The pipelined audit hands each rated pair to a Parquet spool (``lmra.pairstore.PairSpool``)
when the run may rate ``Audit.spool_min_pairs`` pairs or more; finishing orders the spool
with DuckDB and rescores it in row groups. The run folder must be the one the in-memory path
writes (same run as tests/test_pipeline.py: judge check, classification, filter failures,
placebo, refusals, failed calls, quality, a second LMRA), and a stopped run leaves no spool."""

from __future__ import annotations

import asyncio
import json
import math

import pyarrow.parquet as pq
import pytest

from doubles import ScriptedJudge
from test_pipeline import FlakyTarget, RecordingJudge, _prompts
from lmra import Audit
from lmra.budget import BudgetExceeded
from lmra.config import AuditConfig
from lmra.pairstore import read_pairs

SKIP = {"manifest.json", "config.toml", "summary.json", "run.lock"}


def _audit(tmp_path, name: str, *, spool: bool, **extra) -> Audit:
    names, prompts = _prompts(tmp_path)
    cfg = AuditConfig.model_validate(dict(
        name="audit", prompts=str(prompts), names=str(names), prompts_per_task=6, samples_per_prompt=2,
        output_dir=str(tmp_path / name), cache=str(tmp_path / f"{name}.sqlite"), concurrency=8,
        placebo={"share": 0.25}, quality={"enabled": True, "criteria": ["clarity", "completeness"]},
        judge2={"provider": "llamacpp"}, **extra))
    audit = Audit(cfg, target=FlakyTarget([]), judge=RecordingJudge([]), judge2=RecordingJudge([], model_id="j2"))
    audit.spool_min_pairs = 0 if spool else 10**9
    return audit


@pytest.fixture(scope="module")
def in_memory(tmp_path_factory):
    """The run with its pairs held in memory (the path of small runs)."""
    return _audit(tmp_path_factory.mktemp("mem"), "mem", spool=False).run()


def _same_folder(a, b, *, ratings_bytes: bool) -> None:
    files = sorted(p.name for p in a.run_dir.iterdir() if p.name not in SKIP)
    assert files == sorted(p.name for p in b.run_dir.iterdir() if p.name not in SKIP)  # no spool left
    assert {"ratings.parquet", "per_task.csv", "placebo_ratings.jsonl", "judges.csv", "refusals.csv"} <= set(files)
    for f in files:
        if f != "ratings.parquet" or ratings_bytes:
            assert (a.run_dir / f).read_bytes() == (b.run_dir / f).read_bytes(), f
    s1, s2 = (json.loads((r.run_dir / "summary.json").read_text()) for r in (a, b))
    assert {k: v for k, v in s1.items() if k != "run_dir"} == {k: v for k, v in s2.items() if k != "run_dir"}
    assert s1["n_pairs_failed"] > 0 and s1["n_pairs_refusal"] > 0 and s1["placebo"]  # the cases are covered


def test_spooled_pairs_give_the_run_folder_of_the_in_memory_run(in_memory, tmp_path):
    """Every file byte-identical, ratings.parquet included, and the same summary."""
    audit = _audit(tmp_path, "spool", spool=True)
    spooled = audit.run()
    assert audit.spool is not None and audit.spool.n_rows == len(in_memory.ratings) + len(
        _jsonl_rows(in_memory.run_dir / "placebo_ratings.jsonl"))
    _same_folder(in_memory, spooled, ratings_bytes=True)
    assert list(spooled.per_task.columns) == list(in_memory.per_task.columns)


def _responses_alive_at_finish(audit: Audit) -> list[int]:
    """Run ``audit``; the number of live :class:`~lmra.generate.Response` objects when its
    stages have returned and the run folder is about to be written (after a full collection)."""
    import gc
    import warnings

    from lmra.generate import Response

    alive, finish = [], audit._finish

    def counting(*args, **kwargs):
        gc.collect()
        with warnings.catch_warnings():  # isinstance on every live object touches deprecated torch aliases
            warnings.simplefilter("ignore", FutureWarning)
            alive.append(sum(1 for o in gc.get_objects() if isinstance(o, Response)))
        return finish(*args, **kwargs)

    audit._finish = counting
    audit.run()
    return alive


def test_a_spooled_run_holds_no_responses(in_memory, tmp_path):
    """The spooled run's responses go to their own spool as their lines (with their refusal
    labels): when its stages end no Response object is alive (the in-memory run holds all of
    them), no spool is left, and the response files are the in-memory run's, byte for byte
    (with placebo responses and refusal labels in them)."""
    held = _responses_alive_at_finish(_audit(tmp_path, "mem2", spool=False))
    audit = _audit(tmp_path, "spool2", spool=True)
    assert _responses_alive_at_finish(audit) == [0]
    n = json.loads((audit.run_dir / "summary.json").read_text())["n_responses"]
    assert held[0] >= n > 0 and audit.response_spool is not None and audit.response_spool.n_rows == n
    assert not [p.name for p in audit.run_dir.iterdir() if "spool" in p.name]
    for f in ("responses.jsonl", "placebo_responses.jsonl"):
        assert (audit.run_dir / f).read_bytes() == (in_memory.run_dir / f).read_bytes(), f
    rows = _jsonl_rows(audit.run_dir / "responses.jsonl")
    assert _jsonl_rows(audit.run_dir / "placebo_responses.jsonl") and any(r["refused"] for r in rows)
    assert any(r["refusal_p"] is None for r in rows)  # failed calls: no label


def test_a_redacted_spooled_run_writes_the_redacted_responses(tmp_path, monkeypatch):
    """Redacted, with row groups of 3: the spooled responses' lines keep only the texts' lengths,
    as the in-memory run's."""
    import lmra.pairstore as pairstore

    monkeypatch.setattr(pairstore, "SPOOL_ROW_GROUP", 3)
    runs = [_audit(tmp_path, name, spool=spool, redact=True).run() for name, spool in (("m", False), ("s", True))]
    for f in ("responses.jsonl", "placebo_responses.jsonl"):
        assert (runs[0].run_dir / f).read_bytes() == (runs[1].run_dir / f).read_bytes(), f
    rows = _jsonl_rows(runs[1].run_dir / "responses.jsonl")
    assert rows and all(r["redacted"] and r["text"] is None and r["n_chars"] >= 0 for r in rows)
    assert runs[1].responses.empty and len(runs[0].responses) == runs[1].summary["n_responses"]


def test_spooled_pairs_are_rescored_across_row_groups(in_memory, tmp_path, monkeypatch):
    """With row groups of 5 pairs (spool and ratings.parquet), the pairs are ordered, rescored
    with the run's position logit and split from the placebo across batches: the same table
    and the same other files."""
    import lmra.audit.finish as finish
    import lmra.pairstore as pairstore

    monkeypatch.setattr(pairstore, "SPOOL_ROW_GROUP", 3)
    monkeypatch.setattr(finish, "ROW_GROUP", 5)
    spooled = _audit(tmp_path, "spool5", spool=True).run()
    _same_folder(in_memory, spooled, ratings_bytes=False)
    a, b = (read_pairs(r.run_dir / "ratings.parquet") for r in (in_memory, spooled))
    assert list(a.columns) == list(b.columns) and "h_calibrated" in b and "judge2_order1" in b
    assert a.to_json() == b.to_json()
    n = len(b)
    assert n > 10 and pq.ParquetFile(spooled.run_dir / "ratings.parquet").num_row_groups == math.ceil(n / 5)


def test_a_stopped_run_leaves_no_spool(tmp_path, monkeypatch):
    """The budget stops the run after some pairs were spooled (row groups of 2): the spool is
    dropped (the answered calls are in the call cache) and the folder says why it stopped."""
    import lmra.pairstore as pairstore

    monkeypatch.setattr(pairstore, "SPOOL_ROW_GROUP", 2)
    audit = _audit(tmp_path, "stopped", spool=True, max_calls=650)
    with pytest.raises(BudgetExceeded):
        audit.run()
    assert audit.spool is not None and audit.spool.n_rows >= 2  # a row group had been written
    assert not [p.name for p in audit.run_dir.iterdir() if "spool" in p.name or p.name.endswith(".tmp")]
    assert json.loads((audit.run_dir / "manifest.json").read_text())["status"] == "stopped_by_budget"


def _jsonl_rows(path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def _spool_answer(rng, i: int):
    """A varied LMRA answer: log-probabilities or samples, unusable ones, ties for the top option,
    unparseable and refused samples."""
    import random as _random

    assert isinstance(rng, _random.Random)
    u = rng.random()
    method = ("logprobs", "sampled", "text")[i % 3]
    if u < 0.05:
        return {"probs": None, "mass": 0.0, "method": method, "n_samples": 1, "n_unparseable": 1, "n_refused": 0,
                "raw_texts": []}
    a, b = rng.random() ** 3, rng.random() ** 3
    a, b = (0.0 if u < 0.15 else a), (a if u > 0.9 else b)  # zeros; ties between A and B
    z = a + b + 0.4
    return {"probs": {"A": a / z, "B": b / z, "C": 0.4 / z}, "mass": rng.random(), "method": method,
            "n_samples": 5, "n_unparseable": int(u < 0.3), "n_refused": int(u > 0.8), "raw_texts": []}


def test_spooled_answers_are_scored_from_numbers_with_the_same_results(tmp_path, monkeypatch):
    """Pairs spooled in a shuffled order, rescored 7 at a time from the numbers the spool keeps
    of each answer — and, in the batches holding an answer that is not a plain OptionProbs
    dict (integer probabilities, a numpy float, a plain probability dict), from the answers'
    decoded JSON: ratings.parquet is byte-identical to the in-memory frame rescored and written
    (two LMRAs), the placebo pairs and the judge diagnostics (overall, per task, the second
    LMRA's) are the same; the spool's frame is the rows in key order."""
    import random

    import numpy as np
    import pandas as pd

    import lmra.audit.finish as finish
    from lmra.diagnostics import judge_diagnostics, judge_diagnostics_by
    from lmra.judge.calibration import rescore
    from lmra.pairstore import PairWriter
    from lmra.runfolder import jsonable

    monkeypatch.setattr(finish, "_BATCH", 7)
    monkeypatch.setattr(finish, "ROW_GROUP", 10)
    rng = random.Random(5)
    rows = []
    for i in range(300):
        rated = rng.random() > 0.1
        rows.append({"pair_id": f"p{i}", "task": None if i % 50 == 7 else f"t{i % 4}", "placebo": i % 23 == 0,
                     "failed": not rated, "valid": False, "q_F": math.nan, "q_R": math.nan, "q_N": math.nan,
                     "h": math.nan, "order1": _spool_answer(rng, i) if rated else None,
                     "order2": _spool_answer(rng, i + 1) if rated else None,
                     "judge2_order1": _spool_answer(rng, i + 2) if rated else None,
                     "judge2_order2": _spool_answer(rng, i) if rated else None})
    answer = lambda probs: {"probs": probs, "mass": 1.0, "method": "text"}  # noqa: E731
    irregular = {40: {"A": 1, "B": 0, "C": 0},  # integers: JSON decoded, scored by score_pair
                 41: {"A": np.float64(0.5), "B": 0.25, "C": 0.25},  # a numpy float
                 200: {"C": 0.5, "A": 0.25, "B": 0.25}}  # another key order
    for i, probs in irregular.items():
        rows[i] |= {"failed": False, "order1": answer(probs), "order2": answer({"A": 0.25, "B": 0.5, "C": 0.25})}
    rows[201] |= {"failed": False, "order1": {"A": 0.5, "B": 0.25, "C": 0.25},  # a plain probability dict
                  "order2": answer({"A": 0.25, "B": 0.5, "C": 0.25})}
    rows[38]["task"] = None  # a pair without a task in a decoded batch: in no task's diagnostics
    rows[120]["judge2_order2"] = answer({"A": 0, "B": 1, "C": 0})  # the second LMRA's answer decoded
    decoded = []
    real_decode = finish._spooled_batch_decoded
    monkeypatch.setattr(finish, "_spooled_batch_decoded", lambda *a: decoded.append(len(a[0])) or real_decode(*a))

    spool = finish.RatedPairSpool(tmp_path / ".spool.parquet", list(rows[0]), row_group=16)
    for key in rng.sample(range(len(rows)), len(rows)):
        spool.add(key, rows[key])
    as_json = lambda df: json.dumps(jsonable(df.to_dict(orient="records")))  # noqa: E731
    assert as_json(spool.frame()) == as_json(pd.DataFrame(rows))  # the rows in key order, answers decoded
    th = dict(min_valid_mass=0.3, min_order_consistency=0.6)
    placebo, b, overall, per_task = finish.write_spooled_pairs(spool, tmp_path / "spooled.parquet", "calibrated",
                                                               "min", **th)
    spool.remove()
    assert 0 < len(decoded) < len(rows) / 7 - 1  # both paths ran

    frame, b_mem = rescore(pd.DataFrame(rows), "calibrated")
    frame, _ = rescore(frame, "min", prefix="judge2_")
    pmask = frame["placebo"].astype(bool)
    real = frame[~pmask].reset_index(drop=True)
    with PairWriter(tmp_path / "memory.parquet", columns=list(real.columns), row_group=10) as w:
        w.write_frame(real)
    assert b == b_mem
    assert (tmp_path / "spooled.parquet").read_bytes() == (tmp_path / "memory.parquet").read_bytes()
    assert as_json(placebo) == as_json(frame[pmask].reset_index(drop=True)) and len(placebo) > 5
    assert json.dumps(overall) == json.dumps(judge_diagnostics(real, **th))
    assert json.dumps(per_task) == json.dumps(judge_diagnostics_by(real, "task", **th))
    second = real[["judge2_order1", "judge2_order2"]].set_axis(["order1", "order2"], axis=1)
    assert json.dumps(spool.judge2_answers.result(**th)) == json.dumps(judge_diagnostics(second, **th))
    assert overall["judge_refused"] > 0 and overall["unusable"] > 0 and set(overall["methods"]) == {
        "logprobs", "sampled", "text", None}


def test_a_spooled_run_keeps_only_a_window_of_pair_chains(tmp_path, monkeypatch):
    """800 prompts (1,000 pairs with the placebo) through a window of 16 pair chains, with
    pairs and responses spooled: at no call are more than 16 pair chains alive (counted among
    the event loop's tasks), the window is used, and the run folder is the one the staged
    in-memory run writes (every chain's result put back in the staged order), as is the
    folder of the same window without a spool (the chains' responses and rows kept by key)."""
    import lmra.audit.pipeline as pipeline

    monkeypatch.setattr(pipeline, "PAIR_WINDOW_MIN", 16)
    monkeypatch.setattr(pipeline, "PAIR_WINDOW_PER_CALL", 1)  # concurrency 8 → a window of 16
    names, _ = _prompts(tmp_path)
    prompts = tmp_path / "many.jsonl"
    prompts.write_text("".join(json.dumps({"id": f"p{i}", "text": f"Prompt number {i}.", "domain": "d",
                                           "task": ("write a story", "career advice", "plan a trip")[i % 3]}) + "\n"
                               for i in range(800)))
    live: list[int] = []

    class CountingTarget(FlakyTarget):
        async def complete(self, request):
            live.append(sum(1 for t in asyncio.all_tasks() if t.get_coro().__qualname__.endswith(".pair_chain")))
            return await super().complete(request)

    class QuickJudge(RecordingJudge):  # without RecordingJudge's 1 ms per call
        async def complete(self, request):
            return await ScriptedJudge.complete(self, request)

    def run(name: str, *, spool: bool, staged: bool, target):
        target.delay = 0.0  # zero-latency calls: chains waiting in the window are tasks all the same
        cfg = AuditConfig.model_validate(dict(
            name="audit", prompts=str(prompts), names=str(names), prompts_per_task=0, samples_per_prompt=1,
            output_dir=str(tmp_path / name), cache=str(tmp_path / f"{name}.sqlite"), concurrency=8,
            placebo={"share": 0.25}, refusal={"enabled": False}, filter={"enabled": False}))
        audit = Audit(cfg, target=target, judge=QuickJudge([]))
        audit.spool_min_pairs, audit.staged = (0 if spool else 10 ** 9), staged
        return audit.run()

    spooled = run("spool", spool=True, staged=False, target=CountingTarget([]))
    staged = run("staged", spool=False, staged=True, target=FlakyTarget([]))
    in_memory = run("memory", spool=False, staged=False, target=FlakyTarget([]))  # the window without a spool
    assert spooled.summary["n_pairs_total"] + len(_jsonl_rows(spooled.run_dir / "placebo_ratings.jsonl")) == 1000
    assert len(live) == 2000 and max(live) == 16  # every call counted; the window full, never exceeded
    files = sorted(p.name for p in spooled.run_dir.iterdir() if p.name not in SKIP)
    assert files == sorted(p.name for p in staged.run_dir.iterdir() if p.name not in SKIP)
    for f in files:
        assert (spooled.run_dir / f).read_bytes() == (staged.run_dir / f).read_bytes(), f
        assert (in_memory.run_dir / f).read_bytes() == (staged.run_dir / f).read_bytes(), f
