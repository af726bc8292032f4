"""The self-contained HTML report, rendered in headless Chromium (Debian package ``chromium``).

CI must install it (``apt-get install -y chromium``); the browser test is skipped only when
``/usr/bin/chromium`` is absent.
"""

import json
import shutil
import subprocess
from html.parser import HTMLParser
from pathlib import Path

import pytest

from conftest import rerecord_files
from monitor_helpers import lmra_cli, make_run  # noqa: F401  (fixture)
from lmra.history import History
from lmra.report.html import render_report
from lmra.runfolder import load_run

CHROMIUM = "/usr/bin/chromium"
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
         "--disable-component-update", "--disable-sync", "--no-first-run"]


class DomIndex(HTMLParser):
    """Collects every element as (tag, attrs, ids of its ancestors) from a DOM dump."""

    VOID = {"meta", "link", "br", "img", "input", "hr", "col", "source", "wbr", "area", "base", "embed", "track"}

    def __init__(self, html: str):
        super().__init__()
        self.stack: list[tuple[str, str | None]] = []
        self.elements: list[tuple[str, dict, list[str]]] = []
        self.text: dict[str, list[str]] = {}
        self.feed(html)

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        self.elements.append((tag, attrs, [i for _, i in self.stack if i]))
        if tag not in self.VOID:
            self.stack.append((tag, attrs.get("id")))

    def handle_startendtag(self, tag, attrs):
        self.elements.append((tag, dict(attrs), [i for _, i in self.stack if i]))

    def handle_endtag(self, tag):
        for k in range(len(self.stack) - 1, -1, -1):
            if self.stack[k][0] == tag:
                del self.stack[k:]
                break

    def handle_data(self, data):
        for _, i in self.stack:
            if i:
                self.text.setdefault(i, []).append(data)

    def ids(self) -> set[str]:
        return {a["id"] for _, a, _ in self.elements if "id" in a}

    def inside(self, element_id: str, tag: str) -> int:
        return sum(1 for t, _, anc in self.elements if t == tag and element_id in anc)

    def text_of(self, element_id: str) -> str:
        return " ".join(" ".join(self.text.get(element_id, [])).split())


@pytest.fixture(scope="module")
def report(tmp_path_factory):
    """Three nightly runs; the last one (a rise in 'write a story') checked against the first.
    The last run's manifest gets a cost section and its summary a field this report version
    does not know, as later audit versions may write."""
    tmp = tmp_path_factory.mktemp("html")
    low = {"write a story": 0.1, "career advice": 0.1}
    jc = {"per_kind": 2}  # the scripted judge fails the canaries: the report must say so first
    base = make_run(tmp, "20260101-000000-nightly", low, seed=1, n_prompts=120, judge_check=jc)
    make_run(tmp, "20260102-000000-nightly", low, seed=2, n_prompts=120, judge_check=jc)
    rise = make_run(tmp, "20260103-000000-nightly", {"write a story": 0.6, "career advice": 0.1}, seed=3,
                    n_prompts=120, judge_check=jc)
    summary = json.loads((rise / "summary.json").read_text())
    summary |= {"future_metric": {"female": 3, "male": 1}}
    (rise / "summary.json").write_text(json.dumps(summary))
    manifest = json.loads((rise / "manifest.json").read_text())
    manifest["budget"] = {"cost_usd": 0.42, "per_model": [{"model": "scripted", "calls": 12}]}
    (rise / "manifest.json").write_text(json.dumps(manifest))
    rerecord_files(rise)
    return {"base": base, "rise": rise, "tmp": tmp}


def test_report_cli_writes_self_contained_html(report, lmra_cli):
    rc = lmra_cli(["report", str(report["rise"]), "--baseline", str(report["base"]), "--delta", "0.05",
                   "--allow-unvalidated-judge"])  # (its scripted judge fails validation: 5 otherwise)
    assert rc == 3  # the check found the regression
    html = (report["rise"] / "report.html").read_text()
    assert "<script" not in html and "<link" not in html
    assert "http://" not in html.replace("http://www.w3.org", "") and "https://" not in html
    assert html.count("<svg") >= 3  # bars, trend, scatter


def test_report_renders_in_headless_chromium(report, lmra_cli, tmp_path):
    if not Path(CHROMIUM).exists():
        pytest.skip("Debian package 'chromium' is not installed (apt-get install -y chromium)")
    path = report["rise"] / "report.html"
    if not path.exists():
        assert lmra_cli(["report", str(report["rise"]), "--baseline", str(report["base"]), "--delta", "0.05",
                         "--allow-unvalidated-judge"]) == 3
    proc = subprocess.run([CHROMIUM, *FLAGS, f"--user-data-dir={tmp_path / 'profile'}", "--dump-dom",
                           path.resolve().as_uri()], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    dom = DomIndex(proc.stdout)
    ids = dom.ids()
    for section in ("run-header", "regression-check", "overall", "per-task", "trend", "comparison", "sample-size",
                    "judge-diagnostics", "judge-diagnostics-table", "refusals", "filters", "budget", "other-summary"):
        assert section in ids, f"#{section} missing from the rendered DOM"
    # the judge status is the first thing in the report: these scripted runs' judge fails the canaries
    order = [a.get("id") for _, a, _ in dom.elements if a.get("id")]
    assert order.index("judge-status") < order.index("regression-check") < order.index("overall")
    assert dom.text_of("judge-status").startswith("Judge status: FAILED")
    assert "planted stereotypes" in dom.text_of("judge-status")
    # the regression banner names the task that rose, and only that one
    banner = dom.text_of("regression-banner")
    # (and the comparison's overall net rating, which rose with it)
    assert banner.startswith("Regression: 2 net rating(s)") and "write a story" in banner
    assert "career advice" not in banner and "overall net rating over all 2 tasks (female vs male)" in banner
    # tables: per-task rows, check rows, sample-size rows
    assert dom.inside("per-task-table-1", "tr") == 3  # header + 2 tasks
    assert dom.inside("judge-per-task-table", "tr") == 3
    assert dom.inside("check-table", "tr") == 4  # header + 2 tasks + the overall row
    assert dom.inside("sample-size-table", "tr") == 3
    # figures are inline SVG with drawn paths
    for fig in ("task-bars-1", "trend-1", "comparison-scatter"):
        assert dom.inside(fig, "svg") >= 1 and dom.inside(fig, "path") > 3, fig
    assert "3 runs" in dom.text_of("trend") or "last 3 runs" in dom.text_of("trend")
    assert "Pearson r" in dom.text_of("comparison")
    # diagnostics read from summary.json / manifest.json
    run = load_run(report["rise"])
    judge = dom.text_of("judge-diagnostics")
    assert f"logprobs × {run.summary['judge_methods']['logprobs']}" in judge
    consistency = run.summary["diagnostics"]["stereotype"]["order_consistency"]
    assert f"order_consistency {consistency:.4g}" in dom.text_of("judge-diagnostics-table")
    refusals = dom.text_of("refusals")
    assert "n_pairs_refusal 0" in refusals and "rate_a" in refusals  # the refusal table of summary.json
    assert "n_filtered 0" in dom.text_of("filters")
    assert "budget.cost_usd 0.42" in dom.text_of("budget") and "per_model" in dom.text_of("budget")
    assert "future_metric.female 3" in dom.text_of("other-summary")
    title = [a for t, a, _ in dom.elements if t == "meta" and a.get("name") == "lmra-run-id"]
    assert title and title[0]["content"] == run.run_id


def test_report_without_history_or_baseline(report, tmp_path):
    """A single run: no trend, no check, no comparison sections; a run folder of the first
    summary schema (no refusals, filter or diagnostics keys) renders too."""
    lone = tmp_path / "20260109-000000-lone"
    shutil.copytree(report["base"], lone)
    summary = json.loads((lone / "summary.json").read_text())
    old = {k: summary[k] for k in ("schema_version", "name", "run_dir", "n_prompts", "n_responses", "n_pairs_total",
                                   "confidence", "combiner", "judge_methods", "judge_valid_option_mass", "overall",
                                   "per_domain", "per_task")}
    (lone / "summary.json").write_text(json.dumps(old | {"schema_version": 1}))
    manifest = json.loads((lone / "manifest.json").read_text())  # nor file digests (lmra.digests)
    del manifest["files"], manifest["design"]  # (an lmra from before both)
    (lone / "manifest.json").write_text(json.dumps(manifest))
    html = render_report(load_run(lone))
    assert 'id="trend"' not in html and 'id="regression-check"' not in html and 'id="comparison"' not in html
    assert 'id="refusals"' not in html and 'id="judge-diagnostics-table"' not in html
    assert 'id="per-task-table-1"' in html and 'id="judge-table"' in html
    with History(tmp_path / "h.sqlite") as h:
        h.register(load_run(lone))
        html = render_report(load_run(lone), history=h)
    assert 'id="trend"' not in html  # one run is not a trend


def test_report_tables_count_every_pair_unlabelled_ones_included(tmp_path):
    """New-user finding: report.html's per-task table had pairs, invalid, failed and refusal
    only, and the overall table no refusal: a pair whose refusal label got no usable answer
    (unlabelled) was in no column, so a task's row did not add up to its prompts. Every pair is
    now in one column of both tables and the judge table counts the unlabelled ones."""
    from doubles import ScriptedJudge
    from monitor_helpers import TaskTarget, phrase_verdict, write_inputs

    from lmra import Audit
    from lmra.config import AuditConfig

    class HalfDeaf(ScriptedJudge):  # no usable refusal answer for every 4th response (0.02 on the options)
        def _probs(self, request):
            text = request.messages[-1].content
            if "Does the response refuse" in text and sum(map(ord, text)) % 4 == 0:
                return {"A": 0.01, "B": 0.01}
            return super()._probs(request)

    n_prompts = 40
    names, prompts = write_inputs(tmp_path / "inputs", n_prompts)
    cfg = AuditConfig.model_validate(dict(
        name="unlabelled", prompts=str(prompts), names=str(names), prompts_per_task=0, seed=3,
        output_dir=str(tmp_path / "reports"), cache=str(tmp_path / "c.sqlite"), concurrency=8,
        judge_check={"enabled": False}, refusal={"enabled": True}))
    run_dir = tmp_path / "reports" / "r"
    Audit(cfg, target=TaskTarget({"write a story": 0.5, "career advice": 0.1}), judge=HalfDeaf(phrase_verdict),
          run_dir=run_dir).run()
    html = render_report(load_run(run_dir))
    dom = DomIndex(html)
    rows = [r for r in dom.text_of("per-task-table-1").split("career advice") if r]  # header+row 1, row 2
    per_task = load_run(run_dir).per_task
    assert per_task["n_unlabelled"].sum() > 0  # the scripted judge left some responses unlabelled
    head = dom.text_of("per-task-table-1")
    assert "unlabelled" in head and "refusal" in dom.text_of("overall-table") and "unlabelled" in dom.text_of("overall-table")
    for _, r in per_task.iterrows():  # every task's row: its counts add up to its prompts
        cells = [r.n_pairs, r.n_invalid, r.n_failed, r.n_refusal, r.n_unlabelled]
        assert sum(int(c) for c in cells) == n_prompts // 2
        assert f"{r.task} {int(r.n_pairs)} {int(r.n_invalid)} {int(r.n_failed)} {int(r.n_refusal)} {int(r.n_unlabelled)} " \
            in head, (r.task, head)
    assert f"pairs with a response the refusal label got no usable answer for (unlabelled, excluded) " \
           f"{int(per_task['n_unlabelled'].sum())}" in dom.text_of("judge-table")
    assert rows


@pytest.mark.parametrize("labels", [True, False])
def test_refusal_columns_say_off_when_refusal_labels_are_off_as_on_the_console(tmp_path, sim_inputs, labels):
    """Fresh-user finding: with [refusal] enabled = false the console's refusal and unlabelled
    columns read "off", report.html's "—" (as for a count that is missing). Both say "off" now;
    with labels on, the counts are shown."""
    import re

    from conftest import NAME_TO_GROUP
    from doubles import ScriptedJudge, ScriptedTarget
    from lmra import Audit
    from lmra.config import AuditConfig

    names, prompts = sim_inputs(8)
    cfg = AuditConfig.model_validate(dict(
        name="labels", prompts=str(prompts), names=str(names), prompts_per_task=0, output_dir=str(tmp_path / "out"),
        cache=str(tmp_path / "c.sqlite"), judge_check={"enabled": False}, filter={"lmra": False},
        refusal={"enabled": labels}))
    res = Audit(cfg, target=ScriptedTarget(NAME_TO_GROUP, lambda g, rng: "Hi."),
                judge=ScriptedJudge(lambda r1, r2: {"C": 1.0})).run()
    html = render_report(load_run(res.run_dir))
    off = len(re.findall(r'<td class="num">off</td><td class="num">off</td>', html))
    assert off == (0 if labels else 1 + 2)  # the overall row and the two tasks' rows


def test_a_section_of_missing_values_only_is_left_out(report):
    """Fresh-user finding: a run without quality ratings showed a "Response quality (nine
    criteria)" section whose one row was "quality_combiner —". A section with a value shows."""
    run = load_run(report["base"])
    run.summary["quality_combiner"] = None
    assert 'id="quality"' not in render_report(run)
    run.summary["quality_combiner"] = "min"
    assert 'id="quality"' in render_report(run)


def test_the_reports_fact_tables_say_their_keys_in_words_and_fold_the_run_record(report):
    """Fresh-user finding (s34): the bottom half of report.html read as a dump of summary.json keys
    (``judge_status.sensitivity``, ``n_prompts_classify_unusable``, ``budget.per_model`` …). Each fact
    is now named in words beside its key; the run's record (other results, other facts) is folded
    away; the judge status, shown at the top, is not repeated as keys."""
    from lmra.report.html import fact_label

    assert fact_label("n_prompts_in_file") == "number of prompts in file"
    assert fact_label("budget.cost_usd") == "budget › cost (USD)"
    html = render_report(load_run(report["rise"]))
    dom = DomIndex(html)
    assert "number of filtered n_filtered 0" in dom.text_of("filters")
    assert "judge_status.sensitivity" not in html and "judge_status.status" not in html
    for sid in ("other-summary", "other-manifest"):
        at = html.index(f'id="{sid}"')
        assert "<details>" in html[at:html.index("</section>", at)], sid
    assert "<details>" not in html[html.index('id="filters"'):html.index("</section>", html.index('id="filters"'))]


def test_the_three_position_figures_say_their_scales_and_which_one_the_gate_reads(report):
    """Fresh-user finding (s35): the report's diagnostics showed ``position_preference 0.6674`` and
    ``position_bias 0.2044`` beside the header's position logit, three scales unnamed, and nothing
    said which one ``max_position_logit`` reads. Each row now says its scale, and the note names the
    logit b̂ as the gate's figure."""
    html = render_report(load_run(report["rise"]))
    dom = DomIndex(html)
    table = dom.text_of("judge-diagnostics-table")
    assert "position preference (share of decisive probability on Response 1's option; 0.5 = none)" in table
    assert "position bias (mean p(A) − p(B); 0 = none)" in table
    assert "position_preference" not in table and "position_bias" not in table
    text = " ".join(html.split())
    assert "position logit b̂ above (log-odds; 0 = none), which the judge check and the max_position_logit gate read" in text


def test_the_header_counts_the_pairs_scored_and_failed(tmp_path):
    """Nightly trial (s46): report.html's header said "prompts / pairs 313 / 313" on a night where 131
    pairs failed; it says how many were scored and how many failed beside the pairs written."""
    import re

    from doubles import ScriptedJudge
    from monitor_helpers import TaskTarget, phrase_verdict, write_inputs

    from lmra.audit import Audit
    from lmra.config import AuditConfig

    names, prompts = write_inputs(tmp_path / "inputs", 12)
    cfg = AuditConfig.model_validate(dict(
        name="n", prompts=str(prompts), names=str(names), prompts_per_task=0, seed=1, max_failed_share=1.0,
        output_dir=str(tmp_path / "reports"), cache=str(tmp_path / "cache.sqlite"), judge_check={"enabled": False}))
    judge = ScriptedJudge(phrase_verdict, fail_on=lambda t: "harmful stereotype" in t and "number 3." in t)
    res = Audit(cfg, target=TaskTarget({"write a story": 0.1, "career advice": 0.1}), judge=judge).run()
    s = res.summary
    assert s["n_pairs_failed"] >= 1
    scored = sum(int(r["n_pairs"]) for r in s["overall"])
    html = " ".join(render_report(load_run(res.run_dir)).split())
    rest = s["n_pairs_total"] - scored - s["n_pairs_failed"]
    tail = f", {rest} with a refusal or without a usable rating" if rest > 0 else ""
    assert (f'id="run-pairs">{s["n_prompts"]} / {s["n_pairs_total"]} ({scored} scored, {s["n_pairs_failed"]} '
            f"failed{tail})</dd>") in html, re.findall(r'id="run-pairs">[^<]*', html)
