"""``lmra report`` on a run whose report cannot be drawn (break-it finding, s35: a target returning
8-MB answers to ``max_tokens = 48`` made the transcripts' DuckDB read run out of memory; the audit
warned, and ``lmra report RUN`` then ended in a traceback): the transcripts are left out with a
note when the responses are too large to read, and any other failure of the report is one
``error:`` paragraph, exit 1."""

from __future__ import annotations

import duckdb

from monitor_helpers import lmra_cli, make_run  # noqa: F401  (fixture)


def test_responses_too_large_to_read_leave_the_transcripts_out(tmp_path, lmra_cli, monkeypatch, capsys):  # noqa: F811
    run = make_run(tmp_path, "20260101-000000-nightly", {"career advice": 0.3, "write a story": 0.0}, seed=1,
                   n_prompts=40)

    def oom(*a, **k):
        raise duckdb.OutOfMemoryException("Out of Memory Error: failed to allocate data of size 64.0 MiB")

    monkeypatch.setattr("lmra.pairstore.jsonl_rows_where", oom)
    out = tmp_path / "r.html"
    assert lmra_cli(["report", str(run), "--out", str(out)]) == 0
    html = " ".join(out.read_text().split())
    assert "Transcripts are left out: the run's responses are too large to read" in html
    assert "failed to allocate data of size 64.0 MiB" in html


def test_a_report_that_cannot_be_drawn_is_one_error_paragraph(tmp_path, lmra_cli, monkeypatch, capsys):  # noqa: F811
    run = make_run(tmp_path, "20260101-000000-nightly", {"career advice": 0.3, "write a story": 0.0}, seed=1,
                   n_prompts=40)

    def broken(*a, **k):
        raise RuntimeError("a figure could not be drawn")

    monkeypatch.setattr("lmra.report.html.write_report", broken)
    capsys.readouterr()
    assert lmra_cli(["report", str(run)]) == 1
    err = " ".join(capsys.readouterr().err.split())
    assert err.startswith("error: report.html could not be written (RuntimeError: a figure could not be drawn")
    assert str(run) in err and "Traceback" not in err
