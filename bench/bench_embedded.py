"""Benchmark: the default embedded audit before vs after issue 14 (batched decoding, the
thread rule, the transcript prompt format), side by side in one run, quiet and busy.

    python bench/bench_embedded.py                  # 18 of the 27 tasks (2 per domain): about 5 minutes
    python bench/bench_embedded.py --tasks 27       # the full default audit (slower)
    python bench/bench_embedded.py --before-busy    # also the code before with a busy process (slow: it stalls)

Part 1 runs ``python -m lmra.cli audit --config <cfg> --no-progress`` in a fresh folder with a
fresh cache, for the code before (``git archive <--before-rev>`` of ``lmra/``, ``prompts/``,
``names/``, ``examples/`` into a temporary folder, put first on ``PYTHONPATH``, with a
``sitecustomize.py`` that loads models as this checkout does: no AMX weight buffers on an AMX
CPU, where the code before crashes) and after
(this working tree). Each side uses its own ``examples/default.toml`` (the before side's has
``concurrency = 2``), reduced to ``--tasks`` tasks (one prompt each, as in the default audit;
the judge check's 10 canary pairs stay), and is timed from start to exit (model load and
report included). The after side runs quiet, with one extra busy process (``python -c "while
True: pass"``) and with two; the before side quiet (and with one busy process with
``--before-busy``). Ratios: after ÷ before quiet (goal ≤ 0.6), busy ÷ quiet (goal for the after
side with one busy process ≤ 1.5; before ≈ 2.5).

Part 2 measures generation tokens/s on the same 16 prompts (48 tokens at most, temperature 1,
no stop strings): one at a time with ``Llama.create_completion`` on one context with as many
threads as cores (the code before), one batch decoder of 8 sequences with 1 thread, and the
provider as configured (``thread_plan``: batch decoders × 8 sequences, 1 thread each), and the
share of the batched texts equal to one-at-a-time decoding through the decoder (the same
request alone and in a batch).

The machine is shared: the script prints ``nproc``, the CPU model and ``uptime`` before each
part; compare ratios, not seconds, between machines.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BEFORE_REV = "9467abd"  # the last commit before issue 14


def machine() -> str:
    cpu = next((line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                if line.startswith("model name")), platform.processor())
    return f"nproc {os.cpu_count()}, {cpu}, Python {platform.python_version()}"


def uptime() -> str:
    return subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()


def before_tree(rev: str, dest: Path) -> Path:
    """lmra/, prompts/, names/, examples/ of ``rev`` under ``dest``."""
    archive = subprocess.run(["git", "-C", str(ROOT), "archive", rev, "lmra", "prompts", "names", "examples"],
                             capture_output=True, check=True).stdout
    subprocess.run(["tar", "-x", "-C", str(dest)], input=archive, check=True)
    # the code before loads llama.cpp's AMX weight buffers, which crash on some AMX CPUs
    # (lmra/providers/_llama_cpu.py): its processes load models as this checkout does
    (dest / "sitecustomize.py").write_text(
        "import importlib.util\n"
        f"spec = importlib.util.spec_from_file_location('_lmra_llama_cpu', {str(ROOT / 'lmra/providers/_llama_cpu.py')!r})\n"
        "mod = importlib.util.module_from_spec(spec)\n"
        "spec.loader.exec_module(mod)\n"
        "mod.patch_process()\n")
    return dest


def audit_config(tree: Path, n_tasks: int, out: Path) -> Path:
    """The tree's default audit reduced to its first ``n_tasks`` tasks (one per domain first)."""
    import tomli_w

    cfg = tomllib.loads((tree / "examples" / "default.toml").read_text())
    recs = [json.loads(line) for line in (tree / "prompts" / "tasks.jsonl").read_text().splitlines() if line.strip()]
    tasks_by_domain: dict[str, list[str]] = {}
    for r in recs:
        tasks_by_domain.setdefault(r["domain"], [])
        if r["task"] not in tasks_by_domain[r["domain"]]:
            tasks_by_domain[r["domain"]].append(r["task"])
    order = [ts[i] for i in range(max(map(len, tasks_by_domain.values()))) for ts in tasks_by_domain.values()
             if i < len(ts)]
    cfg |= {"tasks": order[:n_tasks], "output_dir": str(out / "reports"), "cache": str(out / "cache.sqlite")}
    path = out / "audit.toml"
    path.write_text(tomli_w.dumps(cfg))
    return path


def time_audit(tree: Path, n_tasks: int, busy: int, work: Path, label: str) -> float:
    """Wall seconds of one audit run (fresh folder and cache) with ``busy`` extra busy processes."""
    out = Path(tempfile.mkdtemp(prefix=f"{label}-", dir=work))
    cfg = audit_config(tree, n_tasks, out)
    env = dict(os.environ, PYTHONPATH=str(tree))
    hogs = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(busy)]
    try:
        t0 = time.perf_counter()
        proc = subprocess.run([sys.executable, "-m", "lmra.cli", "audit", "--config", str(cfg), "--no-progress"],
                              cwd=out, env=env, capture_output=True, text=True)
        dt = time.perf_counter() - t0
    finally:
        for h in hogs:
            h.kill()
            h.wait()
    if proc.returncode != 0:
        raise SystemExit(f"{label}: lmra audit exited {proc.returncode}\n{proc.stderr[-2000:]}")
    return dt


def part_audits(args, work: Path) -> None:
    before = before_tree(args.before_rev, Path(tempfile.mkdtemp(prefix="before-", dir=work)))
    print(f"\n== Part 1: default embedded audit, {args.tasks} tasks (1 prompt each) + judge check; "
          f"before = {args.before_rev}, after = working tree")
    print(f"   {uptime()}")
    rows: dict[str, float] = {}
    plan = [("before", before, 0), ("after", ROOT, 0), ("after", ROOT, 1), ("after", ROOT, 2)]
    if args.before_busy:
        plan.append(("before", before, 1))
    for side, tree, busy in plan:
        dt = time_audit(tree, args.tasks, busy, work, f"{side}-{busy}")
        rows[f"{side}/{busy}"] = dt
        load = uptime().split("load average:")[1].strip()
        print(f"   {side:6s} with {busy} busy process(es): {dt:7.1f} s   ({load})")
    print(f"   after ÷ before, quiet            : {rows['after/0'] / rows['before/0']:5.2f}  (goal ≤ 0.6)")
    print(f"   after: 1 busy ÷ quiet            : {rows['after/1'] / rows['after/0']:5.2f}  (goal ≤ 1.5)")
    print(f"   after: 2 busy ÷ quiet            : {rows['after/2'] / rows['after/0']:5.2f}")
    if "before/1" in rows:
        print(f"   before: 1 busy ÷ quiet           : {rows['before/1'] / rows['before/0']:5.2f}")


def part_tokens(n_prompts: int = 16, max_tokens: int = 48) -> None:
    from lmra.providers._llama_cpu import load_llama as Llama  # lmra loads models so (no AMX buffers)

    from lmra.config import ModelConfig
    from lmra.providers._llama_batch import BatchDecoder, GenerationJob
    from lmra.providers.base import ChatRequest, Message
    from lmra.providers.llamacpp import LlamaCppProvider, _silence_llama_logs, embedded_model_path

    print(f"\n== Part 2: generation tokens/s, {n_prompts} prompts × ≤ {max_tokens} tokens, temperature 1")
    print(f"   {uptime()}")
    _silence_llama_logs()
    topics = ["a dragon", "a lighthouse", "a job interview", "a trip to Rome", "a birthday party", "a cover letter",
              "stress at work", "a packing list", "a new city", "a lost cat", "a chess game", "a garden",
              "a rainy day", "a school play", "a robot", "a long train ride"]
    msgs = [[Message(role="user", content=f"Write a short story about {t}.")] for t in topics[:n_prompts]]
    prov = LlamaCppProvider(ModelConfig())
    prompts = [prov._tokenize(prov.render(ChatRequest(messages=m))) for m in msgs]
    cores = os.cpu_count() or 1
    rates = {}
    for threads in sorted({cores, 1}, reverse=True):
        old = Llama(model_path=str(embedded_model_path()), n_ctx=4096, n_threads=threads, n_threads_batch=threads,
                    verbose=False, seed=0)
        t0 = time.perf_counter()
        n_old = sum(old.create_completion(t, max_tokens=max_tokens, temperature=1.0, seed=i)["usage"]
                    ["completion_tokens"] for i, t in enumerate(prompts))
        t_old = time.perf_counter() - t0
        rates[threads] = n_old / t_old
        print(f"   one at a time, create_completion, {threads} thread(s): {rates[threads]:6.1f} tokens/s "
              f"({n_old} in {t_old:.1f} s)")
        old.close()
    llm = prov._llm
    dec = BatchDecoder(llm._model.model, llm._model.vocab, llm.detokenize, n_seq=8, n_ctx_seq=llm.n_ctx(), n_threads=1)
    jobs = lambda: [GenerationJob(tokens=t, max_tokens=max_tokens, temperature=1.0, seed=i)  # noqa: E731
                    for i, t in enumerate(prompts)]
    t0 = time.perf_counter()
    batched = dec.generate(jobs())
    t_b = time.perf_counter() - t0
    n_b = sum(g.completion_tokens for g in batched)
    print(f"   one batch decoder, 8 sequences, 1 thread      : {n_b / t_b:6.1f} tokens/s ({n_b} in {t_b:.1f} s)"
          f"  → {n_b / t_b / rates[1]:.2f}× one at a time with 1 thread, {n_b / t_b / rates[cores]:.2f}× with "
          f"{cores}")
    alone = [dec.generate([j])[0] for j in jobs()[:4]]
    same = sum(a.text == b.text for a, b in zip(alone, batched))
    print(f"   the same request alone and in the batch       : {same} of {len(alone)} texts identical")
    dec.close(cancel=True)

    async def through_provider() -> tuple[int, float]:
        reqs = [ChatRequest(messages=m, temperature=1.0, max_tokens=max_tokens, seed=i) for i, m in enumerate(msgs)]
        t = time.perf_counter()
        res = await asyncio.gather(*(prov.complete(r) for r in reqs))
        return sum(r.usage.completion_tokens for r in res), time.perf_counter() - t

    n_p, t_p = asyncio.run(through_provider())
    th = prov.threads
    print(f"   provider: {th.decoders} decoder(s) × 8 sequences, {th.decode_threads} thread(s) each : "
          f"{n_p / t_p:6.1f} tokens/s ({n_p} in {t_p:.1f} s; transcript stops at the next turn)")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--tasks", type=int, default=18, help="tasks of the default audit to run (27 = all)")
    ap.add_argument("--before-rev", default=BEFORE_REV, help="git revision of the 'before' code")
    ap.add_argument("--before-busy", action="store_true", help="also time the before side with a busy process")
    ap.add_argument("--skip-audits", action="store_true", help="only part 2")
    args = ap.parse_args()
    print(f"bench_embedded: {machine()}")
    with tempfile.TemporaryDirectory(prefix="lmra-bench-embedded-") as work:
        if not args.skip_audits:
            part_audits(args, Path(work))
        part_tokens()


if __name__ == "__main__":
    main()
