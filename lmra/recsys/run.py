"""``lmra recsys``: send recommendation instructions to the target, parse the lists, score them
(methodology §6, §7; FaiRLLM, CFaiRLLM, Mansoury et al. 2019).

:class:`RecsysRun` builds the instructions (FaiRLLM seed names × attribute phrases, or
CFaiRLLM MovieLens users × their recorded attributes), sends every one through the call cache
with bounded concurrency, parses and optionally catalog-matches the answers, and writes a run
folder::

    config.toml               the resolved config
    lists.jsonl               one record per instruction: prompt, raw answer, parsed items, flags
    recsys_similarity.csv     Sim(a)@k per analysis, attribute, value, metric and k = 1..K
    recsys_fairness.csv       SNSR@k and SNSV@k per analysis, attribute, metric and k
    recsys_bias_disparity.csv (cfairllm) counts N_T, N_R, PR, bias and BD per prompt variant, group and genre
    recsys_bias_summary.csv   (cfairllm) average disparity (eq. 4) per variant, mean |BD| per group
    summary.json              counts (refusals, parse/match failures …), coverage, headline numbers
    manifest.json             versions, seeds, model ids, call and token counts

The run's stages live in their own modules, in pipeline order: :mod:`~lmra.recsys.inputs`
(instruction set, profiles) → :mod:`~lmra.recsys.generate` (target calls) →
:mod:`~lmra.recsys.records` (parse, catalog match) → :mod:`~lmra.recsys.scoring` (metrics) →
:mod:`~lmra.recsys.outputs` (run folder); :mod:`~lmra.recsys.lists` scores an existing
``lists.jsonl`` (:func:`score_lists`, ``lmra recsys score --lists``: the same similarity and
fairness tables) and :mod:`~lmra.recsys.bias_files` computes bias disparity from files. Their
public names used before the split stay importable from here.
"""

from __future__ import annotations

import asyncio
import datetime as _dt
from pathlib import Path
from typing import Any

from lmra.cache import CachedProvider, CallCache, CallStats
from lmra.config import dump_config
from lmra.fileio import write_text
from lmra.interrupts import interrupt_reason
from lmra.providers import Provider, make_provider
from lmra.providers.endpoint import EndpointGuard
from lmra.providers.keys import KeyGuard
from lmra.providers.ratelimit import limit_model
from lmra.recsys.bias_files import bias_from_files
from lmra.recsys.config import RecsysConfig
from lmra.recsys.generate import Progress, ask_all
from lmra.recsys.inputs import CfairContext, cfairllm_inputs, fairllm_inputs
from lmra.recsys.instructions import Instruction
from lmra.recsys.lists import read_lists, score_lists
from lmra.recsys.outputs import RecsysResult, dump_json, finish_run, now
from lmra.recsys.records import list_record, load_catalog, make_matcher
from lmra.recsys.scoring import build_summary, score_frame
from lmra.runstate import claim_run_dir
from lmra.runfolder import package_versions
from lmra.syncrun import run_sync

__all__ = ["Progress", "RecsysResult", "RecsysRun", "bias_from_files", "build_summary", "load_catalog", "read_lists",
           "score_frame", "score_lists"]


class RecsysRun:
    """One recommendation-fairness run.

    Args:
        config: the validated :class:`~lmra.recsys.config.RecsysConfig`.
        target: optional ready provider (e.g. a test double); by default built with
            :func:`lmra.providers.make_provider` from ``config.target``.
        config_path: the file the config came from (relative data paths are also looked up
            next to it).
        progress: progress callbacks (the CLI passes a Rich progress bar).
        run_dir: write here instead of ``<output_dir>/<timestamp>-<name>``.
    """

    def __init__(self, config: RecsysConfig, *, target: Provider | None = None,
                 config_path: str | Path | None = None, progress: Progress | None = None,
                 run_dir: str | Path | None = None):
        self.cfg = config
        self._target = target
        self._given_target = target is not None  # the caller's to close
        self.config_path = config_path
        self.progress = progress or Progress()
        self.stats = CallStats()
        stamp = _dt.datetime.now().strftime("%Y%m%d-%H%M%S")
        self.run_dir = Path(run_dir) if run_dir else Path(config.output_dir) / f"{stamp}-{config.name}"
        self._explicit_dir = run_dir is not None
        self._instructions: list[Instruction] | None = None
        self._artists: set[str] = set()
        self._cf: CfairContext | None = None
        #: the seed-name file's rows skipped among those read (FaiRLLM; :func:`fairllm_inputs`), or None
        self.seed_names_skipped: dict[str, Any] | None = None
        #: receives one-line warnings (an explicit concurrency too low for the target's rate limit)
        self.on_notice = lambda msg: None

    def instructions(self) -> list[Instruction]:
        """Build (once) and return the instructions; raises LmraInputError on bad inputs."""
        if self._instructions is None:
            if self.cfg.mode == "fairllm":
                self._instructions, self._artists, self.seed_names_skipped = fairllm_inputs(self.cfg,
                                                                                           self.config_path)
            else:
                self._instructions, self._cf = cfairllm_inputs(self.cfg, self.config_path)
        return self._instructions

    def _target_provider(self) -> Provider:
        if self._target is None:
            self._target = make_provider(self.cfg.target, field="target")
        return self._target

    def run(self) -> RecsysResult:
        """Run synchronously (see :meth:`arun`)."""
        return run_sync(self.arun())

    async def arun(self) -> RecsysResult:
        """Send every instruction, parse, score and write the run folder.

        Raises:
            LmraInputError: bad config or input files (before any model call).
            KeyRejected: the target's endpoint rejected its key (HTTP 401/403) — at the first
                rejected call, as an audit: the run stopped as for ``EndpointUnreachable`` below.
            EndpointUnreachable: the target's endpoint failed every call so far (nothing listens
                on the port, or HTTP 404: the model is not served there; see
                :mod:`lmra.providers.endpoint`): the run stopped early, its calls still running
                cancelled; the folder holds ``config.toml`` and a ``manifest.json`` saying
                ``failed`` (no lists, no tables), the answered calls are in the cache.
        """
        from lmra.fileio import check_output_paths

        cfg = self.cfg
        if not self._explicit_dir:
            check_output_paths(cfg.output_dir, cfg.cache, self.config_path)
        else:
            check_output_paths(self.run_dir.parent, cfg.cache, self.config_path)
        instructions = self.instructions()
        matcher, categories = make_matcher(cfg, self._cf, self.config_path)
        cache = CallCache(cfg.cache, on_write_error=self.on_notice)  # (a full disk: said, as in an audit)
        # calls in flight sized as in an audit (concurrency = "auto": the limits, or the provider's capacity)
        limited, in_flight = limit_model(self._target_provider(), cfg.target, cfg.concurrency, "target",
                                         on_notice=self.on_notice)
        # a target that never answered (nothing listens on the port, HTTP 404: a model the server
        # does not serve) stops the run after a few calls, as it stops an audit; failures name the URL
        guard = EndpointGuard("target", limited.base_url, model=limited.model_id, api=limited.name)
        # a rejected key (HTTP 401/403: no later call can succeed) stops the run at its first
        # rejected call, as it stops an audit (KeyGuard, outside the breaker as in lmra.audit)
        target = KeyGuard(guard.above_cache(CachedProvider(guard.below_cache(limited), cache, self.stats)), "target")
        if self._explicit_dir:
            self.run_dir.mkdir(parents=True, exist_ok=True)
        else:
            self.run_dir = claim_run_dir(self.run_dir)  # never a reused folder
        write_text(self.run_dir / "config.toml", dump_config(cfg))
        manifest: dict[str, Any] = {
            "status": "running", "started": now(), "seed": cfg.seed, "mode": cfg.mode,
            "target": {"provider": target.name, "model": target.model_id, "base_url": target.base_url,
                       "temperature": cfg.target.temperature, "max_tokens": cfg.target.max_tokens},
            "k": cfg.k, "convention": cfg.convention, "parser": cfg.parser, "permutations": cfg.permutations,
            "versions": package_versions(),
            "planned_calls": len(instructions),
            "concurrency": {"setting": cfg.concurrency, "bound": in_flight},
        }
        if self.seed_names_skipped:  # (review finding: skipped without a word)
            manifest["seed_names_skipped"] = self.seed_names_skipped
        if self._artists:  # the names the parser cut from titles ("Hello by Adele"), so that 'lmra recsys score
            # --parser lmra' on this run's lists parses them alike (break-it finding, s39: it parsed without them)
            manifest["parse_artists"] = sorted(self._artists)
        dump_json(self.run_dir / "manifest.json", manifest)
        sem = asyncio.Semaphore(in_flight)
        self.progress.start("recsys", len(instructions))
        try:
            try:
                answers = await ask_all(cfg, instructions, target, sem, self.progress, on_notice=self.on_notice)
            finally:
                cache.close()  # every call has ended: each answer is stored
                if not self._given_target:  # the client built here (its pooled connections)
                    from lmra.providers.base import close_providers

                    await close_providers([target])
            records = [list_record(cfg, ins, ans, matcher, self._artists, self._cf)
                       for ins, ans in zip(instructions, answers)]
            return finish_run(cfg, self.run_dir, records, manifest, categories, matcher, self._cf, self.stats)
        except BaseException as exc:  # the folder never says "running" after the run ended (break-it finding)
            # failed: the endpoint guard or a rejected key stopped the calls (no list or table is
            # written), or a step after them; interrupted: Ctrl-C, SIGTERM, SIGHUP (the answered
            # calls are in the cache, those in flight given INTERRUPT_GRACE_S to answer: ask_all)
            failed = isinstance(exc, Exception)
            manifest |= {"status": "failed" if failed else "interrupted", "finished": now(),
                         "calls": self.stats.as_dict()}
            # why, as an audit's manifest: the error, or which signal stopped it
            manifest["stop_reason"] = f"{type(exc).__name__}: {exc}" if failed else interrupt_reason(exc)
            try:  # a small file: often still written when a large one was not (a full disk, ulimit -f)
                dump_json(self.run_dir / "manifest.json", manifest)
            except Exception:  # noqa: BLE001 — the first failure is the one reported
                _record_in_place(self.run_dir / "manifest.json", manifest)
            raise


def _record_in_place(path: Path, manifest: dict) -> None:
    """The stopped run's manifest written over the ``running`` one in its own blocks when no
    temporary file fits (:func:`lmra.fileio.overwrite_in_place`): compact, else only its status,
    times and reason — a recsys folder has no lock to be found stale by, so a manifest left
    ``running`` would say so for ever (break-it finding: a full output disk)."""
    import json

    from lmra.fileio import overwrite_in_place

    short = {k: manifest.get(k) for k in ("status", "started", "finished")} | {
        "stop_reason": str(manifest.get("stop_reason"))[:300]}
    for doc in (manifest, short):
        try:
            data = json.dumps(doc, ensure_ascii=False, separators=(",", ":"), default=str).encode() + b"\n"
        except (TypeError, ValueError):
            continue
        if overwrite_in_place(path, data):
            return
