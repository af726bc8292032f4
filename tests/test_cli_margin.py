"""The regression check's ``--margin`` and ``--alpha`` are refused before anything runs when
they cannot apply (break-it findings: ``lmra audit --baseline last --margin -0.5`` made every
model call and wrote a complete run before saying the margin was invalid; ``--margin``
without ``--baseline`` was silently ignored)."""

from __future__ import annotations

import subprocess
import sys

import pytest


def _lmra(tmp_path, *argv):
    return subprocess.run([sys.executable, "-m", "lmra.cli", *argv], cwd=tmp_path, capture_output=True, text=True,
                          timeout=120)


@pytest.mark.parametrize("argv, says", [
    (["audit", "--baseline", "last", "--margin", "-0.5"], "margin must be a number in [0, 2) (a rise of the net rating, which lies in [-1, 1]), got -0.5"),
    (["audit", "--margin", "0.1"], "--margin applies to the regression check: give --baseline"),
    (["audit", "--alpha", "0.1"], "--alpha applies to the regression check: give --baseline"),
    (["report", "RUN", "--margin", "0.1"], "--margin applies to the regression check: give --baseline"),
    (["report", "RUN", "--alpha", "0.1"], "--alpha applies to the regression check: give --baseline"),
    (["report", "RUN", "--baseline", "last", "--margin", "-1"], "margin must be a number in [0, 2) (a rise of the net rating, which lies in [-1, 1])"),
    (["check", "RUN", "--baseline", "last", "--margin", "-0.01"], "margin must be a number in [0, 2) (a rise of the net rating, which lies in [-1, 1])"),
    # break-it finding: a huge margin was stored with the check and broke `lmra report` of the run
    (["check", "RUN", "--baseline", "last", "--margin", "1e308"], "margin must be a number in [0, 2) (a rise of the net rating, which lies in [-1, 1]), got 1e308"),
    (["check", "RUN", "--baseline", "last", "--margin", "2"], "margin must be a number in [0, 2) (a rise of the net rating, which lies in [-1, 1]), got 2"),
    (["report", "RUN", "--delta", "-1"], "argument --delta: the net rating to detect must be in (0, 2], got -1"),
    (["report", "RUN", "--delta", "5"], "argument --delta: the net rating to detect must be in (0, 2], got 5"),
    # break-it finding: the page replaced a run's data file, or the run history, with HTML
    (["report", "RUN", "--out", "RUN/summary.json"], "the report is an HTML page: give a file name ending in .html"),
    (["report", "--history", "--out", "reports/history.sqlite"], "the report is an HTML page"),
    (["report", "RUN", "--out", "."], "the report is an HTML page"),
])
def test_a_margin_or_alpha_that_cannot_apply_is_refused_before_anything_runs(tmp_path, argv, says):
    out = tmp_path / "reports"
    p = _lmra(tmp_path, *argv, *(["--output-dir", str(out), "--no-progress"] if argv[0] == "audit" else []))
    assert p.returncode == 2, p.stderr
    assert says in p.stderr and "Traceback" not in p.stderr
    assert not out.exists()  # no model called, no run folder written


def test_a_stored_margin_out_of_range_is_not_used_as_the_rise_to_detect():
    """A check stored by an lmra that took any margin (1e308) must not break the report of its
    run: the sample-size table then uses no rise from the check."""
    import pandas as pd

    from lmra.report.html import adequacy_args

    class Run:
        summary = {"confidence": 0.95}

    def stored(margin):
        return {"result": pd.DataFrame(), "baseline_id": "b", "margin": margin, "alpha": 0.05}

    assert adequacy_args(Run(), check=stored(1e308))["delta"] is None
    assert adequacy_args(Run(), check=stored(0.0))["delta"] is None
    assert adequacy_args(Run(), check=stored(0.05))["delta"] == 0.05
