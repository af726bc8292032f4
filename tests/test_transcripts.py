"""Transcripts in report.html (issue 13): the scrubbed response pairs of the tasks with the
highest net rating, with both presentation orders' option probabilities and the judge's answer,
collapsible, escaped, and never for a redacted run.

Runs are real audits (``lmra.Audit``) with scripted doubles whose ratings are known by
construction; the report is read back through its HTML and, for escaping and visibility,
rendered in headless Chromium (the pattern of ``tests/test_html_report.py``).
"""

from __future__ import annotations

import functools
import http.server
import json
import re
import subprocess
import threading
from pathlib import Path

import pandas as pd
import pytest

from conftest import FEMALE, MALE, NAME_TO_GROUP
from doubles import ScriptedJudge, name_in
from monitor_helpers import lmra_cli  # noqa: F401  (fixture)
from test_html_report import CHROMIUM, FLAGS, DomIndex
from lmra import Audit
from lmra.config import AuditConfig
from lmra.pairstore import iter_rows
from lmra.report.transcripts import MAX_CHARS_PER_TEXT, MAX_PAIRS_PER_TASK

#: tasks and their prompts: alpha has more pairs than a task shows
TASK_PROMPTS = {"alpha": 12, "bravo": 6, "charlie": 6, "delta": 6}
#: stereotype level of the female response by task (delta: none); the judge rates level/10
BASE_LEVEL = {"alpha": 9, "bravo": 6, "charlie": 3, "delta": 0}
XSS = ("<script>alert(1)</script><script>document.documentElement.setAttribute('data-pwned','1')</script>"
       "<img src=x onerror=\"document.documentElement.setAttribute('data-pwned','2')\">")
PROMPT_RE = re.compile(r"Prompt number (\d+):")
LEVEL_RE = re.compile(r"Level (\d)\.")
LONG = 9000


def prompt_plan() -> list[tuple[int, str]]:
    """(prompt number, task) in file order."""
    return [(i, t) for i, t in enumerate(t for t, n in TASK_PROMPTS.items() for _ in range(n))]


def level(i: int, task: str) -> int:
    """The female response's stereotype level for prompt i: the task's base, minus 0–2."""
    return max(0, BASE_LEVEL[task] - (i % 3)) if BASE_LEVEL[task] else 0


class LevelTarget:
    """A chatbot that greets the user by name and, for female users, states a stereotype level;
    prompt 0's female answer carries HTML/script, prompt 1's male answer is 9,000 characters
    long, and prompt 13's male answer is a refusal."""

    name = "scripted-target"
    model_id = "scripted"
    base_url = ""
    supports_logprobs = False

    def __init__(self):
        self.task_of = dict(prompt_plan())

    async def complete(self, request):
        from lmra.providers.base import ChatResult, Usage

        name = name_in(request)
        i = int(PROMPT_RE.search(request.messages[-1].content).group(1))
        task = self.task_of[i]
        if NAME_TO_GROUP[name] == "female" and level(i, task):
            text = f"Dear {name}, Level {level(i, task)}. Gentle options suit you."
            text += XSS if i == 0 else ""
        elif i == 13:
            text = "I can't help with that."
        else:
            text = f"Dear {name}, here is a neutral answer."
            text += " long" * ((LONG - len(text)) // 5) if i == 1 else ""
        return ChatResult(text=text, usage=Usage(prompt_tokens=10, completion_tokens=5), model=self.model_id,
                          provider=self.name)

    async def aclose(self) -> None:
        return None


def verdict(r1: str, r2: str) -> dict:
    """The stereotype question: level/10 on the option naming the stereotyped response."""
    m1, m2 = LEVEL_RE.search(r1), LEVEL_RE.search(r2)
    if m1 and not m2:
        p = int(m1.group(1)) / 10
        return {"A": p, "C": 1 - p}
    if m2 and not m1:
        p = int(m2.group(1)) / 10
        return {"B": p, "C": 1 - p}
    return {"C": 1.0}


def audit(tmp: Path, name: str, **cfg) -> Path:
    """A real audit of the four tasks with the scripted doubles; returns the run folder."""
    tmp.mkdir(parents=True, exist_ok=True)
    names = tmp / "names.csv"
    names.write_text("name,gender,race,source\n" + "".join(f"{n},female,,test\n" for n in FEMALE)
                     + "".join(f"{n},male,,test\n" for n in MALE), encoding="utf-8")
    prompts = tmp / "prompts.jsonl"
    prompts.write_text("".join(json.dumps({"id": f"p{i:02d}", "text": f"Prompt number {i}: help me <i>now</i> & then.",
                                           "domain": "d", "task": t}) + "\n" for i, t in prompt_plan()))
    judge_kw = cfg.pop("judge_kw", {})
    config = AuditConfig.model_validate(dict(name=name, prompts=str(prompts), names=str(names), prompts_per_task=0,
                                             seed=7, output_dir=str(tmp / "reports"), cache=str(tmp / "c.sqlite"),
                                             concurrency=16, judge_check={"enabled": False}, **cfg))
    judge = ScriptedJudge(verdict, position_logit=0.4, refusal=lambda r: 0.95 if "can't" in r else 0.02, **judge_kw)
    run_dir = tmp / "reports" / f"20260301-000000-{name}"
    Audit(config, target=LevelTarget(), judge=judge, run_dir=run_dir).run()
    return run_dir


def jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def transcript_pairs(dom: DomIndex, block_id: str) -> list[dict]:
    """The pair <details> elements inside one task block, in document order."""
    return [a for t, a, anc in dom.elements if t == "details" and block_id in anc]


@pytest.fixture(scope="module")
def run(tmp_path_factory) -> Path:
    return audit(tmp_path_factory.mktemp("tr"), "tr")


@pytest.fixture(scope="module")
def redacted(tmp_path_factory) -> Path:
    return audit(tmp_path_factory.mktemp("red"), "red", redact=True)


def test_report_shows_the_top_tasks_pairs_with_both_orders(run, lmra_cli, tmp_path):
    out = tmp_path / "report.html"
    assert lmra_cli(["report", str(run), "--transcripts", "2", "--out", str(out)]) == 0
    html = out.read_text()
    dom = DomIndex(html)
    per_task = pd.read_csv(run / "per_task.csv")
    ratings = iter_rows(run / "ratings.parquet")
    responses = {(r["prompt_id"], r["group"], r["sample"]): r for r in jsonl(run / "responses.jsonl")}
    prompts = {p["id"]: p for p in jsonl(run / "prompts.jsonl")}

    # exactly the two tasks with the highest net rating (known by construction: alpha, bravo)
    blocks = [a for t, a, _ in dom.elements if t == "div" and "transcript-task" in a.get("class", "")]
    expected = per_task.sort_values("net_rating", ascending=False)["task"].head(2).tolist()
    assert [b["data-task"] for b in blocks] == expected == ["alpha", "bravo"]
    legend = " ".join(dom.text_of("transcripts-legend").split()) if hasattr(dom, "text_of") else " ".join(html.split())
    assert "The response pairs of the 2 tasks with the highest net rating in each comparison" in legend
    # more tasks asked for than the run has: it says what it shows (fresh-user round 2: "the 5 task(s)" of 3)
    many = tmp_path / "many.html"
    n_tasks = per_task.groupby(["group_a", "group_b"]).size().max()
    assert lmra_cli(["report", str(run), "--transcripts", str(n_tasks + 5), "--out", str(many)]) == 0
    text = " ".join(many.read_text().split())
    assert f"The response pairs of every task with a net rating in each comparison ({n_tasks} at most)" in text

    for block in blocks:
        task = block["data-task"]
        mine = [r for r in ratings if r["task"] == task]
        # the most stereotyped first; refused/invalid pairs (no h) last; at most 10 shown
        order = sorted(mine, key=lambda r: (r["h"] is None, -(r["h"] or 0), r["pair_id"]))
        shown = transcript_pairs(dom, block["id"])
        assert [p["data-pair-id"] for p in shown] == [r["pair_id"] for r in order[:MAX_PAIRS_PER_TASK]]
        hs = [float(p["data-h"]) for p in shown if p["data-h"]]
        assert hs == sorted(hs, reverse=True) and len(set(hs)) > 1
        more = len(mine) - len(shown)
        assert (f"{more} more pair(s) of this task are not shown" in dom.text_of(block["id"])) == (more > 0)
        for p, r in zip(shown, order):
            pid = p["id"]
            assert p["data-h"] == ("" if r["h"] is None else repr(float(r["h"])))
            for o in (1, 2):
                answer = r.get(f"order{o}")
                row = f"{pid}-order-{o}"
                if answer is None:  # a refused pair: the LMRA was not asked
                    assert r["refused"] and "not asked" in dom.text_of(row)
                    continue
                cells = {a["data-option"]: float(a["data-value"]) for t, a, anc in dom.elements
                         if t == "td" and row in anc and "data-option" in a}
                assert cells == answer["probs"]  # exactly ratings.jsonl's values
                assert dom.text_of(f"{row}-answer") == max(answer["probs"], key=answer["probs"].get)
                first = r["group_a"] if o == 1 else r["group_b"]
                assert dom.text_of(row).startswith(f"{o} {first}'s /")
            # the name-scrubbed responses, as stored; the drawn names never appear
            for side, group in (("a", r["group_a"]), ("b", r["group_b"])):
                stored = responses[(r["prompt_id"], group, r["sample"])]["scrubbed"]
                assert dom.text_of(f"{pid}-text-{side}") == " ".join(stored[:MAX_CHARS_PER_TEXT].split())
                assert stored.startswith("Dear [NAME],") or stored.startswith("I can't")
            assert dom.text_of(f"{pid}-prompt") == prompts[r["prompt_id"]]["text"]
    section = dom.text_of("transcripts")
    assert not any(n in section for n in FEMALE + MALE)
    # the refused pair of bravo (prompt 13) is shown last, with its refusal label
    bravo = transcript_pairs(dom, blocks[1]["id"])
    assert bravo[-1]["data-pair-id"].startswith("p13|") and bravo[-1]["data-h"] == ""
    refused = next(r for r in ratings if r["pair_id"] == bravo[-1]["data-pair-id"])
    assert refused["refusal_b"] is True and refused["refusal_a"] is False
    assert f"— refusal (p(refusal) {refused['refusal_p_b']:.3f})" in dom.text_of(bravo[-1]["id"] + "-response-b")
    assert "not a refusal" in dom.text_of(bravo[-1]["id"] + "-response-a")
    # a long response is cut at 4,000 characters with a note saying how much more there is
    long_pair = next(p for p in transcript_pairs(dom, blocks[0]["id"]) if p["data-pair-id"].startswith("p01|"))
    stored = responses[("p01", "male", 0)]["scrubbed"]
    assert len(stored) > LONG - 10
    assert f"{len(stored) - MAX_CHARS_PER_TEXT:,} more characters not shown" in dom.text_of(long_pair["id"])
    # every text is escaped: the prompt's <i> and the response's <script> are text, not markup
    assert "&lt;i&gt;now&lt;/i&gt; &amp; then" in html and "&lt;script&gt;alert(1)&lt;/script&gt;" in html
    assert "<script" not in html and "onerror=" not in html.replace("onerror=&#34;", "")


def test_sampled_judge_answers_are_shown_as_given(tmp_path, lmra_cli):
    """Without log-probabilities the judge samples its answer: each order's raw answers and
    method are shown as stored, and the probabilities are their frequencies."""
    run = audit(tmp_path, "smp", judge_kw={"supports_logprobs": False}, tasks=["alpha"], judge={"n_samples": 3})
    assert lmra_cli(["report", str(run), "--transcripts", "1"]) == 0
    dom = DomIndex((run / "report.html").read_text())
    rows = {r["pair_id"]: r for r in iter_rows(run / "ratings.parquet")}
    shown = transcript_pairs(dom, "transcripts-1-1")
    assert len(shown) == MAX_PAIRS_PER_TASK
    for p in shown:
        r = rows[p["data-pair-id"]]
        for o in (1, 2):
            answer = r[f"order{o}"]
            assert answer["method"] == "sampled" and len(answer["raw_texts"]) == 3
            assert dom.text_of(f"{p['id']}-order-{o}-raw") == " | ".join(answer["raw_texts"])
            assert "sampled (3 samples)" in dom.text_of(f"{p['id']}-order-{o}")


def test_config_field_and_zero(run, tmp_path, lmra_cli):
    """The audit's own report follows the run config's [report] transcripts; --transcripts 0 turns
    the section off."""
    from lmra.cli.monitor import monitor_after_audit

    one = audit(tmp_path / "cfg", "one", report={"transcripts": 1})
    assert monitor_after_audit(one, report=True) == 0
    dom = DomIndex((one / "report.html").read_text())
    assert [a["data-task"] for t, a, _ in dom.elements if "transcript-task" in a.get("class", "")] == ["alpha"]

    out = tmp_path / "off.html"
    assert lmra_cli(["report", str(run), "--transcripts", "0", "--out", str(out)]) == 0
    html = out.read_text()
    assert 'class="transcript-pair"' not in html and "Transcripts are off" in html
    with pytest.raises(SystemExit) as exc:
        lmra_cli(["report", str(run), "--transcripts", "-1"])
    assert exc.value.code == 2


def test_redacted_run_has_no_transcripts_and_no_text(redacted, lmra_cli):
    assert not (redacted / "prompts.jsonl").exists()
    assert lmra_cli(["report", str(redacted), "--transcripts", "5"]) == 0
    html = (redacted / "report.html").read_text()
    dom = DomIndex(html)
    assert dom.text_of("transcripts-omitted").startswith("Transcripts are omitted because this run is redacted")
    assert dom.inside("transcripts", "details") == 0 and dom.inside("transcripts", "h3") == 0
    # no response or prompt text anywhere in the report
    for text in ("Dear", "[NAME]", "Level", "neutral answer", "can't help", "alert(1)", "Prompt number", "<i>now",
                 "&lt;i&gt;"):
        assert text not in html, text


def test_transcripts_render_escaped_and_collapsible_in_chromium(run, lmra_cli, tmp_path):
    """Headless Chromium: no script of a response runs, the payload is visible text once its pair is
    opened, and hidden while the pair is closed."""
    if not Path(CHROMIUM).exists():
        pytest.skip("Debian package 'chromium' is not installed (apt-get install -y chromium)")
    site = tmp_path / "site"
    site.mkdir()
    assert lmra_cli(["report", str(run), "--transcripts", "1", "--out", str(site / "report.html")]) == 0
    proc = subprocess.run([CHROMIUM, *FLAGS, f"--user-data-dir={tmp_path / 'p1'}", "--dump-dom",
                           (site / "report.html").resolve().as_uri()], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    dom = DomIndex(proc.stdout)
    assert not any(t == "script" for t, _, _ in dom.elements)
    root = next(a for t, a, _ in dom.elements if t == "html")
    assert "data-pwned" not in root and dom.inside("transcripts", "img") == 0
    xss_pair = next(a for t, a, _ in dom.elements if t == "details" and a.get("data-pair-id", "").startswith("p00|"))
    assert "<script>alert(1)</script>" in dom.text_of(f"{xss_pair['id']}-text-a")

    # what a reader sees: the test page (not the report) reads the report's rendered text in a frame,
    # closed and then with every pair opened
    (site / "probe.html").write_text("""<!DOCTYPE html><html><body><pre id="out"></pre>
<iframe id="f" src="report.html" width="1200" height="800"></iframe>
<script>
document.getElementById('f').addEventListener('load', function () {
  var d = this.contentDocument, sec = d.getElementById('transcripts');
  var closed = sec.innerText;
  d.querySelectorAll('details').forEach(function (x) { x.open = true; });
  document.getElementById('out').textContent = JSON.stringify({closed: closed, open: sec.innerText,
    scripts: d.scripts.length, pwned: d.documentElement.getAttribute('data-pwned')});
});
</script></body></html>""")
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(site))
    with http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler) as srv:
        threading.Thread(target=srv.serve_forever, daemon=True).start()
        try:
            proc = subprocess.run([CHROMIUM, *FLAGS, f"--user-data-dir={tmp_path / 'p2'}", "--virtual-time-budget=5000",
                                   "--dump-dom", f"http://127.0.0.1:{srv.server_address[1]}/probe.html"],
                                  capture_output=True, text=True, timeout=120)
        finally:
            srv.shutdown()
    assert proc.returncode == 0, proc.stderr[-2000:]
    out = json.loads(_pre_text(proc.stdout))
    assert out["scripts"] == 0 and out["pwned"] is None
    assert "<script>alert(1)</script>" in out["open"] and "Dear [NAME], Level 9." in out["open"]
    assert "<script>alert(1)</script>" not in out["closed"] and "Level 9." not in out["closed"]
    assert "alpha" in out["closed"]  # the pairs' summary lines stay visible


def _pre_text(dom_dump: str) -> str:
    """The JSON text the probe page wrote into its <pre id="out"> (HTML-unescaped)."""
    import html

    m = re.search(r'<pre id="out">(.*?)</pre>', dom_dump, re.S)
    assert m, dom_dump[:2000]
    return html.unescape(m.group(1))


def test_section_size_is_capped(run, monkeypatch):
    """Whatever the chatbot wrote, the section holds at most MAX_TOTAL_CHARS characters of text;
    pairs left out are counted under their task."""
    from lmra.report import transcripts
    from lmra.report.html import render_report
    from lmra.runfolder import load_run

    monkeypatch.setattr(transcripts, "MAX_TOTAL_CHARS", 6000)
    ctx = transcripts.transcripts_context(load_run(run), 4)
    assert ctx["truncated_total"]
    tasks = [t for c in ctx["comparisons"] for t in c["tasks"]]
    shown = [p for t in tasks for p in t["pairs"]]
    texts = sum(len(p[k]["text"] or "") for p in shown for k in ("prompt", "response_a", "response_b"))
    assert 0 < texts <= 6000
    assert all(t["n_more"] == t["n_pairs"] - len(t["pairs"]) for t in tasks)
    assert sum(t["n_more"] for t in tasks) > sum(max(0, t["n_pairs"] - MAX_PAIRS_PER_TASK) for t in tasks)
    html = render_report(load_run(run), transcripts=4)
    assert 'id="transcripts-capped"' in html


def test_bad_transcripts_config_is_an_input_error(tmp_path):
    from lmra.config import load_config
    from lmra.errors import LmraInputError

    cfg = tmp_path / "bad.toml"
    cfg.write_text('name = "x"\n\n[report]\ntranscripts = -1\n')
    with pytest.raises(LmraInputError) as exc:
        load_config(cfg)
    assert exc.value.format().startswith(f"{cfg}, line 4: field 'report.transcripts'")


def test_a_pair_rated_on_position_alone_is_explained_in_its_transcript():
    """Fresh-user finding (s45): a pair the LMRA answered "A" in both orders (Response 1 both times,
    whichever group's response stood there) read "h +0.0000 (q_F 0, q_R 0, q_N 1.0000)" — a certain
    "no stereotype" — without a word. Its transcript entry now carries a note saying it is a position
    preference and what each combiner keeps of it; pairs whose orders differ carry none."""
    from lmra.report.transcripts import _pair

    def row(p1, p2):
        return {"pair_id": "p|c|0", "prompt_id": "p", "comparison": "c", "group_a": "female", "group_b": "male",
                "sample": 0, "valid": True, "h": 0.0, "q_F": 0.0, "q_R": 0.0, "q_N": 1.0, "method": "logprobs",
                "order1": {"probs": p1, "mass": 1.0, "method": "logprobs"},
                "order2": {"probs": p2, "mass": 1.0, "method": "logprobs"}}

    same = _pair(row({"A": 0.887, "B": 0.0, "C": 0.113}, {"A": 0.8565, "B": 0.0, "C": 0.1435}), {}, {})
    assert [o["choice"] for o in same["orders"]] == ["A", "A"]
    assert same["position_note"].startswith("the LMRA named Response 1 in both orders: the same position whichever "
                                            "group's response stood there — a position preference")
    assert _pair(row({"A": 0.1, "B": 0.8, "C": 0.1}, {"A": 0.1, "B": 0.8, "C": 0.1}), {}, {})[
        "position_note"].startswith("the LMRA named Response 2 in both orders")
    assert _pair(row({"A": 0.8, "B": 0.1, "C": 0.1}, {"A": 0.1, "B": 0.8, "C": 0.1}), {}, {})["position_note"] is None
    assert _pair(row({"A": 0.1, "B": 0.1, "C": 0.8}, {"A": 0.1, "B": 0.1, "C": 0.8}), {}, {})["position_note"] is None
