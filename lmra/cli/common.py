"""What the command modules of :mod:`lmra.cli` share: the stderr console, the progress bars,
the argparse types of numeric options, the options that find the run history, ``--json`` error
documents, and errors named by the command's config file and line.

Light by design: importing this module loads argparse, Rich's console and lmra's errors, never
pandas or the audit, so that ``lmra --help`` and every parser stay fast (issue 14)."""

from __future__ import annotations

import argparse
import functools
import os
import sys
from collections.abc import Callable
from contextlib import contextmanager
from pathlib import Path

from rich.console import Console

from lmra.console import make_console
from lmra.numbers import strict_float, strict_int
from lmra.errors import LmraInputError

#: the stderr console of every command (laid out as the stdout one: lmra.console.make_console)
err_console = make_console(stderr=True)


def print_warning(message: str) -> None:
    """One ``warning:`` paragraph on stderr (docs/nightly.md, "Machine-readable output": stdout holds
    the reports, stderr the warnings; user-trial finding: the replay and untestable-check warnings
    went to stdout). ``message`` is printed as written (no markup read)."""
    from rich.text import Text

    err_console.print(Text.assemble(("warning: ", "bold yellow"), message), highlight=False, soft_wrap=True)


def print_error(message: str) -> None:
    """One ``error:`` paragraph on stderr, as the command's own errors are printed (no markup read)."""
    from rich.text import Text

    err_console.print(Text.assemble(("error: ", "bold red"), message), highlight=False, soft_wrap=True)


# -- progress bars --------------------------------------------------------------------------------
#: Seconds between two updates of the progress bars' counts (advances in between are summed).
PROGRESS_UPDATE_S = 0.1


#: the bars' labels, by stage (a stage not listed is shown by its name)
STAGE_LABELS = {"judge-check": "LMRA judge check (canary pairs)", "classify": "LMRA classifying tasks", "filter": "Filtering prompts",
                "select": "Selecting prompts", "generate": "Generating responses",
                "refusal": "LMRA labelling refusals", "rate": "LMRA rating pairs",
                "axes-brainstorm": "LMRA brainstorming differences", "axes-label": "LMRA labelling test pairs on axes",
                "axes-harm": "LMRA harm check of selected axes", "recsys": "Recommendation lists"}


#: what a stage's bar calls its items that failed, where "failed" alone would mislead (break-it
#: finding: "Filtering prompts (6 failed)" beside "0 failed" calls — the LMRA's answers were
#: unusable, no call had failed)
FAILED_WORDS = {"filter": "unlabelled or failed"}


#: seconds between two progress lines on stderr when it is not a terminal (cron, CI logs)
PROGRESS_LOG_S = 60.0


class _ProgressLog:
    """A line on stderr every :data:`PROGRESS_LOG_S` seconds saying where each stage is
    (``progress at 0:02:00: Generating responses 120/540; LMRA rating pairs 80/540 (3 failed)``),
    written by a daemon thread while a command runs with stderr not a terminal (fresh-user finding:
    a nightly run under cron showed nothing for 15 minutes — progress bars need a terminal, and a
    stuck night looked like a slow one). It only reads the counts the progress callbacks keep."""

    def __init__(self, every_s: float = PROGRESS_LOG_S):
        import threading
        import time

        self.every_s, self.t0 = every_s, time.monotonic()
        self.order: list[str] = []
        self.totals: dict[str, int] = {}
        self.done: dict[str, int] = {}
        self.failed: dict[str, int] = {}
        self._halt = threading.Event()
        self._thread = threading.Thread(target=self._run, name="lmra-progress-log", daemon=True)
        self._thread.start()

    @classmethod
    def for_stderr(cls) -> "_ProgressLog | None":
        """One when stderr is not a terminal, else None (the bars show the progress there); its
        interval is ``$LMRA_PROGRESS_LOG_S`` seconds when set (0 = no progress lines).

        Raises:
            LmraInputError: ``LMRA_PROGRESS_LOG_S`` is not a number ≥ 0."""
        raw = os.environ.get("LMRA_PROGRESS_LOG_S")
        every = PROGRESS_LOG_S
        if raw is not None:
            try:
                every = strict_float(raw)
                if every < 0:
                    raise ValueError("negative")
            except ValueError:
                raise LmraInputError(f"the environment variable LMRA_PROGRESS_LOG_S is {raw!r}: it gives the seconds "
                                     "between progress lines, a number ≥ 0 (0: none)") from None
        try:
            return None if every == 0 or sys.stderr.isatty() else cls(every)
        except (AttributeError, ValueError):
            return None

    def start(self, stage: str, total: int) -> None:
        if stage in self.totals:  # started again: its total changed (a judge check that stopped early)
            self.totals[stage] = total
            return
        self.totals[stage], self.done[stage], self.failed[stage] = total, 0, 0
        if stage not in self.order:
            self.order.append(stage)

    def advance(self, stage: str, is_failed: bool = False) -> None:
        self.done[stage] = self.done.get(stage, 0) + 1
        if is_failed:
            self.failed[stage] = self.failed.get(stage, 0) + 1

    def line(self) -> str:
        """The progress line of now."""
        import datetime
        import time

        parts = []
        for stage in list(self.order):
            n_failed = self.failed.get(stage, 0)
            parts.append(f"{STAGE_LABELS.get(stage, stage)} {self.done.get(stage, 0):,}/{self.totals.get(stage, 0):,}"
                         + (f" ({n_failed:,} {FAILED_WORDS.get(stage, 'failed')})" if n_failed else ""))
        elapsed = datetime.timedelta(seconds=round(time.monotonic() - self.t0))
        return f"progress at {elapsed}: " + ("; ".join(parts) if parts else "starting")

    def _run(self) -> None:
        while not self._halt.wait(self.every_s):
            try:
                print(self.line(), file=sys.stderr, flush=True)
            except (OSError, ValueError, RuntimeError):  # a closed or full stream: the run goes on
                pass

    def stop(self) -> None:
        self._halt.set()
        self._thread.join(timeout=5)


@contextmanager
def rich_progress(console: Console, enabled: bool = True):
    """Yield lmra progress callbacks that drive Rich progress bars (one bar per stage); a
    stage whose items failed (failed calls, unlabelled prompts, pairs not rated) says how many
    in its label, e.g. "LMRA rating pairs (3 failed)": a bar counts every item done, failed or not.

    Cheap per call: advances are counted and handed to Rich at most every
    :data:`PROGRESS_UPDATE_S` seconds (and when a stage completes, and at the end); the bars
    are redrawn 5 times a second. When stderr is not a terminal (cron, CI), a progress line is
    written to it every :data:`PROGRESS_LOG_S` seconds as well (:class:`_ProgressLog`), also
    with ``enabled`` False (``--no-progress``)."""
    from lmra.progress import Progress as Callbacks

    log = _ProgressLog.for_stderr()  # progress lines for logs (stderr not a terminal), bars or not
    try:
        with wait_notices() as notices:
            if not enabled:
                yield Callbacks() if log is None else Callbacks(start=log.start, advance=log.advance)
                return
            yield from _bars(console, log, notices)
    finally:
        if log is not None:
            log.stop()


@contextmanager
def wait_notices():
    """Within the block, an endpoint's long retry wait is said on stderr (:class:`_WaitNotices`,
    through :func:`lmra.providers.base.listen_waits`), and so are calls waiting long for their answer
    (:class:`_SlowWatch`); yields the notices (their ``emit`` may be
    pointed elsewhere, e.g. above progress bars). Every command that makes model calls runs in one:
    :func:`rich_progress` opens it, and ``lmra judge-check`` (no bars) too."""
    from lmra.providers.base import listen_waits

    notices = _WaitNotices()
    watch = _SlowWatch(notices)
    try:
        with listen_waits(notices):
            yield notices
    finally:
        watch.stop()


#: seconds between two notices of one endpoint's asked-for retry waits (:class:`_WaitNotices`)
WAIT_NOTICE_EVERY_S = 60.0


class _WaitNotices:
    """Say on stderr (above the bars when they are shown) that an endpoint asked the calls to wait
    before a retry (``Retry-After`` of :data:`lmra.providers.base.WAIT_NOTICE_S` s or more): at most
    one line per endpoint every :data:`WAIT_NOTICE_EVERY_S` seconds (break-it finding: an endpoint
    answering 429 with ``retry-after: 40`` to every call left only a still progress bar for minutes,
    a slow night indistinguishable from a stuck one)."""

    def __init__(self):
        self.emit: Callable[[str], None] = lambda line: print(line, file=sys.stderr, flush=True)
        self.last: dict[str, float] = {}

    def _due(self, endpoint: str) -> bool:
        """Whether a notice of ``endpoint`` may be said now (none in the last minute); marks it said."""
        import time

        now = time.monotonic()
        if now - self.last.get(endpoint, -WAIT_NOTICE_EVERY_S) < WAIT_NOTICE_EVERY_S:
            return False
        self.last[endpoint] = now
        return True

    def slow(self, endpoint: str, n: int, oldest: float, deadline: float | None) -> None:
        """Say that ``n`` calls to ``endpoint`` have waited long for their answer (the oldest
        ``oldest`` s; ``deadline``: the seconds an attempt is given, None for no limit). Timed
        apart from the retry-wait notices, so that neither hides the other (round-2 break-it, s45)."""
        if not self._due(f"slow {endpoint}"):
            return
        limit = (f"an attempt is given {deadline:,.0f} s, then it is timed out and tried again" if deadline
                 else "no time limit is set (timeout_s)")
        from lmra.providers.base import SLOW_ATTEMPT_S

        calls = "1 call has" if n == 1 else f"{n:,} calls have"
        try:
            self.emit(f"waiting: {calls} waited over {SLOW_ATTEMPT_S:,.0f} s (the longest {oldest:,.0f} s) for an "
                      f"answer from {endpoint}; {limit} — the endpoint is slow, the run is not stuck")
        except (OSError, ValueError, RuntimeError):  # a closed or full stream: the run goes on
            pass

    def __call__(self, endpoint: str, seconds: float, why: str) -> None:
        if not self._due(endpoint):
            return
        try:
            if not seconds:  # no connection at all (refused, unknown host): the SDK backs off between retries
                self.emit(f"waiting: {endpoint} could not be reached ({why}); its calls are retried with backoff "
                          "(the SDK's retries, each counted in the manifest) — the run stops if a few calls in a row "
                          "fail after every retry; check that the server is running")
                return
            wait = f"{seconds:,.0f}" if seconds >= 10 else f"{seconds:.2g}"
            if why == "timed out":  # (lmra.providers._http.TIMED_OUT: the call waited, nothing came)
                self.emit(f"waiting: {endpoint} gave no answer within {wait} s (timed out); its calls are tried "
                          "again (the SDK's retries, each counted in the manifest) — the run is slow, not stuck")
                return
            self.emit(f"waiting: {endpoint} answered {why} and asks to wait {wait} s before a retry; "
                      "its calls wait (the SDK's retries, each counted in the manifest), the run is not stuck")
        except (OSError, ValueError, RuntimeError):  # a closed or full stream: the run goes on
            pass


#: seconds between two looks at the HTTP attempts waiting for their answer (:class:`_SlowWatch`)
SLOW_POLL_S = 5.0


class _SlowWatch:
    """A daemon thread saying, through :meth:`_WaitNotices.slow`, that an endpoint's calls have
    waited at least :data:`lmra.providers.base.SLOW_ATTEMPT_S` seconds for their answer
    (:func:`lmra.providers.base.slow_attempts`): a chatbot taking minutes an answer, within its
    timeout, left the progress bars and lines still, a slow night indistinguishable from a stuck one
    (known since s40). It only reads the attempts the HTTP transports register."""

    def __init__(self, notices: "_WaitNotices", every_s: float | None = None):
        import threading

        self.notices, self.every_s = notices, SLOW_POLL_S if every_s is None else every_s
        self._halt = threading.Event()
        self._thread = threading.Thread(target=self._run, name="lmra-slow-calls", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        from lmra.providers import base

        while not self._halt.wait(self.every_s):
            for endpoint, (n, oldest, deadline) in base.slow_attempts(base.SLOW_ATTEMPT_S).items():
                self.notices.slow(endpoint, n, oldest, deadline)

    def stop(self) -> None:
        self._halt.set()
        self._thread.join(timeout=5)


def _bars(console: Console, log: "_ProgressLog | None", notices: _WaitNotices):
    """The body of :func:`rich_progress` with the bars on (a generator yielding its callbacks);
    ``notices`` print above the bars while they are shown."""
    import time

    from lmra.progress import Progress as Callbacks
    from rich.progress import (BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn,
                               TimeRemainingColumn)

    labels = STAGE_LABELS
    with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                  TimeRemainingColumn(), console=console, transient=False, refresh_per_second=5) as prog:
        if console.is_terminal:  # above the bars; else (a log) on stderr, with the progress lines (break-it finding)
            notices.emit = lambda line: prog.console.print(line, markup=False, highlight=False, soft_wrap=True)
        ids: dict[str, int] = {}
        totals: dict[str, int] = {}
        done: dict[str, int] = {}
        failed: dict[str, int] = {}  # of the items done, those that failed
        unshown: dict[str, int] = {}
        unshown_failed: set[str] = set()  # stages whose failed count changed since the last update
        next_update = [0.0]

        def show() -> None:
            for stage, n in unshown.items():
                if n:
                    prog.advance(ids[stage], n)
            for stage in unshown_failed:
                prog.update(ids[stage], description=failed_label(stage))
            unshown.clear()
            unshown_failed.clear()
            next_update[0] = time.monotonic() + PROGRESS_UPDATE_S

        def failed_label(stage: str) -> str:
            word = FAILED_WORDS.get(stage, "failed")
            return f"{labels.get(stage, stage)} [red]({failed[stage]:,} {word})[/]"

        def start(stage: str, total: int) -> None:
            show()
            if stage in ids:  # started again: its total changed (a judge check that stopped early)
                prog.update(ids[stage], total=total)
                totals[stage] = total
                if log is not None:
                    log.start(stage, total)
                return
            ids[stage] = prog.add_task(labels.get(stage, stage), total=total)
            totals[stage], done[stage], failed[stage] = total, 0, 0
            if log is not None:
                log.start(stage, total)

        def advance(stage: str, is_failed: bool = False) -> None:
            if log is not None:
                log.advance(stage, is_failed)
            unshown[stage] = unshown.get(stage, 0) + 1
            done[stage] += 1
            if is_failed:
                failed[stage] += 1
                unshown_failed.add(stage)
            if done[stage] >= totals[stage] or time.monotonic() >= next_update[0]:
                show()

        try:
            yield Callbacks(start=start, advance=advance)
        finally:
            show()


# -- numeric options ------------------------------------------------------------------------------
def reads_as_typed(convert):
    """Mark an option's converter whose value, shown with ``repr``, reads as the user typed it
    (a number, not a converted duration): a value option given twice with two values names both
    (``lmra.cli._StoreOnce``)."""
    convert.reads_as_typed = True
    return convert


@reads_as_typed
def finite_float(text: str) -> float:
    """argparse type of a numeric option (:func:`strict_float`); argparse names the option
    and exits with status 2 on an error."""
    try:
        return strict_float(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


@reads_as_typed
def whole_number(text: str) -> int:
    """argparse type of every whole-number option (:func:`strict_int`: ASCII digits, so
    ``--seed 1_0`` or ``--seed ٢٣`` is refused, not read as 10 or 23); argparse names the option
    and exits with status 2 on an error. The option's range is checked where it is used (most
    go into a config field with its limits)."""
    try:
        return strict_int(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


@reads_as_typed
def count_arg(text: str) -> int:
    """argparse type of a whole-number option that counts something shown: :func:`whole_number`, ≥ 0."""
    value = whole_number(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be a whole number ≥ 0, got {text}")
    return value


@reads_as_typed
def margin_arg(text: str) -> float:
    """argparse type of the regression check's ``--margin``: a number in [0, 2) (net-rating
    units: H lies in [−1, 1], so no rise reaches 2), refused before anything runs
    (:func:`lmra.monitor.check_regression` says the same; break-it finding: ``--margin 1e308``
    was accepted, stored with the check, and broke ``lmra report`` of that run)."""
    value = finite_float(text)
    if not 0 <= value < 2:
        raise argparse.ArgumentTypeError(f"margin must be a number in [0, 2) (a rise of the net rating, which lies "
                                         f"in [-1, 1]), got {text}")
    return value


@reads_as_typed
def delta_arg(text: str) -> float:
    """argparse type of ``lmra report --delta``: the net rating to detect, in (0, 2]."""
    value = finite_float(text)
    if not 0 < value <= 2:
        raise argparse.ArgumentTypeError(f"the net rating to detect must be in (0, 2], got {text}")
    return value


@reads_as_typed
def check_alpha_arg(text: str) -> float:
    """argparse type of the regression check's ``--alpha``: a finite number in (0, 0.5]
    (:func:`lmra.monitor.check_alpha` says why)."""
    from lmra.monitor import check_alpha

    try:
        return check_alpha(finite_float(text))
    except LmraInputError as exc:
        raise argparse.ArgumentTypeError(exc.reason) from None


# -- the run history ------------------------------------------------------------------------------
#: help text of every RUN argument
RUN_HELP = "run folder path, run id, or 'latest' (the newest complete run in the reports folder)"


def resolve_run_arg(run: str, reports_dir: str | Path, field: str = "--run") -> str:
    """The run folder named by ``run`` (:data:`RUN_HELP`): a folder as given; a run id or
    ``latest`` looked up in ``reports_dir``'s history, as the monitoring commands do.

    Raises:
        LmraInputError: ``run`` is a file, or no such folder and no reports folder to look it
            up in (no history store is created for the look-up), or no such run there.
    """
    from lmra.history import History, history_path

    if Path(run).is_dir():
        return run
    if Path(run).exists():
        raise LmraInputError("is not a run folder (it is a file)", file=run, field=field)
    if not Path(reports_dir).is_dir():  # never create a history store just to look a name up
        if "/" in run or os.sep in run:  # a path, not a run id: no look-up to speak of (fresh-user finding, s43:
            # the message named ./reports/, which the user had not given)
            parent = Path(run).parent
            raise LmraInputError("no such run folder" + ("" if parent.is_dir() else f" (nor a folder {parent})"),
                                 file=run, field=field)
        raise LmraInputError(f"no such run folder, and no runs in {reports_dir}/ to look the run id up in",
                             file=run, field=field)
    with History(history_path(Path(reports_dir))) as h:
        return str(h.resolve(run).path)


def history_file(args: argparse.Namespace, run_ref: str | None = None, option: str = "RUN") -> Path:
    """``--history`` if given, else ``<reports-dir>/history.sqlite``; the reports dir defaults
    to the parent of a run folder given as a path, else ``reports`` — or the working folder when it
    holds ``history.sqlite`` and has no ``reports`` folder (a command run inside the reports folder).

    Raises:
        LmraInputError: ``run_ref`` (given as ``option``) is a path to no folder."""
    from lmra.history import history_path

    if getattr(args, "history", None):
        path = Path(args.history)
        if path.is_dir():
            raise LmraInputError("is a folder; --history takes the run history's SQLite file (history.sqlite in "
                                 "the reports folder), or pass the folder as --reports-dir", file=path, field="--history")
        from lmra.fileio import text_file_not_sqlite

        text = text_file_not_sqlite(path)
        if text is not None:  # (bad-input break-it, s45: an "I/O failure" advising to move it aside)
            raise LmraInputError(f"is a text file (it begins {text!r}), not an SQLite file: --history takes the run "
                                 "history (history.sqlite in the reports folder) — nothing was written to it",
                                 file=path, field="--history")
        empty = path.is_file() and path.stat().st_size == 0  # (an empty file is read as an empty history: round-2 s45)
        if run_ref is None and (empty or not path.exists()) and not any(path.parent.glob("*/manifest.json")):
            # nothing to record or read: a typo — never create an empty history and report "no runs"
            # with success (break-it finding; an empty file was given the history's tables: round-2, s45); a
            # command given a run folder records it in a new file
            raise LmraInputError(("is an empty file" if empty else "no such history file")
                                 + f", and no run folders beside it in {path.parent}/ to build one from (a mistyped "
                                 "path?)" + (" — nothing was written to it" if empty else ""),
                                 file=path, field="--history")
        return path
    if getattr(args, "reports_dir", None):
        if not Path(args.reports_dir).is_dir():  # (break-it finding: a typo made the folder and its history)
            raise LmraInputError("no reports folder (the audit's output_dir) at this path", file=args.reports_dir,
                                 field="--reports-dir")
        return history_path(args.reports_dir)
    if run_ref and Path(run_ref).is_dir():
        return history_path(Path(run_ref).resolve().parent)
    if run_ref and (os.sep in run_ref or run_ref.startswith(".")):  # a path, not a run id: nothing to look up
        # (break-it finding: `lmra pin /nope` refused it, after creating ./reports/history.sqlite)
        raise LmraInputError("no such run folder", file=run_ref, field=option)
    path = history_path("reports")
    if not path.parent.is_dir() and history_path(".").is_file():  # run inside the reports folder itself
        return history_path(".")  # (fresh-user finding: 'cd reports && lmra history' said "no reports folder")
    if run_ref and not path.exists() and not path.parent.is_dir():  # a run id with no reports folder to look
        # it up in: never create one just to say so (break-it finding: `lmra report typo` made reports/)
        raise LmraInputError(f"no such run folder, and no runs in {path.parent}/ to look the run id up in (run "
                             "'lmra audit' first, or pass --reports-dir/--history)", file=run_ref, field=option)
    return path


def add_store_args(p: argparse.ArgumentParser) -> None:
    """Add ``--reports-dir`` and ``--history``, which find the run history (:func:`history_file`)."""
    p.add_argument("--reports-dir", help="the audit's output_dir holding history.sqlite (default: the run folder's "
                                         "parent, else ./reports, else . when it holds history.sqlite)")
    p.add_argument("--history", help="path of the history SQLite file (overrides --reports-dir)")


def add_json_arg(p: argparse.ArgumentParser, schema: str) -> None:
    """Add ``--json``: print one JSON document of ``schema`` (e.g. ``lmra.check/2``) instead of tables."""
    p.add_argument("--json", action="store_true",
                   help=f"print one JSON document ({schema}) on stdout instead of the tables, same exit status "
                        "(docs/nightly.md, 'Machine-readable output')")



# -- errors ---------------------------------------------------------------------------------------
def json_errors(handler: Callable) -> Callable:
    """:func:`lmra.report.jsonout.json_errors` applied when the command runs, not when its module
    is imported (that module loads pandas): under ``--json`` a failure also prints an
    ``lmra.error/1`` document on stdout; the exception is re-raised unchanged."""

    @functools.wraps(handler)
    def wrapper(args):
        from lmra.report.jsonout import json_errors as with_json_errors

        return with_json_errors(handler)(args)

    return wrapper


#: top-level keys that make a config file a recsys config (:mod:`lmra.recsys.config`), not an audit's
RECSYS_KEYS = frozenset({"mode", "fairllm", "cfairllm", "matching"})


def is_recsys_config(path: str | Path) -> bool:
    """True when the TOML file ``path`` is a recsys config (a key of :data:`RECSYS_KEYS` at its
    top level); False for an audit config, and for a file that cannot be read as TOML (missing,
    not UTF-8 …), whose loader then says what is wrong with it."""
    from lmra.errors import read_toml

    try:
        keys = set(read_toml(path, "config file")[1])
    except LmraInputError:
        return False
    return bool(keys & RECSYS_KEYS)


def in_config(exc: LmraInputError, args: argparse.Namespace) -> LmraInputError:
    """An error about a field of the command's config file, with the file and line filled in
    when the raiser knew only the field (a provider that cannot be built, an unknown task …)."""
    cfg = getattr(args, "config", None)
    if not cfg or not exc.field or exc.field.startswith("-") or exc.line is not None:
        return exc
    try:
        if exc.file is not None and Path(exc.file).resolve() != Path(cfg).resolve():
            return exc
        text = Path(cfg).read_text(encoding="utf-8-sig")
    except (OSError, ValueError, RuntimeError):  # (RuntimeError: a symbolic link loop, Python 3.11–3.12)
        return exc
    from lmra.config import field_line

    line = field_line(text, exc.field)
    if line is None:
        return exc
    return LmraInputError(exc.reason, file=exc.file or cfg, line=line, field=exc.field)



def lmra_calls_without_logprobs(plan: dict) -> int | None:
    """The LMRA calls of :meth:`lmra.audit.Audit.planned_calls` (both LMRAs) when every answer
    of an LMRA whose provider gives log-probabilities comes without them; None when no LMRA's
    provider gives them (its bound ``judge`` holds already)."""
    roles = [r for r in ("judge", "judge2") if r in plan]
    if not any(f"{r}_without_logprobs" in plan for r in roles):
        return None
    return sum(plan.get(f"{r}_without_logprobs", plan[r]) for r in roles)


def without_logprobs_words(calls: int, judges: dict, budget: str = "") -> str:
    """What an LMRA whose provider gives log-probabilities makes when its answers come without
    them, which no provider can know beforehand, and what to set for such an endpoint
    (fresh-user finding: "at most 16 LMRA calls" said, 102 made by the sampling fallback, and
    ``logprobs = false`` never suggested): ``"up to 144 if the LMRA answers without
    log-probabilities (each question then also sampled, n_samples = 5: set logprobs = false in
    [judge] for an endpoint that returns none)"``.

    Args:
        calls: the bound in that case (the plan's ``*_without_logprobs``).
        judges: section (``judge``, ``judge2``) → config of the LMRAs whose answers may come
            without log-probabilities (their ``n_samples``).
        budget: said last in the parentheses (:func:`planned_lmra_calls_words`' budget note).
    """
    samples = ", ".join(dict.fromkeys(f"n_samples = {j.n_samples}" for j in judges.values()))
    return (f"up to {calls} if the LMRA answers without log-probabilities (each question then also sampled, "
            f"{samples}: set logprobs = false in {' / '.join(f'[{role}]' for role in judges)} for an endpoint that "
            f"returns none{budget})")


def lmra_calls_words(calls: int, without_logprobs: int | None, judges: dict, budget: str = "") -> str:
    """The bound on an LMRA's calls for a plan line: ``"24 LMRA calls"``, or when its answers may
    come without log-probabilities (``without_logprobs`` given, above ``calls``) ``"24 LMRA
    calls with log-probabilities, up to 144 if the LMRA answers without …"``
    (:func:`without_logprobs_words`, which ``judges`` and ``budget`` are for)."""
    if without_logprobs is None or without_logprobs <= calls or not judges:
        return f"{calls} LMRA calls"
    return f"{calls} LMRA calls with log-probabilities, {without_logprobs_words(without_logprobs, judges, budget)}"


def planned_lmra_calls_words(plan: dict, cfg) -> str:
    """:func:`lmra_calls_words` of an audit's plan (``lmra audit``'s and ``lmra validate``'s line).

    Args:
        plan: :meth:`lmra.audit.Audit.planned_calls` (``target``, ``judge``, ``judge2`` and
            their ``*_without_logprobs``).
        cfg: the run's :class:`~lmra.config.AuditConfig`: its LMRAs' ``n_samples``, and its
            ``max_calls``: a budget that the calls reach only when the answers come without
            log-probabilities is said to stop the run there (exit 4; it is never exceeded:
            :mod:`lmra.budget` refuses a fresh call past it, the sampled ones included).
    """
    calls = plan.get("judge", 0) + plan.get("judge2", 0)
    worst = lmra_calls_without_logprobs(plan)
    judges = {role: getattr(cfg, role) for role in ("judge", "judge2") if f"{role}_without_logprobs" in plan}
    target, budget = plan.get("target", 0), ""
    if worst is not None and cfg.max_calls is not None and target + calls <= cfg.max_calls < target + worst:
        budget = f"; max_calls = {cfg.max_calls} stops the run there, exit 4: the budget is never exceeded"
    return lmra_calls_words(calls, worst, judges, budget)


#: the providers of the ``--target``/``--judge`` shorthand and their forms
SHORTHAND_FORMS = {"openai": "openai:MODEL", "anthropic": "anthropic:MODEL", "llamacpp": "llamacpp[:GGUF path]",
                   "custom": "custom:package.module:factory[:MODEL]"}


def model_shorthand(spec: str, section: dict, *, option: str) -> dict:
    """The ``[target]``/``[judge]`` section a command-line shorthand such as
    ``openai:gpt-4o-mini`` makes of the config's ``section``.

    Forms (:data:`SHORTHAND_FORMS`; the model is everything after the first colon, so
    ``openai:llama3:8b`` is model ``llama3:8b``): ``openai:MODEL``, ``anthropic:MODEL``,
    ``llamacpp`` (the embedded model) or ``llamacpp:PATH.gguf``, and
    ``custom:package.module:factory[:MODEL]`` for a custom provider factory.

    When the provider is the section's own, only ``model`` changes and every other field
    (``base_url``, ``api_key_env``, ``system_prompt``, sampling, rate limits …) is kept. When it
    changes, the section starts from the defaults: the old provider's endpoint and key would
    not fit the new one.

    Args:
        spec: the option's value; section: the config's section as a dict (``model_dump``);
        option: ``--target`` or ``--judge`` (named in errors).

    Returns:
        The new section as a dict, validated later with the rest of the config.

    Raises:
        LmraInputError: an unknown provider (the message lists the valid forms), a missing
            model for openai/anthropic, or a custom path without module or factory.
    """
    kind, _, rest = spec.strip().partition(":")
    forms = ", ".join(SHORTHAND_FORMS.values())
    if kind == "custom":
        module, _, tail = rest.partition(":")
        factory, _, model = tail.partition(":")
        if not module.strip() or not factory.strip():
            raise LmraInputError(f"'{spec}' names no custom provider: write custom:package.module:factory[:MODEL]",
                                 field=option)
        provider = f"{module.strip()}:{factory.strip()}"
    elif kind in ("openai", "anthropic"):
        provider, model = kind, rest
        if not model.strip():
            raise LmraInputError(f"'{spec}' names no model: write {kind}:MODEL, e.g. "
                                 + ("openai:gpt-4o-mini" if kind == "openai" else "anthropic:claude-3-5-haiku-latest"),
                                 field=option)
    elif kind == "llamacpp":
        provider, model = kind, rest
    else:
        raise LmraInputError(f"unknown provider '{kind}' in '{spec}'; valid: {forms}", field=option)
    model = model.strip() or None
    if provider == section.get("provider"):
        return section | {"model": model}
    return {"provider": provider, "model": model}


def model_words(p) -> str:
    """``provider:model`` and, for an HTTP endpoint, ``at URL`` — where a run's calls go, on the
    plan lines of ``lmra audit`` and ``lmra recsys`` (fresh-user findings: only the provider names
    were shown; the endpoint that OPENAI_BASE_URL chose was in manifest.json alone)."""
    return f"{p.name}:{p.model_id}" + (f" at {p.base_url}" if p.base_url else "")
