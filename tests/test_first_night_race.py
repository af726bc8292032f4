"""Two first nights of one audit run at once: the one that finishes first is pinned, the other is
checked against it (break-it finding, s40: both found no pin before their runs and after them,
both pinned themselves, the second replacing the first — in 1 of 3 tries — so the second night
was never checked and the baseline moved without a word).

The race is made deterministic: the other night's pin is made at the moment it would come from
another process — after this night found no pin, before it pins itself.
"""

from __future__ import annotations

import pytest
from rich.console import Console

from monitor_helpers import make_run
from lmra.cli.monitor import monitor_after_audit
from lmra.history import History

RATES = {"career advice": 0.1, "write a story": 0.1}


@pytest.mark.parametrize("moment", ["before the pin is looked up", "between the lookup and the pin"])
def test_a_first_night_pinned_meanwhile_by_another_is_checked_against_it(tmp_path, monkeypatch, moment):
    import lmra.cli.monitor as cli_monitor
    import lmra.monitor as monitor

    first = make_run(tmp_path, "20261201-020000-nightly", RATES, seed=1, n_prompts=40)
    second = make_run(tmp_path, "20261201-020001-nightly", RATES, seed=2, n_prompts=40)
    history = tmp_path / "reports" / "history.sqlite"

    def other_night_pins():  # the first night finishing in its own process
        with History(history) as other:
            other.pin(first, replace=False)

    if moment == "before the pin is looked up":  # after this night's baseline lookup found none
        resolve = monitor.resolve_baseline
        calls = []

        def racing_resolve(h, baseline, run):
            try:
                return resolve(h, baseline, run)
            except Exception:
                if not calls:
                    calls.append(1)
                    other_night_pins()
                raise

        monkeypatch.setattr(monitor, "resolve_baseline", racing_resolve)
    else:  # after this night looked for a pin and found none, before its own pin is written
        why_not = cli_monitor.why_not_a_baseline

        def racing_why_not(run):
            other_night_pins()
            return why_not(run)

        monkeypatch.setattr(cli_monitor, "why_not_a_baseline", racing_why_not)
    console = Console(record=True, width=200)
    reasons: dict = {}
    status = monitor_after_audit(second, baseline="pinned", report=False, first_night=True, console=console,
                                 reasons=reasons)
    out = " ".join(console.export_text().split())
    assert status == 0, out
    with History(history) as h:
        assert h.pinned("nightly") == first.name  # the first pin stays
        check = h.latest_check(second.name)
    assert check is not None and check["baseline_id"] == first.name  # tonight was checked against it
    assert "Not the first night after all" in out and first.name in out, out
    assert "this run is now pinned" not in out and reasons[0].startswith("no regression against baseline"), reasons
