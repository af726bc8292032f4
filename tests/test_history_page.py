"""The history page (``lmra report --history``; lmra/report/history_html.py), rendered in headless
Chromium (Debian package ``chromium``) like the run report; the browser tests are skipped only
when ``/usr/bin/chromium`` is absent.

Four real nightly runs (scripted target and judge, tests/monitor_helpers.py) with known, different
net ratings and judge statuses; one regression check recorded (``lmra report RUN --baseline``),
one gate evaluation recorded (``lmra gate``), the first night pinned.
"""

import json
import math
import re
import shutil
import subprocess
from pathlib import Path

import pandas as pd
import pytest

from conftest import rerecord_files
import monitor_helpers
from monitor_helpers import lmra_cli, make_run  # noqa: F401  (fixture)
from test_html_report import CHROMIUM, FLAGS, DomIndex
from lmra.history import History

#: (run id, rate of stereotyped answers in 'write a story', judge_check settings, judge status it gives)
NIGHTS = [
    ("20260101-000000-nightly", 0.1, {"enabled": False}, "not_checked"),
    ("20260102-000000-nightly", 0.1, {"per_kind": 2}, "failed"),  # the scripted judge fails the canaries
    ("20260103-000000-nightly", 0.7, {"per_kind": 2, "gate": False, "waiver": "test"}, "failed (waived)"),
    ("20260104-000000-nightly", 0.3, {"enabled": False}, "not_checked"),
]


def dump_dom(path: Path, profile: Path) -> str:
    proc = subprocess.run([CHROMIUM, *FLAGS, f"--user-data-dir={profile}", "--dump-dom", path.resolve().as_uri()],
                          capture_output=True, text=True, timeout=180)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return proc.stdout


def needs_chromium():
    if not Path(CHROMIUM).exists():
        pytest.skip("Debian package 'chromium' is not installed (apt-get install -y chromium)")


def classes(attrs: dict) -> set[str]:
    return set((attrs.get("class") or "").split())


@pytest.fixture(scope="module")
def nights(tmp_path_factory):
    """Four nights in one reports folder; the page written by the CLI to its default place."""
    from lmra.cli import main

    tmp = tmp_path_factory.mktemp("history_page")
    runs = [make_run(tmp, rid, {"write a story": rate, "career advice": 0.1}, seed=k + 1, n_prompts=60,
                     judge_check=jc) for k, (rid, rate, jc, _) in enumerate(NIGHTS)]
    reports = tmp / "reports"
    assert main(["pin", str(runs[0])]) == 0
    # the third night checked against the first: 'write a story' rose from 0.1 to 0.7
    assert main(["report", str(runs[2]), "--baseline", str(runs[0])]) == 3
    # the fourth night's release gates: a net rating above 0.05 in any task breaches
    assert main(["gate", str(runs[3]), "--gate", "max_net_rating=0.05", "--record"]) == 6
    assert main(["report", "--history", "--reports-dir", str(reports)]) == 0
    return {"runs": runs, "reports": reports, "page": reports / "history.html", "tmp": tmp}


def test_page_is_written_by_default_next_to_the_history_and_self_contained(nights):
    html = nights["page"].read_text(encoding="utf-8")
    assert re.search(r"\ssrc\s*=", html) is None  # no image, script or frame loaded from anywhere
    assert "<link" not in html and "@import" not in html and "url(" not in html
    assert "http://" not in html and "https://" not in html
    hrefs = re.findall(r'href="([^"]*)"', html)
    # the only links: the nights' own report.html, relative, and present
    assert hrefs == ["20260103-000000-nightly/report.html"]
    assert (nights["page"].parent / hrefs[0]).is_file()


def test_history_page_in_chromium(nights, tmp_path):
    needs_chromium()
    dom = DomIndex(dump_dom(nights["page"], tmp_path / "profile"))
    run_ids = [r.name for r in nights["runs"]]
    with History(nights["reports"] / "history.sqlite") as h:
        metrics = h.metrics(name="nightly")
        overall = h.overall_trend(name="nightly")
        stored = h.runs(name="nightly").set_index("run_id")
        check = h.latest_check(run_ids[2])
    cards = {a["id"]: a for t, a, _ in dom.elements if t == "figure" and "task-card" in classes(a)}
    assert sorted(a["data-task"] for a in cards.values()) == ["career advice", "write a story"]
    for card_id, card in cards.items():
        points = [a for t, a, anc in dom.elements if t == "circle" and "pt" in classes(a) and card_id in anc]
        # one point per night, oldest first, with the history's numbers
        assert [p["data-run"] for p in points] == run_ids
        m = metrics[metrics["task"] == card["data-task"]].set_index("run_id")
        for p in points:
            row = m.loc[p["data-run"]]
            assert float(p["data-net"]) == pytest.approx(row["net_rating"], abs=1e-12)
            assert float(p["data-ci-low"]) == pytest.approx(row["ci_low"], abs=1e-12)
            assert float(p["data-ci-high"]) == pytest.approx(row["ci_high"], abs=1e-12)
        # nights whose judge failed validation (waived or not) are hollow: not evidence
        assert {p["data-run"] for p in points if "hollow" in classes(p)} == {run_ids[1], run_ids[2]}
    # the numbers differ from night to night as the runs were made to
    story = metrics[metrics["task"] == "write a story"].set_index("run_id")["net_rating"]
    assert story[run_ids[2]] > story[run_ids[0]] + 0.3

    # the overall trend: one point per night, equal to the history's overall net rating
    opts = [a for t, a, anc in dom.elements if t == "circle" and "pt" in classes(a) and "overall-1" in anc]
    assert [p["data-run"] for p in opts] == run_ids
    for p in opts:
        assert float(p["data-net"]) == pytest.approx(
            overall.set_index("run_id").loc[p["data-run"], "net_rating"], abs=1e-12)

    # regression marks: exactly the (task, night) pairs the recorded check flagged
    flagged = {(r["task"], run_ids[2]) for r in check["result"].to_dict(orient="records") if r["regressed"]}
    assert ("write a story", run_ids[2]) in flagged
    marked = {(cards[next(i for i in anc if i in cards)]["data-task"], a["data-run"])
              for t, a, anc in dom.elements if "mark-regression" in classes(a) and any(i in cards for i in anc)}
    assert marked == flagged
    # gate marks: exactly the task values gates.json lists as breached
    gates = json.loads((nights["runs"][3] / "gates.json").read_text())
    breached = {(b["task"], run_ids[3]) for b in gates["breaches"] if b["task"]}
    assert breached
    gate_marks = {(cards[next(i for i in anc if i in cards)]["data-task"], a["data-run"])
                  for t, a, anc in dom.elements if "mark-gate" in classes(a) and any(i in cards for i in anc)}
    assert gate_marks == breached

    # the nights table: newest first, judge status per night as registered, the pin, the check
    rows = [a["data-run"] for t, a, _ in dom.elements if t == "tr" and a.get("id", "").startswith("night-")]
    assert rows == run_ids[::-1]
    for rid, (_, _, _, status) in zip(run_ids, NIGHTS):
        cell = [a for t, a, anc in dom.elements if t == "td" and "judge" in classes(a) and f"night-{rid}" in anc]
        assert len(cell) == 1 and cell[0]["data-status"] == status == stored.loc[rid, "judge_status"]
        assert status in dom.text_of(f"night-{rid}")
    assert "pinned baseline" in dom.text_of(f"night-{run_ids[0]}")
    assert "pinned baseline" not in dom.text_of(f"night-{run_ids[3]}")
    assert "REGRESSION" in dom.text_of(f"night-{run_ids[2]}") and "write a story" in dom.text_of(f"night-{run_ids[2]}")
    assert "not checked" in dom.text_of(f"night-{run_ids[1]}")
    assert "NOT MET" in dom.text_of(f"night-{run_ids[3]}") and "GATE BREACHED max_net_rating" in dom.text_of(
        f"night-{run_ids[3]}")
    # the judge-status strip: one cell per night with its status
    strip = {a["data-run"]: a["data-status"] for t, a, _ in dom.elements if "judge-cell" in classes(a)}
    assert strip == {rid: status for rid, (_, _, _, status) in zip(run_ids, NIGHTS)}
    # the newest night's banner names the breached gate; the inline script ran (controls shown)
    assert "GATE BREACHED max_net_rating" in dom.text_of("latest-night")
    controls = next(a for t, a, _ in dom.elements if a.get("id") == "task-controls")
    assert "hidden" not in controls


def test_history_page_options_and_errors(nights, lmra_cli, capsys, tmp_path):
    reports = str(nights["reports"])
    out = tmp_path / "two.html"
    assert lmra_cli(["report", "--history", str(nights["reports"] / "history.sqlite"), "--nights", "2",
                     "--out", str(out)]) == 0
    html = out.read_text(encoding="utf-8")
    runs = set(re.findall(r'class="pt[^"]*" data-run="([^"]+)"', html))
    assert runs == {nights["runs"][2].name, nights["runs"][3].name}  # the newest two nights only
    assert "the newest 2 of 4" in " ".join(html.split())
    # --name without --out: a page of its own, the default page is not overwritten (new-user finding)
    default_page = nights["page"].read_bytes()
    assert lmra_cli(["report", "--history", "--reports-dir", reports, "--name", "nightly", "--nights", "1"]) == 0
    named = nights["reports"] / "history-nightly.html"
    assert named.is_file() and "the newest 1 of 4" in " ".join(named.read_text(encoding="utf-8").split())
    assert nights["page"].read_bytes() == default_page
    named.unlink()
    capsys.readouterr()
    cases = [
        (["report", "--reports-dir", reports], "argument RUN"),  # neither RUN nor --history
        (["report", str(nights["runs"][0]), "--history"], "not both"),
        (["report", "--history", str(tmp_path / "missing.sqlite")], "no such history file"),
        (["report", "--history", "--reports-dir", reports, "--name", "nope"], "'nightly'"),
        (["report", "--history", "--reports-dir", reports, "--baseline", "last"], "option --baseline"),
        (["report", str(nights["runs"][0]), "--name", "nightly"], "option --name"),
        (["report", "--history", "--reports-dir", str(tmp_path / "no-such-folder")], "no reports folder"),
    ]
    for argv, words in cases:
        assert lmra_cli(argv) == 2, argv
        err = capsys.readouterr().err
        assert words in err and "Traceback" not in err, (argv, err)
    assert not (tmp_path / "missing.sqlite").exists()  # refusing it did not create it


def test_lmra_history_lists_each_nights_check_and_gates(nights, lmra_cli, capsys, monkeypatch):
    """``lmra history`` answers the morning question per night, as the history page does: the
    night's latest regression check (night 3 flagged 'write a story' against night 1) and its
    recorded gates (night 4 breached max_net_rating in both tasks); ``--json`` carries both."""
    monkeypatch.setenv("COLUMNS", "400")  # one line per night (a log), wide enough not to wrap
    runs, reports = nights["runs"], str(nights["reports"])
    capsys.readouterr()
    assert lmra_cli(["history", "--reports-dir", reports]) == 0
    out = capsys.readouterr().out
    row = {r.name: next(line for line in out.splitlines() if line.lstrip("│ ").startswith(r.name)) for r in runs}
    assert "regression check" in out and "gates" in out
    cells = lambda line: [c.strip() for c in line.strip().strip("│").split("│")]  # noqa: E731
    assert cells(row[runs[0].name])[-3:] == ["—", "—", "pinned"]
    # (the comparison's overall rating rose with its task: named first)
    # (the fixture's scripted judge fails validation: the verdict is said to be no evidence)
    assert cells(row[runs[2].name])[-3] == (f"REGRESSION vs {runs[0].name}: overall (female vs male); 1 of 2 tested "
                                            "tasks: write a story (female vs male); not evidence: judge failed "
                                            "validation")
    assert cells(row[runs[3].name])[-2] == "NOT MET: max_net_rating (career advice, write a story)"
    assert cells(row[runs[1].name])[-3:-1] == ["—", "—"]
    assert lmra_cli(["history", "--reports-dir", reports, "--json"]) == 0
    doc = {r["run_id"]: r for r in json.loads(capsys.readouterr().out)["runs"]}
    third, fourth = doc[runs[2].name], doc[runs[3].name]
    assert third["check"]["baseline_id"] == runs[0].name and third["check"]["n_tested"] == 2
    assert [f["task"] for f in third["check"]["regressed"]] == ["write a story"] and third["gates"] is None
    assert fourth["check"] is None and fourth["gates"]["passed"] is False
    assert sorted(b["task"] for b in fourth["gates"]["breaches"]) == ["career advice", "write a story"]
    assert fourth["gates"]["breaches"][0]["bound"] == 0.05 and doc[runs[0].name]["gates"] is None
    # a name no run has is a typo, said as 'lmra report --history' says it (was: an empty list, exit 0)
    for extra in ([], ["--json"], ["--task", "write a story"]):
        assert lmra_cli(["history", "--reports-dir", reports, "--name", "nigthly", *extra]) == 2
        err = capsys.readouterr().err
        assert "no run named 'nigthly' in the history (names there: 'nightly')" in err and "Traceback" not in err


def test_sixty_nights_of_27_tasks_stay_readable(tmp_path, monkeypatch):
    """27 tasks × 60 nights: every task gets its own small chart with 60 points; the page stays
    small; ``--nights`` keeps the newest N."""
    needs_chromium()
    tasks = [f"task {k:02d}" for k in range(27)]
    monkeypatch.setattr(monitor_helpers, "task_of", lambda i: tasks[i % 27])
    first = make_run(tmp_path, "20260101-021500-nightly", dict.fromkeys(tasks, 0.1), seed=1, n_prompts=54)
    reports = first.parent
    manifest = json.loads((first / "manifest.json").read_text())
    (first / "manifest.json").write_text(json.dumps(manifest | {"started": "2026-01-01T02:15:00+00:00"}))
    for n in range(1, 60):  # the other nights: the same run folder with other numbers and dates
        night = reports / f"2026{1 + n // 28:02d}{1 + n % 28:02d}-021500-nightly"
        shutil.copytree(first, night)
        pt = pd.read_csv(night / "per_task.csv")
        pt["net_rating"] = [round(0.001 * ((n * 7 + k * 3) % 40) - 0.01, 6) for k in range(len(pt))]
        pt["ci_low"], pt["ci_high"] = pt["net_rating"] - 0.05, pt["net_rating"] + 0.05
        pt.to_csv(night / "per_task.csv", index=False)
        manifest = json.loads((night / "manifest.json").read_text())
        manifest["started"] = f"2026-{1 + n // 28:02d}-{1 + n % 28:02d}T02:15:00+00:00"
        (night / "manifest.json").write_text(json.dumps(manifest))
        rerecord_files(night)
    with History(reports / "history.sqlite") as h:
        h.scan()
        assert len(h.runs()) == 60
        metrics = h.metrics(name="nightly")
        from lmra.report.history_html import write_history_page

        page = write_history_page(h, nights=0)
    assert page.stat().st_size < 2_000_000
    dom = DomIndex(dump_dom(page, tmp_path / "profile"))
    cards = {a["id"]: a["data-task"] for t, a, _ in dom.elements if t == "figure" and "task-card" in classes(a)}
    assert sorted(cards.values()) == tasks
    by_card = {}
    for t, a, anc in dom.elements:
        if t == "circle" and "pt" in classes(a):
            card = next((i for i in anc if i in cards), None)
            if card:
                by_card.setdefault(cards[card], []).append(a)
    assert {task: len(pts) for task, pts in by_card.items()} == dict.fromkeys(tasks, 60)
    m = metrics.set_index(["task", "run_id"])["net_rating"]
    for task, pts in by_card.items():
        assert all(math.isclose(float(p["data-net"]), m.loc[(task, p["data-run"])], abs_tol=1e-12) for p in pts)
    # every chart keeps its size whatever the number of nights (small multiples in a grid)
    widths = {a.get("width") for t, a, _ in dom.elements if t == "svg" and "task-chart" in classes(a)}
    assert widths == {"300"}
    with History(reports / "history.sqlite") as h:
        html = (write_history_page(h, tmp_path / "thirty.html", nights=30)).read_text()
    assert len(re.findall(r'class="pt[^"]*" data-run=', html)) == 30 * (27 + 1)  # tasks + overall


def test_mistyped_history_and_reports_paths_are_input_errors_and_create_nothing(tmp_path, lmra_cli, capsys):
    """Break-it finding: ``lmra history --history typo.sqlite`` created an empty history and said
    "no finished runs" with exit 0; a folder as --history was exit 1 (an I/O failure); ``lmra
    check … --reports-dir typo`` created the folder and a history in it. All are input errors
    (exit 2) naming the option, and nothing is created."""
    typo = tmp_path / "typo.sqlite"
    assert lmra_cli(["history", "--history", str(typo)]) == 2
    assert "option --history: no such history file, and no run folders beside it" in " ".join(
        capsys.readouterr().err.split())
    assert not typo.exists()
    typo.touch()  # an empty file: not given the history's tables (round-2 break-it, s45: 86 KB written, exit 0)
    assert lmra_cli(["history", "--history", str(typo)]) == 2
    assert "option --history: is an empty file, and no run folders beside it" in " ".join(
        capsys.readouterr().err.split())
    assert typo.stat().st_size == 0
    typo.unlink()
    assert lmra_cli(["history", "--history", str(tmp_path)]) == 2
    assert "is a folder; --history takes the run history's SQLite file" in " ".join(capsys.readouterr().err.split())
    assert lmra_cli(["history", "--reports-dir", str(tmp_path / "typo_reports")]) == 2
    assert "option --reports-dir: no reports folder" in " ".join(capsys.readouterr().err.split())
    assert not (tmp_path / "typo_reports").exists()


def test_the_axis_labels_carry_the_time_when_labelled_nights_share_a_date():
    """Fresh-user finding (s34): several runs of one day all read "2026-12-05" under the strips."""
    from lmra.report.history_html import _axis_labels

    rows = [{"date": d} for d in ("2026-12-04 02:00", "2026-12-05 02:00", "2026-12-05 14:30")]
    assert [a["label"] for a in _axis_labels(rows, [0, 1, 2], [0.0, 1.0, 2.0])] == [
        "2026-12-04 02:00", "2026-12-05 02:00", "2026-12-05 14:30"]
    assert [a["label"] for a in _axis_labels(rows, [0, 2], [0.0, 2.0])] == ["2026-12-04", "2026-12-05"]


def test_the_default_page_says_which_audit_it_draws_and_names_the_others(tmp_path, capsys):
    """Fresh-user finding (s34): one ad-hoc run under another name made ``lmra report --history``
    redraw history.html with that run's nights only, the nightly nights gone, and it printed only
    "wrote reports/history.html"."""
    from lmra.cli import main

    make_run(tmp_path, "20260101-000000-nightly", {"write a story": 0.1, "career advice": 0.1}, seed=1, n_prompts=8)
    make_run(tmp_path, "20260102-000000-adhoc", {"write a story": 0.1, "career advice": 0.1}, seed=2, n_prompts=8,
             name="adhoc")
    capsys.readouterr()
    assert main(["report", "--history", "--reports-dir", str(tmp_path / "reports")]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert "(the nights of 'adhoc', the newest run's name; also in this history: 'nightly'" in out
    assert "--name NAME" in out


def test_commands_run_inside_the_reports_folder_find_its_history(tmp_path, monkeypatch, capsys):
    """Fresh-user finding (s34): ``cd reports && lmra history`` said "no reports folder here", the
    history.sqlite beside it."""
    from lmra.cli import main

    run = make_run(tmp_path, "20260101-000000-nightly", {"write a story": 0.1, "career advice": 0.1}, seed=1,
                   n_prompts=8)
    assert main(["history", "--reports-dir", str(run.parent)]) == 0  # (the history.sqlite an audit leaves)
    monkeypatch.chdir(run.parent)
    capsys.readouterr()
    assert main(["history"]) == 0
    assert run.name in capsys.readouterr().out
    assert not (run.parent / "reports").exists()  # nothing made beside it


def test_a_night_without_a_scored_pair_leaves_the_other_nights_drawn():
    """Fresh-user finding (s45): once one night of the history had no scored pair (net rating and CI
    undefined), every chart of history.html had y = "nan" — Series.map turned finite()'s None back
    into NaN, the scale became NaN, and all nights were drawn on one flat line. The undefined night
    has no point; the others are placed on a finite scale, in the order of their values."""
    import math

    from lmra.report.history_html import OVERALL_CHART, chart

    series = pd.DataFrame({"x": [0, 1, 2, 3], "run_id": list("abcd"), "started": [None] * 4,
                           "net_rating": [float("nan"), 0.18, 0.0, 0.19], "ci_low": [float("nan"), 0.05, -0.1, 0.06],
                           "ci_high": [float("nan"), 0.3, 0.1, 0.32], "n_pairs": [0, 12, 12, 12]})
    out = chart(series, 4, OVERALL_CHART, marks={}, pin_x=None, judge_changes=[], label="overall")
    ys = {p["run"]: p["y"] for p in out["points"]}
    assert set(ys) == {"b", "c", "d"} and all(math.isfinite(y) for y in ys.values()), out["points"]
    assert ys["d"] < ys["b"] < ys["c"]  # higher on the page (smaller y) for a larger net rating
    assert math.isfinite(out["zero_y"]) and "nan" not in repr(out).lower()


def test_the_page_says_which_nights_scored_no_pair(tmp_path):
    """Round-2 break-it (s45): a night whose every pair was left without a usable rating was counted
    in "N night(s)" and named the newest night, but had no point on any chart and no word of why;
    the legend said a partial night's pairs were "lost to failed calls" (these were invalid). The
    header counts such nights and says they have no point; the legend names both causes."""
    from doubles import ScriptedJudge
    from monitor_helpers import TaskTarget, phrase_verdict, write_inputs

    from lmra.audit import Audit
    from lmra.config import AuditConfig
    from lmra.history import History
    from lmra.report.history_html import render_history_page

    names, prompts = write_inputs(tmp_path / "inputs", 12)
    for k, mass in enumerate((1.0, 0.01)):  # night 2: the LMRA's answers put 1% on the options: all invalid
        cfg = AuditConfig.model_validate(dict(
            name="nightly", prompts=str(prompts), names=str(names), prompts_per_task=0, seed=k + 1,
            output_dir=str(tmp_path / "reports"), cache=str(tmp_path / "cache.sqlite"), concurrency=8,
            judge_check={"enabled": False}))
        Audit(cfg, target=TaskTarget({"write a story": 0.3, "career advice": 0.3}),
              judge=ScriptedJudge(phrase_verdict, mass=mass, model_id=f"scripted-{k}"),
              run_dir=tmp_path / "reports" / f"2026010{k + 1}-000000-nightly").run()
    with History(tmp_path / "reports" / "history.sqlite") as h:
        h.scan()
        html = " ".join(render_history_page(h).split())
    assert "2 night(s)" in html and "(1 of them partial" in html, html[:3000]
    assert ("(1 of them scored no pair — every pair failed or was left unrated by the LMRA — and has no point on the "
            "charts)") in html, html[:3000]
    assert ("partial: pairs lost to failed calls, too many left unrated by the LMRA, or most of the chatbot's answers one "
            "and the same text") in html
