"""Shards and merge (issue 15, goal 2): ``lmra audit --shard I/N`` audits a deterministic 1/N of
the prompts, and ``lmra merge`` builds one run whose tables, intervals and judge status equal
the unsharded run's, on scripted doubles with every kind of outcome (classification, filter
removals and failures, N per task, placebo, refusals, failed calls, quality, a second LMRA)."""

from __future__ import annotations

import json
import shutil

import pandas as pd
import pytest

from lmra import Audit
from lmra.config import AuditConfig
from lmra.merge import merge_shards
from lmra.runfolder import load_run
from lmra.shard import Shard, parse_shard, shard_of
from test_pipeline import FlakyTarget, RecordingJudge, _prompts

TABLES = ("per_task.csv", "per_domain.csv", "refusals.csv", "quality.csv", "judges.csv", "placebo.csv")
#: summary.json entries that describe the run folder or the calls, not the audit's results
NOT_RESULTS = ("run_dir", "gates", "n_shards", "shards_with_failed_calls")
#: judge_status keys saying how many canary answers the call cache served (none in a merged run)
CACHE_PROVENANCE = ("n_answers", "n_answers_cached", "shard")


def _cfg(tmp_path, out: str, **kw) -> AuditConfig:
    names, prompts = _prompts(tmp_path)
    base = dict(name="audit", prompts=str(prompts), names=str(names), prompts_per_task=6, samples_per_prompt=2,
                output_dir=str(tmp_path / out), cache=str(tmp_path / f"{out}.sqlite"), concurrency=8,
                placebo={"share": 0.25}, quality={"enabled": True, "criteria": ["clarity", "completeness"]},
                judge2={"provider": "llamacpp"})
    return AuditConfig.model_validate(base | kw)


def _audit(cfg: AuditConfig, shard: Shard | None = None):
    audit = Audit(cfg, target=FlakyTarget([]), judge=RecordingJudge([]),
                  judge2=RecordingJudge([], model_id="j2") if cfg.judge2 is not None else None)
    audit.shard = shard
    if shard is not None:
        audit.run_dir = audit.run_dir.with_name(f"{audit.run_dir.name}-shard{shard.index}of{shard.count}")
    return audit.run()


def _sharded(tmp_path, n: int = 3, **kw) -> list:
    """The N shards of the audit, each with its own cache (as on separate machines)."""
    return [_audit(_cfg(tmp_path, "shards", cache=str(tmp_path / f"cache{i}.sqlite"), **kw), Shard(i, n))
            for i in range(1, n + 1)]


def _assert_same_results(whole, merged, *, filter_order: bool = True) -> None:
    """The merged run's tables, summary and records equal the unsharded run's (``filter_order``:
    also the order of ``filtered_prompts.jsonl``, else the same lines)."""
    for name in TABLES:
        a, b = whole.run_dir / name, merged.run_dir / name
        assert a.is_file() == b.is_file(), name
        if a.is_file():
            assert a.read_bytes() == b.read_bytes(), name  # identical values, intervals included
    s1, s2 = (json.loads((r.run_dir / "summary.json").read_text()) for r in (whole, merged))
    for s in (s1, s2):  # where the canary answers came from (the call cache or not): provenance, not a result
        for k in CACHE_PROVENANCE:
            (s.get("judge_status") or {}).pop(k, None)
    assert {k: v for k, v in s1.items() if k not in NOT_RESULTS} == {k: v for k, v in s2.items() if k not in NOT_RESULTS}
    for name in ("responses.jsonl", "placebo_responses.jsonl", "quality_ratings.jsonl", "judge_check.json",
                 "judge_check_ratings.jsonl", "prompts.jsonl", "classifications.jsonl"):
        a, b = whole.run_dir / name, merged.run_dir / name
        assert a.is_file() == b.is_file(), name
        if a.is_file():
            assert a.read_bytes() == b.read_bytes(), name
    lines = [(r.run_dir / "filtered_prompts.jsonl").read_text().splitlines() for r in (whole, merged)]
    assert lines[0] == lines[1] if filter_order else sorted(lines[0]) == sorted(lines[1])
    # the per-pair rows as stored (ratings.parquet), in the same order
    pd.testing.assert_frame_equal(load_run(whole.run_dir).ratings, load_run(merged.run_dir).ratings)


def test_shards_are_a_stable_partition_by_prompt_id():
    ids = [f"p{i}" for i in range(3000)]
    owners = [shard_of(i, 3) for i in ids]
    assert set(owners) == {1, 2, 3} and all(700 < owners.count(k) < 1300 for k in (1, 2, 3))
    assert [shard_of(i, 3) for i in reversed(ids)] == owners[::-1]  # independent of the order
    # SHA-256 of the id, not Python's salted hash: the same on every machine and every run
    assert shard_of("p0", 3) == int("0x" + __import__("hashlib").sha256(b"p0").hexdigest(), 16) % 3 + 1
    assert sum(Shard(k, 3).holds("p17") for k in (1, 2, 3)) == 1
    assert parse_shard(" 2/8 ") == Shard(2, 8)
    for bad in ("0/3", "4/3", "3", "a/b", "1/0", ""):
        with pytest.raises(Exception) as exc:
            parse_shard(bad)
        assert exc.value.field == "--shard"


def _merge_shards(paths, out_dir, spooled: bool, monkeypatch):
    """merge_shards, its pairs and responses held in memory or (``spooled``: the spool threshold
    lowered to 1 pair, as a night of 100,000 pairs or more) spooled one shard at a time."""
    import lmra.audit
    from lmra import merge

    seen = []
    real = merge._spool_pairs

    def spool_pairs(*args, **kwargs):
        seen.append(True)
        return real(*args, **kwargs)

    monkeypatch.setattr(merge, "_spool_pairs", spool_pairs)
    with monkeypatch.context() as m:
        m.setattr(lmra.audit, "SPOOL_MIN_PAIRS", 1 if spooled else lmra.audit.SPOOL_MIN_PAIRS)
        merged = merge_shards(paths, out_dir=out_dir)
    assert bool(seen) == spooled
    assert not list(merged.run_dir.glob(".*spool*"))  # the spools are gone
    return merged


@pytest.mark.parametrize("spooled", [False, True], ids=["in-memory", "spooled"])
def test_merged_shards_equal_the_unsharded_run_with_a_per_task_limit(tmp_path, spooled, monkeypatch):
    """prompts_per_task = 6 and a placebo: 'selection' mode (every shard selects over all
    prompts, audits its share). Tables, intervals, judge status, the per-pair rows and the
    summary equal the unsharded run's; calls are summed. The same when the merge spools the
    shards' pairs and responses (a large night: known since s45, the merge held them all)."""
    whole = _audit(_cfg(tmp_path, "whole"))
    shards = _sharded(tmp_path)
    assert all(json.loads((s.run_dir / "shard.json").read_text())["mode"] == "selection" for s in shards)
    audited = [set(s.ratings["prompt_id"]) for s in shards]
    assert all(audited) and not (audited[0] & audited[1] or audited[0] & audited[2] or audited[1] & audited[2])
    assert set().union(*audited) == set(whole.ratings["prompt_id"])
    merged = _merge_shards([s.run_dir for s in reversed(shards)], tmp_path / "merged", spooled, monkeypatch)
    _assert_same_results(whole, merged)
    s = merged.summary
    assert s["n_filtered_lmra"] > 0 and s["n_filtered_unlabelled"] > 0 and s["n_pairs_failed"] > 0
    assert s["n_pairs_refusal"] > 0 and s["n_classified"] == 6 and s["placebo"]
    assert merged.manifest["status"] == whole.manifest["status"]
    assert merged.manifest["judge_status"] == whole.manifest["judge_status"]
    assert merged.manifest["calls"]["fresh"] == sum(x.manifest["calls"]["fresh"] for x in shards)
    assert [x["shard"] for x in merged.manifest["shards"]] == ["1/3", "2/3", "3/3"]
    assert not (merged.run_dir / "shard.json").exists()
    # per model, the shards' calls summed into one row; each shard's plan and concurrency listed
    per_model = merged.manifest["budget"]["per_model"]
    keys = [(m["provider"], m["model"]) for m in per_model]
    assert len(keys) == len(set(keys))
    for m in per_model:
        assert m["calls_fresh"] == sum(r["calls_fresh"] for x in shards for r in x.manifest["budget"]["per_model"]
                                       if (r["provider"], r["model"]) == (m["provider"], m["model"]))
    assert [p["shard"] for p in merged.manifest["planned_calls"]["shards"]] == ["1/3", "2/3", "3/3"]
    assert merged.manifest["planned_calls"]["shards"][1]["pairs"] == shards[1].manifest["planned_calls"]["pairs"]
    assert [c["shard"] for c in merged.manifest["concurrency"]["shards"]] == ["1/3", "2/3", "3/3"]
    # the served-model record is the shards' summed (break-it finding: the merged run kept shard 1's)
    for role in ("target", "judge"):
        assert merged.manifest[role]["served"]["responses"] == sum(x.manifest[role]["served"]["responses"]
                                                                   for x in shards) > 0
    # the target's answers are the unsharded run's (the judge's are more: every shard asks the canaries)
    assert merged.manifest["target"]["served"]["responses"] == whole.manifest["target"]["served"]["responses"]


@pytest.mark.parametrize("spooled", [False, True], ids=["in-memory", "spooled"])
def test_merged_shards_equal_the_unsharded_run_auditing_every_prompt(tmp_path, spooled, monkeypatch):
    """prompts_per_task = 0 and no placebo: 'prompts' mode, each shard classifies and filters
    only its own prompts (no call is made twice); a redacted run (responses kept as lengths)."""
    kw = dict(prompts_per_task=0, placebo={"share": 0.0}, samples_per_prompt=1, judge2=None, redact=True,
              quality={"enabled": False})  # (the per-task-limit test covers quality, a second LMRA, no redaction)
    whole = _audit(_cfg(tmp_path, "whole", **kw))
    shards = _sharded(tmp_path, **kw)
    assert all(json.loads((s.run_dir / "shard.json").read_text())["mode"] == "prompts" for s in shards)
    # classification and filter calls are not repeated: the shards together make the unsharded
    # run's calls, plus the judge check's in each further shard
    extra = sum(s.manifest["calls"]["fresh"] for s in shards) - whole.manifest["calls"]["fresh"]
    assert extra == (len(shards) - 1) * _canary_calls(whole)
    merged = _merge_shards([s.run_dir for s in shards], tmp_path / "merged", spooled, monkeypatch)
    _assert_same_results(whole, merged, filter_order=False)  # removals: lexical first, then in file order
    assert merged.summary["n_classified"] == 6 and merged.summary["n_filtered"] > 0


def _canary_calls(run) -> int:
    """Fresh LMRA calls of the judge check (each shard rates the canaries itself)."""
    rows = [json.loads(line) for line in (run.run_dir / "judge_check_ratings.jsonl").read_text().splitlines()]
    return 2 * len(rows)


def test_merge_refuses_shards_that_do_not_make_one_audit(tmp_path, capsys):
    """Missing, repeated, foreign-config and unfinished shards exit 2 naming folder and field."""
    from lmra.cli import main

    cfg = dict(prompts_per_task=2, placebo={"share": 0.0}, quality={"enabled": False}, judge2=None)
    shards = _sharded(tmp_path, **cfg)
    d = [str(s.run_dir) for s in shards]

    def refused(*argv) -> str:
        capsys.readouterr()
        assert main(["merge", *argv, "--out-dir", str(tmp_path / "m")]) == 2
        err = " ".join(capsys.readouterr().err.split())
        assert "Traceback" not in err
        return err

    assert "shard 2/3 is missing" in refused(d[0], d[2])
    assert "option --name: 'a/b'" in refused(*d, "--name", "a/b")  # the option named, not the shard's config
    err = refused(d[0], d[1], d[2], d[1])
    assert "shard 2/3 is given twice" in err and shards[1].run_dir.name in err
    other = _audit(_cfg(tmp_path, "other", seed=7, **cfg), Shard(2, 3))
    err = refused(d[0], str(other.run_dir), d[2])
    assert "config differs" in err and "'seed'" in err and other.run_dir.name in err
    four = _audit(_cfg(tmp_path, "four", cache=str(tmp_path / "cache1.sqlite"), **cfg), Shard(2, 4))
    err = refused(d[0], str(four.run_dir), d[2])
    assert "shard count 4" in err and "shard.json" in err
    whole = _audit(_cfg(tmp_path, "whole", **cfg))
    assert "not a shard" in refused(str(whole.run_dir), d[1], d[2])
    broken = tmp_path / "broken"
    shutil.copytree(shards[2].run_dir, broken)
    man = json.loads((broken / "manifest.json").read_text())
    (broken / "manifest.json").write_text(json.dumps(man | {"status": "interrupted"}))
    (broken / "summary.json").unlink()
    err = refused(d[0], d[1], str(broken))
    assert "not a finished lmra run folder" in err and "broken" in err
    assert not (tmp_path / "m").exists() or not any((tmp_path / "m").glob("*/summary.json"))


def _clean_run(tmp_path, run_dir, shard: Shard | None = None, seed: int = 1):
    """A clean audit of 60 prompts (tests/monitor_helpers.py's scripted target and LMRA)."""
    from doubles import ScriptedJudge
    from monitor_helpers import TaskTarget, phrase_verdict, write_inputs

    names, prompts = write_inputs(tmp_path / "inputs", 60)
    cfg = AuditConfig.model_validate(dict(
        name="nightly", prompts=str(prompts), names=str(names), prompts_per_task=0, seed=seed,
        output_dir=str(tmp_path / "reports"), cache=str(tmp_path / f"cache-{run_dir.name}.sqlite"), concurrency=8,
        judge_check={"enabled": False}))
    audit = Audit(cfg, target=TaskTarget({"write a story": 0.3, "career advice": 0.1}),
                  judge=ScriptedJudge(phrase_verdict, position_bias=0.2), run_dir=run_dir)
    audit.shard = shard
    return audit.run()


def test_cli_shard_option_and_a_merged_run_in_history_and_check(tmp_path, capsys):
    """``--shard`` is checked (exit 2 naming it); the merged run is registered, landed in the
    warehouse, and ``lmra history``/``check`` take it like any run — while the shards, written
    into the same reports folder, never appear in the history."""
    from lmra.cli import main

    for bad in ("0/3", "4/3", "x"):
        with pytest.raises(SystemExit) as exc:
            main(["audit", "--shard", bad])
        assert exc.value.code == 2
        assert "--shard" in capsys.readouterr().err
    for extra in (["--baseline", "last"], ["--gate", "max_ci_high=0.1"]):  # the merged run is checked and gated
        assert main(["audit", "--shard", "1/3", "--output-dir", str(tmp_path / "never"), *extra]) == 2
        assert "--shard" in capsys.readouterr().err and not (tmp_path / "never").exists()
    out = tmp_path / "reports"
    _clean_run(tmp_path, out / "base", seed=0)  # an unsharded night as the baseline
    shards = [_clean_run(tmp_path, out / f"shard{i}", Shard(i, 3)) for i in (1, 2, 3)]
    capsys.readouterr()
    assert main(["merge", *[str(s.run_dir) for s in shards], "--no-report"]) == 0
    assert "Merged 3 shards" in capsys.readouterr().out
    merged = next(p for p in out.iterdir() if p.name.endswith("-nightly"))
    assert len(load_run(merged).ratings) == 60 and json.loads((merged / "manifest.json").read_text())["shards"]
    assert any((out / "warehouse" / "per_task" / "run=nightly").glob("date=*/" + merged.name + ".parquet"))
    assert main(["history", "--reports-dir", str(out), "--json"]) == 0
    ids = [r["run_id"] for r in json.loads(capsys.readouterr().out)["runs"]]
    assert sorted(ids) == sorted(["base", merged.name])  # the shards are not nights
    assert main(["check", merged.name, "--baseline", "base", "--reports-dir", str(out)]) in (0, 3)
    captured = capsys.readouterr()
    assert "error" not in captured.err.lower() and "Traceback" not in captured.err
    # a shard is not a night: checking, reporting or pinning one is refused, naming its shard.json;
    # exporting one warns (fresh-user finding: a quarter of an audit checked "No regression")
    shard1 = str(shards[0].run_dir)
    for argv in (["check", shard1, "--baseline", "base", "--reports-dir", str(out)],
                 ["check", merged.name, "--baseline", shard1, "--reports-dir", str(out)],
                 ["report", shard1, "--reports-dir", str(out)], ["pin", shard1, "--reports-dir", str(out)]):
        assert main(argv) == 2, argv
        err = capsys.readouterr().err
        assert "one shard of a sharded audit" in err and "shard.json" in err and "Traceback" not in err
    assert main(["export", shard1, "--format", "csv", "--out", str(tmp_path / "exp")]) == 0
    assert "one shard of a sharded audit" in capsys.readouterr().err
    # named by its run id as by its path (review finding: the id went past the refusal, and a
    # shard could be pinned as the baseline)
    shard_id = shards[0].run_dir.name
    for argv in (["check", shard_id, "--baseline", "base", "--reports-dir", str(out)],
                 ["pin", shard_id, "--reports-dir", str(out)], ["report", shard_id, "--reports-dir", str(out)]):
        assert main(argv) == 2, argv
        assert "one shard of a sharded audit" in capsys.readouterr().err
    import sqlite3

    with sqlite3.connect(out / "history.sqlite") as db:
        assert not db.execute("SELECT 1 FROM pins WHERE run_id = ?", (shard_id,)).fetchall()
        assert not db.execute("SELECT 1 FROM runs WHERE run_id = ?", (shard_id,)).fetchall()
    # a shard is a fair pilot sample for lmra plan
    assert main(["plan", "--rate", "0.3", "--pilot", shard1, "--sims", "200", "--reports-dir", str(out)]) == 0
    capsys.readouterr()


def test_merged_budget_costs_are_unknown_when_a_shards_are_whatever_the_order():
    """Review finding: the merged top-level cost kept the first shard's value and skipped a later
    shard's None (an unpriced model), so the console printed a cost the per-model rows did not."""
    from lmra.merge import _budget_summed

    priced = {"cost_usd": 0.5, "calls_used": 3,
              "per_model": [{"provider": "p", "model": "m", "calls_fresh": 3, "cost_usd": 0.5}]}
    unpriced = {"cost_usd": None, "calls_used": 2,
                "per_model": [{"provider": "p", "model": "m", "calls_fresh": 2, "cost_usd": None}]}
    for order in ([priced, unpriced], [unpriced, priced]):
        b = _budget_summed(order)
        assert b["cost_usd"] is None and b["calls_used"] == 5
        (row,) = b["per_model"]
        assert row["calls_fresh"] == 5 and row["cost_usd"] is None
    both = _budget_summed([priced, priced])
    assert both["cost_usd"] == 1.0 and both["per_model"][0]["cost_usd"] == 1.0
    old = {"calls_used": 1, "per_model": [{"provider": "p", "model": "m", "calls_fresh": 1}]}  # no cost recorded
    assert _budget_summed([priced, old])["per_model"][0]["cost_usd"] is None


def test_more_shards_than_prompts_some_empty_some_all_failed(tmp_path):
    """'prompts' mode with N = 8 over 12 prompts: shards that hold no prompt (or only prompts the
    filter removes) finish with no pairs instead of exiting 2, shards whose every pair failed have
    no order1 column in ratings.parquet — and the merge still equals the unsharded run, the
    per-pair columns in the same order."""
    _cfg(tmp_path, "x")  # writes the 66 prompts; audit the first 12
    few = tmp_path / "few.jsonl"
    few.write_text("\n".join((tmp_path / "prompts.jsonl").read_text().splitlines()[:12]) + "\n")
    kw = dict(prompts=str(few), prompts_per_task=0, placebo={"share": 0.0})
    whole = _audit(_cfg(tmp_path, "whole", **kw))
    shards = _sharded(tmp_path, n=8, **kw)
    assert sum(len(s.ratings) == 0 for s in shards) >= 2
    assert any(len(s.ratings) and "order1" not in s.ratings.columns for s in shards)
    merged = merge_shards([s.run_dir for s in shards], out_dir=tmp_path / "merged")
    _assert_same_results(whole, merged, filter_order=False)


def test_merge_refuses_shards_that_read_other_files_or_a_broken_shard_record(tmp_path, capsys):
    """A prompt file refreshed between two shards' runs (same path, same config) is refused
    (exit 2 naming the shard's shard.json and 'inputs_sha256'), as is a shard.json that is not
    a shard's record — never a traceback, no merged run folder."""
    from lmra.cli import main

    _cfg(tmp_path, "x")
    few = tmp_path / "few.jsonl"
    lines = (tmp_path / "prompts.jsonl").read_text().splitlines()[:12]
    few.write_text("\n".join(lines) + "\n")
    kw = dict(prompts=str(few), prompts_per_task=0, placebo={"share": 0.0}, judge2=None,
              quality={"enabled": False})
    shards = [_audit(_cfg(tmp_path, "s", cache=str(tmp_path / f"c{i}.sqlite"), **kw), Shard(i, 3)) for i in (1, 2)]
    few.write_text("\n".join(lines[:-1] + [lines[-1].replace("Prompt number", "Refreshed prompt")]) + "\n")
    shards.append(_audit(_cfg(tmp_path, "s", cache=str(tmp_path / "c3.sqlite"), **kw), Shard(3, 3)))
    d = [str(s.run_dir) for s in shards]

    def refused(*argv) -> str:
        capsys.readouterr()
        assert main(["merge", *argv, "--out-dir", str(tmp_path / "m"), "--no-report"]) == 2
        err = " ".join(capsys.readouterr().err.split())
        assert "Traceback" not in err
        return err

    err = refused(*d)
    assert "inputs_sha256" in err and "other input files" in err and shards[2].run_dir.name in err
    (shards[2].run_dir / "shard.json").write_text("[3, 3]")
    err = refused(*d)  # changed since the shard finished (lmra.digests) …
    assert "shard.json: changed or damaged since the run finished" in err
    manifest_path = shards[2].run_dir / "manifest.json"  # … and in a folder without digests, not a record
    manifest = json.loads(manifest_path.read_text())
    del manifest["files"]["shard.json"]
    manifest_path.write_text(json.dumps(manifest))
    err = refused(*d)
    assert "shard.json" in err and "prompt_positions" in err
    for positions in ([1], {"x": "y"}, {"p1": -1}):  # break-it finding: a traceback
        (shards[2].run_dir / "shard.json").write_text(json.dumps({"count": 3, "index": 3,
                                                                  "prompt_positions": positions}))
        err = refused(*d)
        assert "field 'prompt_positions': 'prompt_positions' must map each prompt id to its line position" in err
    for value in ("[]", "null", '"x"', "5"):  # break-it finding: an AttributeError traceback, exit 1
        manifest_path.write_text(value)
        err = refused(*d)
        assert "manifest.json" in err and shards[2].run_dir.name in err
    assert not (tmp_path / "m").exists()


def test_merge_skips_the_killed_folder_of_a_re_run_shard(tmp_path, capsys):
    """A shard killed and re-run leaves two folders; 'lmra merge reports/*-shard*' (the documented
    glob) gets both: the unfinished one is skipped (said on stdout) and the merge succeeds; without
    the re-run's folder the killed one is refused (exit 2) with what to do."""
    from lmra.cli import main

    cfg = dict(prompts_per_task=0, placebo={"share": 0.0}, quality={"enabled": False}, judge2=None)
    shards = _sharded(tmp_path, n=2, **cfg)
    killed = tmp_path / "shards" / (shards[1].run_dir.name + "-killed")
    shutil.copytree(shards[1].run_dir, killed)
    man = json.loads((killed / "manifest.json").read_text())
    (killed / "manifest.json").write_text(json.dumps(man | {"status": "interrupted"}))
    (killed / "summary.json").unlink()
    capsys.readouterr()
    status = main(["merge", str(shards[0].run_dir), str(shards[1].run_dir), "--no-report", "--out-dir",
                   str(tmp_path / "none")])  # the reference: the same merge without the killed folder
    assert status in (0, 1, 5)  # (the scripted doubles fail some calls: partial, exit 1)
    capsys.readouterr()
    assert main(["merge", str(shards[0].run_dir), str(killed), "--out-dir", str(tmp_path / "m")]) == 2
    err = " ".join(capsys.readouterr().err.split())
    assert "not a finished lmra run folder" in err and "--shard 2/2" in err and "Traceback" not in err
    assert main(["merge", str(killed), str(shards[0].run_dir), str(shards[1].run_dir), "--no-report",
                 "--out-dir", str(tmp_path / "m")]) == status
    out = " ".join(capsys.readouterr().out.split())
    assert f"Skipped {killed}" in out and "shard 2/2" in out
    merged, ref = (next(p.glob("*-audit")) for p in (tmp_path / "m", tmp_path / "none"))
    assert [x["run_id"] for x in json.loads((merged / "manifest.json").read_text())["shards"]] == \
        [shards[0].run_dir.name, shards[1].run_dir.name]
    assert (merged / "per_task.csv").read_bytes() == (ref / "per_task.csv").read_bytes()


def test_the_merged_run_starts_at_its_earliest_shard_across_time_zones():
    """Shards on hosts in other time zones: the merged run's start (and so its warehouse date)
    is the earliest instant, not the smallest text."""
    from lmra.merge import _earliest

    assert _earliest(["2026-12-01T23:30:00-08:00", "2026-12-02T07:20:00+00:00", None]) == "2026-12-02T07:20:00+00:00"
    assert _earliest(["2026-12-02T07:40:00+00:00", "2026-12-01T23:30:00-08:00"]) == "2026-12-01T23:30:00-08:00"
    assert _earliest([None, "not a time"]) is None


def test_a_merged_run_whose_every_pair_failed_is_failed_like_an_audit(tmp_path, capsys):
    """Every target call failed in every shard: 'lmra merge' exits 1 saying so and, as 'lmra
    audit' does with a failed run, neither enters it in the history nor adds it to the warehouse."""
    from lmra.cli import main
    from lmra.providers import ProviderError

    class DownTarget(FlakyTarget):
        async def complete(self, request):
            raise ProviderError("scripted outage")

    kw = dict(prompts_per_task=0, placebo={"share": 0.0}, quality={"enabled": False}, judge2=None)
    shards = []
    for i in (1, 2):
        cfg = _cfg(tmp_path, "shards", cache=str(tmp_path / f"c{i}.sqlite"), **kw)
        audit = Audit(cfg, target=DownTarget([]), judge=RecordingJudge([]))
        audit.shard = Shard(i, 2)
        audit.run_dir = audit.run_dir.with_name(f"{audit.run_dir.name}-shard{i}of2")
        shards.append(audit.run())
    assert {s.manifest["status"] for s in shards} == {"failed"}
    capsys.readouterr()
    out = tmp_path / "m"
    assert main(["merge", *[str(s.run_dir) for s in shards], "--out-dir", str(out), "--no-report"]) == 1
    cap = capsys.readouterr()
    assert "failure:" in cap.err and "pairs failed" in " ".join(cap.out.split()) and "Traceback" not in cap.err
    merged = next(out.glob("*-audit"))
    assert json.loads((merged / "manifest.json").read_text())["status"] == "failed"
    assert not (out / "warehouse").exists() and not (out / "history.sqlite").exists()


def test_merge_of_a_stale_shard_names_the_shard_command_that_finishes_it(tmp_path, capsys):
    """A shard killed hard (manifest 'running', no lock holder: stale) is refused with exit 2 and
    told to re-run that shard ('lmra audit --shard 2/2'), not the whole audit."""
    from lmra.cli import main

    cfg = dict(prompts_per_task=0, placebo={"share": 0.0}, quality={"enabled": False}, judge2=None)
    shards = _sharded(tmp_path, n=2, **cfg)
    stale = tmp_path / "shards" / (shards[1].run_dir.name + "-stale")
    shutil.copytree(shards[1].run_dir, stale)
    man = json.loads((stale / "manifest.json").read_text())
    (stale / "manifest.json").write_text(json.dumps(man | {"status": "running"}))
    (stale / "summary.json").unlink()
    capsys.readouterr()
    assert main(["merge", str(shards[0].run_dir), str(stale), "--out-dir", str(tmp_path / "m")]) == 2
    err = " ".join(capsys.readouterr().err.split())
    assert "stale" in err.lower() or "killed" in err
    assert "--shard 2/2" in err and "run the same audit again" not in err and "Traceback" not in err


@pytest.mark.parametrize("limit", [0, 6])
def test_a_shards_planned_calls_are_its_own_share(tmp_path, limit):
    """The plan of a shard bounds its own pairs and calls (prompts it holds, per-task limit),
    not the whole audit's; the shards' bounds cover the unsharded plan and each bounds what the
    shard really made."""
    cfg = _cfg(tmp_path, "plan", prompts_per_task=limit, placebo={"share": 0.0}, judge2=None)
    whole = Audit(cfg, target=FlakyTarget([]), judge=RecordingJudge([]))
    inputs = whole.load_inputs()
    full = whole.planned_calls(inputs)
    plans = []
    for i in (1, 2, 3):
        a = Audit(cfg, target=FlakyTarget([]), judge=RecordingJudge([]))
        a.shard = Shard(i, 3)
        plans.append(a.planned_calls(inputs))
    assert all(p["pairs"] < full["pairs"] for p in plans)
    assert sum(p["pairs"] for p in plans) >= full["pairs"]
    held = [sum(1 for p in inputs.prompts if Shard(i, 3).holds(p.id)) for i in (1, 2, 3)]
    per_prompt = len(cfg.comparisons) * cfg.samples_per_prompt
    assert all(p["pairs"] <= h * per_prompt for p, h in zip(plans, held))
    if not limit:  # 'prompts' mode: every prompt of the shard is rated; nothing else
        assert [p["pairs"] for p in plans] == [h * per_prompt for h in held]
    runs = _sharded(tmp_path, n=3, prompts_per_task=limit, placebo={"share": 0.0}, judge2=None)
    for run, plan in zip(runs, plans):
        man = json.loads((run.run_dir / "manifest.json").read_text())
        assert man["planned_calls"]["pairs"] == plan["pairs"]
        made = man["calls"]["fresh"] + man["calls"]["cached"] + man["calls"]["failed"]
        assert 0 < made <= plan["target"] + plan["judge"]  # a bound on what the shard really made


def test_merged_prompts_mode_shards_count_the_prompts_outside_the_tasks_as_the_unsharded_run(tmp_path):
    """'prompts' mode shards select from their own prompts: the merge adds their counts of the
    prompts left out (review finding: it took the first shard's)."""
    from test_pipeline import TASKS

    kw = dict(prompts_per_task=0, placebo={"share": 0.0}, samples_per_prompt=1, judge2=None,
              quality={"enabled": False}, tasks=[TASKS[0], TASKS[1]])
    whole = _audit(_cfg(tmp_path, "whole", **kw))
    shards = _sharded(tmp_path, **kw)
    assert {json.loads((s.run_dir / "shard.json").read_text())["mode"] for s in shards} == {"prompts"}
    merged = merge_shards([s.run_dir for s in shards], out_dir=tmp_path / "merged")
    n = whole.summary["n_prompts_not_selected"]
    assert n > 0 and sum(s.summary["n_prompts_not_selected"] for s in shards) == n
    assert merged.summary["n_prompts_not_selected"] == n and merged.summary["n_prompts_over_limit"] == 0


def test_merged_pair_memo_counts_are_the_shards_summed(tmp_path):
    """New-user finding: a merged run said "(6 pairs replayed from the pair memo)" — the first
    shard's count — where the shards had replayed 6 + 4."""
    kw = dict(prompts_per_task=0, placebo={"share": 0.0}, samples_per_prompt=1, judge2=None,
              quality={"enabled": False})
    _sharded(tmp_path, 2, **kw)  # the first nights fill each shard's cache and pair memo
    again = _sharded(tmp_path, 2, **kw)  # re-run on those caches: pairs replayed from the memo
    hits = [s.manifest["pair_memo"]["hits"] for s in again]
    assert all(h > 0 for h in hits)
    merged = merge_shards([s.run_dir for s in again], out_dir=tmp_path / "merged")
    memo = json.loads((merged.run_dir / "manifest.json").read_text())["pair_memo"]
    assert memo["hits"] == sum(hits) and memo["enabled"] is True


class _Order2WithoutLogprobs(RecordingJudge):
    """A second LMRA with log-probabilities whose reverse-order stereotype answers come without
    them (then sampled): its pairs read ``sampled`` though it gives log-probabilities."""

    def __init__(self, *a, **kw):
        super().__init__(*a, **kw)
        self.seen: set = set()

    async def complete(self, request):
        from doubles import responses_in
        from lmra.providers.base import ChatResult

        text = request.messages[-1].content
        if request.options and "#### Response 1" in text and "criterion" not in text and "Prompt number" in text:
            r1, r2 = responses_in(request)
            if (r2, r1) in self.seen:
                return ChatResult(text="A", option_probs=None, provider=self.name)
            self.seen.add((r1, r2))
        return await super().complete(request)


def test_merged_second_lmra_keeps_its_combiner_when_its_pairs_read_sampled(tmp_path, monkeypatch):
    """Review finding: merge read whether the second LMRA gives log-probabilities from its first
    pair's method; a pair with one order sampled reads ``sampled``, so the merged run took it for
    a sampled LMRA, resolved 'auto' to 'mean' and its judge2 columns differed from the unsharded
    run's. The shards record it in manifest.json (judge2.supports_logprobs)."""
    import sys

    def audit_order2(cfg, shard=None):
        audit = Audit(cfg, target=FlakyTarget([]), judge=RecordingJudge([]),
                      judge2=_Order2WithoutLogprobs([], model_id="j2"))
        audit.shard = shard
        if shard is not None:
            audit.run_dir = audit.run_dir.with_name(f"{audit.run_dir.name}-shard{shard.index}of{shard.count}")
        return audit.run()

    monkeypatch.setattr(sys.modules[__name__], "_audit", audit_order2)
    kw = dict(placebo={"share": 0.0}, quality={"enabled": False})
    whole = audit_order2(_cfg(tmp_path, "whole", **kw))
    w = pd.read_parquet(whole.run_dir / "ratings.parquet")
    assert (w["judge2_method"] == "sampled").any() and json.loads(
        (whole.run_dir / "manifest.json").read_text())["judge2"]["supports_logprobs"] is True
    merged = merge_shards([s.run_dir for s in _sharded(tmp_path, **kw)], out_dir=tmp_path / "merged")
    assert (whole.run_dir / "judges.csv").read_text() == (merged.run_dir / "judges.csv").read_text()
    m = pd.read_parquet(merged.run_dir / "ratings.parquet").set_index("pair_id")["judge2_h"]
    pd.testing.assert_series_equal(m.reindex(w["pair_id"]).reset_index(drop=True), w["judge2_h"],
                                   check_names=False)


def test_an_interrupt_after_the_merged_folder_is_written_says_it_is_complete(tmp_path, capsys, monkeypatch):
    """Break-it finding: a SIGTERM after ``lmra merge`` had written the merged folder said "finished
    model calls are kept …; run the same command again to resume", and doing so wrote a second
    merged run of the same night. Now it says the folder is written and what to run for the steps
    after it, as ``lmra audit`` does."""
    from lmra.cli import main

    shards = _sharded(tmp_path, n=2, prompts_per_task=0, placebo={"share": 0.0}, quality={"enabled": False},
                      judge2=None)

    def stopped(*a, **kw):  # the signal comes while the merged run's console report is printed
        raise KeyboardInterrupt

    monkeypatch.setattr("lmra.report.console.render_audit", stopped)
    capsys.readouterr()
    assert main(["merge", *(str(s.run_dir) for s in shards), "--no-report", "--out-dir", str(tmp_path / "m")]) == 130
    err = " ".join(capsys.readouterr().err.split())
    merged = next((tmp_path / "m").glob("*-audit"))
    assert "after the run finished" in err and f"its folder {merged} is written" in err, err
    assert "re-running the merge is refused" in err and "to resume" not in err


def test_a_retried_merge_is_refused_and_a_check_of_a_night_against_its_twin_merge_tests_nothing(tmp_path, capsys):
    """Break-it finding: a merge killed after it had finished, retried by a job runner, wrote a second
    merged run of the same night, and ``lmra check latest --baseline last`` compared the night with its
    twin (+0.0000 on every task), "No regression detected", exit 0. Now a second merge of the same
    shard runs into the same folder is refused (exit 2, nothing written), and a check of two runs
    merged from the same shard runs (e.g. merged into two folders sharing a history) is refused too."""
    from lmra.cli import main

    out = tmp_path / "reports"
    _clean_run(tmp_path, out / "base", seed=0)
    shards = [_clean_run(tmp_path, out / f"shard{i}", Shard(i, 2)) for i in (1, 2)]
    dirs = [str(s.run_dir) for s in shards]
    assert main(["merge", *dirs, "--no-report"]) == 0
    (first,) = [p for p in out.iterdir() if p.name.endswith("-nightly")]
    capsys.readouterr()
    assert main(["merge", *dirs, "--no-report"]) == 2
    err = " ".join(capsys.readouterr().err.split())
    assert "merged already" in err and str(first) in err and "Traceback" not in err
    assert "give another --out-dir" in err and "remove its folder" not in err  # (a removed folder stays in the history)
    # (merged with --no-report: the steps after the folder are named — a merge killed there left them undone)
    assert f"'lmra warehouse add {first}'" in err and f"'lmra gate {first}'" in err
    assert [p for p in out.iterdir() if p.name.endswith("-nightly")] == [first]  # nothing written
    # a merge killed between its report.html and its warehouse step (fault break-it, s37): the
    # retry names the tables missing from the warehouse, not only a missing report
    (first / "report.html").write_text("<html></html>")
    landed = list((out / "warehouse" / "overall").rglob(f"{first.name}.parquet"))
    assert len(landed) == 1
    landed[0].unlink()
    capsys.readouterr()
    assert main(["merge", *dirs, "--no-report"]) == 2
    err = " ".join(capsys.readouterr().err.split())
    assert (f"its overall table is not in the warehouse, so the merge that wrote it may have stopped before its last "
            f"step: 'lmra warehouse add {first}' adds it") in err and "'lmra gate" not in err
    assert main(["warehouse", "add", str(first)]) == 0
    capsys.readouterr()
    assert main(["merge", *dirs, "--no-report"]) == 2
    assert "warehouse add" not in capsys.readouterr().err  # all landed, a report: nothing more to say
    # a night merged by an lmra before 0.3.0 never landed a per_domain table: not a sign of a stopped merge
    # (round-2 break-it, s44); merged by this one, its absence is
    (landed,) = list((out / "warehouse" / "per_domain").rglob(f"{first.name}.parquet"))
    landed.unlink()
    assert main(["merge", *dirs, "--no-report"]) == 2
    assert "its per_domain table is not in the warehouse" in " ".join(capsys.readouterr().err.split())
    manifest = json.loads((first / "manifest.json").read_text())
    (first / "manifest.json").write_text(json.dumps(manifest | {"versions": manifest["versions"] | {"lmra": "0.2.0"}}))
    assert main(["merge", *dirs, "--no-report"]) == 2
    assert "warehouse add" not in capsys.readouterr().err
    # a twin made anyway (a merge into another folder, copied beside the first): the check refuses it
    assert main(["merge", *dirs, "--no-report", "--out-dir", str(tmp_path / "elsewhere")]) == 0
    (twin,) = (tmp_path / "elsewhere").glob("*-nightly")
    shutil.copytree(twin, out / (twin.name + "-twin"))
    capsys.readouterr()
    assert main(["check", twin.name + "-twin", "--baseline", first.name, "--reports-dir", str(out)]) == 2
    captured = capsys.readouterr()
    said = " ".join((captured.out + captured.err).split())
    assert "merged from the same shard runs" in said and "one night merged twice" in said, said
    assert main(["check", first.name, "--baseline", "base", "--reports-dir", str(out)]) in (0, 3)  # a real night pair


def test_merge_refuses_shards_of_two_lmra_versions_and_warns_of_other_package_versions(tmp_path, capsys):
    """Break-it finding: shards audited by two lmra versions (an upgrade between array jobs) were merged
    into one night claiming the first shard's version. Another lmra version is refused (exit 2, naming
    the shard's manifest.json and versions.lmra); other packages that differ are warned about, and
    every shard's versions are kept in the merged manifest."""
    from lmra.cli import main

    shards = _sharded(tmp_path, n=2, prompts_per_task=0, placebo={"share": 0.0}, quality={"enabled": False},
                      judge2=None)
    man_file = shards[1].run_dir / "manifest.json"
    original = man_file.read_text()
    man = json.loads(original)

    def rewrite(versions: dict) -> None:  # as the shard's own process would have written it
        man_file.write_text(json.dumps(man | {"versions": man["versions"] | versions}))

    rewrite({"lmra": "9.9.9"})
    capsys.readouterr()
    assert main(["merge", *(str(s.run_dir) for s in shards), "--no-report", "--out-dir", str(tmp_path / "m")]) == 2
    err = " ".join(capsys.readouterr().err.split())
    assert "lmra 9.9.9" in err and "versions.lmra" in err and str(man_file) in err and "Traceback" not in err
    assert not any((tmp_path / "m").glob("*/summary.json"))
    rewrite({"numpy": "0.0.1"})
    # (merged: partial, as its scripted shards with failing calls are — not refused)
    assert main(["merge", *(str(s.run_dir) for s in shards), "--no-report", "--out-dir", str(tmp_path / "m")]) == 1
    # its advice names the shards, not the merge (break-it round 2: "re-run the same command", which is refused)
    out = " ".join(capsys.readouterr().out.split())
    manifest_shards = json.loads(next((tmp_path / "m").glob("*/manifest.json")).read_text())["shards"]
    lost = [s["shard"] for s in manifest_shards if s["calls"]["failed"]]
    assert lost and f"re-run shard{'s' * (len(lost) > 1)} {', '.join(lost)} ('lmra audit --shard {lost[0]}'" in out, out
    assert "in place of its old one" in out and "re-run the same command" not in out
    (merged,) = (tmp_path / "m").glob("*-audit")
    summary = json.loads((merged / "summary.json").read_text())
    (warned,) = [w for w in summary["warnings"] if w.startswith("the shards ran different package versions")]
    assert f"numpy {man['versions']['numpy']} (shard 1/2), 0.0.1 (shard 2/2)" in warned
    recorded = json.loads((merged / "manifest.json").read_text())["shards"]
    assert [s["versions"]["numpy"] for s in recorded] == [man["versions"]["numpy"], "0.0.1"]


@pytest.mark.parametrize("stop", [KeyboardInterrupt, OSError])
def test_a_merge_stopped_before_it_finishes_says_so_in_its_manifest(tmp_path, monkeypatch, stop):
    """Break-it finding: a merge stopped by SIGTERM (or a full disk) while it wrote the merged folder
    left its manifest ``running``, reported later as "stale … killed, crashed" — an audit stopped alike
    records ``interrupted`` with the signal, or ``failed`` with the error."""
    import lmra.audit

    shards = _sharded(tmp_path, n=2, prompts_per_task=0, placebo={"share": 0.0}, quality={"enabled": False},
                      judge2=None)

    def broken(*a, **kw):
        raise stop("No space left on device") if stop is OSError else stop()

    monkeypatch.setattr(lmra.audit, "finish_run", broken)
    with pytest.raises(stop):
        merge_shards([s.run_dir for s in shards], out_dir=tmp_path / "m")
    (folder,) = (tmp_path / "m").glob("*-audit")
    man = json.loads((folder / "manifest.json").read_text())
    if stop is KeyboardInterrupt:
        assert man["status"] == "interrupted" and man["stop_reason"].startswith("interrupted"), man
    else:
        assert man["status"] == "failed" and "No space left on device" in man["stop_reason"], man
    assert man["finished"]


def test_a_merge_interrupted_before_its_folder_is_written_does_not_speak_of_model_calls(tmp_path, capsys, monkeypatch):
    """Break-it round 2: a merge stopped by SIGTERM said "finished model calls are kept in the cache …; run the
    same command again to resume" — a merge makes no call and resumes nothing."""
    import lmra.audit
    from lmra.cli import main

    shards = _sharded(tmp_path, n=2, prompts_per_task=0, placebo={"share": 0.0}, quality={"enabled": False},
                      judge2=None)

    def stopped(*a, **kw):
        raise KeyboardInterrupt

    monkeypatch.setattr(lmra.audit, "finish_run", stopped)
    capsys.readouterr()
    assert main(["merge", *(str(s.run_dir) for s in shards), "--no-report", "--out-dir", str(tmp_path / "m")]) == 130
    err = " ".join(capsys.readouterr().err.split())
    assert "the merge made no model call" in err and "model calls are kept" not in err, err


def test_merge_of_a_batch_shard_still_waiting_advises_batch_resume(tmp_path, capsys):
    """Break-it round 3: a batch shard whose jobs were still running (manifest batch_pending, stopped in the
    batch stage) was met with "re-run it ('lmra audit --shard 1/2' …)", which submits and pays for its calls
    again; it is told to resume it with 'lmra batch resume'."""
    from lmra.cli import main

    shards = _sharded(tmp_path, n=2, prompts_per_task=0, placebo={"share": 0.0}, quality={"enabled": False},
                      judge2=None)
    waiting = tmp_path / "waiting"
    shutil.copytree(shards[0].run_dir, waiting)
    (waiting / "summary.json").unlink()
    (waiting / "manifest.json").write_text(json.dumps({"status": "batch_pending", "stopped_in": "batch",
                                                       "stop_reason": "batch_pending: …", "judge": {}}))
    capsys.readouterr()
    assert main(["merge", str(waiting), str(shards[1].run_dir), "--no-report", "--out-dir", str(tmp_path / "m")]) == 2
    err = " ".join(capsys.readouterr().err.split())
    assert f"resume it with 'lmra batch resume {waiting}'" in err and "lmra audit --shard" not in err, err


def test_a_second_merge_of_the_same_shards_started_while_the_first_runs_is_refused(tmp_path, capsys):
    """Break-it finding (s35): two ``lmra merge`` of the same shards started together both passed the
    "merged already" check (neither had finished), both completed, and the night was twice in the
    history and the warehouse. A merge holds a lock per shard set in the output folder: a second one
    meanwhile is refused (exit 1, naming the lock, nothing written); once the first is done, the
    second is refused as merged already; another set of shards is not held up."""
    from conftest import held_elsewhere
    from lmra.cli import main
    from lmra.merge import load_shards, merge_lock

    out = tmp_path / "reports"
    shards = [_clean_run(tmp_path, out / f"shard{i}", Shard(i, 2)) for i in (1, 2)]
    dirs = [str(s.run_dir) for s in shards]
    with held_elsewhere(lambda: merge_lock(out, load_shards(dirs))):  # another process merging these shards
        capsys.readouterr()
        assert main(["merge", *dirs, "--no-report"]) == 1
        err = " ".join(capsys.readouterr().err.split())
        assert "another 'lmra merge' of these 2 shard runs" in err and ".merge-" in err and "Traceback" not in err
        assert not [p for p in out.iterdir() if p.name.endswith("-nightly")]  # nothing written
    assert main(["merge", *dirs, "--no-report"]) == 0  # the lock is free again
    assert len([p for p in out.iterdir() if p.name.endswith("-nightly")]) == 1


def test_merge_refuses_shards_of_two_audit_designs(tmp_path, capsys):
    """Known gap (s43): the merge compared the shards' lmra versions, not their audit designs — a
    development checkout of the same version number that drew names another way (``design.names``,
    which covers the balanced-draw strata) was merged into one night. Refused now, naming the
    shard's manifest.json and the design field; nothing is written."""
    from lmra.cli import main

    shards = _sharded(tmp_path, n=2, prompts_per_task=0, placebo={"share": 0.0}, quality={"enabled": False},
                      judge2=None)
    man_file = shards[1].run_dir / "manifest.json"
    man = json.loads(man_file.read_text())
    assert man["design"]["names"] == json.loads((shards[0].run_dir / "manifest.json").read_text())["design"]["names"]
    man_file.write_text(json.dumps(man | {"design": man["design"] | {"names": "0" * 64}}))
    capsys.readouterr()
    assert main(["merge", *(str(s.run_dir) for s in shards), "--no-report", "--out-dir", str(tmp_path / "m")]) == 2
    err = " ".join(capsys.readouterr().err.split())
    assert "audit design differs" in err and "design.names" in err and str(man_file) in err, err
    assert "Traceback" not in err and not any((tmp_path / "m").glob("*/summary.json"))


def test_one_shards_judge_waiver_does_not_waive_the_merged_night(tmp_path, capsys):
    """Break-it finding (s46): shards 1/3 and 3/3 ran gated (their judge failed validation: exit 5)
    and shard 2/3 was re-run by hand with --allow-unvalidated-judge; the merge exited 0, "failed
    (waived)", where the unsharded audit exits 5. The merged night is waived only when no shard's
    failure was gated, and a warning names the shards whose waivers differ."""
    from lmra.cli import main
    from lmra.merge import JUDGE_WAIVER_MIXED_PREFIX

    kw = dict(placebo={"share": 0.0}, judge2=None, quality={"enabled": False}, max_failed_share=1.0)
    runs = []
    for i in (1, 2, 3):
        cfg = _cfg(tmp_path, "shards", cache=str(tmp_path / f"cache{i}.sqlite"), **kw)
        audit = Audit(cfg, target=FlakyTarget([]), judge=RecordingJudge([]), allow_unvalidated_judge=i == 2)
        audit.shard = Shard(i, 3)
        audit.run_dir = audit.run_dir.with_name(f"{audit.run_dir.name}-shard{i}of3")
        runs.append(audit.run())
    statuses = [(r.summary["judge_status"]["status"], r.summary["judge_status"]["waived"]) for r in runs]
    assert statuses == [("failed", False), ("failed", True), ("failed", False)], statuses
    capsys.readouterr()
    assert main(["merge", *[str(r.run_dir) for r in runs], "--out-dir", str(tmp_path / "merged"), "--no-report"]) == 5
    out = " ".join(capsys.readouterr().out.split())
    assert ("shard 2/3 was run with --allow-unvalidated-judge, but the judge of shards 1/3, 3/3 failed validation "
            "without it: the merged night is gated") in out, out[-3000:]
    (merged,) = [p for p in (tmp_path / "merged").iterdir() if (p / "summary.json").is_file()]
    summary = json.loads((merged / "summary.json").read_text())
    assert summary["judge_status"]["gated"] and not summary["judge_status"]["waived"]
    assert any(w.startswith(JUDGE_WAIVER_MIXED_PREFIX) for w in summary["warnings"])
    # every shard that failed was waived: the merged night is waived (exit 0), no warning
    from lmra.merge import _waived_by_flag, load_shards

    assert _waived_by_flag(load_shards([r.run_dir for r in runs])) == (False, ["2/3"], ["1/3", "3/3"])


def test_a_killed_merges_folder_advises_running_the_merge_again(tmp_path):
    """Break-it finding (s46): the folder of a merge killed mid-way was refused by export, gate and
    report with an audit's advice ("run the same audit again to finish from the cache"); it names
    the merge and says to run the merge again."""
    from lmra.errors import LmraInputError

    folder = tmp_path / "20260101-000000-audit"
    folder.mkdir()
    (folder / "manifest.json").write_text(json.dumps({"status": "running", "shard_mode": "selection",
                                                      "pid": 999_999, "host": "elsewhere"}))
    with pytest.raises(LmraInputError) as err:
        load_run(folder)
    said = str(err.value)
    assert "the merge that wrote it was killed or stopped" in said and "run the same 'lmra merge SHARD_RUN...' " \
        "again" in said and "audit" not in said.split("manifest status")[1], said
