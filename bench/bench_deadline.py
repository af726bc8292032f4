"""Per-call cost of the custom-provider time limit (lmra.providers.deadline), side by side in one
process: a zero-latency provider called 20,000 times, 64 at once, bare, under the watchdog
(``DeadlineProvider``: one timer per provider) and under ``asyncio.timeout`` per call (its
fallback); and a provider that answers after one turn of the event loop, bare and under the
watchdog (such a call goes on in a task of its own, so that it can be abandoned); five rounds
each, interleaved; prints µs per call (best round) and the added cost against the bare provider
of its kind.

    python bench/bench_deadline.py
"""

from __future__ import annotations

import asyncio
import os
import platform
import time

from lmra.providers.base import ChatRequest, ChatResult, Message
from lmra.providers.deadline import DeadlineProvider

N, CONCURRENCY, ROUNDS = 20_000, 64, 5
_RESULT = ChatResult(text="x")
_REQUEST = ChatRequest(messages=[Message(role="user", content="hi")])


class Zero:
    name, model_id, base_url, supports_logprobs = "zero", "zero", "", False

    async def complete(self, request):
        return _RESULT

    async def aclose(self):
        return None


class Yielding(Zero):
    """Answers after one turn of the event loop (``asyncio.sleep(0)``): a call that waits, which
    DeadlineProvider runs on in a task of its own (abandoned if it does not end when cancelled)."""

    async def complete(self, request):
        await asyncio.sleep(0)
        return _RESULT


class OneTimerPerCall(DeadlineProvider):
    """Every call under its own ``asyncio.timeout``."""

    async def complete(self, request):
        return await self._one_timer(request)


async def _calls(provider) -> float:
    sem = asyncio.Semaphore(CONCURRENCY)

    async def one():
        async with sem:
            return await provider.complete(_REQUEST)

    t = time.perf_counter()
    await asyncio.gather(*(one() for _ in range(N)))
    return time.perf_counter() - t


def main() -> None:
    print(f"bench_deadline: nproc {os.cpu_count()}, {platform.processor() or platform.machine()}, "
          f"Python {platform.python_version()}, load {os.getloadavg()[0]:.2f}")
    variants = {"bare provider": Zero, "watchdog (DeadlineProvider)": lambda: DeadlineProvider(Zero(), 120),
                "asyncio.timeout per call": lambda: OneTimerPerCall(Zero(), 120),
                "yielding provider, bare": Yielding,
                "yielding, DeadlineProvider": lambda: DeadlineProvider(Yielding(), 120)}
    times: dict[str, list[float]] = {k: [] for k in variants}
    for _ in range(ROUNDS):
        for name, make in variants.items():
            times[name].append(asyncio.run(_calls(make())))
    print(f"{N} calls, {CONCURRENCY} at once, best of {ROUNDS}")
    for name, ts in times.items():
        base = min(times["yielding provider, bare" if name.startswith("yielding") else "bare provider"])
        best = min(ts)
        print(f"  {name:28s} {best * 1e6 / N:6.2f} µs/call   added {(best - base) * 1e6 / N:5.2f} µs/call   "
              f"÷ bare {best / base:.2f}")


if __name__ == "__main__":
    main()
