"""The Rich console report of an audit: per-task table and an overall line per comparison."""

from __future__ import annotations

import math

import pandas as pd
from rich.console import Console
from rich.table import Table


def _fmt(x: float, digits: int = 4) -> str:
    return "—" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{x:+.{digits}f}"


def _rate(x: float) -> str:
    return "—" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{x:.4f}"


def _net_cell(row: pd.Series) -> str:
    net, lo, hi = row["net_rating"], row["ci_low"], row["ci_high"]
    text = f"{_fmt(net)} [{_fmt(lo)}, {_fmt(hi)}]"
    if not any(isinstance(v, float) and math.isnan(v) for v in (lo, hi)):
        if lo > 0:
            return f"[bold red]{text}[/]"
        if hi < 0:
            return f"[bold blue]{text}[/]"
    return text


def render_audit(console: Console, per_task: pd.DataFrame, overall: pd.DataFrame, summary: dict,
                 manifest: dict) -> None:
    """Print the per-task table, the overall line(s) and the call counts.

    A net rating whose CI lies above 0 (stereotypes more often in the forward direction)
    is shown in red, below 0 in blue.
    """
    conf = int(round(100 * summary.get("confidence", 0.95)))
    for (ga, gb), pt in per_task.groupby(["group_a", "group_b"], sort=False):
        table = Table(title=f"Harmful-stereotype ratings: {ga} vs {gb}", title_justify="left")
        for col, kw in [("domain", {}), ("task", {}), ("pairs", {"justify": "right"}),
                        ("invalid", {"justify": "right"}), ("failed", {"justify": "right"}),
                        ("forward", {"justify": "right"}), ("reverse", {"justify": "right"}),
                        (f"net rating [{conf}% CI]", {"justify": "right"})]:
            table.add_column(col, **kw)
        for _, row in pt.iterrows():
            table.add_row(str(row["domain"]), str(row["task"]), str(row["n_pairs"]), str(row["n_invalid"]),
                          str(row["n_failed"]), _rate(row["forward_rate"]), _rate(row["reverse_rate"]),
                          _net_cell(row))
        console.print(table)
        ov = overall[(overall["group_a"] == ga) & (overall["group_b"] == gb)]
        if len(ov):
            r = ov.iloc[0]
            console.print(
                f"[bold]Overall {ga} vs {gb}:[/] net rating {_net_cell(r)} over {r['n_pairs']} pairs "
                f"({r['n_invalid']} invalid, {r['n_failed']} failed); forward {_rate(r['forward_rate'])}, "
                f"reverse {_rate(r['reverse_rate'])}, p = {r['p_value']:.3g}" if not math.isnan(r["p_value"]) else
                f"[bold]Overall {ga} vs {gb}:[/] net rating {_net_cell(r)} over {r['n_pairs']} pairs "
                f"({r['n_invalid']} invalid, {r['n_failed']} failed)")
    calls = manifest.get("calls", {})
    console.print(
        f"Model calls: {calls.get('fresh', 0)} fresh, {calls.get('cached', 0)} from cache, "
        f"{calls.get('failed', 0)} failed.  Judge method(s): "
        + (", ".join(f"{k} ×{v}" for k, v in summary.get("judge_methods", {}).items()) or "—")
        + (f"; mean valid-option mass {summary['judge_valid_option_mass']:.3f}"
           if summary.get("judge_valid_option_mass") is not None else ""))
    console.print(
        "[dim]Net rating = mean over pairs of q(forward) − q(reverse): > 0 means the LMRA saw harmful "
        "stereotypes more often in the direction that matches how the responses were really assigned. "
        "0 means no net bias; red = CI above 0, blue = CI below 0.[/]")
    console.print(f"Run folder: [bold]{summary.get('run_dir')}[/]")
