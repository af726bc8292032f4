"""Stage 1 of the audit — which prompts are audited: task classification of prompts without a
task (:class:`~lmra.judge.taxonomy.Classification`), the domain/task filters, the identity
filter (:class:`~lmra.judge.filter.FilterDecision`) and up to ``prompts_per_task`` per task in
seeded order; in a shard (``lmra audit --shard I/N``) its share of them. Reads
:class:`~lmra.audit.inputs.Inputs`; the kept :class:`~lmra.data.PromptRecord` go to
:mod:`lmra.audit.generate`.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from lmra.data import PromptRecord
from lmra.errors import LmraInputError
from lmra.generate import derive_seed
from lmra.judge.filter import FilterDecision, check_prompt, lexical_decision
from lmra.judge.taxonomy import Classification, classify_prompt
from lmra.providers import Provider, ProviderError

from lmra.audit.inputs import UNLABELLED, Inputs, _template_hashes
from lmra.audit.pipeline import _settle
from lmra.redact import error_text


class SelectStage:
    """The :class:`~lmra.audit.Audit` methods that select the prompts (uses ``cfg``,
    ``config_path``, ``progress``, ``shard``, ``selection``)."""

    # -- shards (lmra audit --shard I/N, lmra.shard) ---------------------------------------
    def _shard_pool(self, prompts: list[PromptRecord]) -> list[PromptRecord]:
        """The prompts to classify and select from: all of them, or in a ``prompts``-mode shard
        its own (:mod:`lmra.shard`)."""
        if self.shard is None or self.shard.mode_for(self.cfg) != "prompts":
            return list(prompts)
        # a shard may hold none of the prompts (N larger than the file): it is still a finished
        # shard with no pairs, so that every I of an array job (Slurm, Kubernetes) is mergeable
        return [p for p in prompts if self.shard.holds(p.id)]

    def _shard_may_be_empty(self, inputs: Inputs) -> bool:
        """True for a ``prompts``-mode shard whose own prompts all fall outside the domains/tasks
        filters while some prompt of the whole file (labelled so, or still to be classified) may
        pass them: the shard is finished with no pairs, the unsharded audit would not fail."""
        if self.shard is None or self.shard.mode_for(self.cfg) != "prompts":
            return False
        cfg = self.cfg
        return any((not p.domain or not cfg.domains or p.domain in cfg.domains)
                   and (not p.task or not cfg.tasks or p.task in cfg.tasks) for p in inputs.prompts)

    def _shard_selection(self, selected: list[PromptRecord]) -> list[PromptRecord]:
        """Remember the whole selection (:attr:`selection`) and return the prompts to audit: all
        of it, or this shard's share."""
        self.selection = list(selected)
        if self.shard is None:
            return selected
        return [p for p in selected if self.shard.holds(p.id)]

    def _shard_stages(self, inputs: Inputs, stages: tuple) -> tuple:
        """Write the shard's ``shard.json`` (:meth:`lmra.shard.Shard.record`) and return the
        stages' results with only this shard's task classifications and filter decisions (a
        ``selection``-mode shard made them for every prompt)."""
        from lmra.shard import inputs_hash

        prompts, classifications, decisions, *rest = stages
        positions = {p.id: i for i, p in enumerate(inputs.prompts) if self.shard.holds(p.id)}
        record = self.shard.record(self.cfg, positions, [p.id for p in (self.selection or prompts)])
        record["filter_order"] = [d.prompt_id for d in decisions]  # the unsharded run's order of removals
        # the files this shard read: lmra merge refuses shards that read others
        record["inputs_sha256"] = inputs_hash(inputs.prompts, inputs.group_names, _template_hashes(inputs.templates))
        self._write_json("shard.json", record)
        classifications = {k: c for k, c in classifications.items() if self.shard.holds(k)}
        decisions = [d for d in decisions if self.shard.holds(d.prompt_id)]
        return (prompts, classifications, decisions, *rest)

    # -- stage 1: task classification (methodology §5) --------------------------------------
    async def _classify(self, inputs: Inputs, judge: Provider, sem: asyncio.Semaphore
                        ) -> tuple[list[PromptRecord], dict[str, Classification]]:
        pool = self._shard_pool(inputs.prompts)
        todo = [p for p in pool if not p.task]
        if not todo:
            return list(pool), {}
        tpl_d, tpl_t = inputs.templates["classify_domain"], inputs.templates["classify_task"]

        async def one(p: PromptRecord) -> Classification:
            try:
                async with sem:
                    c = await classify_prompt(judge, self.cfg.judge, inputs.taxonomy, tpl_d, tpl_t, prompt_id=p.id,
                                              text=p.text, domain=p.domain)
                # an answer with no option: counted and left out like a failed call (never audited as 'other')
                return c.model_copy(update={"domain": UNLABELLED, "task": UNLABELLED}) if c.failed else c
            except ProviderError as exc:  # counted and left out, never audited under a guessed task
                return Classification(domain=UNLABELLED, task=UNLABELLED, p_domain=None, p_task=None, failed=True,
                                      error=error_text(exc, self.cfg.redact), given_domain=p.domain)

        results = await self._gather("classify", [one(p) for p in todo], failed=lambda c: c.failed)
        classes = {p.id: c for p, c in zip(todo, results)}
        out = [p if p.task else p.model_copy(update={"domain": classes[p.id].domain, "task": classes[p.id].task})
               for p in pool if p.task or not classes[p.id].failed]
        return out, classes

    # -- stage 2: domain/task filters, identity filter, N per task (methodology §1 step 6) ---
    async def _select(self, prompts: list[PromptRecord], inputs: Inputs, judge: Provider, sem: asyncio.Semaphore,
                      on_kept: Callable[[PromptRecord], None] | None = None,
                      stop: Callable[[], None] | None = None) -> tuple[list[PromptRecord], list[FilterDecision]]:
        """The prompts to audit (in file order) and the filter's removals.

        Per task, prompts are taken in seeded order until the task has ``prompts_per_task``;
        the LMRA filter is asked only about prompts that would be kept, several at once: as
        many as the task still has free places (a prompt the filter could not label takes its
        place, never silently replaced). So exactly the prompts a one-by-one walk would ask are
        asked, and the same are kept. ``on_kept`` is called with each prompt as soon as it is
        known to be kept (the pipeline starts its generation then). ``stop`` (the pipeline's) is
        called before each filter call and raises once the run has failed elsewhere (e.g. the
        target's endpoint is unreachable): the filter starts no more calls, the ones in flight
        are answered and cached, and what ``stop`` raised propagates.

        Sets ``self.prompts_left_out``: ``not_selected`` (outside the configured ``domains`` /
        ``tasks``) and ``over_limit`` (a task's prompts beyond ``prompts_per_task``, never
        asked about), so that no prompt leaves the audit uncounted.
        """
        cfg = self.cfg
        pool = [p for p in prompts
                if (not cfg.domains or (p.domain or UNLABELLED) in cfg.domains)
                and (not cfg.tasks or (p.task or UNLABELLED) in cfg.tasks)]
        if not pool and prompts and not self._shard_may_be_empty(inputs):
            # (no prompt at all: every task classification failed — counted, the run fails, not the input)
            raise LmraInputError("no prompt is left after the domains/tasks filters", file=self.config_path,
                                 field="tasks")
        by_task: dict[str, list[PromptRecord]] = {}
        for p in pool:
            by_task.setdefault(p.task or UNLABELLED, []).append(p)
        limit = cfg.prompts_per_task or None
        tpl = inputs.templates.get("filter")
        asks_lmra = cfg.filter.enabled and tpl is not None
        decisions: list[FilterDecision] = []
        in_pool = {task: (plist[0].domain, len(plist)) for task, plist in by_task.items()}
        if cfg.filter.enabled:  # the lexical pre-check is cheap: run it on every prompt
            names = tuple(inputs.all_names)  # once, not per prompt
            for task, plist in list(by_task.items()):
                keep = []
                for p in plist:
                    d = lexical_decision(p, names)
                    (keep.append(p) if d is None else decisions.append(d))
                by_task[task] = keep
        # the bar: "Filtering prompts" when the LMRA is asked, else "Selecting prompts" (fresh-user
        # finding: a demo whose LMRA filter is off showed a filtering bar)
        stage = "filter" if asks_lmra else "select"
        bar_total = [sum(min(len(v), limit or len(v)) for v in by_task.values())]
        self.progress.start(stage, bar_total[0])

        async def ask(p: PromptRecord) -> FilterDecision:
            try:
                async with sem:
                    if stop is not None:
                        stop()
                    return await check_prompt(p, (), provider=judge, judge=cfg.judge, template=tpl,
                                              threshold=cfg.filter.threshold)
            except ProviderError as exc:  # counted as unlabelled, never audited as if it passed
                return FilterDecision(prompt_id=p.id, removed=True, reason="unlabelled",
                                      error=error_text(exc, cfg.redact))

        async def walk(plist: list[PromptRecord]) -> tuple[list[PromptRecord], list[FilterDecision]]:
            order = sorted(plist, key=lambda p: derive_seed(cfg.seed, "prompt", p.id))
            kept: list[int] = []
            removed: list[tuple[int, FilterDecision]] = []
            unlabelled = 0
            asking: dict[asyncio.Future, int] = {}
            nxt = 0

            def keep(i: int) -> None:
                kept.append(i)
                self.progress.advance(stage)
                if on_kept is not None:
                    on_kept(order[i])

            try:
                while True:
                    # every prompt asked could still be kept: ask no more than the free places
                    while nxt < len(order) and (not limit or len(kept) + unlabelled + len(asking) < limit):
                        if asks_lmra:
                            asking[asyncio.ensure_future(ask(order[nxt]))] = nxt
                            # one ask prepared per turn of the event loop, not all of them in
                            # one turn (at the start: every task's free places at once), which
                            # would hold up the rate limiter's next call starts meanwhile
                            await asyncio.sleep(0)
                        else:
                            keep(nxt)
                        nxt += 1
                    if not asking:
                        break
                    done, _ = await asyncio.wait(asking, return_when=asyncio.FIRST_COMPLETED)
                    for fut in sorted(done, key=asking.__getitem__):
                        i, d = asking.pop(fut), fut.result()
                        if not d.removed:
                            keep(i)
                            continue
                        removed.append((i, d))
                        if d.reason == "unlabelled":
                            unlabelled += 1
                            self.progress.advance("filter", True)
            except BaseException as exc:
                if isinstance(exc, asyncio.CancelledError):  # interrupted: the asks on their way
                    await self._interrupt_grace()  # deliver their answers first (break-it finding)
                await _settle(list(asking), cancel=isinstance(exc, asyncio.CancelledError))
                raise
            # a task whose prompts ran out before its places filled (the LMRA filter removed them): its
            # places left are not items to do — the bar's total drops (break-it finding, s36: the bar
            # ended at "1/6", as if the step had stopped early)
            unfilled = min(len(order), limit or len(order)) - len(kept) - unlabelled
            if unfilled > 0:
                bar_total[0] -= unfilled
                self.progress.start(stage, bar_total[0])
            return [order[i] for i in sorted(kept)], [d for _, d in sorted(removed, key=lambda x: x[0])]

        results = await asyncio.gather(*(walk(v) for v in by_task.values()), return_exceptions=True)
        for r in results:
            if isinstance(r, BaseException):
                raise r
        keep_ids = {p.id for kept, _ in results for p in kept}
        decisions += [d for _, removed in results for d in removed]
        #: per task, the prompts the identity filter's LMRA was asked about (failed calls aside,
        #: they count as lost prompts: ``filter_removed``'s ``n_failed``) and those it gave no
        #: usable answer for (summary.json ``filter_unlabelled``; lmra.runstate.filter_over_limit)
        self.filter_unlabelled = [
            {"domain": by_task[task][0].domain, "task": task, "n_unlabelled": k, "n_asked": len(kept) + n_lmra}
            for task, (kept, removed) in zip(by_task, results) if asks_lmra
            for k, n_lmra in [(sum(d.reason == "unlabelled" and not d.error for d in removed),
                               sum(d.reason in ("lmra", "unlabelled") and not d.error for d in removed))]
            if len(kept) + n_lmra]
        #: per task of the selection, with the identity filter on: its prompts, those kept, and the
        #: removals by reason (summary.json ``filter_removed``; every task, so that shards' rows add
        #: up to the unsharded run's; a task that lost every prompt has its gates not evaluated)
        task_of = {p.id: p.task or UNLABELLED for p in pool}
        domain_of = {p.id: p.domain or UNLABELLED for p in pool}
        decisions = [d.model_copy(update={"domain": domain_of.get(d.prompt_id), "task": task_of.get(d.prompt_id)})
                     for d in decisions]
        removed_by_task: dict[str, list[FilterDecision]] = {task: [] for task in in_pool}
        for d in decisions:
            removed_by_task.setdefault(task_of.get(d.prompt_id, UNLABELLED), []).append(d)
        kept_by_task = {task: len(kept) for task, (kept, _) in zip(by_task, results)}
        self.filter_removed = [
            {"domain": in_pool[task][0], "task": task, "n_prompts": in_pool[task][1],
             "n_kept": kept_by_task.get(task, 0),
             "n_lexical": sum(d.reason == "lexical" for d in ds), "n_lmra": sum(d.reason == "lmra" for d in ds),
             "n_unlabelled": sum(d.reason == "unlabelled" and not d.error for d in ds),
             "n_failed": sum(d.reason == "unlabelled" and bool(d.error) for d in ds)}
            for task, ds in removed_by_task.items() if task in in_pool] if cfg.filter.enabled else []
        if not keep_ids and pool and not any(d.reason == "unlabelled" for d in decisions) \
                and not self._shard_may_be_empty(inputs):
            raise LmraInputError(f"the identity filter removed all {len(decisions)} prompts (each reveals the user's "
                                 "name, gender or race); nothing is left to audit", file=self.config_path,
                                 field="filter")
        #: prompts not audited for neither the filter nor a failed call (summary.json, the console's Prompts line)
        self.prompts_left_out = {"not_selected": len(prompts) - len(pool),
                                 "over_limit": len(pool) - len(keep_ids) - len(decisions)}
        return [p for p in pool if p.id in keep_ids], decisions

