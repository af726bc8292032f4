"""Shards of an audit: ``lmra audit --shard I/N`` audits a deterministic 1/N of the prompts
(docs/scale.md), and ``lmra merge`` (:mod:`lmra.merge`) joins the N run folders into one.

A prompt belongs to shard ``I`` of ``N`` when SHA-256 of its id (UTF-8), read as a big
integer, is ``I − 1`` modulo ``N``: stable under re-runs, on any machine and Python version,
and independent of the prompt file's order or of the other prompts.

Where the prompts are split (:attr:`Shard.mode`, recorded in the shard's ``shard.json``):

* ``prompts`` — the config audits every prompt (``prompts_per_task = 0``) and has no placebo:
  whether a prompt is audited depends on that prompt alone, so each shard classifies,
  filters, generates and rates only its own prompts; no call is made twice.
* ``selection`` — with a per-task limit (or a placebo), which prompts are audited depends on
  the filter's answers about the other prompts of a task (and the placebo's seeded share on
  all kept prompts), so every shard classifies and filters the whole prompt set (the same
  LMRA calls in each shard: a shared cache pays them once) and then audits its share of the
  selection. ``shard.json`` records a hash of the whole selection; :mod:`lmra.merge`
  refuses shards that selected differently.

Every shard runs the whole judge check (its canaries do not depend on the prompts), so each
shard has its own judge status; the merged run takes the canary ratings of its worst shard.
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass
from pathlib import Path

from lmra.errors import LmraInputError

#: the file a sharded run writes into its run folder (see :meth:`Shard.record`)
SHARD_FILE = "shard.json"
def is_shard(folder) -> bool:
    """Whether a run folder is one shard of a sharded audit (it holds :data:`SHARD_FILE`)."""
    return (Path(folder) / SHARD_FILE).is_file()


#: largest N of ``--shard I/N``
MAX_SHARDS = 100_000


def shard_of(prompt_id: str, count: int) -> int:
    """The shard (1 … ``count``) that holds ``prompt_id``: SHA-256 of the id's UTF-8 bytes as
    a big-endian integer, modulo ``count``, plus 1."""
    return int.from_bytes(hashlib.sha256(prompt_id.encode("utf-8")).digest(), "big") % count + 1


def selection_hash(prompt_ids) -> str:
    """SHA-256 (hex) of the sorted prompt ids, one per line: which prompts a run selected."""
    return hashlib.sha256("\n".join(sorted(prompt_ids)).encode("utf-8")).hexdigest()


def inputs_hash(prompts, group_names: dict[str, list[str]], templates: dict | None = None) -> str:
    """SHA-256 (hex) of what a shard audited from: every prompt of the file (id, text, domain,
    task, in file order), the name groups' names and the question templates' hashes. Shards
    whose hashes differ read different input files (a prompt file refreshed between two shards)
    and are refused by :mod:`lmra.merge`."""
    h = hashlib.sha256()
    for p in prompts:
        h.update(json.dumps([p.id, p.text, p.domain, p.task], ensure_ascii=False).encode("utf-8") + b"\n")
    h.update(json.dumps({"names": group_names, "templates": templates or {}}, sort_keys=True,
                        ensure_ascii=False).encode("utf-8"))
    return h.hexdigest()


@dataclass(frozen=True)
class Shard:
    """Shard ``index`` of ``count`` (1 ≤ index ≤ count)."""

    index: int
    count: int

    @property
    def label(self) -> str:
        """``"I/N"``, as written on the command line."""
        return f"{self.index}/{self.count}"

    def holds(self, prompt_id: str) -> bool:
        """True when the prompt ``prompt_id`` belongs to this shard (:func:`shard_of`)."""
        return shard_of(prompt_id, self.count) == self.index

    @staticmethod
    def mode_for(cfg) -> str:
        """``prompts`` or ``selection`` for the audit config ``cfg`` (see the module docstring)."""
        return "prompts" if not cfg.prompts_per_task and not cfg.placebo.share else "selection"

    def record(self, cfg, prompt_positions: dict[str, int], selected: list[str]) -> dict:
        """The content of the shard's ``shard.json``.

        Args:
            cfg: the audit config; prompt_positions: prompt id → its line position in the prompt
                file (0-based), for the prompts this shard saw (the merged run puts them back in
                file order); selected: the ids of every prompt the selection kept (the whole
                selection in ``selection`` mode, this shard's in ``prompts`` mode).

        The audit adds ``filter_order`` (the unsharded order of the filter's removals) and
        ``inputs_sha256`` (:func:`inputs_hash`).
        """
        return {"schema_version": 1, "shard": self.label, "index": self.index, "count": self.count,
                "mode": self.mode_for(cfg), "selection_sha256": selection_hash(selected),
                "n_selected": len(selected), "prompt_positions": prompt_positions}


#: ``I/N`` in ASCII digits (``re.ASCII``: ``١/٢`` is not 1/2)
_SHARD_RE = re.compile(r"\s*(\d{1,9})\s*/\s*(\d{1,9})\s*", re.ASCII)


def parse_shard(text: str, *, option: str = "--shard") -> Shard:
    """Parse ``I/N`` (1 ≤ I ≤ N ≤ :data:`MAX_SHARDS`).

    Raises:
        LmraInputError: not of that form or out of range (field ``option``; exit status 2).
    """
    m = _SHARD_RE.fullmatch(text or "")
    if not m:
        raise LmraInputError(f"'{text}' is not I/N (e.g. 2/8: the second of 8 shards)", field=option)
    i, n = int(m.group(1)), int(m.group(2))
    if not 1 <= n <= MAX_SHARDS:
        raise LmraInputError(f"'{text}': N must be between 1 and {MAX_SHARDS:,}", field=option)
    if not 1 <= i <= n:
        raise LmraInputError(f"'{text}': I must be between 1 and N = {n}", field=option)
    return Shard(i, n)
