"""The per-task table and the regression check's table in a narrow terminal (fresh-user finding,
s35: at 80–100 columns Rich cut the net ratings and intervals to "-0.…" and "[-0.45…", the check's
"H run" to "+0.4…"). Their numbers are never cut: secondary columns are left out, said below the
table, and task names fold. A log (not a terminal) keeps every column at full width."""

from __future__ import annotations

import re

import pandas as pd
import pytest
from rich.console import Console

from lmra.report import console as report_console

ROW = {"group_a": "female", "group_b": "male", "domain": "employment", "task": "draft a professional email to my manager",
       "n_pairs": 40, "n_invalid": 3, "n_refusal": 1, "n_unlabelled": 0, "n_failed": 2, "forward_rate": 0.1234,
       "reverse_rate": 0.0567, "net_rating": 0.0667, "ci_low": -0.4512, "ci_high": 0.4541}


def _render(width: int, terminal: bool = True) -> str:
    console = Console(width=width, force_terminal=terminal, color_system=None, record=True)
    pt = pd.DataFrame([ROW, ROW | {"task": "write a story", "net_rating": 0.25, "ci_low": 0.1, "ci_high": 0.4}])
    report_console._stereotype(console, pt, pt.iloc[0:0], "95")
    return console.export_text()


@pytest.mark.parametrize("width", [60, 80, 100])
def test_the_per_task_table_keeps_its_numbers_whole_in_a_narrow_terminal(width):
    text = _render(width)
    assert "+0.0667 [-0.4512, +0.4541]" in text and "+0.2500 [+0.1000, +0.4000]" in text
    assert "…" not in text
    assert all(len(line) <= width for line in text.splitlines())
    assert "Left out for this terminal's width: domain, invalid, refusal, unlabelled, failed" in " ".join(text.split())
    if width >= 80:  # the rates stay while they fit
        assert "0.1234" in text and "0.0567" in text
    else:
        assert "forward" in " ".join(text.split()).split("Left out")[1]


def test_a_wide_terminal_and_a_log_show_every_column():
    from lmra.console import LOG_WIDTH

    for text in (_render(200), _render(LOG_WIDTH, terminal=False)):  # (a log's console: lmra.console.make_console)
        header = next(line for line in text.splitlines() if "unlabelled" in line)
        assert re.search(r"domain.*task.*pairs.*invalid.*refusal.*unlabelled.*failed.*forward.*reverse.*net rating", header)
        assert "Left out" not in text and "draft a professional email to my manager" in text


def test_the_check_table_keeps_its_numbers_and_decisions_in_80_columns():
    from lmra.cli.monitor import print_check
    from lmra.monitor import CheckResult

    tests = pd.DataFrame([{"comparison": "female vs male", "domain": "d", "task": t, "n_run": 40, "n_base": 40,
                           "h_run": h, "h_base": 0.0, "diff": h, "t_regress": 3.0, "df_regress": 70.0,
                           "p_regress": 0.001, "p_regress_holm": 0.0123, "regressed": True, "p_improve": 1.0,
                           "p_improve_holm": 1.0, "improved": False, "note": "", "mde": 0.2068, "base_rate": 0.0,
                           "mde_rate": 0.25, "mde_lower_bound": False}
                          for t, h in (("draft a professional email", 0.4321), ("write a story", 0.1686))])
    console = Console(width=80, force_terminal=True, color_system=None, record=True)
    print_check(console, CheckResult("20260102-000000-n", "20260101-000000-n", 0.0, 0.05, tests))
    text = console.export_text()
    table = text.split("Left out")[0]
    assert "+0.4321" in table and "+0.1686" in table and "0.0123" in table and "REGRESSION" in table
    assert "…" not in table and all(len(line) <= 80 for line in text.splitlines())
    assert "Left out for this terminal's width: p rise, p fall" in " ".join(text.split())
    # no legend for the detectable-rise column when it is left out (fresh-user finding, s36)
    flat = " ".join(text.split())
    assert ("detectable rise (80%)" in flat.split("Left out")[1]) != ("Detectable rise: the smallest rise" in flat)
    wide = Console(width=250, force_terminal=True, color_system=None, record=True)
    print_check(wide, CheckResult("20260102-000000-n", "20260101-000000-n", 0.0, 0.05, tests))
    assert "Detectable rise: the smallest rise" in " ".join(wide.export_text().split())


def test_a_terminal_too_narrow_for_any_layout_gets_whole_lines_it_wraps():
    """Break-it finding (s35): at 30 columns the check's task column shrank to nothing and its decisions were
    cut. When no column is left to drop, the table keeps its smallest width and its lines are printed whole
    (the terminal wraps them)."""
    from lmra.cli.monitor import print_check
    from lmra.monitor import CheckResult

    tests = pd.DataFrame([{"comparison": "female vs male", "domain": "d", "task": "draft a professional email",
                           "n_run": 40, "n_base": 40, "h_run": 0.4321, "h_base": 0.0, "diff": 0.4321, "t_regress": 3.0,
                           "df_regress": 70.0, "p_regress": 0.001, "p_regress_holm": 0.0123, "regressed": True,
                           "p_improve": 1.0, "p_improve_holm": 1.0, "improved": False, "note": "", "mde": 0.2068,
                           "base_rate": 0.0, "mde_rate": 0.25, "mde_lower_bound": False}])
    console = Console(width=30, force_terminal=True, color_system=None, record=True)
    print_check(console, CheckResult("20260102-000000-n", "20260101-000000-n", 0.0, 0.05, tests))
    table = console.export_text().split("Left out")[0]
    assert "+0.4321" in table and "0.0123" in table and "REGRESSION" in table and "draft a" in table
    assert "…" not in table
    assert _render(30).count("+0.0667 [-0.4512, +0.4541]") == 1  # the per-task table likewise


@pytest.mark.parametrize("width", [80, 100, 110, 120])
def test_lmra_history_keeps_every_rating_whole_in_a_narrow_terminal(width, tmp_path, monkeypatch):
    """Fresh-user finding (s36): at 80 columns ``lmra history`` cut the net rating's interval to
    "[-0.25…", the judge status to "(waive…" and broke "regressi / on", though the docs said the
    ratings stay whole down to about 80 columns. Every rating and interval is now whole at any
    width, in the compact table while it fits, else one block per run; nothing is cut ("…")."""
    from monitor_helpers import make_run
    from lmra.cli import main, monitor as cli_monitor
    from lmra.history import History
    from lmra.monitor import check_regression
    from lmra.runfolder import load_run

    base = make_run(tmp_path, "20260101-000000-nightly-local", {"write a story": 0.1, "career advice": 0.1}, seed=1,
                    n_prompts=40)
    run = make_run(tmp_path, "20260102-000000-nightly-local", {"write a story": 0.3, "career advice": 0.1}, seed=2,
                   n_prompts=40)
    hist = tmp_path / "reports" / "history.sqlite"
    with History(hist) as h:
        r, b = load_run(run), load_run(base)
        h.register(r)
        h.register(b)
        h.record_check(check_regression(r, b, history=h), source="audit")
        overall = h.overall_trend()
    consoles = []

    def console_of_width(*_, **__):
        consoles.append(Console(width=width, force_terminal=True, color_system=None, record=True))
        return consoles[-1]

    monkeypatch.setattr(cli_monitor, "make_console", console_of_width)
    assert main(["history", "--history", str(hist)]) == 0
    text = consoles[-1].export_text()
    assert "…" not in text and all(len(line) <= width for line in text.splitlines())
    flat = " ".join(text.split())
    for o in overall.itertuples():
        assert f"{o.net_rating:+.4f} [{o.ci_low:+.4f}, {o.ci_high:+.4f}]" in flat
    for run_id in (base.name, run.name):
        assert run_id in text  # whole, on one line
    assert "regressi " not in text
    # the gates are never the column left out (s42: dropped at 110 columns): shown in the table or a block
    assert "gates" in text.split("Start times")[0] and "gates for this terminal" not in flat
