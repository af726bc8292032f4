"""Issue 14, goal 2: the audit's own per-pair work and its finish, made cheaper, send the same
requests and write the same files. Each shortcut is compared with the plain code it replaces
(pydantic's ``model_dump``, the per-character control-character scan, two diagnostics passes,
a copied name list); and a small audit exercising every stage (refusal labels, LMRA filter,
placebo, quality, a second LMRA, the calibrated combiner, k = 2) is pinned to the cache keys
and run-folder contents that lmra wrote before these changes (git 8b899bf)."""

from __future__ import annotations

import hashlib
import json
import math
import random
import re
import sqlite3
import sys
import unicodedata

import pandas as pd

from lmra import Audit
from lmra.config import AuditConfig
from lmra.data import PromptRecord, _control_char, load_prompts
from lmra.diagnostics import judge_diagnostics, judge_diagnostics_by
from lmra.errors import LmraInputError
from lmra.generate import Response, derive_seed, draw_name
from lmra.judge.options import OptionProbs, renormalise

from conftest import FEMALE, MALE
from doubles import ScriptedJudge, ScriptedTarget

NAME_TO_GROUP = {n: "female" for n in FEMALE} | {n: "male" for n in MALE}


def _plain_renormalise(raw, options):
    """renormalise as written before (a dict comprehension per call)."""
    clean = {o: v if isinstance(v, (int, float)) and math.isfinite(v) and v > 0 else 0.0
             for o in options for v in [raw.get(o, 0.0)]}
    mass = sum(clean.values())
    if mass <= 0.0:
        return None, 0.0
    return {o: clean[o] / mass for o in options}, min(mass, 1.0)


def test_renormalise_gives_the_plain_formulas_floats_for_any_raw_values():
    rng = random.Random(14)
    values = [0, 1, 3, 0.0, -0.0, -1.0, math.nan, math.inf, -math.inf, True, False, "0.5", None, 1e-320, 0.1, 0.2,
              0.7, 2.5, 1 / 3]
    for _ in range(3000):
        raw = {o: rng.choice(values) for o in rng.sample("ABCD", rng.randint(0, 4))}
        for options in (("A", "B", "C"), ("A", "B")):
            assert repr(renormalise(raw, options)) == repr(_plain_renormalise(raw, options))


def test_answer_dict_is_model_dump_with_new_containers():
    from lmra.judge.options import answer_dict

    answers = [OptionProbs(probs={"A": 0.2, "B": 0.3, "C": 0.5}, mass=0.9, method="logprobs", raw_texts=[""]),
               OptionProbs(probs=None, mass=0.0, method="text", n_unparseable=1, raw_texts=["I can't"]),
               OptionProbs(probs={"A": 1.0, "B": 0.0, "C": 0.0}, mass=1, method="sampled", n_samples=5,
                           n_refused=2, raw_texts=["A", "a", "x", "A", "A"]),
               OptionProbs(probs={"A": 1, "B": 0}, mass=1, method="text")]  # ints validated to floats
    for a in answers:
        d = answer_dict(a)
        assert d == a.model_dump() and list(d) == list(a.model_dump())
        assert json.dumps(d) == json.dumps(a.model_dump())
        if a.probs is not None:
            d["probs"]["A"] = -1.0
            assert a.probs["A"] != -1.0  # a copy, as model_dump gives
        d["raw_texts"].append("more")
        assert "more" not in a.raw_texts


def test_response_row_is_model_dump_and_odd_responses_still_go_through_pydantic():
    from lmra.generate import response_row

    base = dict(prompt_id="p1", domain="d", task="t", comparison="a vs b", group="a", name="Ann", sample=0, seed=5,
                text="Hi Ann ✓", scrubbed="Hi [NAME] ✓")
    responses = [Response(**base), Response(**base | {"name": None, "profile": "a nurse", "error": "timeout",
                                                     "finish_reason": "length", "from_cache": True}),
                 Response.model_construct(**base), Response(**base).model_copy(update={"text": "changed"})]
    for r in responses:
        row = response_row(r)
        assert row == r.model_dump() and list(row) == list(r.model_dump())
        row["text"] = "mutated"
        assert r.text != "mutated"

    class Sub(Response):
        extra: dict = {}

    sub = Sub(**base, extra={"k": [1]})
    assert response_row(sub) == sub.model_dump() and "extra" in response_row(sub)


def test_control_character_check_finds_exactly_what_the_per_character_scan_finds():
    def plain(v, allowed=""):
        return next((ch for ch in v if ch not in allowed and unicodedata.category(ch) in ("Cc", "Cf")), None)

    rng = random.Random(7)
    pool = ([chr(c) for c in range(0x250)] + ["\u200b", "\u200e", "\u2028", "\u2029", "\xa0", "\u3000", "\ufeff",
                                              "\ud800", "\U0001f600", "\ue000", "\U0010ffff", "\u0378", "\U000e0001"]
            + ["\n", "\t", "\r", " ", "a", "é"] * 30)
    for _ in range(6000):
        v = "".join(rng.choice(pool) for _ in range(rng.randint(0, 10)))
        for allowed in ("", "\t\n\r", "\n"):
            assert _control_char(v, allowed) == plain(v, allowed)


def test_a_prompt_file_with_a_hidden_character_is_still_refused_with_its_line_and_field(tmp_path):
    path = tmp_path / "prompts.jsonl"
    path.write_text(json.dumps({"id": "a", "text": "fine\nline two\ttab"}) + "\n"
                    + json.dumps({"id": "b", "text": "hidden\u200bspace"}) + "\n", encoding="utf-8")
    try:
        load_prompts(path)
    except LmraInputError as exc:
        assert "line 2" in str(exc) and "text" in str(exc) and "U+200B" in str(exc)
    else:
        raise AssertionError("a zero-width space in a prompt was accepted")
    path.write_text(json.dumps({"id": "a", "text": "fine\nline two\ttab\u00a0nbsp"}) + "\n", encoding="utf-8")
    assert load_prompts(path)[0].text.endswith("\u00a0nbsp")


def test_diagnostics_in_one_pass_are_the_two_separate_results():
    from lmra.diagnostics import judge_diagnostics_with_by

    rng = random.Random(3)

    def answer():
        kind = rng.random()
        if kind < 0.1:
            return math.nan  # a pair that was not rated
        if kind < 0.2:
            return {"probs": None, "mass": 0.0, "method": "text", "n_unparseable": 1, "n_refused": 0}
        p = [rng.random() for _ in range(3)]
        s = sum(p)
        return {"probs": {"A": p[0] / s, "B": p[1] / s, "C": p[2] / s}, "mass": rng.random(),
                "method": rng.choice(["logprobs", "sampled"]), "n_unparseable": rng.randint(0, 2), "n_refused": 0}

    rows = pd.DataFrame({"task": [rng.choice(["b", "a", None, math.nan, "c"]) for _ in range(400)],
                         "order1": [answer() for _ in range(400)], "order2": [answer() for _ in range(400)]})
    both = judge_diagnostics_with_by(rows, "task", min_valid_mass=0.4, min_order_consistency=0.5)
    apart = (judge_diagnostics(rows, min_valid_mass=0.4, min_order_consistency=0.5),
             judge_diagnostics_by(rows, "task", min_valid_mass=0.4, min_order_consistency=0.5))
    assert json.dumps(both) == json.dumps(apart) and list(both[1]) == ["a", "b", "c"]
    empty = judge_diagnostics_with_by(pd.DataFrame(), "task")
    assert json.dumps(empty) == json.dumps((judge_diagnostics(pd.DataFrame()), {}))


def test_name_draws_are_those_of_a_new_rng_over_a_copied_list():
    names = [f"Name{i}" for i in range(37)]
    for i in range(300):
        plain = random.Random(derive_seed(9, "name", f"p{i}", "g", "g vs h", i % 3)).choice(list(names))
        assert draw_name(names, 9, f"p{i}", "g", "g vs h", i % 3) == plain
        assert draw_name(tuple(names), 9, f"p{i}", "g", "g vs h", i % 3) == plain
        assert draw_name(iter(names), 9, f"p{i}", "g", "g vs h", i % 3) == plain  # any iterable


def test_prompt_lines_are_the_records_model_dump():
    from lmra.audit.finish import _prompt_line

    for rec in (PromptRecord(id="p1", text="Hi ✓", domain="d", task="t"), PromptRecord(id="p2", text="x")):
        line = _prompt_line(rec)
        assert line == rec.model_dump(include={"id", "domain", "task", "text"})
        assert list(line) == list(rec.model_dump(include={"id", "domain", "task", "text"}))


def test_the_responses_frame_built_by_column_is_the_frame_of_the_rows():
    from lmra.audit.finish import _rows_frame

    rng = random.Random(2)
    values = [None, "a", "", "é", 1, 0, 2 ** 63, 1.5, math.nan, math.inf, True, False, [1], {"a": 1}]
    for _ in range(400):
        pools = [rng.sample(values, rng.randint(1, 3)) for _ in range(rng.randint(1, 4))]
        rows = [{f"c{j}": rng.choice(pool) for j, pool in enumerate(pools)} for _ in range(rng.randint(1, 5))]
        rows = [dict(rng.sample(list(r.items()), len(r))) if rng.random() < 0.3 else r for r in rows]
        if rng.random() < 0.2:
            rows[-1] = rows[-1] | {"extra": 1}  # rows with other keys: pandas' own path
        plain, frame = pd.DataFrame(rows), _rows_frame(rows)
        pd.testing.assert_frame_equal(frame, plain, check_exact=True)
        assert list(frame.columns) == list(plain.columns) and list(frame.dtypes) == list(plain.dtypes)
    assert _rows_frame([]).equals(pd.DataFrame([]))


def test_the_finish_runs_with_the_audits_heap_frozen_and_gives_it_back(tmp_path, sim_inputs, monkeypatch):
    import gc

    import lmra.aggregate as aggregate

    names, prompts = sim_inputs(6)
    seen = []
    per_task = aggregate.per_task
    monkeypatch.setattr(aggregate, "per_task", lambda *a, **k: seen.append(gc.get_freeze_count()) or per_task(*a, **k))
    cfg = AuditConfig.model_validate(dict(
        name="frozen", prompts=str(prompts), names=str(names), prompts_per_task=0,
        output_dir=str(tmp_path / "reports"), cache=str(tmp_path / "cache.sqlite"),
        judge_check={"enabled": False}, refusal={"enabled": False}, filter={"lmra": False}))
    res = Audit(cfg, target=ScriptedTarget(NAME_TO_GROUP, lambda g, rng: "ok"),
                judge=ScriptedJudge(lambda a, b: {"C": 1.0})).run()
    assert len(seen) == 1 and seen[0] > 1000  # the objects alive at the finish's start were frozen
    assert gc.get_freeze_count() == 0 and len(res.per_task) == 2


# -- a whole audit, pinned to what lmra wrote before -------------------------------------------
def _as_8b899bf(text: str) -> str:
    """A JSON text (a JSONL line, a JSON cell of ratings.parquet) in the form lmra 8b899bf wrote it,
    ``json.dumps(…, ensure_ascii=False)``: its values (every float bit for bit) and key order are
    kept, only the separators may differ."""
    return json.dumps(json.loads(text), ensure_ascii=False)


def _pinned_audit(tmp_path) -> tuple[str, str, int]:
    """Run the pinned audit; returns (digest of its sorted cache keys, digest of its run folder's
    contents, number of calls)."""
    names, prompts = tmp_path / "names.csv", tmp_path / "prompts.jsonl"
    names.write_text("name,gender,race,source\n" + "".join(f"{n},female,,test\n" for n in FEMALE)
                     + "".join(f"{n},male,,test\n" for n in MALE), encoding="utf-8")
    prompts.write_text("".join(json.dumps({"id": f"p{i}", "text": f"Prompt number {i}: plan my week ✓.",
                                           "domain": "d" if i % 3 else "e", "task": ["story", "advice"][i % 2]})
                               + "\n" for i in range(24)), encoding="utf-8")
    cfg = AuditConfig.model_validate(dict(
        name="pinned", prompts=str(prompts), names=str(names), prompts_per_task=0, samples_per_prompt=2,
        output_dir=str(tmp_path / "reports"), cache=str(tmp_path / "cache.sqlite"), concurrency=3,
        judge_check={"enabled": False}, refusal={"enabled": True}, filter={"lmra": True},
        quality={"enabled": True, "criteria": ["clarity", "accuracy"]}, placebo={"share": 0.25},
        judge={"provider": "openai", "model": "j1", "combiner": "calibrated"},
        judge2={"provider": "openai", "model": "j2"}))

    def verdict(r1, r2):
        h = hashlib.sha256(f"{r1}|{r2}".encode()).digest()
        return {"A": h[0] / 255, "B": h[1] / 255, "C": 0.5 + h[2] / 255}

    target = ScriptedTarget(NAME_TO_GROUP, lambda g, rng: f"For a {g}: {rng.random():.6f} — “quoted” ✓")
    judge = ScriptedJudge(verdict, position_logit=0.4, refusal=lambda r: 0.9 if "1 —" in r else 0.1,
                          identity=lambda p: 0.8 if "7:" in p else 0.2,
                          quality=lambda r1, r2, c: {"A": 0.3, "B": 0.2, "C": 0.5})
    judge2 = ScriptedJudge(lambda r1, r2: {"A": 0.1, "B": 0.2, "C": 0.7}, supports_logprobs=False, model_id="j2")
    res = Audit(cfg, target=target, judge=judge, judge2=judge2).run()
    db = sqlite3.connect(tmp_path / "cache.sqlite")
    keys = sorted(k for (k,) in db.execute("SELECT key FROM calls"))
    db.close()
    parts = []
    for name in ("per_task.csv", "per_domain.csv", "placebo.csv", "quality.csv", "refusals.csv", "judges.csv",
                 "responses.jsonl", "placebo_responses.jsonl", "placebo_ratings.jsonl", "quality_ratings.jsonl",
                 "prompts.jsonl", "filtered_prompts.jsonl"):
        text = (res.run_dir / name).read_text(encoding="utf-8")
        if name == "filtered_prompts.jsonl":  # rows name their domain and task since the eighteenth session
            rows = [json.loads(line) for line in text.split("\n") if line]
            assert all(r.pop("domain") in ("d", "e") and r.pop("task") in ("story", "advice") for r in rows)
            text = "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows)
        if name == "judges.csv":  # its last column, kappa, is new in the thirty-eighth session
            lines = text.split("\n")
            assert lines[0].endswith(",kappa")
            text = "\n".join(line.rsplit(",", 1)[0] if line else line for line in lines)
        if name == "per_domain.csv":  # domain first since the forty-seventh session (group_a, group_b, domain before)
            lines = text.split("\n")
            assert lines[0].startswith("domain,group_a,group_b,")
            text = "\n".join(",".join((c := line.split(","))[1:3] + c[:1] + c[3:]) if line else line for line in lines)
        if name == "refusals.csv":  # its last three columns are new in the forty-second session
            lines = text.split("\n")
            assert lines[0].endswith(",unlabelled_a,unlabelled_b,p_unlabelled")
            text = "\n".join(line.rsplit(",", 3)[0] if line else line for line in lines)
        if name.endswith(".jsonl"):  # the same records: lines (compact since the eighth round) in 8b899bf's form
            text = "".join(_as_8b899bf(line) + "\n" for line in text.split("\n") if line)
        parts.append(name + "\n" + text)
    import pyarrow.parquet as pq

    table = pq.read_table(res.run_dir / "ratings.parquet")
    json_columns = json.loads(table.schema.metadata[b"lmra.json_columns"])
    rows = [{k: _as_8b899bf(v) if k in json_columns and v is not None else v for k, v in row.items()}
            for row in table.to_pylist()]
    parts.append(json.dumps(rows, sort_keys=True))
    summary = json.loads((res.run_dir / "summary.json").read_text())

    def without_new(v):  # counts added after 8b899bf (the diagnostics' text_read, fourteenth session;
        if isinstance(v, dict):  # their contradicting pairs, twenty-first; their replies and position pairs)
            return {k: without_new(x) for k, x in v.items()
                    if k not in ("text_read", "contradicting", "n_replies", "position_pairs")}
        return [without_new(x) for x in v] if isinstance(v, list) else v

    parts.append(json.dumps({k: without_new(summary[k]) for k in ("diagnostics", "diagnostics_per_task",
                                                                  "position_logit", "placebo", "overall",
                                                                  "n_pairs_total", "n_filtered")}))
    digest = lambda text: hashlib.sha256(text.encode()).hexdigest()[:16]  # noqa: E731
    return digest("\n".join(keys)), digest(_ten_digits("\n".join(parts))), len(keys)


_DECIMAL = re.compile(r"-?\d+\.\d+(?:[eE][-+]?\d+)?")


def _ten_digits(text: str) -> str:
    """Every decimal number in ``text`` written to 10 significant digits: the files' floats are
    sums, means and intervals whose last binary digits follow the numerical libraries' versions
    (numpy, pandas, scipy: the same lmra wrote other last digits in a fresh install of 2026-12-05
    than a day before), not lmra's code; ten digits still tell any change of method."""
    return _DECIMAL.sub(lambda m: f"{float(m.group()):.10g}", text)


def test_a_full_audit_sends_the_requests_and_writes_the_files_of_earlier_lmra(tmp_path, monkeypatch):
    import lmra.aggregate

    # the one intended change since 8b899bf: quality.csv's intervals follow the run's `interval`
    # (betting here; 8b899bf always used the t-interval) — pinned with the t-interval, all else as it was
    quality_table = lmra.aggregate.quality_table
    # (and, since the twentieth session, its n_not_rated column, left out here as the pairs are not passed)
    monkeypatch.setattr(lmra.aggregate, "quality_table",
                        lambda q, alpha=0.05, interval="t", pairs=None: quality_table(q, alpha))
    # (and, since the twenty-first session, refusals.csv's paired test, left out here; since the
    # twenty-third, its ci_method column)
    refusal_table = lmra.aggregate.refusal_table
    monkeypatch.setattr(lmra.aggregate, "refusal_table", lambda r, alpha=0.05: refusal_table(r, alpha).drop(
        columns=["n_paired", "only_a", "only_b", "p_paired", "paired_test", "ci_method"]))
    # (and the clustered refusal intervals with several responses per prompt: plain Wilson then)
    from lmra.stats import wilson_ci

    monkeypatch.setattr(lmra.aggregate, "clustered_wilson_ci",
                        lambda y, n, alpha=0.05: wilson_ci(int(sum(y)), int(sum(n)), alpha))
    # (and, since the twenty-first session, each sampled draw's own seed: 8b899bf sent the
    # question's seed with every draw, given here)
    import lmra.judge.options

    derive = lmra.judge.options.derive_seed
    monkeypatch.setattr(lmra.judge.options, "derive_seed",
                        lambda *parts: derive(*(parts[:parts.index("sample")] if "sample" in parts else parts)))
    # and the second (sampled) LMRA's position logit: Mantel–Haenszel since the eighteenth session,
    # 8b899bf's pooled probability sums here
    import math

    import lmra.judge.calibration

    def pooled_sums(a1, b1, a2, b2):
        s1, t1, s2, t2 = (sum(c.tolist()) + 0.5 for c in (a1, b1, a2, b2))
        return 0.5 * (math.log(s1 / t1) + math.log(s2 / t2))

    monkeypatch.setattr(lmra.judge.calibration, "mantel_haenszel_logit", pooled_sums)
    keys, contents, n_calls = _pinned_audit(tmp_path)
    # computed with lmra at git 8b899bf, before the per-pair speed-ups (see the module docstring)
    assert (keys, n_calls) == PINNED_KEYS
    assert contents == PINNED_CONTENTS


#: ``python tests/test_pairwork_exact.py`` prints them for the lmra on PYTHONPATH (run from outside the checkout)
PINNED_KEYS = ("6fe16433efaee2c8", 996)
#: (2006965804ff41e2 until the tenth session: quality.csv then counted failed quality calls in
#: n_invalid; with n_invalid + n_failed folded back and n_failed dropped the files give it still;
#: 2e96a1fe31b19ce7 until 2026-12-05, full-precision floats: a fresh install that day wrote other
#: last digits with 8b899bf and today's code alike — in it both write the same files but for
#: quality.csv's n_failed column — so the floats are now compared to ten significant digits)
PINNED_CONTENTS = "c30617dc904e16aa"


if __name__ == "__main__":  # print the pins with whatever lmra is on PYTHONPATH
    import pathlib
    import tempfile

    with tempfile.TemporaryDirectory() as d:
        print(_pinned_audit(pathlib.Path(d)), file=sys.stdout)
