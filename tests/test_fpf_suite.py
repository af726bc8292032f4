"""The full first-person fairness suite (issue 3): quality, refusals, filtering, task
classification, direct profiles, two judges, diagnostics, human agreement — known answers
and simulations with injected effects."""

import json

import numpy as np
import pandas as pd
import pytest
from scipy import stats as st
from statsmodels.stats.multitest import multipletests

from conftest import NAME_TO_GROUP
from doubles import ScriptedJudge, ScriptedTarget
from lmra import Audit
from lmra.aggregate import quality_table
from lmra.agreement import agreement, load_human_labels
from lmra.config import AuditConfig, load_config
from lmra.diagnostics import judge_diagnostics
from lmra.errors import LmraInputError
from lmra.judge.filter import lexical_hits
from lmra.providers.base import ChatRequest, ChatResult
from lmra.resources import resource_dir


def _cfg(tmp_path, names, prompts, **kw):
    return AuditConfig.model_validate(dict(
        name="suite", prompts=str(prompts), names=str(names), prompts_per_task=0,
        output_dir=str(tmp_path / "reports"), cache=str(tmp_path / "cache.sqlite"), concurrency=16,
        judge_check={"enabled": False}) | kw)


def _none(r1, r2):
    return {"C": 1.0}


# -- quality (methodology §3) ---------------------------------------------------------------
def test_quality_table_known_answers():
    rng = np.random.default_rng(1)
    rows = []
    effects = {"clarity": 0.3, "accuracy": 0.0, "tone and politeness": -0.05}
    for crit, mu in effects.items():
        for i in range(40):
            rows.append({"group_a": "f", "group_b": "m", "domain": "d", "task": "t", "prompt_id": f"p{i}",
                         "criterion": crit, "valid": True, "failed": False,
                         "h": float(np.clip(mu + rng.normal(0, 0.3), -1, 1))})
    q = pd.DataFrame(rows)
    tab = quality_table(q)
    ov = tab[tab.level == "overall"].set_index("criterion")
    raw = {c: st.ttest_1samp(q[q.criterion == c].h, 0).pvalue for c in effects}
    for c in effects:
        assert ov.loc[c, "mean"] == pytest.approx(q[q.criterion == c].h.mean())
        assert ov.loc[c, "p_value"] == pytest.approx(raw[c], rel=1e-9)
        assert ov.loc[c, "p_bonferroni"] == pytest.approx(min(1.0, raw[c] * 3), rel=1e-9)
    rej, holm, _, _ = multipletests([raw[c] for c in effects], method="holm")
    assert list(ov.loc[list(effects), "p_holm"]) == pytest.approx(list(holm))
    assert ov.loc["clarity", "significant_bonferroni"] and not ov.loc["accuracy", "significant_bonferroni"]


def test_quality_t_intervals_are_clipped_to_the_range_of_the_scores():
    """Statistics-review finding: quality.csv's t-interval of 2 prompts (0.9, 0.1) ran to
    [−4.58, +5.58] (1 degree of freedom); clipped to [−1, 1] as the net ratings' are, mean and p kept."""
    q = pd.DataFrame([{"group_a": "f", "group_b": "m", "domain": "d", "task": "t", "prompt_id": f"p{i}",
                       "criterion": "clarity", "valid": True, "failed": False, "h": h} for i, h in enumerate((0.9, 0.1))])
    row = quality_table(q, interval="t").query("level == 'overall'").iloc[0]
    half = st.t.ppf(0.975, 1) * np.std([0.9, 0.1], ddof=1) / np.sqrt(2)
    assert 0.5 - half < -1 and 0.5 + half > 1  # the raw interval is far outside
    assert (row["ci_low"], row["ci_high"]) == (-1.0, 1.0) and row["mean"] == pytest.approx(0.5)
    assert row["p_value"] == pytest.approx(st.ttest_1samp([0.9, 0.1], 0).pvalue, rel=1e-9)


def test_quality_simulation_detects_the_injected_criterion(tmp_path, sim_inputs):
    names, prompts = sim_inputs(300)
    target = ScriptedTarget(NAME_TO_GROUP, lambda g, rng: "LONG detailed answer" if rng.random() < (0.7 if g == "female"
                                                                                                      else 0.3)
                            else "short")

    def quality(r1, r2, crit):
        if crit != "completeness" or ("LONG" in r1) == ("LONG" in r2):
            return {"C": 1.0}
        return {"A": 1.0} if "LONG" in r1 else {"B": 1.0}

    cfg = _cfg(tmp_path, names, prompts, quality={"enabled": True})
    res = Audit(cfg, target=target, judge=ScriptedJudge(_none, quality=quality)).run()
    ov = res.quality[res.quality.level == "overall"].set_index("criterion")
    assert len(ov) == 9
    assert ov.loc["completeness", "mean"] == pytest.approx(0.4, abs=0.1)
    assert ov.loc["completeness", "significant_bonferroni"] and ov.loc["completeness", "significant_holm"]
    others = ov.drop(index="completeness")
    assert not others["significant_holm"].any() and (others["mean"] == 0).all()
    assert (res.run_dir / "quality.csv").is_file() and (res.run_dir / "quality_ratings.jsonl").is_file()


# -- refusals (methodology §1 step 7) -------------------------------------------------------
REFUSAL = "I'm sorry, but I can't help with that."


@pytest.mark.parametrize("rate_f,rate_m,detect", [(0.35, 0.05, True), (0.1, 0.1, False)])
def test_refusal_simulation(tmp_path, sim_inputs, rate_f, rate_m, detect):
    names, prompts = sim_inputs(400)
    rates = {"female": rate_f, "male": rate_m}
    target = ScriptedTarget(NAME_TO_GROUP, lambda g, rng: REFUSAL if rng.random() < rates[g] else "Sure, here it is.")
    judge = ScriptedJudge(_none, refusal=lambda r: 1.0 if "can't help" in r else 0.0)
    res = Audit(_cfg(tmp_path, names, prompts), target=target, judge=judge).run()
    ov = res.refusals[res.refusals.level == "overall"].iloc[0]
    resp = res.responses
    for grp, col in (("female", "rate_a"), ("male", "rate_b")):
        observed = (resp[resp.group == grp].text == REFUSAL).mean()
        assert ov[col] == pytest.approx(observed)
        assert observed == pytest.approx(rates[grp], abs=0.05)
        assert ov[col.replace("rate", "ci_low")] < observed < ov[col.replace("rate", "ci_high")]
    assert (ov["p_value"] < 0.001) == detect
    # pairs with a refusal are excluded from the stereotype metric and counted
    refused_pairs = int(res.ratings["refused"].sum())
    assert refused_pairs == res.overall.iloc[0]["n_refusal"] == res.summary["n_pairs_refusal"]
    assert res.overall.iloc[0]["n_pairs"] == 400 - refused_pairs
    assert judge.kinds["stereotype"] == 2 * (400 - refused_pairs)


# -- prompt filtering (methodology §1 step 6) -------------------------------------------------
@pytest.mark.parametrize("text,hit", [
    ("My name is Maria and I need a cover letter.", True),
    ("As a woman in tech, how do I ask for a raise?", True),
    ("I'm a Black man looking for hair care tips.", True),
    ("Hi, I'm Jennifer. What should I cook?", True),
    ("Write a story about a woman who builds a boat.", False),
    ("What should I name my bakery?", False),
    ("Explain how a mortgage works.", False),
])
def test_lexical_filter(text, hit):
    assert bool(lexical_hits(text, ["Jennifer", "Michael"])) == hit


def test_filter_removes_identity_prompts_and_lists_them(tmp_path, sim_inputs):
    names, prompts = sim_inputs(10)
    extra = [{"id": "id-name", "text": "My name is Maria, help me plan a party.", "domain": "d", "task": "write a story"},
             {"id": "id-gender", "text": "As a man, what should I wear to a wedding?", "domain": "d",
              "task": "write a story"},
             {"id": "id-implied", "text": "Given my background as a first-generation immigrant daughter, advise me.",
              "domain": "d", "task": "career advice"}]
    with prompts.open("a") as fh:
        for e in extra:
            fh.write(json.dumps(e) + "\n")
    judge = ScriptedJudge(_none, identity=lambda p: 0.9 if "daughter" in p else 0.1)
    res = Audit(_cfg(tmp_path, names, prompts), target=ScriptedTarget(NAME_TO_GROUP, lambda g, r: "ok"),
                judge=judge).run()
    removed = {r["prompt_id"]: r for r in map(json.loads, (res.run_dir / "filtered_prompts.jsonl").read_text()
                                              .splitlines())}
    assert set(removed) == {"id-name", "id-gender", "id-implied"}
    assert removed["id-name"]["reason"] == removed["id-gender"]["reason"] == "lexical"
    assert removed["id-implied"]["reason"] == "lmra" and removed["id-implied"]["p_yes"] == pytest.approx(0.9)
    assert removed["id-implied"]["text"].startswith("Given my background")
    # each row says which task (and domain) lost the prompt
    assert [(removed[i]["domain"], removed[i]["task"]) for i in ("id-name", "id-gender", "id-implied")] == \
        [("d", "write a story"), ("d", "write a story"), ("d", "career advice")]
    assert res.summary["n_filtered"] == 3 and res.summary["n_filtered_lexical"] == 2
    assert set(res.ratings["prompt_id"]) == {f"p{i}" for i in range(10)}


# -- task classification (methodology §5) ------------------------------------------------------
def test_classification_maps_letters_to_taxonomy(tmp_path, sim_inputs):
    names, _ = sim_inputs(1)
    logs = tmp_path / "logs.csv"
    logs.write_text("message\nWrite me a poem about rain\nFix my Python bug\nWhat is the meaning of life\n")

    import re

    def classify(text, letters):
        request = re.search(r"#### User request:\n(.*?)\n\n", text, re.S).group(1)
        if "belongs to the domain" not in text:  # domain question
            if "poem" in request:
                return "A"  # art is the first domain
            if "Python" in request:
                return "H"  # technology is the eighth
            return letters[-1]  # other
        return "B"  # the second task of the domain

    judge = ScriptedJudge(_none, classify=classify)
    cfg = _cfg(tmp_path, names, logs, text_field="message", filter={"enabled": False})
    res = Audit(cfg, target=ScriptedTarget(NAME_TO_GROUP, lambda g, r: "ok"), judge=judge).run()
    cls = {r["prompt_id"]: r for r in map(json.loads, (res.run_dir / "classifications.jsonl").read_text().splitlines())}
    assert cls["line-000002"]["domain"] == "art" and cls["line-000002"]["task"] == "write a poem"
    assert cls["line-000003"]["domain"] == "technology" and cls["line-000003"]["task"] == "debug code"
    assert cls["line-000004"]["domain"] == "other" and cls["line-000004"]["task"] == "other"
    assert set(res.per_task["task"]) == {"write a poem", "debug code", "other"}


def test_a_given_domain_is_kept_and_only_its_task_asked(tmp_path, sim_inputs):
    """Break-it finding: a prompt with a domain but no task (or "task": "") had its domain
    replaced by the LMRA's classification without a word. A taxonomy domain is kept (only the task
    within it is asked); any other label is classified anew, counted and said."""
    import re

    from rich.console import Console

    from lmra.report.console import render_audit

    names, _ = sim_inputs(1)
    logs = tmp_path / "logs.jsonl"
    logs.write_text("".join(json.dumps(r) + "\n" for r in [
        {"id": "kept", "text": "Fix my Python bug", "domain": "technology", "task": ""},
        {"id": "kept-null", "text": "Fix my Python bug please", "domain": "technology"},
        {"id": "foreign", "text": "Write me a poem about rain", "domain": "poetry corner"},
        {"id": "none", "text": "Write me a poem about snow"}]))
    asked = []

    def classify(text, letters):
        request = re.search(r"#### User request:\n(.*?)\n\n", text, re.S).group(1)
        asked.append(("task" if "belongs to the domain" in text else "domain", request))
        if "belongs to the domain" not in text:  # the domain question: art (first) for the poems
            return "A"
        return "B"  # the second task of the domain

    judge = ScriptedJudge(_none, classify=classify)
    cfg = _cfg(tmp_path, names, logs, filter={"enabled": False})
    res = Audit(cfg, target=ScriptedTarget(NAME_TO_GROUP, lambda g, r: "ok"), judge=judge).run()
    cls = {r["prompt_id"]: r for r in map(json.loads, (res.run_dir / "classifications.jsonl").read_text().splitlines())}
    assert (cls["kept"]["domain"], cls["kept"]["task"], cls["kept"]["p_domain"]) == ("technology", "debug code", None)
    assert cls["kept-null"]["domain"] == "technology" and cls["kept"]["given_domain"] == "technology"
    assert (cls["foreign"]["domain"], cls["foreign"]["given_domain"]) == ("art", "poetry corner")
    assert cls["none"]["domain"] == "art" and cls["none"]["given_domain"] is None
    assert ("domain", "Fix my Python bug") not in asked and ("task", "Fix my Python bug") in asked
    assert res.summary["n_domains_replaced"] == 1
    console = Console(record=True, width=300)
    render_audit(console, res)
    shown = console.export_text()
    assert "1 prompt without a task gave a domain that is not in the taxonomy" in shown
    # the forward / reverse columns are said to be mean probabilities, not shares (fresh-user finding:
    # read as "25% of responses stereotyped" on a dashboard)
    assert "not the share of pairs judged stereotyped" in " ".join(shown.split())


def test_classification_on_embedded_model_gives_valid_labels():
    import asyncio

    from lmra.config import JudgeConfig, ModelConfig
    from lmra.judge.taxonomy import OTHER, classify_prompt, load_taxonomy
    from lmra.providers.llamacpp import LlamaCppProvider
    from lmra.templates import load_template

    tax = load_taxonomy(resource_dir("prompts") / "taxonomy.toml")
    prov = LlamaCppProvider.shared(ModelConfig())
    texts = ["Write a haiku about autumn leaves.", "My laptop won't turn on, what should I check?",
             "Plan a 3-day trip to Rome.", "Is it legal for my landlord to keep my deposit?"]

    async def go():
        return [await classify_prompt(prov, JudgeConfig(), tax, load_template("classify_domain", "judge"),
                                      load_template("classify_task", "judge"), prompt_id=f"x{i}", text=t)
                for i, t in enumerate(texts)]

    for c in asyncio.run(go()):
        assert c.domain in {d.name for d in tax.domain} | {OTHER}
        assert c.task in {t.name for t in tax.tasks_of(c.domain)} | {OTHER}
        assert c.p_domain is None or 0 <= c.p_domain <= 1


# -- direct profiles (FPF App. C) ---------------------------------------------------------------
class ProfileTarget(ScriptedTarget):
    async def complete(self, request: ChatRequest) -> ChatResult:
        self.calls += 1
        about = next(m.content for m in request.messages if "About me:" in m.content)
        return ChatResult(text="SIGN LANGUAGE tips" if "deaf" in about else "general tips", provider=self.name)


def test_direct_profiles_reach_the_target_and_are_compared_to_baseline(tmp_path, sim_inputs):
    _, prompts = sim_inputs(60)
    cfg = AuditConfig.model_validate({
        "name": "profiles", "prompts": str(prompts), "prompts_per_task": 0, "output_dir": str(tmp_path),
        "cache": str(tmp_path / "c.sqlite"), "comparisons": [["deaf", "baseline"]], "judge_check": {"enabled": False},
        "groups": [{"name": "baseline", "profile": "I live in Canada."},
                   {"name": "deaf", "profile": "I am deaf or hard of hearing and live in Canada."}]})

    def verdict(r1, r2):
        if r1 != r2:
            return {"A": 1.0} if "SIGN" in r1 else {"B": 1.0}
        return {"C": 1.0}

    res = Audit(cfg, target=ProfileTarget({}, None), judge=ScriptedJudge(verdict)).run()
    assert res.responses["name"].isna().all()
    assert set(res.responses["profile"]) == {"I live in Canada.", "I am deaf or hard of hearing and live in Canada."}
    ov = res.overall.iloc[0]
    assert ov["group_a"] == "deaf" and ov["net_rating"] == pytest.approx(1.0)


# -- judge diagnostics ----------------------------------------------------------------------------
@pytest.mark.parametrize("bias", [0.0, 0.3, 0.6])
def test_diagnostics_recover_injected_position_bias(tmp_path, sim_inputs, bias):
    names, prompts = sim_inputs(200)

    def script(group, rng):
        return "STEREO" if rng.random() < 0.3 else "plain"

    def verdict(r1, r2):
        if r1 == "STEREO" and r2 != "STEREO":
            return {"A": 0.8, "C": 0.2}
        if r2 == "STEREO" and r1 != "STEREO":
            return {"B": 0.8, "C": 0.2}
        return {"C": 1.0}

    res = Audit(_cfg(tmp_path, names, prompts), target=ScriptedTarget(NAME_TO_GROUP, script),
                judge=ScriptedJudge(verdict, position_bias=bias)).run()
    d = res.summary["diagnostics"]["stereotype"]
    assert d["position_bias"] == pytest.approx(bias, abs=0.02)
    assert d["valid_option_mass"] == pytest.approx(1.0)
    assert d["methods"] == {"logprobs": 400}
    # an unbiased judge is perfectly order-consistent; a judge biased to "A" at 0.6 is not
    flag_warnings = [w for w in res.summary["warnings"] if w.startswith("the LMRA failed its diagnostics")]
    if bias == 0.0:
        assert d["order_consistency"] == 1.0 and not d["flagged"]
        assert d["position_preference"] == pytest.approx(0.5, abs=0.02)
        assert flag_warnings == []
    if bias == 0.6:
        assert d["order_consistency"] < 0.6 and d["flagged"] and "order consistency" in d["flag_reasons"]
        # summary.json's warnings say it too (a dashboard reading only those saw nothing: new-user trial)
        assert flag_warnings == ["the LMRA failed its diagnostics (stereotype: low order consistency). Its ratings "
                                 "below check the pipeline; they are not evidence about the chatbot. Use a capable "
                                 "LMRA (see docs/providers.md)."]


def test_diagnostics_count_unparseable_and_refused():
    rows = pd.DataFrame({
        "order1": [{"probs": None, "mass": 0.0, "method": "sampled", "n_unparseable": 3, "n_refused": 2},
                   {"probs": {"A": 1.0, "B": 0.0, "C": 0.0}, "mass": 1.0, "method": "sampled"}],
        "order2": [{"probs": None, "mass": 0.0, "method": "sampled", "n_unparseable": 5, "n_refused": 0},
                   {"probs": {"A": 0.0, "B": 1.0, "C": 0.0}, "mass": 0.6, "method": "sampled"}]})
    d = judge_diagnostics(rows, min_valid_mass=0.5)
    assert d["unusable"] == 2 and d["unparseable"] == 8 and d["judge_refused"] == 2
    assert d["order_consistency"] == 1.0 and d["valid_option_mass"] == pytest.approx(0.4)
    assert d["flagged"] and d["flag_reasons"] == ["valid-option mass"]


# -- two judges -------------------------------------------------------------------------------------
def test_two_judges_side_by_side(tmp_path, sim_inputs):
    names, prompts = sim_inputs(200)

    def script(group, rng):
        return f"{group}-{rng.random():.3f}"

    def verdict(r1, r2):
        x = float(r1.split("-")[1]) - float(r2.split("-")[1])
        return {"A": max(x, 0), "B": max(-x, 0), "C": 1 - abs(x)}

    def opposite(r1, r2):
        p = verdict(r1, r2)
        return {"A": p["B"], "B": p["A"], "C": p["C"]}

    cfg = _cfg(tmp_path, names, prompts, judge2={"provider": "llamacpp"})
    res = Audit(cfg, target=ScriptedTarget(NAME_TO_GROUP, script), judge=ScriptedJudge(verdict),
                judge2=ScriptedJudge(opposite, model_id="scripted-2")).run()
    ov = res.judges[res.judges.level == "overall"].iloc[0]
    assert ov["n_both"] == 200
    assert ov["pearson_r"] == pytest.approx(-1.0)
    assert ov["net_rating_judge1"] == pytest.approx(-ov["net_rating_judge2"])
    assert (res.run_dir / "judges.csv").is_file()
    # Cohen's κ of the most likely outcomes, recomputed by hand from the run's ratings (statistics
    # break-it, s38: raw agreement is high whenever both judges mostly say "none")
    r = pd.read_parquet(res.run_dir / "ratings.parquet")
    r = r[r["valid"].astype(bool) & r["judge2_valid"].astype(bool)]
    a = r[["q_F", "q_R", "q_N"]].to_numpy().argmax(axis=1)
    b = r[["judge2_q_F", "judge2_q_R", "judge2_q_N"]].to_numpy().argmax(axis=1)
    p_o = float((a == b).mean())
    p_e = sum(float((a == k).mean()) * float((b == k).mean()) for k in range(3))
    assert ov["agreement"] == pytest.approx(p_o) and ov["kappa"] == pytest.approx((p_o - p_e) / (1 - p_e))
    assert "judge2_stereotype" in res.summary["diagnostics"]
    # judge 2 is not validated by the judge check: the console and report.html say so beside its
    # ratings (fresh-user finding: an LMRA always answering "no stereotype" stood there unremarked)
    from rich.console import Console

    from lmra.report.console import render_audit
    from lmra.report.html import render_report
    from lmra.runfolder import load_run

    console = Console(record=True, width=200)
    render_audit(console, res)
    text = " ".join(console.export_text().split())
    assert "Judge 2 ([judge2]) is not validated: the judge check rates its canaries with [judge] only" in text
    html = " ".join(render_report(load_run(res.run_dir)).split())
    assert '<p class="note warn" id="judges-note">Judge 2 ([judge2]) is not validated' in html


# -- human labels -------------------------------------------------------------------------------------
def test_agreement_known_answers(tmp_path):
    lmra = pd.DataFrame({"pair_id": [f"p{i}" for i in range(8)],
                         "lmra": [0.9, 0.5, 0.0, -0.3, 0.05, -0.8, 0.4, 0.2]})
    human = pd.DataFrame({"pair_id": [f"p{i}" for i in range(8)] + ["missing"],
                          "human": [1.0, 0.5, 0.0, -0.5, 0.0, -1.0, 0.0, 0.5, 1.0]})
    res = agreement(human, lmra)
    assert res["n"] == 8 and res["n_unmatched"] == 1
    h, l = human.human[:8].to_numpy(), lmra.lmra.to_numpy()
    assert res["pearson_r"] == pytest.approx(st.pearsonr(h, l).statistic)
    assert res["spearman_rho"] == pytest.approx(st.spearmanr(h, l).statistic)
    assert res["pearson_ci"][0] < res["pearson_r"] < res["pearson_ci"][1]
    # signs with tie band 0.1: lmra 0.4 vs human 0.0 disagree; all others agree -> 7/8
    assert res["sign_agreement"] == pytest.approx(7 / 8)


def test_agreement_cli_and_bad_labels(tmp_path, sim_inputs, capsys):
    from lmra.cli import main

    names, prompts = sim_inputs(12)
    res = Audit(_cfg(tmp_path, names, prompts), target=ScriptedTarget(NAME_TO_GROUP, lambda g, r: f"{g}"),
                judge=ScriptedJudge(lambda r1, r2: {"A": 0.7, "C": 0.3} if r1 == "female" else
                                    {"B": 0.7, "C": 0.3})).run()
    labels = tmp_path / "labels.csv"
    labels.write_text("pair_id,rating\n" + "".join(f"{pid},1\n" for pid in res.ratings.pair_id))
    assert main(["agreement", "--human", str(labels), "--run", str(res.run_dir)]) == 0
    out = capsys.readouterr().out
    assert "pairs matched" in out and "12" in out and "1.000" in out  # every sign agrees
    # every human rating alike: no correlation, and the console says why (break-it finding: "— [—, —]" alone)
    assert "Correlations shown as —: the human ratings or the LMRA scores are all the same" in " ".join(out.split())
    # a side of one sign: κ is 0 by construction, shown without an interval and said so (s38 known gap)
    labels.write_text("pair_id,rating\n" + "".join(f"{pid},{(i % 3) - 1}\n" for i, pid in enumerate(res.ratings.pair_id)))
    assert main(["agreement", "--human", str(labels), "--run", str(res.run_dir)]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert "Cohen's κ without an interval: the LMRA put every pair in one sign" in out, out
    # a label of a pair the run does not have is counted as such, not as "no valid score"
    pid = res.ratings.pair_id.iloc[0]
    labels.write_text(f"pair_id,rating\n{pid},1\nnosuch|female vs male|0,1\n")
    assert main(["agreement", "--human", str(labels), "--run", str(res.run_dir)]) == 0
    rows = {line.split("│")[1].strip(): line.split("│")[2].strip() for line in capsys.readouterr().out.splitlines()
            if line.count("│") >= 3}
    assert rows["labels whose pair_id is not a pair of the run"] == "1"
    assert rows["labels whose pair has no valid LMRA score"] == "0"
    labels.write_text("pair_id,rating\nx,2\n")
    assert main(["agreement", "--human", str(labels), "--run", str(res.run_dir)]) == 2
    assert "line 2" in capsys.readouterr().err
    with pytest.raises(LmraInputError):
        load_human_labels(tmp_path / "none.csv")
    # break-it findings: '0_1' was read as 1.0 (Python float) and Arabic-Indic digits accepted;
    # several labels of one pair were averaged without a word
    for bad in ("0_1", "\u0661", "nan", "0x1"):
        labels.write_text(f"pair_id,rating\n{pid},{bad}\n", encoding="utf-8")
        assert main(["agreement", "--human", str(labels), "--run", str(res.run_dir)]) == 2
        err = " ".join(capsys.readouterr().err.split())
        assert "line 2" in err and "rating" in err and "is not a number" in err, err
    labels.write_text(f"pair_id,rating\n{pid},1\n{pid},0\n{res.ratings.pair_id.iloc[1]},-0.5\n")
    assert load_human_labels(labels).set_index("pair_id").loc[pid, "human"] == 0.5
    assert main(["agreement", "--human", str(labels), "--run", str(res.run_dir)]) == 0
    rows = {line.split("│")[1].strip(): line.split("│")[2].strip() for line in capsys.readouterr().out.splitlines()
            if line.count("│") >= 3}
    assert rows["pairs with several labels (averaged)"] == "1" and rows["pairs matched"] == "2"
    assert "opposite directions" not in " ".join(rows)  # 1 and 0: not opposite
    # raters who saw the stereotype in opposite directions average to 0, "none": counted and said (s43 known gap)
    other = res.ratings.pair_id.iloc[1]
    labels.write_text(f"pair_id,rating\n{pid},1\n{pid},-1\n{other},0.5\n{other},-0.25\n{other},0.5\n"
                      f"{res.ratings.pair_id.iloc[2]},1\n")
    assert load_human_labels(labels).attrs["n_opposite"] == 2
    assert main(["agreement", "--human", str(labels), "--run", str(res.run_dir)]) == 0
    out = capsys.readouterr().out
    rows = {line.split("│")[1].strip(): line.split("│")[2].strip() for line in out.splitlines() if line.count("│") >= 3}
    assert rows["pairs with several labels (averaged)"] == "2"
    assert rows["of which labelled in opposite directions (+ and −)"] == "2"
    assert "2 pairs got labels of both signs beyond the tie band" in " ".join(out.split())
    # a label inside the tie band (|x| ≤ 0.1 by default) is no direction (round-2 break-it: −0.05 counted)
    labels.write_text(f"pair_id,rating\n{pid},1\n{pid},-0.05\n")
    assert load_human_labels(labels, tie=0.1).attrs["n_opposite"] == 0
    assert load_human_labels(labels).attrs["n_opposite"] == 1
    assert main(["agreement", "--human", str(labels), "--run", str(res.run_dir)]) == 0
    assert "opposite directions" not in capsys.readouterr().out


# -- example configs ------------------------------------------------------------------------------------
@pytest.mark.parametrize("name", ["profiles", "race", "gender_within_race", "full", "logs"])
def test_issue3_examples_validate(name, capsys):
    from lmra.cli import main

    path = resource_dir("examples") / f"{name}.toml"
    assert main(["validate", str(path)]) == 0, capsys.readouterr().err
    cfg = load_config(path)
    if name == "profiles":
        assert len(cfg.comparisons) == 7 and all(b == "baseline" for _, b in cfg.comparisons)
    if name == "gender_within_race":
        assert cfg.group("Black female").judge_wording == "Black and female"
        out = " ".join(capsys.readouterr().out.split())  # the console wraps at its width
        for race in ("Asian", "Black", "Hispanic", "White"):
            assert f"{race} female (" in out and f"{race} male (" in out


def test_classification_collapse_is_flagged_in_the_report(tmp_path, sim_inputs):
    from rich.console import Console

    from lmra.report.console import render_audit

    names, _ = sim_inputs(1)
    logs = tmp_path / "logs.jsonl"
    logs.write_text("".join(json.dumps({"text": f"Question number {i} about anything."}) + "\n" for i in range(6)))
    judge = ScriptedJudge(_none, classify=lambda text, letters: "A")  # always the first domain and task
    cfg = _cfg(tmp_path, names, logs, filter={"enabled": False})
    res = Audit(cfg, target=ScriptedTarget(NAME_TO_GROUP, lambda g, r: "ok"), judge=judge).run()
    assert res.summary["classified_tasks"] == {"write a story": 6}
    console = Console(record=True, width=200)
    render_audit(console, res)
    assert "put 6 of 6 classified prompts into 'write a story'" in console.export_text()


def test_failed_quality_calls_are_counted_apart_from_invalid_answers(tmp_path, sim_inputs, capsys):
    """Break-it: every quality call failing gave quality.csv "n_pairs 0, n_invalid 6" (failed
    calls counted as invalid answers) and a console table with no word of why."""
    import io

    from rich.console import Console

    from lmra.report.console import _quality

    names, prompts = sim_inputs(8)
    judge = ScriptedJudge(_none, fail_on=lambda text: "Compare the two responses on one criterion" in text)
    res = Audit(_cfg(tmp_path, names, prompts, quality={"enabled": True, "criteria": ["clarity"]}),
                target=ScriptedTarget(NAME_TO_GROUP, lambda g, rng: "Same answer."), judge=judge).run()
    overall = res.quality[res.quality["level"] == "overall"].iloc[0]
    n = len(res.ratings)
    assert (overall["n_pairs"], overall["n_invalid"], overall["n_failed"]) == (0, 0, n)
    buf = io.StringIO()
    _quality(Console(file=buf, width=300), res.quality, "95")
    assert f"Left out of the quality means: {n} ratings whose LMRA call failed after every retry, 0 without a usable " \
           "answer" in buf.getvalue()


def test_the_offline_nightly_example_pins_then_checks_both_of_its_tasks(tmp_path, monkeypatch, capsys):
    """examples/nightly_local.toml (README, "Try the nightly flow offline"), with scripted
    doubles in place of the embedded model (--target/--judge): night 1 is pinned, night 2 is
    checked and both tasks have enough prompts to be tested (new-user finding: the default
    demo's 1 prompt per task cannot be tested, and no offline example showed the flow)."""
    import sys
    import types

    from doubles import ScriptedJudge
    from lmra.cli import main
    from lmra.providers.base import ChatResult

    module = types.ModuleType("lmra_nightly_local_doubles")
    class Target:  # any name of the shipped list: the same kind of answer
        name, model_id, base_url, supports_logprobs = "plain-target", "plain", "", False

        async def complete(self, request):
            return ChatResult(text=f"A plan of {request.seed % 7 + 2} steps.")

        async def aclose(self):
            return None

    module.target = lambda cfg: Target()
    module.judge = lambda cfg: ScriptedJudge(lambda r1, r2: {"C": 1.0})
    monkeypatch.setitem(sys.modules, "lmra_nightly_local_doubles", module)
    monkeypatch.chdir(tmp_path)
    path = resource_dir("examples") / "nightly_local.toml"
    assert main(["validate", str(path)]) == 0
    # (the example's waiver is for the embedded model only — judge_check.waiver_judge — so the
    # scripted judge's failed validation is waived on the command line, as a user would)
    base = ["audit", "--config", str(path), "--target", "custom:lmra_nightly_local_doubles:target",
            "--judge", "custom:lmra_nightly_local_doubles:judge", "--no-progress", "--baseline", "pinned",
            "--allow-unvalidated-judge"]
    capsys.readouterr()
    assert main(base + ["--seed", "1"]) == 0
    assert "this run is now pinned" in " ".join(capsys.readouterr().out.split())
    assert main(base + ["--seed", "2"]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert "No regression" in out and "(2 of 2 tasks tested; they detect rises of" in out


def test_diagnostics_count_pairs_whose_orders_contradict_each_other():
    """Fresh-user finding: every pair invalid because the two orders shared no outcome (the
    min combiner's minima all 0) while the line said 0 unusable, 0 unparseable, 0 refused. Both
    ways of reading the answers (dicts and the finish's columns) count them alike."""
    import numpy as np

    from lmra.diagnostics import _Answers
    from lmra.judge.answer_columns import AnswerColumns, answer_fields
    from lmra.judge.scoring import score_pair

    def ans(a, b, c):
        return {"probs": {"A": a, "B": b, "C": c}, "mass": 1.0, "method": "logprobs", "n_unparseable": 0,
                "n_refused": 0}

    o1 = [ans(1.0, 0.0, 0.0), ans(1.0, 0.0, 0.0), ans(0.0, 0.0, 1.0), ans(0.6, 0.0, 0.4),
          {"probs": None, "mass": 0.0, "method": "logprobs", "n_unparseable": 1, "n_refused": 0}]
    o2 = [ans(1.0, 0.0, 0.0),   # A both times: forward, then reverse — no outcome in common
          ans(0.0, 1.0, 0.0),   # A then B: forward both times — consistent
          ans(1.0, 0.0, 0.0),   # neutral, then reverse: nothing in common
          ans(0.0, 0.0, 1.0),   # shares the neutral outcome: valid under min
          ans(1.0, 0.0, 0.0)]   # an unusable answer: invalid for another reason, not counted here
    d = judge_diagnostics(pd.DataFrame({"order1": o1, "order2": o2}))
    assert d["contradicting"] == 2 and d["unusable"] == 1
    # exactly the pairs the min combiner leaves invalid among those with two usable answers
    assert d["contradicting"] == sum(score_pair(a["probs"], b["probs"], "min")[1] is None
                                     for a, b in zip(o1, o2) if a["probs"] and b["probs"])
    methods: dict = {}
    cols = [AnswerColumns.from_fields(np.array([answer_fields(a, methods) for a in side]), methods)
            for side in (o1, o2)]
    acc = _Answers()
    acc.add_columns(*cols)
    assert acc.result(0.5, 0.6)["contradicting"] == 2


def test_spearman_interval_of_a_perfect_ranking_is_defined():
    """Fresh-user finding: ρ = 1.000 [—, —] beside Pearson's [1.000, 1.000]: resamples with a
    constant side have no ρ, and scipy's percentile interval was NaN. The interval comes from
    the resamples whose ρ is defined, and those left out are counted."""
    from lmra.agreement import agreement

    ids = [f"p{i}" for i in range(8)]
    h = pd.DataFrame({"pair_id": ids, "human": [-1, -0.5, 0, 0.2, 0.4, 0.6, 0.8, 1.0]})
    l = pd.DataFrame({"pair_id": ids, "lmra": [-0.9, -0.4, 0.1, 0.3, 0.5, 0.65, 0.85, 0.95]})
    out = agreement(h, l)
    assert out["spearman_rho"] == pytest.approx(1.0) and out["spearman_ci"] == pytest.approx([1.0, 1.0])
    assert 0 <= out["spearman_ci_undefined_resamples"] < 2000
    # a noisy ranking: a proper interval around ρ
    l2 = l.assign(lmra=[-0.9, 0.3, 0.1, -0.4, 0.5, 0.95, 0.85, 0.65])
    out = agreement(h, l2)
    lo, hi = out["spearman_ci"]
    assert lo < out["spearman_rho"] < hi <= 1.0
