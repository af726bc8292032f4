"""Benchmark: start-up cost of the ``lmra`` command (issue 14 goal 2; the ``lmra/cli/`` package of
issue 15 goal 4), before vs after, in one run.

Every command runs as a fresh process, ``python -m lmra.cli …``, for two copies of lmra side by
side, each selected by ``PYTHONPATH`` (the versions alternate, so that a busy spell of the shared
machine hurts both alike); each figure is the best of ``--repeat`` runs:

* wall time and CPU time (user + system) of the process, and its peak RSS;
* modules imported and the time spent importing them (one more run under ``python -X importtime``:
  the number of modules and the sum of their own import times).

Commands: ``lmra --help``; ``lmra audit --help``; ``lmra check --help``; ``lmra validate`` of
``examples/openai.toml`` (``OPENAI_API_KEY`` set to a dummy: no model is loaded) and of
``examples/smoke.toml`` (loads the embedded GGUF model, which dominates); ``lmra audit --config
missing.toml`` (bad input, exit 2); and ``lmra audit --no-progress --no-report`` of 60 pairs on
the zero-latency providers of ``bench/bench_overhead.py`` (fresh cache each run). Both versions
must print the same stdout and exit status for every command but the audit, and write the same
``per_task.csv`` bytes for the audit (checked and printed). About 1–2 minutes.

Run: python bench/bench_cli_startup.py [--before DIR | --before-ref REF] [--after DIR] [--repeat 5]
(``--before``: a folder holding a copy of ``lmra/`` plus ``prompts/``, ``names/``, ``examples/``;
by default one is made from git ``--before-ref`` (default ``HEAD``) with ``git archive``.)
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))

from bench_overhead import config_text, write_inputs  # noqa: E402  (the zero-latency providers)

AUDIT_PAIRS = 60


def commands(work: Path, root: str) -> dict[str, list[str]]:
    """The command lines measured, by label (paths into the measured copy ``root``)."""
    return {
        "lmra --help": ["--help"],
        "lmra audit --help": ["audit", "--help"],
        "lmra check --help": ["check", "--help"],
        "lmra validate openai.toml": ["validate", f"{root}/examples/openai.toml"],
        "lmra validate smoke.toml": ["validate", f"{root}/examples/smoke.toml"],
        "lmra audit (bad input, exit 2)": ["audit", "--config", str(work / "missing.toml")],
        f"lmra audit ({AUDIT_PAIRS} pairs, zero latency)": ["audit", "--config", "AUDIT", "--no-progress",
                                                             "--no-report"],
    }


def run(root: str, argv: list[str], work: Path, tag: str, *, importtime: bool = False) -> dict:
    """One ``python -m lmra.cli`` process of the copy at ``root``: its wall and CPU seconds, peak
    RSS (MiB), exit status and stdout; with ``importtime`` the modules imported and the seconds
    spent importing them."""
    if "AUDIT" in argv:  # a fresh cache and output folder every run
        cfg = work / f"{tag}.toml"
        cfg.write_text(config_text(work, work / f"{tag}.sqlite", work / f"{tag}-out"))
        argv = [str(cfg) if a == "AUDIT" else a for a in argv]
    env = os.environ | {"PYTHONPATH": os.pathsep.join([root, str(work)]), "COLUMNS": "100",
                        "OPENAI_API_KEY": "sk-dummy-for-validate"}
    cmd = [sys.executable, *(["-X", "importtime"] if importtime else []), "-m", "lmra.cli", *argv]
    with open(work / f"{tag}.out", "w+") as out_f, open(work / f"{tag}.err", "w+") as err_f:
        t0 = time.perf_counter()
        proc = subprocess.Popen(cmd, cwd=work, env=env, stdout=out_f, stderr=err_f, text=True)
        _, wait_status, ru = os.wait4(proc.pid, 0)  # this process's own CPU time and peak RSS
        wall = time.perf_counter() - t0
        proc.returncode = os.waitstatus_to_exitcode(wait_status)
        out_f.seek(0)
        err_f.seek(0)
        stdout, stderr = out_f.read(), err_f.read()
    out = {"wall_s": wall, "cpu_s": ru.ru_utime + ru.ru_stime, "rss_mib": ru.ru_maxrss / 1024,
           "status": proc.returncode, "stdout": stdout}
    if importtime:
        lines = [ln.split("|") for ln in stderr.splitlines() if ln.startswith("import time:")][1:]
        out |= {"modules": len(lines), "import_s": sum(int(ln[0].split(":")[1]) for ln in lines) / 1e6}
    if "--no-report" in argv:
        runs = sorted((work / f"{tag}-out").glob("*/per_task.csv"))
        out["per_task"] = runs[-1].read_bytes() if runs else b""
    return out


def before_copy(ref: str, dest: Path) -> str:
    """``lmra/``, ``prompts/``, ``names/``, ``examples/`` of git ``ref`` extracted into ``dest``."""
    archive = subprocess.run(["git", "-C", str(ROOT), "archive", ref, "lmra", "prompts", "names", "examples"],
                             capture_output=True, check=True).stdout
    subprocess.run(["tar", "-x", "-C", str(dest)], input=archive, check=True)
    return str(dest)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--before", help="folder with the other copy of lmra/ (default: made from --before-ref)")
    ap.add_argument("--before-ref", default="HEAD", help="git revision of the 'before' copy (default HEAD)")
    ap.add_argument("--after", default=str(ROOT), help="folder with the copy of lmra/ to compare (default: this one)")
    ap.add_argument("--repeat", type=int, default=5)
    args = ap.parse_args()
    t_start = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="lmra-startup-") as tmp:
        work = Path(tmp)
        write_inputs(work, AUDIT_PAIRS)
        before = args.before or before_copy(args.before_ref, Path(tempfile.mkdtemp(prefix="before-", dir=tmp)))
        versions = {"before": str(Path(before).resolve()), "after": str(Path(args.after).resolve())}
        best: dict[tuple[str, str], dict] = {}
        same: dict[str, bool] = {}
        for label in commands(work, "").keys():
            for rep in range(args.repeat + 1):
                for version, root in versions.items():
                    argv = commands(work, root)[label]
                    tag = f"{version}{rep}-{abs(hash(label)) % 10**6}"
                    res = run(root, argv, work, tag, importtime=rep == args.repeat)
                    cur = best.setdefault((label, version), {})
                    for key, value in res.items():
                        if key.endswith(("_s", "_mib")) and not key == "import_s":
                            if rep < args.repeat:  # the importtime run is slower: not a timing sample
                                cur[key] = min(cur.get(key, value), value)
                        else:
                            cur[key] = value
            b, a = best[(label, "before")], best[(label, "after")]
            texts_equal = (b.get("per_task") == a.get("per_task") if "per_task" in a else
                           b["stdout"].replace(versions["before"], "ROOT") == a["stdout"].replace(versions["after"], "ROOT"))
            same[label] = b["status"] == a["status"] and texts_equal
    print(f"lmra start-up, each command a fresh process; best of {args.repeat} runs per version (alternating); "
          f"modules and import time from one more run under -X importtime")
    head = f"{'command':40s}{'':10s}{'before':>9s}{'after':>9s}{'after/before':>14s}"
    print(head)
    for label in commands(work, "").keys():
        b, a = best[(label, "before")], best[(label, "after")]
        for key, name, fmt in (("wall_s", "wall s", "{:9.3f}"), ("cpu_s", "CPU s", "{:9.3f}"),
                               ("import_s", "import s", "{:9.3f}"), ("modules", "modules", "{:9d}"),
                               ("rss_mib", "RSS MiB", "{:9.0f}")):
            ratio = a[key] / b[key] if b[key] else float("nan")
            print(f"{label if key == 'wall_s' else '':40s}{name:10s}{fmt.format(b[key])}{fmt.format(a[key])}"
                  f"{ratio:13.2f}x")
        print(f"{'':40s}{'exit':10s}{b['status']:9d}{a['status']:9d}   same output: {same[label]}")
    print(f"total {time.perf_counter() - t_start:.0f} s; python {sys.version.split()[0]}; "
          f"load {os.getloadavg()[0]:.2f} {os.getloadavg()[1]:.2f} {os.getloadavg()[2]:.2f}; "
          f"{os.cpu_count()} CPUs")


if __name__ == "__main__":
    main()
