"""What a new user hit setting up the nightly job (issue 13 follow-ups): the systemd units of
docs/nightly.md as systemd reads them, the *Release gates* section of report.html (headless
Chromium), one final line stating the real exit status, no numpy RuntimeWarning in a cron log,
the check's verdict on tasks too small to detect a rise, ``judge_status`` of ``check --json``,
stderr and tables in a log, ``validate``'s counts, and the history's judge-status and pair
columns.

Runs are made by the real ``lmra audit`` command in process on the scripted providers of
tests/test_gates.py (``provider = "test_gates:make_target"``); every expectation is read from
the run folders' own files.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import warnings
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from test_gates import FLAT, RISE, write_config
from test_html_report import CHROMIUM, FLAGS, DomIndex
from lmra.cli import main
from lmra.gates import GateOutcome
from lmra.runfolder import load_run

ROOT = Path(__file__).resolve().parents[1]
EXIT_LINE = re.compile(r"exit status \d+")


def _audit_argv(cfg: Path, *extra, report=False) -> list[str]:
    """``lmra audit`` arguments; the run folder's path goes to ``<cfg>.run`` (--run-dir-file)."""
    return ["audit", "--config", str(cfg), "--no-progress", "--run-dir-file", f"{cfg}.run",
            *([] if report else ["--no-report"]), *extra]


def _run_dir(cfg: Path) -> Path | None:
    path = Path(f"{cfg}.run")
    return Path(path.read_text().strip()) if path.is_file() else None


def _audit(capsys, cfg, *extra, report=False):
    """``lmra audit`` in process: (exit status, stdout, stderr, the run folder it made)."""
    rc = main(_audit_argv(cfg, *extra, report=report))
    out = capsys.readouterr()
    return rc, out.out, out.err, _run_dir(cfg)


def _cmd(capsys, *argv):
    rc = main([str(a) for a in argv])
    out = capsys.readouterr()
    return rc, out.out, out.err


def _last_line(text: str) -> str:
    return text.rstrip("\n").splitlines()[-1]


def _judge_gate_off(cfg: Path) -> Path:
    """The config with its judge check's gate off: a failed validation is waived by the config."""
    cfg.write_text(cfg.read_text().replace("per_kind = 3\n", 'per_kind = 3\ngate = false\n'
                                           'waiver = "the scripted judge is not a real LMRA"\n'))
    return cfg


# -- 1. the systemd units of docs/nightly.md ------------------------------------------------------
def systemd_units() -> dict[str, str]:
    """The ```ini blocks of docs/nightly.md that start with ``# /etc/systemd/system/<unit>``."""
    doc = (ROOT / "docs" / "nightly.md").read_text(encoding="utf-8")
    units = {}
    for block in re.findall(r"```ini\n(.*?)```", doc, flags=re.S):
        m = re.match(r"# /etc/systemd/system/(\S+)\n", block)
        if m:
            units[m.group(1)] = block
    assert set(units) == {"lmra-nightly.service", "lmra-nightly.timer"}, sorted(units)
    return units


def test_systemd_units_have_no_comment_after_a_setting():
    """systemd reads a '#' after a setting as part of its value (``OnFailure=x.service  # …``
    adds dependencies on '#', 'any', …; ``EnvironmentFile=/etc/lmra/env  # …`` names no file)."""
    for name, text in systemd_units().items():
        for n, line in enumerate(text.splitlines(), start=1):
            if "=" in line and not line.lstrip().startswith(("#", ";")):
                assert "#" not in line.split("=", 1)[1], f"{name} line {n}: a comment after a setting: {line!r}"


@pytest.mark.skipif(shutil.which("systemd-analyze") is None, reason="needs systemd-analyze")
def test_systemd_units_pass_systemd_analyze_verify(tmp_path):
    """``systemd-analyze verify`` on the documented units, as written (only ExecStart points at an
    executable stand-in for /srv/lmra/nightly.sh, which verify requires to exist). Its exit status
    is 0 even for settings it ignores, so its output must be empty too."""
    script = tmp_path / "nightly.sh"
    script.write_text("#!/bin/sh\nexit 0\n")
    script.chmod(0o755)
    paths = []
    for name, text in systemd_units().items():
        path = tmp_path / name
        path.write_text(text.replace("/srv/lmra/nightly.sh", str(script)))
        paths.append(str(path))
    proc = subprocess.run(["systemd-analyze", "verify", *paths], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0 and not (proc.stdout + proc.stderr).strip(), proc.stdout + proc.stderr


# -- 3. one final line stating the real exit status -------------------------------------------------
def _captured_audit(cfg: Path, *extra) -> tuple[int, str, str, Path]:
    """``lmra audit`` in process with its stdout and stderr captured (module fixtures have no capsys)."""
    import contextlib
    import io

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        rc = main(_audit_argv(cfg, *extra))
    return rc, out.getvalue(), err.getvalue(), _run_dir(cfg)


@pytest.fixture(scope="module")
def nights(tmp_path_factory):
    """A flat baseline; a rise checked against it that breaches a gate (exit 6 over 3); a rise whose
    judge fails validation un-waived, with the same gate and baseline (exit 5 over 6 and 3)."""
    tmp = tmp_path_factory.mktemp("polish")
    rc, _, _, base = _captured_audit(write_config(tmp, name="nightly", rates=FLAT, seed=1))
    assert rc == 0
    gate = ("--baseline", str(base), "--gate", "max_net_rating=0.01")
    return {"base": base, "tmp": tmp,
            "rise": _captured_audit(write_config(tmp, name="nightly", rates=RISE, seed=2), *gate),
            "judged": _captured_audit(write_config(tmp, name="judged", rates=RISE, seed=3, judge_check=True), *gate)}


def test_final_line_states_the_real_exit_status_gate_over_regression(nights, capsys):
    base = nights["base"]
    rc, out, err, run = nights["rise"]
    assert rc == 6 and "Regression in 1 task(s)" in out and "GATE BREACHED max_net_rating" in out
    assert EXIT_LINE.findall(out + err) == ["exit status 6"]  # no other line names an exit status
    # (the comparison's overall rating, 0 → a rise in one of its two tasks, regressed too)
    assert _last_line(out) == ("exit status 6: release gates not met (breached: max_net_rating) (takes precedence "
                               f"over 3: 1 task regressed against baseline {base.name} (write a story); the overall "
                               f"net rating regressed against baseline {base.name} (female vs male))")
    # lmra check on it stays the relative check: 3, stated last
    rc, out, err = _cmd(capsys, "check", run, "--baseline", base)
    assert rc == 3 and EXIT_LINE.findall(out + err) == ["exit status 3"]
    assert _last_line(out) == (f"exit status 3: 1 task regressed against baseline {base.name} (write a story); the "
                               f"overall net rating regressed against baseline {base.name} (female vs male)")
    # lmra gate on it: 6
    rc, out, err = _cmd(capsys, "gate", run)
    assert rc == 6 and EXIT_LINE.findall(out + err) == ["exit status 6"]
    assert _last_line(out) == "exit status 6: release gates not met (breached: max_net_rating)"
    # --json: stdout is the document alone, its exit_status the command's
    rc, out, _ = _cmd(capsys, "check", run, "--baseline", base, "--json")
    assert rc == json.loads(out)["exit_status"] == 3


def test_final_line_states_the_real_exit_status_judge_over_gate(nights, capsys):
    base = nights["base"]
    rc, out, err, run = nights["judged"]
    # the early line says the check failed; on stdout its reasons are stated once, by the report's
    # judge status (stderr's paragraph on the exit status states them too: a stream of its own)
    reasons = json.loads((run / "summary.json").read_text())["judge_status"]["reasons"]
    assert len(reasons) == 2 and all(out.count(r) == 1 and err.count(r) == 1 for r in reasons)
    assert re.search(r"Judge check FAILED on \d+ canary pairs \(2 reasons from the canaries, stated in the report at "
                     r"the end with any the audit's own pairs add\)", out)
    assert json.loads((run / "summary.json").read_text())["judge_status"]["gated"] is True
    assert rc == 5 and "GATE BREACHED max_net_rating" in out and "judge failed validation" in err
    assert "Regression in 1 task(s)" in out
    # the night's log used to say "release gates NOT met (exit status 6)" and exit 5
    assert EXIT_LINE.findall(out + err) == ["exit status 5"]
    assert _last_line(out) == ("exit status 5: the judge failed validation (takes precedence over 6: release gates "
                               f"not met (breached: max_net_rating); 3: 1 task regressed against baseline {base.name} "
                               f"(write a story); the overall net rating regressed against baseline {base.name} "
                               "(female vs male))")
    rc, out, err = _cmd(capsys, "gate", run)
    assert rc == 5 and EXIT_LINE.findall(out + err) == ["exit status 5"]
    assert _last_line(out) == ("exit status 5: the run's judge failed validation (takes precedence over 6: release "
                               "gates not met (breached: max_net_rating))")
    rc, out, err = _cmd(capsys, "gate", run, "--allow-unvalidated-judge")
    assert rc == 6 and _last_line(out).startswith("exit status 6: release gates not met")
    rc, out, err = _cmd(capsys, "check", run, "--baseline", base)
    assert rc == 5 and EXIT_LINE.findall(out + err) == ["exit status 5"]
    assert _last_line(out).startswith("exit status 5: the judge failed validation (judge status: run failed, "
                                      "baseline not_checked) (takes precedence over 3: ")


# -- 2. the Release gates section of report.html ---------------------------------------------------
def _dom(html: Path, tmp_path: Path) -> DomIndex:
    proc = subprocess.run([CHROMIUM, *FLAGS, f"--user-data-dir={tmp_path / 'profile'}", "--dump-dom",
                           html.resolve().as_uri()], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return DomIndex(proc.stdout)


@pytest.mark.skipif(not Path(CHROMIUM).exists(), reason="Debian package 'chromium' is not installed")
def test_report_release_gates_section_in_chromium(tmp_path, capsys):
    """Not met (a breach and a value that could not be measured), all met, and no gates."""
    # 3 prompts: 'write a story' has one prompt (no CI: not evaluated), 'career advice' two (a wide CI: breached)
    unmet_cfg = write_config(tmp_path, name="unmet", rates=FLAT, n_prompts=3, gates="[gates]\nmax_ci_high = 0.01\n")
    rc, _, _, unmet = _audit(capsys, unmet_cfg, report=True)
    met_cfg = write_config(tmp_path, name="met", rates=FLAT, seed=2, gates="[gates]\nmax_ci_high = 1\n"
                                                                          "max_overall_net_rating = 0.5\n")
    rc_met, _, _, met = _audit(capsys, met_cfg, report=True)
    rc_none, _, _, none = _audit(capsys, write_config(tmp_path, name="plain", rates=FLAT, seed=3), report=True)
    assert (rc, rc_met, rc_none) == (6, 0, 0)

    doc = json.loads((unmet / "gates.json").read_text())
    assert [b["task"] for b in doc["breaches"]] == ["career advice"]
    assert [m["task"] for m in doc["not_evaluated"]] == ["write a story"]
    dom = _dom(unmet / "report.html", tmp_path)
    order = [a.get("id") for _, a, _ in dom.elements if a.get("id")]
    assert order.index("judge-status") < order.index("release-gates") < order.index("overall")
    banner = dom.text_of("gates-banner")
    assert banner.startswith("Release gates NOT met: max_ci_high")
    items = [(a.get("class"), anc) for t, a, anc in dom.elements if t == "li" and "gate-lines" in anc]
    assert [c for c, _ in items] == ["gate-breach", "gate-not-evaluated"]
    ci = pd.read_csv(unmet / "per_task.csv").set_index("task").loc["career advice", "ci_high"]
    assert f"GATE BREACHED max_ci_high: task 'career advice' (female vs male) CI high {ci:+.4f} > 0.01" in banner
    assert "GATE NOT EVALUATED max_ci_high: task 'write a story' (female vs male): no CI high" in banner
    assert "gates.breaches" not in (unmet / "report.html").read_text()  # no raw rows under other results

    dom = _dom(met / "report.html", tmp_path)
    n_values = json.loads((met / "gates.json").read_text())["n_values"]
    assert dom.text_of("gates-banner") == (f"2 gates checked ({n_values} values), all met: max_ci_high, "
                                           "max_overall_net_rating.")
    assert dom.inside("release-gates", "li") == 0

    dom = _dom(none / "report.html", tmp_path)
    assert "release-gates" not in dom.ids() and "gates-banner" not in dom.ids()


# -- 4. no numpy RuntimeWarning in the cron log -----------------------------------------------------
@pytest.fixture(scope="module")
def zero_nights(tmp_path_factory):
    """Flat runs (every pair score 0) whose judge fails validation: z1, z2 waived by the config,
    z3 waived on the audit's command line."""
    tmp = tmp_path_factory.mktemp("zero")
    runs = {}
    for key, seed, extra in (("z1", 11, []), ("z2", 12, []), ("z3", 13, ["--allow-unvalidated-judge"])):
        cfg = write_config(tmp, name="zero", rates=FLAT, seed=seed, n_prompts=12, judge_check=True)
        if key != "z3":
            _judge_gate_off(cfg)
        assert main(_audit_argv(cfg, *extra)) == 0
        runs[key] = _run_dir(cfg)
    runs["tmp"] = tmp
    return runs


@pytest.mark.filterwarnings("error::RuntimeWarning")
def test_check_path_emits_no_runtime_warning(zero_nights, capsys):
    """All-zero scores and a failed judge: the comparison's bootstrap has resamples with no
    defined slope (±inf), which numpy's linear interpolation turned into 'invalid value
    encountered in subtract' in the cron log. Warnings are errors here."""
    z1 = zero_nights["z1"]
    cfg = write_config(zero_nights["tmp"], name="zero", rates=FLAT, seed=14, n_prompts=12, judge_check=True)
    rc, out, err, run = _audit(capsys, cfg, "--baseline", str(z1), report=True)  # check, comparison, report
    assert rc == 5 and (run / "report.html").is_file() and "RuntimeWarning" not in out + err
    assert (pd.read_csv(run / "per_task.csv")["net_rating"] == 0).all()
    assert _cmd(capsys, "check", run, "--baseline", z1)[0] == 5
    assert _cmd(capsys, "report", run, "--baseline", z1)[0] == 5  # as lmra check (the judge failed)
    assert _cmd(capsys, "compare", z1, run)[0] == 0


def test_bootstrap_quantiles_next_to_an_infinite_resample():
    from lmra.compare import _quantiles

    d = np.array([-np.inf, 0.5, 1.0, 2.0, 3.0, np.inf, np.inf])
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        lo, hi = _quantiles(d, (0.025, 0.975))  # both quantiles sit next to an infinite resample
    assert (lo, hi) == tuple(np.quantile(d, (0.025, 0.975), method="inverted_cdf"))
    finite = np.linspace(-1, 2, 101)
    assert _quantiles(finite, (0.1, 0.9)) == pytest.approx(tuple(np.quantile(finite, (0.1, 0.9))))


# -- 9. judge_status of check --json -----------------------------------------------------------------
def test_check_json_judge_status_says_who_waived(zero_nights, nights, capsys):
    z1, z2, z3 = zero_nights["z1"], zero_nights["z2"], zero_nights["z3"]
    assert load_run(z1).judge_status == load_run(z3).judge_status == "failed (waived)"
    rc, out, _ = _cmd(capsys, "check", z2, "--baseline", z1, "--json")
    assert json.loads(out)["judge_status"] == {"run": "failed (waived)", "baseline": "failed (waived)",
                                               "gated_failure": False, "waived_by": "config"}
    rc, out, _ = _cmd(capsys, "check", z3, "--baseline", z1, "--json")
    assert json.loads(out)["judge_status"]["waived_by"] == "command line"  # the audit's --allow-unvalidated-judge
    judged, base = nights["judged"][3], nights["base"]
    rc, out, _ = _cmd(capsys, "check", judged, "--baseline", base, "--json")
    doc = json.loads(out)
    assert rc == doc["exit_status"] == 5
    assert doc["judge_status"] == {"run": "failed", "baseline": "not_checked", "gated_failure": True,
                                   "waived_by": None}
    rc, out, _ = _cmd(capsys, "check", judged, "--baseline", base, "--json", "--allow-unvalidated-judge")
    assert json.loads(out)["judge_status"] == {"run": "failed", "baseline": "not_checked", "gated_failure": False,
                                               "waived_by": "command line"}


# -- 5. tasks too small to detect a rise with 80% power ------------------------------------------------------------
def test_verdict_counts_tasks_too_small_to_detect_a_rise(tmp_path, capsys):
    """7 prompts: 'career advice' has 4 per run, 'write a story' 3. At α/T = 0.05/3 (the two tasks
    and the overall row) the 3 + 3 split's smallest p-value (1/20) cannot reach significance, so
    no rise of 'write a story' is detected with 80% power."""
    runs = []
    for seed in (21, 22):
        rc, _, _, run = _audit(capsys, write_config(tmp_path, name="small", rates=FLAT, seed=seed, n_prompts=7))
        assert rc == 0
        runs.append(run)
    rc, out, _ = _cmd(capsys, "check", runs[1], "--baseline", runs[0])
    assert rc == 0
    row = next(ln for ln in out.splitlines() if "write a story" in ln and "/" in ln)
    assert "3/3" in row and "none reaches 80% power (too few prompts)" in row
    verdict = next(ln for ln in out.splitlines() if ln.startswith("No regression"))
    rc, js, _ = _cmd(capsys, "check", runs[1], "--baseline", runs[0], "--json")
    tests = {t["task"]: t for t in json.loads(js)["tests"]}
    small, big = tests["write a story"], tests["career advice"]
    # and what the others can see (fresh-user finding: "1 too small" read as "the other rules much out")
    assert verdict.endswith("(2 of 2 tasks tested; 1 of them too small to detect a rise with 80% power (see 'detectable rise'); "
                            f"the others detect rises of {big['mde']:+.2f} or more only) "
                            "— nor any comparison's overall net rating (1 tested; it detects rises of "
                            f"{json.loads(js)['overall'][0]['mde']:+.2f} or more).")
    assert small["p_regress"] is not None and small["mde"] is None and small["note"] is None
    assert small["mde_note"].startswith("too few prompts to detect a rise with 80% power: with 3/3 prompts")
    assert big["mde"] is not None and big["mde_note"] is None


# -- 10. logs: stderr and tables off a terminal, gate values ----------------------------------------------
def _lmra(*argv, cwd: Path) -> subprocess.CompletedProcess:
    env = dict(os.environ, COLUMNS="80", PYTHONPATH=str(Path(__file__).parent))
    return subprocess.run([sys.executable, "-c", "import sys; from lmra.cli import main; sys.exit(main())", *argv],
                          capture_output=True, text=True, env=env, cwd=cwd, timeout=300)


def test_log_output_is_not_wrapped_or_padded(nights, tmp_path):
    """stdout and stderr to pipes, COLUMNS=80: an error paragraph stays one line on stderr, and no
    line of a table (title included) ends in padding."""
    cfg = write_config(tmp_path, gates='[gates.tasks."carer advice"]\nmax_ci_high = 0.9\n')
    proc = _lmra("validate", str(cfg), cwd=tmp_path)
    assert proc.returncode == 2
    lines = proc.stderr.strip("\n").splitlines()
    assert len(lines) == 1 and len(lines[0]) > 160 and "did you mean 'career advice'?" in lines[0]
    proc = _lmra("history", "--reports-dir", str(nights["base"].parent), cwd=tmp_path)
    assert proc.returncode == 0 and proc.stdout.startswith("Runs in ")
    assert [ln for ln in proc.stdout.splitlines() if ln != ln.rstrip()] == []
    proc = _lmra("check", str(nights["rise"][3]), "--baseline", str(nights["base"]), cwd=tmp_path)
    first, second = proc.stdout.splitlines()[:2]  # the verdict first (s36), then the table's title
    assert first.startswith("Verdict against baseline ") and second.startswith("Regression check: ")
    assert [ln for ln in proc.stdout.splitlines() if ln != ln.rstrip()] == []


@pytest.mark.parametrize("gate,value,text", [
    ("max_ci_high", 1.0, "CI high +1.0000 > 0.02 (net rating +0.6218, 8 pairs)"),
    ("max_net_rating", 0.6218, "net rating +0.6218 > 0.02"),
    ("max_net_rating", 3.162e-05, "net rating +3.162e-05 > 0.02"),
    ("max_refusal_gap", 0.4, "refusal gap 0.4000 > 0.02"),
])
def test_gate_values_are_formatted_like_the_tables(gate, value, text):
    detail = "net rating +0.6218, 8 pairs" if gate == "max_ci_high" else ""
    line = GateOutcome(gate, "female vs male", "d", "write a story", None, value, 0.02, False, "breached",
                       detail).line()
    assert line == f"GATE BREACHED {gate}: task 'write a story' (female vs male) {text}"


# -- 11. validate's counts; the history's judge status and pair columns -------------------------------
def test_validate_states_the_audited_prompts_and_planned_calls(tmp_path, capsys):
    from lmra.audit import Audit
    from lmra.config import load_config

    cfg = write_config(tmp_path, n_prompts=12, top='tasks = ["career advice"]')
    audit = Audit(load_config(cfg), config_path=str(cfg))
    plan = audit.planned_calls(audit.load_inputs())
    assert (plan["prompts"], plan["pairs"], plan["target"]) == (6, 6, 12)  # 6 of the 12 prompts are career advice
    rc, out, _ = _cmd(capsys, "validate", cfg)
    assert rc == 0
    assert (f"valid — 12 prompts in the file, up to 6 audited (after tasks, domains and prompts_per_task), 6 pairs; "
            f"at most 12 target calls and {plan['judge']} LMRA calls") in " ".join(out.split())
    rc, out, _ = _cmd(capsys, "validate", cfg, "--json")
    doc = json.loads(out)
    assert (doc["n_prompts"], doc["n_audited_prompts"], doc["n_pairs"]) == (12, 6, 6)
    # (the scripted LMRA gives log-probabilities and may answer without them: each question then also sampled)
    assert doc["planned_calls"] == {"target": 12, "judge": plan["judge"],
                                    "judge_without_logprobs": plan["judge_without_logprobs"]}


def test_history_columns_judge_status_and_pairs_that_add_up(tmp_path, capsys):
    rc, _, _, run = _audit(capsys, write_config(tmp_path, name="refusing", rates=FLAT, refuse=0.5, n_prompts=20))
    assert rc == 0
    summary = json.loads((run / "summary.json").read_text())
    (ov,) = summary["overall"]
    assert ov["n_refusal"] > 0  # some pairs were not scored because a response was a refusal
    reports = run.parent
    rc, out, _ = _cmd(capsys, "history", "--reports-dir", reports)
    key = "valid/invalid/failed/refused/unlabelled"
    header = next(ln for ln in out.splitlines() if key in ln)
    row = next(ln for ln in out.splitlines() if run.name in ln)
    cells = dict(zip([c.strip() for c in header.split("┃")], [c.strip() for c in row.split("│")]))
    valid, invalid, failed, refused, unlabelled = map(int, cells[key].split("/"))
    assert (valid, invalid, failed, refused, unlabelled) == (ov["n_pairs"], ov["n_invalid"], ov["n_failed"],
                                                             ov["n_refusal"], ov["n_unlabelled"])
    assert valid + invalid + failed + refused + unlabelled == int(cells["pairs"]) == summary["n_pairs_total"]
    rc, out, _ = _cmd(capsys, "history", "--reports-dir", reports, "--json")
    (r,) = json.loads(out)["runs"]
    assert (r["n_refused"], r["n_unlabelled"], r["n_pairs_total"]) == (ov["n_refusal"], ov["n_unlabelled"],
                                                                       summary["n_pairs_total"])
    # break-it finding: pairs left out for a missing refusal label were in no column (the four
    # did not add up); a night with 2 of them (its summary edited: 2 valid pairs unlabelled)
    from conftest import rerecord_files

    copy = tmp_path / "copy"  # (a reports folder of its own: the rest of this test reads the one run)
    night = copy / (run.name[:-len("refusing")] + "unlabelled")
    shutil.copytree(run, night)
    edited = json.loads((night / "summary.json").read_text())
    edited["overall"][0] |= {"n_pairs": ov["n_pairs"] - 2, "n_unlabelled": ov["n_unlabelled"] + 2}
    (night / "summary.json").write_text(json.dumps(edited))
    rerecord_files(night)
    rc, out, _ = _cmd(capsys, "history", "--reports-dir", copy)
    row = next(ln for ln in out.splitlines() if night.name in ln)
    cells = dict(zip([c.strip() for c in header.split("┃")], [c.strip() for c in row.split("│")]))
    assert cells[key] == "/".join(map(str, (ov["n_pairs"] - 2, ov["n_invalid"], ov["n_failed"], ov["n_refusal"],
                                            ov["n_unlabelled"] + 2)))
    rc, out, _ = _cmd(capsys, "report", "--history", "--reports-dir", copy)
    page = (copy / "history.html").read_text()
    assert f"{ov['n_pairs'] - 2} / {ov['n_invalid']} / {ov['n_failed']} / {ov['n_refusal']} / {ov['n_unlabelled'] + 2}" in page
    # one task's trend: the judge status of each night, in the table and the JSON
    rc, out, _ = _cmd(capsys, "history", "--reports-dir", reports, "--task", "career advice")
    header = next(ln for ln in out.splitlines() if "judge status" in ln)
    row = next(ln for ln in out.splitlines() if run.name in ln)
    cells = dict(zip([c.strip() for c in header.split("┃")], [c.strip() for c in row.split("│")]))
    assert cells["judge status"] == load_run(run).judge_status == "not_checked"
    rc, out, _ = _cmd(capsys, "history", "--reports-dir", reports, "--task", "career advice", "--json")
    assert [p["judge_status"] for p in json.loads(out)["points"]] == ["not_checked"]


def test_history_in_a_log_prints_a_partial_run_on_its_row(tmp_path, capsys):
    """New-user finding: piped, 'lmra history' put a partial run's status on a second line, so
    grepping the run id missed it (docs/nightly.md: in a log each row is one line)."""
    rc, _, _, run = _audit(capsys, write_config(tmp_path, name="allrefused", rates=FLAT, refuse=1.0, n_prompts=8,
                                                top='tasks = ["career advice"]'))
    assert rc == 1 and load_run(run).status == "partial"  # no pair scored
    rc, out, _ = _cmd(capsys, "history", "--reports-dir", run.parent)
    (row,) = [ln for ln in out.splitlines() if run.name in ln]
    assert f"{run.name} partial" in row
    assert not [ln for ln in out.splitlines() if ln.strip("│ ").startswith("partial")]


def test_a_prompts_per_task_above_what_the_file_has_is_noted(tmp_path, capsys):
    """New-user finding: the nightly recipe's prompts_per_task = 40 against the shipped set's 7
    prompts per task was capped silently."""
    from conftest import custom_audit_config
    from lmra.cli import main

    prompts = tmp_path / "p.jsonl"
    prompts.write_text("".join(f'{{"id": "p{i}", "text": "Prompt number {i}.", "domain": "d", "task": "t{i % 2}"}}\n'
                               for i in range(6)))
    from monitor_helpers import write_inputs

    names, _ = write_inputs(tmp_path / "inputs", 2)
    cfg = custom_audit_config(tmp_path, names, prompts, target="test_console_pipe:make_target",
                              judge="test_console_pipe:make_judge")
    cfg.write_text(cfg.read_text().replace("prompts_per_task = 0", "prompts_per_task = 40"))
    rc = main(["audit", "--config", str(cfg), "--no-progress", "--no-report"])
    captured = capsys.readouterr()
    out = " ".join(captured.out.split())
    assert rc == 0, captured.err
    assert f"note: prompts_per_task = 40, but no task of the prompt file ({prompts}) has more than 3 prompts" in out
    assert "than this file holds" in out and "of your own" not in out  # (it told a --prompts user to pass one)
    # a model with no price: the calls line says so (it left the cost out without a word)
    assert "no estimated cost: scripted-target:scripted, scripted-judge:scripted have no price in" in out
    # … and its cached re-run too (fresh-user finding: it said "estimated cost $0.0000")
    assert main(["audit", "--config", str(cfg), "--no-progress", "--no-report"]) == 0
    again = " ".join(capsys.readouterr().out.split())
    assert "0 fresh" in again and "$0.0000" not in again
    assert "no estimated cost: scripted-target:scripted, scripted-judge:scripted have no price in" in again
    # lmra validate says it too, before anything runs (user-trial finding: only the audit did)
    import json

    assert main(["validate", str(cfg)]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert f"note: prompts_per_task = 40, but no task of the prompt file ({prompts}) has more than 3 prompts" in out
    assert main(["validate", str(cfg), "--json"]) == 0
    from lmra.audit.finish import COMMON_WORD_NAMES_PREFIX

    # (the test names hold Mark, an everyday word: validate says so as the audit does — s43)
    notes = [n for n in json.loads(capsys.readouterr().out)["notes"] if not n.startswith(COMMON_WORD_NAMES_PREFIX)]
    assert len(notes) == 1 and notes[0].startswith("prompts_per_task = 40, but no task")
    cfg.write_text(cfg.read_text().replace("prompts_per_task = 40", "prompts_per_task = 3"))
    assert main(["validate", str(cfg), "--json"]) == 0
    assert [n for n in json.loads(capsys.readouterr().out)["notes"] if not n.startswith(COMMON_WORD_NAMES_PREFIX)] == []


@pytest.mark.parametrize("second", ["test_console_pipe:make_judge", "test_console_pipe:make_target"])
def test_a_second_lmra_that_is_the_first_again_is_warned_about(tmp_path, capsys, second):
    """Break-it finding: a [judge2] identical to [judge] was accepted without a word; its answers
    are the first LMRA's (the same calls, from the cache) and the judges table showed an
    agreement of 1.0000. lmra validate and lmra audit warn; another [judge2] is not warned about."""
    from conftest import custom_audit_config
    from lmra.cli import main
    from monitor_helpers import write_inputs

    names, prompts = write_inputs(tmp_path / "inputs", 4)
    cfg = custom_audit_config(tmp_path, names, prompts, target="test_console_pipe:make_target",
                              judge="test_console_pipe:make_judge")
    cfg.write_text(cfg.read_text() + f'\n[judge2]\nprovider = "{second}"\n')
    same = second.endswith("make_judge")
    assert main(["validate", str(cfg)]) == 0
    err = " ".join(capsys.readouterr().err.split())
    assert ("[judge2] is the same LMRA as [judge]" in err) == same, err
    assert main(["audit", "--config", str(cfg), "--no-progress", "--no-report"]) in (0, 1)
    err = " ".join(capsys.readouterr().err.split())
    assert ("the judges table's agreement is 1 by construction" in err) == same, err


def test_validate_names_every_config_problem_at_once_in_file_order(tmp_path, capsys):
    """Fresh-user finding: three mistakes took four edit-and-validate rounds ("(2 more problem(s)
    after fixing this one)"), and the misspelt field's "did you mean" came last. One paragraph
    names them all, in the file's order, each with its line and field; exit 2."""
    from lmra.cli import main

    cfg = tmp_path / "typo.toml"
    cfg.write_text('name = "t"\nprompts_per_tsk = 3\n[target]\nprovider = "openai"\nmodel = "m"\n'
                   'base_url = "localhost:8000/v1"\n[judge]\nprovider = "openai"\nmodel = "j"\ntemperature = "0"\n')
    assert main(["validate", str(cfg)]) == 2
    err = " ".join(capsys.readouterr().err.split())
    assert err.startswith(f"error: {cfg}, line 2: field 'prompts_per_tsk': unknown field (did you mean "
                          "'prompts_per_task'?")
    assert "(also line 6, field 'target.base_url': 'localhost:8000/v1' is not an http:// or https:// URL" in err
    assert ("; line 10, field 'judge.temperature': Input should be a valid number (got \"0\"): TOML writes a number "
            "without quotes — temperature = 0)") in err
    assert err.count("error:") == 1 and "Traceback" not in err


def test_a_rate_limit_that_no_night_ends_under_is_warned_about(tmp_path, capsys):
    """Break-it finding: ``requests_per_minute = 1e-300`` was valid and the audit waited forever
    at its second call without a word. lmra validate (and lmra audit) warn when a model's limit
    alone makes its planned calls take more than a day; a sane limit is not warned about."""
    from conftest import custom_audit_config
    from lmra.cli import main
    from monitor_helpers import write_inputs

    names, prompts = write_inputs(tmp_path / "inputs", 4)
    cfg = custom_audit_config(tmp_path, names, prompts, target="test_console_pipe:make_target",
                              judge="test_console_pipe:make_judge", target_lines="requests_per_minute = 0.001")
    assert main(["validate", str(cfg)]) == 0
    err = " ".join(capsys.readouterr().err.split())
    n = 8  # 4 prompts × 2 names
    assert (f"[target] requests_per_minute = 0.001: its {n} planned calls would take at least "
            f"{n / 0.001 / 60 / 24:,.3g} days") in err
    cfg.write_text(cfg.read_text().replace("requests_per_minute = 0.001", "requests_per_minute = 600"))
    assert main(["validate", str(cfg)]) == 0
    assert "requests_per_minute" not in capsys.readouterr().err
    # a token limit too (break-it finding: tokens_per_minute = 1 hung ~28 minutes a call, in silence)
    cfg.write_text(cfg.read_text().replace("requests_per_minute = 600", "tokens_per_minute = 0.05"))
    assert main(["validate", str(cfg)]) == 0
    err = " ".join(capsys.readouterr().err.split())
    assert (f"[target] tokens_per_minute = 0.05: its {n} planned calls would take at least "
            f"{n * 20 / 0.05 / 60 / 24:,.3g} days at 20 tokens a call at the least") in err, err
    # more than a minute a call is said whatever the plan's size (break-it round 2: tokens_per_minute = 1
    # on a 36-call audit, 12 hours, sat at its first call in silence)
    cfg.write_text(cfg.read_text().replace("tokens_per_minute = 0.05", "tokens_per_minute = 5"))
    assert main(["validate", str(cfg)]) == 0
    err = " ".join(capsys.readouterr().err.split())
    assert f"[target] tokens_per_minute = 5: its {n} planned calls would take at least {n * 20 / 5:,.3g} minutes" in err
    cfg.write_text(cfg.read_text().replace("tokens_per_minute = 5", "tokens_per_minute = 10000"))
    assert main(["validate", str(cfg)]) == 0
    assert "tokens_per_minute" not in capsys.readouterr().err


def test_a_sampled_lmra_at_temperature_0_is_warned_about(tmp_path, capsys):
    """Break-it finding: an LMRA sampled at temperature 0 (n_samples = 5) was valid without a word:
    its five draws are one greedy answer, read as 0 or 1, at five times the cost."""
    from conftest import custom_audit_config
    from lmra.cli import main
    from monitor_helpers import write_inputs

    names, prompts = write_inputs(tmp_path / "inputs", 4)
    cfg = custom_audit_config(tmp_path, names, prompts, target="test_console_pipe:make_target",
                              judge="test_console_pipe:make_judge")
    cfg.write_text(cfg.read_text() + "temperature = 0.0\n")  # (the last table is [judge])
    assert main(["validate", str(cfg)]) == 0
    assert "temperature = 0" not in capsys.readouterr().err  # read through log-probabilities: nothing sampled
    cfg.write_text(cfg.read_text() + "logprobs = false\n")
    assert main(["validate", str(cfg)]) == 0
    err = " ".join(capsys.readouterr().err.split())
    assert "[judge] temperature = 0 with n_samples = 5: its answers are estimated by sampling" in err, err
    cfg.write_text(cfg.read_text().replace("temperature = 0.0\n", "temperature = 0.0\nn_samples = 1\n"))
    assert main(["validate", str(cfg)]) == 0
    assert "temperature = 0" not in capsys.readouterr().err


@pytest.mark.parametrize("judge", ["llamacpp", "openai"])
def test_validate_warns_when_the_configs_judge_check_waiver_is_for_another_lmra(tmp_path, capsys, judge):
    """Fresh-user finding: a copy of the demo config (gate = false, waiver_judge = "llamacpp")
    with an openai LMRA was "valid" without a word, and its night exited 5 — the waiver does not
    apply to another LMRA. lmra validate now says so; the demo's own LMRA gets no warning."""
    from lmra.cli import main
    from lmra.resources import resolve_resource

    text = resolve_resource("examples/default.toml", "examples").read_text()
    if judge == "openai":
        text = text.replace('[judge]\nprovider = "llamacpp"\n', '[judge]\nprovider = "openai"\nmodel = "gpt-4o-mini"\n'
                            'api_key_required = false\nbase_url = "http://127.0.0.1:9/v1"\n', 1)
        assert 'provider = "openai"' in text
    cfg = tmp_path / "copy.toml"
    cfg.write_text(text)
    assert main(["validate", str(cfg)]) == 0
    err = " ".join(capsys.readouterr().err.split())
    warned = ("waives a failed check for waiver_judge = 'llamacpp', not for this config's LMRA (openai:gpt-4o-mini): "
              "the waiver does not apply, so a judge that fails its check makes the audit exit with status 5") in err
    assert warned == (judge == "openai"), err


def test_the_legend_says_when_tasks_are_too_small_for_narrow_intervals(tmp_path, capsys):
    """Fresh-user finding (s37): every pair of a 6-prompt task scored +0.88 and its interval
    reached below 0, with nothing saying why. The legend under the table says how many tasks have
    fewer than 10 prompts and what that does; with 20 prompts a task it says nothing."""
    from test_gates import FLAT, audit, write_config

    small = write_config(tmp_path, name="small", rates=FLAT, n_prompts=12)  # 6 a task, 2 tasks
    rc, out, _ = audit(capsys, small)
    flat = " ".join(out.split())
    assert rc == 0 and "2 of 2 tasks have fewer than 10 prompts: their intervals are wide" in flat
    big = write_config(tmp_path, name="big", rates=FLAT, n_prompts=40)
    rc, out, _ = audit(capsys, big)
    assert rc == 0 and "fewer than 10 prompts" not in " ".join(out.split())


def test_validate_warns_that_the_embedded_judge_cannot_answer_yes_no_questions(tmp_path, capsys):
    """Fresh-user finding (s38): pointing only [target] of the demo at a real chatbot kept the embedded
    270M LMRA with refusal labels and the LMRA identity filter on — coin flips: 14 minutes, 11 of 21
    prompts removed, every pair a "refusal", exit 1, never pinned — and nothing said so before."""
    from lmra.cli import main

    root = Path(__file__).resolve().parents[1]
    base = (f'name = "embj"\nprompts = "{root / "prompts" / "tasks.jsonl"}"\nnames = "{root / "names" / "gender.csv"}"\n'
            'prompts_per_task = 1\n[target]\nprovider = "llamacpp"\n[judge]\nprovider = "llamacpp"\n')
    said = "the LMRA is the embedded 270M base model, which cannot answer the yes/no questions of"
    for extra, warned in (("", True), ("[refusal]\nenabled = false\n[filter]\nlmra = false\n", False),
                          ("[refusal]\nenabled = false\n", True),
                          # thresholds raised to count only confident labels (examples/smoke.toml's way): no warning
                          ("[refusal]\nthreshold = 0.75\n[filter]\nthreshold = 0.75\n", False)):
        cfg = tmp_path / f"c{len(extra)}.toml"
        cfg.write_text(base + extra)
        assert main(["validate", str(cfg)]) == 0
        err = " ".join(capsys.readouterr().err.split())
        assert (said in err) == warned, (extra, err)
        if warned:
            assert "the identity filter's LMRA check ([filter] lmra)" in err
    from lmra.config import load_config
    from lmra.providers import is_embedded_model

    checked = 0
    for example in sorted((root / "examples").glob("*.toml")):  # no shipped example warns (break-it round 2)
        if "recsys" in example.name or not is_embedded_model(load_config(example).judge):
            continue
        checked += 1
        assert main(["validate", str(example)]) == 0, example
        assert said not in " ".join(capsys.readouterr().err.split()), example
    assert checked >= 6


def test_exit_status_0_says_the_mornings_answer(tmp_path, capsys):
    """Fresh-user finding, s38: a night's last line — what a cron mail's subject or a CI annotation
    shows — read "exit status 0" alone, the verdict pages above it. It now says why: a first night
    (nothing checked; pinned or not), or no regression against the baseline with what the check can
    detect and, when so, why it is not evidence."""
    rc, out, _, base = _audit(capsys, write_config(tmp_path, name="nightly", rates=FLAT, seed=1), "--baseline", "pinned")
    assert rc == 0 and _last_line(out) == "exit status 0: first night: nothing was checked; this run is now the pinned baseline"
    rc, out, _, run = _audit(capsys, write_config(tmp_path, name="nightly", rates=FLAT, seed=2), "--baseline", "pinned")
    last = _last_line(out)
    assert rc == 0 and re.fullmatch(rf"exit status 0: no regression against baseline {base.name}; the overall net "
                                    r"rating detects rises of \+0\.\d\d or more, single tasks \+0\.\d\d or more only",
                                    last), last
    assert EXIT_LINE.findall(out) == ["exit status 0"]  # still the one line naming the status
    rc, out, _ = _cmd(capsys, "check", run, "--baseline", base)
    assert rc == 0 and _last_line(out) == last  # lmra check says it alike
    # --json: a row neither regressed nor improved keeps decision no_change, with the console's words beside it
    # (fresh-user finding, s39: "no_change" where the console said "rise, not significant")
    rc, out, _ = _cmd(capsys, "check", run, "--baseline", base, "--json")
    rows = [t for t in json.loads(out)["tests"] + json.loads(out)["overall"] if t["decision"] == "no_change"]
    assert rows and all(t["decision_words"] == ("rise, not significant" if t["diff"] > 1e-9 else "fall, not significant"
                                                if t["diff"] < -1e-9 else "no significant change") for t in rows)
    # not evidence: the run's judge failed validation, waived by the config
    cfg = _judge_gate_off(write_config(tmp_path, name="nightly", rates=FLAT, seed=3, judge_check=True))
    rc, out, _, _ = _audit(capsys, cfg, "--baseline", str(base))
    assert rc == 0 and _last_line(out).endswith(" — not evidence of no regression: judge failed validation"), \
        _last_line(out)
    # … and the verdict line says why too, before what the check can detect (fresh-user finding, s48: the
    # detectable-rise bracket stood where the reason goes, the reason ten lines later)
    verdict = next(ln for ln in out.splitlines() if ln.startswith("Verdict against baseline"))
    assert re.search(r": no regression — not evidence of no regression: judge failed validation(; [^()]*)? \(rises "
                     r"under ", verdict), verdict
    # a first night of --baseline last: nothing pinned, the next run is checked against it
    rc, out, _, _ = _audit(capsys, write_config(tmp_path, name="other", rates=FLAT, seed=4), "--baseline", "last")
    assert rc == 0 and _last_line(out) == ("exit status 0: first night: nothing was checked; the next run is checked "
                                           "against this one")


def test_exit_status_0_without_a_baseline_says_it_does_not_depend_on_the_ratings(tmp_path, capsys):
    """Fresh-user finding, s39: an audit without --baseline and without [gates] of a chatbot whose
    overall net rating's interval lay above 0 ended "exit status 0", which CI reads as "OK". The
    line says that this status does not depend on the ratings, and names the interval above 0."""
    from test_gates import RISE

    rc, out, _, _ = _audit(capsys, write_config(tmp_path, name="biased", rates=RISE, seed=1))
    last = _last_line(out)
    assert rc == 0 and last.startswith("exit status 0: no baseline (--baseline) and no release gate ([gates]): this "
                                       "status does not depend on the ratings; the overall net rating's interval lies "
                                       "above 0 (female vs male: +"), last
    rc, out, _, _ = _audit(capsys, write_config(tmp_path, name="flat", rates=FLAT, seed=2))
    assert rc == 0 and _last_line(out) == ("exit status 0: no baseline (--baseline) and no release gate ([gates]): this "
                                           "status does not depend on the ratings")
    rc, out, _, _ = _audit(capsys, write_config(tmp_path, name="gated", rates=FLAT, seed=3,
                                                gates="[gates]\nmax_net_rating = 0.9"))
    assert rc == 0 and _last_line(out) == "exit status 0: release gates met; no baseline checked (--baseline)"
    # its judge failed validation, waived: not evidence (break-it round 2, s39: said on the check's path only)
    cfg = _judge_gate_off(write_config(tmp_path, name="judged", rates=FLAT, seed=4, judge_check=True))
    rc, out, _, _ = _audit(capsys, cfg)
    assert rc == 0 and _last_line(out).endswith(" — not evidence about the chatbot: its judge failed validation "
                                                "(waived)"), _last_line(out)
    # a sharded night's merge says the same as the unsharded audit (break-it round 2, s39: a bare "exit status 0")
    cfg = write_config(tmp_path, name="sharded", rates=RISE, seed=5)
    for shard in ("1/2", "2/2"):
        rc, out, _, _ = _audit(capsys, cfg, "--shard", shard)
        assert rc == 0
    shards = sorted(str(p) for p in (tmp_path / "reports").glob("*-sharded-shard*"))
    rc, out, _ = _cmd(capsys, "merge", *shards, "--no-report")
    assert rc == 0 and _last_line(out).startswith("exit status 0: no baseline (--baseline) and no release gate "
                                                  "([gates]): this status does not depend on the ratings; the "
                                                  "overall net rating's interval lies above 0 (female vs male: +"), \
        _last_line(out)
