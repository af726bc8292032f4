"""A night's stored check is found by its run id, not by reading every check of the history.

``lmra history`` reads each night's latest check; without an index on ``checks.run_id`` each
lookup read the whole table, so listing N nights did N × N row reads (scale break-it, s40: 38.6 s
CPU at 3,224 nights). The work of one lookup is counted in SQLite virtual-machine steps (its
progress handler), which does not depend on the machine's speed or load.
"""

from __future__ import annotations

import json
import sqlite3

from monitor_helpers import lmra_cli, make_run  # noqa: F401  (fixture)
from lmra.history import History


def _steps(history: History, run_id: str) -> int:
    """SQLite VM steps (in units of 100) spent by ``History.check_summary(run_id)``."""
    steps = [0]

    def tick():
        steps[0] += 1
        return 0

    history.db.set_progress_handler(tick, 100)
    try:
        assert history.check_summary(run_id) is not None
    finally:
        history.db.set_progress_handler(None, 100)
    return steps[0]


def _add_checks(path, n: int) -> None:
    """``n`` stored checks of other (made-up) runs, as a long history holds."""
    with sqlite3.connect(path) as db:
        db.executemany("INSERT INTO checks VALUES (?,?,?,?,?,?,?,?)",
                       [(f"2030{i:06d}-nightly", "base", 0.0, 0.05, "2030-01-01T00:00:00", 0, 0,
                         json.dumps([])) for i in range(n)])


def test_a_nights_check_is_looked_up_by_index(tmp_path, lmra_cli):
    base = make_run(tmp_path, "20261201-020000-nightly", {"career advice": 0.1, "write a story": 0.1}, seed=1,
                    n_prompts=40)
    run = make_run(tmp_path, "20261202-020000-nightly", {"career advice": 0.1, "write a story": 0.1}, seed=2,
                   n_prompts=40)
    reports = tmp_path / "reports"
    lmra_cli(["check", str(run), "--baseline", str(base), "--reports-dir", str(reports)])
    path = reports / "history.sqlite"
    with sqlite3.connect(path) as db:  # a history an older lmra made: no index on checks.run_id
        db.execute("DROP INDEX IF EXISTS checks_run")
    _add_checks(path, 50)
    with History(path) as h:  # opening it adds the index
        plan = " ".join(str(r[-1]) for r in h.db.execute("EXPLAIN QUERY PLAN SELECT * FROM checks WHERE run_id = ?",
                                                         (run.name,)))
        assert "checks_run" in plan, plan
        few = _steps(h, run.name)
    _add_checks(path, 5000)  # a hundred times the checks
    with History(path) as h:
        many = _steps(h, run.name)
    # the lookup's work does not grow with the other nights' checks (a scan: ~100 times the steps)
    assert many <= few + 5, (few, many)


def test_history_names_the_provider_of_models_that_share_an_id(tmp_path, capsys, monkeypatch):
    """Fresh-user finding (s43): an OpenAI-compatible and an Anthropic judge both served as
    'judge-text' read alike in ``lmra history``. The provider is named where an id is shared by
    runs of two providers, and only there."""
    import sqlite3

    from lmra.cli import main
    from test_gates import FLAT, write_config

    monkeypatch.setenv("COLUMNS", "400")
    for seed in (1, 2):
        cfg = write_config(tmp_path, rates=FLAT, n_prompts=6, seed=seed)
        assert main(["audit", "--config", str(cfg), "--no-progress", "--no-report"]) == 0
    reports = tmp_path / "reports"
    db = sqlite3.connect(reports / "history.sqlite")
    runs = [r[0] for r in db.execute("SELECT run_id, judge_provider, judge_model FROM runs ORDER BY run_id")]
    model, provider = db.execute("SELECT judge_model, judge_provider FROM runs").fetchone()
    capsys.readouterr()
    assert main(["history", "--reports-dir", str(reports)]) == 0
    assert f"{provider}:{model}" not in capsys.readouterr().out  # one provider: the id alone
    db.execute("UPDATE runs SET judge_provider = 'anthropic' WHERE run_id = ?", (runs[1],))
    db.commit()
    db.close()
    assert main(["history", "--reports-dir", str(reports)]) == 0
    out = capsys.readouterr().out
    assert f"anthropic:{model}" in out and f"{provider}:{model}" in out
