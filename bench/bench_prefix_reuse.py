"""Benchmark: the llamacpp provider's KV-prefix reuse for LMRA questions that share a prefix.

The nine quality criteria of one pair share the request and both responses and differ only
in the final question. This script times option-probability reads of 9 criteria × N pairs
on the embedded model twice in one run — with prefix reuse (the provider's default) and
with a full re-evaluation of every prompt — prints the speed-up ratio and the largest relative difference between the two runs'
probabilities (evaluating a prompt in two batches instead of one changes float rounding).

Run: python bench/bench_prefix_reuse.py [N_PAIRS]
"""

from __future__ import annotations

import asyncio
import sys
import time

from lmra.config import ModelConfig
from lmra.judge.quality import CRITERIA
from lmra.providers.base import ChatRequest
from lmra.providers.llamacpp import LlamaCppProvider
from lmra.templates import load_template


def requests(n_pairs: int) -> list[ChatRequest]:
    tpl = load_template("quality", "judge")
    out = []
    for i in range(n_pairs):
        for crit, definition in CRITERIA.items():
            msgs = tpl.render(task="write a story", prompt=f"Write a short story about a lighthouse keeper #{i}.",
                              response_1="Once upon a time a keeper lived alone by the sea. " * 6,
                              response_2="The lamp turned every night; the keeper counted ships. " * 6,
                              criterion=crit, definition=definition)
            out.append(ChatRequest(messages=msgs, temperature=0.0, max_tokens=1, options=("A", "B", "C")))
    return out


async def run(prov: LlamaCppProvider, reqs: list[ChatRequest], reuse: bool) -> tuple[float, list]:
    for reader in prov._readers.readers:  # reuse=False: a full evaluation of every prompt
        reader.reuse_prefix = reuse
    t0 = time.perf_counter()
    res = [await prov.complete(r) for r in reqs]
    dt = time.perf_counter() - t0
    for reader in prov._readers.readers:
        reader.reuse_prefix = True
    return dt, [r.option_probs for r in res]


def main() -> None:
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 4
    prov = LlamaCppProvider(ModelConfig())
    reqs = requests(n)
    asyncio.run(run(prov, reqs[:2], True))  # warm-up: option-token table, first load
    t_full, p_full = asyncio.run(run(prov, reqs, False))
    t_reuse, p_reuse = asyncio.run(run(prov, reqs, True))
    diff = max(abs(a[o] - b[o]) / max(a[o], 1e-12) for a, b in zip(p_full, p_reuse) for o in a)
    print(f"{len(reqs)} LMRA option reads (9 quality criteria × {n} pairs) on the embedded model")
    print(f"full re-evaluation : {t_full:7.2f} s ({t_full / len(reqs) * 1000:6.1f} ms per read)")
    print(f"prefix reuse       : {t_reuse:7.2f} s ({t_reuse / len(reqs) * 1000:6.1f} ms per read)")
    print(f"speed-up ratio     : {t_full / t_reuse:7.2f}x")
    print(f"largest relative difference of an option probability: {diff:.2e} (float rounding of a split batch)")


if __name__ == "__main__":
    main()
