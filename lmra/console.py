"""The stdout console of every ``lmra`` command (:func:`make_console`).

On a terminal it is Rich's usual console: tables fit the window. When stdout is not a
terminal (cron mail, CI logs, ``| tee``, a file) Rich would lay everything out for 80
columns and wrap or cut table cells (``│ fem… │ wri… │``), so the console is given
:data:`LOG_WIDTH` columns instead: Rich tables do not expand, so each table is printed at its
natural width — every cell on one line, nothing cut — and its title on one line above it
(:class:`_TitleOnOneLine`). Prose lines are not hard-wrapped either; a log viewer wraps them.
"""

from __future__ import annotations

from rich.console import Console, RenderHook
from rich.measure import Measurement
from rich.table import Table

#: columns of the console when stdout is not a terminal: wider than any table lmra prints, so
#: nothing is ever wrapped or cut (tables do not expand, so no line is padded to this width)
LOG_WIDTH = 1_000_000


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


def make_console() -> Console:
    """The console for a command's stdout (tables and messages).

    Returns:
        Rich's default console when stdout is a terminal (tables fit the window); otherwise a
        console :data:`LOG_WIDTH` columns wide on which tables keep their natural width (no cell
        is wrapped, folded or cut with ``…``), table titles stay on one line and colour and
        markup are dropped (Rich's behaviour off a terminal).
    """
    console = Console()
    if console.is_terminal:
        return console
    console = Console(width=LOG_WIDTH)
    console.push_render_hook(_TitleOnOneLine(console))
    return console
