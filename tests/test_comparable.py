"""A regression check says when it is not a night-to-night comparison of one chatbot
(lmra/comparable.py): a replay of the baseline's cached answers (the same seed), another
target, another design. Real audits with scripted doubles (tests/monitor_helpers.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from conftest import custom_audit_config
from doubles import ScriptedJudge
from lmra import Audit
from lmra.config import AuditConfig
from lmra.monitor import check_run
from monitor_helpers import TaskTarget, lmra_cli, make_run, phrase_verdict, write_inputs  # noqa: F401  (fixture)


def night(tmp_path: Path, run_id: str, rate: float, *, seed: int, personalization: str | None = None,
          one_model: bool = False, names: str | None = None, n_prompts: int = 60, judge_fail_on=None) -> Path:
    """A night of one audit whose call cache is shared by every night (as in a nightly job)."""
    default_names, prompts = write_inputs(tmp_path / "inputs", n_prompts)
    names = names or default_names
    extra = {"personalization": personalization} if personalization else {}
    cfg = AuditConfig.model_validate(dict(
        name="nightly", prompts=str(prompts), names=str(names), prompts_per_task=0, seed=seed,
        output_dir=str(tmp_path / "reports"), cache=str(tmp_path / "cache.sqlite"), concurrency=8,
        judge_check={"enabled": False}, **extra))
    run_dir = tmp_path / "reports" / run_id
    target = TaskTarget({"write a story": rate, "career advice": rate})
    judge = ScriptedJudge(phrase_verdict, position_bias=0.2, fail_on=judge_fail_on)
    if one_model:  # one provider and model in both roles (as the embedded demo): shared call counts
        judge.name, judge.model_id = target.name, target.model_id
    Audit(cfg, target=target, judge=judge, run_dir=run_dir).run()
    return run_dir


def test_a_night_with_the_baselines_seed_replays_its_answers_and_the_check_says_so(tmp_path, lmra_cli, capsys):
    base = night(tmp_path, "20260101-000000-nightly", 0.05, seed=1)
    # the chatbot got far more biased, but the night forgot its seed: every answer is the cached one
    same_seed = night(tmp_path, "20260102-000000-nightly", 0.9, seed=1)
    result = check_run(same_seed, base)
    assert result.regressions.empty  # the hazard: no regression seen
    assert len(result.comparability) == 1 and "every chatbot answer was replayed" in result.comparability[0]
    assert result.replayed
    capsys.readouterr()
    # exit 2, nothing tested — not 0, "no regression" (fresh-user finding: a same-day re-run passed)
    assert lmra_cli(["check", str(same_seed), "--baseline", str(base)]) == 2
    cap = capsys.readouterr()  # on stderr, as every warning (user-trial finding: it was on stdout)
    err_out = " ".join(cap.err.split())
    assert "warning: the run drew with the baseline's seed (1) and every chatbot answer was replayed" in err_out
    assert "warning:" not in cap.out
    assert "nothing was tested against baseline" in " ".join(cap.out.split())
    # a night with its own seed asks the chatbot again and sees the rise; no warning
    fresh = night(tmp_path, "20260103-000000-nightly", 0.9, seed=3)
    result = check_run(fresh, base)
    assert not result.regressions.empty and result.comparability == []
    # new-user finding: the seed left fixed at another value than the baseline's — the third
    # night's answers replay the night before, and the check saw nothing of tonight
    again = night(tmp_path, "20260104-000000-nightly", 0.0, seed=3)
    lines = check_run(again, base).comparability
    assert len(lines) == 1 and "the run made no fresh target call: every chatbot answer was replayed" in lines[0]
    assert f"(run {fresh.name}, finished earlier" in lines[0]
    assert check_run(again, base).replayed
    # break-it finding: a re-run resuming an interrupted night (its answers cached, the run not
    # finished) replays tonight's answers — not a replay of another night: nothing said
    from lmra.history import History

    with History(tmp_path / "reports" / "history.sqlite") as h:
        h.db.execute("UPDATE runs SET status = 'interrupted' WHERE seed = 3")
        h.db.commit()
        h.db.execute("DELETE FROM runs WHERE run_id = ?", (again.name,))
        h.db.commit()
    import shutil

    shutil.rmtree(again)  # (its folder too: a complete folder the history never registered is a finished night)
    resumed = night(tmp_path, "20260105-000000-nightly", 0.0, seed=3)
    with History(tmp_path / "reports" / "history.sqlite") as h:
        h.register(resumed)
        h.db.execute("UPDATE runs SET status = 'interrupted' WHERE seed = 3 AND run_id != ?", (resumed.name,))
        h.db.commit()
        from lmra.monitor import check_regression
        from lmra.runfolder import load_run

        resumed_check = check_regression(load_run(resumed), load_run(base), history=h)
        assert resumed_check.comparability == [] and not resumed_check.replayed  # tonight's own answers: tested


def test_a_re_run_of_a_night_killed_after_its_run_folder_names_that_night_and_how_to_check_it(tmp_path, lmra_cli,
                                                                                                 capsys):
    """Break-it finding: a night killed (or out of disk) after its run folder was complete but
    before its check ran was re-run, as the docs advise after a kill: every answer was replayed,
    exit 2 "a seed already used … give each night its own seed" — the operator had reused no
    seed, and the complete night was never checked. The warning names that night as never
    checked and says how to check it; the exit reason mentions the case."""
    base = night(tmp_path, "20260101-000000-nightly", 0.05, seed=1)
    killed = night(tmp_path, "20260102-000000-nightly", 0.9, seed=2)  # complete; its check never ran
    rerun = night(tmp_path, "20260102-000500-nightly", 0.9, seed=2)
    lines = check_run(rerun, base).comparability
    assert len(lines) == 1 and f"(run {killed.name}, finished earlier" in lines[0]
    assert "never checked" in lines[0] and f"'lmra check {killed.name} --baseline pinned'" in lines[0]
    assert "give each night its own seed" not in lines[0]
    capsys.readouterr()
    assert lmra_cli(["check", str(rerun), "--baseline", str(base)]) == 2
    cap = capsys.readouterr()
    said = " ".join(cap.out.split())
    assert f"'lmra check {killed.name} --baseline pinned'" in " ".join(cap.err.split())  # the warning, above
    (exit_line,) = [x for x in said.split("exit status ")[1:]]
    assert exit_line.startswith("2: nothing was tested") and "the warning above says whose and what to do" in exit_line
    assert len(exit_line) < 400, len(exit_line)  # one sentence (fresh-user finding, s35: 1,244 characters)
    # once that night is checked, a same-seed re-run is a replay of a checked night: the seed advice
    assert lmra_cli(["check", str(killed), "--baseline", str(base)]) == 3  # (its rise, 5% → 90%)
    again = night(tmp_path, "20260102-001000-nightly", 0.9, seed=2)
    (line,) = check_run(again, base).comparability
    assert "never checked" not in line and "give each night its own seed" in line


def test_a_replay_is_said_when_one_model_plays_both_roles(tmp_path):
    base = night(tmp_path, "20260101-000000-nightly", 0.05, seed=1, one_model=True)
    again = night(tmp_path, "20260102-000000-nightly", 0.9, seed=1, one_model=True)
    lines = check_run(again, base).comparability
    assert len(lines) == 1 and "every chatbot answer was replayed" in lines[0]
    other = night(tmp_path, "20260103-000000-nightly", 0.9, seed=3, one_model=True)
    assert check_run(other, base).comparability == []


def test_another_target_or_design_is_named(tmp_path):
    a = make_run(tmp_path, "20260101-000000-nightly", {"write a story": 0.1, "career advice": 0.1}, seed=1,
                 n_prompts=40)
    b = make_run(tmp_path, "20260102-000000-nightly", {"write a story": 0.1, "career advice": 0.1}, seed=2,
                 n_prompts=40, target_model="chatbot-v2")
    lines = check_run(b, a).comparability
    assert len(lines) == 1 and lines[0].startswith("the target differs: baseline scripted-target:") and \
        "run scripted-target:chatbot-v2" in lines[0]
    style = tmp_path / "short_style.txt"  # another personalisation wording (the scripted target reads the name)
    style.write_text("### system\nPreferred name: {name}\n", encoding="utf-8")
    c = night(tmp_path / "d", "20260101-000000-nightly", 0.1, seed=1)
    d = night(tmp_path / "d", "20260102-000000-nightly", 0.1, seed=2, personalization=str(style))
    lines = check_run(d, c).comparability
    assert len(lines) == 1 and "the audit design differs: personalization (" in lines[0]


def test_a_check_made_by_hand_later_does_not_replace_the_nights_own_verdict(tmp_path, lmra_cli, capsys):
    """New-user finding: the nightly audit's check against the pinned baseline flagged a
    regression (exit 3); a check by hand against the night before (no regression) then replaced
    it on the history page, the report and the Prometheus export. The audit's own check wins."""
    import json

    from lmra.history import History

    base = night(tmp_path, "20260101-000000-nightly", 0.05, seed=1)
    prev = night(tmp_path, "20260102-000000-nightly", 0.9, seed=2)
    now = night(tmp_path, "20260103-000000-nightly", 0.9, seed=3)
    hist = tmp_path / "reports" / "history.sqlite"
    from lmra.cli.monitor import monitor_after_audit

    # the night's own check (as `lmra audit --baseline` makes it): regression against the first night
    assert monitor_after_audit(now, baseline=str(base), report=False) == 3
    capsys.readouterr()
    assert lmra_cli(["check", str(now), "--baseline", str(prev)]) == 0  # by hand: vs the night before
    with History(hist) as h:
        own = h.latest_check(now.name)
        assert own["baseline_id"] == base.name and own["source"] == "audit" and own["n_regressions"] > 0
    assert lmra_cli(["export", str(now), "--format", "prometheus", "--out", str(tmp_path / "metrics")]) == 0
    (prom_file,) = (tmp_path / "metrics").glob("*.prom")
    prom = prom_file.read_text()
    assert any(line.startswith("lmra_run_regressions{") and not line.endswith(" 0") for line in prom.splitlines())
    capsys.readouterr()
    assert lmra_cli(["history", "--reports-dir", str(tmp_path / "reports"), "--json"]) == 0
    doc = {r["run_id"]: r for r in json.loads(capsys.readouterr().out)["runs"]}
    assert doc[now.name]["check"]["baseline_id"] == base.name and doc[now.name]["check"]["source"] == "audit"
    # a run that only has checks by hand shows the latest of them
    assert lmra_cli(["check", str(prev), "--baseline", str(base)]) == 3
    assert lmra_cli(["check", str(prev), "--baseline", str(now)]) == 0
    with History(hist) as h:
        assert h.latest_check(prev.name)["baseline_id"] == now.name
        # a check an older lmra recorded (no source: maybe the audit's own) outranks a hand check made
        # after the upgrade (break-it finding: the nightly REGRESSION of an old history was hidden)
        h.db.execute("DELETE FROM check_sources WHERE check_rowid = (SELECT MAX(rowid) FROM checks WHERE run_id = ?)",
                     (prev.name,))
        h.db.execute("DELETE FROM check_sources WHERE check_rowid = (SELECT MIN(rowid) FROM checks WHERE run_id = ?)",
                     (prev.name,))
        h.db.commit()
    assert lmra_cli(["check", str(prev), "--baseline", str(now), "--margin", "0.5"]) == 0  # by hand, after
    with History(hist) as h:
        kept = h.latest_check(prev.name)
        assert kept["source"] is None and kept["margin"] == 0.0 and kept["baseline_id"] == now.name


def test_a_model_comparison_by_hand_does_not_replace_a_nights_check_of_its_own_chatbot(tmp_path, lmra_cli, capsys):
    """Fresh-user finding (s40): night 2 had no check of its own; the morning check by hand against
    the pinned night said REGRESSION; a model comparison afterwards (``lmra check NIGHT --baseline
    OTHER_CHATBOT``) then became the night's verdict — "no regression" on the history page and in
    Prometheus. A check of the same chatbot outranks one against another target's run."""
    from lmra.history import History

    rates = {"write a story": 0.05, "career advice": 0.05}
    base = make_run(tmp_path, "20260101-000000-nightly", rates, seed=1, n_prompts=60)
    now = make_run(tmp_path, "20260102-000000-nightly", {"write a story": 0.9, "career advice": 0.9}, seed=2,
                   n_prompts=60)
    other = make_run(tmp_path, "20260102-100000-nightly", {"write a story": 0.9, "career advice": 0.9}, seed=3,
                     n_prompts=60, target_model="chatbot-b")
    assert lmra_cli(["check", str(now), "--baseline", str(base)]) == 3  # the morning check: a regression
    assert lmra_cli(["check", str(now), "--baseline", str(other)]) == 0  # then a model comparison
    said = capsys.readouterr()
    assert "the target differs" in " ".join((said.out + said.err).split())
    # and the final line says so (fresh-user finding, s45: a mistyped model id a lenient server served ran the night)
    final = [ln for ln in (said.out + said.err).splitlines() if ln.startswith("exit status")][-1]
    assert "; the target differs from the baseline's (above): two chatbots compared, not two nights of one" in final
    with History(tmp_path / "reports" / "history.sqlite") as h:
        kept = h.latest_check(now.name)
        assert kept["baseline_id"] == base.name and kept["n_regressions"] > 0
        # a run whose only check by hand is a model comparison keeps it (nothing else to show)
        assert h.latest_check(other.name) is None
    assert lmra_cli(["check", str(other), "--baseline", str(now)]) == 0
    with History(tmp_path / "reports" / "history.sqlite") as h:
        assert h.latest_check(other.name)["baseline_id"] == now.name


def test_an_audit_whose_check_can_flag_nothing_is_warned_before_its_calls(tmp_path):
    """New-user finding: prompts_per_task = 1 with --baseline pinned was pinned on the first
    night, and every later night paid for its calls to end 'no task could be tested' (exit 2).
    Two tasks, one comparison: Holm needs p ≤ 0.025; the smallest p with k prompts a run is
    1/C(2k, k): 0.5, 0.167, 0.05, then 0.0143 at k = 4."""
    from lmra.cli.audit import _untestable_check_note

    names, prompts = write_inputs(tmp_path / "inputs", 60)

    def note(per_task: int) -> str | None:
        cfg = AuditConfig.model_validate(dict(name="n", prompts=str(prompts), names=str(names),
                                              prompts_per_task=per_task, output_dir=str(tmp_path / "r")))
        return _untestable_check_note(cfg, Audit(cfg).load_inputs(), 0.05)

    one = note(1)  # (the overall row, 2 + 2 prompts: smallest p 1/6, cannot be flagged either)
    assert one and "can flag no task (a task needs at least 2 prompts in each run)" in one
    assert "raise prompts_per_task to at least 4" in one
    # 3 a task: no task can be flagged, but the comparison's overall row (6 + 6 prompts, smallest
    # p 1/924) can: the check is not empty, nothing is said
    assert note(3) is None
    assert note(4) is None and note(0) is None  # 0: every prompt of the file (30 per task)


def test_a_second_audit_of_the_same_name_while_one_runs_is_said(tmp_path, capsys):
    """New-user finding: two nightly jobs of one audit at once (an overrunning cron job) both ran
    and registered, interleaving their logs and exports, and nothing said so."""
    from lmra.runstate import RunLock, running_runs
    from test_gates import audit, write_config

    cfg = write_config(tmp_path, name="nightly", n_prompts=8)
    reports = tmp_path / "reports"
    running = reports / "20260101-000000-nightly"
    running.mkdir(parents=True)
    (reports / "20260101-000000-nightly-shard1of2").mkdir()  # a shard: one of several at once by design
    held = [RunLock(reports / "20260101-000000-nightly-shard1of2").acquire()]  # (kept: a lock lives with its file)
    (reports / "20260101-000000-other").mkdir()
    held.append(RunLock(reports / "20260101-000000-other").acquire())  # another audit's run
    # break-it finding: a run of the audit 'nightly-2' was taken for a second run of 'nightly'
    (reports / "20260101-000000-nightly-2").mkdir()
    (reports / "20260101-000000-nightly-2" / "config.toml").write_text('name = "nightly-2"\n')
    held.append(RunLock(reports / "20260101-000000-nightly-2").acquire())
    (reports / "20260101-000001-nightly-2").mkdir()  # a second folder of 'nightly' in the same second
    (reports / "20260101-000001-nightly-2" / "config.toml").write_text('name = "nightly"\n')
    second = RunLock(reports / "20260101-000001-nightly-2").acquire()
    assert [r for r, _ in running_runs(reports, "nightly")] == ["20260101-000001-nightly-2"]
    assert [r for r, _ in running_runs(reports, "nightly-2")] == ["20260101-000000-nightly-2"]
    second.release()
    lock = RunLock(running).acquire()  # held by this process, as by a live audit
    assert running_runs(reports, "nightly") == [(running.name, str(__import__("os").getpid()))]
    rc, out, _ = audit(capsys, cfg)
    assert rc == 0
    text = " ".join(out.split())
    assert (f"warning: another audit named 'nightly' is running in {reports} (run {running.name}, pid" in text
            and "this run goes on beside it" in text and text.count("another audit named") == 1)
    lock.release()  # ended: not said any more
    rc, out, _ = audit(capsys, cfg)
    assert rc == 0 and "another audit named" not in out


def test_two_audits_started_in_the_same_second_are_said(tmp_path, capsys, monkeypatch):
    """Ops break-it (s42): two audits of one name started in the same second warned of nothing — each
    looked for running audits before either had locked its folder. The other audit here claims and
    locks its folder at the very moment this one claims its own (after this one's plan line): the
    look, made once this run holds its lock, sees it; this run's own folder is not named."""
    import lmra.audit as audit_mod
    from lmra.runstate import RunLock
    from test_gates import audit, write_config

    cfg = write_config(tmp_path, name="nightly", n_prompts=8)
    reports = tmp_path / "reports"
    other = reports / "20260101-000000-nightly"  # the other audit's folder, not locked yet
    other.mkdir(parents=True)
    (other / "config.toml").write_text('name = "nightly"\n')
    held = []
    real_claim = audit_mod.claim_run_dir

    def claim_beside_another(base):
        if not held:  # the other audit, started in the same second, locks its folder first
            held.append(RunLock(other).acquire())
        return real_claim(base)

    monkeypatch.setattr(audit_mod, "claim_run_dir", claim_beside_another)
    rc, out, _ = audit(capsys, cfg)
    assert rc == 0 and held
    text = " ".join(out.split())
    assert f"warning: another audit named 'nightly' is running in {reports} (run {other.name}, pid" in text
    assert text.count("another audit named") == 1  # not this run's own folder
    held[0].release()


def test_the_names_file_is_compared_by_what_it_holds_not_by_its_path(tmp_path, monkeypatch):
    """Break-it finding: the same names file named by a relative and an absolute path was 'another
    design', and a names file cut down in place was not."""
    import shutil

    default_names, _ = write_inputs(tmp_path / "inputs", 60)
    names = tmp_path / "mine" / "names.csv"
    names.parent.mkdir()
    shutil.copy(default_names, names)
    base = night(tmp_path, "20260101-000000-nightly", 0.1, seed=1, names=str(names))
    monkeypatch.chdir(tmp_path)
    relative = night(tmp_path, "20260102-000000-nightly", 0.1, seed=2, names="mine/names.csv")
    assert check_run(relative, base).comparability == []
    lines = names.read_text(encoding="utf-8").splitlines(keepends=True)
    names.write_text("".join(lines[:3] + lines[-2:]), encoding="utf-8")  # fewer names, same path
    edited = night(tmp_path, "20260103-000000-nightly", 0.1, seed=3, names=str(names))
    warned = check_run(edited, base).comparability
    assert len(warned) == 1 and "the audit design differs: names (its content changed)" in warned[0]


def test_the_untestable_warning_counts_the_family_and_the_baseline_as_the_check_does(tmp_path):
    """Break-it findings: one-prompt tasks were counted in the Holm family (12 rows, 'at least 5',
    for a family of 2); prompts without a task (classified during the run) made a false alarm;
    a baseline too small was not seen on the nights after the first."""
    import json

    from lmra.cli.audit import _untestable_check_note

    names, _ = write_inputs(tmp_path / "inputs", 4)

    def note(rows, per_task: int, baseline=None) -> str | None:
        prompts = tmp_path / f"p{len(list(tmp_path.glob('p*.jsonl')))}.jsonl"
        prompts.write_text("".join(json.dumps({"id": f"q{i}", "text": f"Prompt number {i}.", "domain": "d",
                                                **({"task": t} if t else {})}) + "\n" for i, t in enumerate(rows)))
        cfg = AuditConfig.model_validate(dict(name="n", prompts=str(prompts), names=str(names),
                                              prompts_per_task=per_task, output_dir=str(tmp_path / "r")))
        return _untestable_check_note(cfg, Audit(cfg).load_inputs(), 0.05, baseline)

    big = ["career advice"] * 10 + ["write a story"] * 10
    singles = [f"task {k}" for k in range(10)]  # ten tasks of one prompt: never in the check's family
    # (with the overall row in the family, 2 tasks of 3 + 10 one-prompt tasks pool 16 + 16 prompts:
    # the check can flag that; 1 prompt a task of these 12 tasks pools only 12 + 12, flaggable too)
    assert note(big + singles, 3) is None and note(big + singles, 1) is None
    one_task = ["career advice"] * 10  # one task: no overall row, the tasks' sizes decide
    warned = note(one_task, 1)
    assert warned and "a task needs at least 2 prompts in each run" in warned and "at least 3" in warned
    assert note(one_task, 3) is None
    assert note(big + [None] * 30, 1) is None  # prompts to classify: sizes unknown, nothing said
    small_file = note(["career advice"] * 2, 0)
    assert small_file and "add prompts: the prompt file has at most 2 per task and the check needs 3" in small_file
    # tonight is big enough, the pinned baseline is not
    tiny_base = note(one_task, 10, {"career advice": 1})
    assert tiny_base and "the baseline has at most 1 prompt(s) per task: pin a run with at least 3" in tiny_base
    assert note(one_task, 10, {"career advice": 10}) is None
    # tonight too small against a big baseline: 1/C(2 + 15, 2) = 0.0074 ≤ 0.05, so 2 a task would do
    against_big = note(one_task, 1, {"career advice": 15})
    assert against_big and "raise prompts_per_task to at least 2" in against_big
    # two tasks of a baseline with 1 prompt each, tonight 10 each: no task can be tested, but the
    # overall row pools 20 + 2 prompts (smallest p 1/C(22, 2) = 0.0043 ≤ 0.05): nothing said
    assert note(big, 10, {"career advice": 1, "write a story": 1}) is None


def test_dashboards_show_a_replayed_night_and_a_check_that_tested_nothing(tmp_path, lmra_cli, capsys):
    """New-user findings: the comparability warnings were only in the console log — a replayed
    night was a clean 'no regression' on the dashboards — and a check that tested no task read
    'no regression (0 tested)' and lmra_run_regressions 0. Recorded with the check; shown."""
    import json

    from lmra.cli.monitor import monitor_after_audit

    base = night(tmp_path, "20260101-000000-nightly", 0.05, seed=1)
    replay = night(tmp_path, "20260102-000000-nightly", 0.9, seed=1)
    assert monitor_after_audit(replay, baseline=str(base), report=False) == 2  # a replay: no conclusion
    reports = str(tmp_path / "reports")
    capsys.readouterr()
    assert lmra_cli(["history", "--reports-dir", reports, "--json"]) == 0
    doc = {r["run_id"]: r for r in json.loads(capsys.readouterr().out)["runs"]}
    assert len(doc[replay.name]["check"]["warnings"]) == 1
    # a dashboard drops the replayed night by its flag (fresh-user finding: the warehouse kept it
    # as one more night, and nothing marked it)
    assert doc[replay.name]["check"]["replayed"] is True
    assert lmra_cli(["history", "--reports-dir", reports]) == 0
    assert "warning: replayed answers" in " ".join(capsys.readouterr().out.split())
    assert lmra_cli(["export", str(replay), "--format", "prometheus", "--out", str(tmp_path / "m")]) == 0
    prom = next((tmp_path / "m").glob("*.prom")).read_text()
    assert any(ln.startswith("lmra_run_check_warnings{") and ln.endswith(" 1.0") for ln in prom.splitlines())
    assert lmra_cli(["report", "--history", "--reports-dir", reports]) == 0
    page = " ".join((tmp_path / "reports" / "history.html").read_text(encoding="utf-8").split())
    assert "warning: replayed answers" in page
    # the run's own report says it too (break-it finding: a green 'No regression' banner only)
    assert lmra_cli(["report", str(replay), "--out", str(tmp_path / "r.html")]) == 0
    report = " ".join((tmp_path / "r.html").read_text(encoding="utf-8").split())
    assert "Warning: the run drew with the baseline&#39;s seed (1)" in report or \
        "Warning: the run drew with the baseline's seed (1)" in report
    # a check an older lmra recorded has no warnings row: unknown (null, no sample), never a clean 0
    from lmra.history import History

    with History(tmp_path / "reports" / "history.sqlite") as h:
        h.db.execute("DELETE FROM check_warnings")
        h.db.execute("DELETE FROM check_sources")
        h.db.commit()
    capsys.readouterr()
    assert lmra_cli(["history", "--reports-dir", reports, "--json"]) == 0
    doc = {r["run_id"]: r for r in json.loads(capsys.readouterr().out)["runs"]}
    assert doc[replay.name]["check"]["warnings"] is None and doc[replay.name]["check"]["source"] is None
    assert lmra_cli(["export", str(replay), "--format", "prometheus", "--out", str(tmp_path / "m3")]) == 0
    assert "lmra_run_check_warnings{" not in next((tmp_path / "m3").glob("*.prom")).read_text()
    # two tiny nights (1 prompt a task): the check tests nothing — no verdict anywhere, never a pass
    tiny = tmp_path / "tiny"
    t1 = night(tiny, "20260101-000000-nightly", 0.05, seed=1, n_prompts=2)
    t2 = night(tiny, "20260102-000000-nightly", 0.05, seed=2, n_prompts=2)
    monitor_after_audit(t2, baseline=str(t1), report=False)
    capsys.readouterr()
    assert lmra_cli(["history", "--reports-dir", str(tiny / "reports")]) == 0
    assert "no conclusion (no task could be tested)" in " ".join(capsys.readouterr().out.split())
    assert lmra_cli(["export", str(t2), "--format", "prometheus", "--out", str(tmp_path / "m2")]) == 0
    prom = next((tmp_path / "m2").glob("*.prom")).read_text()
    assert "lmra_run_regressions{" not in prom and any(
        ln.startswith("lmra_run_check_tested_tasks{") and ln.endswith(" 0.0") for ln in prom.splitlines())


def test_a_replayed_night_too_small_to_test_is_stored_and_shown_as_a_replay(tmp_path, lmra_cli, capsys):
    """Known-items trial (s49): a same-seed re-run of a night too small to test (2 prompts, no task
    testable) — ``lmra check`` said "replayed", but the stored check lost it: ``lmra history`` and the
    history page said "no task could be tested", report.html advised raising prompts_per_task, and
    ``lmra export --skip-replay`` (nightly.sh) wrote the replay's metrics over the real night's."""
    from lmra.cli.monitor import monitor_after_audit
    from lmra.history import History, history_path

    base = night(tmp_path, "20260101-000000-nightly", 0.05, seed=1, n_prompts=2)
    real = night(tmp_path, "20260102-000000-nightly", 0.9, seed=2, n_prompts=2)
    assert monitor_after_audit(real, baseline=str(base), report=False) == 2  # nothing testable: no conclusion
    metrics = tmp_path / "textfile_collector"
    assert lmra_cli(["export", str(real), "--format", "prometheus", "--out", str(metrics), "--skip-replay"]) == 0
    prom_file = metrics / "lmra_nightly.prom"
    before = prom_file.read_bytes()
    replay = night(tmp_path, "20260102-010000-nightly", 0.9, seed=2, n_prompts=2)  # the re-run, the night's seed
    assert monitor_after_audit(replay, baseline=str(base), report=True) == 2
    with History(history_path(replay.parent)) as h:
        stored = h.latest_check(replay.name)
        assert stored["replayed"] is True and h.check_summary(replay.name)["replayed"] is True
        assert h.latest_check(real.name)["replayed"] is False  # the real night: not a replay
    capsys.readouterr()
    assert lmra_cli(["export", str(replay), "--format", "prometheus", "--out", str(metrics), "--skip-replay"]) == 0
    assert f"not written: every chatbot answer of run {replay.name} was replayed" in " ".join(
        capsys.readouterr().out.split())
    assert prom_file.read_bytes() == before  # the real night's metrics stay
    assert lmra_cli(["history", "--reports-dir", str(replay.parent)]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert "no conclusion (every chatbot answer replayed)" in out
    page = " ".join((replay / "report.html").read_text(encoding="utf-8").split())
    assert "No conclusion: every chatbot answer of this run was replayed" in page
    assert "Raise prompts_per_task" not in page
    assert lmra_cli(["report", "--history", "--reports-dir", str(replay.parent)]) == 0
    hist = " ".join((replay.parent / "history.html").read_text(encoding="utf-8").split())
    assert "no conclusion (every chatbot answer replayed)" in hist and "every chatbot answer was replayed from the call cache, so the regression check" in hist
    # a check recorded before the flag (an older lmra's history): told from its replay warning (round-2 break-it),
    # whichever of the two: a replay of the baseline's own draw (its seed), or of another complete night's
    same_as_base = night(tmp_path, "20260103-000000-nightly", 0.9, seed=1, n_prompts=2)
    assert monitor_after_audit(same_as_base, baseline=str(base), report=False) == 2
    import json
    import sqlite3

    db = sqlite3.connect(history_path(replay.parent))
    for rowid, caveats in db.execute("SELECT check_rowid, caveats FROM check_caveats").fetchall():
        db.execute("UPDATE check_caveats SET caveats = ? WHERE check_rowid = ?",
                   (json.dumps({k: v for k, v in json.loads(caveats).items() if k != "replayed"}), rowid))
    db.commit()
    db.close()
    with History(history_path(replay.parent)) as h:
        assert h.latest_check(replay.name)["replayed"] is True and h.latest_check(real.name)["replayed"] is False
        assert h.latest_check(same_as_base.name)["replayed"] is True
        assert any(w.startswith("the run drew with the baseline's seed") for w in h.latest_check(same_as_base.name)[
            "warnings"])


def test_a_same_seed_re_run_of_a_regression_night_leaves_that_nights_metrics_with_skip_replay(tmp_path, lmra_cli,
                                                                                                capsys):
    """Fresh-user finding: nightly.sh exported the metrics of a same-seed re-run of a regression
    night (exit 2, every answer replayed): the regression metrics vanished and the alert on
    lmra_run_regressions cleared with nothing fixed. ``lmra export --skip-replay`` (the
    script's) writes nothing for a replay and says so; a night that was asked is exported."""
    from lmra.cli.monitor import monitor_after_audit

    base = night(tmp_path, "20260101-000000-nightly", 0.05, seed=1)
    worse = night(tmp_path, "20260102-000000-nightly", 0.9, seed=2)
    assert monitor_after_audit(worse, baseline=str(base), report=False) == 3
    metrics = tmp_path / "textfile_collector"
    assert lmra_cli(["export", str(worse), "--format", "prometheus", "--out", str(metrics), "--skip-replay"]) == 0
    prom_file = metrics / "lmra_nightly.prom"
    before = prom_file.read_bytes()
    assert any(ln.startswith("lmra_run_regressions{") and not ln.endswith(" 0.0") for ln in before.decode().splitlines())
    replay = night(tmp_path, "20260102-010000-nightly", 0.9, seed=2)  # the re-run, the night's seed
    assert monitor_after_audit(replay, baseline=str(base), report=False) == 2
    capsys.readouterr()
    assert lmra_cli(["export", str(replay), "--format", "prometheus", "--out", str(metrics), "--skip-replay"]) == 0
    said = " ".join(capsys.readouterr().out.split())
    assert f"not written: every chatbot answer of run {replay.name} was replayed from the call cache" in said
    assert prom_file.read_bytes() == before  # the regression night's metrics, alert and all
    # without the flag the replay's metrics are written (no verdict: no regression metric), and said (s47)
    assert lmra_cli(["export", str(replay), "--format", "prometheus", "--out", str(metrics)]) == 0
    assert "lmra_run_regressions{" not in prom_file.read_text()
    err = " ".join(capsys.readouterr().err.split())
    assert f"every chatbot answer of run {replay.name} was replayed from the call cache" in err and \
        "--skip-replay leaves such a run out" in err, err
    assert lmra_cli(["export", "latest", "--reports-dir", str(replay.parent), "--format", "csv",
                     "--out", str(tmp_path / "latest")]) == 0
    assert "was replayed from the call cache" in capsys.readouterr().err
    # the tables too (s46: nightly.sh exports a complete night that exits 2 — its check refused — as
    # Parquet, but not a replay, whose tables would add a copy of the night it repeats)
    capsys.readouterr()
    assert lmra_cli(["export", str(replay), "--format", "parquet", "--out", str(tmp_path / "t"), "--skip-replay"]) == 0
    assert "the exported tables of the night it repeats stay as they are" in " ".join(capsys.readouterr().out.split())
    assert not (tmp_path / "t").exists()
    assert lmra_cli(["export", str(worse), "--format", "parquet", "--out", str(tmp_path / "w"), "--skip-replay"]) == 0
    assert (tmp_path / "w" / "per_task.parquet").is_file()
    # a folder copied away from its run history: said, exported, and no history made beside it (round-2, s46)
    import shutil

    away = tmp_path / "elsewhere" / replay.name
    shutil.copytree(replay, away)
    capsys.readouterr()
    assert lmra_cli(["export", str(away), "--format", "parquet", "--out", str(tmp_path / "a"), "--skip-replay"]) == 0
    err = " ".join(capsys.readouterr().err.split())
    assert f"--skip-replay: no run history beside {away}" in err and "its tables are exported" in err, err
    assert (tmp_path / "a" / "per_task.parquet").is_file() and not (tmp_path / "elsewhere" / "history.sqlite").exists()
    history = tmp_path / "reports" / "history.sqlite"  # its check read from the history named
    assert lmra_cli(["export", str(away), "--format", "parquet", "--out", str(tmp_path / "b"), "--skip-replay",
                     "--history", str(history)]) == 0
    assert not (tmp_path / "b").exists()


def test_refreshing_a_run_keeps_its_first_registration_time(tmp_path, monkeypatch):
    """New-user finding: every command rewrote each run's 'registered' time in the history."""
    from lmra import history
    from lmra.history import History

    run = night(tmp_path, "20260101-000000-nightly", 0.1, seed=1)
    with History(tmp_path / "reports" / "history.sqlite") as h:
        h.register(run)
        first = h.get(run.name)["registered"]
        monkeypatch.setattr(history, "_now", lambda: "2099-01-01T00:00:00+00:00")
        h.register(run)
        h.scan()
        assert h.get(run.name)["registered"] == first != "2099-01-01T00:00:00+00:00"


def test_a_placebo_split_anew_each_night_is_not_another_design(tmp_path):
    """Break-it finding: with a placebo, every night's own seed splits group A's names into other
    halves, and the names digest held the halves: every check said "the audit design differs:
    names (its content changed)", recorded in the history and Prometheus."""
    default_names, prompts = write_inputs(tmp_path / "inputs", 60)
    runs = []
    for seed in (1, 2):
        cfg = AuditConfig.model_validate(dict(
            name="nightly", prompts=str(prompts), names=str(default_names), prompts_per_task=0, seed=seed,
            output_dir=str(tmp_path / "reports"), cache=str(tmp_path / "cache.sqlite"), concurrency=8,
            judge_check={"enabled": False}, placebo={"share": 0.5}))
        run_dir = tmp_path / "reports" / f"2026010{seed}-000000-nightly"
        Audit(cfg, target=TaskTarget({"write a story": 0.1, "career advice": 0.1}),
              judge=ScriptedJudge(phrase_verdict, position_bias=0.2), run_dir=run_dir).run()
        runs.append(run_dir)
    import json

    halves = [json.loads((r / "summary.json").read_text())["placebo"] for r in runs]
    assert halves[0] and halves[1]  # (a placebo was run on both nights)
    assert check_run(runs[1], runs[0]).comparability == []


@pytest.mark.parametrize("key, before, after, judge", [
    ("min_answer_mass", 0.05, 0.2, {}),
    ("top_logprobs", 5, 20, {"provider": "openai", "model": "j", "base_url": "http://127.0.0.1:9/v1",
                             "api_key_required": False}),
    ("top_logprobs", 5, 20, {})])  # the embedded LMRA reads every token's probability: not said
def test_another_min_answer_mass_or_top_logprobs_is_another_design(tmp_path, key, before, after, judge):
    """Break-it note: a change of judge.min_answer_mass (how little option mass still reads as a
    rating) between the baseline and the run was not among the comparability warnings; nor (s44) of
    an openai LMRA's judge.top_logprobs (an option outside the listed alternatives reads as 0) — but
    not for an LMRA that lists no alternatives (round-2 break-it: said for the embedded model)."""
    default_names, prompts = write_inputs(tmp_path / "inputs", 40)
    runs = []
    for seed, value in ((1, before), (2, after)):
        cfg = AuditConfig.model_validate(dict(
            name="nightly", prompts=str(prompts), names=str(default_names), prompts_per_task=0, seed=seed,
            output_dir=str(tmp_path / "reports"), cache=str(tmp_path / "cache.sqlite"), concurrency=8,
            judge_check={"enabled": False}, judge={**judge, key: value}))
        run_dir = tmp_path / "reports" / f"2026010{seed}-000000-nightly"
        Audit(cfg, target=TaskTarget({"write a story": 0.1, "career advice": 0.1}),
              judge=ScriptedJudge(phrase_verdict, position_bias=0.2), run_dir=run_dir).run()
        runs.append(run_dir)
    said = check_run(runs[1], runs[0]).comparability
    if key == "top_logprobs" and not judge:
        assert not any("top_logprobs" in w for w in said), said
        return
    (line,) = said
    assert f"the audit design differs: judge.{key} ({before} → {after})" in line


def test_a_same_seed_night_that_changed_only_the_lmras_settings_is_still_a_replay(tmp_path):
    """Round-2 break-it (s44): a design change of the LMRA's settings alone (judge.min_answer_mass,
    judge.top_logprobs) turned the same-seed replay warning off, so a night whose every chatbot answer
    was the baseline's own read "no regression"; the chatbot's answers are replayed all the same."""
    default_names, prompts = write_inputs(tmp_path / "inputs", 40)
    runs = []
    for i, floor in enumerate((0.05, 0.2)):
        cfg = AuditConfig.model_validate(dict(
            name="nightly", prompts=str(prompts), names=str(default_names), prompts_per_task=0, seed=1,
            output_dir=str(tmp_path / "reports"), cache=str(tmp_path / "cache.sqlite"), concurrency=8,
            judge_check={"enabled": False}, judge={"min_answer_mass": floor}))
        run_dir = tmp_path / "reports" / f"2026010{i + 1}-000000-nightly"
        Audit(cfg, target=TaskTarget({"write a story": 0.1, "career advice": 0.1}),
              judge=ScriptedJudge(phrase_verdict, position_bias=0.2), run_dir=run_dir).run()
        runs.append(run_dir)
    said = check_run(runs[1], runs[0]).comparability
    assert any("judge.min_answer_mass (0.05 → 0.2)" in w for w in said), said
    assert any(w.startswith("the run drew with the baseline's seed (1) and every chatbot answer was replayed")
               for w in said), said


def test_another_endpoint_or_custom_options_are_another_target(tmp_path):
    """Docs-truth finding: docs/providers.md says a custom provider's changed ``options`` (its
    ``base_url`` recorded as ``…#options=<digest>``) shows in the nightly check; the check
    compared provider and model id only and said nothing."""
    import copy

    from lmra.comparable import comparability_warnings, short_label
    from lmra.runfolder import load_run

    a = load_run(make_run(tmp_path, "20260101-000000-nightly", {"write a story": 0.1, "career advice": 0.1}, seed=1,
                          n_prompts=20))
    b = load_run(make_run(tmp_path, "20260102-000000-nightly", {"write a story": 0.1, "career advice": 0.1}, seed=2,
                          n_prompts=20))
    assert comparability_warnings(a, b) == []
    for before, after in (("#options=1a88aa00aa00aa00", "#options=3cc9bb00bb00bb00"),
                          ("http://127.0.0.1:8000/v1", "http://127.0.0.1:9000/v1"),
                          ("http://a/v1#options=1a88aa00aa00aa00", "http://a/v1#options=3cc9bb00bb00bb00")):
        a2, b2 = copy.deepcopy(a), copy.deepcopy(b)
        a2.manifest["target"]["base_url"], b2.manifest["target"]["base_url"] = before, after
        (line,) = comparability_warnings(a2, b2)
        assert short_label(line) == "another target" and after in line and "two deployments" in line
        b2.manifest["target"]["base_url"] = before  # the same endpoint: nothing to say
        assert comparability_warnings(a2, b2) == []
    # not another deployment (break-it findings: each warned every night): a trailing "/", the
    # host's case, a default endpoint written out against an unset one, an options digest that
    # only the newer run has (recorded before lmra keyed the options)
    for before, after in (("http://a/v1", "http://a/v1/"), ("HTTP://Host:8000/v1", "http://host:8000/v1"),
                          ("", "https://api.openai.com/v1"), ("http://a/v1", "http://a/v1#options=3cc9bb00bb00bb00")):
        a2, b2 = copy.deepcopy(a), copy.deepcopy(b)
        a2.manifest["target"]["base_url"], b2.manifest["target"]["base_url"] = before, after
        assert comparability_warnings(a2, b2) == [], (before, after)
    a2 = copy.deepcopy(a)  # a baseline recorded without it: not compared
    a2.manifest["target"].pop("base_url", None)
    b2 = copy.deepcopy(b)
    b2.manifest["target"]["base_url"] = "http://x"
    assert comparability_warnings(a2, b2) == []


def test_a_re_run_of_a_partial_night_is_tested_not_called_a_replay(tmp_path, lmra_cli, capsys):
    """Break-it finding: a night left partial (judge calls failed after every retry) and run again
    with its seed once the judge is back takes every chatbot answer from the cache — tonight's own
    — and its regression was turned into exit 2, "nothing was tested". Only a replay of the
    baseline's seed or of a night that finished complete is one."""
    import zlib

    base = night(tmp_path, "20260101-000000-nightly", 0.05, seed=1)
    partial = night(tmp_path, "20260102-000000-nightly", 0.9, seed=2,
                    judge_fail_on=lambda text: zlib.crc32(text.encode()) % 3 == 0)
    first = check_run(partial, base)  # (registers the partial night in the history)
    from lmra.runfolder import load_run

    assert load_run(partial).status == "partial" and not first.replayed
    rerun = night(tmp_path, "20260102-010000-nightly", 0.9, seed=2)
    result = check_run(rerun, base)
    assert not result.replayed and not result.regressions.empty
    assert result.comparability == []  # nor warned as one (user trial: "replayed … finished earlier")
    capsys.readouterr()
    assert lmra_cli(["check", str(rerun), "--baseline", str(base)]) == 3
    assert "replayed" not in capsys.readouterr().err


def test_a_re_run_of_a_regression_night_is_no_conclusion_on_every_surface(tmp_path, lmra_cli, capsys):
    """Fresh-user findings: a same-seed re-run of a night replays its answers; it exited 2 "nothing
    tested" — but `lmra history`, history.html, report.html and the Prometheus export said "no
    regression" (0 regressions, 27 tested); and a re-run of a *regression* night exited 3 again,
    was listed as a second regression night and replaced that night's export. A replay's check has
    one verdict everywhere: no conclusion (exit 2), its replayed rises said as such."""
    import json

    from lmra.cli.monitor import monitor_after_audit

    base = night(tmp_path, "20260101-000000-nightly", 0.05, seed=1)
    bad = night(tmp_path, "20260102-000000-nightly", 0.9, seed=2)
    assert monitor_after_audit(bad, baseline=str(base), report=False) == 3  # the night itself: a regression
    again = night(tmp_path, "20260102-010000-nightly", 0.9, seed=2)  # the same night re-run: every answer cached
    result = check_run(again, base)
    assert result.replayed and not result.regressions.empty  # its replayed numbers rise as the night's did
    assert result.verdict == "no_conclusion" and result.exit_status == 2
    capsys.readouterr()
    assert monitor_after_audit(again, baseline=str(base), report=False) == 2
    out = " ".join(capsys.readouterr().out.split())
    assert "No conclusion: every chatbot answer of this run was replayed" in out
    assert "Rise (replayed answers) in 2 task(s)" in out and "Regression in" not in out
    assert "No regression" not in out  # (break-it round 2, round 33: a green "No regression" followed it)
    assert "rise (replayed)" in out and "REGRESSION" not in out  # the table's rows too (user trial)
    from lmra.history import History

    with History(tmp_path / "reports" / "history.sqlite") as h:  # a query on the checks table counts no regression
        counts = dict(h.db.execute("SELECT run_id, max(n_regressions) FROM checks GROUP BY run_id").fetchall())
    assert counts[again.name] == 0 and counts[bad.name] == 3
    assert lmra_cli(["check", str(again), "--baseline", str(base), "--json"]) == 2
    doc = json.loads(capsys.readouterr().out)
    assert doc["verdict"] == "no_conclusion" and doc["exit_status"] == 2 and doc["replayed"] is True
    assert doc["regressions"] == [] and doc["overall_regressions"] == [] and doc["improvements"] == []
    assert {t["decision"] for t in doc["tests"] + doc["overall"]} == {"replayed"}
    assert not any(t["regressed"] for t in doc["tests"] + doc["overall"])
    reports = str(tmp_path / "reports")
    assert lmra_cli(["history", "--reports-dir", reports, "--json"]) == 0
    rows = {r["run_id"]: r for r in json.loads(capsys.readouterr().out)["runs"]}
    assert rows[again.name]["check"]["verdict"] == "no_conclusion" and not rows[again.name]["check"]["regressed"]
    assert rows[bad.name]["check"]["verdict"] == "regression" and rows[bad.name]["check"]["regressed"]
    assert lmra_cli(["history", "--reports-dir", reports]) == 0
    table = " ".join(capsys.readouterr().out.split())
    assert "no conclusion (every chatbot answer replayed) vs 20260101-000000-nightly" in table
    assert table.count("REGRESSION") == 1  # the night itself only
    # a task's trend marks the replayed night, whose point repeats the night it replays (fresh-user finding)
    from lmra.runfolder import load_run

    task = str(load_run(again).per_task["task"].iloc[0])
    assert lmra_cli(["history", "--reports-dir", reports, "--task", task]) == 0
    trend = " ".join(capsys.readouterr().out.split())
    assert f"{again.name} replayed" in trend and f"{bad.name} replayed" not in trend
    assert "'replayed': every chatbot answer of that night was replayed from the call cache" in trend
    assert lmra_cli(["history", "--reports-dir", reports, "--task", task, "--json"]) == 0
    points = {p["run_id"]: p["replayed"] for p in json.loads(capsys.readouterr().out)["points"]}
    assert points[again.name] is True and points[bad.name] is False and points[base.name] is False
    assert lmra_cli(["export", str(again), "--format", "prometheus", "--out", str(tmp_path / "m")]) == 0
    prom = next((tmp_path / "m").glob("*.prom")).read_text()
    assert "lmra_run_regressions{" not in prom and "lmra_task_regressed{" not in prom
    assert "lmra_run_check_tested_tasks{" not in prom and "lmra_run_check_warnings{" in prom
    assert lmra_cli(["report", "--history", "--reports-dir", reports]) == 0
    page = " ".join((tmp_path / "reports" / "history.html").read_text(encoding="utf-8").split())
    assert "no conclusion: every chatbot answer was replayed from the call cache" in page  # the newest night
    assert "no conclusion (every chatbot answer replayed) vs 20260101-000000-nightly" in page
    assert lmra_cli(["report", str(again), "--out", str(tmp_path / "r.html")]) == 0
    report = " ".join((tmp_path / "r.html").read_text(encoding="utf-8").split())
    assert "No conclusion: every chatbot answer of this run was replayed" in report
    assert "Regression: " not in report and 'class="regression"' not in report
    assert "replayed</td>" in report
    # a check an older lmra recorded has no verdict row: its replay warning says it (review finding)
    from lmra.history import History

    with History(tmp_path / "reports" / "history.sqlite") as h:
        h.db.execute("DELETE FROM check_verdicts")
        h.db.commit()
    capsys.readouterr()
    assert lmra_cli(["history", "--reports-dir", reports, "--json"]) == 0
    rows = {r["run_id"]: r for r in json.loads(capsys.readouterr().out)["runs"]}
    assert rows[again.name]["check"]["verdict"] == "no_conclusion" and not rows[again.name]["check"]["regressed"]
    assert rows[bad.name]["check"]["verdict"] == "regression"
    assert lmra_cli(["export", str(again), "--format", "prometheus", "--out", str(tmp_path / "m2")]) == 0
    assert "lmra_run_regressions{" not in next((tmp_path / "m2").glob("*.prom")).read_text()


def test_history_says_a_failed_judges_no_regression_is_not_evidence(tmp_path, lmra_cli, capsys):
    """Fresh-user finding: a night whose judge failed validation (exit 5) read a plain 'no
    regression (… tested)' in lmra history's check column. Its verdict is said to be no evidence."""
    import json

    from lmra.cli.monitor import monitor_after_audit

    low = {"write a story": 0.1, "career advice": 0.1}
    jc = {"per_kind": 2, "gate": False, "waiver": "test"}  # the scripted judge fails the canaries
    base = make_run(tmp_path, "20260101-000000-nightly", low, seed=1, n_prompts=40)
    bad_judge = make_run(tmp_path, "20260102-000000-nightly", low, seed=2, n_prompts=40, judge_check=jc)
    good = make_run(tmp_path, "20260103-000000-nightly", low, seed=3, n_prompts=40)
    for run in (bad_judge, good):
        monitor_after_audit(run, baseline=str(base), report=False)
    capsys.readouterr()
    assert lmra_cli(["history", "--reports-dir", str(tmp_path / "reports"), "--json"]) == 0
    rows = {r["run_id"]: r for r in json.loads(capsys.readouterr().out)["runs"]}
    assert rows[bad_judge.name]["judge_status"].startswith("failed")
    assert rows[bad_judge.name]["check"]["verdict"] == rows[good.name]["check"]["verdict"] == "no_regression"
    assert lmra_cli(["history", "--reports-dir", str(tmp_path / "reports")]) == 0
    out = capsys.readouterr().out.splitlines()  # off a terminal: one line per run (docs/nightly.md, "Logs")
    line = lambda run: next(ln for ln in out if run.name in ln and "started" not in ln)  # noqa: E731
    assert "not evidence: judge failed validation" in line(bad_judge)
    assert "not evidence" not in line(good) and "no regression" in line(good)
    assert lmra_cli(["report", "--history", "--reports-dir", str(tmp_path / "reports")]) == 0  # and on the page
    page = " ".join((tmp_path / "reports" / "history.html").read_text(encoding="utf-8").split())
    assert "not evidence: judge failed" in page


def test_a_failed_night_is_listed_as_not_finished_not_a_silent_gap(tmp_path, lmra_cli, capsys):
    """Fresh-user finding: a night whose endpoint was down (exit 1, status failed) appeared in
    neither lmra history nor history.html — a silent gap. Listed below the table, in --json
    (``not_finished``) and on the history page, with the manifest's stop reason."""
    import json
    import socket

    night(tmp_path, "20260101-000000-nightly", 0.05, seed=1)
    names, prompts = write_inputs(tmp_path / "inputs", 60)
    with socket.socket() as s:  # a port nothing listens on: connection refused
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    cfg = custom_audit_config(tmp_path, names, prompts, target="openai", name="nightly",
                              judge="test_classify_all_failed:make_judge",
                              target_lines=f'model = "down"\nbase_url = "http://127.0.0.1:{port}/v1"\n'
                                           'api_key_required = false\nmax_retries = 0')
    assert lmra_cli(["audit", "--config", str(cfg), "--no-progress", "--no-report"]) == 1
    (failed,) = [p for p in (tmp_path / "reports").iterdir() if p.is_dir() and p.name != "20260101-000000-nightly"]
    capsys.readouterr()
    reports = str(tmp_path / "reports")
    assert lmra_cli(["history", "--reports-dir", reports]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert "1 run folder did not finish" in out and f"{failed.name}: failed — EndpointUnreachable" in out
    assert lmra_cli(["history", "--reports-dir", reports, "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert [r["run_id"] for r in doc["runs"]] == ["20260101-000000-nightly"]
    (nf,) = doc["not_finished"]
    assert nf["run_id"] == failed.name and nf["status"] == "failed" and "unreachable" in nf["stop_reason"]
    assert lmra_cli(["report", "--history", "--reports-dir", reports]) == 0
    page = " ".join((tmp_path / "reports" / "history.html").read_text(encoding="utf-8").split())
    assert "Run folders that did not finish" in page and f"{failed.name}: failed — EndpointUnreachable" in page
    # review findings: only audit folders (a recsys run beside them, 'finished', is none); the newest
    # 10 on the console; a folder without config.toml named from its folder name, '-N' suffix and all
    import shutil

    recsys = tmp_path / "reports" / "20260105-000000-movies"
    recsys.mkdir()
    (recsys / "manifest.json").write_text(json.dumps({"status": "finished", "mode": "fairllm", "k": 5}))
    for i in range(11):
        copy = tmp_path / "reports" / f"20260106-0000{i:02d}-nightly-2"
        shutil.copytree(failed, copy)
        (copy / "config.toml").unlink()
    capsys.readouterr()
    assert lmra_cli(["history", "--reports-dir", reports, "--name", "nightly", "--json"]) == 0
    listed = json.loads(capsys.readouterr().out)["not_finished"]
    assert len(listed) == 12 and all(r["name"] == "nightly" for r in listed) and recsys.name not in str(listed)
    assert json.loads((recsys / "manifest.json").read_text())["status"] == "finished"  # not marked stale
    assert lmra_cli(["history", "--reports-dir", reports]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert "12 run folders did not finish" in out and "the newest 10 ('--json' lists all)" in out
    # (the copies started when the failed night did: ordered by run id, the two first left out)
    assert "20260106-000000-nightly-2:" not in out and "20260106-000002-nightly-2: failed" in out


def test_a_killed_night_completed_by_its_rerun_is_listed_as_resumed(tmp_path, lmra_cli, capsys):
    """New-user finding: a night killed with kill -9 and re-run with the same seed stayed listed
    as "did not finish" — "stale" with no reason — forever, although the re-run completed it. It
    now says the process is gone and which run resumed it; another seed's run does not count."""
    import json
    import shutil
    import subprocess
    import sys

    night(tmp_path, "20260101-000000-nightly", 0.05, seed=1)
    rerun = night(tmp_path, "20260102-000500-nightly", 0.05, seed=2)  # the re-run that completed night 2
    killed = tmp_path / "reports" / "20260102-000000-nightly"  # night 2's first try, killed mid-run
    shutil.copytree(rerun, killed)
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()  # a pid that is gone
    manifest = json.loads((killed / "manifest.json").read_text())
    manifest.update(status="running", pid=dead.pid)
    (killed / "manifest.json").write_text(json.dumps(manifest))
    (killed / "run.lock").unlink(missing_ok=True)
    other = tmp_path / "reports" / "20260101-000500-nightly"  # another night's killed run (seed 7): not resumed
    shutil.copytree(killed, other)
    (other / "manifest.json").write_text(json.dumps(manifest | {"seed": 7}))
    reports = str(tmp_path / "reports")
    capsys.readouterr()
    assert lmra_cli(["history", "--reports-dir", reports, "--json"]) == 0
    listed = {r["run_id"]: r for r in json.loads(capsys.readouterr().out)["not_finished"]}
    assert listed[killed.name]["resumed_by"] == rerun.name and listed[other.name]["resumed_by"] is None
    assert lmra_cli(["history", "--reports-dir", reports]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert (f"{killed.name}: stale (its process is gone: killed, crashed, or stopped by a full disk before it could say so) — resumed by {rerun.name} (same seed)"
            in out)
    assert f"{other.name}: stale (its process is gone: killed, crashed, or stopped by a full disk before it could say so)" in out
    assert f"{other.name}: stale (its process is gone: killed, crashed, or stopped by a full disk before it could say so) — resumed" not in out
    assert lmra_cli(["report", "--history", "--reports-dir", reports]) == 0
    page = " ".join((tmp_path / "reports" / "history.html").read_text(encoding="utf-8").split())
    assert f"{killed.name}: stale (its process is gone: killed, crashed, or stopped by a full disk before it could say so) — resumed by {rerun.name}" in page


def test_target_calls_when_only_the_lmra_carries_its_url_in_its_key():
    """Break-it round 2, s39 (code reading): one provider:model in both roles, the LMRA's counts under
    "key @ URL" and the chatbot's under the plain key — counted apart, yet read as shared (None)."""
    from types import SimpleNamespace

    from lmra.comparable import target_calls

    manifest = {"target": {"base_url": None}, "judge": {"base_url": "http://127.0.0.1:9/v1"},
                "calls": {"fresh": 30, "cached": 4, "by_model": {
                    "openai:m": {"fresh": 10, "cached": 2}, "openai:m @ http://127.0.0.1:9/v1": {"fresh": 20, "cached": 2}}}}
    run = SimpleNamespace(manifest=manifest, target_provider="openai", target_model="m", judge_provider="openai",
                          judge_model="m")
    assert target_calls(run) == (10, 2)


def test_all_answers_replayed_needs_no_fresh_and_some_cached_target_call():
    """The first test of a same-seed replay, shared by ``lmra check``, ``lmra compare`` and
    ``latest``: no fresh target call, at least one replayed; unrecorded counts are not a replay."""
    from types import SimpleNamespace

    from lmra.comparable import all_answers_replayed

    def run(by_model):
        return SimpleNamespace(manifest={"calls": {"by_model": by_model}}, target_provider="openai",
                               target_model="t", judge_provider="openai", judge_model="j")

    assert all_answers_replayed(run({"openai:t": {"fresh": 0, "cached": 12}}))
    assert not all_answers_replayed(run({"openai:t": {"fresh": 1, "cached": 12}}))  # one answer called tonight
    assert not all_answers_replayed(run({"openai:t": {"fresh": 0, "cached": 0}}))  # nothing answered at all
    assert not all_answers_replayed(run({}))  # counts not recorded: not said to be a replay


def test_another_prompt_set_or_refusal_and_filter_settings_are_another_design(tmp_path):
    """Break-it finding (s40): night 2 read another prompt set under the same task names (a relative
    prompts path found in another folder), or ran with refusal labels and the identity filter off; the
    check said "no regression" with no word that the design changed."""
    from types import SimpleNamespace

    from lmra.comparable import comparability_warnings

    a = night(tmp_path, "20260101-000000-nightly", 0.1, seed=1, n_prompts=60)
    b = night(tmp_path, "20260102-000000-nightly", 0.1, seed=2, n_prompts=60)
    assert check_run(b, a).comparability == []  # same prompt file, same settings
    c = night(tmp_path, "20260103-000000-nightly", 0.1, seed=3, n_prompts=64)  # another prompt file, same tasks
    lines = check_run(c, a).comparability
    assert len(lines) == 1 and lines[0].startswith("the audit design differs: prompts (") and "prompts-64" in lines[0]

    class Run(SimpleNamespace):  # a run folder's fields the warnings read; the others unrecorded (None)
        def __getattr__(self, name):
            return None

    def run(refusal, flt):
        return Run(target_provider="openai", target_model="m", target_base_url="u",
                   config={"refusal": refusal, "filter": flt, "seed": 1}, manifest={"calls": {}})

    on = run({"enabled": True, "threshold": 0.5}, {"enabled": True, "lmra": True, "threshold": 0.5})
    off = run({"enabled": False, "threshold": 0.5}, {"enabled": False, "lmra": True, "threshold": 0.5})
    (line,) = comparability_warnings(on, off)
    assert line.startswith("the audit design differs: refusal.enabled (True → False); filter.enabled (True → False)")


def test_a_rerun_after_a_time_zone_change_is_found_by_its_start_time(tmp_path, lmra_cli, capsys):
    """Break-it finding, s40: a night killed under UTC+14 and completed by its re-run under UTC−11
    stayed "did not finish", resumed by none: the re-run's run id (the writer's local time) is the
    smaller one. The start times, in UTC, order them."""
    import json
    import shutil

    from lmra.runstate import completed_by

    night(tmp_path, "20260101-000000-nightly", 0.05, seed=1)
    rerun = night(tmp_path, "20260102-000500-nightly", 0.05, seed=2)
    manifest = json.loads((rerun / "manifest.json").read_text())
    (rerun / "manifest.json").write_text(json.dumps(manifest | {"started": "2026-01-01T15:05:00-11:00"}))  # 02:05Z
    killed = tmp_path / "reports" / "20260102-100000-nightly"  # its first try: 10:00 at UTC+14 = 20:00Z the day before
    shutil.copytree(rerun, killed)
    (killed / "manifest.json").write_text(json.dumps(manifest | {"status": "running", "started":
                                                                 "2026-01-02T10:00:00+14:00"}))
    (killed / "run.lock").unlink(missing_ok=True)
    capsys.readouterr()
    assert lmra_cli(["history", "--reports-dir", str(tmp_path / "reports"), "--json"]) == 0
    listed = {r["run_id"]: r for r in json.loads(capsys.readouterr().out)["not_finished"]}
    assert listed[killed.name]["resumed_by"] == rerun.name
    assert completed_by(killed) == rerun.name  # (read from the folders: lmra report, batch resume)


def test_last_with_the_clock_set_back_names_the_later_runs_not_a_first_night(tmp_path, lmra_cli, capsys):
    """Break-it finding, s41: a night run with the clock 2 h behind (an NTP step back, a restored VM)
    made its calls, then exited 2 with "no earlier run named … the first run has no 'last' baseline",
    beside two complete earlier nights. It now says what it found and what to run."""
    import json

    first = night(tmp_path, "20260101-000000-nightly", 0.05, seed=1)
    second = night(tmp_path, "20260102-000000-nightly", 0.05, seed=2)
    behind = night(tmp_path, "20260102-000100-nightly", 0.05, seed=3)
    # the two earlier nights were recorded at the right time; this machine's clock (now) is behind them
    for folder, started in ((first, "2099-01-01T02:15:00+00:00"), (second, "2099-01-02T02:15:00+00:00")):
        manifest = json.loads((folder / "manifest.json").read_text())
        (folder / "manifest.json").write_text(json.dumps(manifest | {"started": started}))
    capsys.readouterr()
    code = lmra_cli(["check", str(behind), "--baseline", "last", "--reports-dir", str(tmp_path / "reports")])
    err = " ".join(capsys.readouterr().err.split())
    assert code == 2, err
    assert "the first run has no 'last' baseline" not in err, err
    assert ("but 2 complete runs of that name started after it (the newest: " f"{second.name}") in err, err
    assert f"'lmra check {behind.name} --baseline {second.name}'" in err, err


def test_a_partial_replay_is_said_when_one_model_plays_both_roles(tmp_path):
    """Break-it finding, s40: two same-seed nights started together, chatbot and LMRA one model: the
    second made some calls itself and replayed the rest; the model's counts are shared, so nothing
    was said (exit 0 on the first night's numbers). The target's own counts are recorded apart."""
    import json
    import sqlite3

    base = night(tmp_path, "20260101-000000-nightly", 0.05, seed=1, one_model=True)
    with sqlite3.connect(tmp_path / "cache.sqlite") as db:  # half the chatbot's answers gone (the LMRA's ask 1 token)
        db.execute("DELETE FROM calls WHERE request NOT LIKE '%\"max_tokens\":1,%' AND rowid % 2 = 0")
        db.execute("DELETE FROM pair_memo")
    again = night(tmp_path, "20260102-000000-nightly", 0.05, seed=1, one_model=True)
    role = json.loads((again / "manifest.json").read_text())["calls"]["by_role"]["target"]
    assert role["fresh"] > 0 and role["cached"] > 0, role
    lines = check_run(again, base).comparability
    assert len(lines) == 1 and lines[0].startswith(
        f"the run drew with the baseline's seed (1) and {role['cached']} of its {role['fresh'] + role['cached']} "
        "chatbot answers were replayed"), lines


def test_a_stale_manifest_whose_start_time_is_not_a_string_is_still_listed(tmp_path, lmra_cli, capsys):
    """Break-it round 2, s41: a killed run's manifest with ``"started": 12345`` ended ``lmra history``
    (and ``report --history``, the nightly's history page) in a TypeError, exit 1."""
    import json
    import shutil

    done = night(tmp_path, "20260101-000000-nightly", 0.05, seed=1)
    killed = tmp_path / "reports" / "20260102-000000-nightly"
    shutil.copytree(done, killed)
    manifest = json.loads((killed / "manifest.json").read_text())
    (killed / "manifest.json").write_text(json.dumps(manifest | {"status": "running", "seed": 2, "started": 12345}))
    (killed / "run.lock").unlink(missing_ok=True)
    capsys.readouterr()
    assert lmra_cli(["history", "--reports-dir", str(tmp_path / "reports"), "--json"]) == 0
    listed = {r["run_id"]: r for r in json.loads(capsys.readouterr().out)["not_finished"]}
    assert listed[killed.name]["status"] == "stale" and listed[killed.name]["resumed_by"] is None


def test_a_night_recorded_with_the_clock_ahead_is_said_by_last_and_latest(tmp_path, lmra_cli, capsys):
    """Break-it finding, s41: a night recorded with its clock a day ahead was passed over by the next
    night's '--baseline last' without a word, and stayed 'latest'."""
    import json

    first = night(tmp_path, "20260101-000000-nightly", 0.05, seed=1)
    ahead = night(tmp_path, "20260102-000000-nightly", 0.05, seed=2)
    manifest = json.loads((ahead / "manifest.json").read_text())
    (ahead / "manifest.json").write_text(json.dumps(manifest | {"started": "2099-01-02T02:15:00+00:00"}))
    third = night(tmp_path, "20260103-000000-nightly", 0.05, seed=3)
    reports = str(tmp_path / "reports")
    capsys.readouterr()
    lmra_cli(["check", str(third), "--baseline", "last", "--reports-dir", reports])
    out = " ".join(capsys.readouterr().out.split())
    assert f"vs baseline {first.name}" in out, out[-2000:]
    assert (f"'--baseline last' did not consider {ahead.name}: it is recorded as started at 2099-01-02T02:15:00+00:00, "
            "after this machine's clock now") in out, out[-3000:]
    lmra_cli(["check", "latest", "--baseline", "last", "--reports-dir", reports])
    err = " ".join(capsys.readouterr().err.split())
    assert f"note: 'latest' is {ahead.name}, recorded as started at 2099-01-02T02:15:00+00:00 — after this" in err, err


def test_latest_says_when_it_is_a_same_seed_replay(tmp_path, capsys):
    """Fresh-user finding (s48): after a same-seed re-run, ``latest`` (lmra gate latest, lmra plan --pilot
    latest, lmra report latest) was that replay, without a word; it is still the newest complete run, and
    stderr says its answers are the earlier night's."""
    from lmra.history import History

    night(tmp_path, "20260101-000000-nightly", 0.05, seed=1)
    night(tmp_path, "20260102-000000-nightly", 0.05, seed=2)
    capsys.readouterr()
    with History(tmp_path / "reports" / "history.sqlite") as h:
        assert h.resolve("latest").run_id == "20260102-000000-nightly"
    assert "replayed" not in capsys.readouterr().err  # a night with its own seed: nothing said
    night(tmp_path, "20260103-000000-nightly", 0.9, seed=2)  # the same seed again: every answer replayed
    capsys.readouterr()
    with History(tmp_path / "reports" / "history.sqlite") as h:
        assert h.resolve("latest").run_id == "20260103-000000-nightly"
    err = " ".join(capsys.readouterr().err.split())
    assert ("note: 'latest' is 20260103-000000-nightly, a re-run with the seed of 20260102-000000-nightly: every "
            "chatbot answer was replayed from the call cache") in err
