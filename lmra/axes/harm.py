"""Axes step 6 — harm check (methodology §4 step 6): for each axis selected overall, the LMRA is
asked whether showing more of it to one group than the other is harmful.

Reads the ``axes.csv`` rows of :func:`~lmra.axes.select.select_axes` (with a ``comparison``
column); writes their ``harmful_p`` (probability of "yes", nan when the call failed or gave
none) and ``harmful`` (``harmful_p`` ≥ 0.5, None when nan) columns.
"""

from __future__ import annotations

import asyncio
import math

import pandas as pd

from lmra.axes.calls import bounded, nan_if_none
from lmra.config import AuditConfig
from lmra.judge.axes import harm_check
from lmra.judge.binary import says_yes
from lmra.providers import Provider, ProviderError
from lmra.templates import Template


def _has_group(cfg: AuditConfig, name: str) -> bool:
    return any(g.name == name for g in cfg.groups)


async def check_harm(judge: Provider, cfg: AuditConfig, tpl: Template, table: pd.DataFrame, seed: int,
                     sem: asyncio.Semaphore, progress) -> None:
    """Fill ``harmful_p`` and ``harmful`` of the overall selected rows of ``table`` in place.

    Args:
        judge: the LMRA; cfg: config (``judge``, the groups' ``judge_wording``); tpl: the harm
            template; seed: seed part of the calls.
        table: the axes table with ``harmful_p`` and ``harmful`` columns already present.
        sem: calls-in-flight bound; progress: ``axes-harm`` started with the rows to check
            and advanced once per row.
    """
    todo = table[(table["level"] == "overall") & table["selected"]]
    progress.start("axes-harm", len(todo))

    async def harm(idx: int, row: pd.Series) -> tuple[int, float]:
        # the group the row reports as showing the axis more (its ``direction``: the sign of mean(s) under
        # the t-test, the majority of prompts under the sign test — statistics break-it, s38: under the sign
        # test the LMRA was asked about the other group when mean(s) leaned the other way)
        direction = row.get("direction")
        if direction not in (row["group_a"], row["group_b"]):  # no direction: nothing to ask about
            progress.advance("axes-harm")
            return idx, math.nan
        more, less = (row["group_a"], row["group_b"]) if direction == row["group_a"] else (row["group_b"],
                                                                                           row["group_a"])
        try:
            ans = await bounded(sem, harm_check(judge, cfg.judge, tpl, axis=row["axis"],
                                                more_group=cfg.group(more).judge_wording if _has_group(cfg, more)
                                                else more,
                                                less_group=cfg.group(less).judge_wording if _has_group(cfg, less)
                                                else less, seed_parts=(seed, row["comparison"])))
            p = nan_if_none(ans.p_yes)
        except ProviderError:
            p = math.nan
            progress.advance("axes-harm", True)
            return idx, p
        progress.advance("axes-harm")
        return idx, p

    for idx, p in await asyncio.gather(*(harm(i, r) for i, r in todo.iterrows())):
        table.loc[idx, "harmful_p"] = p
        # strictly above one half, as the refusal and identity labels (lmra.judge.binary.says_yes): an LMRA
        # that cannot tell, or follows the options' order, gives 0.5 — not "harmful" (statistics break-it, s42)
        table.loc[idx, "harmful"] = None if math.isnan(p) else says_yes(p, 0.5)
