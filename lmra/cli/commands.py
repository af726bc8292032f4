"""Every ``lmra`` subcommand, in the order ``lmra --help`` lists them: the module of
:mod:`lmra.cli` that defines it (its ``add_parsers``) and its one-line help.

:func:`lmra.cli.build_parser` imports only the module of the command being run and lists the
others by this table, so the table is the one place a command's one-line help is written (its
module passes ``help=COMMANDS[name].help``). No imports: reading it costs nothing.
"""

from __future__ import annotations

from typing import NamedTuple


class Command(NamedTuple):
    """One subcommand: ``module`` under :mod:`lmra.cli` (registers it in ``add_parsers``,
    together with the other commands of that module, in this table's order) and ``help``."""

    module: str
    help: str


COMMANDS: dict[str, Command] = {
    "audit": Command("audit", "run a counterfactual name-swap audit (default: the bundled audit on the embedded model)"),
    "judge-check": Command("judge_check", "validate an LMRA on known-answer canary pairs (exit 5 if it fails)"),
    "validate": Command("validate", "check a config and its input files without calling any model"),
    "agreement": Command("agreement", "compare imported human ratings of pairs with the LMRA's"),
    "names": Command("names", "name lists"),
    "history": Command("monitor", "list registered runs, or one task's net rating across runs"),
    "check": Command("monitor", "test RUN against a baseline for regressions (exit 3 if a task regressed, 0 if not)"),
    "compare": Command("monitor", "compare two runs across tasks: Pearson r and slope through 0"),
    "plan": Command("monitor", "prompts per task needed to detect a given net rating (or a rise of it)"),
    "export": Command("monitor", "write per-task and per-pair tables as CSV, JSON or Parquet, or the run's metrics "
                                 "for Prometheus"),
    "report": Command("monitor", "write RUN/report.html (self-contained HTML report), or with --history the history "
                                 "page of all nights"),
    "pin": Command("monitor", "pin RUN as the 'pinned' baseline of runs with its name"),
    "gate": Command("gates", "check a finished run against absolute release gates, without a baseline (exit 6 if a "
                             "gate is not met)"),
    "recsys": Command("recsys", "recommendation fairness: FaiRLLM/CFaiRLLM list similarity (Jaccard, SERP*, PRAG*; "
                                "SNSR, SNSV) and bias disparity"),
    "batch": Command("batch", "status, resume or cancel the batch-API jobs of a run (--batch audits)"),
    "axes": Command("axes", "find the axes on which responses to two groups differ (bias enumeration, FPF §3.4) on a "
                            "finished run"),
    "merge": Command("scale", "join the run folders of a sharded audit (lmra audit --shard I/N) into one run"),
    "warehouse": Command("scale", "the warehouse of nights: runs' per-pair, per-task and overall tables as one partitioned "
                                  "Parquet dataset (docs/exports.md)"),
    "cache": Command("cache", "the call cache: its calls by model and size (info); delete calls older than an age "
                              "and shrink the file (prune)"),
}
