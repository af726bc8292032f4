"""A re-run of ``lmra axes`` on a folder that already holds the axes files of a complete axes
run: a partial re-run (exit 1), one stopped by the budget (exit 4), one interrupted while it
writes its files (Ctrl-C, a kill) never replaces that set with a worse one and never leaves the
folder with files of two axes runs (break-it finding: a partial re-run overwrote a complete set,
and a re-run stopped mid-write left a mix of old and new files)."""

import json
import re

import pytest

from lmra import cli
from lmra.axes import OUTPUT_FILES
from test_axes import _audit, formal_target
from test_disks import small_disk  # noqa: F401  (fixture)

BASE = ["--discovery-pairs", "20", "--test-pairs", "30", "--max-axes", "3", "--no-progress", "--no-harm-check"]


def _configs(tmp_path):
    """The axes configs of the tests: a good scripted LMRA and one whose every label of the axis
    "is longer" fails after every retry (:class:`test_axes.FailingLabelJudge`)."""
    good, bad = tmp_path / "good.toml", tmp_path / "bad.toml"
    good.write_text('[judge]\nprovider = "test_axes:make_axes_judge"\n')
    bad.write_text('[judge]\nprovider = "test_axes:make_failing_label_judge"\n')
    return good, bad


def _snapshot(folder):
    return {name: (folder / name).read_bytes() for name in OUTPUT_FILES}


def _complete_first_run(tmp_path, sim_inputs, capsys):
    """An audit run and a complete ``lmra axes`` on it; returns (run folder, argv start, the
    configs, the bytes of its axes files)."""
    _, res = _audit(tmp_path, sim_inputs, 60, formal_target(0.8, 0.2))
    run = res.run_dir
    good, bad = _configs(tmp_path)
    argv = ["axes", "--run", str(run), *BASE]
    assert cli.main(argv + ["--config", str(good)]) == 0
    capsys.readouterr()
    return run, argv, good, bad, _snapshot(run)


def _no_staging_left(folder):
    assert not [p.name for p in folder.iterdir() if p.name.startswith(".axes")]


def test_a_partial_rerun_keeps_the_earlier_complete_set_and_writes_its_own_beside(tmp_path, sim_inputs, capsys):
    run, argv, good, bad, before = _complete_first_run(tmp_path, sim_inputs, capsys)
    # the same command on an LMRA that now times out on one axis (a fresh cache: the calls are made)
    assert cli.main(argv + ["--config", str(bad), "--cache", str(tmp_path / "fresh.sqlite")]) == 1
    captured = capsys.readouterr()
    err, out = " ".join(captured.err.split()), " ".join(captured.out.split())
    assert _snapshot(run) == before  # the complete set is untouched, byte for byte
    assert json.loads(before["axes_summary.json"])["status"] == "complete"
    partial = run / "axes-partial"
    assert sorted(p.name for p in partial.iterdir()) == sorted(OUTPUT_FILES)
    summary = json.loads((partial / "axes_summary.json").read_text())
    info = next(iter(summary["comparisons"].values()))
    assert summary["status"] == "partial" and info["n_labels_failed"] == 30
    assert "partial:" in err and "max_failed_share = 0.05" in err
    assert f"were written to {partial}" in err
    assert f"the axes files of an earlier complete axes run remain in {run}, unchanged" in err
    assert f"to {partial}" in out and "Traceback" not in err
    _no_staging_left(run)
    _no_staging_left(partial)

    # a second partial re-run replaces the set beside, still never the complete one
    assert cli.main(argv + ["--config", str(bad), "--cache", str(tmp_path / "fresh2.sqlite"), "--seed", "7"]) == 1
    capsys.readouterr()
    assert _snapshot(run) == before
    assert json.loads((partial / "axes_summary.json").read_text())["settings"]["seed"] == 7

    # a complete re-run replaces the folder's set as a whole and removes the superseded partial one
    assert cli.main(argv + ["--config", str(good), "--seed", "7"]) == 0
    out = " ".join(capsys.readouterr().out.split())
    after = _snapshot(run)
    assert after != before and all(after[n] != before[n] for n in ("axes_summary.json", "axes_labels.jsonl"))
    assert json.loads(after["axes_summary.json"])["settings"]["seed"] == 7
    assert not partial.exists()
    assert "replacing the axes files of an earlier axes run" in out
    assert f"removed {partial}" in out and "superseded" in out
    _no_staging_left(run)


def test_a_first_axes_run_that_ends_partial_writes_into_the_folder(tmp_path, sim_inputs, capsys):
    """Nothing to protect: a partial first run writes its set where it always did (exit 1)."""
    _, res = _audit(tmp_path, sim_inputs, 60, formal_target(0.8, 0.2))
    _, bad = _configs(tmp_path)
    assert cli.main(["axes", "--run", str(res.run_dir), *BASE, "--config", str(bad)]) == 1
    err = " ".join(capsys.readouterr().err.split())
    assert json.loads((res.run_dir / "axes_summary.json").read_text())["status"] == "partial"
    assert not (res.run_dir / "axes-partial").exists()
    assert f"were written to {res.run_dir}" in err and "remain" not in err


def test_a_rerun_interrupted_while_writing_leaves_the_earlier_set_whole(tmp_path, sim_inputs, capsys, monkeypatch):
    """Ctrl-C (or a full disk) after some of the new files were written: the folder keeps the
    earlier set, every file of it, and no half-written set."""
    import lmra.axes.outputs

    run, argv, good, _, before = _complete_first_run(tmp_path, sim_inputs, capsys)

    def interrupted(*a, **k):
        raise KeyboardInterrupt

    monkeypatch.setattr(lmra.axes.outputs, "write_jsonl", interrupted)  # the 4th of the 5 files
    assert cli.main(argv + ["--config", str(good), "--seed", "7"]) == 130
    assert _snapshot(run) == before
    _no_staging_left(run)


def test_a_rerun_stopped_by_the_budget_keeps_the_earlier_set(tmp_path, sim_inputs, capsys):
    run, argv, good, _, before = _complete_first_run(tmp_path, sim_inputs, capsys)
    assert cli.main(argv + ["--config", str(good), "--cache", str(tmp_path / "fresh.sqlite"), "--max-calls", "4"]) == 4
    assert "stopped by the budget" in capsys.readouterr().err
    assert _snapshot(run) == before
    _no_staging_left(run)


@pytest.mark.parametrize("moved", [0, 2, 5])
def test_a_kill_while_the_new_set_moves_in_is_finished_by_the_next_writer(tmp_path, sim_inputs, capsys, monkeypatch,
                                                                         moved):
    """A kill after the new set was written whole but before all of it moved into the folder:
    the next write (the next ``lmra axes`` on the folder) first moves the rest of that set in,
    so the folder never keeps files of two runs; a set still being written when its process died
    is thrown away."""
    from lmra.axes import outputs

    run, argv, good, _, _ = _complete_first_run(tmp_path, sim_inputs, capsys)
    real = outputs._move_in

    def killed(commit, folder):  # moves the first `moved` files of the journal, then the process dies
        for name in sorted(p.name for p in commit.iterdir())[:moved]:
            (commit / name).replace(folder / name)
        raise KeyboardInterrupt

    monkeypatch.setattr(outputs, "_move_in", killed)
    assert cli.main(argv + ["--config", str(good), "--seed", "7"]) == 130
    monkeypatch.setattr(outputs, "_move_in", real)
    assert (run / ".axes-commit").is_dir()  # the journal: a whole new set, partly moved in
    new = {**_snapshot(run), **{p.name: p.read_bytes() for p in (run / ".axes-commit").iterdir()}}
    assert json.loads(new["axes_summary.json"])["settings"]["seed"] == 7
    stale = run / ".axes-staging-999999999-dead"  # a writer killed before its set was whole
    stale.mkdir()
    (stale / "axes.csv").write_text("half")
    if moved != 2:
        assert outputs.finish_interrupted_write(run) is True
    else:  # the next `lmra axes` on the folder finishes it first, and says so (here it then stops: budget)
        capsys.readouterr()
        assert cli.main(argv + ["--config", str(good), "--cache", str(tmp_path / "fresh.sqlite"),
                                "--max-calls", "1"]) == 4
        captured = capsys.readouterr()
        assert f"Finished moving into {run} the axes files of an earlier axes run" in captured.out
        assert f"the axes files of an earlier complete axes run in {run} are unchanged" in captured.err
    assert _snapshot(run) == new
    _no_staging_left(run)
    assert outputs.finish_interrupted_write(run) is False  # nothing left to finish


def test_the_status_of_a_set_written_before_it_was_recorded_is_judged_by_its_counts(tmp_path):
    """axes_summary.json files written before ``status`` was recorded: judged by
    ``max_failed_share``, so a partial re-run does not replace an older complete set either."""
    import pandas as pd

    from lmra.axes import AxesResult, folder_axes_status, publish_axes_outputs

    assert folder_axes_status(tmp_path, 0.05) is None  # no axes file
    (tmp_path / "axes.csv").write_text("axis\n")
    assert folder_axes_status(tmp_path, 0.05) == "unknown"  # axes files without a summary
    old = {"schema_version": 1, "comparisons": {"f vs m": {"n_labels": 100, "n_labels_failed": 5}}}
    (tmp_path / "axes_summary.json").write_text(json.dumps(old))
    assert folder_axes_status(tmp_path, 0.05) == "complete" and folder_axes_status(tmp_path, 0.04) == "partial"
    before = _snapshot_present(tmp_path)
    new = {"schema_version": 1, "max_failed_share": 0.05, "status": "partial",
           "comparisons": {"f vs m": {"n_labels": 100, "n_labels_failed": 40}}}
    empty = pd.DataFrame()
    pub = publish_axes_outputs(AxesResult(pd.DataFrame({"axis": ["x"]}), {}, empty, empty, new), tmp_path)
    assert pub.kept and pub.out_dir == tmp_path / "axes-partial" and pub.status == "partial"
    assert _snapshot_present(tmp_path) == before
    assert json.loads((pub.out_dir / "axes_summary.json").read_text())["status"] == "partial"


def _snapshot_present(folder):
    return {p.name: p.read_bytes() for p in folder.iterdir() if p.is_file()}


def test_a_rerun_whose_brainstorm_answers_were_all_unusable_keeps_the_earlier_complete_set(tmp_path, sim_inputs,
                                                                                           capsys):
    """A re-run that could discover nothing (no usable brainstorm answer, no extra axis) is
    partial: it never replaces a complete set; its files go to axes-partial/ (exit 1)."""
    run, argv, _, _, before = _complete_first_run(tmp_path, sim_inputs, capsys)
    unusable = tmp_path / "unusable.toml"
    unusable.write_text('[judge]\nprovider = "test_axes:make_unusable_brainstorm_judge"\n')
    assert cli.main(argv + ["--config", str(unusable), "--cache", str(tmp_path / "fresh.sqlite")]) == 1
    err = " ".join(capsys.readouterr().err.split())
    assert _snapshot(run) == before
    summary = json.loads((run / "axes-partial" / "axes_summary.json").read_text())
    assert summary["status"] == "partial"
    assert "no brainstorm answer was usable" in err
    assert f"the axes files of an earlier complete axes run remain in {run}, unchanged" in err


def test_axes_stops_at_the_first_rejected_key(tmp_path, sim_inputs, capsys, monkeypatch):
    """Review finding: ``lmra axes`` had no key guard, so a rejected key (HTTP 401) stopped it only
    after the endpoint guard's 8 failed calls, blaming an unreachable endpoint. It stops at the
    first rejected call with the audit's paragraph (exit 1)."""
    from faultserver import FaultServer
    from lmra.providers.endpoint import TRIP_AFTER

    _, res = _audit(tmp_path, sim_inputs, 20, formal_target(0.8, 0.2))
    with FaultServer(api_key="sk-right") as srv:
        cfg = tmp_path / "key.toml"
        cfg.write_text(f'concurrency = 2\n[judge]\nprovider = "openai"\nmodel = "fake"\nbase_url = "{srv.url}"\n'
                       'api_key_env = "AXES_TEST_KEY"\nmax_retries = 0\n')
        monkeypatch.setenv("AXES_TEST_KEY", "sk-wrong")
        capsys.readouterr()
        status = cli.main(["axes", "--run", str(res.run_dir), *BASE, "--config", str(cfg),
                           "--cache", str(tmp_path / "k.sqlite")])
        rejected = srv.auth_rejected
    err = " ".join(capsys.readouterr().err.split())
    assert status == 1, err
    assert "does not accept its key, so lmra stopped at the first rejected call" in err, err
    assert 1 <= rejected < TRIP_AFTER, rejected


def test_axes_says_when_its_lmra_answers_without_logprobs(tmp_path, sim_inputs, capsys, monkeypatch):
    """Like an audit and the judge check, ``lmra axes`` says once on stderr when its LMRA's
    option answers come without the log-probabilities asked for (each is then estimated from
    sampled answers: several times the calls). It said nothing (review finding)."""
    from faultserver import FaultServer

    _, res = _audit(tmp_path, sim_inputs, 20, formal_target(0.8, 0.2))
    with FaultServer(fault_rate=0.0) as srv:
        srv.ignores_logprobs = True
        cfg = tmp_path / "nolp.toml"
        cfg.write_text(f'concurrency = 2\n[judge]\nprovider = "openai"\nmodel = "fake"\nbase_url = "{srv.url}"\n'
                       'api_key_env = "AXES_TEST_KEY"\nmax_retries = 0\nn_samples = 2\n')
        monkeypatch.setenv("AXES_TEST_KEY", "sk-local")
        capsys.readouterr()
        cli.main(["axes", "--run", str(res.run_dir), *BASE, "--axis", "uses formal language", "--config", str(cfg),
                  "--cache", str(tmp_path / "nolp.sqlite")])
    captured = capsys.readouterr()
    err = " ".join(captured.err.split())
    assert err.count("answers without log-probabilities") == 1, err
    assert "--logits_all true" in err and "logprobs = false in [judge]" in err, err
    # the faults met are on the console's calls line too, as lmra audit's (break-it finding: only in the JSON)
    out = " ".join(captured.out.split())
    assert re.search(r"LMRA calls: \d+ fresh, 0 cached, 0 failed, \d+ retries; faults met: answers without logprobs "
                     r"[1-9]\d*", out), out[-600:]


@pytest.mark.parametrize("how", ["latest", "run id"])
def test_axes_takes_a_run_id_or_latest_like_every_other_command(tmp_path, sim_inputs, capsys, how):
    """Fresh-user finding: ``lmra axes --run latest`` (or a run id) said "run folder not found",
    while README's RUN — a folder, a run id or 'latest' — works for every other command."""
    _, res = _audit(tmp_path, sim_inputs, 60, formal_target(0.8, 0.2))
    good, _ = _configs(tmp_path)
    name = "latest" if how == "latest" else res.run_dir.name
    assert cli.main(["axes", "--run", name, "--reports-dir", str(res.run_dir.parent), *BASE,
                     "--config", str(good)]) == 0, capsys.readouterr().err
    assert (res.run_dir / "axes.csv").is_file()
    assert cli.main(["axes", "--run", "no-such-run", "--reports-dir", str(tmp_path / "nowhere"), *BASE]) == 2
    assert "no such run folder, and no runs in" in " ".join(capsys.readouterr().err.split())
    assert not (tmp_path / "nowhere").exists()


def test_axes_says_when_its_call_cache_cannot_store_the_answers(tmp_path, sim_inputs, capsys, small_disk):
    """Found this round: `lmra axes` (and `lmra judge-check`) opened the call cache without the
    write-error notice an audit has, so a full disk (or a damaged cache file) held the answered
    calls without a word. They are said, as in an audit (here: the cache's disk fills up)."""
    from test_disks import _fill

    _, res = _audit(tmp_path, sim_inputs, 60, formal_target(0.8, 0.2))
    good, _ = _configs(tmp_path)
    cache = small_disk / "axes-cache.sqlite"
    argv = ["axes", "--run", str(res.run_dir), *BASE, "--config", str(good), "--cache", str(cache)]
    assert cli.main(argv + ["--axis", "uses formal language"]) == 0
    _fill(small_disk, 48 * 1024)  # room to open the cache (its WAL), not for the new axis's answers
    capsys.readouterr()
    cli.main(argv + ["--axis", "is longer", "--axis", "asks a follow-up question", "--out", str(tmp_path / "again")])
    err = " ".join(capsys.readouterr().err.split())
    assert f"cannot write to the call cache {cache}" in err, err[-1500:]
    assert "Traceback" not in err


def test_axes_stops_before_any_call_when_its_folder_cannot_take_the_files(tmp_path, sim_inputs, capsys):
    """Break-it finding: `lmra axes` on a read-only run folder made its LMRA calls (18 with a
    fresh cache) and only then said "cannot write the axes files here". The folder is tried
    first: exit 1, no call, saying so."""
    import subprocess

    _, res = _audit(tmp_path, sim_inputs, 60, formal_target(0.8, 0.2))
    good, _ = _configs(tmp_path)
    ro = tmp_path / "ro"
    ro.mkdir()
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m,ro", "tmpfs", str(ro)], capture_output=True).returncode:
        pytest.skip("cannot mount a read-only tmpfs here (needs root)")
    try:
        cache = tmp_path / "axes-cache.sqlite"
        capsys.readouterr()
        status = cli.main(["axes", "--run", str(res.run_dir), *BASE, "--config", str(good), "--cache", str(cache),
                           "--axis", "uses formal language", "--out", str(ro / "axes")])
    finally:
        subprocess.run(["umount", "-l", str(ro)], capture_output=True)
    err = " ".join(capsys.readouterr().err.split())
    assert status == 1 and f"{ro / 'axes'}: cannot write the axes files here (Read-only file system); nothing was " \
        "asked of the LMRA" in err, err[-1500:]
    import sqlite3

    n = sqlite3.connect(cache).execute("SELECT COUNT(*) FROM calls").fetchone()[0] if cache.exists() else 0
    assert n == 0  # no call made


def test_a_second_axes_run_into_a_folder_while_the_first_runs_is_refused(tmp_path, sim_inputs, capsys):
    """Break-it leftover (s35): two ``lmra axes`` writing into one folder at once both said "Wrote",
    though the second replaced the first's files (the folder then held one of them, each console the
    other's table). ``lmra axes`` holds a lock on its output folder — the folder itself, nothing is
    added to it: a second one meanwhile is refused (exit 1, naming the folder, no call, no file),
    and runs once the first is done."""
    from conftest import held_elsewhere
    from lmra.fileio import held_lock

    _, res = _audit(tmp_path, sim_inputs, 60, formal_target(0.8, 0.2))
    run = res.run_dir
    good, _ = _configs(tmp_path)
    argv = ["axes", "--run", str(run), *BASE, "--config", str(good)]
    with held_elsewhere(lambda: held_lock(run, "busy", "the test's")):  # another 'lmra axes' on this folder
        capsys.readouterr()
        assert cli.main(argv) == 1
        captured = capsys.readouterr()
        err = " ".join(captured.err.split())
        assert "another 'lmra axes' writing its files into" in err and "Traceback" not in err
        assert "Wrote" not in captured.out + captured.err
        assert not [name for name in OUTPUT_FILES if (run / name).exists()]
    assert cli.main(argv) == 0  # the lock is free again
    assert all((run / name).exists() for name in OUTPUT_FILES)
    _no_staging_left(run)


def _server_connections_closed(timeout_s: float = 5.0) -> bool:
    """True once no local test server thread is serving a connection (each ends when its client
    closes the keep-alive connection)."""
    import threading
    import time

    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if not any("process_request_thread" in t.name for t in threading.enumerate()):
            return True
        time.sleep(0.05)
    return False


def test_axes_closes_the_lmra_client_it_built(tmp_path, sim_inputs, capsys, monkeypatch):
    """``lmra axes`` (and ``run_axes`` called from Python) closed neither the HTTP client it built for
    its LMRA nor its pooled connections: each run left the server's connections open (s42: the
    local server's threads outlived the tests)."""
    from faultserver import FaultServer

    _, res = _audit(tmp_path, sim_inputs, 20, formal_target(0.8, 0.2))
    assert _server_connections_closed(), "a server of an earlier test still has a connection open"
    with FaultServer(fault_rate=0.0) as srv:
        cfg = tmp_path / "srv.toml"
        cfg.write_text(f'concurrency = 2\n[judge]\nprovider = "openai"\nmodel = "fake"\nbase_url = "{srv.url}"\n'
                       'api_key_env = "AXES_TEST_KEY"\nmax_retries = 0\n')
        monkeypatch.setenv("AXES_TEST_KEY", "sk-local")
        assert cli.main(["axes", "--run", str(res.run_dir), *BASE, "--axis", "uses formal language", "--config",
                         str(cfg), "--cache", str(tmp_path / "srv.sqlite")]) == 0, capsys.readouterr().err
        assert srv.requests > 0
        assert _server_connections_closed(), "lmra axes left its connections to the LMRA's server open"


def test_axes_refuses_a_run_history_as_its_cache(tmp_path, sim_inputs, capsys):
    """Round-2 break-it (s44): ``lmra axes --cache reports/history.sqlite`` wrote the run's responses
    into the run history (the file that is archived and shared). Refused, exit 2, nothing added."""
    import sqlite3

    from lmra.history import History

    _, res = _audit(tmp_path, sim_inputs, 20, formal_target(0.8, 0.2))
    good, _ = _configs(tmp_path)
    hist = tmp_path / "elsewhere" / "history.sqlite"
    History(hist).close()
    tables = sqlite3.connect(hist).execute("SELECT name FROM sqlite_master").fetchall()
    capsys.readouterr()
    assert cli.main(["axes", "--run", str(res.run_dir), *BASE, "--config", str(good), "--cache", str(hist)]) == 2
    err = " ".join(capsys.readouterr().err.split())
    assert "is a run history (history.sqlite), not a call cache" in err and "Traceback" not in err, err
    assert sqlite3.connect(hist).execute("SELECT name FROM sqlite_master").fetchall() == tables


@pytest.mark.parametrize("where", ["option", "config"])
def test_axes_refuses_an_unpriced_lmra_under_a_cost_limit_before_writing_anything(tmp_path, sim_inputs, capsys, where):
    """Known since s45: `lmra axes --max-cost` with an LMRA missing from the price table created
    the --out folder and the call cache, then refused. It now refuses first (exit 2, naming the
    field that set the limit, the role and the model, and the table), and nothing is written."""
    _, res = _audit(tmp_path, sim_inputs, 60, formal_target(0.8, 0.2))
    prices = tmp_path / "pr.toml"
    prices.write_text('[prices.someone-else]\n"*" = { input = 1.0, output = 2.0 }\n')
    cfg = tmp_path / "axes.toml"
    cfg.write_text(f'prices = "{prices}"\n' + ("max_cost = 2.0\n" if where == "config" else "")
                   + '[judge]\nprovider = "test_axes:make_axes_judge"\n')
    out, cache = tmp_path / "axes-out", tmp_path / "axes-cache.sqlite"
    capsys.readouterr()
    status = cli.main(["axes", "--run", str(res.run_dir), *BASE, "--config", str(cfg), "--cache", str(cache),
                       "--out", str(out)] + (["--max-cost", "2"] if where == "option" else []))
    err = " ".join(capsys.readouterr().err.split())
    assert status == 2 and "Traceback" not in err, err[-1500:]
    assert "max_cost = 2 USD needs the price of every model lmra axes calls" in err and "the judge's, provider" in err, \
        err[-1500:]
    assert f"the price table {prices} has no price for it" in err, err[-1500:]
    assert ("option --max-cost" in err) if where == "option" else (f"{cfg}, line 2: field 'max_cost'" in err), err
    assert not out.exists() and not cache.exists()
