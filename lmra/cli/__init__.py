"""The ``lmra`` command line: one module per command family, listed with their commands in
:mod:`lmra.cli.commands`.

Exit status: 0 success (also the first night of ``audit --baseline pinned|last``: no baseline
yet, nothing checked, the run pinned for ``pinned``), 2 usage or input error (a one-paragraph message naming the file,
line and field; never a traceback), 1 failure (a run whose status is ``partial`` or ``failed``:
more than ``max_failed_share`` of its pairs lost to failed calls; or an I/O failure such as a
full disk, naming the path; or a model's key rejected by its endpoint, HTTP 401/403, which
stops an audit at its first rejected call; or a model's endpoint that never answered: 8 calls in a row
failed after every retry, 3 when refused, :mod:`lmra.providers.endpoint`), 3 a regression against the baseline, 5 the judge failed validation,
6 an absolute release gate not met (``[gates]`` / ``--gate``: a value above its bound, or one the run could
not measure; ``lmra gate``), 4 stopped by the budget (--max-cost / --max-calls), 75 batches still pending (resume with
``lmra batch resume``), 130 interrupted by SIGINT (Ctrl-C), SIGTERM or SIGHUP — the message and a
run's ``stop_reason`` name which (:mod:`lmra.interrupts`) — (finished calls are kept in the cache;
re-run the same command to resume). A shard (``audit --shard I/N``) exits 0 once its folder is written even
when it is partial or its judge check failed (both printed): ``lmra merge`` decides those for the
night (1, 5, 6) — docs/scale.md.

When a run meets several of 1, 2, 5, 6 and 3, the first in that order is the exit status
(:data:`lmra.cli.exits.EXIT_PRECEDENCE`): a failed or partial run, or a question that could not be
answered (a check that tested no task), says nothing about the chatbot; a judge that failed
validation makes every number untrustworthy; an absolute gate is the release criterion; a
regression is relative to the baseline. Every applicable message is printed either way, and
``audit``, ``check``, ``gate`` (and ``report RUN --baseline``) end with one line stating the exit
status, why, and what it took precedence over (:func:`lmra.cli.exits.final_status`) — the only
line that names an exit status.

Layout: :func:`main` parses the command line with :func:`build_parser` and turns the errors
of every command into the statuses above (:func:`report_failure`); ``audit.py``,
``validate.py``, ``judge_check.py``, ``agreement.py``, ``names.py``, ``monitor.py`` (history,
check, compare, plan, export, report, pin), ``gates.py`` (gate), ``recsys.py``, ``batch.py``,
``axes.py`` and ``scale.py`` (merge, warehouse) each define their commands (``add_parsers``)
and handlers (``cmd_*``); ``common.py`` holds what they share, ``exits.py`` the precedence of
exit statuses. Only the module of the command being run is imported, and the modules import
the audit, pandas and the providers inside their handlers, so that ``lmra --help`` and the
parsers start fast.
"""

from __future__ import annotations

import sys


def _early_interrupt(signum, frame) -> None:  # noqa: ARG001 (a signal handler's signature)
    """Ctrl-C while the ``lmra`` command is still loading its modules (nothing opened or written
    yet): one line and exit status 130, not a ``KeyboardInterrupt`` traceback (fault break-it, s44:
    39 of 60 interrupts in the first 0.1 s printed one). :func:`main` puts Python's own handler
    back once its signal handling is set up."""
    import os

    os.write(2, b"interrupted (SIGINT) while lmra was starting: nothing was done\n")
    os._exit(130)


def _install_early_interrupt() -> None:
    """:func:`_early_interrupt` for SIGINT, when this module is loaded by the ``lmra`` script or
    ``python -m lmra`` (not by a program importing it, e.g. the tests), from the main thread."""
    import os
    import signal

    spec = getattr(sys.modules.get("__main__"), "__spec__", None)
    script = os.path.basename(sys.argv[0]) if sys.argv else ""
    if script in ("lmra", "lmra.exe") or getattr(spec, "name", None) in ("lmra.__main__", "lmra.cli.__main__"):
        try:
            if signal.getsignal(signal.SIGINT) is signal.default_int_handler:
                signal.signal(signal.SIGINT, _early_interrupt)
        except ValueError:  # not the main thread
            pass


_install_early_interrupt()

import argparse  # noqa: E402 (after the early handler: Ctrl-C while these load is caught)
from collections.abc import Iterable  # noqa: E402

from lmra.cli.commands import COMMANDS  # noqa: E402


def build_parser(commands: Iterable[str] | None = None) -> argparse.ArgumentParser:
    """The ``lmra`` argument parser.

    Args:
        commands: the subcommands to define in full (their modules are imported); every other
            subcommand is listed by its name and one-line help only (:data:`COMMANDS`), which
            is all ``lmra --help`` shows. None (default): every subcommand in full.

    Raises:
        KeyError: a name in ``commands`` that is not an ``lmra`` subcommand.
        RuntimeError: a command module that does not register the commands :data:`COMMANDS`
            assigns to it, in that order (a programming error).
    """
    import importlib

    from lmra import __version__

    modules = {COMMANDS[c].module for c in (COMMANDS if commands is None else commands)}
    p = argparse.ArgumentParser(prog="lmra", description="Audit a chatbot for first-person fairness with an LMRA.")
    p.add_argument("--version", action="version", version=f"lmra {__version__}")
    sub = p.add_subparsers(dest="command", required=True)
    for name, cmd in COMMANDS.items():
        if name in sub.choices:  # registered with an earlier command of its module
            continue
        if cmd.module not in modules:
            sub.add_parser(name, help=cmd.help)
            continue
        before = set(sub.choices)
        importlib.import_module(f"lmra.cli.{cmd.module}").add_parsers(sub)
        added = [c for c in sub.choices if c not in before]
        expected = [c for c, m in COMMANDS.items() if m.module == cmd.module]
        if added != expected:
            raise RuntimeError(f"lmra.cli.{cmd.module}.add_parsers registered {added}; lmra.cli.commands lists "
                               f"{expected}")
    _store_once(p)
    return p


class _StoreOnce(argparse._StoreAction):
    """A value option given twice with two values is an error, never the last one silently
    (bad-input break-it, s45: ``--baseline pinned --baseline last``, ``--seed 12 --seed 13`` — flags
    appended through nightly.sh's ``LMRA_AUDIT_ARGS`` replaced the night's baseline, margin, budget or
    seed unsaid). The same value twice is harmless."""

    def __call__(self, parser, namespace, values, option_string=None):
        given = namespace.__dict__.setdefault(_GIVEN, {})
        if self.dest in given and given[self.dest] != values:
            before = given[self.dest]
            # a converted value is shown only where it reads as typed (0.02 does; 259200.0 for 3d would not), and
            # an option whose value may be left out (``--history [FILE]``) as given without one (round-2 break-it, s45)
            as_typed = getattr(self.type, "reads_as_typed", False) or self.type is None

            def _shown(v):
                if self.nargs == "?" and v == self.const:
                    return f"{self.option_strings[-1]} without a value"
                return repr(v).removesuffix(".0") if type(v) is float else repr(v)  # --max-cost 2: "2", not "2.0"

            shown = (f", {_shown(before)} and then {_shown(values)}"
                     if as_typed and all(type(v) in (str, int, float) for v in (before, values)) else " with two values")
            raise argparse.ArgumentError(self, f"given twice{shown}: which was meant? (an option takes one value; "
                                               "give it once)")
        given[self.dest] = values
        setattr(namespace, self.dest, values)


#: the namespace attribute where :class:`_StoreOnce` keeps the values given (removed by :func:`main`)
_GIVEN = "_lmra_given_once"


def _store_once(parser: argparse.ArgumentParser) -> None:
    """Make every value option (``store``) of ``parser`` and of its subcommands, at any depth, a
    :class:`_StoreOnce`."""
    for action in parser._actions:
        if type(action) is argparse._StoreAction and action.option_strings:
            action.__class__ = _StoreOnce
        elif isinstance(action, argparse._SubParsersAction):
            for sub in dict.fromkeys(action.choices.values()):
                _store_once(sub)


def chosen_command(argv: list[str]) -> str | None:
    """The subcommand named on a command line: the first word that is not an option (``lmra``'s
    own options, ``--help`` and ``--version``, take no value); None when there is none or it is
    not a subcommand (argparse then prints the usage or the error)."""
    word = next((a for a in argv if not a.startswith("-")), None)
    return word if word in COMMANDS else None


def _loaded(module: str, *names: str) -> tuple[type, ...]:
    """The classes ``names`` of ``module`` if it is imported, else none: an exception of a class
    can only have been raised once its module was imported, so :func:`report_failure` need not
    import the providers (and pydantic) to recognise their errors."""
    mod = sys.modules.get(module)
    return tuple(getattr(mod, n) for n in names) if mod is not None else ()


def report_failure(exc: Exception, args: argparse.Namespace) -> int | None:
    """Print what stopped a command as one paragraph on stderr and return its exit status (the
    table above); None for an exception that is none of lmra's failures (a bug: :func:`main`
    re-raises it with its traceback)."""
    import sqlite3

    from rich.text import Text

    from lmra.cli.common import err_console, in_config
    from lmra.errors import LmraInputError, LmraIOError

    if isinstance(exc, LmraInputError):
        err_console.print(Text.assemble(("error: ", "bold red"), in_config(exc, args).format()), highlight=False,
                          soft_wrap=True)
        return 2
    if isinstance(exc, LmraIOError):
        err_console.print(Text.assemble(("I/O failure: ", "bold red"), exc.format()), highlight=False, soft_wrap=True)
        return 1
    if isinstance(exc, (OSError, sqlite3.Error)):  # a file or database of lmra's own that could not be used
        where = getattr(exc, "filename", None)
        which = ""
        caches = sorted(getattr(sys.modules.get("lmra.cache"), "USED_PATHS", ()))
        if isinstance(exc, sqlite3.Error) and caches:  # SQLite names no file: say which databases it can be
            # (a full disk is not damage: moving a healthy cache aside pays for every call again — fault break-it, s44)
            advice = ("free space on the disk that filled and run the command again — nothing needs moving"
                      if "full" in str(exc) else
                      "a damaged call cache can be moved aside — its answers are then asked again")
            which = (f" (in an SQLite database this command used: the call cache {', '.join(caches)}, or the run "
                     f"history / warehouse under the output folder; {advice})")
        err_console.print(Text.assemble(("I/O failure: ", "bold red"), f"{where}: " if where else "",
                                        f"{type(exc).__name__}: {exc}{which}"), highlight=False, soft_wrap=True)
        return 1
    if isinstance(exc, (UnicodeError, LookupError)):
        err_console.print(Text.assemble(("error: ", "bold red"), f"{type(exc).__name__}: {exc}"), highlight=False,
                          soft_wrap=True)
        return 2
    if isinstance(exc, _loaded("lmra.providers.base", "ProviderError") + _loaded("lmra.providers.keys", "KeyRejected")
                  + _loaded("lmra.providers.endpoint", "EndpointUnreachable")):
        # a rejected key or dead endpoint stops an audit: exit 1, one line
        err_console.print(Text.assemble(("failure: ", "bold red"), str(exc)), highlight=False, soft_wrap=True)
        return 1
    if isinstance(exc, _loaded("lmra.budget", "BudgetExceeded")):
        err_console.print(Text.assemble(("stopped by the budget: ", "bold yellow"), str(exc)), highlight=False,
                          soft_wrap=True)
        return 4
    if isinstance(exc, _loaded("lmra.batch", "BatchRoundsExhausted")):  # (break-it finding: a traceback)
        err_console.print(Text.assemble(("failure: ", "bold red"), str(exc)), highlight=False, soft_wrap=True)
        return 1
    return None


def _after_finish(done, command: str | None = "audit", baseline: str | None = None) -> str:
    """What to do about a run folder that was written before the command stopped (the steps
    after it may not have run); ``command``: ``merge`` for a merged run (re-running it is refused:
    it would write a second merged run of the same night; break-it finding: the advice was "run the same command
    again to resume"); ``baseline``: the command's ``--baseline`` (the check advised uses it:
    break-it finding, s41 — a night run with ``--baseline last`` was advised ``--baseline pinned``)."""
    again = ("re-running the merge is refused (these shards are merged: a second copy of the night would be "
             "taken by the check for another night)" if command == "merge"
             else "re-running the audit would replay it as a new run")
    return (f"its folder {done} is written and keeps its status; the steps after it (warehouse, gates, history and "
            f"check, report.html) may not have run: 'lmra report {done}' writes the report, 'lmra gate {done}' and "
            f"'lmra check {done} --baseline {baseline or 'pinned'}' evaluate it, 'lmra warehouse add {done}' adds it to the "
            f"warehouse; {again}.")


def _after_finish_for(args: argparse.Namespace, done) -> str:
    """:func:`_after_finish` of the command ``args`` ran (its sub-command and ``--baseline``)."""
    return _after_finish(done, getattr(args, "command", None), getattr(args, "baseline", None))


#: the commands whose last line states the exit status (lmra.cli.exits.final_status); ``recsys``
#: but its ``bias`` sub-command (fresh-user finding: a recsys run stopped by its endpoint ended
#: without the line docs/recsys.md promises)
FINAL_LINE_COMMANDS = ("audit", "check", "gate", "merge", "recsys")


def _final_line(args: argparse.Namespace, status: int, reason: str) -> int:
    """For a command of :data:`FINAL_LINE_COMMANDS` (and ``report RUN --baseline``) that stopped
    on a failure or an interrupt: the line stating its exit status, naming too every status the
    run had earned before it stopped (``args.final_reasons``, filled by the audit's finish: a
    release gate not met …; fresh-user finding: a gate breached before a refused baseline check
    was missing from the last line, and an interrupted audit had none). Returns the exit status
    the line names (``status``, or one that takes precedence over it: a failed warehouse's 1 over a
    refused check's 2), ``status`` when no line is printed."""
    command = getattr(args, "command", None)
    if not ((command in FINAL_LINE_COMMANDS and getattr(args, "recsys_command", None) != "bias")
            or (command == "report" and getattr(args, "baseline", None))):
        return status
    from lmra.cli.exits import print_final_status
    from lmra.console import make_console

    return print_final_status(make_console(), {**(getattr(args, "final_reasons", None) or {}), status: reason})


#: characters of an error the final line quotes (the paragraph above has it whole)
FINAL_ERROR_CHARS = 160


def _first_words(exc: BaseException) -> str:
    """The start of ``exc``'s message for the final line — ``the error above (option --baseline: the
    judge differs …)`` —, so that the line a cron mail puts on top says why on its own (break-it
    finding, s40: "exit status 2: the error above" over a mail whose reason line the grep dropped)."""
    from lmra.errors import LmraInputError

    text = " ".join((exc.format() if isinstance(exc, LmraInputError) else str(exc) or type(exc).__name__).split())
    return text if len(text) <= FINAL_ERROR_CHARS else text[:FINAL_ERROR_CHARS].rsplit(" ", 1)[0] + " …"


def _after_failure(args: argparse.Namespace, status: int, exc: BaseException | None = None) -> int:
    """After a failure's paragraph (:func:`report_failure`): for an audit whose run folder was
    already written (a full disk or an I/O error in the history, check or report after it), what
    to do with that folder; and, for the commands that end with the line stating their exit status,
    that line (break-it findings: an I/O failure after the folder was complete gave no way on, and
    ended without the documented ``exit status 1: …`` line)."""
    from rich.text import Text

    from lmra.cli.common import err_console

    done = getattr(args, "finished_run_dir", None)
    if done is not None:
        err_console.print(Text.assemble(("the run had finished: ", "yellow"),
                                        _after_finish_for(args, done)), highlight=False,
                          soft_wrap=True)
    return _final_line(args, status, "stopped by the budget (above)" if status == 4 else "the failure above"
                       + (f" ({_first_words(exc)})" if exc is not None else ""))


def _lost_interrupt(args: argparse.Namespace, status: int) -> int:
    """A stop signal recorded while the command ran whose ``KeyboardInterrupt`` never reached it:
    raised inside a garbage collector's callback (a weakref's), where Python prints "Exception
    ignored" and goes on (break-it finding: a SIGTERM 0.1 s after "Run folder" — a CI timeout's —
    let the audit finish with exit 6, not 130). Said, and the command ends as interrupted after its
    work: exit 130, the final line naming the status the command had reached (``status``)."""
    from rich.text import Text

    from lmra import interrupts
    from lmra.cli.common import err_console

    why = interrupts.interrupt_reason(KeyboardInterrupt())
    done = getattr(args, "finished_run_dir", None)
    err_console.print(Text.assemble((f"{why} while the command finished: ", "yellow"),
                                    _after_finish_for(args, done) if done is not None
                                    else "its work was done (the signal came as it ended)."),
                      highlight=False, soft_wrap=True)
    reasons = getattr(args, "final_reasons", None)
    if reasons is not None and status not in (0, *reasons):  # (the status the command reached, named below)
        reasons[status] = "the status above"
    return _final_line(args, 130, f"{why} as the command finished")


def _warnings_as_paragraphs() -> None:
    """Python warnings (lmra's own — a run folder left out of the history — and libraries') print
    as one ``warning:`` paragraph on stderr, not as ``file.py:177: UserWarning: …`` followed by
    a line of lmra's source (break-it finding)."""
    import warnings

    def show(message, category, filename, lineno, file=None, line=None) -> None:
        from lmra.cli.common import print_warning

        print_warning(" ".join(str(message).split()))

    warnings.showwarning = show


def _submitted_batch_jobs(run_dir) -> int:
    """How many batch jobs of the run folder ``run_dir`` are submitted and not yet downloaded
    (0 when its batch state cannot be read)."""
    from lmra.batch import load_state

    try:
        state = load_state(run_dir)
    except (OSError, ValueError):
        return 0
    jobs = state.get("jobs") if isinstance(state, dict) else None  # (a damaged state: nothing said of it)
    return sum(isinstance(job, dict) and job.get("state") == "submitted" for job in jobs) if isinstance(jobs, list) else 0


def _kept_calls(stats) -> str:
    """What an interrupted command kept and how to resume, for its message: with the run's call
    counts (``args.call_stats``, a :class:`~lmra.cache.CallStats`) how many answered calls are in
    the cache and that a re-run reuses them, else the general sentence."""
    unsaved = "(except any that a warning above says could not be stored)"
    if stats is None:
        return f"finished model calls are kept in the cache {unsaved}; run the same command again to resume."
    fresh = max(stats.fresh - stats.degraded, 0)  # (an answer without what it asked for is not cached)
    total = fresh + stats.cached
    earlier = f", {stats.cached:,} from earlier runs" if stats.cached else ""
    return (f"{total:,} answered model call{'s' * (total != 1)} {'are' if total != 1 else 'is'} kept in the cache "
            f"({fresh:,} answered in this run{earlier}) {unsaved}; run the same command again to resume: it reuses "
            "them and makes only the calls still missing.")


def _guard_standard_streams() -> None:
    """Before a command writes anything: file descriptors 0–2 that are closed (``lmra … >&-``, a
    daemonised launcher) get ``/dev/null``, so that no file the command opens — the call cache,
    a run file — takes descriptor 1 and receives its console; a ``sys.stdout``/``sys.stderr`` that
    Python left None is a ``/dev/null`` stream (break-it finding, s38: every command ended in an
    ``AttributeError`` traceback)."""
    import os

    for fd in (0, 1, 2):
        try:
            os.fstat(fd)
        except OSError:
            try:
                got = os.open(os.devnull, os.O_RDWR)
            except OSError:
                return
            if got != fd:
                os.dup2(got, fd)
                os.close(got)
    for name in ("stdout", "stderr"):
        if getattr(sys, name) is None:
            setattr(sys, name, open(os.devnull, "w", encoding="utf-8"))  # noqa: SIM115 (lives as long as the process)


def _restore_interrupt() -> None:
    """Python's own SIGINT handler (``KeyboardInterrupt``) in place of :func:`_early_interrupt`."""
    import signal

    try:
        if signal.getsignal(signal.SIGINT) is _early_interrupt:
            signal.signal(signal.SIGINT, signal.default_int_handler)
    except ValueError:
        pass


def main(argv: list[str] | None = None) -> int:
    """Entry point of the ``lmra`` console script; returns the exit status."""
    from_script = argv is None  # the lmra command itself, not a caller in the same process (tests)
    _guard_standard_streams()  # closed standard streams: /dev/null, before anything is opened or printed
    argv = sys.argv[1:] if argv is None else list(argv)
    command = chosen_command(argv)
    args = build_parser([command] if command else []).parse_args(argv)
    vars(args).pop(_GIVEN, None)
    from lmra import interrupts  # (after the parser: ``lmra --help`` imports no module of a command's run)

    # SIGTERM (systemd, CI timeouts) stops a run like Ctrl-C: the manifest says "interrupted"
    # and every finished call stays in the cache; so does SIGHUP (the terminal or SSH session
    # closed), unless it is ignored (nohup: the run goes on); which signal came is recorded
    interrupts.stop_on_signals()
    _warnings_as_paragraphs()
    _restore_interrupt()
    try:
        status = int(args.func(args) or 0)
        if from_script:  # the command is over and its status said: a late signal no longer changes it
            interrupts.ignore_stop_signals()  # (break-it finding: a SIGTERM after "exit status 0" ended with 143,
        # Python's default handlers being back while the interpreter shuts down)
        if status != 130 and interrupts.received() is not None:
            interrupts.delivered()  # (said now; a later command in this process starts clean)
            return _lost_interrupt(args, status)
        return status
    except KeyboardInterrupt as exc:
        interrupts.delivered()
        if from_script:  # the run has stopped: a second signal must not end this message with another status
            interrupts.ignore_stop_signals()  # (review finding: SIGINT then SIGTERM ended with 143, not 130)
        from rich.text import Text

        from lmra.cli.common import err_console

        # the signal named (fresh-user finding: a night stopped by a stray SIGHUP said only "interrupted")
        why = interrupts.interrupt_reason(exc)
        done = getattr(args, "finished_run_dir", None)
        if done is not None:  # Ctrl-C / SIGTERM after the run folder was written (break-it finding)
            err_console.print(Text.assemble((f"{why} after the run finished: ", "yellow"),
                                            _after_finish_for(args, done)),
                              highlight=False, soft_wrap=True)
            return _final_line(args, 130, f"{why} after the run finished")
        batch_dir = getattr(args, "batch_run_dir", None)
        pending = _submitted_batch_jobs(batch_dir) if batch_dir is not None else 0
        if pending:  # (break-it finding: "run the same command again" submitted and paid for them again)
            err_console.print(Text.assemble(
                (f"{why}: ", "yellow"),
                f"{pending} batch job(s) of this run were submitted and go on at the provider; resume the run "
                f"with 'lmra batch resume {batch_dir}' (running 'lmra audit --batch' again would start a new run "
                "and submit, and pay for, their calls again). Finished model calls are kept in the cache."),
                highlight=False, soft_wrap=True)
            return _final_line(args, 130, f"{why} (batch jobs go on at the provider)")
        if getattr(args, "command", None) == "merge":  # it makes no model call (break-it round 2: "calls are kept …
            # run the same command again to resume")
            said = ("the merge made no model call and wrote no finished run; its folder, if one was begun, says "
                    "'interrupted' — run the same merge again to write the merged run")
        else:
            said = _kept_calls(getattr(args, "call_stats", None))
        err_console.print(Text.assemble((f"{why}: ", "yellow"), said), highlight=False, soft_wrap=True)
        return _final_line(args, 130, why)
    except Exception as exc:
        if from_script:  # (as above: the failure's paragraph and status stand)
            interrupts.ignore_stop_signals()
        status = report_failure(exc, args)
        if status is None:
            raise
        if status != 2:  # (an input error ends with its one paragraph, as documented)
            return _after_failure(args, status, exc)
        if getattr(args, "finished_run_dir", None) is not None:  # after the run: e.g. a refused baseline
            return _final_line(args, 2, f"the error above ({_first_words(exc)})")
        return status
    except SystemExit:
        raise
    except BaseException as exc:  # not an Exception (e.g. a custom provider's own BaseException subclass):
        # it ended the run like a crash (the run folder says failed; answered calls are cached)
        from rich.text import Text

        from lmra.cli.common import err_console

        err_console.print(Text.assemble(("failure: ", "bold red"), f"the command stopped on {type(exc).__name__}: "
                                        f"{exc} (a BaseException, not an Exception: it ends a run like a crash; "
                                        "finished model calls are kept in the cache)"), highlight=False,
                          soft_wrap=True)
        return 1
