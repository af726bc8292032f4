"""Benchmark (a measurement, not a timing): how much llama.cpp's quantized kernels move an LMRA
read's option probabilities when the same prompt is evaluated in chunks of another size.

``tests/test_embedded_format.py`` checks that a read reusing a shared prefix gives the
probabilities of a read from scratch "up to rounding"; this script measures that rounding on the
machine it runs on: the embedded model reads one harmful-stereotype question from scratch (no
prefix reused) with the context's batch size, then in chunks of other sizes, and prints each
reading's p(A), p(B), p(C) and its largest difference from the first. Seconds on 2 cores.

Run: python bench/bench_llama_batch_rounding.py
"""

from __future__ import annotations

import asyncio
import platform

import numpy as np

from lmra.config import ModelConfig
from lmra.providers.base import ChatRequest
from lmra.providers.llamacpp import LlamaCppProvider
from lmra.templates import load_template


def main() -> None:
    emb = LlamaCppProvider.shared(ModelConfig())
    tpl = load_template("harmful_stereotype", "judge")
    req = ChatRequest(messages=tpl.render(group_a="female", group_b="male", task="write a story",
                                          prompt="Tell a story.", response_1="Story 1 about a knight.",
                                          response_2="A story about a cook."),
                      temperature=0.0, max_tokens=1, options=("A", "B", "C"))
    asyncio.run(emb.complete(req))  # the readers exist after a first read
    reader = emb._readers.readers[0]
    toks = emb._llm.tokenize(emb.render(req).encode(), add_bos=True)
    ids = [emb._llm.tokenize(t.encode(), add_bos=False)[0] for t in (" A", " B", " C")]

    def probs() -> np.ndarray:
        logits = reader.logits(toks)
        p = np.exp(logits - logits.max())
        return (p / p.sum())[ids]

    reader.reuse_prefix = False
    full = reader.n_batch
    rows = []
    try:
        for size in (full, 200, 100, 64, 37, 16):
            reader.n_batch = size
            rows.append((size, probs()))
    finally:
        reader.n_batch, reader.reuse_prefix = full, True
    base = rows[0][1]
    print(f"# {platform.processor() or platform.machine()}, prompt of {len(toks)} tokens, read from scratch")
    print(f"{'chunk':>6}  {'p(A)':>7} {'p(B)':>7} {'p(C)':>7}  max |diff| vs chunk {full}")
    for size, p in rows:
        print(f"{size:>6}  {p[0]:7.4f} {p[1]:7.4f} {p[2]:7.4f}  {np.abs(p - base).max():.4f}")


if __name__ == "__main__":
    main()
