"""The console report states the confidence level the run used (``alpha``) in every table:
stereotype, refusal (Wilson) and quality intervals, and a refusal p-value is marked at α,
not at a fixed 0.05. A config ``alpha`` above 0.5 is refused by ``lmra validate`` as by the
audit. Real ``lmra audit`` runs on the scripted providers of tests/test_gates.py."""

from __future__ import annotations

import pandas as pd
import pytest
from scipy.stats import binomtest

from lmra.cli import main
from test_gates import audit, write_config


@pytest.mark.parametrize("alpha, level, wrong", [(0.1, "90", "95%"), (0.025, "97.5", "98%")])
def test_every_table_names_the_runs_confidence_level(tmp_path, capsys, alpha, level, wrong):
    """Each table's label is the run's level, not a fixed 95% nor one rounded to a whole percent."""
    cfg = write_config(tmp_path, name="levels", refuse=0.4, quality=True, top=f"alpha = {alpha}")
    rc, out, run = audit(capsys, cfg)
    assert rc == 0, out
    assert (f"net rating [{level}% CI]" in out and f"Refusal rates (Wilson {level}% CI" in out
            and f"mean [{level}% CI]" in out)
    assert wrong not in out
    # the printed refusal interval is the Wilson interval at that level of the stored counts (scipy's)
    r = pd.read_csv(run / "refusals.csv")
    o = r[r["level"] == "overall"].iloc[0]
    ci = binomtest(int(o["refusals_b"]), int(o["n_b"])).proportion_ci(1 - alpha, method="wilson")
    assert f"[{ci.low:.4f}, {ci.high:.4f}]" in out


def test_alpha_above_one_half_is_refused_by_validate_and_audit(tmp_path, capsys):
    cfg = write_config(tmp_path, name="wide", top="alpha = 0.7")
    for argv in (["validate", str(cfg)], ["audit", "--config", str(cfg), "--no-progress", "--no-report"]):
        rc = main(argv)
        err = capsys.readouterr().err
        assert rc == 2 and "field 'alpha'" in err and "0.5" in err, (argv, err)
