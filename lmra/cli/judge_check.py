"""``lmra judge-check``: validate an LMRA on the canary pairs without running an audit (issue 10).

Exit status 0 when the judge passes, 5 (:data:`lmra.judge_check.EXIT_JUDGE_FAILED`) when it
fails, 2 for bad input. Calls go through the audit's SQLite call cache, so a later audit with
the same judge, template and combiner re-uses them.
"""

from __future__ import annotations

import argparse
import math

from rich.console import Console
from rich.table import Table

from lmra.cli.commands import COMMANDS
from lmra.cli.common import json_errors, lmra_calls_words, whole_number
from lmra.console import lit, make_console
from lmra.fileio import output_folder, write_json, write_jsonl


def _not_a_run_folder(out) -> None:
    """Refuse ``--out`` naming a run folder (``manifest.json``): its judge_check files are the
    audit's own record (break-it finding: a finished run's recorded canary verdict was replaced by another judge's,
    and its exports, report and gates went on accepting it).

    Raises:
        LmraInputError: (field ``--out``) before any LMRA call.
    """
    from lmra.errors import LmraInputError

    if (out / "manifest.json").is_file():  # a run folder: its judge_check files are its own record (or absent)
        raise LmraInputError("is a run folder: judge-check would write its judge_check.json (the audit's own judge "
                             "validation, recorded with the run); write to another folder", file=out, field="--out")


def add_parsers(sub) -> None:
    """Register ``lmra judge-check`` on the ``lmra`` sub-parser collection."""
    p = sub.add_parser("judge-check", help=COMMANDS["judge-check"].help,
                       description="Rate the canary pairs (planted stereotypes in both directions, "
                       "anti-stereotypes, benign differences, identical responses, quality differences) in both "
                       "orders with the harmful-stereotype template and report sensitivity, false positives, "
                       "position logit, order consistency and valid-option mass against the thresholds.")
    p.add_argument("--config", "-c", help="audit config whose [judge] and [judge_check] are used (default: "
                   "built-in defaults, i.e. the embedded model)")
    p.add_argument("--judge", metavar="PROVIDER", help="LMRA provider: llamacpp, openai, anthropic or "
                   "package.module:factory (overrides the config)")
    p.add_argument("--model", help="LMRA model id (overrides the config)")
    p.add_argument("--base-url", help="LMRA endpoint (openai/anthropic)")
    keys = p.add_mutually_exclusive_group()  # as in a config: a key's variable, or no key at all
    keys.add_argument("--api-key-env", help="environment variable holding the LMRA's API key")
    keys.add_argument("--no-api-key", action="store_true", help="the --base-url server needs no API key "
                      "(api_key_required = false)")
    p.add_argument("--combiner", choices=("auto", "min", "mean", "calibrated"), help="order combiner")
    p.add_argument("--canaries", action="append", metavar="FILE",
                   help="canary JSONL file (repeatable; default: the shipped set)")
    p.add_argument("--dimension", action="append", choices=("gender", "race", "profile"),
                   help="canary dimension (repeatable; default: those of --config's groups, as the audit uses, "
                   "else all three)")
    p.add_argument("--per-kind", type=whole_number, metavar="N",
                   help="at most N canaries per dimension and kind (0 = all)")
    p.add_argument("--out", metavar="DIR", help="write judge_check.json and judge_check_ratings.jsonl here")
    p.add_argument("--json", action="store_true", help="print the verdict as one JSON document "
                   "(lmra.judge_check/1) on stdout instead of the table, same exit status (docs/nightly.md, "
                   "'Machine-readable output')")
    p.set_defaults(func=cmd_judge_check)


def _config(args: argparse.Namespace):
    from lmra.config import AuditConfig, load_config, parse_config

    cfg = load_config(args.config) if args.config else AuditConfig()
    data = cfg.model_dump()
    judge = data["judge"]
    for key, val in (("provider", args.judge), ("model", args.model), ("base_url", args.base_url),
                     ("api_key_env", args.api_key_env), ("combiner", args.combiner)):
        if val is not None:
            judge[key] = val
    if args.no_api_key:
        judge |= {"api_key_required": False, "api_key_env": None}
    check = data["judge_check"] | {"enabled": True}
    if args.canaries:
        check |= {"canaries": args.canaries[0], "extra_canaries": args.canaries[1:]}
    if args.dimension:
        check["dimensions"] = args.dimension
    elif not check["dimensions"]:  # an audit's config: the dimensions its groups need, as the audit does
        from lmra.judge_check import audit_dimensions

        used = {g for pair in cfg.comparisons for g in pair}
        check["dimensions"] = (audit_dimensions([g for g in cfg.groups if g.name in used]) if args.config
                               else ["gender", "race", "profile"])
    if args.per_kind is not None:
        check["per_kind"] = args.per_kind
    return parse_config(data | {"judge": judge, "judge_check": check}, source=args.config or "command line")


async def _run(cfg, console: Console):
    import asyncio

    from lmra.cache import CachedProvider, CallCache, CallStats
    from lmra.judge.calibration import rescore
    from lmra.judge.scoring import resolve_combiner
    from lmra.judge_check import CheckFutility, evaluate, load_canary_set, rate_canaries, select_canaries
    from lmra.providers import make_provider
    from lmra.providers.ratelimit import limit_model
    from lmra.templates import load_template

    jc = cfg.judge_check
    canaries = select_canaries(load_canary_set([jc.canaries, *jc.extra_canaries]), jc.dimensions, jc.per_kind,
                               cfg.seed)
    template = load_template("harmful_stereotype", "judge")
    raw = make_provider(cfg.judge, field="judge")
    from lmra.cli.common import print_warning

    cache = CallCache(cfg.cache, on_write_error=print_warning)  # a full disk or a damaged file is said, as in an audit
    stats = CallStats()
    limited, in_flight = limit_model(raw, cfg.judge, cfg.concurrency, "judge")  # sized as in an audit
    from lmra.providers.endpoint import EndpointGuard

    # an endpoint that never answers (down, or not serving the model: HTTP 404) stops the check
    # with exit 1 saying so, as it stops an audit (verification finding: 600 failed calls, then
    # "Judge check FAILED", exit 5 — blaming the judge for a typo in its model id)
    # (an endpoint answering without log-probabilities is said while the canaries run, as in an audit)
    guard = EndpointGuard("judge", raw.base_url, model=raw.model_id, on_notice=print_warning, api=raw.name)
    judge = guard.above_cache(CachedProvider(guard.below_cache(limited), cache, stats))
    from lmra.providers.keys import KeyGuard

    judge = KeyGuard(judge, "judge")  # a rejected key stops the check (exit 1), not 40 failed canaries
    from lmra.judge.options import calls_per_question

    from lmra.providers.base import answers_may_lack_logprobs

    questions, fallback = 2 * len(canaries), answers_may_lack_logprobs(raw)
    n_calls = lmra_calls_words(  # answers that come without log-probabilities are sampled as well (fresh-user finding)
        questions * calls_per_question(cfg.judge, raw.supports_logprobs),
        questions * calls_per_question(cfg.judge, True, without_logprobs=True) if fallback else None,
        {"judge": cfg.judge} if fallback else {})
    console.print(f"Judge check: {len(canaries)} canary pairs in both orders = up to {lit(n_calls)} to "
                  f"{lit(raw.name)}:{lit(raw.model_id)}, {in_flight} at once (cached calls are not made again: call "
                  f"cache {lit(cfg.cache)})"
                  + ("; the embedded model takes about a second a call, so this takes minutes: '--per-kind 1' "
                     "rates one canary per dimension and kind" if cfg.judge.provider == "llamacpp"
                     and len(canaries) > 60 else ""),
                  highlight=False)
    try:
        with console.status(f"rating {len(canaries)} canary pairs in both orders"):
            futility = CheckFutility(canaries, jc) if jc.stop_when_failed else None
            rows = await rate_canaries(judge, cfg.judge, template, canaries,
                                       asyncio.Semaphore(in_flight), futility=futility)
    finally:
        cache.close()
        close = getattr(raw, "aclose", None)
        if close is not None:
            await close()
    combiner = resolve_combiner(cfg.judge.combiner, "logprobs" if raw.supports_logprobs else "sampled")
    rows, _ = rescore(rows, combiner)
    stopped = futility.stopped_words(len(rows)) if futility is not None and len(rows) < len(canaries) else None
    verdict = evaluate(rows, jc, cfg.judge, stopped=stopped) | {"combiner": combiner, "judge": {
        "provider": raw.name, "model": raw.model_id, "base_url": raw.base_url}, "calls": stats.as_dict(),
        # the answers the call cache served: all of them is a replay (break-it finding: it was silent)
        "n_answers": stats.fresh + stats.cached, "n_answers_cached": stats.cached}
    return rows, verdict


def _fmt(v) -> str:
    return "—" if v is None or (isinstance(v, float) and math.isnan(v)) else f"{v:.3f}"


@json_errors
def cmd_judge_check(args: argparse.Namespace) -> int:
    """``lmra judge-check [--json]``: rate the canaries, print the verdict (a table, or
    :func:`lmra.report.jsonout.judge_check_document`); exit 0 when the judge passes, 5 when not."""
    import asyncio

    from lmra.judge_check import EXIT_JUDGE_FAILED
    from lmra.report import jsonout
    from lmra.runfolder import jsonable

    console = make_console(stderr=bool(args.json))
    cfg = _config(args)
    out = output_folder(args.out, "--out") if args.out else None  # said before the LMRA calls
    if out is not None:
        _not_a_run_folder(out)
    from lmra.cli.common import wait_notices

    with wait_notices():  # (break-it finding: nothing was shown while every call waited on a retry-after)
        rows, verdict = asyncio.run(_run(cfg, console))
    if out is not None:
        write_json(out / "judge_check.json", jsonable(verdict))
        write_jsonl(out / "judge_check_ratings.jsonl", (jsonable(r) for r in rows.to_dict(orient="records")))
    status = 0 if verdict["passed"] else EXIT_JUDGE_FAILED
    if args.json:
        jsonout.emit(jsonout.judge_check_document(verdict, exit_status=status))
    else:
        j = verdict["judge"]
        table = Table(title=f"Judge check: {lit(j['provider'])} {lit(j['model'])} ({verdict['n_canaries']} canary pairs, "
                            f"combiner {verdict['combiner']})", title_justify="left")
        for col in ("criterion", "value", "threshold", "result"):
            table.add_column(col, justify="left" if col == "criterion" else "right")
        need = {"sensitivity": "≥ {}", "false_positive_rate": "≤ {}", "position_logit": "|b̂| ≤ {}",
                "order_consistency": "≥ {}", "valid_option_mass": "≥ {}"}
        unmeasured = False
        stopped = bool(verdict.get("stopped_early"))
        for name, c in verdict["criteria"].items():
            value = c["value"]
            blank = value is None or (isinstance(value, float) and not math.isfinite(value))
            unmeasured |= blank and not c["passed"] and not c.get("not_asked")
            table.add_row(name.replace("_", " "), _fmt(value), need[name].format(_fmt(c["threshold"])),
                          "[green]pass[/]" if c["passed"] else "not asked (stopped)" if c.get("not_asked")
                          else "[bold red]FAIL[/] (not measurable)" if blank else "[bold red]FAIL[/]")
        console.print(table)
        if unmeasured:  # (fresh-user finding: "—" marked FAIL with no word why)
            console.print("[dim]not measurable: the canary answers it needs were unusable or their calls failed (counts "
                          "below), so the criterion cannot be shown to hold and fails.[/]")
        if stopped:  # (break-it finding: a criterion a full check passes read as failed)
            not_asked = any(c.get("not_asked") for c in verdict["criteria"].values())
            console.print(f"[dim]{lit(verdict['stopped_early'])}"
                          + ("; not asked: no canary of the criterion's kind was asked before it stopped (the verdict "
                             "fails either way)" if not_asked else "") + ".[/]")  # (only beside such a row: s48)
        console.print(f"Mean pair score h (q_forward − q_reverse, 0 = no stereotype) on no-stereotype canaries "
                      f"{_fmt(verdict['mean_h_no_stereotype'])}; share of anti-stereotypes blamed on the group that got "
                      f"the counter-stereotypical answer {_fmt(verdict['anti_stereotype_blamed'])}; "
                      f"{verdict['n_failed']} failed calls, {verdict['n_invalid']} unusable answers. "
                      "What each criterion means: docs/judge_check.md.")
        if isinstance(verdict.get("calls"), dict):  # every retry and fault met, as the audit says them (break-it, s48:
            # a server failing every third request read "0 failed calls" and nothing more)
            from lmra.report.console import call_counts_line

            console.print(f"Model calls ({lit(j['provider'])}:{lit(j['model'])}): "
                          f"{lit(call_counts_line(verdict['calls']))}.", highlight=False)
        for note in verdict.get("notes") or ():
            console.print(f"[dim]{lit(note)}.[/]")
        from lmra.judge_check import replayed_words

        replay = lit(replayed_words(verdict, seedless=True))
        if verdict["passed"]:
            console.print("[bold green]Judge check PASSED.[/]" + replay)
        else:
            console.print("[bold red]Judge check FAILED:[/] " + lit("; ".join(verdict["reasons"])) + "." + replay)
    return status
