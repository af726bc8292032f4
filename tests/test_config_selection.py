"""A config whose ``domains`` and ``tasks`` leave no prompt of the file is refused by
``lmra validate`` and by ``lmra audit`` before anything is written."""

from __future__ import annotations

import json

import pytest

from lmra.cli import main


@pytest.mark.parametrize("command", ["validate", "audit"])
def test_domains_and_tasks_that_leave_no_prompt_are_refused_before_anything_is_written(tmp_path, capsys, command):
    """Break-it finding: `lmra validate` said "valid … 0 pairs" and `lmra audit` refused the
    config only after creating its cache and a run folder."""
    from monitor_helpers import task_of
    from test_gates import FLAT, write_config

    cfg = write_config(tmp_path, rates=FLAT, n_prompts=6, top=f'domains = ["e"]\ntasks = ["{task_of(0)}"]')
    (prompts,) = (tmp_path / "inputs").glob("prompts-*.jsonl")
    rows = [json.loads(line) for line in prompts.read_text().splitlines()]
    prompts.write_text("".join(json.dumps(r | {"domain": "e" if r["task"] != task_of(0) else "d"}) + "\n"
                               for r in rows))  # task_of(0) only in domain d
    argv = ["validate", str(cfg)] if command == "validate" else ["audit", "--config", str(cfg), "--no-progress"]
    assert main(argv) == 2
    err = " ".join(capsys.readouterr().err.split())
    assert "field 'tasks': no prompt is left after the domains/tasks filters" in err and "Traceback" not in err
    assert not (tmp_path / "reports").exists() and not list(tmp_path.glob("cache*"))
