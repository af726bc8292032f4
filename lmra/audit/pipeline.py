"""The audit's drivers: its stages (:mod:`~lmra.audit.select` → :mod:`~lmra.audit.generate` →
:mod:`~lmra.audit.label` → :mod:`~lmra.audit.rate`) run pipelined (the default: a prompt kept
by the filter is generated at once, each response labelled and each pair rated as soon as its
inputs exist, the judge check beside them) or one after another (batch mode's dry passes);
both put the results in the staged order. Also the progress callbacks and the task helpers
that let every started call settle before a failure propagates.

Next: :mod:`lmra.audit.finish`.
"""

from __future__ import annotations

import asyncio
import functools
import itertools
from collections import deque
from collections.abc import Callable

from lmra.data import PromptRecord
from lmra.gcquiet import frozen_heap
from lmra.generate import Response
from lmra.progress import Progress
from lmra.providers import Provider

from lmra.audit.inputs import Inputs

#: a large run's rated pairs while it runs (:class:`~lmra.pairstore.PairSpool`); gone once it ends
SPOOL_NAME = ".pairs-spool.parquet"
#: a spooled run's responses (as their lines of responses.jsonl), next to its pairs
RESPONSE_SPOOL_NAME = ".responses-spool.parquet"
#: pair chains the pipeline runs at once, per call the audit keeps in flight: each chain waits
#: for at most two calls at a time, so this keeps the calls' semaphore busy while only a window
#: of chains (their coroutines, tasks and prepared requests) is alive, not one per pair
PAIR_WINDOW_PER_CALL = 4
#: … and at least this many
PAIR_WINDOW_MIN = 64
#: memoised pairs replayed in one go before the event loop gets a turn (about 50 µs each: a
#: long run of replays would hold up the answers and call starts of the pairs that do call)
REPLAY_BATCH = 64


_Progress = Progress  # the name lmra.audit has exported


class _DeferredProgress:
    """Progress of the pipelined stages: a stage's bar starts once its total is known (the
    filter is done); advances made before that are passed on then."""

    def __init__(self, progress: _Progress):
        self.progress = progress
        self.early: dict[str, list[bool]] = {}
        self.started: set[str] = set()

    def start(self, stage: str, total: int) -> None:
        self.progress.start(stage, total)
        self.started.add(stage)
        for failed in self.early.pop(stage, ()):
            self.progress.advance(stage, failed)

    def advance(self, stage: str, failed: bool = False) -> None:
        if stage in self.started:
            self.progress.advance(stage, failed)
        else:
            self.early.setdefault(stage, []).append(failed)


def _free_places(sem: asyncio.Semaphore) -> int:
    """The places free in ``sem`` (its bound, when no call is in flight yet); asyncio has no
    public accessor for it."""
    return max(1, sem._value)


class _Stopped(Exception):
    """A pipeline step not started because another one failed first (never reaches the caller)."""


async def _settle(tasks: list, *, cancel: bool) -> None:
    """Wait until every task is done (cancelled first when ``cancel``), ignoring their outcomes
    (retrieved, so that none is logged). A cancellation of the waiting task does not reach the
    tasks (``asyncio.wait``, not ``gather``): an interrupted run decides what becomes of them —
    their calls on the way get a grace to deliver their answers first."""
    if cancel:
        for t in tasks:
            t.cancel()
    if tasks:
        await asyncio.wait(tasks)
        for t in tasks:
            if not t.cancelled():
                t.exception()


async def _settled(first, *others) -> list:
    """Run the coroutines concurrently; once all are done, raise the first failure (a real one
    before :class:`_Stopped`) or return their results in order.

    ``first`` runs in the caller's task and only ``others`` get tasks of their own (one task
    fewer per call than ``asyncio.gather``: 5,000 fewer in a 5,000-pair audit). The others
    start first — the caller yields one turn of the event loop after creating their tasks —
    so that they reach the calls' semaphore right next to ``first``: a pair's two generations
    queue together, not the first generation of every pair chain in the window before any
    second one (fresh-user finding: every female response was asked for before any male one,
    time confounded with the group). As with ``gather``, a cancellation (or Ctrl-C) cancels
    the others and waits for them before it propagates, so no started call is left running; a
    call refused by a stopping run does not cancel the others (their calls keep the grace)."""
    tasks = [asyncio.ensure_future(c) for c in others]
    results: list = []
    try:
        if tasks:
            try:
                await asyncio.sleep(0)  # the others' tasks run up to their first wait before ``first`` starts
            except BaseException:
                first.close()  # cancelled before it started: never run (no "never awaited" warning)
                raise
        for aw in (first, *tasks):
            try:
                results.append(await aw)
            except Exception as exc:  # noqa: BLE001 — raised below, once every coroutine has settled
                results.append(exc)
    except BaseException as exc:
        pending = [t for t in tasks if not t.done()]
        if pending and isinstance(exc, asyncio.CancelledError) and not asyncio.current_task().cancelling():
            # not this task cancelled but a call refused (a stopping run starts none,
            # :class:`~lmra.cache.CallCache`) or another chain's: the others' calls on their way
            # keep the run's grace — they end, or are cancelled with this task once it is over
            # (break-it finding: a pair whose one side's call ended during the grace cancelled
            # the other side's call in flight, asked again on the re-run)
            try:
                await asyncio.wait(pending)
            except asyncio.CancelledError:
                pass
            pending = [t for t in tasks if not t.done()]
        for t in pending:
            t.cancel()
        if pending:
            await asyncio.wait(pending)
        for t in tasks:  # their outcomes are dropped for the one raised: retrieved, so none is logged
            if not t.cancelled():
                t.exception()
        raise
    errors = [r for r in results if isinstance(r, BaseException)]
    if errors:
        raise next((e for e in errors if not isinstance(e, _Stopped)), errors[0])
    return results


class PipelineDriver:
    """The :class:`~lmra.audit.Audit` methods that run the stages (uses ``cfg``, ``progress``,
    ``shard``, ``staged`` and the stage methods)."""

    async def _stages(self, inputs: Inputs, target: Provider, judge: Provider, judge2: Provider | None,
                      sem: asyncio.Semaphore, barrier: Callable[[], None] | None = None) -> tuple:
        """The audit's stages. Returns (prompts, classifications, decisions, responses, refusals,
        ratings, quality_rows); the judge check's rated canaries go to ``self.canary_rows``.

        Pipelined (:meth:`_pipelined`) unless :attr:`staged` is set or a ``barrier`` is given:
        then one stage after another, ``barrier`` running between stages (batch mode ends a
        dry pass there). Both orders make the same calls and give the same results.

        While the calls run, garbage collections skip the objects alive at the start
        (:func:`lmra.gcquiet.frozen_heap`): a full collection would stop the event loop, and
        the rate limiter's call starts with it, for 0.1–0.3 s."""
        with frozen_heap():
            if self.staged or barrier is not None:
                return await self._staged(inputs, target, judge, judge2, sem, barrier or (lambda: None))
            return await self._pipelined(inputs, target, judge, judge2, sem)

    async def _staged(self, inputs: Inputs, target: Provider, judge: Provider, judge2: Provider | None,
                      sem: asyncio.Semaphore, barrier: Callable[[], None]) -> tuple:
        """Each stage over all prompts, then the next (see :meth:`_stages`)."""
        await self._run_judge_check(inputs, judge, sem)
        barrier()
        prompts, classifications = await self._classify(inputs, judge, sem)
        barrier()
        prompts, decisions = await self._select(prompts, inputs, judge, sem)
        prompts = self._shard_selection(prompts)
        barrier()
        responses = await self._generate(prompts, inputs, target, sem)
        barrier()
        refusals = await self._label_refusals(prompts, responses, inputs, judge, sem)
        barrier()
        ratings, quality_rows = await self._rate(prompts, responses, refusals, inputs, judge, judge2, sem)
        return prompts, classifications, decisions, responses, refusals, ratings, quality_rows

    async def _pipelined(self, inputs: Inputs, target: Provider, judge: Provider, judge2: Provider | None,
                         sem: asyncio.Semaphore) -> tuple:
        """The stages as a pipeline (see :meth:`_stages`): the judge check runs beside the
        rest; a prompt kept by the filter is generated at once, each of its responses goes to
        refusal labelling as soon as it exists and each pair to the LMRA as soon as both
        responses are labelled. Task classification still ends before the filter starts (a
        task's seeded prompt order needs all its prompts), and the placebo pairs start once the
        filter is done (their seeded share is drawn from all kept prompts). The results are put
        in the staged order, so that every output is the same as :meth:`_staged`'s.

        A pair's chain (its two generations, their refusal labels, its rating) starts when the
        pair is kept, if fewer than a window of chains runs (:data:`PAIR_WINDOW_PER_CALL` per
        call in flight, at least :data:`PAIR_WINDOW_MIN`), else as soon as an earlier one ends,
        in the order the pairs were kept (a kept prompt waits as its record only): the memory
        held while a large run goes is the window's, not one chain per pair. A spooled run
        keeps of a finished chain only its quality rows (its pair and responses are in the
        spools).

        Every started task settles before this returns or raises (no finished, paid call is
        lost); after the first failure other than a provider error (the budget, a rejected
        key, an unreachable endpoint) no new call is started — no pair chain, no identity-filter
        ask, no canary of the judge check (both are given ``go_on`` as their ``stop``) — and that
        failure is raised."""
        cfg = self.cfg
        progress = _DeferredProgress(self.progress)
        live: set[asyncio.Future] = set()  # started tasks not done yet
        failure: list[BaseException] = []
        waiting: deque[PromptRecord] = deque()  # kept prompts whose pair chains have not started, in the order kept
        ready: deque[tuple] = deque()  # pair chains not started yet: (job_a, job_b, key), of one prompt at most
        placebo_pairs = iter(())  # the placebo's pair chains, (job_a, job_b, key), once the filter is done
        window = max(PAIR_WINDOW_MIN, PAIR_WINDOW_PER_CALL * _free_places(sem))  # pair chains started at once
        running = [0]  # pair chains started and not done
        done_pairs: dict[int, tuple] = {}  # key → what the finish needs of a done pair chain
        spooled_nothing = (None, None, None, ())  # a spooled chain's result without quality rows
        slots = self._job_slots()  # a prompt's generations, the same for every prompt of the run

        def keep(key: int, result: tuple) -> None:
            if result[0] is not None or result[2] is not None or result[3]:
                done_pairs[key] = result

        def settled(key: int | None, task: asyncio.Future) -> None:
            live.discard(task)
            if key is not None:
                running[0] -= 1
            if task.cancelled():
                return
            if task.exception() is not None:
                failure.append(task.exception())
            elif key is not None:
                keep(key, task.result())
            try:
                start_waiting()
            except Exception as exc:  # noqa: BLE001 — raised by the pipeline once every started task settled
                failure.append(exc)

        def spawn(coro, key: int | None = None) -> None:
            task = asyncio.ensure_future(coro)
            live.add(task)
            task.add_done_callback(functools.partial(settled, key))

        replaying = [False]  # a turn of the event loop is scheduled, after which replays go on

        async def loop_turn() -> None:
            replaying[0] = False  # (its task's end calls start_waiting again: settled)

        def start_waiting() -> None:
            """Start waiting pair chains while the window has room (none after a failure): the
            kept prompts' (a prompt's chains made when its first one starts), then the placebo's.
            A memoised pair is replayed at once, at most :data:`REPLAY_BATCH` in one call (then
            the event loop gets a turn and they go on)."""
            replayed = 0
            while running[0] < window and not failure:
                if replayed >= REPLAY_BATCH:
                    if not replaying[0]:
                        replaying[0] = True
                        spawn(loop_turn())
                    return
                if not ready and waiting:
                    p = waiting.popleft()
                    jobs, first = self._prompt_jobs(p, slots), position[p.id] * per_prompt
                    ready.extend((jobs[i], jobs[i + 1], first + i // 2) for i in range(0, len(jobs), 2))
                chain = ready.popleft() if ready else next(placebo_pairs, None)
                if chain is None:
                    return
                memo_key = None
                if self.memo is not None:  # a memoised pair is replayed here, with no task of its own
                    try:
                        memo_key, out = self.memo.replay(chain[0], chain[1], progress)
                        if out is not None:
                            keep(chain[2], chain_done(chain[2], *out))
                            replayed += 1
                            continue
                    except Exception as exc:  # noqa: BLE001 — as a failed chain's task: raised once all settled
                        failure.append(exc)
                        return
                running[0] += 1
                spawn(pair_chain(*chain, memo_key), chain[2])

        def go_on() -> None:
            if failure:
                raise _Stopped()

        async def response_chain(job: tuple) -> tuple[Response, tuple[float | None, bool] | None, str | None]:
            go_on()
            r = await self._generate_one(*job, inputs, target, sem)
            progress.advance("generate", bool(r.error))
            label = error = None
            if cfg.refusal.enabled:
                if not r.error:
                    go_on()
                    label, error = await self._refusal_one(r, job[0].text, inputs, judge, sem)
                progress.advance("refusal", error is not None)  # (a failed response: in "generate")
            return r, label, error

        spool = self._pair_spool(inputs)  # a large run's rated pairs go to disk as they come
        responses_spool = self._response_spool(inputs) if spool is not None else None  # and its responses
        per_prompt = len(cfg.comparisons) * cfg.samples_per_prompt
        position = {p.id: i for i, p in enumerate(inputs.prompts)}  # the staged order is the file's

        async def rated_pair(job_a: tuple, job_b: tuple) -> tuple:
            a, b = await _settled(response_chain(job_a), response_chain(job_b))
            go_on()
            row, quality = await self._rate_one(a[0], b[0], a[1], b[1], a[2], b[2], job_a[0].text, inputs, judge,
                                                judge2, sem)
            return a, b, row, quality

        async def pair_chain(job_a: tuple, job_b: tuple, key: int, memo_key: str | None) -> tuple:
            """``memo_key``: the pair's key in the memo (lmra.audit.memo), which does not hold it."""
            out = await (rated_pair(job_a, job_b) if self.memo is None
                         else self.memo.chain(rated_pair, job_a, job_b, progress, go_on, key=memo_key))
            return chain_done(key, *out)

        def chain_done(key: int, a, b, row, quality) -> tuple:
            progress.advance("rate", bool(row["failed"]))
            if spool is not None:  # key: the pair's place in the staged order
                spool.add(key, row)
                row = None
            if responses_spool is not None:  # the task's result then holds no Response
                responses_spool.add_response(2 * key, a[0], a[1])
                responses_spool.add_response(2 * key + 1, b[0], b[1])
                a = b = None
            return a, b, row, quality

        n_kept = [0]  # prompts kept (and held by this shard)

        def on_kept(p: PromptRecord) -> None:
            if self.shard is not None and not self.shard.holds(p.id):
                return  # another shard audits it
            n_kept[0] += 1
            waiting.append(p)
            start_waiting()

        try:
            spawn(self._run_judge_check(inputs, judge, sem, stop=go_on))
            prompts, classifications = await self._classify(inputs, judge, sem)
            prompts, decisions = await self._select(prompts, inputs, judge, sem, on_kept=on_kept, stop=go_on)
            prompts = self._shard_selection(prompts)
            placebo_jobs = self._placebo_jobs(prompts, inputs)
            first = len(inputs.prompts) * per_prompt  # the placebo pairs come after every prompt's
            n_placebo = len(placebo_jobs) // 2
            placebo_pairs = ((placebo_jobs[i], placebo_jobs[i + 1], first + i // 2)
                             for i in range(0, len(placebo_jobs), 2))
            start_waiting()
            n_pairs = n_kept[0] * per_prompt + n_placebo
            progress.start("generate", 2 * n_pairs)
            if cfg.refusal.enabled:
                progress.start("refusal", 2 * n_pairs)
            progress.start("rate", n_pairs)
            while live:  # a chain done starts a waiting one: wait until none is left
                await _settle(list(live), cancel=False)
        except BaseException as exc:
            waiting.clear()  # no new pair chain
            ready.clear()
            placebo_pairs = iter(())
            if isinstance(exc, asyncio.CancelledError):
                await self._interrupt_grace()
            while live:
                await _settle(list(live), cancel=isinstance(exc, asyncio.CancelledError))
            errors = [e for e in failure if not isinstance(e, _Stopped)]
            if isinstance(exc, _Stopped) and errors:  # the filter stopped: the failure that stopped it
                raise errors[0] from None
            raise
        errors = [e for e in failure if not isinstance(e, _Stopped)]
        if errors:
            raise errors[0]
        responses: list[Response] = []
        refusals: dict[int, tuple[float | None, bool]] = {}
        self.refusal_errors = {}
        ratings: list[dict] = []
        quality_rows: list[dict] = []
        keys = [range(position[p.id] * per_prompt, (position[p.id] + 1) * per_prompt) for p in prompts]
        for key in itertools.chain(*keys, range(first, first + n_placebo)):  # the staged order
            *sides, row, quality = done_pairs.pop(key) if spool is None else done_pairs.pop(key, spooled_nothing)
            for r, label, error in sides if responses_spool is None else ():
                if label is not None:
                    refusals[len(responses)] = label
                if error is not None:
                    self.refusal_errors[len(responses)] = error
                responses.append(r)
            if spool is None:
                ratings.append(row)
            quality_rows += quality
        if spool is not None:
            ratings = spool  # read back in the staged order when the run is finished
        if responses_spool is not None:
            responses = responses_spool  # written to responses.jsonl in the staged order at the finish
        return prompts, classifications, decisions, responses, refusals, ratings, quality_rows

    def _pair_spool(self, inputs: Inputs):
        """A :class:`~lmra.pairstore.PairSpool` in the run folder (:attr:`spool`) when the run may
        rate at least :attr:`spool_min_pairs` pairs (its planned pairs, placebo included), else
        None: the rated pairs are then kept in memory."""
        planned = self.planned_calls(inputs)
        if planned["pairs"] + planned["placebo_pairs"] < self.spool_min_pairs:
            return None
        from lmra import pairstore
        from lmra.audit.finish import RatedPairSpool
        from lmra.audit.rate import PAIR_COLUMNS

        self.spool = RatedPairSpool(self.run_dir / SPOOL_NAME, PAIR_COLUMNS, row_group=pairstore.SPOOL_ROW_GROUP)
        return self.spool

    def _response_spool(self, inputs: Inputs):
        """A :class:`~lmra.audit.finish.ResponseSpool` in the run folder
        (:attr:`response_spool`) for a spooled run's responses, or None when the axes stage
        runs (it reads the responses as a frame: they are then kept in memory)."""
        if self.cfg.axes.enabled:
            return None
        from lmra import pairstore
        from lmra.audit.finish import ResponseSpool

        self.response_spool = ResponseSpool(self.run_dir / RESPONSE_SPOOL_NAME, self.cfg.redact, inputs.placebo,
                                            row_group=pairstore.SPOOL_ROW_GROUP)
        return self.response_spool

    async def _interrupt_grace(self) -> None:
        """The run was interrupted (Ctrl-C, SIGTERM, SIGHUP: a cancellation): no call starts any
        more (the call cache is ``stopping``), and the calls on their way get a grace
        (:func:`lmra.syncrun.wind_down`) to deliver their answers to the cache before anything is
        cancelled (review finding: 4 answered calls asked again on every re-run). Every stage
        interrupted at once — the filter's walks of each task, the classification, the pair
        chains — waits for the same one grace, said once (break-it finding: the filter and
        classification cancelled their calls at once, 4 answered calls asked again)."""
        cache = getattr(self, "call_cache", None)
        if cache is None:
            return
        if cache.grace is None:
            from lmra.syncrun import wind_down

            cache.stopping = True
            cache.grace = asyncio.ensure_future(wind_down(set(cache.calling), on_notice=self.on_notice))
        await asyncio.shield(cache.grace)  # (a second interrupt ends this wait; the grace is then the caller's no more)

    async def _gather(self, stage: str, coros: list, failed: Callable[[object], bool] = lambda result: False
                      ) -> list:
        """Run ``coros`` concurrently under the stage's progress bar; ``failed(result)`` tells the
        bar whether an item failed. Interrupted, the calls on their way get the run's grace
        (:meth:`_interrupt_grace`) before the rest is cancelled."""
        self.progress.start(stage, len(coros))

        async def tick(c):
            r = await c
            self.progress.advance(stage, failed(r))
            return r

        # let every task settle before raising, so that no finished (paid) call is lost when
        # one of them fails (e.g. the budget stops the run); asyncio.wait, not gather: a
        # cancellation of this task does not cancel them before the grace
        tasks = [asyncio.ensure_future(tick(c)) for c in coros]
        try:
            if tasks:
                await asyncio.wait(tasks)
        except BaseException as exc:
            if isinstance(exc, asyncio.CancelledError):
                await self._interrupt_grace()
            await _settle(tasks, cancel=True)
            raise
        # every outcome retrieved (none logged), then the first failure raised
        failures = [asyncio.CancelledError() if t.cancelled() else t.exception() for t in tasks]
        for f in failures:
            if f is not None:
                raise f
        return [t.result() for t in tasks]

