"""Tables are never cut or wrapped when stdout is not a terminal (issue 13, item 4).

``lmra history``, ``check`` and ``compare`` run as real subprocesses with stdout piped (as cron
and CI run them) on run folders with long task names and long model ids; every cell must
appear whole, on the line of its row, and no ``…`` anywhere. On a terminal the tables still
fit the window (a pseudo-terminal of 100 columns)."""

import os
import pty
import re
import subprocess
import sys
from io import StringIO

import pytest
from rich.console import Console

from monitor_helpers import make_run
from lmra.compare import compare_runs
from lmra.monitor import check_run
from lmra.cli.monitor import _fmt, _p, print_check
from lmra.runfolder import load_run

STORY = ("write a long bedtime story about a dragon who learns to share its treasure with the children of the "
         "village")
CAREER = "career advice for switching from nursing to software engineering in a mid-sized european city"
TARGET = "my-assistant-prod-2026-11-30-finetuned-on-customer-support-transcripts-v17"
JUDGE = "gpt-4o-2024-08-06-lmra-deployment-eu-west-with-a-long-name"
NAMES = {"write a story": STORY, "career advice": CAREER}


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("width")
    kw = dict(n_prompts=60, task_names=NAMES, target_model=TARGET, judge_model=JUDGE)
    base = make_run(tmp, "20260101-000000-nightly", {"write a story": 0.1, "career advice": 0.1}, seed=1, **kw)
    rise = make_run(tmp, "20260102-000000-nightly", {"write a story": 0.6, "career advice": 0.1}, seed=2, **kw)
    return {"base": base, "rise": rise, "reports": tmp / "reports"}


def _lmra(*args: str, cwd) -> subprocess.CompletedProcess:
    """``lmra`` in a subprocess with stdout piped (not a terminal), as in a cron job whose
    environment says 80 columns."""
    env = {k: v for k, v in os.environ.items() if k not in ("FORCE_COLOR", "FORCE_TERMINAL", "TTY_COMPATIBLE")}
    env["COLUMNS"] = "80"
    return subprocess.run([sys.executable, "-m", "lmra.cli", *args], cwd=cwd, capture_output=True, text=True,
                          env=env, timeout=300)


def _row_line(out: str, *cells: str) -> str:
    """The one output line that holds all ``cells`` (each whole); fails if none does."""
    lines = [line for line in out.splitlines() if all(c in line for c in cells)]
    assert len(lines) == 1, f"no single line holds all of {cells!r}:\n{out}"
    return lines[0]


def test_history_cells_are_whole_on_one_line_off_a_terminal(runs):
    proc = _lmra("history", "--reports-dir", str(runs["reports"]), cwd=runs["reports"].parent)
    assert proc.returncode == 0, proc.stderr
    assert "…" not in proc.stdout
    for run in (runs["base"], runs["rise"]):
        overall = load_run(run).summary["overall"][0]
        _row_line(proc.stdout, run.name, TARGET, JUDGE, "not_checked",
                  f"female vs male: {_fmt(overall['net_rating'])} [{_fmt(overall['ci_low'])}, "
                  f"{_fmt(overall['ci_high'])}]")
    trend = _lmra("history", "--reports-dir", str(runs["reports"]), "--task", STORY, cwd=runs["reports"].parent)
    assert trend.returncode == 0, trend.stderr
    assert "…" not in trend.stdout
    assert trend.stdout.splitlines()[0].rstrip() == f"Net rating of '{STORY}' across runs"  # title on one line
    for run in (runs["base"], runs["rise"]):
        pt = load_run(run).per_task.set_index("task").loc[STORY]
        _row_line(trend.stdout, run.name, TARGET, f"{_fmt(pt['net_rating'])} [{_fmt(pt['ci_low'])}, "
                                                   f"{_fmt(pt['ci_high'])}]", _p(pt["p_value"]))


def test_check_rows_are_whole_on_one_line_off_a_terminal(runs, tmp_path):
    proc = _lmra("check", str(runs["rise"]), "--baseline", str(runs["base"]), cwd=tmp_path)
    assert proc.returncode == 3, proc.stderr
    assert "…" not in proc.stdout
    res = check_run(runs["rise"], runs["base"], record=False)
    assert set(res.tests["task"]) == {STORY, CAREER}
    for t in res.tests.itertuples():
        line = _row_line(proc.stdout, t.comparison, t.task, f"{t.n_run}/{t.n_base}", _fmt(t.h_run), _fmt(t.h_base),
                         _fmt(t.diff), _p(t.p_regress))
        assert ("REGRESSION" in line) == bool(t.regressed)
    assert res.regressions["task"].tolist() == [STORY]
    # the verdict line names the task whole as well
    assert f"Regression in 1 task(s): {STORY} (female vs male)" in proc.stdout


def test_compare_rows_are_whole_on_one_line_off_a_terminal(runs, tmp_path):
    proc = _lmra("compare", str(runs["base"]), str(runs["rise"]), cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert "…" not in proc.stdout
    cmp = compare_runs(load_run(runs["base"]), load_run(runs["rise"]))
    for r in cmp.pairs.itertuples():
        _row_line(proc.stdout, r.comparison, r.domain, r.task, _fmt(r.h_a), _fmt(r.h_b))
    for line in cmp.summary_lines():
        assert line in proc.stdout.splitlines()  # not hard-wrapped either


def test_rich_default_console_would_cut_the_same_table(runs):
    """What the subprocess tests guard against: Rich's console off a terminal (80 columns)
    folds the long task names of the same check table over several lines."""
    res = check_run(runs["rise"], runs["base"], record=False)
    buf = StringIO()
    print_check(Console(file=buf, width=80), res)
    assert STORY not in buf.getvalue()


def _pty_output(args: list[str], columns: int) -> str:
    """``lmra ARGS`` on a pseudo-terminal ``columns`` wide: its output without escape codes."""
    master, slave = pty.openpty()
    env = {k: v for k, v in os.environ.items() if k not in ("FORCE_COLOR", "FORCE_TERMINAL", "TTY_COMPATIBLE")}
    env.update(COLUMNS=str(columns), LINES="50", TERM="xterm")
    proc = subprocess.Popen([sys.executable, "-m", "lmra.cli", *args], stdout=slave, stderr=subprocess.PIPE,
                            stdin=subprocess.DEVNULL, env=env)
    os.close(slave)
    chunks = []
    while True:
        try:
            data = os.read(master, 65536)
        except OSError:  # EIO: the child closed the terminal
            break
        if not data:
            break
        chunks.append(data)
    os.close(master)
    assert proc.wait(timeout=300) == 0, proc.stderr.read()
    return re.sub(r"\x1b\[[0-9;?]*[A-Za-z]|\x1b\][^\x07]*\x07", "", b"".join(chunks).decode("utf-8"))


def test_tables_fit_the_window_on_a_terminal(runs):
    """On a terminal (a 100-column pseudo-terminal) Rich's own layout is kept: no line is wider
    than the window. (At 100 columns the history's compact table with its gates column does not fit:
    one block per run, since the gates are never the column left out — fresh-user finding, s42.)"""
    text = _pty_output(["history", "--reports-dir", str(runs["reports"])], 100)
    lines = [line.rstrip("\r") for line in text.split("\n") if line.strip()]
    assert any("┃ run" in line for line in lines) or any(f"{runs['rise'].name} — judge" in line for line in lines)
    assert any("gates" in line for line in lines)
    assert max(len(line) for line in lines) <= 100
    assert TARGET not in text  # the long model id had to be wrapped to fit


@pytest.mark.parametrize("columns", [120, 90])
def test_history_on_a_usual_terminal_keeps_every_column_and_each_net_rating_whole(runs, columns):
    """Fresh-user finding: in a 120-column terminal `lmra history` squeezed eleven columns, the net
    rating read "+0.00…" and the check wrapped over 15 lines. Below 160 columns the table leaves
    out the start time, the models and the pairs' split (said under it), so that every column it
    keeps is within the window (its right border drawn) and each rating and CI bound is whole."""
    text = _pty_output(["history", "--reports-dir", str(runs["reports"])], columns)
    lines = [line.rstrip("\r") for line in text.split("\n") if line.strip()]
    table = [line for line in lines if line[:1] in "┏┃┡│└"]
    flat = " ".join(text.split())
    if columns >= 120:  # the compact table fits: every column it keeps within the window, gates among them
        assert table and all(len(line) <= columns and line[-1] in "┓┃┩│┘" for line in table), "\n".join(table)
        assert "┃ gates" in text.replace("\n", "") or any("gates" in line for line in table)
        assert "…" not in "".join(line.split("│")[3] for line in table if line.startswith("│"))
        assert "left out below 160 columns; pairs for this terminal's width" in flat
    else:  # narrower (s36: the compact table cut "[-0.25…"): one block per run, its lines within the window
        assert not table and all(len(line) <= columns for line in lines), "\n".join(lines)
        assert f"{runs['rise'].name} — judge" in text and "gates: —" in text
    for run in (runs["base"], runs["rise"]):
        overall = load_run(run).summary["overall"][0]
        for value in (_fmt(overall["net_rating"]), f"[{_fmt(overall['ci_low'])},", f"{_fmt(overall['ci_high'])}]"):
            assert value in flat, value
    assert "…" not in text
    assert TARGET[:20] not in text


def test_history_on_a_wide_terminal_shows_every_column(runs):
    text = _pty_output(["history", "--reports-dir", str(runs["reports"])], 250)
    assert "started" in text and "left out below" not in text and "pin" in text
