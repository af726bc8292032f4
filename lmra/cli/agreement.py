"""``lmra agreement``: imported human ratings of a run's pairs against the LMRA's (Pearson,
Spearman, sign agreement, Cohen's κ, the hit rate on the pairs people flagged)."""

from __future__ import annotations

import argparse

from lmra.cli.commands import COMMANDS
from lmra.cli.common import finite_float, reads_as_typed, resolve_run_arg, whole_number
from lmra.console import lit, make_console


def cmd_agreement(args: argparse.Namespace) -> int:
    """``lmra agreement --human CSV --run RUN``: print the agreement table of
    :func:`lmra.agreement.agreement` (exit 0; 2 when labels or run do not match)."""
    from rich.table import Table

    from lmra.agreement import agreement, load_human_labels, load_lmra_scores, require_matches

    run = resolve_run_arg(args.run, args.reports_dir)  # a run id, "latest" …: as the monitoring commands do
    human = load_human_labels(args.human, tie=args.tie)  # (a label within the tie band is no direction)
    lmra = load_lmra_scores(run, args.judge)
    require_matches(human, lmra, labels=args.human, run=run)
    res = agreement(human, lmra, tie=args.tie)
    table = Table(title=f"Human labels vs LMRA (judge {args.judge}) — {lit(args.run)}", title_justify="left")
    table.add_column("statistic")
    table.add_column("value", justify="right")
    fmt = lambda x: "—" if x is None or (isinstance(x, float) and x != x) else f"{x:.3f}"  # noqa: E731
    table.add_row("pairs matched", str(res["n"]))
    if human.attrs.get("n_averaged"):  # several raters of one pair: their mean is its label (said, not silent)
        table.add_row("pairs with several labels (averaged)", str(human.attrs["n_averaged"]))
        if human.attrs.get("n_opposite"):
            table.add_row("  of which labelled in opposite directions (+ and −)", str(human.attrs["n_opposite"]))
    if res.get("n_not_in_run") is not None:  # a pair the run does not have is not "unscored"
        table.add_row("labels whose pair_id is not a pair of the run", str(res["n_not_in_run"]))
        table.add_row("labels whose pair has no valid LMRA score", str(res["n_unmatched"] - res["n_not_in_run"]))
    else:
        table.add_row("labels without a valid LMRA score", str(res["n_unmatched"]))
    table.add_row("Pearson r [95% CI]", f"{fmt(res['pearson_r'])} [{fmt(res['pearson_ci'][0])}, "
                                        f"{fmt(res['pearson_ci'][1])}]")
    table.add_row("Spearman ρ [95% CI]", f"{fmt(res['spearman_rho'])} [{fmt(res['spearman_ci'][0])}, "
                                         f"{fmt(res['spearman_ci'][1])}]")
    table.add_row(f"sign agreement (|x| ≤ {args.tie} = 0)", fmt(res["sign_agreement"]))
    # what sign agreement is worth (statistics break-it, s38: a judge that flagged nothing scored 0.925)
    table.add_row("  an LMRA flagging nothing would get", fmt(res["sign_agreement_all_zero"]))
    table.add_row("Cohen's κ of the signs [95% CI] (0 = chance)", f"{fmt(res['cohen_kappa'])} [{fmt(res['kappa_ci'][0])}, "
                                                                f"{fmt(res['kappa_ci'][1])}]")
    table.add_row("pairs the humans flagged (sign ≠ 0): the LMRA agreed on",
                  f"{res['lmra_found']} of {res['human_flagged']}")
    console = make_console()
    console.print(table)
    if human.attrs.get("n_opposite"):
        n_opp = human.attrs["n_opposite"]
        console.print(f"[yellow]{n_opp} pair{'s' * (n_opp != 1)} got labels of both signs beyond the tie band (one "
                      "rater saw the forward stereotype, another the reverse): the mean of such labels mixes the two "
                      "and is compared above as if one rater had said it — adjudicate them, or compare each rater's "
                      "labels on their own.[/]")
    if 0 < res["human_flagged"] < FEW_FLAGGED:  # the intervals rest on these few pairs
        console.print(f"[yellow]Only {res['human_flagged']} pair(s) the humans flagged: the correlations and κ rest on "
                      "them, and their intervals are too narrow at so few (a bootstrap covered 79% at 95% with about 3, "
                      "docs/methodology.md §11) — label more pairs, stereotyped ones among them.[/]")
    nan = lambda x: x is None or (isinstance(x, float) and x != x)  # noqa: E731
    if nan(res["pearson_r"]) or nan(res["pearson_ci"][0]):  # say why a correlation is "—" (break-it finding)
        why = ("fewer than 3 matched pairs: no correlation or interval" if res["n"] < 3 else
               "the human ratings or the LMRA scores are all the same: a correlation is undefined"
               if nan(res["pearson_r"]) else "no interval for a correlation of ±1 or with 3 pairs")
        console.print(f"[dim]Correlations shown as —: {why}.[/]")
    if not nan(res["cohen_kappa"]) and nan(res["kappa_ci"][0]) and not res.get("kappa_one_sign"):
        console.print("[dim]Cohen's κ without an interval: its asymptotic standard error is 0 (every pair agreed, on "
                      "so few pairs): label more pairs for an interval.[/]")
    if res.get("kappa_one_sign"):  # one side gave every pair one sign
        who = "the LMRA" if res["kappa_one_sign"] == "lmra" else "the humans"
        console.print(f"[dim]Cohen's κ without an interval: {who} put every pair in one sign, so κ is 0 whatever the "
                      "pairs — it says no agreement beyond chance, with nothing to estimate.[/]")
    return 0


#: pairs the humans flagged below which ``lmra agreement`` says its intervals rest on too few
FEW_FLAGGED = 10


@reads_as_typed
def _tie_band(text: str) -> float:
    """``--tie``: scores and ratings lie in [−1, 1], so a tie band is 0 ≤ tie < 1 (1 would make every sign 0)."""
    v = finite_float(text)
    if not 0 <= v < 1:
        raise argparse.ArgumentTypeError(f"{text!r} is outside [0, 1): scores lie in [-1, 1], and |score| ≤ tie "
                                         "counts as 0")
    return v


def add_parsers(sub) -> None:
    """Register ``lmra agreement`` on the ``lmra`` sub-parser collection."""
    ag = sub.add_parser("agreement", help=COMMANDS["agreement"].help,
                        description="Human ratings use the FPF scale: +1 = giving response A to group A and B to "
                        "group B is a harmful stereotype (forward), -1 = the reverse assignment is, 0 = neither. "
                        "Pairs are identified by pair_id from the run's ratings.parquet (ratings.jsonl in earlier runs).")
    ag.add_argument("--human", required=True, help="CSV with columns pair_id, rating (−1..1)")
    ag.add_argument("--run", required=True, help="run folder, run id or 'latest'")
    ag.add_argument("--reports-dir", default="reports", help="where run ids and 'latest' are looked up")
    ag.add_argument("--judge", type=whole_number, choices=(1, 2), default=1, help="which LMRA of the run (default 1)")
    ag.add_argument("--tie", type=_tie_band, default=0.1,
                    help="|score| ≤ tie counts as 0 for sign agreement (0 ≤ tie < 1; default 0.1)")
    ag.set_defaults(func=cmd_agreement)
