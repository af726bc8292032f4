"""Progress callbacks: what the audit, the axes steps and the recsys run tell whoever shows
their progress (the CLI's Rich bars, :func:`lmra.cli.common.rich_progress`; nothing by default).

Light by design (no pandas, no Rich): every stage module and the CLI import it."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass


@dataclass
class Progress:
    """Progress callbacks of a run's stages.

    ``start(stage, total)``: a stage begins with ``total`` items (calls, prompts, pairs …) —
    called again for a stage begun, its total changes (a judge check that stopped early);
    ``advance(stage, failed=False)``: one of its items is done — ``failed`` when it failed (a
    failed call, an unlabelled prompt, a pair not rated), so that a bar that counts every item
    done can also say how many of them failed. The default callbacks do nothing."""

    start: Callable[[str, int], None] = lambda stage, total: None
    advance: Callable[..., None] = lambda stage, failed=False: None
