"""The pair memo (lmra.audit.memo; issue 14 goal 2): a re-run over the same call cache replays
each finished pair instead of redoing it, and writes exactly what a re-run with the memo off
writes; any input that shapes a pair's calls misses it; a crashed run's memo rows are valid."""

from __future__ import annotations

import json

import pandas as pd
import pytest

from conftest import NAME_TO_GROUP
from doubles import ScriptedJudge, ScriptedTarget, SimulatedCrash
from lmra import Audit
from lmra.audit.pipeline import _Progress
from lmra.config import AuditConfig
from lmra.identity import TEMPLATE_TOKENS, template_tokens_in
from test_pipeline import FlakyTarget, RecordingJudge, _prompts

#: manifest.json fields that differ between any two runs (times, process, the memo's own counters)
RUN_FIELDS = {"started", "finished", "pid", "pair_memo", "concurrency", "calls"}


def _config(tmp_path, **over) -> AuditConfig:
    names, prompts = _prompts(tmp_path)
    return AuditConfig.model_validate(dict(
        name="memo", prompts=str(prompts), names=str(names), prompts_per_task=4, samples_per_prompt=2,
        output_dir=str(tmp_path / "out"), cache=str(tmp_path / "cache.sqlite"), concurrency=8,
        placebo={"share": 0.25}, quality={"enabled": True, "criteria": ["clarity", "completeness"]},
        judge2={"provider": "llamacpp"}) | over)


class _Counting(_Progress):
    def __init__(self):
        self.totals: dict[str, int] = {}
        self.advances: dict[str, int] = {}
        super().__init__(start=lambda s, n: self.totals.__setitem__(s, n),
                         advance=lambda s, failed=False: self.advances.__setitem__(s, self.advances.get(s, 0) + 1))


class _Target(FlakyTarget):
    """test_pipeline's flaky target without its delay."""

    def __init__(self, **kw):
        super().__init__([], **kw)
        self.delay = 0.0


class _Judge(RecordingJudge):
    """test_pipeline's scripted LMRA (failures, refusals, quality) without its delay."""

    def __init__(self, **kw):
        super().__init__([], **kw)

    async def complete(self, request):
        return await ScriptedJudge.complete(self, request)


def _run(cfg, run_dir, *, memo: bool = True, target=None, judge=None, progress=None):
    judge2 = _Judge(model_id="j2", supports_logprobs=False) if cfg.judge2 is not None else None  # sampled answers
    audit = Audit(cfg, target=target or _Target(), judge=judge or _Judge(), judge2=judge2, run_dir=run_dir,
                  progress=progress)
    audit.pair_memo = memo
    return audit.run()


def _memoisable(run_dir) -> int:
    """Pairs the memo may hold: not failed, rated validly (or refused / unlabelled), no
    failed second-LMRA or quality rating."""
    df = pd.concat([pd.read_parquet(run_dir / "ratings.parquet"),
                    pd.read_json(run_dir / "placebo_ratings.jsonl", lines=True)], ignore_index=True)
    q = pd.read_json(run_dir / "quality_ratings.jsonl", lines=True)
    bad_quality = set(q.loc[q["failed"].astype(bool), "pair_id"])
    ok = (~df["failed"].astype(bool) & (df["valid"].astype(bool) | df["refused"].astype(bool)
                                        | df["unlabelled"].astype(bool))
          & (df["judge2_error"].isna() if "judge2_error" in df else True) & ~df["pair_id"].isin(bad_quality))
    return int(ok.sum())


def _same_folders(a, b, ignore: tuple[str, ...] = ()) -> None:
    files = sorted(p.name for p in a.iterdir() if p.is_file() and p.name != "run.lock")
    assert files == sorted(p.name for p in b.iterdir() if p.is_file() and p.name != "run.lock")
    for f in files:
        if f not in ("manifest.json", "summary.json", *ignore):
            assert (a / f).read_bytes() == (b / f).read_bytes(), f
    s1, s2 = (json.loads((d / "summary.json").read_text()) for d in (a, b))
    assert {k: v for k, v in s1.items() if k != "run_dir"} == {k: v for k, v in s2.items() if k != "run_dir"}
    m1, m2 = (json.loads((d / "manifest.json").read_text()) for d in (a, b))
    assert {k: v for k, v in m1.items() if k not in (*RUN_FIELDS, "files")} == \
        {k: v for k, v in m2.items() if k not in (*RUN_FIELDS, "files")}
    # the data files' digests: the same for the files compared byte for byte above
    f1, f2 = ({k: v for k, v in m["files"].items() if k not in ("summary.json", *ignore)} for m in (m1, m2))
    assert f1 == f2 and set(f1) >= {"ratings.parquet", "per_task.csv", "responses.jsonl"}
    c1, c2 = m1["calls"], m2["calls"]  # the same counts; errors listed in the order they happened
    assert {**c1, "errors": sorted(c1["errors"])} == {**c2, "errors": sorted(c2["errors"])}


def test_memo_replay_writes_the_same_run_folder_as_a_rerun_without_it(tmp_path):
    """Failed generations, refusals, failed refusal labels, failed ratings, quality, a second
    LMRA with sampled answers, placebo pairs: the re-run that replays the memo writes byte-identical files, the same
    call counts (as cache hits), budget ledger, served-model record and progress as a re-run
    with the memo off over the same cache; failed and invalid pairs are never memoised."""
    cfg = _config(tmp_path)
    first = _run(cfg, tmp_path / "first")
    stored = first.manifest["pair_memo"]["stored"]
    assert stored == _memoisable(first.run_dir) > 0
    df = pd.read_parquet(first.run_dir / "ratings.parquet")
    placebo = pd.read_json(first.run_dir / "placebo_ratings.jsonl", lines=True)
    assert df["failed"].any() and df["refused"].any() and df["judge2_valid"].any() and not placebo["failed"].all()
    p_memo, p_off = _Counting(), _Counting()
    memo = _run(cfg, tmp_path / "memo", progress=p_memo)
    off = _run(cfg, tmp_path / "off", memo=False, progress=p_off)
    assert memo.manifest["pair_memo"] == {"enabled": True, "hits": stored, "stored": 0, "bypassed": None}
    assert off.manifest["pair_memo"]["enabled"] is False and off.manifest["pair_memo"]["hits"] == 0
    assert memo.manifest["calls"]["fresh"] == off.manifest["calls"]["fresh"] == 0  # failures asked again, failed again
    assert memo.manifest["calls"]["cached"] == off.manifest["calls"]["cached"] > 0
    assert memo.manifest["judge"]["served"]["responses"] > 0
    _same_folders(memo.run_dir, off.run_dir)
    assert (p_memo.totals, p_memo.advances) == (p_off.totals, p_off.advances)
    assert p_memo.advances["rate"] == len(df) + len(placebo)
    from rich.console import Console

    from lmra.report.console import render_audit

    for result, line in ((memo, f"({stored} pairs replayed from the pair memo)"), (off, None)):
        console = Console(record=True, width=250)
        render_audit(console, result)
        text = console.export_text()
        assert ("pairs replayed from the pair memo" in text) == (line is not None) and (line is None or line in text)


def test_inputs_that_shape_a_pair_miss_the_memo_and_others_do_not(tmp_path):
    """A changed template, name file, judge model or config field reaching the calls misses
    the memo; the run's name, output folder and budget limits do not."""
    cfg = _config(tmp_path, quality={"enabled": False}, judge2=None, placebo={"share": 0.0}, prompts_per_task=2)
    stored = _run(cfg, tmp_path / "first").manifest["pair_memo"]["stored"]
    assert stored > 0

    def hits(cfg, judge=None, name: str = "run") -> int:
        return _run(cfg, tmp_path / name, judge=judge).manifest["pair_memo"]["hits"]

    assert hits(cfg.model_copy(update={"name": "other", "output_dir": str(tmp_path / "elsewhere"), "max_calls": 10**6}),
                name="same") == stored
    names = tmp_path / "names2.csv"
    names.write_text(open(cfg.names).read() + "Sara,female,,test\n")
    changed = {
        "judge temperature": cfg.model_copy(update={"judge": cfg.judge.model_copy(update={"temperature": 0.5})}),
        "target max_tokens": cfg.model_copy(update={"target": cfg.target.model_copy(update={"max_tokens": 77})}),
        "seed": cfg.model_copy(update={"seed": 1}),
        "names file": cfg.model_copy(update={"names": str(names)}),
    }
    for what, c in changed.items():
        assert hits(c, name=what.replace(" ", "-")) == 0, what
    assert hits(cfg, judge=_Judge(model_id="other-judge"), name="judge-model") == 0


def test_more_prompts_per_task_replays_the_pairs_of_fewer(tmp_path):
    """prompts_per_task only chooses prompts: a run with more of them replays the pairs of a run
    with fewer (same seed) and writes what a run with more and the memo off writes."""
    import sqlite3

    small = _config(tmp_path, quality={"enabled": False}, judge2=None, prompts_per_task=2)
    stored = _run(small, tmp_path / "small").manifest["pair_memo"]["stored"]
    with sqlite3.connect(small.cache) as src, sqlite3.connect(tmp_path / "copy.sqlite") as dst:
        src.backup(dst)  # the same cache for the run with the memo off
    big = small.model_copy(update={"prompts_per_task": 4})
    memo = _run(big, tmp_path / "memo")
    off = _run(big.model_copy(update={"cache": str(tmp_path / "copy.sqlite")}), tmp_path / "off", memo=False)
    assert 0 < memo.manifest["pair_memo"]["hits"] <= stored  # (a placebo pair may not be drawn again)
    assert memo.manifest["calls"]["fresh"] == off.manifest["calls"]["fresh"] > 0  # the new pairs
    _same_folders(memo.run_dir, off.run_dir, ignore=("config.toml",))


def test_a_changed_template_misses_the_memo(tmp_path):
    """The stereotype template's text is in the key: one more line misses every pair."""
    from lmra.audit.memo import run_key

    cfg = _config(tmp_path)
    audit = Audit(cfg, target=_Target(), judge=_Judge(), judge2=_Judge(model_id="j2"))
    inputs = audit.load_inputs()
    providers = {"target": audit._target, "judge": audit._judge, "judge2": audit._judge2}
    key = run_key(cfg, inputs, providers)
    assert run_key(cfg, inputs, providers) == key
    import copy

    tpl = copy.copy(inputs.templates["stereotype"])  # a copy: the loaded templates are shared by the process
    tpl.sections = [(role, text + "\n" if i == 0 else text) for i, (role, text) in enumerate(tpl.sections)]
    inputs.templates["stereotype"] = tpl
    assert run_key(cfg, inputs, providers) != key


def test_a_crashed_runs_memo_rows_are_valid(tmp_path):
    """A run that dies mid-way (not a provider failure) keeps the memo rows of the pairs it
    finished; the re-run replays them and writes what a re-run with the memo off writes."""
    cfg = _config(tmp_path, quality={"enabled": False}, judge2=None)

    class CrashingJudge(_Judge):  # dies once 7 rating calls were asked: the pairs rated before are done
        async def complete(self, request):
            result = await RecordingJudge.complete(self, request)  # (logs the call's kind in self.log)
            if self.log.count("rate") > 6:
                raise SimulatedCrash("simulated crash")
            return result

    # (it was the target's 41st call: once the judge check's canaries stopped holding every place
    # at the start, all generations come before the first rating, and none was finished then)
    with pytest.raises(SimulatedCrash):
        _run(cfg, tmp_path / "crashed", judge=CrashingJudge())
    from lmra.cache import CallCache

    cache = CallCache(cfg.cache)
    kept = cache._db.execute("SELECT COUNT(*) FROM pair_memo").fetchone()[0]
    cache.close()
    assert kept > 0
    import sqlite3

    # the re-run with the memo off starts from the same cache (a copy): both ask the calls the crash left
    with sqlite3.connect(cfg.cache) as src, sqlite3.connect(tmp_path / "copy.sqlite") as dst:
        src.backup(dst)
    memo = _run(cfg, tmp_path / "memo")
    assert memo.manifest["pair_memo"]["hits"] == kept and memo.manifest["calls"]["fresh"] > 0
    off = _run(cfg.model_copy(update={"cache": str(tmp_path / "copy.sqlite")}), tmp_path / "off", memo=False)
    _same_folders(memo.run_dir, off.run_dir, ignore=("config.toml",))  # it names the cache file


def test_an_unreadable_memo_row_is_run_again(tmp_path):
    """A memo row this code cannot read (damaged, or written by other code) is never replayed:
    its pair is run from the call cache and counted once, as without the memo."""
    import sqlite3

    cfg = _config(tmp_path, quality={"enabled": False}, judge2=None, placebo={"share": 0.0}, prompts_per_task=2)
    stored = _run(cfg, tmp_path / "first").manifest["pair_memo"]["stored"]
    with sqlite3.connect(cfg.cache) as db:
        keys = [k for (k,) in db.execute("SELECT key FROM pair_memo ORDER BY key")]
        bad = ['{"a": 1}', "not json", '{"a": [{}, null, null], "b": [{}, null, null], "row": {}, "quality": [], '
               '"calls": [["target", "x"]]}']
        db.executemany("UPDATE pair_memo SET value = ? WHERE key = ?", [(bad[i % 3], k) for i, k in enumerate(keys)])
    assert len(keys) == stored > 0
    memo, off = _run(cfg, tmp_path / "memo"), _run(cfg, tmp_path / "off", memo=False)
    assert memo.manifest["pair_memo"]["hits"] == 0 and memo.manifest["pair_memo"]["stored"] == stored
    _same_folders(memo.run_dir, off.run_dir)


def test_template_tokens_survive_the_replayed_answer():
    """A replayed answer's text is its template tokens joined by spaces: the served-model
    record finds exactly those tokens again (no token holds a space or another token)."""
    from lmra.audit.memo import _Answer

    tokens = [t for t, _ in TEMPLATE_TOKENS]
    assert all(" " not in t for t in tokens)
    for i, t in enumerate(tokens):
        assert template_tokens_in(_Answer(None, None, [t]).text) == [t]
    assert template_tokens_in(_Answer(None, None, tokens).text) == tokens
    assert template_tokens_in(_Answer(None, None, []).text) == []


def test_a_spooled_run_replays_the_memo_into_its_spools(tmp_path):
    """A large run's pairs and responses go to disk as they come (the spools): replayed pairs
    are spooled as run ones, and the run folder is the same as without the memo."""
    cfg = _config(tmp_path, quality={"enabled": False}, judge2=None, prompts_per_task=3)

    def run(name: str, memo: bool):
        audit = Audit(cfg, target=_Target(), judge=_Judge(), run_dir=tmp_path / name)
        audit.spool_min_pairs, audit.pair_memo = 1, memo
        result = audit.run()
        assert audit.spool is not None
        return result

    stored = run("first", True).manifest["pair_memo"]["stored"]
    memo, off = run("memo", True), run("off", False)
    assert memo.manifest["pair_memo"]["hits"] == stored > 0
    _same_folders(memo.run_dir, off.run_dir)


def test_staged_runs_bypass_the_memo(tmp_path):
    """Stages one after another do not use the memo, and say so in manifest.json."""
    cfg = _config(tmp_path, quality={"enabled": False}, judge2=None, prompts_per_task=2)
    audit = Audit(cfg, target=ScriptedTarget(NAME_TO_GROUP, lambda g, rng: "An answer."),
                  judge=ScriptedJudge(lambda r1, r2: {"C": 1.0}), run_dir=tmp_path / "staged")
    audit.staged = True
    m = audit.run().manifest["pair_memo"]
    assert m["enabled"] is False and m["bypassed"] == "stages run one after another"


def test_the_config_turns_the_memo_off(tmp_path):
    """``pair_memo = false``: nothing is stored or replayed, a re-run asks the call cache again,
    and manifest.json says why; the setting is not part of a pair's key (a later run with the
    memo on reuses nothing, since nothing was stored)."""
    cfg = _config(tmp_path, quality={"enabled": False}, judge2=None, prompts_per_task=2, pair_memo=False)
    first = _run(cfg, tmp_path / "one")
    again = _run(cfg, tmp_path / "two")
    for res in (first, again):
        m = res.manifest["pair_memo"]
        assert m["enabled"] is False and m["bypassed"] == "turned off (pair_memo = false)"
    assert again.manifest["calls"]["fresh"] == 0 and again.manifest["calls"]["cached"] > 0
    import sqlite3

    db = sqlite3.connect(cfg.cache)
    assert db.execute("SELECT COUNT(*) FROM pair_memo").fetchone()[0] == 0
    db.close()
    on = _run(cfg.model_copy(update={"pair_memo": True}), tmp_path / "three")
    assert on.manifest["pair_memo"]["hits"] == 0 and on.manifest["pair_memo"]["stored"] > 0
    from lmra.runfolder import load_run

    # the switch changes how fast a re-run is, not what is measured: the nights share a design
    assert load_run(first.run_dir).design_hash == load_run(on.run_dir).design_hash
    assert load_run(first.run_dir).config_hash != load_run(on.run_dir).config_hash


def test_served_models_are_listed_the_same_whatever_order_the_answers_came_in():
    """Ties in the served-model, fingerprint and template-token counts are ordered by name, not
    by first sighting: a replay (answers in the order the first run finished them) and a cached
    re-run (in the order it schedules them) write the same manifest.json and warnings."""
    from lmra.identity import RunIdentity, ServedCounts

    fields = []
    for order in (["srv-male", "srv-female"], ["srv-female", "srv-male"]):
        c = ServedCounts()
        for name in order + ["srv-z", "srv-z"]:
            c.model[name] += 1
            c.template_tokens[f"<{name}>"] += 1
        fields.append(c.manifest_fields())
        ident = RunIdentity(lambda msg: None)
        ident.counts["target"] = c
        c.responses = c.responses_with_template_tokens = 4
        fields.append(ident.warnings())
    assert fields[0] == fields[2] and fields[1] == fields[3]
    assert list(fields[0]["served"]["model"]) == ["srv-z", "srv-female", "srv-male"]


def test_memo_rows_read_back_as_json_dumps_and_refuse_what_json_does_not_give_back():
    """_encode's rows (written by pydantic-core's serializer) read back as json.dumps's text does
    (compact, NaN as a literal, floats bit for bit); a numpy integer is refused (the pair is then
    simply not memoised)."""
    import json

    import numpy as np

    from lmra.audit.memo import _encode
    from lmra.runfolder import json_value
    from lmra.generate import Response

    def resp(name: str, text: str) -> Response:
        return Response(prompt_id="p1", domain="d", task="t", comparison="c", group="g", name=name, sample=0,
                        seed=2 ** 31 - 1, text=text, scrubbed=text, finish_reason="stop")

    row = {"pair_id": "x", "h": float("nan"), "q_F": 0.1 + 0.2, "q_R": 1e-05, "valid": True, "error": None,
           "order1": {"probs": {"A": 1 / 3, "B": 2 / 3}, "raw_texts": ["é “x” \u2028 \\"]}, "labels": ("A", "B")}
    out = ((resp("Ann", "é ✓\n\"q\""), ("ok", 0.2), None), (resp("Bob", "b"), None, "err"), row, [{"c": 1.0}])
    calls = [["judge", 10, 1, "m", None, []]]
    text = _encode(out, calls)
    value = {"a": [vars(out[0][0]), ("ok", 0.2), None], "b": [vars(out[1][0]), None, "err"], "row": row,
             "quality": [{"c": 1.0}], "calls": calls}
    back, expected = json_value(text), json.loads(json.dumps(value, allow_nan=True))
    assert json.dumps(back) == json.dumps(expected)  # the same values, floats bit for bit (NaN too)
    assert "NaN" in text and "\n" not in text and "é" in text
    assert _encode(((out[0][0], None, None), out[1], row | {"n": np.int64(3)}, []), calls) is None



def test_the_memo_is_asked_once_per_pair_and_replays_without_tasks(tmp_path, monkeypatch):
    """A re-run with more prompts: each pair's key is computed and looked up once (a hit is
    replayed where the chain would start, a miss goes to its chain with the key), and the
    replayed pairs start no asyncio task of their own."""
    import asyncio

    from lmra.audit import memo as memo_mod
    from lmra.cache import CallCache

    small = _config(tmp_path, quality={"enabled": False}, judge2=None, prompts_per_task=2)
    _run(small, tmp_path / "small")
    big = small.model_copy(update={"prompts_per_task": 4})
    keys, gets, tasks = [], [], [0]
    real_key, real_get, real_ensure = memo_mod.PairMemo.pair_key, CallCache.memo_get, asyncio.ensure_future
    monkeypatch.setattr(memo_mod.PairMemo, "pair_key", lambda self, a, b: keys.append(1) or real_key(self, a, b))
    monkeypatch.setattr(CallCache, "memo_get", lambda self, k: gets.append(k) or real_get(self, k))

    turns = [0]

    def counting(coro, **kw):
        name = getattr(getattr(coro, "cr_code", None), "co_name", "")
        tasks[0] += name == "pair_chain"
        turns[0] += name == "loop_turn"
        return real_ensure(coro, **kw)

    monkeypatch.setattr(asyncio, "ensure_future", counting)
    res = _run(big, tmp_path / "big")
    memo = res.manifest["pair_memo"]
    n_pairs = len(keys)  # placebo pairs included
    assert 0 < memo["hits"] < res.summary["n_pairs_total"] < n_pairs
    assert len(gets) == len(set(gets)) == n_pairs
    assert tasks[0] == n_pairs - memo["hits"]  # a chain task per pair the memo did not hold
    tasks[0] = turns[0] = 0
    from lmra.audit import pipeline

    monkeypatch.setattr(pipeline, "REPLAY_BATCH", 1)  # the event loop gets a turn after every replay
    again = _run(big, tmp_path / "again")  # every memoisable pair replayed
    hits = again.manifest["pair_memo"]["hits"]
    assert memo["hits"] < hits <= n_pairs  # (pairs with a failed call are not memoised)
    assert tasks[0] == n_pairs - hits
    assert turns[0] >= 2
    assert (again.run_dir / "per_task.csv").read_bytes() == (res.run_dir / "per_task.csv").read_bytes()


def test_a_replay_that_fails_is_raised_once_the_started_chains_settle(tmp_path, monkeypatch):
    from lmra.audit import memo as memo_mod

    cfg = _config(tmp_path, quality={"enabled": False}, judge2=None, placebo={"share": 0.0})
    _run(cfg, tmp_path / "first")
    real = memo_mod.PairMemo._replay
    seen = [0]

    def failing(self, text, progress):
        seen[0] += 1
        if seen[0] == 3:
            raise OSError("disk full while replaying")
        return real(self, text, progress)

    monkeypatch.setattr(memo_mod.PairMemo, "_replay", failing)
    with pytest.raises(OSError, match="disk full while replaying"):
        _run(cfg, tmp_path / "second")
    assert seen[0] == 3  # no pair replayed after the failure


def test_a_replay_counts_a_priced_model_shared_by_two_roles_as_the_calls_did(tmp_path):
    """The replay counts a pair's calls of one role at once and a model's costs in the calls' order
    (issue 14): with a price table and one provider and model behind the target and the LMRA, its
    ledger (calls, tokens, the saved cost to the last bit) is the same as a re-run without the memo's."""
    prices = tmp_path / "prices.toml"
    prices.write_text('[prices.shared]\n"*" = { input = 0.37, output = 1.13 }\n', encoding="utf-8")
    cfg = _config(tmp_path, prices=str(prices), judge2=None)
    target, judge = _Target(), _Judge()
    target.name = judge.name = "shared"
    _run(cfg, tmp_path / "first", target=target, judge=judge)
    memo = _run(cfg, tmp_path / "memo", target=target, judge=judge)
    off = _run(cfg, tmp_path / "off", target=target, judge=judge, memo=False)
    assert memo.manifest["pair_memo"]["hits"] > 0
    b1, b2 = memo.manifest["budget"], off.manifest["budget"]
    assert b1 == b2 and any(r["calls_cached"] > 0 and r["cost_saved_usd"] for r in b1["per_model"]), b1
