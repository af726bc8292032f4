"""Benchmark: where the wall time of ``lmra audit`` goes (issue 14 goal 2, the CLI path), before vs after, in one run.

``python -m lmra.cli audit --config … --no-progress`` (report.html included) on the zero-latency
providers of ``bench/bench_overhead.py`` (default 5,000 pairs = 10,000 LMRA calls), a fresh cache
and then the same command again (every call cached), for two copies of lmra side by side, each in
its own process selected by ``PYTHONPATH`` (the versions alternate, so that a busy spell of the
shared machine hurts both alike). Each process times the parts of the command (nothing is
imported ahead: a function is timed once its module is loaded, by a wrapper set when the module
is first imported):

* **start**: the interpreter, ``import lmra.cli`` and parsing the options (the process's wall time
  minus what ``lmra.cli.main`` took);
* **before the run**: loading the config and the audit's modules (pandas, pydantic …), the inputs
  (``Audit.load_inputs``: once in the CLI, once more inside ``Audit.run`` in versions before the
  inputs were passed on), the providers and the plan line;
* **model calls and pair work**: ``Audit.run`` without its finish; **finish**: ``Audit._finish``
  (scoring, the run folder's files);
* **console report**, **warehouse** (``lmra.cli.scale.after_run``), **gates**, **history and check**
  (``monitor_after_audit`` without the report), **report.html** (``write_report``: its modules'
  first import, the figures, the sample-size simulation, the transcripts, the template; or, in
  versions with the forked report process, ``ReportWorker.render``: the wait for that process to
  write it, its imports done during the run on the other core);
* **other**: the rest of ``lmra.cli.main``.

Each part is its own time: a timed call made inside another (``Audit._finish`` inside
``Audit.run``, ``write_report`` inside ``monitor_after_audit``, the warehouse landed while the
report process writes the report) counts in its own part only.

"fixed" = everything but the model calls and pair work: what a re-run costs even when its calls
cost nothing, so (fixed of the cached run) ÷ (fresh run) bounds cached ÷ fresh from below.
Each column is the run with the smallest wall time of ``--repeat`` (default 2), wall time and the
process's CPU time (all threads; the total also counts a forked report process, the parts do not). Both versions must write the same ``per_task.csv`` bytes (checked). About 2–3
minutes on 2 busy cores.

Run: python bench/bench_cli_split.py [--before /tmp/lmra_before] [--after DIR] [--pairs 5000] [--repeat 2]
"""

from __future__ import annotations

import json
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))

from bench_overhead import before_after_parser, config_text, version_env, write_inputs  # noqa: E402  (the zero-latency providers)

#: (module, attribute path, part) of the functions timed, wrapped when their module is loaded
TIMED = [("lmra.audit", "Audit.run", "run"), ("lmra.audit", "Audit._finish", "finish"),
         ("lmra.audit.inputs", "InputsStage.load_inputs", "load_inputs"),
         ("lmra.report.console", "render_audit", "console report"), ("lmra.cli.scale", "after_run", "warehouse"),
         ("lmra.cli.gates", "gates_after_audit", "gates"), ("lmra.cli.monitor", "monitor_after_audit", "monitor"),
         ("lmra.report.html", "write_report", "report.html"),
         ("lmra.report.worker", "ReportWorker.render", "report.html")]
PARTS = ["start", "before the run", "  of which load_inputs", "model calls and pair work", "finish", "console report",
         "warehouse", "gates", "history and check", "report.html", "other", "total", "fixed (all but the calls)"]


# -- worker: runs `lmra audit` inside a process whose PYTHONPATH selects one copy of lmra ----------
WORKER = r"""
import functools, importlib.abc, importlib.util, json, sys, time
acc = {}
TIMED = %(timed)r


stack = []  # the timed calls in progress: [part, wall and cpu of the timed calls inside it]


def timer(f, part):
    @functools.wraps(f)
    def timed(*a, **k):
        w, c = time.perf_counter(), time.process_time()
        stack.append([part, 0.0, 0.0])
        try:
            return f(*a, **k)
        finally:  # [wall, cpu, wall and cpu clocks at the first call's start]; a part's own time:
            # what a timed call inside it took belongs to that call's part
            _, inner_w, inner_c = stack.pop()
            dw, dc = time.perf_counter() - w, time.process_time() - c
            d = acc.setdefault(part, [0.0, 0.0, w, c])
            d[0] += dw - inner_w
            d[1] += dc - inner_c
            if stack:
                stack[-1][1] += dw
                stack[-1][2] += dc
    return timed


class Patch(importlib.abc.MetaPathFinder):
    # after a module of TIMED is executed, wrap its timed functions
    def find_spec(self, name, path, target=None):
        if not any(m == name for m, _, _ in TIMED):
            return None
        sys.meta_path.remove(self)
        try:
            spec = importlib.util.find_spec(name)
        finally:
            sys.meta_path.insert(0, self)
        exec_module = spec.loader.exec_module

        def patched(module):
            exec_module(module)
            for m, attr, part in TIMED:
                *owner, last = attr.split(".")
                obj = module
                for o in owner:
                    obj = getattr(obj, o, None)
                if m == name and obj is not None and hasattr(obj, last):
                    setattr(obj, last, timer(getattr(obj, last), part))
        spec.loader.exec_module = patched
        return spec


sys.meta_path.insert(0, Patch())
from lmra.cli import main
w, c = time.perf_counter(), time.process_time()
rc = main(["audit", "--config", sys.argv[1], "--no-progress"])
acc["main"] = [time.perf_counter() - w, time.process_time() - c, w, c]
print(json.dumps({"rc": rc, "acc": acc}))
"""


def _parts(acc: dict, wall: float, cpu: float) -> dict[str, tuple[float, float]]:
    """The parts of :data:`PARTS` from one worker's timings and the process's wall and CPU time."""
    def get(k):
        return tuple(acc[k][:2]) if k in acc else (0.0, 0.0)

    def sub(x, *ys):
        return tuple(x[i] - sum(y[i] for y in ys) for i in range(2))

    main_ = acc["main"]
    run = acc["run"]
    before = (run[2] - main_[2], run[3] - main_[3])  # from main's start to Audit.run's
    after = [get(k) for k in ("console report", "warehouse", "gates", "monitor", "report.html")]
    calls = get("run")  # each part's own time (a timed call inside another is its own part's)
    if "load_inputs" in acc and acc["load_inputs"][2] >= run[2]:  # versions that read the inputs inside the run
        calls = tuple(a + b for a, b in zip(calls, get("load_inputs")))
    return {"start": sub((wall, cpu), get("main")), "before the run": before,
            "  of which load_inputs": get("load_inputs"),  # all calls (the CLI's, and the run's own if any)
            "model calls and pair work": calls, "finish": get("finish"),
            "console report": get("console report"), "warehouse": get("warehouse"), "gates": get("gates"),
            "history and check": get("monitor"), "report.html": get("report.html"),
            "other": sub(get("main"), before, calls, get("finish"), *after), "total": (wall, cpu),
            "fixed (all but the calls)": sub((wall, cpu), calls)}


def run_cli(pythonpath: str, work: Path, tag: str) -> list[dict]:
    """The fresh and the cached command of one version: per run, each part's (wall, cpu) in seconds."""
    env = version_env(pythonpath, work)
    cache, cfg = work / f"{tag}.sqlite", work / f"{tag}.toml"
    cfg.write_text(config_text(work, cache, work / f"{tag}-out"))
    script = work / "worker.py"
    script.write_text(WORKER % {"timed": TIMED})
    out = []
    for _ in range(2):  # fresh, then cached
        t0, r0 = time.perf_counter(), resource.getrusage(resource.RUSAGE_CHILDREN)
        proc = subprocess.run([sys.executable, str(script), str(cfg)], env=env, cwd=work, capture_output=True,
                              text=True)
        wall = time.perf_counter() - t0
        r1 = resource.getrusage(resource.RUSAGE_CHILDREN)
        if proc.returncode != 0:
            raise SystemExit(f"lmra audit ({tag}) failed:\n{proc.stderr[-3000:]}")
        res = json.loads(proc.stdout.strip().splitlines()[-1])
        assert res["rc"] == 0, res
        out.append(_parts(res["acc"], wall, r1.ru_utime - r0.ru_utime + r1.ru_stime - r0.ru_stime))
    return out


def main() -> None:
    args = before_after_parser(__doc__).parse_args()
    versions = [("before", str(Path(args.before).resolve())), ("after", str(Path(args.after).resolve()))]
    t_start = time.perf_counter()
    best: dict[tuple[str, str], dict[str, tuple[float, float]]] = {}
    csv = {}
    with tempfile.TemporaryDirectory(prefix="lmra-cli-split-") as tmp:
        work = Path(tmp)
        write_inputs(work, args.pairs)
        for rep in range(args.repeat):
            for label, path in versions:
                tag = f"{label}{rep}"
                fresh, cached = run_cli(path, work, tag)
                if rep == 0:
                    (run_dir,) = [p for p in (work / f"{tag}-out").iterdir() if (p / "per_task.csv").is_file()][:1]
                    csv[label] = (run_dir / "per_task.csv").read_bytes()
                for kind, parts in (("fresh", fresh), ("cached", cached)):
                    # the best run (smallest wall time) of each version and kind, its parts kept together
                    if (label, kind) not in best or parts["total"][0] < best[(label, kind)]["total"][0]:
                        best[(label, kind)] = parts
    n_judge = 2 * args.pairs
    print(f"lmra audit --no-progress (report.html included), zero-latency providers: {args.pairs} pairs = "
          f"{2 * n_judge} calls ({n_judge} LMRA calls); per version the run of least wall time of {args.repeat}")
    print(f"{'seconds':28s}{'fresh: before':>14s}{'after':>8s}{'cached: before':>16s}{'after':>8s}"
          f" |{'cpu fresh: before':>18s}{'after':>8s}{'cached: before':>16s}{'after':>8s}")
    for part in PARTS:
        cells = [best[(v, k)][part] for k in ("fresh", "cached") for v in ("before", "after")]
        print(f"{part:28s}{cells[0][0]:14.2f}{cells[1][0]:8.2f}{cells[2][0]:16.2f}{cells[3][0]:8.2f}"
              f" |{cells[0][1]:18.2f}{cells[1][1]:8.2f}{cells[2][1]:16.2f}{cells[3][1]:8.2f}")
    for v in ("before", "after"):
        fresh, cached = best[(v, "fresh")]["total"][0], best[(v, "cached")]["total"][0]
        fixed = best[(v, "cached")]["fixed (all but the calls)"][0]
        print(f"{v}: {n_judge / fresh:.0f} LMRA calls/s through the CLI (goal ≥ 3000); cached ÷ fresh "
              f"{cached / fresh:.2f} (goal ≤ 0.25); the cached run's fixed part alone is {fixed / fresh:.2f} of "
              f"the fresh run")
    print(f"per_task.csv of the fresh run, before and after byte-identical: {csv['before'] == csv['after']}")
    print(f"bench wall time {time.perf_counter() - t_start:.0f} s")


if __name__ == "__main__":
    main()
