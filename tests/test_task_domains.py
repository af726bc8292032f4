"""One task name in two domains is two tasks (per_task.csv keys on domain and task): the
regression table of ``lmra check`` names them ``domain / task`` and ``lmra history --task``
adds a domain column, so that no two rows read alike. Real ``lmra audit`` runs on the scripted
providers of tests/test_gates.py."""

from __future__ import annotations

import json

from lmra.cli import main
from test_gates import audit, write_config


def _two_domains(cfg) -> None:
    """Move every other 'career advice' prompt of the config's prompt file to domain 'd2'."""
    prompts = next(line.split('"')[1] for line in cfg.read_text().splitlines() if line.startswith("prompts ="))
    rows = [json.loads(line) for line in open(prompts, encoding="utf-8")]
    for k, r in enumerate(x for x in rows if x["task"] == "career advice"):
        if k % 2:
            r["domain"] = "d2"
    with open(prompts, "w", encoding="utf-8") as fh:
        fh.writelines(json.dumps(r) + "\n" for r in rows)


def test_a_task_in_two_domains_is_named_with_its_domain(tmp_path, capsys):
    runs = []
    for seed in (1, 2):
        cfg = write_config(tmp_path, name="twodom", seed=seed, n_prompts=32)
        _two_domains(cfg)
        rc, out, run = audit(capsys, cfg)
        assert rc == 0, out
        runs.append(run)
    rc = main(["check", str(runs[1]), "--baseline", str(runs[0]), "--allow-unvalidated-judge"])
    out = capsys.readouterr().out
    assert rc == 0, out
    rows = [line for line in out.splitlines() if "career advice" in line and "female vs male" in line]
    assert len(rows) == 2 and any("d / career advice" in r for r in rows) and any("d2 / career" in r for r in rows)
    assert any("write a story" in line and "/ write a story" not in line for line in out.splitlines())
    rc = main(["history", "--reports-dir", str(tmp_path / "reports"), "--task", "career advice", "--name", "twodom"])
    out = capsys.readouterr().out
    assert rc == 0 and "domain" in out.splitlines()[2]
    assert sum(" d2 " in line for line in out.splitlines()) == 2 and sum(" d " in line for line in out.splitlines()) == 2
    # gate lines: one per task, each named with its domain
    rc = main(["gate", str(runs[1]), "--gate", "max_ci_high=-1"])
    out = capsys.readouterr().out
    assert rc == 6
    assert sum("task 'd / career advice'" in line for line in out.splitlines()) == 1
    assert sum("task 'd2 / career advice'" in line for line in out.splitlines()) == 1
    assert "task 'write a story'" in out  # one domain only: its name alone


def test_the_exit_line_names_a_regressed_task_with_its_domain():
    """The check's final line (exit status 3) names the regressed task as the table does."""
    import pandas as pd

    from lmra.cli.monitor import check_exit_reasons

    class Result:
        baseline_id, n_tested = "b", 3
        tests = pd.DataFrame({"comparison": ["f vs m"] * 3, "domain": ["d", "d2", "d"],
                              "task": ["advice", "advice", "story"], "regressed": [True, False, True]})
        regressions = tests[tests["regressed"]]

    assert check_exit_reasons(Result) == {3: "2 tasks regressed against baseline b (d / advice, story)"}


def test_the_console_shows_each_domains_net_rating(tmp_path, capsys):
    """Statistics break-it (s42): per-domain net ratings were computed (per_domain.csv, summary.json)
    but shown on no surface; methodology §1 reports every metric per task and per domain. The console
    gives each comparison's domains on one line, the numbers of per_domain.csv."""
    import pandas as pd

    cfg = write_config(tmp_path, name="twodom", seed=1, n_prompts=32)
    _two_domains(cfg)
    rc, out, run = audit(capsys, cfg)
    assert rc == 0, out
    flat = " ".join(out.split())
    pdm = pd.read_csv(run / "per_domain.csv")
    assert len(pdm) == 2
    line = next(x for x in out.splitlines() if x.startswith("Per domain (female vs male"))
    for r in pdm.itertuples():
        assert f"{r.domain} {r.net_rating:+.4f} [{r.ci_low:+.4f}, {r.ci_high:+.4f}] ({r.n_pairs} pairs)" in flat, line
    # one domain: no line (the Overall line says it)
    cfg1 = write_config(tmp_path / "one", name="onedom", seed=1, n_prompts=16)
    rc, out, _ = audit(capsys, cfg1)
    assert rc == 0 and "Per domain" not in out


def test_a_task_name_in_two_domains_under_a_per_task_limit_is_warned(tmp_path, capsys):
    """Bad-input break-it (s43): prompts_per_task limits a task name's prompts over all its domains
    while the tables split them by domain — 3 prompts of 'write a story' became rows of 1 and 2,
    shared out anew by each seed, unsaid. Said once, naming the task and its domains; not said
    without a per-task limit."""
    from lmra.audit.inputs import shared_task_names
    from lmra.data import PromptRecord

    prompts = [PromptRecord(id=f"p{i}", text="x", domain=d, task=t) for i, (d, t) in enumerate(
        [("art", "write a story"), ("zzz", "write a story"), ("art", "write a poem"), ("zzz", "write a story"),
         (None, "write a poem"), ("health", "diet tips")])]
    assert shared_task_names(prompts) == {"write a story": ["art", "zzz"]}

    cfg = write_config(tmp_path, name="twodom", seed=1, n_prompts=32)
    _two_domains(cfg)
    _, out, _ = audit(capsys, cfg)
    assert "more than one domain" not in out  # prompts_per_task = 0: every prompt, nothing shared out
    cfg.write_text(cfg.read_text().replace("prompts_per_task = 0", "prompts_per_task = 6"))
    rc, out, _ = audit(capsys, cfg)
    text = " ".join(out.split())
    assert rc == 0 and text.count("task name(s) of the prompt file are in more than one domain") == 1
    assert "1 task name(s) of the prompt file are in more than one domain ('career advice' in 'd', 'd2')" in text
    assert "while prompts_per_task = 6 limits the name's prompts over all its domains" in text
