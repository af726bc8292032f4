"""Absolute release gates (issue 13, item 4): ``[gates]`` in the config, ``--gate`` on the command
line, ``lmra gate RUN``, exit status 6 and its precedence, ``gates.json``.

Runs are made by the real ``lmra audit`` command in process, with the scripted doubles of
tests/doubles.py loaded as custom providers (``provider = "test_gates:make_target"``), so every
gate is evaluated on numbers a real run stored; each test reads the expected values from the
run's own files (per_task.csv, summary.json, refusals.csv, quality.csv) independently of
lmra.gates.
"""

from __future__ import annotations

import argparse
import json
import math
import random
import re

import numpy as np
import pandas as pd
import pytest

from doubles import ScriptedJudge, name_in
from monitor_helpers import PHRASE, PROMPT_RE, TaskTarget, phrase_verdict, task_of, write_inputs
from lmra.cli import main
from lmra.config import GatesConfig, load_config
from lmra.gates import GATES, GATES_SCHEMA, evaluate_gates, stored_gates
from lmra.cli.exits import EXIT_PRECEDENCE, combine_exit_statuses
from lmra.cli.gates import gate_option
from lmra.runfolder import load_run

REFUSAL = "I cannot help with that."
RISE = {"write a story": 0.5, "career advice": 0.0}
FLAT = {"write a story": 0.0, "career advice": 0.0}


# -- scripted providers, loaded by the CLI as custom providers ----------------------------------
SHORT = "Just search online for it."


class GateTarget(TaskTarget):
    """TaskTarget (a stereotyped phrase for female users at a per-task rate) whose male users are
    refused in 'career advice' at ``refuse`` rate: a refusal-rate gap in that task only; and whose
    female users get a curt non-answer (:data:`SHORT`, no stereotype) at ``short`` rate: a quality gap."""

    def __init__(self, rates: dict, refuse: float, short: float = 0.0):
        super().__init__(rates)
        self.refuse, self.short = refuse, short

    async def complete(self, request):
        res = await super().complete(request)
        i = int(PROMPT_RE.search(request.messages[-1].content).group(1))
        male = self.name_to_group[name_in(request)] == "male"
        if male and task_of(i) == "career advice" and random.Random(f"{request.seed}-r").random() < self.refuse:
            return res.model_copy(update={"text": REFUSAL})
        if not male and PHRASE not in res.text and random.Random(f"{request.seed}-s").random() < self.short:
            return res.model_copy(update={"text": SHORT})
        return res


def make_target(cfg):
    """``provider = "test_gates:make_target"``; ``options = {rates = {...}, refuse = 0.3, short = 0.5}``."""
    return GateTarget(cfg.options["rates"], cfg.options.get("refuse", 0.0), cfg.options.get("short", 0.0))


def _quality(r1: str, r2: str, criterion: str) -> dict:
    """'clarity': the stereotyped response, or the curt non-answer, is the less clear one; every other
    criterion a tie."""
    for worse in (PHRASE, SHORT):
        if criterion == "clarity" and (worse in r1) != (worse in r2):
            return {"B": 0.8, "C": 0.2} if worse in r1 else {"A": 0.8, "C": 0.2}
    return {"C": 1.0}


def make_judge(cfg):
    """``provider = "test_gates:make_judge"``: rates the phrase as a stereotype, labels REFUSAL a refusal."""
    return ScriptedJudge(phrase_verdict, position_bias=0.2, quality=_quality,
                         refusal=lambda r: 1.0 if REFUSAL in r else 0.0)


def write_config(tmp, *, name="gated", rates=RISE, refuse=0.0, seed=1, n_prompts=40, quality=False,
                 judge_check=False, gates="", top="", output="reports", short=0.0):
    """An audit config on the scripted providers; ``gates`` is TOML appended at the end."""
    names, prompts = write_inputs(tmp / "inputs", n_prompts)
    rates_toml = ", ".join(f'"{k}" = {v}' for k, v in rates.items())
    cfg = tmp / f"{name}-{seed}.toml"
    cfg.write_text(f'''name = "{name}"
prompts = "{prompts}"
names = "{names}"
prompts_per_task = 0
seed = {seed}
concurrency = 8
output_dir = "{tmp / output}"
cache = "{tmp / f'cache-{seed}.sqlite'}"
{top}
[judge_check]
{"per_kind = 3" if judge_check else "enabled = false"}
[quality]
enabled = {str(quality).lower()}
criteria = ["clarity", "tone and politeness"]
[target]
provider = "test_gates:make_target"
options = {{ rates = {{ {rates_toml} }}, refuse = {refuse}, short = {short} }}
[judge]
provider = "test_gates:make_judge"
{gates}
''')
    return cfg


def audit(capsys, cfg, *extra):
    """``lmra audit`` in process; returns (exit status, stdout + stderr, its run folder or None)."""
    c = load_config(cfg)
    out_dir = cfg.parent / c.output_dir
    before = set(out_dir.iterdir()) if out_dir.is_dir() else set()
    rc = main(["audit", "--config", str(cfg), "--no-progress", "--no-report", *extra])
    out = capsys.readouterr()
    # the folder this audit made (two audits started in the same second get names that do not
    # sort by start: the newest by name was sometimes the earlier run)
    runs = [p for p in (set(out_dir.iterdir()) - before if out_dir.is_dir() else ()) if p.is_dir()
            and p.name.endswith(f"-{c.name}") or p.is_dir() and f"-{c.name}-" in p.name]
    assert len(runs) <= 1, runs
    return rc, out.out + out.err, (runs[0] if runs else None)


def gate(capsys, *argv):
    rc = main(["gate", *map(str, argv)])
    out = capsys.readouterr()
    return rc, out.out + out.err


@pytest.fixture(scope="module")
def measured(tmp_path_factory):
    """One run measuring everything a gate can bound: a stereotype in 'write a story', a refusal
    gap in 'career advice', quality on two criteria (clarity differs, tone is a tie)."""
    tmp = tmp_path_factory.mktemp("gates")
    cfg = write_config(tmp, name="measured", refuse=0.4, quality=True)
    rc = main(["audit", "--config", str(cfg), "--no-progress", "--no-report"])
    assert rc == 0
    (run_dir,) = (tmp / "reports").glob("*-measured")
    return load_run(run_dir)


def _expected(run, name: str) -> list[tuple[str | None, str | None, float]]:
    """(task, criterion, value) of every value of gate ``name``, read from the run's files."""
    spec = GATES[name]
    if spec.source == "per_task":
        pt = pd.read_csv(run.path / "per_task.csv")
        return [(r.task, None, getattr(r, spec.column)) for r in pt.itertuples()]
    if spec.source == "overall":
        return [(None, None, r[spec.column]) for r in json.loads((run.path / "summary.json").read_text())["overall"]]
    if spec.source == "refusals":
        rf = pd.read_csv(run.path / "refusals.csv")
        rf = rf[rf.level == spec.level]
        return [(r.task if spec.level == "task" else None, None, abs(r.rate_a - r.rate_b)) for r in rf.itertuples()]
    q = pd.read_csv(run.path / "quality.csv")
    q = q[q.level == spec.level]
    return [(r.task if spec.level == "task" else None, r.criterion, abs(r.mean)) for r in q.itertuples()]


# -- each gate, breached and not breached ---------------------------------------------------------
def test_the_measured_run_has_the_planted_differences(measured):
    pt = measured.per_task.set_index("task")
    assert pt.loc["write a story", "net_rating"] > 0.2 and pt.loc["career advice", "net_rating"] == 0
    rf = pd.read_csv(measured.path / "refusals.csv").set_index(["level", "task"])
    assert rf.loc[("task", "career advice"), "rate_b"] > 0.1 and rf.loc[("task", "career advice"), "rate_a"] == 0
    assert rf.loc[("task", "write a story"), "rate_b"] == 0
    q = pd.read_csv(measured.path / "quality.csv").set_index(["level", "task", "criterion"])
    assert q.loc[("task", "write a story", "clarity"), "mean"] < -0.2
    assert q.loc[("task", "write a story", "tone and politeness"), "mean"] == 0


@pytest.mark.parametrize("name", list(GATES))
def test_each_gate_is_breached_above_its_bound_and_met_at_it(measured, name):
    values = _expected(measured, name)
    top = max(v for _, _, v in values)
    assert top > 0.05, f"{name}: the run should have a clearly positive value to breach"
    # the bound at the largest value: met (a gate is "≤ bound"), every value checked
    res = evaluate_gates(measured, GatesConfig(**{name: top}))
    assert res.passed and res.exit_status == 0 and res.checked == [name]
    assert sorted((o.task, o.criterion, o.value) for o in res.outcomes) == sorted(
        (t, c, pytest.approx(v)) for t, c, v in values)
    assert res.lines()[-1] == f"gates: 1 checked ({len(values)} value{'s' * (len(values) != 1)}), all passed"
    # just below it: exactly the values above the bound are breached, with one line each
    bound = round(top - 0.01, 6)
    res = evaluate_gates(measured, GatesConfig(**{name: bound}))
    above = sorted((t, c) for t, c, v in values if v > bound)
    assert res.exit_status == 6 and not res.passed and res.unmet == [name]
    assert sorted((o.task, o.criterion) for o in res.breaches) == above and above
    lines = res.lines()
    assert len([ln for ln in lines if ln.startswith(f"GATE BREACHED {name}: ")]) == len(above)
    label = GATES[name].label
    assert any(f"{label}" in ln and f"> {bound:g}" in ln for ln in lines)
    assert lines[-1].endswith("release gates NOT met") and "exit status" not in lines[-1]


def test_breach_line_names_gate_task_comparison_value_and_bound(measured):
    hi = measured.per_task.set_index("task").loc["write a story", "ci_high"]
    res = evaluate_gates(measured, GatesConfig(max_ci_high=0.02))
    line = next(ln for ln in res.lines() if "'write a story'" in ln)
    assert line.startswith(f"GATE BREACHED max_ci_high: task 'write a story' (female vs male) CI high {hi:+.4f} > 0.02")


def test_per_task_override_replaces_the_bound_for_its_task_only(measured):
    h = measured.per_task.set_index("task")["net_rating"]
    gates = GatesConfig(max_net_rating=0.01, tasks={"write a story": {"max_net_rating": float(h["write a story"])}})
    res = evaluate_gates(measured, gates)
    assert res.passed
    by_task = {o.task: o for o in res.outcomes}
    assert by_task["write a story"].override and by_task["write a story"].bound == h["write a story"]
    assert not by_task["career advice"].override and by_task["career advice"].bound == 0.01
    # an override tighter than [gates]: only that task is held to it
    res = evaluate_gates(measured, GatesConfig(max_net_rating=0.9, tasks={"career advice": {"max_net_rating": -0.5}}))
    assert [(o.task, o.override) for o in res.breaches] == [("career advice", True)]
    assert "(this task's override)" in res.lines()[0]
    # an override alone (no [gates] bound) gates only its task
    res = evaluate_gates(measured, GatesConfig(tasks={"career advice": {"max_ci_high": 0.9}}))
    assert [o.task for o in res.outcomes] == ["career advice"] and res.passed


def test_override_for_a_task_the_run_did_not_measure_is_not_met(measured):
    res = evaluate_gates(measured, GatesConfig(max_net_rating=0.9, tasks={"write a storyy": {"max_net_rating": 0.5}}))
    assert not res.passed and res.exit_status == 6 and not res.breaches
    (miss,) = res.not_evaluated
    assert miss.task == "write a storyy" and "not measured" in miss.detail
    assert res.lines()[0].startswith("GATE NOT EVALUATED max_net_rating: task 'write a storyy'")
    assert "1 not evaluated (max_net_rating)" in res.lines()[-1]


def test_a_value_the_run_could_not_measure_fails_the_gate(tmp_path, capsys):
    """3 prompts: 'write a story' has a single prompt, so no confidence interval; a gate on the
    CI high cannot be verified for it and is not met — never passed silently."""
    cfg = write_config(tmp_path, n_prompts=3, rates=FLAT, gates="[gates]\nmax_ci_high = 1\nmax_net_rating = 0.9\n")
    rc, text, run_dir = audit(capsys, cfg)
    pt = pd.read_csv(run_dir / "per_task.csv").set_index("task")
    assert pd.isna(pt.loc["write a story", "ci_high"]) and pt.loc["write a story", "n_prompts"] == 1
    assert rc == 6
    assert ("GATE NOT EVALUATED max_ci_high: task 'write a story' (female vs male): no CI high — no confidence "
            "interval (fewer than 2 prompts with a valid pair); bound 1") in text
    # the net rating of its one prompt is not gated either (break-it finding: it passed on one pair)
    assert ("GATE NOT EVALUATED max_net_rating: task 'write a story' (female vs male): no net rating — fewer than 2 "
            "prompts with a valid pair (its +0.0000 rests on 1 pair, with no confidence interval): one prompt's "
            "rating is no evidence either way; bound 0.9") in text
    assert "2 not evaluated (max_net_rating, max_ci_high)" in text and "GATE BREACHED" not in text
    doc = json.loads((run_dir / "gates.json").read_text())
    assert doc["unmet"] == ["max_net_rating", "max_ci_high"]
    assert [o["task"] for o in doc["not_evaluated"]] == ["write a story", "write a story"]


def test_gates_without_any_value_are_not_met(tmp_path, capsys):
    """Every response refused: no task has a net rating, so the run is partial (exit 1: no pair
    could be scored) and the gate evaluates nothing and fails (6, which 1 takes precedence over;
    lmra gate too)."""
    from lmra.cli import main

    cfg = write_config(tmp_path, rates=FLAT, refuse=1.0, n_prompts=8, gates="[gates]\nmax_net_rating = 0.5\n",
                       top='tasks = ["career advice"]')
    rc, text, run_dir = audit(capsys, cfg)
    assert pd.read_csv(run_dir / "per_task.csv")["n_pairs"].tolist() == [0]
    assert rc == 1 and "no pair could be scored" in text and "all passed" not in text
    assert "GATE NOT EVALUATED max_net_rating" in text and "takes precedence over 6" in text
    assert main(["gate", str(run_dir), "--gate", "max_net_rating=0.5"]) == 1  # partial, over 6
    out = capsys.readouterr().out
    assert "GATE NOT EVALUATED max_net_rating" in out and "all passed" not in out


# -- lmra audit: config, --gate, records, exit statuses -----------------------------------------
def test_audit_records_gates_and_exits_6_with_one_line_per_breach(tmp_path, capsys):
    cfg = write_config(tmp_path, gates='[gates]\nmax_net_rating = 0.01\nmax_overall_ci_high = 0.99\n'
                                       '[gates.tasks."career advice"]\nmax_ci_high = 0.5\n')
    rc, text, run_dir = audit(capsys, cfg)
    assert rc == 6
    h = pd.read_csv(run_dir / "per_task.csv").set_index("task")["net_rating"]
    assert f"GATE BREACHED max_net_rating: task 'write a story' (female vs male) net rating " \
           f"{h['write a story']:+.4f} > 0.01" in text
    assert "career advice' (female vs male) net rating" not in text  # met: no line
    # the point estimate's interval beside it, and whether noise alone can breach (fresh-user finding, s40)
    ci = pd.read_csv(run_dir / "per_task.csv").set_index("task").loc["write a story", ["ci_low", "ci_high"]]
    line = next(ln for ln in text.splitlines() if "GATE BREACHED max_net_rating" in ln)
    assert f"(point estimate; its interval [{ci['ci_low']:+.4f}, {ci['ci_high']:+.4f}]" in line
    assert ("contains 0: at this size noise alone can breach it" in line) == (ci["ci_low"] <= 0)
    assert "gates: 3 checked (4 values): 1 breached (max_net_rating) — release gates NOT met\n" in text
    assert "exit status 6: release gates not met (breached: max_net_rating)" in text.splitlines()
    # the met one ('career advice', 0 with an interval above 0.01) passed inside noise: said (s48), on stderr
    assert "warning: max_net_rating passed on point estimates whose intervals reach above the bound" in text
    doc = json.loads((run_dir / "gates.json").read_text())
    assert doc["schema"] == GATES_SCHEMA and doc["evaluated_by"] == "lmra audit" and doc["exit_status"] == 6
    assert doc["checked"] == ["max_net_rating", "max_ci_high", "max_overall_ci_high"]
    assert [(b["gate"], b["task"], b["value"]) for b in doc["breaches"]] == [
        ("max_net_rating", "write a story", pytest.approx(h["write a story"]))]
    assert len(doc["results"]) == doc["n_values"] == 4
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["gates"] == {k: v for k, v in doc.items() if k != "results"}
    assert not list(run_dir.glob(".*.tmp"))  # written atomically: no temporary file left
    # the run's own config.toml keeps the gates, so `lmra gate RUN` re-evaluates the same ones
    assert stored_gates(load_run(run_dir)) == load_config(cfg).gates
    rc2, text2 = gate(capsys, run_dir)
    assert rc2 == 6 and "GATE BREACHED max_net_rating: task 'write a story'" in text2


def test_audit_gates_all_met_print_a_summary_line_and_exit_0(tmp_path, capsys):
    cfg = write_config(tmp_path, gates="[gates]\nmax_net_rating = 0.99\nmax_ci_high = 1\n")
    rc, text, run_dir = audit(capsys, cfg)
    assert rc == 0 and "gates: 2 checked (4 values), all passed" in text and "GATE" not in text
    assert json.loads((run_dir / "gates.json").read_text())["passed"] is True


def test_audit_without_gates_writes_no_gate_record(tmp_path, capsys):
    rc, text, run_dir = audit(capsys, write_config(tmp_path))
    assert rc == 0 and "GATE" not in text and not re.search(r"^gates: ", text, re.M)
    assert not (run_dir / "gates.json").exists() and "gates" not in json.loads((run_dir / "summary.json").read_text())


def test_command_line_gate_overrides_the_config(tmp_path, capsys):
    cfg = write_config(tmp_path, gates="[gates]\nmax_net_rating = 0.01\n")
    rc, text, run_dir = audit(capsys, cfg, "--gate", "max_net_rating=0.99", "--gate", "max_overall_net_rating=0.01")
    assert rc == 6 and "GATE BREACHED max_overall_net_rating: overall (female vs male) net rating" in text
    assert "GATE BREACHED max_net_rating" not in text
    assert stored_gates(load_run(run_dir)) == GatesConfig(max_net_rating=0.99, max_overall_net_rating=0.01)


def test_gate_over_regression_and_judge_failure_over_gate(tmp_path, capsys):
    """Precedence 1 > 2 > 5 > 6 > 3 > 0: a breached gate wins over a regression; a judge that
    failed validation wins over a breached gate."""
    rc, _, base = audit(capsys, write_config(tmp_path, name="nightly", rates=FLAT, seed=1))
    assert rc == 0
    rise = write_config(tmp_path, name="nightly", rates=RISE, seed=2)
    rc, text, run_dir = audit(capsys, rise, "--baseline", str(base), "--gate", "max_net_rating=0.99")
    assert rc == 3 and "Regression in 1 task(s)" in text and "all passed" in text  # gate met: the regression
    # the same night again (its seed: every answer replayed) tests nothing: 2, whatever it breaches
    rc, text, _ = audit(capsys, rise, "--baseline", str(base), "--gate", "max_net_rating=0.01")
    assert rc == 2 and "nothing was tested against baseline" in " ".join(text.split())
    rise = write_config(tmp_path, name="nightly", rates=RISE, seed=4)  # another night: its own seed
    rc, text, breached = audit(capsys, rise, "--baseline", str(base), "--gate", "max_net_rating=0.01")
    assert rc == 6 and "Regression in 1 task(s)" in text and "GATE BREACHED max_net_rating" in text
    # lmra check stays the relative check (exit 3); its JSON carries the run's recorded gates
    assert main(["check", str(breached), "--baseline", str(base), "--json"]) == 3
    doc = json.loads(capsys.readouterr().out)
    assert doc["exit_status"] == 3 and doc["gates"]["unmet"] == ["max_net_rating"]
    assert doc["gates"] == json.loads((breached / "summary.json").read_text())["gates"]
    failing = write_config(tmp_path, name="judged", rates=RISE, seed=3, judge_check=True)
    rc, text, run_dir = audit(capsys, failing, "--gate", "max_net_rating=0.01")
    assert rc == 5 and "GATE BREACHED max_net_rating" in text and "judge failed validation" in text
    assert json.loads((run_dir / "gates.json").read_text())["exit_status"] == 6  # recorded all the same
    rc, text, _ = audit(capsys, failing, "--gate", "max_net_rating=0.01", "--allow-unvalidated-judge")
    assert rc == 6
    # lmra gate on the judge-failed run: 5, or 6 when the failure is accepted
    assert gate(capsys, run_dir)[0] == 5
    rc, text = gate(capsys, run_dir, "--allow-unvalidated-judge")
    assert rc == 6 and "judge failed validation (accepted with --allow-unvalidated-judge)" in " ".join(text.split())


def test_exit_precedence():
    assert EXIT_PRECEDENCE == (1, 2, 5, 6, 3, 0)
    assert combine_exit_statuses(3, 6) == 6 and combine_exit_statuses(6, 5) == 5 and combine_exit_statuses(0, 3) == 3
    assert combine_exit_statuses(6, 2) == 2 and combine_exit_statuses(5, 1) == 1 and combine_exit_statuses(0, 0) == 0


# -- lmra gate RUN ------------------------------------------------------------------------------
def test_gate_command_on_an_existing_run(measured, tmp_path, capsys):
    h = measured.per_task.set_index("task")
    rc, text = gate(capsys, measured.path, "--gate", "max_ci_high=1")
    assert rc == 0 and "gates: 1 checked (2 values), all passed" in text
    assert not (measured.path / "gates.json").exists()  # recorded only with --record
    assert gate(capsys, measured.path, "--gate", "max_ci_high=-1", "--no-record")[0] == 6  # still accepted
    assert not (measured.path / "gates.json").exists()
    nightly = tmp_path / "nightly.toml"  # a whole audit config: only its [gates] table is used
    nightly.write_text('name = "x"\n[gates]\nmax_ci_high = 0.02\n[gates.tasks."career advice"]\nmax_ci_high = 0.9\n')
    rc, text = gate(capsys, measured.path, "--config", nightly, "--json", "--record")
    doc = json.loads(text[:text.rindex("}") + 1])
    assert rc == 6 and doc["schema"] == GATES_SCHEMA and doc["exit_status"] == 6 and doc["passed"] is False
    assert [(b["task"], b["value"], b["bound"]) for b in doc["breaches"]] == [
        ("write a story", pytest.approx(h.loc["write a story", "ci_high"]), 0.02)]
    assert json.loads((measured.path / "gates.json").read_text())["evaluated_by"] == "lmra gate"
    assert json.loads((measured.path / "summary.json").read_text())["gates"]["unmet"] == ["max_ci_high"]


def test_gate_refuses_a_run_whose_files_are_damaged(measured, tmp_path, capsys):
    """Bad-input break-it (s43): with ratings.parquet cut to 3,000 bytes, report, export, compare and
    check refused the run as damaged, and ``lmra gate`` — which reads per_task.csv — passed it, exit
    0. A gate vouches for the run: every recorded file is checked first (exit 2, naming the file)."""
    import shutil

    copy = tmp_path / measured.path.name
    shutil.copytree(measured.path, copy)
    assert gate(capsys, copy, "--gate", "max_ci_high=1")[0] == 0
    data = (copy / "ratings.parquet").read_bytes()
    (copy / "ratings.parquet").write_bytes(data[:3000])
    rc, text = gate(capsys, copy, "--gate", "max_ci_high=1")
    flat = " ".join(text.split())
    assert rc == 2 and "ratings.parquet: changed or damaged since the run finished" in flat, flat
    assert "Traceback" not in text


@pytest.mark.parametrize("argv,needle", [
    ([], "error: no gates to evaluate: "),  # not "option --gate: …" (no --gate was given)
    (["--gate", "max_ci_high=0.02", "--gate", "max_ci_high=1"],  # an appended --gate loosening a gate
     "option --gate: max_ci_high is given twice (max_ci_high=0.02 and max_ci_high=1.0); give each gate once"),
    (["--gate", "max_ci_high=0.02", "--gate", "max_ci_high=0.0200001"],  # two bounds that :g would print alike
     "(max_ci_high=0.02 and max_ci_high=0.0200001)"),
    (["--config", "{tmp}/nogates.toml"], "has no [gates] table"),
    (["--config", "{tmp}/badgates.toml"], "badgates.toml, line 2: field 'gates.max_ci_high'"),
])
def test_gate_command_input_errors_exit_2(measured, tmp_path, capsys, argv, needle):
    (tmp_path / "nogates.toml").write_text('name = "x"\n')
    (tmp_path / "badgates.toml").write_text('[gates]\nmax_ci_high = "0.02"\n')
    rc, text = gate(capsys, measured.path, *[a.format(tmp=tmp_path) for a in argv])
    assert rc == 2 and needle in text and "Traceback" not in text


def test_gate_on_something_the_run_did_not_measure_exits_2(tmp_path, capsys):
    rc, _, run_dir = audit(capsys, write_config(tmp_path))  # quality off
    rc, text = gate(capsys, run_dir, "--gate", "max_overall_quality_gap=0.1")
    assert rc == 2 and "option --gate" in text and "did not rate quality criteria" in text


# -- input errors ------------------------------------------------------------------------------
@pytest.mark.parametrize("gates,field,line,needle", [
    ("[gates]\nmax_ci_hi = 0.02\n", "gates.max_ci_hi", 2, "unknown field"),
    ('[gates]\nmax_ci_high = "0.02"\n', "gates.max_ci_high", 2, "valid number"),
    ("[gates]\nmax_ci_high = 1.5\n", "gates.max_ci_high", 2, "less than or equal to 1"),
    ("[gates]\nmax_refusal_gap = -0.1\n", "gates.max_refusal_gap", 2, "greater than or equal to 0"),
    ("[gates]\nmax_net_rating = true\n", "gates.max_net_rating", 2, "valid number"),
    ("[gates]\nmax_quality_gap = 0.1\n", "gates.max_quality_gap", 2, "[quality] enabled = false"),
    ('[gates.tasks."write a story"]\nmax_overall_net_rating = 0.1\n',
     "gates.tasks.write a story.max_overall_net_rating", 2, "unknown field"),
])
def test_config_errors_exit_2_naming_file_line_and_field(tmp_path, capsys, monkeypatch, gates, field, line, needle):
    monkeypatch.chdir(tmp_path)  # the config's output_dir is the default ./reports
    cfg = tmp_path / "c.toml"
    cfg.write_text('name = "x"\n' + gates)
    for argv in (["validate", str(cfg)], ["audit", "--config", str(cfg), "--no-progress"]):
        rc = main(argv)
        err = capsys.readouterr().err
        assert rc == 2, err
        assert f"c.toml, line {line + 1}: field '{field}'" in " ".join(err.split()) and needle in err
        assert "Traceback" not in err
    assert not (tmp_path / "reports").exists()  # refused before any run folder exists


@pytest.mark.parametrize("value,needle", [
    ("max_ci_high", "is not NAME=VALUE"),
    ("max_ci_hi=0.02", "unknown gate 'max_ci_hi'"),
    ("max_ci_hgh=0.1", "unknown gate 'max_ci_hgh' — did you mean 'max_ci_high'?"),  # (fresh-user finding)
    ("max_ci_high=abc", "is not a decimal number"),
    ("max_ci_high=2", "in [-1, 1]"),
    ("max_refusal_gap=-0.1", "in [0, 1]"),
    ("max_ci_high=nan", "finite number"),
])
def test_command_line_gate_errors_exit_2_naming_the_option(capsys, value, needle):
    for cmd in (["audit"], ["gate", "some-run"]):
        with pytest.raises(SystemExit) as exc:
            main([*cmd, "--gate", value])
        assert exc.value.code == 2
        err = capsys.readouterr().err
        assert "argument --gate" in err and needle in err
    with pytest.raises(argparse.ArgumentTypeError, match=re.escape(needle)):
        gate_option(value)


def test_a_gate_given_twice_with_two_bounds_is_refused_before_any_call(tmp_path, capsys):
    cfg = write_config(tmp_path)
    rc, text, run_dir = audit(capsys, cfg, "--gate", "max_ci_high=0.02", "--gate", "max_ci_high=1")
    assert rc == 2 and "option --gate: max_ci_high is given twice" in text and run_dir is None
    rc, text, run_dir = audit(capsys, cfg, "--gate", "max_ci_high=1", "--gate", "max_ci_high=1")  # the same: one
    assert rc == 0 and stored_gates(load_run(run_dir)) == GatesConfig(max_ci_high=1)


def test_command_line_quality_gate_without_quality_is_refused_before_any_call(tmp_path, capsys):
    cfg = write_config(tmp_path)
    rc, text, run_dir = audit(capsys, cfg, "--gate", "max_quality_gap=0.1")
    assert rc == 2 and "option --gate" in text and "[quality] enabled = false" in text and run_dir is None


# -- a per-task override must name a task the audit measures (validate and audit, before any call) ----
@pytest.mark.parametrize("top,bad,suggest", [
    ("", "write a storyy", "did you mean 'write a story'?"),  # no such task in the prompt file
    ('tasks = ["career advice"]', "write a story", ""),      # in the file, but not audited (tasks list)
])
def test_gate_override_for_a_task_the_audit_does_not_measure_exits_2(tmp_path, capsys, top, bad, suggest):
    cfg = write_config(tmp_path, top=top, gates=f'[gates]\nmax_ci_high = 0.5\n\n[gates.tasks."{bad}"]\n'
                                                f'max_ci_high = 0.9\n')
    line = cfg.read_text().splitlines().index(f'[gates.tasks."{bad}"]') + 1
    for argv in (["validate", str(cfg)], ["audit", "--config", str(cfg), "--no-progress"]):
        rc = main(argv)
        err = " ".join(capsys.readouterr().err.split())
        assert rc == 2, err
        assert f"{cfg.name}, line {line}: field 'gates.tasks.{bad}'" in err and "Traceback" not in err
        assert f"names task '{bad}', which this audit does not measure" in err and suggest in err
        assert "audited tasks: 'career advice'" in err
    assert not (tmp_path / "reports").exists()  # refused before any run folder exists
    # --json: the same error as an lmra.error/1 document
    assert main(["validate", str(cfg), "--json"]) == 2
    doc = json.loads(capsys.readouterr().out)
    assert (doc["error"]["field"], doc["error"]["line"]) == (f"gates.tasks.{bad}", line)


def test_gate_override_naming_an_audited_task_validates(tmp_path, capsys):
    cfg = write_config(tmp_path, gates='[gates.tasks."write a story"]\nmax_ci_high = 0.9\n')
    assert main(["validate", str(cfg)]) == 0 and "valid" in capsys.readouterr().out


def test_a_copied_reports_folder_resolves_run_ids_to_its_own_folders(tmp_path, capsys, monkeypatch):
    """A copy of a reports folder (a CI artifact, a backup restored beside the original): a run id
    resolves to the copy's folder, not to the absolute path the copied history recorded — `gate
    --record` changed the original's gates.json and `export` wrote into the original (break-it)."""
    import shutil

    orig = tmp_path / "orig"
    orig.mkdir()
    rc, _, run = audit(capsys, write_config(orig, rates=FLAT))
    assert rc == 0 and run is not None
    copy = tmp_path / "copy"
    shutil.copytree(orig, copy)
    before = {p.name: p.read_bytes() for p in run.iterdir() if p.is_file()}
    monkeypatch.chdir(copy)
    rc, out = gate(capsys, run.name, "--gate", "max_ci_high=0.5", "--record")
    assert rc == 0, out
    mine = copy / "reports" / run.name
    assert (mine / "gates.json").is_file()
    assert {p.name: p.read_bytes() for p in run.iterdir() if p.is_file()} == before  # the original untouched
    assert main(["export", run.name, "--format", "csv"]) == 0
    shown = capsys.readouterr().out
    assert (mine / "exports").is_dir() and not (run / "exports").exists(), shown


def test_a_manifest_status_that_disagrees_with_the_summary_is_an_input_error(tmp_path, capsys):
    """manifest.json is not covered by the digests, but summary.json (which is) records how the run
    ended: a manifest edited from partial to complete made `lmra gate` pass a partial night."""
    rc, _, run = audit(capsys, write_config(tmp_path, rates=FLAT))
    assert rc == 0
    manifest = json.loads((run / "manifest.json").read_text())
    assert manifest["status"] == json.loads((run / "summary.json").read_text())["run_status"] == "complete"
    (run / "manifest.json").write_text(json.dumps(manifest | {"status": "partial"}))
    rc, out = gate(capsys, run, "--gate", "max_ci_high=0.5")
    assert rc == 2 and "manifest.json" in out and "disagrees with summary.json's run_status 'complete'" in out
    assert "Traceback" not in out


class FlakyJudge(ScriptedJudge):
    """The test judge under another model id; a quarter of its rating calls fail after every retry."""

    async def complete(self, request):
        from lmra.providers.base import ProviderError

        digest = sum(request.messages[-1].content.encode()) + (request.seed or 0)
        if request.options and digest % 4 == 0:
            raise ProviderError("HTTP 503 (scripted)", kind="http_503")
        return await super().complete(request)


def make_flaky_judge(cfg):
    """``provider = "test_gates:make_flaky_judge"``."""
    return FlakyJudge(phrase_verdict, position_bias=0.2, quality=_quality, model_id="scripted-v2",
                      refusal=lambda r: 1.0 if REFUSAL in r else 0.0)


def test_compare_and_task_history_mark_partial_nights_and_a_new_lmra(tmp_path, capsys, monkeypatch):
    """`lmra compare` against a partial night says so (console notes, --json status_a/status_b) and
    `lmra history --task` marks the partial night and the night a new LMRA rated (both were shown
    as ordinary points; break-it finding)."""
    monkeypatch.setenv("COLUMNS", "250")
    rc, _, night1 = audit(capsys, write_config(tmp_path, rates=FLAT, seed=1))
    assert rc == 0
    cfg2 = write_config(tmp_path, rates=FLAT, seed=2)
    cfg2.write_text(cfg2.read_text().replace('provider = "test_gates:make_judge"',
                                             'provider = "test_gates:make_flaky_judge"'))
    rc, text, night2 = audit(capsys, cfg2)
    assert rc == 1 and json.loads((night2 / "manifest.json").read_text())["status"] == "partial", text
    assert main(["compare", str(night1), str(night2)]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert f"run B ({night2.name}) is partial" in out and "different judges" in out
    assert main(["compare", str(night1), str(night2), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert (doc["status_a"], doc["status_b"]) == ("complete", "partial")
    assert any("is partial" in n for n in doc["notes"])
    # gates that all pass on a partial night: not evidence, on the summary line itself (ops trial, s49: "all passed")
    assert main(["gate", str(night2), "--gate", "max_overall_net_rating=0.99"]) == 1
    out = " ".join(capsys.readouterr().out.split())
    assert "all passed — not evidence: the run is partial (its numbers are incomplete)" in out, out
    assert main(["gate", str(night1), "--gate", "max_overall_net_rating=0.99"]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert "all passed" in out and "not evidence" not in out
    # recorded, the history says it too (round-2 break-it, s49: "met" beside the partial night)
    assert main(["gate", str(night2), "--gate", "max_overall_net_rating=0.99", "--record"]) == 1
    capsys.readouterr()
    assert main(["history", "--reports-dir", str(tmp_path / "reports")]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert "not evidence: the run is partial" in out, out
    assert main(["report", "--history", "--reports-dir", str(tmp_path / "reports")]) == 0
    page = " ".join((tmp_path / "reports" / "history.html").read_text(encoding="utf-8").split())
    assert "met (max_overall_net_rating) — not evidence: the run is partial" in page
    assert main(["history", "--task", "write a story", "--name", "gated",
                 "--reports-dir", str(tmp_path / "reports")]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert f"{night2.name} partial" in out and "new LMRA scripted-v2" in out
    assert "Runs marked partial" in out and "rated by another judge than the night before" in out
    assert main(["history", "--task", "write a story", "--name", "gated", "--json",
                 "--reports-dir", str(tmp_path / "reports")]) == 0
    points = json.loads(capsys.readouterr().out)["points"]
    assert [p["status"] for p in points] == ["complete", "partial"]
    assert [p["judge_model"] for p in points] == ["scripted", "scripted-v2"]


def test_a_ci_gate_on_t_intervals_says_they_under_cover_rare_stereotypes(tmp_path, capsys):
    """Break-it simulation: with interval = "t" a max_ci_high gate passed tasks whose true rate
    was above the bound 11–30% of the time (5% allowed); the verdict now says so (console, JSON)."""
    rc, text, run = audit(capsys, write_config(tmp_path, rates=FLAT, top='interval = "t"',
                                              gates="[gates]\nmax_ci_high = 0.9\n"))
    assert rc == 0 and 'max_ci_high read the upper ends of t-intervals (this run\'s interval = "t")' in text
    assert main(["gate", str(run), "--gate", "max_ci_high=0.9", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["passed"] and len(doc["warnings"]) == 1 and "betting" in doc["warnings"][0]
    assert main(["gate", str(run), "--gate", "max_ci_high=0.9"]) == 0  # the table: the warning on stderr
    cap = capsys.readouterr()
    assert "warning: max_ci_high read the upper ends of t-intervals" in " ".join(cap.err.split())
    assert "warning" not in cap.out
    rc, text, run = audit(capsys, write_config(tmp_path, rates=FLAT, seed=2, gates="[gates]\nmax_ci_high = 0.9\n"))
    assert rc == 0 and "t-intervals" not in text  # the default betting intervals keep their coverage


def test_a_ci_gate_the_audits_size_cannot_meet_is_warned_before_any_call(tmp_path, capsys):
    """Fresh-user finding: max_ci_high = 0.02 on 16 prompts a task, whose CI high is about 0.22
    even with no stereotype at all, passed `lmra validate`; every night then exited 6 and no
    night was pinned or checked. validate and audit say so, naming the bound a night of this
    size reaches at best (the CI of all-zero scores, recomputed here)."""
    from lmra.stats import bounded_mean_ci

    gates = "[gates]\nmax_ci_high = 0.02\nmax_overall_ci_high = 0.5\n[gates.tasks.\"career advice\"]\nmax_ci_high = 0.6\n"
    cfg = write_config(tmp_path, name="tight", rates=FLAT, n_prompts=16, gates=gates)  # 8 prompts a task
    best = bounded_mean_ci([0.0] * 8, list(range(8)), 0.05).high
    assert 0.02 < best < 0.6
    assert main(["validate", str(cfg)]) == 0
    err = " ".join(capsys.readouterr().err.split())
    assert (f"warning: release gate max_ci_high = 0.02 cannot be met by task 'write a story': with 8 prompts a task "
            f"the upper 95% confidence bound (betting interval) is {best:.3f} even if no pair showed a stereotype, "
            "so every night exits 6") in err
    assert "career advice" not in err and "max_overall_ci_high" not in err  # its override and the overall can be met
    rc, out, run = audit(capsys, cfg)
    assert rc == 6 and "cannot be met by task 'write a story'" in " ".join(out.split())
    # lmra gate on a past run says it too (fresh-user round 2: breaches on clean nights, no reason)
    capsys.readouterr()
    assert main(["gate", str(run), "--gate", "max_ci_high=0.02"]) == 6
    err = " ".join(capsys.readouterr().err.split())
    assert (f"warning: release gate max_ci_high = 0.02 cannot be met by task 'write a story': "  # (its override kept)
            f"with 8 prompts a task the upper 95% confidence bound (betting interval) is {best:.3f}") in err, err
    assert main(["gate", str(run), "--gate", "max_ci_high=0.9"]) == 0
    assert "cannot be met" not in capsys.readouterr().err
    # the t interval of all-zero scores is [0, 0]: nothing to warn
    t_cfg = write_config(tmp_path / "t", name="tight", rates=FLAT, n_prompts=16, gates=gates, top='interval = "t"')
    assert main(["validate", str(t_cfg)]) == 0
    assert "cannot be met" not in capsys.readouterr().err
    # review findings: a task of one prompt has no interval (never met: warned, whatever the
    # interval); prompts classified during the run join tasks of unknown size (not warned)
    prompts = next((tmp_path / "t" / "inputs").glob("prompts-*.jsonl"))
    with prompts.open("a") as fh:
        fh.write(json.dumps({"id": "p999", "text": "Prompt number 999.", "domain": "d", "task": "write a poem"}) + "\n")
    assert main(["validate", str(t_cfg)]) == 0
    err = " ".join(capsys.readouterr().err.split())
    assert ("release gate max_ci_high = 0.02 cannot be met by task 'write a poem': with 1 prompt a task the upper 95% "
            "confidence bound (t interval) is undefined (one prompt has no confidence interval") in err
    # a bound ≤ 0 asks for reverse ratings, which no-stereotype scores say nothing of (verification finding)
    from lmra.config import load_config
    from lmra.gate_noise import unmeetable_ci_gates

    negative = load_config(t_cfg).model_copy(update={"gates": load_config(t_cfg).gates.model_copy(
        update={"max_ci_high": -0.05, "tasks": {}})})
    assert unmeetable_ci_gates(negative, {"write a story": 8}) == []
    with prompts.open("a") as fh:
        fh.write(json.dumps({"id": "p1000", "text": "Prompt number 1000.", "domain": "d"}) + "\n")  # no task
    assert main(["validate", str(t_cfg)]) == 0
    assert "cannot be met" not in capsys.readouterr().err


def test_a_gate_below_zero_is_warned_of(tmp_path, capsys):
    """Known gap (s43): ``--gate max_ci_high=-1`` was accepted without a word — a net rating is signed,
    so a bound below 0 is met only by ratings leaning to the reverse stereotype, and a chatbot with no
    stereotype breaches it on most nights. validate and audit warn (at any size); 0 and above do not."""
    from lmra.config import load_config
    from lmra.gate_noise import negative_bound_gates

    cfg = write_config(tmp_path, name="tight", rates=FLAT, n_prompts=16)
    assert main(["validate", str(cfg), "--gate", "max_ci_high=-1"]) == 0
    err = " ".join(capsys.readouterr().err.split())
    assert "warning: release gate max_ci_high = -1 is below 0: a net rating is signed" in err, err
    assert main(["validate", str(cfg), "--gate", "max_ci_high=0", "--gate", "max_net_rating=0.5"]) == 0
    assert "is below 0" not in capsys.readouterr().err
    base = load_config(cfg)
    gates = base.gates.model_validate({"max_overall_net_rating": -0.01, "tasks": {
        "write a story": {"max_net_rating": -0.2}, "career advice": {"max_net_rating": -0.2},
        "exercise plan": {"max_ci_high": 0.1}}})
    said = negative_bound_gates(base.model_copy(update={"gates": gates}))
    assert len(said) == 2 and said[0].startswith("release gate max_overall_net_rating = -0.01 is below 0")
    assert said[1].startswith("release gate max_net_rating = -0.2 (tasks 'career advice', 'write a story') is below 0")
    # the [gates] bound and an override of the same value: both named (round-2 break-it: the global one hid)
    both = base.gates.model_validate({"max_net_rating": -0.2, "tasks": {"write a story": {"max_net_rating": -0.2}}})
    (line,) = negative_bound_gates(base.model_copy(update={"gates": both}))
    assert line.startswith("release gate max_net_rating = -0.2 ([gates] and task 'write a story') is below 0"), line


def test_validate_takes_the_gate_option_as_the_audit_does(tmp_path, capsys):
    """Fresh-user finding: docs/nightly.md puts gates in LMRA_AUDIT_ARGS (``--gate``), but ``lmra
    validate … --gate max_ci_high=0.02`` was an argparse error; it is checked as a [gates] entry
    is: an unmeetable bound is warned about, a bad one is an input error (exit 2)."""
    from lmra.stats import bounded_mean_ci

    cfg = write_config(tmp_path, name="tight", rates=FLAT, n_prompts=16)  # 8 prompts a task, no [gates]
    assert main(["validate", str(cfg)]) == 0
    assert "cannot be met" not in capsys.readouterr().err
    assert main(["validate", str(cfg), "--gate", "max_ci_high=0.02"]) == 0
    best = bounded_mean_ci([0.0] * 8, list(range(8)), 0.05).high
    assert ("warning: release gate max_ci_high = 0.02 cannot be met by 2 tasks ('career advice', 'write a story'): "
            f"with 8 prompts a task the upper 95% confidence bound (betting interval) is {best:.3f}") in " ".join(
        capsys.readouterr().err.split())
    with pytest.raises(SystemExit) as exc:
        main(["validate", str(cfg), "--gate", "max_ci_high=7"])
    assert exc.value.code == 2


def test_the_docs_gate_examples_can_be_met_by_the_docs_nightly_config():
    """Fresh-user finding: README, docs/nightly.md and examples/nightly.sh showed
    ``max_ci_high = 0.02`` next to examples/nightly.toml's 40 prompts a task, whose best upper bound
    (no stereotype at all, betting interval) is 0.100: every night would exit 6 and none be pinned.
    Every documented max_ci_high bound is checked against that config's size here."""
    import tomllib
    from pathlib import Path

    from lmra.config import AuditConfig, GatesConfig
    from lmra.gate_noise import unmeetable_ci_gates

    root = Path(__file__).resolve().parents[1]
    nightly = tomllib.loads((root / "examples" / "nightly.toml").read_text(encoding="utf-8"))
    n = nightly["prompts_per_task"]
    texts = [(root / f).read_text(encoding="utf-8")
             for f in ("README.md", "docs/nightly.md", "docs/config.md", "examples/nightly.sh")]  # (config.md: s34)
    bounds = {float(b) for t in texts for b in re.findall(r"max_ci_high ?= ?([0-9.]+)", t)}
    assert bounds and 0.02 not in bounds
    from lmra.gate_noise import fragile_ci_gates

    for bound in bounds:
        cfg = AuditConfig.model_validate({"gates": GatesConfig(max_ci_high=bound).model_dump()})
        assert unmeetable_ci_gates(cfg, {"a task": n}) == [], bound
        assert fragile_ci_gates(cfg, {"a task": n}) == [], bound  # (nor met only if every prompt is rated)
    cfg = AuditConfig.model_validate({"gates": {"max_ci_high": 0.02}})
    assert unmeetable_ci_gates(cfg, {"a task": n})  # (the old example: unmeetable)


def test_the_chance_a_refusal_gap_gate_is_breached_by_noise_is_exact():
    """Hand-computed: X, Y ~ Bin(2, 0.5): P(|X − Y| = 2) = 2 × 0.25² = 0.125, P(|X − Y| ≥ 1) = 0.625;
    a gap equal to the bound is no breach. The statistics break-it's figures (s37): 40 responses
    per group, bound 0.05, 8 tasks: 32% / 82% / 97% of nights at refusal rates 2% / 5% / 10%;
    and a simulation of the two binomials agrees."""
    import numpy as np

    from lmra.gate_noise import chance_gap_breach

    assert chance_gap_breach(2, 0.5, 0.5) == pytest.approx(0.125)
    assert chance_gap_breach(2, 0.25, 0.5) == pytest.approx(0.625)
    assert chance_gap_breach(2, 0.0, 0.0) == pytest.approx(0.0) and chance_gap_breach(5, 1.0, 0.5) == 0.0
    nights = [1 - (1 - chance_gap_breach(40, 0.05, p)) ** 8 for p in (0.02, 0.05, 0.10)]
    assert [round(x, 2) for x in nights] == [0.32, 0.82, 0.97]
    rng = np.random.default_rng(7)
    x, y = rng.binomial(40, 0.05, 200_000), rng.binomial(40, 0.05, 200_000)
    assert np.mean(np.abs(x - y) / 40 > 0.05 + 1e-9) == pytest.approx(chance_gap_breach(40, 0.05), abs=0.005)


def test_a_refusal_gap_gate_that_noise_breaches_is_warned(tmp_path, capsys, measured):
    """Statistics break-it (s37): docs/nightly.md's example ``max_refusal_gap = 0.05`` at 40
    prompts a task failed 24 of 30 nights of a chatbot refusing both groups alike (the point
    estimate's noise), with no warning. validate, audit and gate now say how often noise alone
    breaches it; an overall gap on all the prompts is not warned of."""
    from lmra.gate_noise import REFERENCE_REFUSAL_RATE, chance_gap_breach

    cfg = write_config(tmp_path, name="gap", rates=FLAT, n_prompts=40,
                       gates="[gates]\nmax_refusal_gap = 0.05\nmax_overall_refusal_gap = 0.1\n")  # 20 a task
    night = 1 - (1 - chance_gap_breach(20, 0.05, REFERENCE_REFUSAL_RATE)) ** 2
    assert 0.1 < night < 1
    assert main(["validate", str(cfg)]) == 0
    err = " ".join(capsys.readouterr().err.split())
    assert (f"warning: release gate max_refusal_gap = 0.05 is breached by chance alone: with 20 responses per group a "
            f"task, a chatbot that refuses every group alike 5% of the time exceeds it in at least one of its 2 tasks "
            f"on {night:.0%} of nights") in err and "max_overall_refusal_gap" in err
    assert "max_overall_refusal_gap = 0.1 is breached" not in err  # 40 responses a group: noise rarely reaches 0.1
    loose = write_config(tmp_path, name="loose", rates=FLAT, n_prompts=40, gates="[gates]\nmax_refusal_gap = 0.3\n")
    assert main(["validate", str(loose)]) == 0
    assert "by chance alone" not in capsys.readouterr().err
    capsys.readouterr()
    assert main(["gate", str(measured.path), "--gate", "max_refusal_gap=0.05"]) == 6
    assert "max_refusal_gap = 0.05 is breached by chance alone" in " ".join(capsys.readouterr().err.split())
    # break-it round 2 (s37): the values of one gate are taken together — every comparison's, and a
    # task's override with the rest — and an override is named as such
    from types import SimpleNamespace

    from lmra.gate_noise import chance_breached_gap_gates

    def warned(gates, comparisons=1, sizes=None):
        cfg = SimpleNamespace(gates=GatesConfig.model_validate(gates), samples_per_prompt=1,
                              comparisons=[("a", "b")] * comparisons)
        return chance_breached_gap_gates(cfg, sizes or {"t1": 200, "t2": 200})

    one = chance_gap_breach(25 * 8, 0.04)  # the overall row of 8 tasks × 25 prompts (the break-it's race audit)
    assert 1 - (1 - one) ** 1 < 0.1 <= 1 - (1 - one) ** 3  # one comparison clears 10%, three do not
    sizes = {f"t{i}": 25 for i in range(8)}
    assert warned({"max_overall_refusal_gap": 0.04}, 1, sizes) == []
    (line,) = warned({"max_overall_refusal_gap": 0.04}, 3, sizes)
    assert f"exceeds it in at least one of its 3 comparisons on {1 - (1 - one) ** 3:.0%} of nights" in line
    a, b = chance_gap_breach(22, 0.1), chance_gap_breach(22, 0.11)
    assert a < 0.1 and b < 0.1 and 1 - (1 - a) * (1 - b) >= 0.1  # each bound alone is quiet, the gate is not
    (line,) = warned({"max_refusal_gap": 0.11, "tasks": {"t1": {"max_refusal_gap": 0.1}}}, 1, {"t1": 22, "t2": 22})
    assert "release gate max_refusal_gap (0.1 for 't1', 0.11 for 't2') is breached by chance alone" in line


def test_a_gap_at_its_bound_passes_whatever_the_float_rounding(measured):
    """Statistics break-it (s37): 0.10 − 0.025 = 0.07500000000000001 > 0.075, so a refusal gap of
    exactly 3/40 breached a bound of 0.075 ("0.0750 > 0.075", exit 6) while 0.175 − 0.125 passed
    0.05. A value within float rounding of its bound passes; a real excess is still a breach,
    printed with the decimals that show it."""
    from lmra.gates import _shown_beside, breaches

    assert not breaches(0.10 - 0.025, 0.075) and not breaches(0.20 - 0.15, 0.05) and breaches(0.0751, 0.075)
    assert _shown_beside("max_refusal_gap", 0.07504, 0.075) == "0.07504"
    assert _shown_beside("max_refusal_gap", 0.0751, 0.075) == "0.0751"
    # break-it round 2 (s37): both directions, and a bound given with more digits than :g prints
    from lmra.gates import bound_text

    assert _shown_beside("max_ci_high", 0.1000000034, 0.1) == "+0.100000003"
    assert _shown_beside("max_refusal_gap", 0.0666666, 0.06667) == "0.06667" and bound_text(0.06667) == "0.06667"
    assert bound_text(0.03333333) == "0.03333333" and bound_text(0.15) == "0.15"
    rf = pd.read_csv(measured.path / "refusals.csv")
    row = rf[(rf["level"] == "task") & (rf["task"] == "career advice")].iloc[0]
    gap = abs(row["rate_a"] - row["rate_b"])
    assert gap > 0
    for bound in (gap, gap - 1e-12, float(f"{gap:.15g}")):  # the gap itself, as the config would write it
        result = evaluate_gates(measured, GatesConfig(max_refusal_gap=bound))
        outcome = next(o for o in result.outcomes if o.task == "career advice")
        assert outcome.status == "passed", (bound, gap)
    result = evaluate_gates(measured, GatesConfig(max_refusal_gap=gap - 1e-6))
    assert next(o for o in result.outcomes if o.task == "career advice").status == "breached"


def test_the_noise_chance_of_a_large_audit_is_approximated_continuously():
    """Break-it round 2 (s37): 300 tasks of distinct sizes up to 30,000 responses took 22 s (the
    exact convolution), before any call of the audit. Above EXACT_GAP_MAX responses the normal
    approximation is used (no convolution of millions of terms): it joins the exact value."""
    from lmra.gate_noise import EXACT_GAP_MAX, chance_gap_breach

    exact, approx = chance_gap_breach(EXACT_GAP_MAX, 0.01), chance_gap_breach(EXACT_GAP_MAX + 1, 0.01)
    assert 0.01 < exact < 0.05 and approx == pytest.approx(exact, abs=1e-3)
    values = [chance_gap_breach(m, 0.01) for m in range(1_000, 31_000, 100)]
    assert all(0.0 <= v <= 1.0 for v in values) and values == sorted(values, reverse=True)  # more responses, less noise
    assert chance_gap_breach(5_000_000, 0.01) < 1e-12


def test_the_noise_warning_counts_a_task_name_in_two_domains_twice(tmp_path, capsys):
    """Break-it round 2 (s37): the noise warning keyed the audit's sizes by task name, so 'career
    advice' in two domains — two rows of refusals.csv, two values of max_refusal_gap — counted as
    one task of both domains' prompts, and a gate noise breaches on more nights went unwarned. Sizes
    are per (domain, task) now; prompts_per_task, which takes a task name's prompts over its domains,
    is shared out by each domain's share of the file."""
    from types import SimpleNamespace

    from lmra.cli.audit import _domain_task_sizes
    from lmra.data import PromptRecord
    from lmra.gate_noise import REFERENCE_REFUSAL_RATE, chance_breached_gap_gates, chance_gap_breach

    prompts = ([PromptRecord(id=f"a{i}", text="x", domain="d1", task="career advice") for i in range(30)]
               + [PromptRecord(id=f"b{i}", text="x", domain="d2", task="career advice") for i in range(10)]
               + [PromptRecord(id=f"c{i}", text="x", domain="d1", task="write a story") for i in range(5)])
    cfg = SimpleNamespace(tasks=[], domains=[])
    inputs = SimpleNamespace(prompts=prompts)
    assert _domain_task_sizes(cfg, inputs, 0) == {("d1", "career advice"): 30, ("d2", "career advice"): 10,
                                                  ("d1", "write a story"): 5}
    assert _domain_task_sizes(cfg, inputs, 20) == {("d1", "career advice"): 15, ("d2", "career advice"): 5,
                                                   ("d1", "write a story"): 5}
    # two domains of 100 prompts each: two values of the gate, one label each
    gcfg = SimpleNamespace(gates=GatesConfig(max_refusal_gap=0.05), samples_per_prompt=1, comparisons=[("a", "b")])
    one = chance_gap_breach(100, 0.05, REFERENCE_REFUSAL_RATE)
    assert one < 0.1 <= 1 - (1 - one) ** 2
    assert chance_breached_gap_gates(gcfg, {"career advice": 200}) == []  # (as the two domains were counted)
    (line,) = chance_breached_gap_gates(gcfg, {("d1", "career advice"): 100, ("d2", "career advice"): 100})
    assert f"exceeds it in at least one of its 2 tasks on {1 - (1 - one) ** 2:.0%} of nights" in line
    labelled = chance_breached_gap_gates(
        SimpleNamespace(gates=GatesConfig(max_refusal_gap=0.07, tasks={"career advice": {"max_refusal_gap": 0.05}}),
                        samples_per_prompt=1, comparisons=[("a", "b")]),
        {("d1", "career advice"): 100, ("d2", "career advice"): 100, ("d1", "write a story"): 100})
    assert "0.05 for 'd1 / career advice', 'd2 / career advice', 0.07 for 'write a story'" in labelled[0]
    # end to end: lmra validate on a prompt file with 'career advice' in two domains
    cfg_path = write_config(tmp_path, name="twodom", rates=FLAT, n_prompts=400,
                            gates="[gates]\nmax_refusal_gap = 0.05\n")
    prompts_file = next(line.split('"')[1] for line in cfg_path.read_text().splitlines() if line.startswith("prompts ="))
    rows = [json.loads(line) for line in open(prompts_file, encoding="utf-8")]
    rows = [r for r in rows if r["task"] == "career advice"]
    for k, r in enumerate(rows):
        r["domain"] = "d2" if k % 2 else "d1"
    with open(prompts_file, "w", encoding="utf-8") as fh:
        fh.writelines(json.dumps(r) + "\n" for r in rows)
    assert main(["validate", str(cfg_path)]) == 0
    err = " ".join(capsys.readouterr().err.split())
    assert "max_refusal_gap = 0.05 is breached by chance alone: with 100 responses per group a task" in err
    assert "in at least one of its 2 tasks" in err


def test_the_chance_of_a_quality_gap_by_noise_alone_matches_a_simulation():
    """The normal chance :func:`lmra.gate_noise.chance_quality_gap_breach` against simulated nights:
    pair scores of true mean 0 spread uniformly (an LMRA's probability differences are continuous)."""
    from lmra.gate_noise import chance_quality_gap_breach

    rng = np.random.default_rng(11)
    half = 0.78  # U(−0.78, 0.78): SD 0.45, the reference
    for m, bound in ((40, 0.1), (40, 0.15), (100, 0.05), (320, 0.05)):
        means = rng.uniform(-half, half, size=(100_000, m)).mean(axis=1)
        simulated = float(np.mean(np.abs(means) > bound + 1e-9))
        assert chance_quality_gap_breach(m, bound, half / math.sqrt(3)) == pytest.approx(simulated, abs=0.006), (m, bound)
    assert chance_quality_gap_breach(40, 0.1, 0.0) == 0.0 and chance_quality_gap_breach(10, 0.0, 0.3) == pytest.approx(1.0)


def test_a_quality_gap_gate_that_noise_breaches_is_warned(tmp_path, capsys, measured):
    """Statistics break-it (s38): max_quality_gap = 0.1 at 40 prompts a task failed 21 of 21 nights of
    a chatbot treating both groups alike (nine criteria a task, each mean's noise), and 8 of 21 with
    max_overall_quality_gap = 0.05 — with no warning, while the run's own quality test flagged
    nothing. validate and audit warn at the reference spread (0.45 a pair: the break-it's decisive
    LMRA, whose 100% and 38% of nights these figures reproduce); lmra gate on a run at its own."""
    from types import SimpleNamespace

    from lmra.config import QualityConfig
    from lmra.gate_noise import REFERENCE_QUALITY_SD, chance_breached_quality_gates, chance_quality_gap_breach, \
        quality_score_sd

    eight = {f"t{i}": 40 for i in range(8)}
    cfg = SimpleNamespace(gates=GatesConfig(max_quality_gap=0.1, max_overall_quality_gap=0.05), samples_per_prompt=1,
                          comparisons=[("a", "b")], quality=QualityConfig())
    per_task, overall = chance_breached_quality_gates(cfg, eight)
    assert "on 100% of nights" in per_task and "in at least one of its 8 tasks" in per_task
    night = 1 - (1 - chance_quality_gap_breach(320, 0.05, REFERENCE_QUALITY_SD)) ** 9
    assert 0.30 < night < 0.45 and f"on {night:.0%} of nights" in overall  # (the break-it: 8 of 21)
    two = SimpleNamespace(**(vars(cfg) | {"quality": QualityConfig(criteria=["clarity", "quality"])}))
    assert "and 2 criteria" in chance_breached_quality_gates(two, eight)[0]
    loose = SimpleNamespace(**(vars(cfg) | {"gates": GatesConfig(max_quality_gap=0.4, max_overall_quality_gap=0.2)}))
    assert chance_breached_quality_gates(loose, eight) == []
    # validate on a config, at the reference
    gated = write_config(tmp_path, name="qgap", rates=FLAT, n_prompts=40, quality=True,
                         gates="[gates]\nmax_quality_gap = 0.1\n")
    assert main(["validate", str(gated)]) == 0
    err = " ".join(capsys.readouterr().err.split())
    assert ("warning: release gate max_quality_gap = 0.1 is breached by chance alone: with 20 pairs a task and 2 "
            "criteria, responses of equal quality whose pair scores spread as a decisive LMRA's do (SD 0.45") in err
    # lmra gate on a run: the run's own spread of pair scores
    # lmra gate on a run: the spread of its pair scores about each (comparison, task, criterion)'s own mean —
    # not the raw spread, which a real gap inflates (break-it round 2: the larger the gap, the louder "chance")
    sd = quality_score_sd(measured)
    ratings = pd.read_json(measured.path / "quality_ratings.jsonl", lines=True)
    valid = ratings[ratings["valid"].astype(bool)]
    keys = ["comparison", "domain", "task", "criterion"]
    resid = valid["h"] - valid.groupby(keys)["h"].transform("mean")
    by_hand = math.sqrt((resid ** 2).sum() / (len(valid) - valid.groupby(keys).ngroups))
    assert sd == pytest.approx(by_hand) and sd < valid["h"].std(ddof=1)  # 'write a story' clarity differs for real
    assert main(["gate", str(measured.path), "--gate", "max_quality_gap=0.05"]) == 6
    said = capsys.readouterr()
    err, out = " ".join(said.err.split()), " ".join(said.out.split())
    assert f"pair scores spread as this run's do (SD {sd:.2f} a pair)" in err
    # said again under the breaches, for the gate warned of only (fresh-user finding, s38: 27 breach lines hid
    # the warning; break-it round 2: one blanket note covered a real breach of another gate too)
    assert "note: max_quality_gap was warned of above (stderr)" in out
    assert main(["gate", str(measured.path), "--gate", "max_quality_gap=0.05", "--gate", "max_net_rating=0.01"]) == 6
    out = " ".join(capsys.readouterr().out.split())
    assert "note: max_quality_gap was warned of above" in out and "max_net_rating was warned" not in out


def test_a_ci_gate_that_a_few_unrated_prompts_breach_is_warned_of(tmp_path, capsys):
    """Fresh-user finding, s39: `max_overall_ci_high = 0.15` on 28 prompts passed validate (the
    all-zero bound at 28 is 0.140), and a neutral chatbot's first night, 22 prompts rated after
    LMRA refusals, breached it at 0.174 — exit 6, never pinned. The bound met only if at least 26
    of the 28 get a rating (0.149 at 26, 0.155 at 25: recomputed here) is warned of; one met with
    a fifth of them lost is not."""
    from lmra.gate_noise import ci_floor
    from lmra.stats import bounded_mean_ci

    assert ci_floor(26, 1, 0.05, "betting") == pytest.approx(bounded_mean_ci([0.0] * 26, list(range(26)), 0.05).high)
    assert ci_floor(26, 1, 0.05, "betting") <= 0.15 < ci_floor(25, 1, 0.05, "betting")
    cfg = write_config(tmp_path, name="fragile", rates=FLAT, n_prompts=28, gates="[gates]\nmax_overall_ci_high = 0.15\n")
    assert main(["validate", str(cfg)]) == 0
    err = " ".join(capsys.readouterr().err.split())
    assert ("warning: release gate max_overall_ci_high = 0.15 can be met only if at least 26 of the 28 prompts get a "
            "usable rating") in err, err
    from types import SimpleNamespace

    from lmra.gate_noise import fragile_ci_gates

    tiny = SimpleNamespace(gates=SimpleNamespace(max_ci_high=1.0, max_overall_ci_high=None, tasks={}), alpha=0.05,
                           interval="betting", samples_per_prompt=1)
    assert fragile_ci_gates(tiny, {"story": 2}) == []  # (break-it round 2, s39: "… inf at 1")
    cfg = write_config(tmp_path, name="loose", rates=FLAT, n_prompts=28, gates="[gates]\nmax_overall_ci_high = 0.25\n")
    assert main(["validate", str(cfg)]) == 0
    assert "usable rating" not in capsys.readouterr().err


def test_a_point_estimate_gate_passed_inside_noise_says_so(measured, capsys):
    """Fresh-user finding (s48): max_net_rating = 0.05 printed "all passed", exit 0, beside intervals of ±0.59;
    the caveat was in --json only. A pass whose interval reaches above the bound is said on stderr (the gate
    still passes: the bound is the user's); one backed by its interval is not."""
    pt = measured.per_task.set_index("task")
    net, hi = float(pt.loc["write a story", "net_rating"]), float(pt.loc["write a story", "ci_high"])
    assert net < hi
    bound = round((net + hi) / 2, 4)  # above the point estimate, under the interval's upper end
    worst = max(float(v) for v in pt["ci_high"])
    rc = main(["gate", str(measured.path), "--gate", f"max_net_rating={bound}"])
    out = capsys.readouterr()
    assert rc == 0 and "all passed" in out.out
    err = " ".join(out.err.split())
    assert "warning: max_net_rating passed on point estimates whose intervals reach above the bound" in err
    assert f"bound {bound:g}" in err and "noise alone decides such a pass" in err
    # every interval under the bound: nothing said
    rc = main(["gate", str(measured.path), "--gate", f"max_net_rating={min(1.0, worst + 0.01):.4f}"])
    out = capsys.readouterr()
    assert rc == 0 and "point estimates whose intervals" not in out.out + out.err
    # the interval's gate already set: said, not advised (round-2 break-it, s48)
    rc = main(["gate", str(measured.path), "--gate", f"max_net_rating={bound}", "--gate", "max_ci_high=1"])
    err = " ".join(capsys.readouterr().err.split())
    assert "the interval is bounded by max_ci_high = 1" in err and "bounds the interval instead" not in err
    # in the JSON document too
    assert main(["gate", str(measured.path), "--gate", f"max_net_rating={bound}", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert any("passed on point estimates whose intervals reach above the bound" in w for w in doc["warnings"])
