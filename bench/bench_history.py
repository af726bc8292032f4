"""Benchmark: ``lmra history`` (and ``--json``) on a long run history, before vs after, in one run.

A nightly audit adds a night to ``reports/history.sqlite`` every day, and ``lmra history`` lists
them all, each with its regression check and release gates; so its time grows with every night.
This script makes a few real nights of 27 tasks × 4 prompts (``lmra.Audit`` with the test suite's scripted
doubles, each
checked against the night before by ``lmra check``), then clones their rows in the history under
new run ids (folders as symlinks to the originals' files, their ``manifest.json`` and
``summary.json`` rewritten with the new id) until it holds ``--nights`` nights, copies that
reports folder once a version (the before version's copy without the index the after version
adds on opening), and times
``python -m lmra history`` and ``python -m lmra history --json`` on it for two copies of lmra,
each in its own process selected by ``PYTHONPATH`` (alternating, so that a busy spell of the
shared machine hurts both alike). Both versions must print the same bytes, but for the reports folder's path (checked). Figures:
the run of least wall time of ``--repeat``, wall and CPU seconds (user + system of the child).

Run: python bench/bench_history.py --before /tmp/lmra_before [--after DIR] [--nights 1000] [--repeat 2]
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import sqlite3
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

#: tasks of the audited nights, and prompts a task (as the scale trial's nightly audit: 27 tasks × 4 prompts)
TASKS, PROMPTS_PER_TASK = 27, 4

#: made in a child process with the after version: a few real nights, each checked against the last
MAKE_NIGHTS = r"""
import json, sys
sys.path[:0] = [%(root)r, %(tests)r]
from pathlib import Path
from doubles import ScriptedJudge
from monitor_helpers import TaskTarget, phrase_verdict, write_inputs
from lmra import Audit
from lmra.cli import main
from lmra.config import AuditConfig

tmp = Path(%(tmp)r)
names, _ = write_inputs(tmp / "inputs", 2)
prompts = tmp / "inputs" / "prompts.jsonl"  # %(tasks)d tasks of %(per_task)d prompts (the target keys on the text)
prompts.write_text("".join(json.dumps({"id": f"p{i}", "text": f"Prompt number {i}.", "domain": "d",
                                       "task": f"task {i %% %(tasks)d:02d}"}) + "\n"
                           for i in range(%(tasks)d * %(per_task)d)))
for k in range(%(n)d):
    run_dir = tmp / "reports" / f"2026010{k + 1}-020000-nightly"
    cfg = AuditConfig.model_validate(dict(
        name="nightly", prompts=str(prompts), names=str(names), prompts_per_task=0, seed=100 + k,
        output_dir=str(tmp / "reports"), cache=str(tmp / f"cache-{k}.sqlite"), concurrency=16,
        judge_check={"enabled": False}))
    target = TaskTarget({"career advice": 0.1 + 0.02 * k, "write a story": 0.05})
    Audit(cfg, target=target, judge=ScriptedJudge(phrase_verdict, position_bias=0.2), run_dir=run_dir).run()
    if k:
        main(["check", str(run_dir), "--baseline", "last", "--reports-dir", str(tmp / "reports")])
"""


def make_history(tmp: Path, after: Path, real: int, nights: int) -> Path:
    """A reports folder whose history holds ``nights`` nights: ``real`` made by audits, the rest clones."""
    src = tmp / "src"
    code = MAKE_NIGHTS % {"root": str(after), "tests": str(after / "tests"), "tmp": str(src), "n": real,
                          "tasks": TASKS, "per_task": PROMPTS_PER_TASK}
    subprocess.run([sys.executable, "-c", code], check=True, stdout=subprocess.DEVNULL,
                   env={**os.environ, "PYTHONPATH": str(after)})
    reports, dst = src / "reports", tmp / "long"
    dst.mkdir()
    shutil.copy(reports / "history.sqlite", dst / "history.sqlite")
    db = sqlite3.connect(dst / "history.sqlite")
    originals = [r[0] for r in db.execute("SELECT run_id FROM runs ORDER BY started_utc")]
    cols = {t: [r[1] for r in db.execute(f"PRAGMA table_info({t})")] for t in ("runs",)}
    side = ("check_sources", "check_warnings", "check_verdicts", "check_identity", "check_caveats")
    for rid in originals:
        os.symlink(reports / rid, dst / rid)
    k = 0
    while len(originals) * (k + 1) < nights:
        k += 1
        for rid in originals:
            if len(originals) * k + originals.index(rid) >= nights:
                break
            new = f"{int(rid[:4]) + k:04d}{rid[4:]}"  # a later year: the same name pattern
            folder = dst / new
            folder.mkdir()
            for f in (reports / rid).iterdir():
                if f.name in ("manifest.json", "summary.json"):
                    (folder / f.name).write_text(f.read_text().replace(rid, new))
                else:
                    os.symlink(f, folder / f.name)
            r = dict(zip(cols["runs"], db.execute("SELECT * FROM runs WHERE run_id = ?", (rid,)).fetchone()))
            r["run_id"], r["run_dir"] = new, str(folder)
            for c in ("started", "started_utc", "finished"):
                if r.get(c):
                    r[c] = f"{int(r[c][:4]) + k:04d}{r[c][4:]}"
            db.execute(f"INSERT INTO runs ({','.join(r)}) VALUES ({','.join('?' * len(r))})", list(r.values()))
            for t in ("task_metrics", "overall_metrics", "run_unlabelled"):
                for row in db.execute(f"SELECT * FROM {t} WHERE run_id = ?", (rid,)).fetchall():
                    db.execute(f"INSERT INTO {t} VALUES ({','.join('?' * len(row))})", (new, *row[1:]))
            for row in db.execute("SELECT rowid, * FROM checks WHERE run_id = ?", (rid,)).fetchall():
                cur = db.execute(f"INSERT INTO checks VALUES ({','.join('?' * (len(row) - 1))})", (new, *row[2:]))
                for s in side:
                    v = db.execute(f"SELECT * FROM {s} WHERE check_rowid = ?", (row[0],)).fetchone()
                    if v:
                        db.execute(f"INSERT INTO {s} VALUES (?, ?)", (cur.lastrowid, v[1]))
    db.commit()
    n = db.execute("SELECT count(*) FROM runs").fetchone()[0]
    db.close()
    print(f"history: {n} nights ({real} audited, the rest clones of them), {dst}")
    return dst


def imported_from(version: Path, cwd: Path) -> str:
    """The lmra package a child with ``PYTHONPATH=version`` imports (checked: ``python -m`` puts the
    working folder first on the path, so a child started in a checkout would import that one)."""
    return subprocess.run([sys.executable, "-c", "import lmra; print(lmra.__file__)"], capture_output=True, text=True,
                          check=True, cwd=cwd, env={**os.environ, "PYTHONPATH": str(version)}).stdout.strip()


def timed(version: Path, args: list[str], cwd: Path) -> tuple[float, float, bytes]:
    """Wall seconds, CPU seconds (the child's user + system) and stdout of ``python -m lmra ARGS``."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t = time.perf_counter()
    out = subprocess.run([sys.executable, "-m", "lmra", *args], capture_output=True, cwd=cwd,
                         env={**os.environ, "PYTHONPATH": str(version), "COLUMNS": "250"})
    wall = time.perf_counter() - t
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if out.returncode:
        raise SystemExit(f"{version}: lmra {' '.join(args)} exited {out.returncode}: {out.stderr.decode()[-2000:]}")
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime), out.stdout


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--before", type=Path, required=True, help="a copy of lmra (its root: lmra/ inside)")
    p.add_argument("--after", type=Path, default=ROOT)
    p.add_argument("--nights", type=int, default=1000)
    p.add_argument("--real", type=int, default=3, help="nights made by real audits (the rest are clones)")
    p.add_argument("--repeat", type=int, default=2)
    a = p.parse_args()
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="lmra-bench-history-") as tmp:
        made = make_history(Path(tmp), a.after, a.real, a.nights)
        # each version reads its own copy: the after version adds an index to the history it opens,
        # which the before version's users do not have (dropped from its copy)
        reports = {v: Path(tmp) / f"long-{v}" for v in ("before", "after")}
        for v, folder in reports.items():
            shutil.copytree(made, folder, symlinks=True)
        with sqlite3.connect(reports["before"] / "history.sqlite") as db:
            db.execute("DROP INDEX IF EXISTS checks_run")
        where = {v: imported_from(getattr(a, v), Path(tmp)) for v in ("before", "after")}
        for v, path in where.items():
            if Path(path).resolve() != (getattr(a, v) / "lmra" / "__init__.py").resolve():
                raise SystemExit(f"the {v} version imports {path}, not {getattr(a, v)}")
        commands = {"lmra history": ["history"], "lmra history --json": ["history", "--json"]}
        best: dict = {}
        outputs: dict = {}
        for _ in range(a.repeat):
            for label, args in commands.items():
                for version in ("before", "after"):
                    wall, cpu, out = timed(getattr(a, version), [*args, "--reports-dir", str(reports[version])],
                                           Path(tmp))
                    outputs.setdefault((label, version), out.replace(str(reports[version]).encode(), b"REPORTS"))
                    if (label, version) not in best or wall < best[label, version][0]:
                        best[label, version] = (wall, cpu)
        print(f"seconds, run of least wall time of {a.repeat}; {a.nights} nights")
        print(f"{'command':<24}{'wall before':>12}{'after':>8}{'after/before':>14} |{'cpu before':>11}{'after':>8}"
              f"{'after/before':>14}")
        for label in commands:
            (wb, cb), (wa, ca) = best[label, "before"], best[label, "after"]
            print(f"{label:<24}{wb:>12.2f}{wa:>8.2f}{wa / wb:>13.2f}x |{cb:>11.2f}{ca:>8.2f}{ca / cb:>13.2f}x")
        for label in commands:
            same = outputs[label, "before"] == outputs[label, "after"]
            print(f"{label}: before and after print the same bytes (but the folder's path): {same}")
        print(f"before: lmra from {where['before']}; after: lmra from {where['after']}")
    print(f"bench wall time {time.perf_counter() - t0:.0f} s")


if __name__ == "__main__":
    main()
