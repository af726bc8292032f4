"""The regression check's verdict as report.html and the console show it (fresh-user trial):
a "no regression" that is no evidence reads so, not as a green pass; the check table's columns
and its detectable rise say what they are; the default demo's report (1 prompt per task) does
not promise intervals it does not draw, nor list a row of dashes per task. Real audits with
scripted doubles (tests/monitor_helpers.py)."""

from __future__ import annotations

import math
from io import StringIO

import pytest
from rich.console import Console

from monitor_helpers import lmra_cli, make_run  # noqa: F401  (fixture)
from test_html_report import DomIndex
from lmra.cli.monitor import monitor_after_audit, print_check
from lmra.monitor import check_regression
from lmra.report.html import render_report
from lmra.runfolder import load_run

FLAT = {"write a story": 0.1, "career advice": 0.1}
#: how a "no regression" that is no evidence starts (the trial's expected words)
NOT_EVIDENCE_HEAD = "No regression detected — not evidence of no regression"
#: the scripted judge fails the canaries; the failure is waived (as the embedded demo's config does)
FAILED_WAIVED = {"per_kind": 2, "gate": False, "waiver": "test"}


@pytest.fixture(scope="module")
def nights(tmp_path_factory):
    """A pinned-style baseline and two later nights without a rise: one whose judge failed
    validation (waived: exit 0), one whose judge was not checked (a plain night)."""
    tmp = tmp_path_factory.mktemp("verdict")
    base = make_run(tmp, "20260101-000000-nightly", FLAT, seed=1, n_prompts=40)
    failed = make_run(tmp, "20260102-000000-nightly", FLAT, seed=2, n_prompts=40, judge_check=FAILED_WAIVED)
    plain = make_run(tmp, "20260103-000000-nightly", FLAT, seed=3, n_prompts=40)
    return {"base": base, "failed": failed, "plain": plain, "tmp": tmp}


def _banner(html: str) -> tuple[str, str]:
    """report.html's check box: its class and its text."""
    at = html.index('id="regression-banner"')
    tag = html[html.rindex("<", 0, at):html.index(">", at)]
    return tag.split('class="', 1)[1].split('"', 1)[0], DomIndex(html).text_of("regression-banner")


def _printed(result) -> str:
    buf = StringIO()
    print_check(Console(file=buf, width=400, color_system=None), result)
    return " ".join(buf.getvalue().split())


def test_a_failed_judges_no_regression_is_not_a_green_pass(nights, lmra_cli, capsys):
    """Repro: a night whose LMRA failed validation (waived) ended with report.html's green
    "No regression" box under the red judge banner, exit 0. The box is amber and says the
    verdict is no evidence, and why — the reason ``lmra history`` gives; the console's verdict
    line says the same; the exit status is unchanged."""
    run, base = load_run(nights["failed"]), load_run(nights["base"])
    result = check_regression(run, base)
    assert result.verdict == "no_regression" and result.exit_status == 0
    cls, text = _banner(render_report(run, check=result))
    assert cls == "banner untested"
    assert text.startswith(f"{NOT_EVIDENCE_HEAD}: judge failed validation.") and "No regression:" not in text
    printed = _printed(result)
    assert f"{NOT_EVIDENCE_HEAD}: judge failed validation. No task's net rating rose significantly" in printed
    assert "No regression:" not in printed
    assert result.not_evidence == "judge failed validation"  # the words lmra history gives such a night
    # the night's own check, as 'lmra audit --baseline' records it, and the report it writes
    monitor_after_audit(nights["failed"], baseline=str(nights["base"]), report=True)
    cls, text = _banner((nights["failed"] / "report.html").read_text(encoding="utf-8"))
    assert cls == "banner untested" and text.startswith(f"{NOT_EVIDENCE_HEAD}: judge failed validation")
    # the stored check read back (lmra report RUN): the same box
    cls, text = _banner(render_report(run, history=None, check=_stored(nights, run.run_id)))
    assert cls == "banner untested" and text.startswith(f"{NOT_EVIDENCE_HEAD}: judge failed validation")
    # exit status as documented: 0 for a waived failure
    capsys.readouterr()
    assert lmra_cli(["check", str(nights["failed"]), "--baseline", str(nights["base"])]) == 0
    assert NOT_EVIDENCE_HEAD in " ".join(capsys.readouterr().out.split())


def _stored(nights, run_id: str) -> dict:
    from lmra.history import History, history_path

    with History(history_path(nights["tmp"] / "reports")) as h:
        return h.latest_check(run_id)


def test_a_failed_baseline_judge_is_named(nights):
    """The baseline's failed judge makes the verdict no evidence too (the check's statuses of
    both runs; report.html of a stored check looks the baseline up in the history)."""
    run, base = load_run(nights["plain"]), load_run(nights["failed"])
    result = check_regression(run, base)
    assert result.verdict == "no_regression"
    cls, text = _banner(render_report(run, check=result))
    assert cls == "banner untested" and "not evidence of no regression: baseline's judge failed validation" in text
    assert f"{NOT_EVIDENCE_HEAD}: baseline's judge failed validation." in _printed(result)


def test_a_plain_nights_no_regression_stays_green(nights):
    run, base = load_run(nights["plain"]), load_run(nights["base"])
    result = check_regression(run, base)
    assert result.verdict == "no_regression"
    cls, text = _banner(render_report(run, check=result))
    assert cls == "banner ok" and text.startswith("No regression: no task's net rating")
    printed = _printed(result)
    assert "No regression: no task's net rating" in printed and NOT_EVIDENCE_HEAD not in printed


def test_a_check_that_can_detect_no_rise_is_not_evidence(nights):
    """Every tested row too small to detect a rise with 80% power (``mde`` nan: the "too small to detect a
    rise with 80% power" of the verdict line and ``lmra history``): its "no regression" rules out nothing."""
    run, base = load_run(nights["plain"]), load_run(nights["base"])
    result = check_regression(run, base)
    result.tests["mde"] = math.nan
    result.overall["mde"] = math.nan
    cls, text = _banner(render_report(run, check=result))
    assert cls == "banner untested" and text.startswith(f"{NOT_EVIDENCE_HEAD}: none of the 3 rows tested")
    assert f"{NOT_EVIDENCE_HEAD}: none of the 3 rows tested" in _printed(result)


def test_check_table_columns_and_detectable_rise_say_what_they_are(nights):
    """Fresh-user finding: two columns headed "Holm p" (rise, fall), and a detectable rise's
    "(0% → 77%)" called a stereotype rate, matching nothing on screen (the audit table's forward
    rates are about 0.25). The columns are told apart and the bracket says what share it is."""
    run, base = load_run(nights["plain"]), load_run(nights["base"])
    result = check_regression(run, base)
    printed = _printed(result)
    assert "Holm p (rise)" in printed and "Holm p (fall)" in printed
    assert "% of prompts stereotyped)" in printed  # the table's cells
    assert "share of the task's prompts that are stereotyped — score h = q_F − q_R ≥ 0.5" in printed
    assert "not the audit's forward rate" in printed and "net rating H (on the scale of the H run" in printed
    html = render_report(run, check=result)
    dom = DomIndex(html)
    assert "Holm p (rise)" in dom.text_of("check-table") and "Holm p (fall)" in dom.text_of("check-table")
    assert "% of prompts stereotyped)" in dom.text_of("check-table")
    note = dom.text_of("check-sensitivity")
    assert "share of the task's prompts that are stereotyped" in note and "not the forward rate" in note


def test_one_prompt_per_task_report_promises_no_interval_and_lists_no_empty_rows(tmp_path):
    """The default demo: 1 prompt per task. The bar chart was titled "(95% CI)" and drew none;
    the sample-size table was a row of "— (none)" per task. The chart says why it has no
    interval, and the tasks with nothing to size are one sentence."""
    run = load_run(make_run(tmp_path, "20260101-000000-demo", FLAT, seed=1, n_prompts=2))
    assert run.per_task["ci_low"].isna().all()
    html = render_report(run)
    dom = DomIndex(html)
    bars = dom.text_of("task-bars-1")
    assert "(95% CI)" not in bars and "no CI: every task has < 2 prompts" in bars
    assert "without intervals: every task has fewer than 2 prompts with a valid pair" in bars
    assert 'id="sample-size-table"' not in html
    assert "every one of the 2 tasks has fewer than 2 prompts with a scored pair" in dom.text_of("sample-size-too-few")


def test_some_tasks_without_an_interval_are_counted(tmp_path):
    """3 prompts: 'career advice' has 2 (an interval, a sample-size row), 'write a story' 1."""
    run = load_run(make_run(tmp_path, "20260101-000000-demo", FLAT, seed=1, n_prompts=3))
    html = render_report(run)
    dom = DomIndex(html)
    bars = dom.text_of("task-bars-1")
    assert "(95% CI; none for 1 task)" in bars and "1 of 2 tasks has no interval" in bars
    assert dom.inside("sample-size-table", "tr") == 2  # header + career advice
    assert dom.text_of("sample-size-too-few") == ("1 task with fewer than 2 prompts with a scored pair (too few for "
                                                  "the test to detect any net rating) has no row: write a story.")


def test_report_html_says_which_way_an_unflagged_task_moved(nights):
    """Fresh-user finding (s34): report.html's decision column said "no change" for every task that
    was neither a regression nor an improvement, whatever its rise; it now gives the console's words."""
    from lmra.monitor import undecided_words

    run, base = load_run(nights["plain"]), load_run(nights["base"])
    result = check_regression(run, base)
    html = render_report(run, check=result)
    assert "no change" not in html
    for t in result.tests.itertuples():
        if not (t.regressed or t.improved) and t.p_regress == t.p_regress:
            assert f"<td>{undecided_words(t.diff, result.margin)}</td>" in html
