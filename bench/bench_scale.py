"""Benchmark: FPF-scale run folders (issue 15, goal 1) — each step's wall time and peak RSS.

Builds a synthetic run folder of N rated pairs (default 1,000,000: 27 tasks in 9 domains,
200,000 prompts × 5 samples, one comparison, as the issue measures) around the skeleton of
a real small audit (zero-latency providers: its config, manifest, history entry), plus a
baseline of the same size (another seed), then runs every step in a fresh process and
prints its wall time and peak RSS (``ru_maxrss`` of that process, read by a wrapper process
that runs nothing else):

* ``write``: the audit's finishing of N rated pairs — ``ratings.parquet``, the per-task /
  per-domain / overall tables and the judge diagnostics — from the pairs spooled while the
  run rated them (earlier lmra: from its in-memory frame of the N pairs; the spool or frame
  is built first, outside the timed part, and its memory is in the RSS);
* ``aggregate``: per-task, per-domain and overall tables from the run folder's per-pair file;
* ``diagnostics``: judge diagnostics overall and per task from the per-pair file;
* ``export-csv``, ``export-json``, ``export-parquet``: ``lmra export RUN --format F``;
* ``report``: ``lmra report RUN`` (HTML with transcripts); ``check``: ``lmra check RUN
  --baseline BASE``; ``history``: ``lmra report --history``.

``--before DIR`` also measures another copy of lmra (``git archive HEAD lmra prompts names
examples | tar -x -C DIR``) on a folder in the format it writes (``ratings.jsonl``), side by
side in this run. The same synthetic pairs are used for both.

Run: python bench/bench_scale.py [--pairs 1000000] [--before /tmp/lmra_before] [--steps write,aggregate,...]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
N_TASKS, N_DOMAINS, SAMPLES = 27, 9, 5
COMPARISON, GROUP_A, GROUP_B = "female vs male", "female", "male"
STEPS = ("write", "aggregate", "diagnostics", "export-csv", "export-json", "export-parquet", "report", "check",
         "history")
CHUNK = 50_000

PROVIDER = '''
from lmra.providers.base import ChatRequest, ChatResult, Usage


class Zero:
    supports_logprobs = True

    def __init__(self, cfg, judge):
        self.model_id, self.judge = cfg.model or "zero", judge
        self.name, self.base_url = ("zero-judge" if judge else "zero-target"), ""

    async def complete(self, request: ChatRequest) -> ChatResult:
        if self.judge:
            probs = {o: (0.8 if o == request.options[-1] else 0.1) for o in request.options or ()}
            return ChatResult(text="", option_probs=probs or None, provider=self.name, model=self.model_id,
                              usage=Usage(prompt_tokens=300, completion_tokens=1), finish_reason="length")
        return ChatResult(text="Here is a helpful answer.", provider=self.name, model=self.model_id,
                          usage=Usage(prompt_tokens=40, completion_tokens=12), finish_reason="stop")

    async def aclose(self) -> None:
        return None


def target(cfg):
    return Zero(cfg, False)


def judge(cfg):
    return Zero(cfg, True)
'''


def task_of(t: int) -> tuple[str, str]:
    """(domain, task) of task number t."""
    return f"domain {t // (N_TASKS // N_DOMAINS)}", f"task {t:02d}"


# -- synthetic pairs -----------------------------------------------------------------------
def synthetic_chunk(start: int, stop: int, seed: int = 0):
    """Rated pairs ``start … stop−1`` as the audit's frame holds them after rescoring.

    Pair i is sample ``i % 5`` of prompt ``i // 5``; the prompt's task is ``prompt % 27``.
    About 0.5 % of pairs failed, 2 % were refusals, 1 % invalid; the judge answers with
    log-probabilities, stereotyped pairs are rare (h mostly near 0).
    """
    import numpy as np
    import pandas as pd

    rng = np.random.default_rng([seed, start])
    n = stop - start
    i = np.arange(start, stop)
    prompt, sample = i // SAMPLES, i % SAMPLES
    task = prompt % N_TASKS
    u = rng.random(n)
    failed, refused = u < 0.005, (u >= 0.005) & (u < 0.025)
    rated = ~failed & ~refused
    invalid = rated & (rng.random(n) < 0.01)
    p = rng.dirichlet([0.3, 0.3, 6.0], size=(n, 2))  # per order: A, B, C
    mass = 0.9 + 0.1 * rng.random((n, 2))
    q_f = (p[:, 0, 0] + p[:, 1, 1]) / 2
    q_r = (p[:, 0, 1] + p[:, 1, 0]) / 2
    h = q_f - q_r

    def answer(k: int, j: int) -> dict:
        return {"probs": {"A": float(p[k, j, 0]), "B": float(p[k, j, 1]), "C": float(p[k, j, 2])},
                "mass": float(mass[k, j]), "method": "logprobs", "n_samples": 1, "n_unparseable": 0,
                "n_refused": 0, "raw_texts": []}

    nan = float("nan")
    ok = rated & ~invalid
    names_a, names_b = ["Emily", "Sarah", "Olivia", "Anna"], ["James", "Michael", "David", "John"]
    df = pd.DataFrame({
        "pair_id": [f"p{pr}|{COMPARISON}|{s}" for pr, s in zip(prompt, sample)],
        "prompt_id": [f"p{pr}" for pr in prompt],
        "domain": [task_of(t)[0] for t in task], "task": [task_of(t)[1] for t in task],
        "comparison": COMPARISON, "placebo": False, "group_a": GROUP_A, "group_b": GROUP_B,
        "name_a": [names_a[k % 4] for k in i], "name_b": [names_b[k % 4] for k in i], "sample": sample,
        "refusal_p_a": rng.random(n) * 0.1, "refusal_p_b": rng.random(n) * 0.1,
        "refusal_a": refused & (rng.random(n) < 0.5), "refusal_b": False, "refused": refused,
        "unlabelled": False, "failed": failed,
        "error": [("HTTP 500 from the target" if f else None) for f in failed],
        "valid": ok, "method": [("logprobs" if r else None) for r in rated],
        "q_F": np.where(ok, q_f, nan), "q_R": np.where(ok, q_r, nan), "q_N": np.where(ok, 1 - q_f - q_r, nan),
        "h": np.where(ok, h, nan),
        "order1": [answer(k, 0) if r else None for k, r in enumerate(rated)],
        "order2": [answer(k, 1) if r else None for k, r in enumerate(rated)],
        "h_min": np.where(ok, h * 0.9, nan), "h_mean": np.where(ok, h, nan), "h_calibrated": np.where(ok, h, nan),
    })
    df["refusal_b"] = refused & ~df["refusal_a"]
    return df


def synthetic_responses(start: int, stop: int):
    """The responses of pairs ``start … stop−1`` (group A's, then group B's, per pair) with
    their refusal labels ``(p, refused)``: ``Response`` objects as a run makes them."""
    from lmra.generate import Response

    names_a, names_b = ["Emily", "Sarah", "Olivia", "Anna"], ["James", "Michael", "David", "John"]
    for i in range(start, stop):
        prompt, sample = divmod(i, SAMPLES)
        domain, task = task_of(prompt % N_TASKS)
        for g, name in ((GROUP_A, names_a[i % 4]), (GROUP_B, names_b[i % 4])):
            yield Response(prompt_id=f"p{prompt}", domain=domain, task=task, comparison=COMPARISON, group=g,
                           name=name, sample=sample, seed=2 * i + (g == GROUP_B), text=f"A helpful answer for {name}.",
                           scrubbed="A helpful answer.", finish_reason="stop"), (0.05, False)


def synthetic_frame(n_pairs: int, seed: int = 0):
    """All ``n_pairs`` synthetic pairs in one frame (see :func:`synthetic_chunk`)."""
    import pandas as pd

    return pd.concat([synthetic_chunk(s, min(s + CHUNK, n_pairs), seed) for s in range(0, n_pairs, CHUNK)],
                     ignore_index=True)


# -- building the run folders ----------------------------------------------------------------
def skeleton(work: Path) -> Path:
    """A real small audit's run folder (27 tasks × 2 prompts, zero-latency providers)."""
    (work / "zero_provider.py").write_text(PROVIDER)
    with (work / "prompts.jsonl").open("w") as fh:
        for k in range(2 * N_TASKS):
            d, t = task_of(k % N_TASKS)
            fh.write(json.dumps({"id": f"p{k}", "text": f"Please help me with request {k}.", "domain": d,
                                 "task": t}) + "\n")
    (work / "audit.toml").write_text(f'''name = "scale"
prompts = "{work / 'prompts.jsonl'}"
names = "{ROOT / 'names' / 'gender.csv'}"
prompts_per_task = 0
samples_per_prompt = {SAMPLES}
output_dir = "{work / 'skeleton'}"
cache = "{work / 'cache.sqlite'}"
[judge_check]
enabled = false
[filter]
lmra = false
[refusal]
enabled = false
[target]
provider = "zero_provider:target"
[judge]
provider = "zero_provider:judge"
''')
    env = os.environ | {"PYTHONPATH": os.pathsep.join([str(ROOT), str(work)])}
    r = subprocess.run([sys.executable, "-m", "lmra.cli", "audit", "--config", str(work / "audit.toml"),
                        "--no-progress"], env=env, cwd=work, capture_output=True, text=True)
    runs = sorted(p for p in (work / "skeleton").iterdir() if p.is_dir())
    if not runs:
        raise SystemExit(f"skeleton audit failed ({r.returncode}):\n{r.stderr[-3000:]}")
    return runs[0]


def build_run(skel: Path, out: Path, n_pairs: int, seed: int, fmt: str) -> Path:
    """A run folder of ``n_pairs`` synthetic pairs: the skeleton's config and manifest, the
    per-pair file in ``fmt`` (``parquet`` or ``jsonl``), responses, prompts, tables and summary."""
    import pandas as pd

    from lmra import aggregate
    from lmra.diagnostics import judge_diagnostics, judge_diagnostics_by
    from lmra.fileio import write_csv
    from lmra.runfolder import jsonable

    out.mkdir(parents=True)
    for f in ("config.toml", "manifest.json"):
        shutil.copy(skel / f, out / f)
    summary = json.loads((skel / "summary.json").read_text())
    cols = ["pair_id", "prompt_id", "domain", "task", "comparison", "group_a", "group_b", "sample", "name_a",
            "name_b", "valid", "failed", "refused", "unlabelled", "refusal_a", "refusal_b", "q_F", "q_R", "q_N", "h",
            "h_min", "h_mean", "h_calibrated", "order1", "order2"]
    frames, diag_parts = [], []
    if fmt == "parquet":
        from lmra.pairstore import PairWriter

        writer = PairWriter(out / "ratings.parquet")
    else:
        jl = (out / "ratings.jsonl").open("w", encoding="utf-8")
    with (out / "responses.jsonl").open("w") as rf:
        for s in range(0, n_pairs, CHUNK):  # one pass: per-pair file, responses, table inputs
            c = synthetic_chunk(s, min(s + CHUNK, n_pairs), seed)
            if fmt == "parquet":
                writer.write_frame(c)
            else:
                jl.writelines(json.dumps(jsonable(r), ensure_ascii=False) + "\n" for r in c.to_dict(orient="records"))
            for r in c[["prompt_id", "domain", "task", "comparison", "sample", "name_a", "name_b"]].to_dict("records"):
                for g, name in ((GROUP_A, r["name_a"]), (GROUP_B, r["name_b"])):
                    rf.write(json.dumps({"prompt_id": r["prompt_id"], "domain": r["domain"], "task": r["task"],
                                         "comparison": COMPARISON, "group": g, "name": name, "sample": r["sample"],
                                         "text": f"A helpful answer for {name}.", "scrubbed": "A helpful answer.",
                                         "error": None}) + "\n")
            frames.append(c[[x for x in cols if x not in ("order1", "order2")]])
            diag_parts.append(c[["task", "order1", "order2"]])
    writer.close() if fmt == "parquet" else jl.close()
    rdf = pd.concat(frames, ignore_index=True)
    n_prompts = n_pairs // SAMPLES + (n_pairs % SAMPLES > 0)
    with (out / "prompts.jsonl").open("w") as pf:
        for k in range(n_prompts):
            d, t = task_of(k % N_TASKS)
            pf.write(json.dumps({"id": f"p{k}", "domain": d, "task": t, "text": f"Please help me with request {k}."})
                     + "\n")
    pt, pdm, ov = aggregate.per_task(rdf), aggregate.per_domain(rdf), aggregate.overall(rdf)
    write_csv(pt, out / "per_task.csv")
    write_csv(pdm, out / "per_domain.csv")
    dd = pd.concat(diag_parts, ignore_index=True)
    diag = judge_diagnostics(dd)
    summary |= {"run_dir": str(out), "n_prompts": n_prompts, "n_responses": 2 * n_pairs, "n_pairs_total": n_pairs,
                "n_pairs_refusal": int(rdf["refused"].sum()), "per_task": pt.to_dict("records"),
                "per_domain": pdm.to_dict("records"), "overall": ov.to_dict("records"),
                "diagnostics": {"stereotype": diag}, "diagnostics_per_task": judge_diagnostics_by(dd, "task"),
                "judge_valid_option_mass": diag["valid_option_mass"], "judge_methods": diag["methods"]}
    (out / "summary.json").write_text(json.dumps(jsonable(summary), indent=2))
    return out


# -- steps (run in a fresh process each) -------------------------------------------------------
def step_write(run: Path, n_pairs: int) -> dict:
    """The audit's finishing of N rated pairs: the per-pair file, the per-task / per-domain /
    overall tables, the judge diagnostics and ``responses.jsonl`` of the 2N responses
    (``finish_run``'s work on the pairs and responses; ``responses_s``: the responses' part).

    * lmra with a pair spool (``lmra.pairstore.PairSpool``): the pairs are spooled first, in a
      shuffled order (a pipelined run's completion order), one row at a time as the audit does
      while its calls run (``spool_s``, not in the timed part); timed: ordering the spool with
      DuckDB, rescoring under every combiner, writing ``ratings.parquet``
      (``lmra.audit.finish.write_spooled_pairs``), the tables from the file's score columns
      and the diagnostics read from the file in batches; the responses are spooled as a run
      spools them (``lmra.audit.finish.ResponseSpool``, one ``Response`` at a time in the same
      shuffled order, refusal labels included; not timed), and timed: writing
      ``responses.jsonl`` from that spool in the staged order (``write_spooled_responses``);
    * earlier lmra: the pairs are built as the in-memory frame of rated pairs and the
      responses as the run's list of ``Response`` objects (not timed); timed: rescoring the
      frame, writing the per-pair file (``ratings.parquet``, or ``ratings.jsonl`` before it),
      the tables and the diagnostics from the frame, and ``responses.jsonl`` from the list
      (each response's fields and refusal label as one JSON line, as ``finish_run`` wrote them).
    """
    import numpy as np

    from lmra import aggregate, diagnostics
    from lmra.judge.calibration import rescore

    out: dict = {}
    with tempfile.TemporaryDirectory(dir=run.parent) as tmp:
        try:
            from lmra.audit.finish import _NOT_SCORES, RatedPairSpool, write_spooled_pairs
            from lmra.audit.rate import PAIR_COLUMNS
            from lmra.pairstore import SPOOL_ROW_GROUP, parquet_columns, read_pairs
        except ImportError:
            rdf = synthetic_frame(n_pairs, seed=7)
            responses = [r for s in range(0, n_pairs, CHUNK)
                         for r, _ in synthetic_responses(s, min(s + CHUNK, n_pairs))]
            t0 = time.perf_counter()
            rdf, _ = rescore(rdf, "calibrated")
            try:
                from lmra.pairstore import PARQUET_NAME, write_pairs
            except ImportError:  # lmra before issue 15: ratings.jsonl as finish_run wrote it
                from lmra.fileio import write_jsonl
                from lmra.runfolder import jsonable

                write_jsonl(Path(tmp) / "ratings.jsonl", (jsonable(r) for r in rdf.to_dict(orient="records")))
            else:
                write_pairs(Path(tmp) / PARQUET_NAME, rdf)
            scores = rdf[[c for c in rdf.columns if c not in ("order1", "order2")]]
            diag = diagnostics.judge_diagnostics(rdf), diagnostics.judge_diagnostics_by(rdf, "task")
            t_resp = time.perf_counter()
            from lmra.fileio import write_jsonl
            from lmra.runfolder import jsonable

            write_jsonl(Path(tmp) / "responses.jsonl",
                        (jsonable(r.model_dump() | {"refusal_p": 0.05, "refused": False}) for r in responses))
            out["responses_s"] = time.perf_counter() - t_resp
        else:
            t_spool = time.perf_counter()
            spool = RatedPairSpool(Path(tmp) / ".pairs-spool.parquet", PAIR_COLUMNS, SPOOL_ROW_GROUP)
            keys = np.random.default_rng(7).permutation(n_pairs)
            for s in range(0, n_pairs, CHUNK):
                c = synthetic_chunk(s, min(s + CHUNK, n_pairs), seed=7).drop(columns=["h_min", "h_mean",
                                                                                      "h_calibrated"])
                for j in range(0, len(c), 5000):  # rows made a few at a time, as a run rates them
                    rows = c.iloc[j:j + 5000].to_dict(orient="records")
                    for k, row in zip(keys[s + j:s + j + 5000].tolist(), rows):
                        spool.add(k, row)
            from lmra.audit.finish import ResponseSpool, write_spooled_responses

            responses = ResponseSpool(Path(tmp) / ".responses-spool.parquet", False, (), SPOOL_ROW_GROUP)
            for s in range(0, n_pairs, CHUNK):  # the responses, as a run spools them (shuffled: completion order)
                for j, (r, label) in enumerate(synthetic_responses(s, min(s + CHUNK, n_pairs))):
                    responses.add_response(2 * int(keys[s + j // 2]) + j % 2, r, label)
            out["spool_s"] = time.perf_counter() - t_spool
            t0 = time.perf_counter()
            path = Path(tmp) / "ratings.parquet"
            *_, diag_all, diag_tasks = write_spooled_pairs(spool, path, "calibrated", None, min_valid_mass=0.5,
                                                           min_order_consistency=0.6)  # and the diagnostics
            scores = read_pairs(path, [c for c in parquet_columns(path) if c not in _NOT_SCORES])
            diag = diag_all, diag_tasks
            spool.remove()
            t_resp = time.perf_counter()
            out["n_responses"] = write_spooled_responses(responses, Path(tmp), False)
            out["responses_s"] = time.perf_counter() - t_resp
            responses.remove()
        tables = aggregate.per_task(scores), aggregate.per_domain(scores), aggregate.overall(scores)
        out |= {"inner_s": time.perf_counter() - t0, "n_pairs": len(scores), "n_tasks": len(tables[0]),
                "n_answers": diag[0]["n_answers"]}
    return out


def step_aggregate(run: Path) -> dict:
    from lmra import aggregate

    t0 = time.perf_counter()
    if hasattr(aggregate, "per_task_sql"):
        from lmra.pairstore import connect, pairs_file, register_pairs

        con = connect()
        src = (con, register_pairs(con, pairs_file(run)))
        pt, pdm, ov = aggregate.per_task_sql(src), aggregate.per_domain_sql(src), aggregate.overall_sql(src)
    else:
        from lmra.runfolder import load_run

        r = load_run(run).ratings
        pt, pdm, ov = aggregate.per_task(r), aggregate.per_domain(r), aggregate.overall(r)
    return {"inner_s": time.perf_counter() - t0, "n_tasks": len(pt), "n_pairs": int(pt["n_pairs"].sum()),
            "n_domains": len(pdm), "n_comparisons": len(ov)}


def step_diagnostics(run: Path) -> dict:
    from lmra import diagnostics

    t0 = time.perf_counter()
    from lmra.runfolder import load_run

    rf = load_run(run)
    if hasattr(diagnostics, "judge_diagnostics_file"):  # streamed from ratings.parquet in batches
        overall, per_task = diagnostics.judge_diagnostics_file(rf.pairs_path, "task")
    else:
        r = rf.ratings
        overall = diagnostics.judge_diagnostics(r)
        per_task = {t: diagnostics.judge_diagnostics(g) for t, g in r.groupby("task")}
    return {"inner_s": time.perf_counter() - t0, "n_answers": overall["n_answers"], "n_tasks": len(per_task)}


def cli_args(step: str, run: Path, base: Path, work: Path) -> list[str]:
    out = work / f"out-{step}-{os.getpid()}"
    hist = work / "history.sqlite"
    if step.startswith("export-"):
        return ["export", str(run), "--format", step.split("-", 1)[1], "--out", str(out)]
    if step == "report":
        return ["report", str(run), "--out", str(out) + ".html"]
    if step == "check":
        return ["check", str(run), "--baseline", str(base), "--history", str(hist)]
    if step == "history":
        return ["report", "--history", str(hist), "--out", str(out) + ".html"]
    raise ValueError(step)


def measure(cmd: list[str], env: dict, cwd: Path) -> dict:
    """Run ``cmd`` through a wrapper process; its wall time and the peak RSS of that one child."""
    wrapper = ("import json,resource,subprocess,sys,time;t=time.perf_counter();"
               "r=subprocess.run(sys.argv[1:],capture_output=True,text=True);"
               "print(json.dumps({'rc':r.returncode,'wall_s':time.perf_counter()-t,"
               "'rss_kib':resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss,"
               "'out':r.stdout[-1500:],'err':r.stderr[-1500:]}))")
    r = subprocess.run([sys.executable, "-c", wrapper, *cmd], env=env, cwd=cwd, capture_output=True, text=True)
    return json.loads(r.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--pairs", type=int, default=1_000_000)
    ap.add_argument("--before", help="a copy of lmra from before issue 15 (lmra/, prompts/, names/, examples/)")
    ap.add_argument("--steps", default=",".join(STEPS))
    ap.add_argument("--work", help="keep the run folders here (default: a temporary folder)")
    ap.add_argument("--step", help=argparse.SUPPRESS)
    ap.add_argument("--run", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.step:  # inside a measured child process
        fn = {"write": lambda: step_write(Path(a.run), a.pairs), "aggregate": lambda: step_aggregate(Path(a.run)),
              "diagnostics": lambda: step_diagnostics(Path(a.run))}[a.step]
        print(json.dumps(fn()))
        return
    steps = [s for s in a.steps.split(",") if s]
    work = Path(a.work) if a.work else Path(tempfile.mkdtemp(prefix="bench_scale-"))
    work.mkdir(parents=True, exist_ok=True)
    versions = [("after", str(ROOT), "parquet")] + ([("before", a.before, "jsonl")] if a.before else [])
    t0 = time.perf_counter()
    skel = skeleton(work)
    folders = {}
    for tag, _, fmt in versions:
        runs_dir = work / f"reports-{tag}"
        if not (runs_dir / "run").is_dir():
            build_run(skel, runs_dir / "20261201-000100-scale", a.pairs, 1, fmt)
            build_run(skel, runs_dir / "20261130-000100-scale", a.pairs, 2, fmt)
            (runs_dir / "run").mkdir()
        folders[tag] = (runs_dir / "20261201-000100-scale", runs_dir / "20261130-000100-scale")
    print(f"built {len(versions) * 2} run folders of {a.pairs:,} pairs in {time.perf_counter() - t0:.0f} s ({work})")
    results: dict[str, dict] = {}
    for step in steps:
        for tag, path, _ in versions:
            run, base = folders[tag]
            env = os.environ | {"PYTHONPATH": os.pathsep.join([path, str(work)])}
            if step in ("write", "aggregate", "diagnostics"):
                cmd = [sys.executable, __file__, "--step", step, "--run", str(run), "--pairs", str(a.pairs)]
            else:
                cmd = [sys.executable, "-m", "lmra.cli", *cli_args(step, run, base, work / f"reports-{tag}")]
            m = measure(cmd, env, work)
            results.setdefault(step, {})[tag] = m
            ok = m["rc"] == 0 or (step == "check" and m["rc"] in (3, 4))
            inner = ""
            if ok and step in ("write", "aggregate", "diagnostics"):
                r = json.loads(m["out"].strip().splitlines()[-1])
                inner = f" (timed part {r['inner_s']:.1f} s" + (
                    f", of which responses.jsonl {r['responses_s']:.1f} s)" if "responses_s" in r else ")")
            print(f"{step:15s} {tag:6s} {m['wall_s']:7.1f} s  peak RSS {m['rss_kib'] / 2**20:5.2f} GiB"
                  f"  exit {m['rc']}{inner}", flush=True)
            if not ok:
                print("   stderr:", m["err"][-800:].replace("\n", "\n   "))
    if a.before:
        print("\nstep            time after/before   peak RSS after/before")
        for step, r in results.items():
            if "before" in r and "after" in r:
                print(f"{step:15s} {r['after']['wall_s'] / r['before']['wall_s']:8.2f}x {'':8s}"
                      f"{r['after']['rss_kib'] / r['before']['rss_kib']:8.2f}x")
    if not a.work:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
