"""``lmra cache info`` (what the call cache holds, by model) and ``lmra cache prune --older-than
AGE`` (delete calls stored more than AGE ago and give the disk space back): the upkeep of a
nightly audit's growing cache (:mod:`lmra.cache_upkeep`; docs/nightly.md, "The call cache")."""

from __future__ import annotations

import argparse
import re
import time

from lmra.cli.commands import COMMANDS
from lmra.console import lit, make_console

#: ``--older-than``: a number and a unit, days or hours
#: (ASCII digits only: ``\d`` took "٣d" and "３d" for 3 days in this destructive command, where every
#: other number option refuses them — bad-input break-it, s45)
_AGE = re.compile(r"([0-9]+(?:\.[0-9]+)?)([dh])", re.ASCII)
_UNIT_S = {"d": 86400.0, "h": 3600.0}


def age_arg(text: str) -> float:
    """argparse type of ``--older-than``: ``30d`` (days) or ``36h`` (hours), > 0, ASCII digits
    only; in seconds."""
    m = _AGE.fullmatch(text.strip())
    if m is None or float(m.group(1)) <= 0:
        raise argparse.ArgumentTypeError(f"an age is a number > 0 (digits 0-9, a decimal point allowed) and a "
                                         f"unit, d (days) or h (hours), e.g. 30d or 1.5d; got {text!r}")
    seconds = float(m.group(1)) * _UNIT_S[m.group(2)]
    if seconds >= time.time():  # (break-it, s48: a cutoff of "-8639999999999997449863168 Unix seconds")
        raise argparse.ArgumentTypeError(f"{text!r} reaches back before 1970, before any call could be stored: "
                                         "nothing is that old (e.g. 365d)")
    return seconds


def _cache_path(args: argparse.Namespace) -> str:
    """The cache file: ``--cache``, else the ``cache`` of ``--config`` (an audit's or a recsys
    config's), else the default ``reports/cache.sqlite`` (relative to the working folder, as
    ``lmra audit`` has it).

    Raises:
        LmraInputError: the file does not exist, naming where its path came from.
    """
    from pathlib import Path

    from lmra.errors import LmraInputError

    if args.cache:
        path, file, field, where = args.cache, args.cache, "--cache", ""
    elif args.config:
        from lmra.cli.common import is_recsys_config

        if is_recsys_config(args.config):
            from lmra.recsys.config import load_recsys_config

            path = load_recsys_config(args.config).cache
            if not path:
                raise LmraInputError("this recsys config has no call cache ('cache' is empty)", file=args.config,
                                     field="cache")
        else:
            from lmra.config import load_config

            path = load_config(args.config).cache
        file, field, where = args.config, "cache", f" (the config's cache {path}, relative to the working folder)"
    else:
        path, file, field = "reports/cache.sqlite", "reports/cache.sqlite", None
        where = " (the default cache in this working folder; give another with --cache FILE or --config CONFIG)"
    if not Path(path).is_file():
        raise LmraInputError(f"no call cache here: no such file{where}", file=file, field=field)
    return path


def _size(n: int) -> str:
    for unit in ("bytes", "KB", "MB", "GB"):
        if n < 1000 or unit == "GB":
            return f"{n:,} {unit}" if unit == "bytes" else f"{n:,.1f} {unit}"
        n /= 1000
    return ""  # unreachable


def _utc(t: float) -> str:
    """``t`` (Unix seconds) as a UTC time, or as seconds when no calendar date holds it (a row
    written by a clock far ahead, an age of millennia: break-it round 2, s42, a traceback)."""
    from datetime import datetime, timezone

    try:
        return datetime.fromtimestamp(t, timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    except (OverflowError, OSError, ValueError):
        return f"{t:.0f} Unix seconds"


def cmd_cache_info(args: argparse.Namespace) -> int:
    """``lmra cache info [--cache FILE | --config CONFIG]``: the cache's calls by provider and
    model (how many, the oldest and newest), its pair-memo rows and its size on disk."""
    from rich.table import Table

    from lmra.cache_upkeep import describe

    path = _cache_path(args)
    s = describe(path)
    console = make_console()
    console.print(f"Call cache {lit(path)}: {s.n_calls:,} call{'s' * (s.n_calls != 1)} and {s.n_memo:,} pair-memo "
                  f"row{'s' * (s.n_memo != 1)}, {_size(s.bytes)} on disk.", highlight=False, soft_wrap=True)
    if s.models:
        t = Table("provider", "model", "calls", "oldest", "newest")
        for m in s.models:
            t.add_row(lit(m.provider), lit(m.model), f"{m.n:,}", _utc(m.oldest), _utc(m.newest))
        console.print(t)
    return 0


def cmd_cache_prune(args: argparse.Namespace) -> int:
    """``lmra cache prune --older-than AGE [--dry-run] [--no-vacuum] [--cache FILE | --config
    CONFIG]``: delete the calls and pair-memo rows stored more than AGE ago
    (:func:`lmra.cache_upkeep.prune`) and say how many, how many are kept and the file's size
    before and after. Exit 0, also when the file could not be rewritten to shrink (said, with
    why: its freed pages are reused by later calls)."""
    from lmra.cache_upkeep import prune

    path = _cache_path(args)
    r = prune(path, args.older_than, dry_run=args.dry_run, vacuum=not args.no_vacuum)
    console = make_console()
    verb = "would delete" if args.dry_run else "deleted"
    console.print(f"Call cache {lit(path)}: {verb} {r.n_calls:,} call{'s' * (r.n_calls != 1)} and {r.n_memo:,} "
                  f"pair-memo row{'s' * (r.n_memo != 1)} stored before {_utc(r.cutoff)}; {r.n_calls_kept:,} "
                  f"call{'s' * (r.n_calls_kept != 1)} kept.", highlight=False, soft_wrap=True)
    if args.dry_run:
        console.print("Nothing was written (--dry-run).")
        return 0
    if r.vacuumed:
        console.print(f"The file went from {_size(r.bytes_before)} to {_size(r.bytes_after)} on disk.",
                      highlight=False)
    elif r.vacuum_failed:
        make_console(stderr=True).print(
            f"[yellow]warning:[/] the file was not rewritten to shrink ({lit(r.vacuum_failed)}): it stays "
            f"{_size(r.bytes_after)} on disk, and later calls reuse the freed space; run 'lmra cache prune' again "
            f"when there is free disk space about the size of the kept calls, or when no audit is writing to it.",
            highlight=False, soft_wrap=True)
    elif r.n_calls or r.n_memo:
        console.print(f"The file was not rewritten (--no-vacuum): it stays {_size(r.bytes_after)} on disk; later "
                      f"calls reuse the freed space.", highlight=False)
    if r.n_calls:
        console.print("[dim]A night interrupted or stopped before then can no longer be resumed from the cache: "
                      "its re-run asks those calls again. Run folders and the history are not touched.[/]",
                      highlight=False, soft_wrap=True)
    return 0


def _where(p: argparse.ArgumentParser) -> None:
    g = p.add_mutually_exclusive_group()
    g.add_argument("--cache", metavar="FILE", help="the call cache's SQLite file (default: the config's 'cache', "
                                                   "else reports/cache.sqlite)")
    g.add_argument("--config", metavar="CONFIG", help="take the cache's path from this audit or recsys config")


def add_parsers(sub) -> None:
    """Add ``cache`` (``info``, ``prune``) to the ``lmra`` subcommands."""
    c = sub.add_parser("cache", help=COMMANDS["cache"].help,
                       description="A nightly audit with a new seed every night adds every night's calls to the "
                                   "call cache; nothing in a finished run needs them afterwards but a resume of an "
                                   "unfinished night (docs/nightly.md, 'The call cache').")
    csub = c.add_subparsers(dest="cache_command", required=True)
    i = csub.add_parser("info", help="the cache's calls by model (how many, oldest, newest), pair-memo rows and size")
    _where(i)
    i.set_defaults(func=cmd_cache_info)
    p = csub.add_parser("prune", help="delete calls and pair-memo rows stored more than AGE ago, then shrink the file")
    p.add_argument("--older-than", required=True, type=age_arg, metavar="AGE",
                   help="e.g. 30d (days) or 36h (hours); keep it longer than any night you may still resume")
    p.add_argument("--dry-run", action="store_true", help="count what would be deleted; write nothing")
    p.add_argument("--no-vacuum", action="store_true",
                   help="do not rewrite the file afterwards (it keeps its size; later calls reuse the space)")
    _where(p)
    p.set_defaults(func=cmd_cache_prune)
