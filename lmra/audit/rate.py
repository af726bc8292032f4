"""Stage 4 of the audit — the LMRA's ratings (methodology §2, §3): each pair of responses (group
A's and group B's to the same prompt and sample) rated for harmful stereotypes in both
presentation orders, by a second LMRA when one is set, and on the quality criteria; and the
judge check's canary pairs rated first (issue 10). Reads :class:`~lmra.generate.Response`
records and their refusal labels; writes one ratings row per pair (``ratings.parquet``'s
columns, with the per-order answers ``order1``/``order2``) and the quality rows, finished by
:mod:`lmra.audit.finish`.
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Callable
from typing import Any

import pandas as pd

from lmra.data import PromptRecord
from lmra.generate import Response
from lmra.judge.quality import rate_quality
from lmra.judge.options import answer_dict
from lmra.judge.stereotype import rate_stereotype
from lmra.providers import Provider, ProviderError
from lmra.providers.base import request_key, wrap_identity

from lmra.aggregate import CHATBOT_FAILED
from lmra.audit.inputs import Inputs
from lmra.redact import error_text

#: every column of a pair's ratings row (:meth:`RateStage._rate_one`; a row has some of them):
#: the pair, its refusal labels and outcome, the LMRA's rating, the second LMRA's
PAIR_COLUMNS = ("pair_id", "prompt_id", "domain", "task", "comparison", "placebo", "group_a", "group_b", "name_a",
                "name_b", "sample", "refusal_p_a", "refusal_p_b", "refusal_a", "refusal_b", "refused", "unlabelled",
                "failed", "error", "valid", "method", "q_F", "q_R", "q_N", "h", "order1", "order2",
                "judge2_valid", "judge2_method", "judge2_order1", "judge2_order2", "judge2_q_F", "judge2_q_R",
                "judge2_q_N", "judge2_h", "judge2_error")

class CacheTally:
    """The canaries' LMRA: ``inner`` (the audit's whole judge chain), counting its answers and
    those the call cache served (``from_cache``) that this run did not buy itself — ``own``: the
    keys its batches answered (batch mode's final pass reads every answer from the cache; break-it
    finding: a first batch night said its verdict was an earlier run's). A verdict replayed from
    the cache says so (fresh-user finding: after the judge was fixed, a re-run with the night's
    seed replayed the broken judge's canary answers, and only the call counts hinted at it)."""

    def __init__(self, inner: Provider, own: set[str] | None = None) -> None:
        wrap_identity(self, inner)
        self.own = own or set()
        self.answers = 0
        self.cached = 0

    async def complete(self, request):
        result = await self.inner.complete(request)
        self.answers += 1
        if result.from_cache and not (self.own and request_key(self.name, self.base_url, self.model_id, request)
                                      in self.own):
            self.cached += 1
        return result


class RateStage:
    """The :class:`~lmra.audit.Audit` methods that rate the pairs and the canaries (uses
    ``cfg``, ``progress``, ``refusal_errors``; sets ``canary_rows``, ``judge_verdict``)."""

    # -- stage 0: judge validation on canary pairs (issue 10) --------------------------------
    async def _run_judge_check(self, inputs: Inputs, judge: Provider, sem: asyncio.Semaphore,
                               stop: Callable[[], None] | None = None) -> None:
        """Rate the canaries; sets :attr:`canary_rows` and :attr:`judge_verdict` and tells
        :attr:`on_judge_check` the verdict. ``stop``: see :func:`lmra.judge_check.rate_canaries`
        (the pipeline's: no canary call starts once the run failed)."""
        self.canary_rows, self.judge_verdict = await self._judge_check(inputs, judge, sem, stop)
        if self.on_judge_check is not None and self.judge_verdict is not None:
            self.on_judge_check(self.judge_verdict | (self.canary_cache or {}))

    async def _judge_check(self, inputs: Inputs, judge: Provider, sem: asyncio.Semaphore,
                           stop: Callable[[], None] | None = None) -> tuple[pd.DataFrame, dict | None]:
        """The rated canaries (scored under the run's combiner) and the verdict, or (empty, None)."""
        if not inputs.canaries:
            return pd.DataFrame(), None
        from lmra.judge.calibration import rescore
        from lmra.judge_check import CheckFutility, evaluate, rate_canaries

        self.progress.start("judge-check", len(inputs.canaries))
        # no early stop in a batch dry pass: its placeholder answers read as misses, and the stop let a few
        # canaries through per round, so a sampling LMRA ran out of rounds (break-it finding: 8 paid rounds,
        # then a traceback); the final pass stops early on the real answers, all of them collected
        futility = (CheckFutility(inputs.canaries, self.cfg.judge_check)
                    if self.cfg.judge_check.stop_when_failed and not getattr(judge, "collecting", False) else None)
        tally = CacheTally(judge, getattr(self, "batch_keys", None))
        rows = await rate_canaries(tally, self.cfg.judge, inputs.templates["stereotype"], inputs.canaries, sem,
                                   progress=lambda failed: self.progress.advance("judge-check", failed), run_seed=self.cfg.seed,
                                   stop=stop, futility=futility)
        stopped = None
        if futility is not None and len(rows) < len(inputs.canaries):  # stopped early: the bar ends where it stopped
            self.progress.start("judge-check", len(rows))
            stopped = futility.stopped_words(len(rows))
        rows, _ = rescore(rows, self.run_combiner()[0])
        # where the canary answers came from: provenance of this run (summary judge_status), not a
        # result of the check (judge_check.json: a merged run's equals the unsharded run's)
        self.canary_cache = {"n_answers": tally.answers, "n_answers_cached": tally.cached,
                             "shard": self.shard is not None}
        return rows, evaluate(rows, self.cfg.judge_check, self.cfg.judge, stopped=stopped)

    # -- stage 5: pairwise LMRA ratings (methodology §2, §3) -------------------------------
    async def _rate(self, prompts: list[PromptRecord], responses: list[Response],
                    refusals: dict[int, tuple[float | None, bool]], inputs: Inputs, judge: Provider,
                    judge2: Provider | None, sem: asyncio.Semaphore) -> tuple[list[dict], list[dict]]:
        text_of = {p.id: p.text for p in prompts}
        index = {(r.prompt_id, r.comparison, r.group, r.sample): i for i, r in enumerate(responses)}
        pairs = []
        for i, r in enumerate(responses):
            a, b = r.comparison.split(" vs ", 1)
            if r.group == a:
                pairs.append((i, index[(r.prompt_id, r.comparison, b, r.sample)]))

        async def one(ia: int, ib: int) -> tuple[dict, list[dict]]:
            return await self._rate_one(responses[ia], responses[ib], refusals.get(ia), refusals.get(ib),
                                        self.refusal_errors.get(ia), self.refusal_errors.get(ib),
                                        text_of[responses[ia].prompt_id], inputs, judge, judge2, sem)

        results = await self._gather("rate", [one(a, b) for a, b in pairs], failed=lambda result: result[0]["failed"])
        return [row for row, _ in results], [q for _, quality in results for q in quality]

    async def _rate_one(self, ra: Response, rb: Response, label_a: tuple[float | None, bool] | None,
                        label_b: tuple[float | None, bool] | None, error_a: str | None, error_b: str | None,
                        prompt: str, inputs: Inputs, judge: Provider, judge2: Provider | None,
                        sem: asyncio.Semaphore) -> tuple[dict, list[dict]]:
        """One pair's ratings row and quality rows (in criterion order). ``label_*`` is a
        response's refusal label ``(p_refusal, refused)``, None when it was not labelled;
        ``error_*`` the error of its failed refusal-label call."""
        cfg = self.cfg
        nan = math.nan
        quality_rows: list[dict] = []

        def rating_fields(rating, prefix: str = "") -> dict:
            return {f"{prefix}valid": rating.valid, f"{prefix}method": rating.method,
                    f"{prefix}order1": answer_dict(rating.order1), f"{prefix}order2": answer_dict(rating.order2),
                    f"{prefix}q_F": nan if rating.q_F is None else rating.q_F,
                    f"{prefix}q_R": nan if rating.q_R is None else rating.q_R,
                    f"{prefix}q_N": nan if rating.q_N is None else rating.q_N,
                    f"{prefix}h": nan if rating.h is None else rating.h}

        ga, gb = self._group(inputs, ra.group), self._group(inputs, rb.group)
        placebo = ra.comparison in inputs.placebo
        pair_id = f"{ra.prompt_id}|{ra.comparison}|{ra.sample}"
        pa, pb = label_a or (None, False), label_b or (None, False)
        row: dict[str, Any] = {
            "pair_id": pair_id, "prompt_id": ra.prompt_id, "domain": ra.domain, "task": ra.task,
            "comparison": ra.comparison, "placebo": placebo, "group_a": ga.name, "group_b": gb.name,
            "name_a": ra.name,
            "name_b": rb.name, "sample": ra.sample, "refusal_p_a": pa[0], "refusal_p_b": pb[0],
            "refusal_a": None if label_a is None or pa[0] is None else pa[1],
            "refusal_b": None if label_b is None or pb[0] is None else pb[1],
            "refused": bool(pa[1] or pb[1]), "unlabelled": False, "failed": False, "error": None,
            "valid": False, "method": None, "q_F": nan, "q_R": nan, "q_N": nan, "h": nan,
        }
        if ra.error or rb.error:  # the chatbot's call failed: said so, as a refusal label's failure is
            return row | {"failed": True, "error": f"{CHATBOT_FAILED}{ra.error or rb.error}"}, quality_rows
        refusal_error = error_a or error_b
        if refusal_error:
            return row | {"failed": True, "error": f"refusal label: {refusal_error}"}, quality_rows
        if row["refused"]:
            return row, quality_rows
        if cfg.refusal.enabled and (row["refusal_a"] is None or row["refusal_b"] is None):
            # a refusal label could not be obtained: the pair is not scored as "not refused"
            return row | {"unlabelled": True}, quality_rows
        common = dict(prompt=prompt, task=ra.task, response_a=ra.scrubbed, response_b=rb.scrubbed)
        try:
            async with sem:
                rating = await rate_stereotype(judge, cfg.judge, inputs.templates["stereotype"],
                                               group_a=ga.judge_wording, group_b=gb.judge_wording,
                                               seed_parts=(cfg.seed, pair_id), **common)
            row |= rating_fields(rating)
        except ProviderError as exc:
            return row | {"failed": True, "error": error_text(exc, cfg.redact), "valid": False, "h": nan}, quality_rows
        if placebo:  # a negative control needs the primary rating only
            return row, quality_rows
        # the second LMRA and the quality criteria fail on their own, never taking the
        # primary rating with them
        if judge2 is not None:
            try:
                async with sem:
                    r2 = await rate_stereotype(judge2, cfg.judge2, inputs.templates["stereotype"],
                                               group_a=ga.judge_wording, group_b=gb.judge_wording,
                                               seed_parts=(cfg.seed, pair_id), **common)
                row |= rating_fields(r2, "judge2_")
            except ProviderError as exc:
                row |= {"judge2_valid": False, "judge2_h": nan, "judge2_error": error_text(exc, cfg.redact)}
        if cfg.quality.enabled:
            for crit in cfg.quality.criteria:
                base = {k: row[k] for k in ("pair_id", "prompt_id", "domain", "task", "comparison", "group_a",
                                            "group_b", "sample")} | {"criterion": crit}
                try:
                    async with sem:
                        qr = await rate_quality(judge, cfg.judge, inputs.templates["quality"], criterion=crit,
                                                seed_parts=(cfg.seed, pair_id), **common)
                    quality_rows.append(base | {"failed": False} | rating_fields(qr))
                except ProviderError as exc:
                    quality_rows.append(base | {"failed": True, "valid": False, "h": nan,
                                                 "error": error_text(exc, cfg.redact)})
        return row, quality_rows

