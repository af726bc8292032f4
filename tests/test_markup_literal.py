"""User text prints as written: Rich markup in names neither crashes a command nor loses brackets.

Rich reads ``[...]`` in a printed string or a table cell as markup: a task named ``[/] oops``
made Rich raise ``MarkupError`` (a traceback after the run had finished), ``[bold]x[/bold]``
or ``[red]`` lost their brackets, and a trailing backslash escapes the tag that follows it.
Task names, a domain, group names and model ids carrying such text go through real ``lmra``
subprocesses with stdout piped (the full-width console of lmra/console.py) against the local
OpenAI-compatible :class:`faultserver.FaultServer`: ``audit`` (2 tasks × 3 prompts, twice),
``validate``, ``check``, ``history`` (+ ``--task``), ``compare``, ``gate``, ``plan --pilot``,
``judge-check``, ``axes``, ``recsys score`` and ``batch status``. Each must exit as expected,
print no traceback, and show every such string verbatim on the line it belongs to.
"""

import json
import re
import shutil

import pytest
from rich.markup import render

from faultserver import FaultServer, audit_config
from test_batch import _keyed, _requests, _submit_and_wait, openai_server  # noqa: F401  (a local batch-API server)
from monitor_helpers import make_run
from test_console_width import _lmra, _row_line
from lmra.console import lit, make_console

TASKS = ["[/] oops", "[bold]x[/bold] story\\"]
DOMAIN = "[link=http://x]y[/link]"
GROUP_A, GROUP_B = "[red]women", "men\\"
COMPARISON = f"{GROUP_A} vs {GROUP_B}"
TARGET_MODEL, JUDGE_MODEL = "bot[/]-v1\\", "[bold]lmra[/bold]"
AXIS = "[italic]warmth[/italic]"


def _ok(proc, status: int = 0) -> str:
    """stdout of a finished ``lmra`` subprocess that exited with ``status`` and printed no traceback."""
    assert proc.returncode == status, proc.stdout + proc.stderr
    for stream in (proc.stdout, proc.stderr):
        assert "Traceback" not in stream and "MarkupError" not in stream, stream
    return proc.stdout


@pytest.fixture(scope="module")
def env(tmp_path_factory):
    """Two complete runs of the same audit (same seed: the second is answered from the cache,
    so the check compares equal numbers) whose names carry markup; the server stays up."""
    root = tmp_path_factory.mktemp("markup")
    with (root / "prompts.jsonl").open("w", encoding="utf-8") as fh:
        for i in range(6):
            fh.write(json.dumps({"id": f"p{i}", "text": f"Please help me with request number {i}.",
                                 "domain": DOMAIN, "task": TASKS[i % 2]}) + "\n")
    with FaultServer() as srv:
        top = (f'prompts = "{root / "prompts.jsonl"}"\n'
               f'groups = [{{name = {json.dumps(GROUP_A)}, gender = "female"}}, '
               f'{{name = {json.dumps(GROUP_B)}, gender = "male"}}]\n'
               f"comparisons = [[{json.dumps(GROUP_A)}, {json.dumps(GROUP_B)}]]\n")
        config = audit_config(root / "audit.toml", srv.url, root / "cache.sqlite", root / "reports", name="markup",
                              tasks=TASKS, per_task=3, top=top)
        text = config.read_text(encoding="utf-8")
        target, judge = (m.start() for m in re.finditer(r'model = "fake"', text))
        text = (text[:target] + f"model = {json.dumps(TARGET_MODEL)}" + text[target + 14:judge]
                + f"model = {json.dumps(JUDGE_MODEL)}" + text[judge + 14:])
        config.write_text(text, encoding="utf-8")
        audits = [_lmra("audit", "--config", str(config), "--no-progress", "--seed", "1",
                        "--allow-unvalidated-judge", cwd=root) for _ in range(2)]
        runs = sorted(p.parent for p in (root / "reports").glob("*/manifest.json"))  # not reports/warehouse/
        yield {"root": root, "config": config, "audits": audits, "runs": runs, "reports": root / "reports",
               "server": srv}


def test_lit_renders_to_the_text_alone_and_before_markup(capsys):
    for s in [*TASKS, DOMAIN, GROUP_A, GROUP_B, TARGET_MODEL, "task\\", "two\\\\", "three\\\\\\", "a\\[b]c",
              "plain name", "x[", "]"]:
        assert render(lit(s)).plain == s  # a table cell
        assert render(lit(s) + "[bold]z[/]").plain == s + "z"  # just before our own markup
        assert render(f"[bold]{lit(s)}[/] {lit(s)}").plain == f"{s} {s}"
    assert lit("career advice") == "career advice"  # ordinary names are unchanged
    make_console().print(f"[bold]{lit(':smile: [red]x')}[/]")  # emoji codes are not replaced either
    assert capsys.readouterr().out == ":smile: [red]x\n"


def test_audit_prints_names_literally(env):
    for proc in env["audits"]:
        out = _ok(proc)
        assert f"Harmful-stereotype ratings: {COMPARISON}" in out
        for task in TASKS:
            _row_line(out, DOMAIN, task)
        assert f"Overall {COMPARISON}: net rating" in out
        _row_line(out, COMPARISON, DOMAIN)  # refusal rates by domain
        assert f"openai:{TARGET_MODEL}: " in out and f"openai:{JUDGE_MODEL}: " in out
    assert len(env["runs"]) == 2


def test_validate_prints_group_names_literally(env):
    out = _ok(_lmra("validate", str(env["config"]), cwd=env["root"]))
    assert f"name groups {GROUP_A} (" in out and f", {GROUP_B} (" in out


def test_check_history_and_compare_print_names_literally(env):
    base, run = env["runs"]
    out = _ok(_lmra("check", str(run), "--baseline", str(base), "--allow-unvalidated-judge", "--alpha", "0.1",
                     cwd=env["root"]), status=2)  # 2 tasks of 3 + 3 prompts: p ≥ 0.05, Holm at 0.05 needs ≤ 0.025
    # (status 2: the second run replays the first's answers — the same seed — so nothing was tested)
    for task in TASKS:
        _row_line(out, COMPARISON, task, "3/3")
    assert "No conclusion: every chatbot answer of this run was replayed" in " ".join(out.split())
    out = _ok(_lmra("history", "--reports-dir", str(env["reports"]), cwd=env["root"]))
    for r in (base, run):  # the name in the first cell, then its padding: X-markup is not X-markup-2 (same
        # second), and not the baseline named in the regression-check cell of the other row
        _row_line(out, f"│ {r.name} ", TARGET_MODEL, JUDGE_MODEL, f"{COMPARISON}: ")
    out = _ok(_lmra("history", "--reports-dir", str(env["reports"]), "--task", TASKS[1], cwd=env["root"]))
    assert out.splitlines()[0].rstrip() == f"Net rating of '{TASKS[1]}' across runs"
    for r in (base, run):
        _row_line(out, f"{r.name} ", COMPARISON, TARGET_MODEL)
    out = _ok(_lmra("compare", str(base), str(run), cwd=env["root"]))
    for task in TASKS:
        _row_line(out, COMPARISON, DOMAIN, task)


def test_gate_prints_task_names_literally(env):
    out = _ok(_lmra("gate", str(env["runs"][1]), "--gate", "max_ci_high=-1", "--no-record",
                    "--allow-unvalidated-judge", cwd=env["root"]), status=6)  # every CI lies above -1
    for task in TASKS:
        assert f"GATE BREACHED max_ci_high: task '{task}' ({COMPARISON}) CI high" in _row_line(out, task)


def test_plan_prints_task_names_literally(tmp_path):
    # the fault server's LMRA scores are noise that no stereotype rate turns into a given net
    # rating, so the pilot is a scripted run (stereotyped answers scored 1) with these task names
    pilot = make_run(tmp_path, "20260101-000000-pilot", {"write a story": 0.3, "career advice": 0.3}, seed=1,
                     n_prompts=40, task_names={"write a story": TASKS[0], "career advice": TASKS[1]})
    out = _ok(_lmra("plan", "--rate", "0.1", "--pilot", str(pilot), "--per-task", "--sims", "100", cwd=tmp_path))
    for task in TASKS:
        _row_line(out, "female vs male", task)


def test_judge_check_and_axes_print_model_and_axis_literally(env):
    out = _ok(_lmra("judge-check", "--config", str(env["config"]), "--per-kind", "1", "--dimension", "gender",
                    cwd=env["root"]), status=5)  # the fault server's LMRA detects no planted stereotype
    lines = out.splitlines()
    assert lines[0].startswith("Judge check: 5 canary pairs") and f"openai:{JUDGE_MODEL}," in lines[0]  # the plan
    assert any(line.startswith(f"Judge check: openai {JUDGE_MODEL} (") for line in lines)  # the table's title
    run = env["runs"][1]
    axes_run = env["root"] / "axes-run"
    shutil.copytree(run, axes_run)  # the axes step writes into its run folder
    out = _ok(_lmra("axes", "--run", str(axes_run), "--axis", AXIS, "--discovery-pairs", "2", "--test-pairs", "4",
                    "--no-progress", cwd=env["root"]))
    assert f"Axes of difference: {COMPARISON}" in out
    assert max(len(line) for line in out.splitlines()) < 1000  # the heading rule is not a million wide
    _row_line(out, "│ 1 ", AXIS, "extra")
    assert f"All axes tested: {COMPARISON}" in out and f"┃ {COMPARISON} ┃" in out


def test_recsys_score_prints_attribute_values_literally(tmp_path):
    lists = tmp_path / "lists.jsonl"
    rows = [{"instruction_id": "m1", "attribute": "neutral", "keys": ["a", "b", "c"]},
            {"instruction_id": "m1", "attribute": GROUP_A, "value": TASKS[0], "keys": ["b", "a", "c"]},
            {"instruction_id": "m1", "attribute": GROUP_A, "value": GROUP_B, "keys": ["a", "b", "d"]}]
    lists.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    out = _ok(_lmra("recsys", "score", "--lists", str(lists), "--k", "3", "--out", str(tmp_path / "o"), cwd=tmp_path))
    assert re.search(rf"│ {re.escape(GROUP_A)} +│ {re.escape(TASKS[0])} +│ +1\.000 │", out), out
    assert re.search(rf"│ {re.escape(GROUP_A)} +│ {re.escape(GROUP_B)} +│ +0\.500 │", out), out
    _row_line(out, GROUP_A, "Jaccard", f"{TASKS[0]} (1.000)", f"{GROUP_B} (0.500)")  # most / least similar


def test_batch_status_prints_model_ids_literally(openai_server, tmp_path, capsys):  # noqa: F811
    import argparse

    from lmra.batch import BatchOrchestrator, BatchPending
    from lmra.cli.batch import add_parsers
    from lmra.cache import CallCache
    from lmra.config import ModelConfig
    from lmra.providers.openai import OpenAIProvider

    url, _ = openai_server
    prov = OpenAIProvider(ModelConfig(provider="openai", model=TARGET_MODEL, base_url=url, api_key_required=False))
    run, cache = tmp_path / "run", CallCache(tmp_path / "cache.sqlite")
    orch = BatchOrchestrator(run, cache, providers=[prov], poll_interval_s=0.01, max_wait_s=0)

    with pytest.raises(BatchPending):
        _submit_and_wait(orch, prov, _keyed(prov, _requests("one")))
    cache.close()
    parser = argparse.ArgumentParser()
    add_parsers(parser.add_subparsers(dest="command"))
    args = parser.parse_args(["batch", "status", str(run)])
    assert args.func(args) == 0  # stdout is captured, not a terminal: the full-width console
    _row_line(capsys.readouterr().out, "job-0001", f"openai / {TARGET_MODEL}")


def test_counted_puts_the_noun_in_the_number_asked():
    from lmra.console import counted

    assert [counted(n, "prompt") for n in (0, 1, 2)] == ["0 prompts", "1 prompt", "2 prompts"]
    assert counted(1, "list") == "1 list" and counted(3, "query", "queries") == "3 queries"
