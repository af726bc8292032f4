"""The stdout console of every ``lmra`` command (:func:`make_console`).

On a terminal it is Rich's usual console: tables fit the window. When stdout is not a
terminal (cron mail, CI logs, ``| tee``, a file) Rich would lay everything out for 80
columns and wrap or cut table cells (``│ fem… │ wri… │``), so the console is given
:data:`LOG_WIDTH` columns instead: Rich tables do not expand, so each table is printed at its
natural width — every cell on one line, nothing cut — and its title on one line above it
(:class:`_TitleOnOneLine`). Prose lines are not hard-wrapped either; a log viewer wraps them.

Rich reads ``[...]`` in a printed string or a table cell as markup and ``:name:`` as an emoji
code. Names, paths, model ids and server messages are the user's text and must print as
written: every such value put into a markup string goes through :func:`lit`, and the console
does not replace emoji codes.
"""

from __future__ import annotations

import re

from rich.console import Console, RenderHook
from rich.markup import escape
from rich.measure import Measurement
from rich.table import Table

#: columns of the console when stdout is not a terminal: wider than any table lmra prints, so
#: nothing is ever wrapped or cut (tables do not expand, so no line is padded to this width)
LOG_WIDTH = 1_000_000

#: an empty styled span: ends :func:`lit`'s output after trailing backslashes (see there)
_ANCHOR = "[dim][/dim]"


def percent_level(confidence: float) -> str:
    """A confidence level as a percentage without rounding it away: 0.95 → ``95``, 0.975 →
    ``97.5``, 0.999 → ``99.9`` (for ``[95% CI]`` labels)."""
    return f"{100 * float(confidence):.6g}"


def counted(n: int, noun: str, plural: str | None = None) -> str:
    """``"1 prompt"``, ``"0 prompts"``, ``"2 prompts"``: ``n`` and ``noun`` in the number ``n``
    asks for (``plural`` default: ``noun + "s"``); for counts in console lines."""
    return f"{n} {noun if n == 1 else (plural or noun + 's')}"


def all_pairs(n: int) -> str:
    """``"the only pair"`` for 1, else ``"all N pairs"`` (fresh-user finding: "all 1 pairs")."""
    return "the only pair" if n == 1 else f"all {n} pairs"


def lit(value: object) -> str:
    """``str(value)`` as Rich markup that prints literally, whatever comes before or after it.

    For user-derived text (task, domain, group and run names, model ids, paths, server
    messages) placed in a markup string: ``f"[bold]{lit(task)}[/]"`` or a table cell. Every
    ``[`` that would start a tag is escaped (:func:`rich.markup.escape`); text without ``[``
    or a trailing backslash is returned unchanged. Trailing backslashes are doubled and
    followed by an empty span, so ``task\\`` prints as ``task\\`` both alone (a cell) and
    just before a tag of ours (Rich's ``escape`` alone prints ``task\\\\`` in the first case,
    and loses or misreads two or more trailing backslashes in the second).

    Args:
        value: any object; its ``str()`` is used.

    Returns:
        Markup text that renders to exactly ``str(value)`` (emoji codes aside: the consoles of
        :func:`make_console` do not replace them).
    """
    text = str(value)
    body = text.rstrip("\\")
    out = escape(body)
    if len(body) < len(text):
        out += "\\" * (2 * (len(text) - len(body))) + _ANCHOR
    return out


class _TitleOnOneLine(RenderHook):
    """Widen a table to its title so that the title is not wrapped at the table's natural
    width (used only off a terminal, where the console is :data:`LOG_WIDTH` wide)."""

    def __init__(self, console: Console):
        self.console = console

    def process_renderables(self, renderables):
        for r in renderables:
            if isinstance(r, Table) and r.title is not None and r.width is None:
                title = self.console.render_str(r.title) if isinstance(r.title, str) else r.title
                need = Measurement.get(self.console, self.console.options, title).maximum
                r.min_width = max(r.min_width or 0, need)
        return renderables


class _TrimmedLines:
    """The text stream a log console writes to: ``sys.stdout`` or ``sys.stderr`` (looked up at
    every write, so a replaced stream is followed), with the spaces Rich pads a line with
    (a left-justified table title is padded to the table's width) removed before each newline."""

    def __init__(self, stderr: bool):
        self.stderr = stderr
        self.dead = False  # its stream failed and has no descriptor to point at /dev/null: nothing more is written

    @property
    def stream(self):
        import sys

        return sys.stderr if self.stderr else sys.stdout

    def write(self, text: str) -> int:
        if self.dead:
            return len(text)
        try:
            return self.stream.write(_TRAILING_SPACES.sub("", text))
        except BrokenPipeError:
            self._closed("was closed (broken pipe)")
        except (OSError, ValueError, AttributeError) as exc:  # a full disk, EIO, a closed or missing stream
            self._closed(_unwritable(exc))
        return len(text)

    def flush(self) -> None:
        if self.dead:
            return
        try:
            self.stream.flush()
        except BrokenPipeError:
            self._closed("was closed (broken pipe)")
        except (OSError, ValueError, AttributeError) as exc:
            self._closed(_unwritable(exc))

    def _closed(self, how: str) -> None:
        """The stream cannot be written — its reader went away (``lmra audit | head -1``), its disk
        is full (``lmra audit >> log`` on a full /var: break-it finding, s38, the night left no run
        folder, only a traceback), it was closed: what the command still prints goes to
        ``/dev/null``, and the command goes on — its run folder, gates, history and report.html
        are written and its exit status is the run's, not a crash's. Said once on stderr when
        stdout failed (if stderr can be written)."""
        import os
        import sys

        stream = self.stream
        try:
            devnull = os.open(os.devnull, os.O_WRONLY)
            try:
                os.dup2(devnull, stream.fileno())
            finally:
                os.close(devnull)
        except (OSError, ValueError, AttributeError):  # no file descriptor (a closed or missing stream): this
            # console writes nothing more — the process's streams are left as they are
            self.dead = True
            return
        if not self.stderr:
            try:
                sys.stderr.write(f"warning: standard output {how}: the rest of the console report is not shown; "
                                 "the run folder, gates, history and report.html are written as usual\n")
                sys.stderr.flush()
            except (OSError, ValueError, AttributeError):
                pass

    def isatty(self) -> bool:
        return False

    def __getattr__(self, name: str):  # encoding, fileno …: the stream's own
        return getattr(self.stream, name)


def _unwritable(exc: BaseException) -> str:
    """How a standard stream failed, for :meth:`_TrimmedLines._closed`: ``could not be written (No
    space left on device)``, ``was closed``."""
    if isinstance(exc, OSError):
        return f"could not be written ({exc.strerror or type(exc).__name__})"
    return "was closed"


#: spaces and tabs just before a line break
#: the narrowest a folding text column of :func:`fitted_table` gets
TEXT_MIN_WIDTH = 12


def fitted_table(console: Console, title: str, rows: list[dict], *, text: tuple[str, ...] = ("task",),
                 left: tuple[str, ...] = (), drops: tuple[tuple[str, ...], ...] = ()) -> tuple[Table, list[str]]:
    """A Rich table of ``rows`` (dicts column → cell, every row with the same columns, in order)
    whose numbers are never wrapped or cut: the columns in ``text`` fold over lines (down to
    :data:`TEXT_MIN_WIDTH`), every other column keeps its cells whole (:func:`whole_width`); when
    the table does not :func:`fits` the terminal, the column groups of ``drops`` are left out, one
    group after another, until it does (or none is left to drop). Left-justified: ``text`` and
    ``left``; the others right.

    Returns:
        (the table, the columns left out — to be said below it; empty when none). A table still
        too wide when no group is left to drop gets its smallest width: print it with ``crop=False``
        (the terminal wraps its lines; nothing is cut)."""
    columns = list(rows[0]) if rows else []
    left_out: list[str] = []

    def build() -> Table:
        table = Table(title=title, title_justify="left")
        for col in (c for c in columns if c not in left_out):
            folds = col in text
            table.add_column(col, justify="left" if folds or col in left else "right", no_wrap=not folds,
                             overflow="fold" if folds else "ellipsis",
                             min_width=TEXT_MIN_WIDTH if folds else whole_width(col, [r[col] for r in rows]))
        for r in rows:
            table.add_row(*(r[c] for c in columns if c not in left_out))
        return table

    table = build()
    for group in drops:
        if fits(console, table):
            break
        left_out += [c for c in group if c in columns]
        table = build()
    if not fits(console, table):  # still too narrow (break-it finding, s35: at 30 columns the task column
        # vanished and the decisions were cut): laid out at its smallest width, which the terminal wraps
        table.width = Measurement.get(console, console.options.update_width(LOG_WIDTH), table).minimum
    return table, left_out


def whole_width(header: str, cells) -> int:
    """The terminal cells a table column needs to show ``header`` and every cell (console markup
    strings, or Rich ``Text``) on one line: its ``min_width`` when it must never wrap or shorten
    (Rich measures a cell by its longest word, whatever the column's ``no_wrap``)."""
    from rich.text import Text

    def widest_line(t: Text) -> int:  # a cell stacked over lines ("female vs male:\n+0.0075 [...]") needs its longest
        return max((line.cell_len for line in t.split("\n")), default=0)

    return max([widest_line(Text.from_markup(header))]
               + [widest_line(c if isinstance(c, Text) else Text.from_markup(str(c))) for c in cells])


def fits(console: Console, table) -> bool:
    """True when ``table`` (a Rich renderable) can be printed whole on ``console``: its smallest
    width (Rich ``Measurement``: every column at its ``min_width`` — :func:`whole_width` for one
    that must not wrap — or its longest word) is within the terminal's width, or the console is not a terminal
    (a log prints every table at full width, :data:`LOG_WIDTH`). The per-task and the check
    tables print a compact layout when False (fresh-user finding: at 80–100 columns Rich cut the
    net ratings to "+0.…")."""
    if not console.is_terminal:
        return True
    return Measurement.get(console, console.options.update_width(LOG_WIDTH), table).minimum <= console.width


_TRAILING_SPACES = re.compile(r"[ \t]+(?=\n)")


def make_console(stderr: bool = False) -> Console:
    """The console for a command's stdout (tables and messages), or with ``stderr`` for its
    stderr (warnings, errors): every lmra console comes from here, so both streams are laid
    out the same way in a log.

    Returns:
        Rich's default console when the stream is a terminal (tables and paragraphs fit the
        window); otherwise a console :data:`LOG_WIDTH` columns wide on which tables keep their
        natural width (no cell is wrapped, folded or cut with ``…``), table titles stay on one
        line, paragraphs are not hard-wrapped, no line ends in padding spaces, and colour and
        markup are dropped (Rich's behaviour off a terminal).
    """
    console = Console(emoji=False, stderr=stderr)
    if console.is_terminal:
        return console
    console = Console(width=LOG_WIDTH, emoji=False, file=_TrimmedLines(stderr))
    console.push_render_hook(_TitleOnOneLine(console))
    return console
