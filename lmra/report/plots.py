"""Figures of the HTML report as inline SVG strings (matplotlib ``Figure`` objects, no pyplot).

Each function returns an ``<svg>`` element (no XML prolog) that can be pasted into HTML;
text stays text (``svg.fonttype = "none"``) and element ids are salted per figure so
several figures can live in one page.
"""

from __future__ import annotations

import io
import itertools
import math

import numpy as np
import pandas as pd

RED, BLUE, GREY = "#c0392b", "#2e64b0", "#7f8c8d"
_counter = itertools.count()


def _svg(fig, tight: bool = True) -> str:
    """The figure as an ``<svg>`` element; ``tight`` crops it to its content (one more draw of
    the whole figure: figures laid out with fixed margins pass False)."""
    buf = io.StringIO()
    fig.savefig(buf, format="svg", bbox_inches="tight" if tight else None,
                metadata={"Creator": None, "Date": None, "Format": None, "Type": None})
    text = buf.getvalue()
    return text[text.index("<svg"):]


def _figure(width: float, height: float, rows: int = 1, cols: int = 1, **kw):
    """A new pyplot-free figure (no global backend or state is touched)."""
    from matplotlib.figure import Figure

    fig = Figure(figsize=(width, height))
    return fig, fig.subplots(rows, cols, **kw)


def _rc(func):
    """Run a plotting function under report settings: text stays text, ids salted per figure."""
    import functools

    @functools.wraps(func)
    def wrapper(*args, **kwargs):
        import matplotlib

        with matplotlib.rc_context({"svg.fonttype": "none", "svg.hashsalt": f"lmra-fig-{next(_counter)}",
                                    "font.size": 9}):
            return func(*args, **kwargs)

    return wrapper


def _colour(lo: float, hi: float) -> str:
    if not (math.isnan(lo) or math.isnan(hi)):
        if lo > 0:
            return RED
        if hi < 0:
            return BLUE
    return GREY


def _err(values: pd.Series, lo: pd.Series, hi: pd.Series) -> np.ndarray:
    """Asymmetric error bar lengths; 0 where the CI is unknown."""
    v, lo, hi = (np.asarray(s, dtype=float) for s in (values, lo, hi))
    return np.vstack([np.nan_to_num(v - lo, nan=0.0), np.nan_to_num(hi - v, nan=0.0)])


@_rc
def task_bars(per_task: pd.DataFrame, title: str) -> str:
    """Horizontal bars of the per-task net rating with CI whiskers (red: CI above 0,
    blue: CI below 0, grey: CI contains 0 or unknown); a task without an interval has none.

    Args:
        per_task: rows of one comparison with ``task, net_rating, ci_low, ci_high``.
    """
    df = per_task.reset_index(drop=True)
    fig, ax = _figure(7.0, 0.8 + 0.28 * max(len(df), 1))
    y = np.arange(len(df))[::-1]
    net = df["net_rating"].astype(float)
    lo, hi = df["ci_low"].astype(float), df["ci_high"].astype(float)
    colours = [_colour(a, b) for a, b in zip(lo, hi)]
    ax.barh(y, net.fillna(0.0), color=colours, alpha=0.85)
    has_ci = (lo.notna() & hi.notna()).to_numpy()  # a task without an interval gets no whisker (not a 0-wide one)
    if has_ci.any():
        ax.errorbar(net.fillna(0.0)[has_ci], y[has_ci], xerr=_err(net[has_ci], lo[has_ci], hi[has_ci]), fmt="none",
                    ecolor="black", elinewidth=1, capsize=2)
    ax.axvline(0, color="black", linewidth=0.8)
    ax.set_yticks(y, df["task"].astype(str))
    ax.set_xlabel("net rating H = mean(q_F − q_R)")
    ax.set_title(title, loc="left")
    ax.grid(axis="x", alpha=0.3)
    return _svg(fig)


@_rc
def trend(metrics: pd.DataFrame, current_run: str, title: str, max_panels: int = 30) -> str:
    """Small multiples: one panel per task, net rating with CI across runs (oldest left);
    the current run's point is drawn larger.

    Args:
        metrics: rows ``run_id, started, task, net_rating, ci_low, ci_high`` ordered oldest first
            (one comparison).
    """
    from matplotlib.ticker import MaxNLocator

    runs = list(dict.fromkeys(metrics["run_id"]))
    tasks = list(dict.fromkeys(metrics["task"]))[:max_panels]
    cols = min(3, max(len(tasks), 1))
    rows = math.ceil(len(tasks) / cols) or 1
    fig, axes = _figure(3.0 * cols, 2.1 * rows, rows, cols, squeeze=False, sharex=True)
    pos = {r: i for i, r in enumerate(runs)}
    for ax, task in itertools.zip_longest(axes.flat, tasks):
        if task is None:
            ax.axis("off")
            continue
        d = metrics[metrics["task"] == task]
        x = d["run_id"].map(pos).to_numpy()
        v = d["net_rating"].astype(float)
        ax.errorbar(x, v, yerr=_err(v, d["ci_low"].astype(float), d["ci_high"].astype(float)), fmt="-o",
                    markersize=3, color=GREY, ecolor="#bbbbbb", capsize=1.5, linewidth=1)
        cur = d[d["run_id"] == current_run]
        if len(cur):
            ax.plot(cur["run_id"].map(pos), cur["net_rating"].astype(float), "o", color=RED, markersize=6)
        ax.axhline(0, color="black", linewidth=0.6)
        ax.set_title(str(task), fontsize=8)
        ax.tick_params(labelsize=7)
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.set_xlim(-0.5, len(runs) - 0.5)
    for ax in axes[-1]:
        ax.set_xlabel("run number (oldest → newest)", fontsize=7)
    fig.suptitle(title, x=0.01, ha="left", fontsize=10)
    if cols < 3:  # a narrow figure: fit the title by cropping to the content
        fig.tight_layout()
        return _svg(fig)
    # fixed margins in inches: tight_layout and a tight crop each draw every panel once more
    # (with 27 tasks they took two thirds of this figure's time)
    w, h = fig.get_size_inches()
    fig.subplots_adjust(left=0.6 / w, right=1 - 0.15 / w, bottom=0.5 / h, top=1 - 0.5 / h, wspace=0.3, hspace=0.5)
    return _svg(fig, tight=False)


@_rc
def comparison_scatter(pairs: pd.DataFrame, label_a: str, label_b: str, slope: float, r: float,
                       eiv_slope: float | None = None) -> str:
    """Scatter of per-task net ratings of run B against run A with the y = x diagonal and the
    lines through the origin (FPF Figs. 7, 8, 10): the errors-in-variables slope (solid red,
    when given) and the least-squares slope (dotted red; solid when it is the only one).

    Args:
        pairs: ``h_a, h_b`` per task (net ratings in [−1, 1]).
        slope: least-squares slope through the origin; eiv_slope: errors-in-variables slope
            (:func:`lmra.compare.eiv_slope`) or None. Non-finite slopes are not drawn.
        r: Pearson's r for the title.
    """
    fig, ax = _figure(5.0, 5.0)
    x, y = pairs["h_a"].astype(float), pairs["h_b"].astype(float)
    ax.scatter(x, y, s=18, color=BLUE, alpha=0.8)
    lim = float(np.nanmax(np.abs(np.concatenate([x, y, [1e-3]])))) * 1.15
    grid = np.linspace(-lim, lim, 3)
    ax.plot(grid, grid, "--", color=GREY, linewidth=0.8, label="y = x")
    has_eiv = eiv_slope is not None and math.isfinite(eiv_slope)
    if has_eiv:
        ax.plot(grid, eiv_slope * grid, "-", color=RED, linewidth=1.4,
                label=f"errors-in-variables slope {eiv_slope:.2f}")
    if math.isfinite(slope):
        ax.plot(grid, slope * grid, ":" if has_eiv else "-", color=RED, linewidth=1.2,
                label=f"least-squares slope {slope:.2f}" + (" (biased towards 0)" if has_eiv else " (through 0)"))
    ax.axhline(0, color="black", linewidth=0.5)
    ax.axvline(0, color="black", linewidth=0.5)
    ax.set_xlim(-lim, lim)
    ax.set_ylim(-lim, lim)
    ax.set_xlabel(f"net rating, {label_a}")
    ax.set_ylabel(f"net rating, {label_b}")
    ax.set_title(f"per-task net ratings (r = {r:.2f})" if math.isfinite(r) else "per-task net ratings",
                 loc="left")
    ax.legend(loc="upper left", fontsize=8)
    return _svg(fig)
