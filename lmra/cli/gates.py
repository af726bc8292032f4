"""Command-line front end of the absolute release gates (:mod:`lmra.gates`): the repeatable
``--gate NAME=VALUE`` option of ``lmra audit`` and ``lmra gate``, the ``lmra gate RUN``
command (gates on an existing run, no baseline), what ``lmra audit`` does with its gates after
a run (:func:`gates_after_audit`). The precedence of exit statuses when several apply is
:mod:`lmra.cli.exits`.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from typing import TYPE_CHECKING

from rich.console import Console
from rich.text import Text

from lmra.cli.commands import COMMANDS
from lmra.cli.common import RUN_HELP, add_store_args, history_file, json_errors, print_warning
from lmra.numbers import strict_float
from lmra.cli.exits import final_status, print_final_status
from lmra.errors import LmraInputError

if TYPE_CHECKING:  # lmra.config and lmra.gates load pydantic and pandas: imported where used
    from lmra.config import GatesConfig
    from lmra.gates import GateResult


def gates_reason(result: GateResult) -> str:
    """Why release gates are not met, for the final status line: ``release gates not met
    (breached: max_ci_high; not evaluated: max_refusal_gap)``."""
    breached = sorted({o.gate for o in result.breaches}, key=result.checked.index)
    missing = [g for g in result.unmet if g not in breached]
    parts = [f"breached: {', '.join(breached)}" if breached else "",
             f"not evaluated: {', '.join(missing)}" if missing else ""]
    return f"release gates not met ({'; '.join(p for p in parts if p)})"


# -- the --gate option --------------------------------------------------------------------------
def gate_option(text: str) -> tuple[str, float]:
    """argparse type of ``--gate NAME=VALUE``: a known gate and a bound in its range.

    Returns:
        ``(name, value)``.

    Raises:
        argparse.ArgumentTypeError: no ``=``, an unknown gate name, a value that is not a finite
            number, or a value outside the gate's range (argparse then exits with status 2
            naming ``--gate``).
    """
    from pydantic import ValidationError

    from lmra.config import GatesConfig
    from lmra.gates import GATES

    name, eq, value = text.partition("=")
    name = name.strip()
    if not eq:
        raise argparse.ArgumentTypeError(f"{text!r} is not NAME=VALUE (e.g. max_ci_high=0.15)")
    if name not in GATES:
        import difflib

        close = difflib.get_close_matches(name, list(GATES), n=1, cutoff=0.6)  # as a config typo gets one
        hint = f" — did you mean '{close[0]}'?" if close else ""
        raise argparse.ArgumentTypeError(f"{text!r}: unknown gate '{name}'{hint}; gates: {', '.join(GATES)} "
                                         "(per-task overrides only in the config's [gates.tasks.\"TASK\"])")
    try:
        v = strict_float(value)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"{text!r}: the bound is {exc}") from None
    try:
        GatesConfig.model_validate({name: v})
    except ValidationError:
        what = "[0, 1] (a gap between rates or scores)" if "gap" in name else "[-1, 1] (a net rating or CI bound)"
        raise argparse.ArgumentTypeError(f"{text!r}: the bound must be a finite number in {what}") from None
    return name, v


def add_gate_option(parser: argparse.ArgumentParser, help: str) -> None:
    """Add the repeatable ``--gate NAME=VALUE`` option (stored in ``args.gate``, a list)."""
    parser.add_argument("--gate", action="append", type=gate_option, metavar="NAME=VALUE", help=help)


def with_gate_options(gates: GatesConfig, options: list[tuple[str, float]] | None) -> GatesConfig:
    """``gates`` with the ``--gate`` bounds set on top (per-task overrides are kept).

    Raises:
        LmraInputError: one gate given twice with different bounds (field ``--gate``): an
            appended ``--gate`` must not loosen a release gate unnoticed.
    """
    if not options:
        return gates
    seen: dict[str, float] = {}
    for name, value in options:
        if name in seen and seen[name] != value:
            raise LmraInputError(f"{name} is given twice ({name}={seen[name]!r} and {name}={value!r}); give each "
                                 "gate once", field="--gate")
        seen[name] = value
    return gates.model_copy(update=seen)


def audit_config_with_gates(cfg, options: list[tuple[str, float]] | None):
    """The audit config with ``lmra audit --gate`` bounds merged into ``[gates]`` (so the run's
    stored config.toml records the gates applied, and ``lmra gate RUN`` finds them).

    Raises:
        LmraInputError: a ``--gate`` bounds refusals or quality while the config does not
            measure them (field ``--gate``; checked before any model call).
    """
    if not options:
        return cfg
    from lmra.config import GATES_NEEDING

    for name, value in options:
        section = GATES_NEEDING.get(name)
        if section and not getattr(cfg, section).enabled:
            what = "refusal labels" if section == "refusal" else "quality ratings"
            raise LmraInputError(f"{name}={value:g} bounds {what}, which this audit does not measure ([{section}] "
                                 f"enabled = false in its config): enable [{section}] or drop the gate",
                                 field="--gate")
    return cfg.model_copy(update={"gates": with_gate_options(cfg.gates, options)})


# -- printing -----------------------------------------------------------------------------------
def print_gates(console: Console, result: GateResult, run=None) -> None:
    """One line per breached or unevaluated value (``GATE BREACHED max_ci_high: task 'write a
    story' (female vs male) CI high 0.034 > 0.02``), then the summary line — which, for ``run``
    (its :class:`~lmra.runfolder.RunFolder`) partial or judged by an LMRA that failed validation
    (gated), says that "all passed" is not evidence (ops trial, s49: "all passed" in green on a
    partial run, its overall rating from 11 of 35 pairs)."""
    lines = result.lines()
    caveat = _not_evidence(run) if result.passed and run is not None else ""
    if caveat:
        lines[-1] += f" — not evidence: {caveat}"
    for line in lines[:-1]:
        if line.startswith("warning: "):  # on stderr, as every warning (docs/nightly.md, "Machine-readable output")
            print_warning(line[len("warning: "):])
            continue
        style = "bold red" if line.startswith("GATE BREACHED") else "bold yellow"
        head, _, rest = line.partition(":")
        console.print(Text.assemble((head, style), ":" + rest), highlight=False, soft_wrap=True)
    console.print(Text(lines[-1], style=("bold yellow" if caveat else "bold green") if result.passed else "bold red"),
                  highlight=False, soft_wrap=True)


def _not_evidence(run) -> str:
    """Why a run's gates that all passed are not evidence, in words, or "" (a complete run whose
    LMRA passed validation or whose failure is waived — said in a note of its own)."""
    if run.status != "complete":
        return f"the run is {run.status} (its numbers are incomplete)"
    if run.judge_status_gated_failure:
        return "the run's LMRA failed validation"
    return ""


def gates_after_audit(run_dir: str | Path, gates: GatesConfig, *, console: Console,
                      reasons: dict[int, str] | None = None) -> int:
    """What ``lmra audit`` does with its ``[gates]`` after a run: evaluate them on the run
    folder, record ``gates.json`` and ``summary.json["gates"]``, print a line per breach.
    ``reasons`` (optional) receives ``{6: why}`` when a gate is not met, for the audit's final
    status line (:func:`final_status`).

    Returns:
        0 (every gate met, or no gate configured: then nothing is written or printed), or
        :data:`lmra.gates.EXIT_GATES_NOT_MET` (6).
    """
    if not gates.configured:
        return 0
    from lmra.gates import EXIT_GATES_NOT_MET, evaluate_gates, record_gates
    from lmra.runfolder import load_run

    run = load_run(run_dir)
    result = evaluate_gates(run, gates)
    record_gates(run, result, evaluated_by="lmra audit")
    print_gates(console, result, run)
    if not result.passed and reasons is not None:
        reasons[EXIT_GATES_NOT_MET] = gates_reason(result)
    return result.exit_status


def recorded_gates(run_ref: str | Path, history: str | Path) -> dict | None:
    """The gate evaluation recorded in a run's ``summary.json`` (``summary.json["gates"]``, the
    :meth:`lmra.gates.GateResult.to_dict` document without ``results``); None when none was made.

    Args:
        run_ref: a run folder path, run id or ``latest``; history: the history file to resolve it in.
    """
    from lmra.history import History
    from lmra.runfolder import load_run

    if Path(run_ref).is_dir():
        return load_run(run_ref).summary.get("gates")
    with History(history) as h:
        return h.resolve(str(run_ref)).summary.get("gates")


# -- lmra gate RUN ------------------------------------------------------------------------------
def _gates_from_file(path: str) -> GatesConfig:
    from lmra.config import GatesConfig, validate_model
    from lmra.errors import read_toml

    text, data = read_toml(path, "config file")
    if not isinstance(data.get("gates"), dict):
        raise LmraInputError("has no [gates] table (e.g. '[gates]' then 'max_ci_high = 0.02')", file=path,
                             field="--config")
    try:
        return validate_model(GatesConfig, data["gates"], source=path, text=text)
    except LmraInputError as exc:  # name the field as the config does: gates.<name>
        raise LmraInputError(exc.reason, file=exc.file, line=exc.line, field=f"gates.{exc.field}") from None


def _run(args: argparse.Namespace):
    from lmra.runfolder import load_run

    if Path(args.run).is_dir():
        return load_run(args.run)
    from lmra.history import History

    path = history_file(args, args.run)
    if not path.exists() and not path.parent.is_dir():  # never create a history store just to look a name up
        raise LmraInputError(f"no such run folder, and no runs in {path.parent}/ to look the run id up in",
                             file=args.run, field="RUN")
    with History(path) as h:
        return h.resolve(args.run)


def _unmeetable_on(run, gates) -> list[str]:
    """The CI-bound gates a run's sizes could never meet, and the refusal-gap gates its sizes let noise
    breach (:func:`lmra.gate_noise.gate_warnings`, with the
    run's interval, level, samples per prompt and prompts per task), so that a gate tried on past runs
    says why it breaches on a clean night, as ``lmra validate`` and ``lmra audit`` say before a night."""
    from types import SimpleNamespace

    from lmra.config import QualityConfig
    from lmra.gate_noise import gate_warnings, quality_score_sd
    from lmra.runfolder import finite

    pt = run.per_task
    if pt.empty or "n_prompts" not in pt:
        return []
    sizes: dict[tuple[str, str], int] = {}  # per (domain, task): a task name in two domains is two tasks
    for key, n in zip(zip(pt["domain"].astype(str), pt["task"].astype(str)), pt["n_prompts"]):
        if finite(n) is not None and n >= 1:
            sizes[key] = max(sizes.get(key, 0), int(n))
    confidence = finite(run.summary.get("confidence")) or 0.95
    criteria = list((run.config.get("quality") or {}).get("criteria") or QualityConfig().criteria)
    cfg = SimpleNamespace(gates=gates, interval=str(run.summary.get("interval") or "t"), alpha=1 - confidence,
                          samples_per_prompt=int(run.config.get("samples_per_prompt") or 1),
                          comparisons=run.comparisons or [()], quality=SimpleNamespace(criteria=criteria))
    quality = gates.max_quality_gap is not None or gates.max_overall_quality_gap is not None or any(
        t.max_quality_gap is not None for t in gates.tasks.values())
    return gate_warnings(cfg, sizes, quality_sd=quality_score_sd(run) if quality else None)


def cmd_gate(args: argparse.Namespace) -> int:
    """``lmra gate RUN [--gate NAME=VALUE …] [--config FILE]``: the release gates on a finished
    run, without a baseline. Exit 0 every gate met, 6 not met, 5 the run's judge failed
    validation, 1 the run is partial or failed, 2 input error (no gate to evaluate, a gate on
    something the run did not measure)."""
    from lmra.gates import EXIT_GATES_NOT_MET, evaluate_gates, record_gates, stored_gates
    from lmra.judge_check import EXIT_JUDGE_FAILED

    run = _run(args)
    from lmra.digests import verify_recorded

    verify_recorded(run.path)  # a release gate vouches for the whole run: none of its files damaged
    if args.config:
        gates, origin = _gates_from_file(args.config), args.config
    else:
        gates, origin = stored_gates(run), str(run.path / "config.toml")
    source = " and ".join([origin] * gates.configured + ["--gate"] * bool(args.gate))
    gates = with_gate_options(gates, args.gate)
    if not gates.configured:
        raise LmraInputError(f"no gates to evaluate: {origin} has no [gates] bounds and no --gate was given; pass "
                             "--gate NAME=VALUE (e.g. --gate max_ci_high=0.15) or --config FILE with a [gates] "
                             "table")  # (not "option --gate: …": the user gave no such option; new-user finding)
    from lmra.gates import unmeasured_gates

    from_options = {n for n, _ in args.gate or []}
    for name, why in unmeasured_gates(run, gates).items():
        if name in from_options:
            raise LmraInputError(f"gate {name} cannot be evaluated: {why}", field="--gate")
        raise LmraInputError(f"gate {name} cannot be evaluated: {why}", file=origin, field=f"gates.{name}")
    unmeetable = _unmeetable_on(run, gates)
    for line in unmeetable:  # (fresh-user finding: said by validate and audit, not here)
        print_warning(line)
    result = evaluate_gates(run, gates)
    rewritten = None
    if args.record:  # only when asked: the audit's own record (history page, exports) is kept by default
        record_gates(run, result, evaluated_by="lmra gate")
        rewritten = _rewrite_report(args, run)
    reasons = {} if result.passed else {EXIT_GATES_NOT_MET: gates_reason(result)}
    notes = []
    if run.judge_status_gated_failure and not args.allow_unvalidated_judge:
        reasons[EXIT_JUDGE_FAILED] = "the run's judge failed validation"
        notes.append(f"the run's judge failed validation ({run.judge_status}): its numbers are not evidence about "
                     "the chatbot (--allow-unvalidated-judge to accept it)")
    elif run.judge_status.startswith("failed"):  # waived (by the config or --allow-unvalidated-judge): said, not hidden
        how = ("waived" if run.judge_status.endswith("(waived)") else "accepted with --allow-unvalidated-judge"
               if run.judge_status_gated_failure else "not gated by the run's config")
        notes.append(f"the run's judge failed validation ({how}): the gates above judge numbers from an unvalidated "
                     "judge")
    if run.status != "complete":
        reasons[1] = f"run {run.run_id} is {run.status}"
        notes.append(f"run {run.run_id} is {run.status}: its numbers are incomplete")
    status = final_status(reasons)[0]
    if args.json:
        from lmra.report import jsonout

        jsonout.emit(result.to_dict() | {"exit_status": status, "gates_exit_status": result.exit_status,
                                         "run_status": run.status, "judge_status": run.judge_status,
                                         "notes": notes})
        return status
    from lmra.console import make_console

    console = make_console()
    console.print(Text(f"Release gates of {run.run_id} (bounds from {source}):"), highlight=False, soft_wrap=True)
    print_gates(console, result, run)
    for n in notes:
        console.print(Text.assemble(("note: ", "bold red"), n), highlight=False, soft_wrap=True)
    import re

    warned = sorted({m.group(1) for line in unmeetable for m in re.finditer(r"release gate (max_\w+)", line)})
    breached = {o.gate for o in result.outcomes if o.status == "breached"}
    for gate in (g for g in warned if g in breached):  # said again under the breaches (fresh-user finding, s38:
        # 27 breach lines pushed the warning out of sight), for the gates warned of only (break-it round 2: one
        # note covered a real net-rating breach too, and called a real quality gap noise)
        console.print(Text.assemble(("note: ", "bold yellow"), f"{gate} was warned of above (stderr): at this run's "
                                    "sizes it cannot be met, or noise alone breaches it on many nights, so its breaches "
                                    "alone are weak evidence — the rows' own intervals say whether a value is beyond "
                                    "noise"), highlight=False, soft_wrap=True)
    if rewritten is not None:
        console.print(Text(f"report.html rewritten with the gates recorded: {rewritten}"), highlight=False,
                      soft_wrap=True)
    return print_final_status(console, reasons)


def _rewrite_report(args: argparse.Namespace, run) -> Path | None:
    """The run's report.html written anew once its gates are recorded (``lmra gate --record``), as
    ``lmra report RUN`` writes it — only when the run folder has one (fresh-user finding: it kept
    showing no gates until ``lmra report`` was run by hand). Its path, or None."""
    if not (run.path / "report.html").is_file():
        return None
    from lmra.history import History
    from lmra.report.html import write_report
    from lmra.runfolder import load_run

    with History(history_file(args, str(run.path))) as h:
        run = load_run(run.path)
        h.register(run)
        return write_report(run, None, history=h)


def add_parsers(subparsers) -> None:
    """Register ``lmra gate`` on the ``lmra`` sub-parser collection."""
    g = subparsers.add_parser(
        "gate", help=COMMANDS["gate"].help,
        description="Evaluate release gates (docs/nightly.md, 'Release gates') on a finished run: by default the "
                    "[gates] the run's own config.toml recorded, replaced by --config FILE's [gates] table, with "
                    "--gate bounds on top. Prints only; with --record it replaces the run folder's gates.json "
                    "and summary.json['gates'] (the audit's own record, shown by the history page and exports) "
                    "and writes the run's report.html anew.")
    g.add_argument("run", metavar="RUN", help=RUN_HELP)
    add_gate_option(g, "a gate bound, e.g. max_ci_high=0.15 (repeatable; overrides the same gate of the config)")
    g.add_argument("--config", "-c", metavar="FILE", help="take the [gates] table of this TOML file (e.g. the "
                                                          "nightly config) instead of the run's stored one")
    g.add_argument("--allow-unvalidated-judge", action="store_true",
                   help="exit as usual even when the run's judge failed validation (default: exit 5)")
    g.add_argument("--record", action="store_true",
                   help="write this evaluation to the run folder's gates.json and summary.json, replacing the "
                        "audit's record (default: print only)")
    g.add_argument("--no-record", action="store_true", help=argparse.SUPPRESS)  # the default now; still accepted
    g.add_argument("--json", action="store_true", help="print one JSON document (schema lmra.gates/1) instead")
    add_store_args(g)
    g.set_defaults(func=json_errors(cmd_gate))
