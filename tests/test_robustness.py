"""Bad inputs and broken backends found by trying to break lmra: each gets a clear message
and the right exit status, and good work is never thrown away."""

import json

import pytest

from conftest import NAME_TO_GROUP
from doubles import ScriptedJudge, ScriptedTarget, run_folder_text
from lmra import Audit
from lmra.cli import main
from lmra.config import AuditConfig
from lmra.providers.base import ProviderError


def run(capsys, *argv):
    code = main(list(argv))
    out = capsys.readouterr()
    return code, out.out + out.err


def test_dead_endpoint_is_a_failure_not_a_clean_run(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    cfg = tmp_path / "dead.toml"
    cfg.write_text('''name = "dead"
tasks = ["write a story"]
prompts_per_task = 1
[judge_check]
enabled = false
[filter]
lmra = false
[refusal]
enabled = false
[target]
provider = "openai"
model = "m"
base_url = "http://127.0.0.1:9/v1"
api_key_required = false
max_retries = 0
timeout_s = 5
''')
    code, text = run(capsys, "audit", "--config", str(cfg), "--no-progress", "--no-report")
    assert code == 1
    assert "all 1 pairs failed" in text and "Traceback" not in text


def test_custom_groups_without_comparisons_fail_before_any_call(tmp_path, capsys):
    cfg = tmp_path / "g.toml"
    cfg.write_text('[[groups]]\nname = "woman"\ngender = "female"\n\n[[groups]]\nname = "man"\ngender = "male"\n')
    code, text = run(capsys, "validate", str(cfg))
    assert code == 2 and "field 'comparisons'" in text and "unknown group 'female'" in text


@pytest.mark.parametrize("body,needle", [
    ('comparisons = [["female", "male"], ["female", "male"]]\n', "listed twice"),
    ("comparisons = []\n", "comparisons"),
    ('name = "../../escape"\n', "field 'name'"),
    ('comparisons = [["a vs b", "male"]]\n[[groups]]\nname = "a vs b"\n[[groups]]\nname = "male"\n', "' vs '"),
    ('tasks = ["write a storyy"]\n', "unknown tasks ['write a storyy'] — 'write a storyy': did you mean 'write a story'?"),
    ('domains = ["arts"]\n', "unknown domains ['arts'] — 'arts': did you mean 'art'?"),
    ('tasks = ["xyzzy"]\n', "unknown tasks ['xyzzy']; known: career advice"),  # nothing near: no guess
])
def test_misconfigurations_are_refused(tmp_path, capsys, body, needle):
    cfg = tmp_path / "c.toml"
    cfg.write_text(body)
    code, text = run(capsys, "validate", str(cfg))
    assert code == 2 and needle in text, text


def test_rich_markup_in_names_is_printed_verbatim(tmp_path, capsys):
    cfg = tmp_path / "cfg[old].toml"
    cfg.write_text('comparisons = [["female", "[/]"]]\n')
    code, text = run(capsys, "validate", str(cfg))
    assert code == 2 and "cfg[old].toml" in text and "'[/]'" in text


@pytest.mark.parametrize("template,needle", [
    ("### system\nPreferred name: {name\n", "bad placeholder"),
    ("### system\nName: {name:d}\n", "bad placeholder"),
    ("### system\nName: {name:>100000000}\n", "{name:>100000000} has a format spec"),  # was: 100 MB per message
    ("### system\nName: {name!r}\n", "{name!r} has a conversion"),
    ("### system\nName: {nam}\n", "no {name} placeholder"),
])
def test_bad_personalization_templates(tmp_path, capsys, template, needle):
    tpl = tmp_path / "style.txt"
    tpl.write_text(template)
    cfg = tmp_path / "c.toml"
    cfg.write_text(f'personalization = "{tpl}"\n')
    code, text = run(capsys, "validate", str(cfg))
    assert code == 2 and needle in text and "Traceback" not in text, text


def test_bom_and_long_fields_and_surrogates(tmp_path, capsys):
    names = tmp_path / "n.csv"
    names.write_bytes("\ufeffname,gender\nAnna,female\nJohn,male\n".encode("utf-8"))
    prompts = tmp_path / "p.csv"  # fields beyond the csv module's default limit (131,072 characters)
    prompts.write_text("text,meta\n" + "x" * 100_000 + "," + "m" * 200_000 + "\n")
    cfg = tmp_path / "c.toml"
    cfg.write_text(f'names = "{names}"\nprompts = "{prompts}"\n')
    code, text = run(capsys, "validate", str(cfg))
    assert code == 0, text
    prompts.write_text("text\n" + "x" * 200_000 + "\n")  # over the 100,000-character prompt limit
    code, text = run(capsys, "validate", str(cfg))
    assert code == 2 and "line 2" in text and "field 'text'" in text and "at most 100,000" in text, text
    bad = tmp_path / "s.jsonl"
    bad.write_text('{"id": "a", "text": "hi \\ud800"}\n')
    cfg.write_text(f'names = "{names}"\nprompts = "{bad}"\n')
    code, text = run(capsys, "validate", str(cfg))
    assert code == 2 and "line 1" in text and "surrogate" in text


def test_custom_factory_that_raises(tmp_path, capsys, monkeypatch):
    mod = tmp_path / "badprov.py"
    mod.write_text("def make(cfg):\n    raise RuntimeError('no VPN')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    cfg = tmp_path / "c.toml"
    cfg.write_text('[target]\nprovider = "badprov:make"\n')
    code, text = run(capsys, "audit", "--config", str(cfg), "--no-progress")
    assert code == 2 and "raised RuntimeError: no VPN" in text and "target.provider" in text


@pytest.mark.parametrize("source, what", [
    ("def make(cfg):\n    raise SystemExit(0)\n", "factory 'exitprov_{n}:make' raised SystemExit"),
    ("raise SystemExit(0)\ndef make(cfg):\n    return None\n", "cannot load custom provider 'exitprov_{n}:make': SystemExit"),
    ("def make(cfg):\n    raise GeneratorExit('oops')\n", "factory 'exitprov_{n}:make' raised GeneratorExit: oops"),
    ("raise GeneratorExit\ndef make(cfg):\n    return None\n",
     "cannot load custom provider 'exitprov_{n}:make': GeneratorExit"),
    ("class P:\n    name, base_url, supports_logprobs = 'p', '', False\n    @property\n    def model_id(self):\n"
     "        raise RuntimeError('lookup failed')\n    async def complete(self, r): ...\n"
     "    async def aclose(self): ...\ndef make(cfg):\n    return P()\n",
     "reading its attributes raised RuntimeError: lookup failed"),
])
def test_custom_factory_that_exits_or_whose_attributes_raise_is_an_input_error(tmp_path, capsys, monkeypatch, source,
                                                                              what):
    """Break-it findings: a factory (or its module) calling sys.exit(0) ended `lmra audit` and
    `lmra validate` silently with exit 0; a protocol property that raises gave a traceback."""
    n = len(what)  # a module name of its own per case (imports are cached)
    (tmp_path / f"exitprov_{n}.py").write_text(source)
    monkeypatch.syspath_prepend(str(tmp_path))
    cfg = tmp_path / "c.toml"
    cfg.write_text(f'[target]\nprovider = "exitprov_{n}:make"\n')
    for command in (["audit", "--config", str(cfg), "--no-progress"], ["validate", str(cfg)]):
        code, text = run(capsys, *command)
        assert code == 2 and what.format(n=n) in " ".join(text.split()) and "Traceback" not in text, text


class _DeadJudge(ScriptedJudge):
    async def complete(self, request):
        raise ProviderError("judge2 is down")


def test_failing_second_judge_keeps_the_primary_ratings(tmp_path, sim_inputs):
    names, prompts = sim_inputs(20)
    cfg = AuditConfig.model_validate(dict(
        name="j2", prompts=str(prompts), names=str(names), prompts_per_task=0, output_dir=str(tmp_path),
        cache=str(tmp_path / "c.sqlite"), judge_check={"enabled": False}, judge2={"provider": "llamacpp"},
        quality={"enabled": True,
                                                                                      "criteria": ["clarity"]}))
    res = Audit(cfg, target=ScriptedTarget(NAME_TO_GROUP, lambda g, r: g),
                judge=ScriptedJudge(lambda a, b: {"A": 0.6, "C": 0.4} if a == "female" else {"B": 0.6, "C": 0.4}),
                judge2=_DeadJudge(lambda a, b: {}, model_id="dead")).run()
    ov = res.overall.iloc[0]
    assert ov["n_pairs"] == 20 and ov["n_failed"] == 0 and ov["net_rating"] == pytest.approx(0.6)
    assert res.ratings["judge2_error"].str.contains("judge2 is down").all()
    assert res.quality[res.quality.level == "overall"].iloc[0]["n_pairs"] == 20


def test_damaged_run_folder_does_not_break_later_audits(tmp_path, sim_inputs):
    from lmra.cli.monitor import monitor_after_audit

    names, prompts = sim_inputs(6)
    cfg = AuditConfig.model_validate(dict(name="ok", prompts=str(prompts), names=str(names), prompts_per_task=0,
                                          output_dir=str(tmp_path / "out"), cache=str(tmp_path / "c.sqlite"),
                                          judge_check={"enabled": False}))
    broken = tmp_path / "out" / "20200101-000000-broken"
    broken.mkdir(parents=True)
    (broken / "summary.json").write_text("[]")
    (broken / "config.toml").write_text("this is = = not toml")
    res = Audit(cfg, target=ScriptedTarget(NAME_TO_GROUP, lambda g, r: g), judge=ScriptedJudge(lambda a, b: {"C": 1})).run()
    with pytest.warns(UserWarning, match="skipping"):
        assert monitor_after_audit(res.run_dir, report=False) == 0


def test_model_fingerprint_depends_on_content(tmp_path):
    from lmra.providers.llamacpp import _fingerprint

    a, b = tmp_path / "a" / "model.gguf", tmp_path / "b" / "model.gguf"
    for p, tail in ((a, b"A"), (b, b"B")):
        p.parent.mkdir()
        p.write_bytes(b"GGUF" + b"\0" * 10_000_000 + tail)
    assert _fingerprint(a) != _fingerprint(b)
    assert _fingerprint(a) == _fingerprint(a)


def test_redaction_keeps_user_text_out_of_the_run_folder(tmp_path, sim_inputs):
    names, prompts = sim_inputs(6)
    secret = "Hi, I'm Anna and my landlord kept my deposit"
    with prompts.open("a") as fh:
        fh.write(json.dumps({"id": "leak", "text": secret, "domain": "d", "task": "write a story"}) + "\n")
    cfg = AuditConfig.model_validate(dict(name="red", prompts=str(prompts), names=str(names), prompts_per_task=0,
                                          output_dir=str(tmp_path), cache=str(tmp_path / "c.sqlite"), redact=True,
                                          judge_check={"enabled": False}))
    echo = ScriptedTarget(NAME_TO_GROUP, lambda g, r: "You asked: Prompt number 3. Here is my answer.")
    res = Audit(cfg, target=echo, judge=ScriptedJudge(lambda a, b: {"C": 1.0})).run()
    everything = run_folder_text(res.run_dir)  # Parquet decoded, not skipped
    assert "Anna" not in everything and "I'm" not in everything and "Prompt number" not in everything
    removed = [json.loads(line) for line in (res.run_dir / "filtered_prompts.jsonl").read_text().splitlines()]
    assert removed[0]["prompt_id"] == "leak" and removed[0]["lexical"] == ["<1 phrase(s) redacted>"]
    rows = [json.loads(line) for line in (res.run_dir / "responses.jsonl").read_text().splitlines()]
    assert all(r["text"] is None and r["redacted"] and r["n_chars"] > 0 for r in rows)


def test_check_that_tests_nothing_does_not_pass(tmp_path, sim_inputs, capsys):
    from lmra.cli.monitor import monitor_after_audit

    names, prompts = sim_inputs(4)
    cfg = AuditConfig.model_validate(dict(name="tiny", prompts=str(prompts), names=str(names), prompts_per_task=1,
                                          output_dir=str(tmp_path / "out"), cache=str(tmp_path / "c.sqlite"),
                                          judge_check={"enabled": False}))
    runs = []
    for seed in (1, 2):
        res = Audit(cfg.model_copy(update={"seed": seed}), target=ScriptedTarget(NAME_TO_GROUP, lambda g, r: g),
                    judge=ScriptedJudge(lambda a, b: {"C": 1.0}), run_dir=tmp_path / "out" / f"2026010{seed}-tiny").run()
        runs.append(res.run_dir)
    assert monitor_after_audit(runs[1], baseline=str(runs[0]), report=False) == 2
    assert "No conclusion" in capsys.readouterr().out
    # report.html says the same (it said "No regression" in green: break-it finding)
    assert monitor_after_audit(runs[1], baseline=str(runs[0])) == 2
    html = (runs[1] / "report.html").read_text()
    banner = html[html.index('id="regression-banner"'):].split("</div>", 1)[0]
    assert 'class="banner untested"' in html and "No conclusion" in banner and "nothing was" in banner
    assert "No regression" not in html


def test_validate_recognises_recsys_configs(capsys):
    from lmra.resources import resource_dir

    code, text = run(capsys, "validate", str(resource_dir("examples") / "recsys.toml"))
    assert code == 0 and "valid recsys config" in text


def test_version_and_run_help(capsys):
    from lmra import __version__
    from lmra.cli import main

    with pytest.raises(SystemExit) as e:
        main(["--version"])
    assert e.value.code == 0 and capsys.readouterr().out.strip() == f"lmra {__version__}"
    for cmd in ("export", "report", "pin", "check"):
        with pytest.raises(SystemExit):
            main([cmd, "--help"])
        assert "newest complete run" in " ".join(capsys.readouterr().out.split())


def test_a_folder_left_out_of_the_history_is_one_warning_paragraph(tmp_path, capsys):
    """Break-it finding: ``lmra history`` printed ``…/lmra/cli/monitor.py:177: UserWarning:
    skipping …`` and a line of lmra's source."""
    from lmra.cli import main

    broken = tmp_path / "reports" / "20200101-000000-broken"
    broken.mkdir(parents=True)
    (broken / "summary.json").write_text("[]")
    (broken / "manifest.json").write_text('{"status": "complete"}')
    assert main(["history", "--reports-dir", str(tmp_path / "reports")]) == 0
    err = " ".join(capsys.readouterr().err.split())
    assert err.startswith(f"warning: skipping {broken}: not a readable run folder (") and "UserWarning" not in err


def test_a_damaged_folder_the_history_does_not_know_breaks_no_later_audit(tmp_path, capsys):
    """Bad-input break-it (s43): a run folder whose per_task.csv was edited after the run, not yet in
    the history (a reports folder restored without history.sqlite, a run copied in), made every later
    audit exit 2 after writing its run — without report.html — naming that folder, night after
    night: its digest was checked inside the registration, outside the scan's guard. The folder is
    now left out with one warning, the audit ends as usual, and the history holds no half-written
    entry of it."""
    from lmra.cli import main
    from lmra.history import History
    from test_gates import FLAT, write_config

    cfg = write_config(tmp_path, rates=FLAT, n_prompts=6)
    assert main(["audit", "--config", str(cfg), "--no-progress", "--no-report", "--seed", "1"]) == 0
    reports = tmp_path / "reports"
    (old,) = reports.glob("*-gated")
    per_task = old / "per_task.csv"
    lines = per_task.read_text().splitlines(keepends=True)
    lines[1] = lines[1].rstrip("\n") + ",EXTRA\n"  # one hand-edited line
    per_task.write_text("".join(lines))
    for f in reports.glob("history.sqlite*"):
        f.unlink()
    capsys.readouterr()
    assert main(["audit", "--config", str(cfg), "--no-progress", "--seed", "2"]) == 0
    err = " ".join(capsys.readouterr().err.split())
    assert f"warning: skipping {old}: not a readable run folder (" in err and "changed or damaged" in err
    (new,) = [d for d in reports.glob("*-gated*") if d != old]
    assert (new / "report.html").is_file() and not (old / "report.html").exists()
    with History(reports / "history.sqlite") as h:
        assert list(h.runs()["run_id"]) == [new.name]
        assert h.db.execute("SELECT COUNT(*) FROM task_metrics WHERE run_id = ?", (old.name,)).fetchone()[0] == 0


def test_a_folder_whose_manifest_holds_a_list_for_a_name_breaks_no_other_command(tmp_path, capsys):
    """Break-it round 2 (s43): a run folder not in the history whose manifest.json had ``target.model``
    as a list — no digest covers the manifest, and values were type-checked only when written to
    SQLite, outside the scan's guard — made ``lmra report`` of a good run exit 1. Left out with one
    warning naming the file; nothing of it is written."""
    import json
    import shutil

    from lmra.cli import main
    from lmra.history import History
    from test_gates import FLAT, write_config

    cfg = write_config(tmp_path, rates=FLAT, n_prompts=6)
    assert main(["audit", "--config", str(cfg), "--no-progress", "--no-report"]) == 0
    reports = tmp_path / "reports"
    (good,) = reports.glob("*-gated")
    bad = reports / "20200101-000000-gated"
    shutil.copytree(good, bad)
    m = json.loads((bad / "manifest.json").read_text())
    m["target"]["model"] = ["x", "y"]
    (bad / "manifest.json").write_text(json.dumps(m))
    for f in reports.glob("history.sqlite*"):
        f.unlink()
    capsys.readouterr()
    assert main(["report", str(good)]) == 0
    err = " ".join(capsys.readouterr().err.split())
    assert f"warning: skipping {bad}: not a readable run folder ({bad / 'manifest.json'}: holds list" in err, err
    with History(reports / "history.sqlite") as h:
        assert list(h.runs()["run_id"]) == [good.name]


def test_a_history_that_cannot_grow_is_the_historys_failure_not_the_folders(tmp_path, capsys, monkeypatch):
    """Break-it finding: with the history unable to grow (a full disk), ``lmra history`` called an
    intact run folder unreadable, left it out and exited 0. It is an I/O failure naming the
    history (exit 1). A history that refuses every write (``PRAGMA query_only``) stands in for
    the full disk."""
    import lmra.history
    from lmra.cli import main
    from test_gates import FLAT, write_config

    cfg = write_config(tmp_path, rates=FLAT, n_prompts=6)
    assert main(["audit", "--config", str(cfg), "--no-progress", "--no-report"]) == 0
    reports = tmp_path / "reports"
    (run,) = reports.glob("*-gated")
    for f in reports.glob("history.sqlite*"):
        f.unlink()
    lmra.history.History(reports / "history.sqlite").close()  # a new, empty history: the run is not in it
    opened = lmra.history.History.__init__

    def unwritable(self, *a, **k):
        opened(self, *a, **k)
        self.db.execute("PRAGMA query_only = ON")

    monkeypatch.setattr(lmra.history.History, "__init__", unwritable)
    status = main(["history", "--reports-dir", str(reports)])
    err = " ".join(capsys.readouterr().err.split())
    assert status == 1 and f"I/O failure: {reports / 'history.sqlite'}" in err, err
    assert "not a readable run folder" not in err and run.name not in err


def _read_only_reports(tmp_path, capsys):
    """Two finished runs and their history, as an archive of reports would hold them."""
    from lmra.cli import main
    from test_gates import FLAT, RISE, write_config

    for rates, seed in ((FLAT, 1), (RISE, 2)):
        cfg = write_config(tmp_path, rates=rates, n_prompts=12, seed=seed)
        assert main(["audit", "--config", str(cfg), "--no-progress", "--no-report"]) == 0
    capsys.readouterr()
    reports = tmp_path / "reports"
    return reports, sorted(p.parent for p in reports.glob("*/manifest.json"))


def _reads_work_and_writes_are_refused(reports, runs, tmp_path, capsys):
    from lmra.cli import main

    before = (reports / "history.sqlite").read_bytes()
    assert main(["history", "--reports-dir", str(reports)]) == 0
    cap = capsys.readouterr()
    assert runs[0].name in cap.out and runs[1].name in cap.out
    assert "is read-only (it or its folder cannot be written): the run history is read from a copy in memory" in cap.err
    assert main(["compare", str(runs[0]), str(runs[1])]) == 0
    status = main(["check", str(runs[1]), "--baseline", str(runs[0])])
    cap = capsys.readouterr()
    assert status in (0, 3) and "Regression check" in cap.out  # checked, shown, not stored
    assert main(["report", str(runs[1]), "--out", str(tmp_path / "elsewhere.html")]) == 0
    assert (tmp_path / "elsewhere.html").is_file()
    capsys.readouterr()
    assert main(["pin", str(runs[0])]) == 1  # an explicit write: an I/O failure naming the file
    err = " ".join(capsys.readouterr().err.split())
    assert "the run history is read-only (it or its folder cannot be written): a pin cannot be stored" in err
    assert (reports / "history.sqlite").read_bytes() == before


def test_a_read_only_history_is_read_from_a_copy(tmp_path, capsys, monkeypatch):
    """Break-it finding: on a read-only copy of archived reports, `lmra history`, `compare`,
    `plan` and `report --out` exited 1 ("attempt to write a readonly database"). The history is
    read into memory; what must be stored (a pin) is refused naming it. (The folder's writability
    is stood in for here; the next test uses a real read-only mount where it can.)"""
    import lmra.history

    reports, runs = _read_only_reports(tmp_path, capsys)
    monkeypatch.setattr(lmra.history, "_read_only", lambda path: True)
    _reads_work_and_writes_are_refused(reports, runs, tmp_path, capsys)


def test_a_history_on_a_read_only_mount_is_read(tmp_path, capsys):
    """The same on a real read-only bind mount (root only; skipped where mounting is not allowed)."""
    import os
    import subprocess

    reports, runs = _read_only_reports(tmp_path, capsys)
    mnt = tmp_path / "ro"
    mnt.mkdir()
    if os.geteuid() != 0 or subprocess.run(["mount", "--bind", "-o", "ro", str(reports), str(mnt)],
                                           capture_output=True).returncode != 0:
        pytest.skip("a read-only bind mount needs root and mount permission")
    try:
        if os.access(mnt, os.W_OK):  # (a kernel that ignored ro on the bind: nothing to test)
            pytest.skip("the bind mount is writable")
        _reads_work_and_writes_are_refused(mnt, [mnt / r.name for r in runs], tmp_path, capsys)
    finally:
        subprocess.run(["umount", str(mnt)], capture_output=True)


def test_an_audit_whose_history_cannot_be_written_stops_before_its_calls(tmp_path, capsys, monkeypatch):
    """Break-it finding: with history.sqlite read-only (an immutable file, another user's), the
    audit made every call and then failed to store its check (exit 1, the verdict never shown).
    It stops before the calls, naming the file (exit 1, no new run folder)."""
    import lmra.history
    from lmra.cli import main

    reports, runs = _read_only_reports(tmp_path, capsys)
    from test_gates import FLAT, write_config

    cfg = write_config(tmp_path, rates=FLAT, n_prompts=12, seed=3)
    monkeypatch.setattr(lmra.history, "_read_only", lambda path: True)
    before = sorted(p.name for p in reports.iterdir())
    assert main(["audit", "--config", str(cfg), "--no-progress", "--baseline", "last"]) == 1
    err = " ".join(capsys.readouterr().err.split())
    assert f"I/O failure: {reports / 'history.sqlite'}: the run history cannot be written" in err
    assert sorted(p.name for p in reports.iterdir()) == before


def _smoke_with(tmp_path, field: str, value: str, command: str):
    """examples/smoke.toml with ``field = value`` (and output_dir in tmp_path unless that is the
    field), and the argv of ``lmra validate`` or ``lmra audit`` of it."""
    from pathlib import Path

    smoke = (Path(__file__).resolve().parents[1] / "examples" / "smoke.toml").read_text()
    cfg = tmp_path / "c.toml"
    body = "\n".join(line for line in smoke.splitlines() if not line.startswith(f"{field} "))
    cfg.write_text(f'{field} = "{value}"\n' + (f'output_dir = "{(tmp_path / "out").as_posix()}"\n'
                                               if field != "output_dir" else "") + body + "\n")
    argv = ["validate", str(cfg)] if command == "validate" else ["audit", "--config", str(cfg), "--no-progress"]
    return cfg, argv


@pytest.mark.parametrize("field", ["prompts", "names", "cache", "output_dir"])
@pytest.mark.parametrize("command", ["validate", "audit"])
def test_a_symbolic_link_loop_is_an_input_error_naming_the_field(tmp_path, capsys, field, command):
    """Break-it finding: a path that is a symbolic link loop gave a RuntimeError traceback (exit 1)
    from Path.resolve (Python 3.11–3.12) while the error was being reported, or from the cache."""
    loop_a, loop_b = tmp_path / "loopA", tmp_path / "loopB"
    loop_a.symlink_to(loop_b)
    loop_b.symlink_to(loop_a)
    _, argv = _smoke_with(tmp_path, field, loop_a.as_posix(), command)
    assert main(argv) == 2
    err = " ".join(capsys.readouterr().err.split())
    assert f"field '{field}'" in err and "Traceback" not in err
    assert "symbolic link" in err or "Too many levels of symbolic links" in err
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("field", ["cache", "output_dir"])
@pytest.mark.parametrize("command", ["validate", "audit"])
def test_a_symbolic_link_to_nothing_is_an_input_error_naming_the_field(tmp_path, capsys, field, command):
    """Break-it finding (s48): output_dir a link to a folder that does not exist passed validate, and the audit
    failed, exit 1, "cannot create the output folder (File exists)"; a cache link into a missing folder failed
    with "unable to open database file". Exit 2 from both, naming the field and the link's target."""
    link = tmp_path / "link"
    target = tmp_path / "nowhere" / "x"
    link.symlink_to(target)
    cfg, argv = _smoke_with(tmp_path, field, link.as_posix(), command)
    assert main(argv) == 2
    err = " ".join(capsys.readouterr().err.split())
    assert f"field '{field}': {link} is a symbolic link to {target}, which does not exist" in err
    assert "Traceback" not in err and not (tmp_path / "out").exists() and not target.parent.exists()
    # … or a folder on the way to the path (round-2 break-it, s48), named with the path it blocks
    under = f"{link.as_posix()}/sub" + ("/c.sqlite" if field == "cache" else "")
    cfg.write_text(cfg.read_text().replace(f'{field} = "{link.as_posix()}"', f'{field} = "{under}"'))
    assert main(argv) == 2
    err = " ".join(capsys.readouterr().err.split())
    assert f"field '{field}': {link} (on the way to {under}) is a symbolic link to {target}, which does not" in err
    # a cache link whose target's folder exists: the file is made through the link (as before)
    if field == "cache":
        cfg.write_text(cfg.read_text().replace(f'{field} = "{under}"', f'{field} = "{link.as_posix()}"'))
        target.parent.mkdir()
        assert main(["validate", str(cfg)]) == 0


def test_a_file_whose_every_prompt_the_lexical_filter_removes_is_refused_before_anything_is_written(tmp_path,
                                                                                                   capsys):
    """Break-it finding: exit 2, but after the run folder (status failed) and the cache were made."""
    import json as _json

    prompts = tmp_path / "p.jsonl"
    prompts.write_text("".join(_json.dumps({"id": f"p{i}", "text": f"As a woman, what should I wear to event {i}?",
                                            "task": "write a story"}) + "\n" for i in range(6)))
    cfg = tmp_path / "c.toml"
    cfg.write_text(f'prompts = "{prompts.as_posix()}"\noutput_dir = "{(tmp_path / "out").as_posix()}"\n'
                   f'cache = "{(tmp_path / "cache.sqlite").as_posix()}"\n[filter]\nlmra = false\n'
                   '[judge_check]\nenabled = false\n')
    assert main(["audit", "--config", str(cfg), "--no-progress"]) == 2
    err = " ".join(capsys.readouterr().err.split())
    assert "the identity filter removed all 6 prompts" in err and "field 'filter'" in err
    assert not (tmp_path / "out").exists() and not (tmp_path / "cache.sqlite").exists()


NO_ANSWER_JUDGE = '''
"""An LMRA that answers every closed question with nothing usable (no option probability, no option in its text)."""
from lmra.providers.base import ChatResult, Usage


class Mute:
    name, base_url, supports_logprobs = "mute", "", True

    def __init__(self, cfg):
        self.model_id = cfg.model or "mute"

    async def complete(self, request):
        return ChatResult(text="Hmm." if request.options else "A helpful answer.", option_probs=None,
                          provider=self.name, model=self.model_id, usage=Usage(prompt_tokens=5, completion_tokens=1),
                          finish_reason="stop")

    async def aclose(self):
        return None


def make(cfg):
    return Mute(cfg)
'''


def test_a_night_that_scored_no_pair_still_writes_report_html_and_names_the_judge_failure(tmp_path, capsys,
                                                                                           monkeypatch):
    """Fresh-user finding: an audit whose refusal labels could not be obtained (no pair scored,
    exit 1) wrote no report.html — the broken night is the one most in need of one, and `lmra
    report` wrote a good one afterwards — and its final line left out the gated judge failure
    (exit 5) that also applied. Both are now there."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    (tmp_path / "mute_provider.py").write_text(NO_ANSWER_JUDGE)
    cfg = tmp_path / "mute.toml"
    cfg.write_text('''name = "mute"
tasks = ["write a story", "career advice"]
prompts_per_task = 1
[judge_check]
per_kind = 1
dimensions = ["gender"]
[filter]
lmra = false
[target]
provider = "mute_provider:make"
[judge]
provider = "mute_provider:make"
''')
    code, text = run(capsys, "audit", "--config", str(cfg), "--no-progress")
    said = " ".join(text.split())
    assert code == 1 and "Traceback" not in text, said[-3000:]
    assert "no pair could be scored (no refusal label) (takes precedence over 5: the judge failed validation)" in said
    assert "canary pairs (it stopped: it could no longer pass)" in said  # (the check's early line says it stopped)
    run_dir = next((tmp_path / "reports").glob("*-mute"))
    report = run_dir / "report.html"
    assert report.is_file() and "HTML report: " in said
    assert "Run status: PARTIAL" in report.read_text() and "Judge status: FAILED" in report.read_text()
    code, text = run(capsys, "audit", "--config", str(cfg), "--no-progress", "--no-report", "--name", "quiet")
    assert code == 1 and not (next((tmp_path / "reports").glob("*-quiet")) / "report.html").exists()
