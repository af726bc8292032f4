"""A check by hand takes the nightly's margin and α when not given them (fresh-user finding, s36:
the nightly — ``lmra audit --baseline pinned --margin 0.01`` — passed a night, and the documented
morning check ``lmra check latest --baseline last``, at margin 0, said REGRESSION, exit 3)."""

from __future__ import annotations

from monitor_helpers import lmra_cli, make_run  # noqa: F401  (fixture)
from lmra.history import History
from lmra.monitor import check_regression, check_run
from lmra.runfolder import load_run


def _nightly(tmp_path, run_dir, base_dir, margin, alpha):
    """Record the check an ``lmra audit --baseline`` of ``run_dir`` would have (source audit)."""
    with History(tmp_path / "reports" / "history.sqlite") as h:
        run, base = load_run(run_dir), load_run(base_dir)
        h.register(run)
        h.register(base)
        h.record_check(check_regression(run, base, margin=margin, alpha=alpha, history=h), source="audit")


def test_a_check_by_hand_takes_the_nightlys_margin_and_says_so(tmp_path, lmra_cli, capsys):  # noqa: F811
    base = make_run(tmp_path, "20260101-000000-nightly", {"write a story": 0.1, "career advice": 0.1}, seed=1,
                    n_prompts=200)
    rise = make_run(tmp_path, "20260102-000000-nightly", {"write a story": 0.35, "career advice": 0.1}, seed=2,
                    n_prompts=200)
    hist = tmp_path / "reports" / "history.sqlite"
    # without a nightly check: margin 0 and α 0.05, and the rise is a regression
    plain = check_run(rise, base, history=hist, record=False)
    assert plain.margin == 0.0 and plain.alpha == 0.05 and len(plain.regressions) == 1
    assert not any("nightly check" in n for n in plain.notes)
    _nightly(tmp_path, rise, base, margin=0.5, alpha=0.01)  # the nightly ran with --margin 0.5 --alpha 0.01
    res = check_run(rise, base, history=hist, record=False)
    assert res.margin == 0.5 and res.alpha == 0.01 and res.regressions.empty  # as the nightly said
    (note,) = [n for n in res.notes if "nightly check" in n]
    # (fresh-user finding, s38: "margin and α as this run's nightly check … used them" was hard to parse)
    assert note == ("margin 0.5 and α 0.01 taken from this run's nightly check (lmra audit --baseline), so that this "
                    "check judges as the night did (--margin and --alpha to choose)")
    # what is given is used; the rest still comes from the nightly
    mixed = check_run(rise, base, history=hist, margin=0.0, record=False)
    assert mixed.margin == 0.0 and mixed.alpha == 0.01 and len(mixed.regressions) == 1
    assert ("α 0.01 taken from this run's nightly check (lmra audit --baseline), so that this check judges as the "
            "night did; margin 0 as given (--alpha to choose)") in mixed.notes
    # a later night of the name without a check of its own: the newest earlier nightly's settings
    later = make_run(tmp_path, "20260103-000000-nightly", {"write a story": 0.35, "career advice": 0.1}, seed=3,
                     n_prompts=200)
    res = check_run(later, base, history=hist, record=False)
    assert res.margin == 0.5 and any("run 20260102-000000-nightly's nightly check" in n for n in res.notes)
    # through the command: the note is printed, the exit status is the nightly's verdict
    capsys.readouterr()
    assert lmra_cli(["check", str(rise), "--baseline", str(base), "--history", str(hist)]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert "margin 0.5 and α 0.01 taken from this run's nightly check" in out
    assert lmra_cli(["check", str(rise), "--baseline", str(base), "--history", str(hist), "--margin", "0"]) == 3
    assert lmra_cli(["report", str(rise), "--baseline", str(base), "--history", str(hist),
                     "--out", str(tmp_path / "r.html")]) == 0


def test_a_regression_under_a_failed_judge_says_it_is_not_evidence(tmp_path, lmra_cli, capsys):  # noqa: F811
    """Fresh-user finding (s36): "No regression detected — not evidence …: judge failed validation"
    carried the caveat, "Regression in 1 task(s)" under the same failed judges did not."""
    jc = {"per_kind": 2}  # the scripted judge fails the canaries (as in test_html_report)
    base = make_run(tmp_path, "20260101-000000-nightly", {"write a story": 0.1, "career advice": 0.1}, seed=1,
                    n_prompts=200, judge_check=jc)
    rise = make_run(tmp_path, "20260102-000000-nightly", {"write a story": 0.6, "career advice": 0.1}, seed=2,
                    n_prompts=200, judge_check=jc)
    capsys.readouterr()
    status = lmra_cli(["check", str(rise), "--baseline", str(base), "--allow-unvalidated-judge"])
    out = " ".join(capsys.readouterr().out.split())
    assert status == 3 and "Regression in 1 task(s)" in out
    assert "Not evidence of a regression of the chatbot: judge failed validation; baseline's judge failed validation" \
        " — the rise may be the LMRA's doing, not the chatbot's" in out  # (no pair missing: s47, fresh user)
    assert "missing pairs" not in out
    # so do the final line and the JSON (fresh-user finding, s39: 'lmra check' on a partial run ended "exit
    # status 3: … regressed" alone, and --json said "regression" without a caveat)
    last = out.rsplit("exit status", 1)[1]
    assert last.startswith(" 3: 1 task regressed") and last.rstrip().endswith(
        "— not evidence of a regression of the chatbot: judge failed validation; baseline's judge failed validation")
    import json

    assert lmra_cli(["check", str(rise), "--baseline", str(base), "--allow-unvalidated-judge", "--json"]) == 3
    doc = json.loads(capsys.readouterr().out)
    assert doc["verdict"] == "regression" and doc["not_evidence"] == ("judge failed validation; baseline's judge "
                                                                       "failed validation")
    # the history's JSON says it alike of the stored check (break-it round 2, s39: null there)
    assert lmra_cli(["history", "--reports-dir", str(rise.parent), "--json"]) == 0
    (stored,) = [r["check"] for r in json.loads(capsys.readouterr().out)["runs"] if r["run_id"] == rise.name]
    assert stored["verdict"] == "regression" and stored["not_evidence"] == doc["not_evidence"]
    from html import unescape

    from lmra.monitor import check_regression
    from lmra.report.html import render_report
    from lmra.runfolder import load_run

    page = " ".join(unescape(render_report(load_run(rise), check=check_regression(load_run(rise), load_run(base))))
                    .split())  # report.html's banner says it too (break-it finding, s36)
    assert "Regression: " in page and ("Not evidence of a regression of the chatbot: judge failed validation; "
                                       "baseline's judge failed validation") in page


def test_a_new_system_prompt_of_the_chatbot_is_said_by_the_check(tmp_path, lmra_cli, capsys):  # noqa: F811
    """Fresh-user finding (s36): a gender-role system prompt added to [target] between two nights was
    never mentioned; served-model and design changes are. It is said as a note (a change of the
    chatbot, not a reason to refuse the check)."""
    from types import SimpleNamespace

    from conftest import rerecord_files
    from lmra.comparable import system_prompt_note

    def folder(prompt):
        return SimpleNamespace(config={"target": {} if prompt is None else {"system_prompt": prompt}})

    assert system_prompt_note(folder("Be kind."), folder("Be kind.")) is None
    assert system_prompt_note(folder(None), folder(None)) is None
    note = system_prompt_note(folder(None), folder("Follow traditional gender roles."))
    assert note.startswith("the chatbot's system prompt ([target] system_prompt) changed since the baseline (none → sha256")
    assert "32 characters" in note
    base = make_run(tmp_path, "20260101-000000-nightly", {"write a story": 0.1, "career advice": 0.1}, seed=1,
                    n_prompts=40)
    run = make_run(tmp_path, "20260102-000000-nightly", {"write a story": 0.1, "career advice": 0.1}, seed=2,
                   n_prompts=40)
    text = (run / "config.toml").read_text()
    (run / "config.toml").write_text(text.replace("[target]\n", '[target]\nsystem_prompt = "Follow traditional gender roles."\n', 1))
    rerecord_files(run)
    capsys.readouterr()
    lmra_cli(["check", str(run), "--baseline", str(base), "--history", str(tmp_path / "h.sqlite")])
    out = " ".join(capsys.readouterr().out.split())
    assert "the chatbot's system prompt ([target] system_prompt) changed since the baseline" in out


def test_the_verdict_comes_first_then_the_table(tmp_path, lmra_cli, capsys):  # noqa: F811
    """Fresh-user finding (s36): the check's answer came after about 25 lines of table and legends.
    Its verdict is now the first line (the same verdict as the exit status), the why under the table."""
    base = make_run(tmp_path, "20260101-000000-nightly", {"write a story": 0.1, "career advice": 0.1}, seed=1,
                    n_prompts=200)
    rise = make_run(tmp_path, "20260102-000000-nightly", {"write a story": 0.4, "career advice": 0.1}, seed=2,
                    n_prompts=200)
    hist = str(tmp_path / "h.sqlite")
    capsys.readouterr()
    assert lmra_cli(["check", str(rise), "--baseline", str(base), "--history", hist]) == 3
    first = capsys.readouterr().out.splitlines()[0]
    assert first.startswith(f"Verdict against baseline {base.name}: REGRESSION — ") and "rose significantly" in first
    assert lmra_cli(["check", str(base), "--baseline", str(rise), "--history", hist]) == 0
    first = capsys.readouterr().out.splitlines()[0]
    assert first.startswith(f"Verdict against baseline {rise.name}: no regression")
    # what it rules out, on the same line (fresh-user finding, s39: +0.22 read "no regression" there, the
    # detectable rise of +0.32 pages below): the overall row's, as the check's table has it
    import re

    m = re.search(r"\(rises under \+(0\.\d\d) overall, \+(\d\.\d\d) in a single task, undetectable\)", first)
    assert m, first  # (both: fresh-user finding, s40 — the overall figure alone read as the night's sensitivity)
    from lmra.monitor import check_regression
    from lmra.runfolder import load_run

    check = check_regression(load_run(base), load_run(rise))
    assert float(m.group(1)) == round(float(check.overall["mde"].min()), 2)
    tested = check.tests[check.tests["p_regress"].notna()]
    assert float(m.group(2)) == round(float(tested["mde"].min()), 2)
