"""Stage 2 of the audit — counterfactual generation (methodology §1 steps 2–5): the target's
response to each kept prompt under each group of each comparison (a drawn name or a direct
profile), ``samples_per_prompt`` times, and the placebo's halves on a seeded share of the
prompts; names are scrubbed from the answers. Reads the kept
:class:`~lmra.data.PromptRecord`; writes :class:`~lmra.generate.Response` records, read by
:mod:`lmra.audit.label`.
"""

from __future__ import annotations

import asyncio

from lmra.config import Group
from lmra.data import PromptRecord
from lmra.generate import Response, derive_seed, draw_balanced, draw_name, names_to_draw, personalized_messages, scrub_name
from lmra.providers import Provider, ProviderError
from lmra.providers.base import ChatRequest

from lmra.audit.inputs import UNLABELLED, Inputs
from lmra.redact import error_text


def placebo_prompts(prompts: list[PromptRecord], share: float, seed: int) -> list[PromptRecord]:
    """The seeded ``share`` of prompts (at least one when share > 0) that also get a placebo."""
    if share <= 0 or not prompts:
        return []
    k = max(1, round(share * len(prompts)))
    return sorted(prompts, key=lambda p: derive_seed(seed, "placebo", p.id))[:k]


class GenerateStage:
    """The :class:`~lmra.audit.Audit` methods that generate the responses (uses ``cfg``,
    ``shard``, ``selection``)."""

    # -- stage 3: counterfactual generation (methodology §1 steps 2–5) ----------------------
    def _job_slots(self) -> list[tuple[str, Group, int]]:
        """Every prompt's generations without the prompt: (comparison, group, sample), the two
        groups of a comparison next to each other (group A first) — made once for a run's prompts
        (the groups looked up per prompt were 2 % of a cached re-run), from the config as it is."""
        cfg = self.cfg
        return [(f"{a} vs {b}", cfg.group(g), k)
                for a, b in cfg.comparisons for k in range(cfg.samples_per_prompt) for g in (a, b)]

    def _prompt_jobs(self, p: PromptRecord, slots: list[tuple[str, Group, int]] | None = None
                     ) -> list[tuple[PromptRecord, str, Group, int]]:
        """One prompt's generations: (prompt, comparison, group, sample), in :meth:`_job_slots`'
        order; ``slots``: what it returned for this run (default: made now)."""
        return [(p, comp, group, k) for comp, group, k in (self._job_slots() if slots is None else slots)]

    def _placebo_jobs(self, prompts: list[PromptRecord], inputs: Inputs) -> list[tuple[PromptRecord, str, Group, int]]:
        """The negative controls' generations, on a seeded share of the kept prompts (A₁ next to A₂)."""
        cfg = self.cfg
        jobs = []
        for label, (_, g1, g2) in inputs.placebo.items():
            # a shard draws the placebo's share of the whole selection and keeps its own prompts
            for p in placebo_prompts(self.selection if self.shard is not None else prompts, cfg.placebo.share,
                                     cfg.seed):
                if self.shard is not None and not self.shard.holds(p.id):
                    continue
                for k in range(cfg.samples_per_prompt):
                    jobs += [(p, label, g1, k), (p, label, g2, k)]
        return jobs

    async def _generate(self, prompts: list[PromptRecord], inputs: Inputs, target: Provider,
                        sem: asyncio.Semaphore) -> list[Response]:
        slots = self._job_slots()
        jobs = [j for p in prompts for j in self._prompt_jobs(p, slots)] + self._placebo_jobs(prompts, inputs)
        return await self._gather("generate", [self._generate_one(*j, inputs, target, sem) for j in jobs],
                                  failed=lambda r: bool(r.error))

    async def _generate_one(self, p: PromptRecord, comp: str, group: Group, k: int, inputs: Inputs,
                            target: Provider, sem: asyncio.Semaphore) -> Response:
        """The target's response to prompt ``p`` personalised for ``group`` (a failed call is a
        Response with ``error``)."""
        cfg = self.cfg
        cells = inputs.strata.get(comp, {}).get(group.name)
        name = (None if group.profile
                else draw_balanced(cells, p.text, cfg.seed, p.id, group.name, comp, k) if cells
                else draw_name(names_to_draw(inputs.group_names[group.name], p.text), cfg.seed, p.id, group.name, comp, k))
        seed = derive_seed(cfg.seed, "target", p.id, group.name, name or group.profile, k)
        style = inputs.styles["profile" if group.profile else "name"]
        msgs = personalized_messages(p.text, style, name=name, profile=group.profile,
                                     system_prompt=cfg.target.system_prompt)
        req = ChatRequest(messages=msgs, temperature=cfg.target.temperature, max_tokens=cfg.target.max_tokens,
                          seed=seed)
        text, err, finish, cached = "", None, None, False
        try:
            async with sem:
                res = await target.complete(req)
            text, finish, cached = res.text, res.finish_reason, res.from_cache
        except ProviderError as exc:
            err = error_text(exc, cfg.redact)
        return Response(prompt_id=p.id, domain=p.domain or UNLABELLED, task=p.task or UNLABELLED,
                        comparison=comp, group=group.name, name=name, profile=group.profile, sample=k, seed=seed,
                        text=text, scrubbed=scrub_name(text, name or ""), finish_reason=finish,
                        from_cache=cached, error=err)

