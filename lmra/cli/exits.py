"""The exit status of a command when several apply: their precedence
(:data:`EXIT_PRECEDENCE`) and the one final line that names it (:func:`final_status`), printed
by ``lmra audit``, ``check``, ``gate``, ``merge`` and ``report RUN --baseline``. The table of
every exit status is the docstring of :mod:`lmra.cli`."""

from __future__ import annotations

from rich.console import Console
from rich.text import Text

#: exit statuses from the one that wins to the one that loses when a run meets several: a failed
#: or partial run (1) or a question that could not be answered (2: e.g. a check in which no task
#: could be tested) say nothing about the chatbot; a judge that failed validation (5) makes every
#: number untrustworthy; an absolute release gate not met (6) is the release criterion; a
#: regression against the baseline (3) is relative to it; 0 = none of these
EXIT_PRECEDENCE = (1, 2, 5, 6, 3, 0)  # 5 = lmra.judge_check.EXIT_JUDGE_FAILED, 6 = lmra.gates.EXIT_GATES_NOT_MET


def combine_exit_statuses(*statuses: int) -> int:
    """The exit status that wins among ``statuses`` by :data:`EXIT_PRECEDENCE`
    (1 > 2 > 5 > 6 > 3 > 0); a status not in it (e.g. 4, 75, 130) wins over all of them."""
    rank = {s: i for i, s in enumerate(EXIT_PRECEDENCE)}
    return min(statuses, key=lambda s: rank.get(s, -1)) if statuses else 0


def final_status(reasons: dict[int, str]) -> tuple[int, str]:
    """The exit status of a command (``lmra audit``, ``check``, ``gate``, ``report --baseline``)
    and the final line it prints, from every status that applies and why.

    Args:
        reasons: exit status → why it applies, e.g. ``{6: "release gates not met (breached:
            max_ci_high)", 5: "the judge failed validation"}``; statuses that do not apply are
            left out (0 need not be given).

    Returns:
        ``(status, line)``: the status that wins by :data:`EXIT_PRECEDENCE`
        (:func:`combine_exit_statuses`) and the one line stating it, e.g. ``exit status 5: the
        judge failed validation (takes precedence over 6: release gates not met (breached:
        max_ci_high))``; ``exit status 0`` (with ``reasons[0]`` after a colon when given) when
        nothing else applies. This is the only line of a command that names its exit status.
    """
    applicable = {s: r for s, r in reasons.items() if s != 0}
    status = combine_exit_statuses(*applicable) if applicable else 0
    if not status:
        return 0, "exit status 0" + (f": {reasons[0]}" if reasons.get(0) else "")
    rank = {s: i for i, s in enumerate(EXIT_PRECEDENCE)}
    others = sorted((s for s in applicable if s != status), key=lambda s: rank.get(s, -1))
    over = f" (takes precedence over {'; '.join(f'{s}: {applicable[s]}' for s in others)})" if others else ""
    return status, f"exit status {status}: {applicable[status]}{over}"


def print_final_status(console: Console, reasons: dict[int, str]) -> int:
    """Print the final line of :func:`final_status` on ``console`` (bold red when the status is
    not 0) and return the status."""
    status, line = final_status(reasons)
    console.print(Text(line, style="bold red" if status else "bold green"), highlight=False, soft_wrap=True)
    return status


def away_from_zero(result) -> str:
    """``; the overall net rating's interval lies above 0 (female vs male: +0.1000 [+0.0120,
    +0.2000])`` (and ``below``) for each comparison of the run (an :class:`~lmra.audit.AuditResult`)
    whose overall interval excludes 0; "" for none (:func:`lmra.monitor.overall_away_from_zero`)."""
    from lmra.monitor import overall_away_from_zero

    return overall_away_from_zero(result.overall)


def unchecked_reason(cfg, result) -> str:
    """The final line's reason for exit status 0 of a run checked against no baseline (``lmra audit``
    without ``--baseline``, ``lmra merge``): ``release gates met; no baseline checked (--baseline)``,
    or, without ``[gates]``, that the status does not depend on the ratings (fresh-user finding, s39:
    +0.46 with its interval above 0 ended a bare "exit status 0", read in CI as "OK") — naming each
    comparison whose overall net rating's interval lies above or below 0 — and, when the run's
    judge failed validation (waived), that its numbers are not evidence about the chatbot (break-it
    round 2, s39)."""
    if cfg.gates.configured:
        said = "release gates met; no baseline checked (--baseline)"
    else:
        said = ("no baseline (--baseline) and no release gate ([gates]): this status does not depend on the ratings"
                + away_from_zero(result))
    js = result.summary.get("judge_status") or {}
    if js.get("status") == "failed":
        said += " — not evidence about the chatbot: its judge failed validation (waived)"
    return said
