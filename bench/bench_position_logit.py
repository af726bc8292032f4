"""The position logit of a sampled judge, estimated two ways side by side (eighteenth round).

A logit-shift judge (methodology §2 step 4: ``+b`` on the logit of option A, the option
favouring Response 1) reads N pairs in both orders; a share of them stereotyped (content
logits A/B/C = 3/−2/1 with the stereotyped response first, −2/3/1 second; other pairs
−2/−2/2.5). Each order's answer is n samples (the judge has no log-probabilities). For each
true ``b`` and share, over several seeds, it prints the mean and SD of:

* ``pooled sums``: ½[log((ΣA₁+½)/(ΣB₁+½)) + log((ΣA₂+½)/(ΣB₂+½))], lmra's estimate before
  this round, biased when stereotyped and harmless pairs mix;
* ``Mantel–Haenszel``: ``lmra.judge.calibration.position_logit`` as it is now (half the log of
  the Mantel–Haenszel common odds ratio over the pairs' 2×2 tables).

Run: ``python bench/bench_position_logit.py [--pairs 3000] [--seeds 12] [--samples 5]``.
"""

from __future__ import annotations

import argparse
import math
import statistics
import time

import numpy as np

from lmra.judge.calibration import position_logit


def pooled_sums(o1: list[dict], o2: list[dict]) -> float:
    """The estimate lmra used for sampled answers before this round (for comparison)."""
    a1, b1, a2, b2 = (sum(o["probs"][opt] for o in col) + 0.5
                      for col, opt in ((o1, "A"), (o1, "B"), (o2, "A"), (o2, "B")))
    return 0.5 * (math.log(a1 / b1) + math.log(a2 / b2))


def answers(rng, n_pairs: int, share: float, b: float, n: int) -> tuple[list[dict], list[dict]]:
    """Both orders' sampled answers of ``n_pairs`` pairs."""
    o1, o2 = [], []
    for _ in range(n_pairs):
        stereo = rng.random() < share
        for order, out in ((1, o1), (2, o2)):
            logits = np.array(([3.0, -2.0] if order == 1 else [-2.0, 3.0]) + [1.0] if stereo else [-2.0, -2.0, 2.5])
            w = np.exp(logits + [b, 0.0, 0.0])
            counts = rng.multinomial(n, w / w.sum()) / n
            out.append({"probs": dict(zip("ABC", counts.tolist())), "method": "sampled"})
    return o1, o2


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--pairs", type=int, default=3000)
    ap.add_argument("--seeds", type=int, default=12)
    ap.add_argument("--samples", type=int, default=5)
    args = ap.parse_args()
    t0 = time.perf_counter()
    print(f"sampled judge, {args.samples} samples per order, {args.pairs} pairs, {args.seeds} seeds: mean ± SD of b̂")
    print(f"{'true b':>6} {'share':>6} {'pooled sums':>16} {'Mantel–Haenszel':>16}")
    for b in (0.0, 1.0, 2.0):
        for share in (0.0, 0.05, 0.3):
            old, new = [], []
            for seed in range(args.seeds):
                o1, o2 = answers(np.random.default_rng(seed), args.pairs, share, b, args.samples)
                old.append(pooled_sums(o1, o2))
                new.append(position_logit(o1, o2))
            print(f"{b:>6.1f} {share:>6.2f} {statistics.mean(old):>8.3f} ± {statistics.stdev(old):.3f}"
                  f" {statistics.mean(new):>8.3f} ± {statistics.stdev(new):.3f}")
    print(f"bench wall time {time.perf_counter() - t0:.0f} s")


if __name__ == "__main__":
    main()
