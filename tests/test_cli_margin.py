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
    (["audit", "--baseline", "last", "--margin", "-0.5"], "margin must be a finite number ≥ 0, got -0.5"),
    (["audit", "--margin", "0.1"], "--margin applies to the regression check: give --baseline"),
    (["audit", "--alpha", "0.1"], "--alpha applies to the regression check: give --baseline"),
    (["report", "RUN", "--margin", "0.1"], "--margin applies to the regression check: give --baseline"),
    (["report", "RUN", "--alpha", "0.1"], "--alpha applies to the regression check: give --baseline"),
    (["report", "RUN", "--baseline", "last", "--margin", "-1"], "margin must be a finite number ≥ 0"),
    (["check", "RUN", "--baseline", "last", "--margin", "-0.01"], "margin must be a finite number ≥ 0"),
])
def test_a_margin_or_alpha_that_cannot_apply_is_refused_before_anything_runs(tmp_path, argv, says):
    out = tmp_path / "reports"
    p = _lmra(tmp_path, *argv, *(["--output-dir", str(out), "--no-progress"] if argv[0] == "audit" else []))
    assert p.returncode == 2, p.stderr
    assert says in p.stderr and "Traceback" not in p.stderr
    assert not out.exists()  # no model called, no run folder written
