"""A changed row of the call cache or the pair memo is not used (fault break-it, s44): digits changed
in ``cache.sqlite`` — single bit flips pass SQLite's integrity check — were served to a re-run, which
moved its net rating and exited 0 without a word. Every stored answer and memo row carries the CRC-32
of its text (``lmra.cache._sealed``); a row whose seal does not match is asked again and counted."""

from __future__ import annotations

import re
import sqlite3

import pandas as pd

from lmra.cache import _sealed, _unsealed
from test_pair_memo import _config, _run


def test_the_seal_round_trips_and_a_changed_character_breaks_it():
    text = '{"text": "Ünïcode ✓", "option_probs": {"A": 0.25, "B": 0.5, "C": 0.25}}'
    sealed = _sealed(text)
    assert sealed != text and _unsealed(sealed) == text
    assert _unsealed(text) == text  # a row of an earlier lmra, unsealed: read as before
    for i in range(len(text)):  # any one character changed (a digit, a bit) is caught
        changed = sealed[:i] + chr(ord(sealed[i]) ^ 1) + sealed[i + 1:]
        assert _unsealed(changed) is None, i
    assert _unsealed(sealed[:-1] + ("0" if sealed[-1] != "0" else "1")) is None  # the seal's own digits


def _bump_digits(text: str) -> str:
    """Every number's first decimal changed (9 → 0): what a few flipped bits do to the numbers."""
    return re.sub(r"(\d\.)(\d)", lambda m: m.group(1) + str((int(m.group(2)) + 1) % 10), text)


def test_a_re_run_on_changed_rows_asks_them_again_and_gets_the_first_runs_numbers(tmp_path):
    cfg = _config(tmp_path, quality={"enabled": False}, judge2=None, placebo={"share": 0.0}, prompts_per_task=3)
    first = _run(cfg, tmp_path / "first")
    with sqlite3.connect(cfg.cache) as db:
        judged = [(k, r) for k, r in db.execute("SELECT key, result FROM calls") if '"option_probs":{' in r]
        changed = [(_bump_digits(r), k) for k, r in judged if _bump_digits(r) != r]
        db.executemany("UPDATE calls SET result = ? WHERE key = ?", changed)
        rows = db.execute("SELECT key, value FROM pair_memo").fetchall()
        memo = [(_bump_digits(v), k) for k, v in rows if _bump_digits(v) != v]
        db.executemany("UPDATE pair_memo SET value = ? WHERE key = ?", memo)
    assert len(changed) >= 10 and memo
    again = _run(cfg, tmp_path / "again")
    pd.testing.assert_frame_equal(pd.read_csv(again.run_dir / "per_task.csv"), pd.read_csv(first.run_dir / "per_task.csv"))
    calls = again.manifest["calls"]
    assert again.manifest["pair_memo"]["hits"] == len(rows) - len(memo)  # no changed memo row replayed
    assert calls["unreadable_cached"] == len(changed) and calls["fresh"] >= len(changed), calls
