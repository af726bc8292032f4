"""Transcripts for ``report.html``: the scrubbed response pairs behind the highest net ratings.

A reviewer triaging a run wants to read what the LMRA rated. For each comparison, the
``n_tasks`` tasks with the highest net rating H (``per_task.csv``) get their pairs, most
stereotyped first (pair score ``h`` descending; pairs without a score — refused, invalid or
failed — last), at most :data:`MAX_PAIRS_PER_TASK` per task. Each pair carries the prompt
text, both groups' name-scrubbed responses (the text the LMRA saw, ``[NAME]`` for the
user's name), their refusal labels, and the LMRA's answer in **both presentation orders**
(order 1 shows group A's response as "Response 1", order 2 group B's): its probability on
each option A/B/C, the valid-option mass, the option it chose, its raw answer text and how
the probabilities were read (``logprobs``, ``sampled``, ``text``), then the combined
``q_F``, ``q_R``, ``q_N`` and ``h``.

Sources (all in the run folder): ``ratings.parquet`` (``ratings.jsonl`` in runs before issue 15;
scores and both orders' answers),
``responses.jsonl`` (scrubbed texts and refusal labels), ``prompts.jsonl`` (prompt texts;
written by audits since issue 13, absent from older runs and from redacted ones).

A **redacted** run (``redact = true`` / ``--redact``) never gets transcripts: its run folder
holds no response or prompt text, and the report must not either. Texts are cut to
:data:`MAX_CHARS_PER_TEXT` characters each and the whole section to
:data:`MAX_TOTAL_CHARS`, so the report stays a bounded size whatever the chatbot wrote.
"""

from __future__ import annotations

import math
from typing import Any

import pandas as pd

from lmra.judge.scoring import order_outcomes
from lmra.pairstore import pair_flag
from lmra.runfolder import RunFolder, finite

#: tasks per comparison shown when neither the command line nor the run's config says
DEFAULT_TASKS = 5
#: pairs shown per task (the most stereotyped first); the others are counted
MAX_PAIRS_PER_TASK = 10
#: characters of one prompt or response shown; the rest is counted, not written
MAX_CHARS_PER_TEXT = 4000
#: characters of prompt, response and judge-answer text in the whole section
MAX_TOTAL_CHARS = 500_000
OPTIONS = ("A", "B", "C")


def configured_tasks(run: RunFolder) -> int:
    """Tasks per comparison the run's config asks for (``[report] transcripts``), else
    :data:`DEFAULT_TASKS` (runs made before the field existed)."""
    value = (run.config.get("report") or {}).get("transcripts")
    return int(value) if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else DEFAULT_TASKS


def is_redacted(run: RunFolder) -> bool:
    """True when the run was audited with ``redact`` (``summary.json`` or its config says so)."""
    return bool(run.summary.get("redacted") or run.config.get("redact"))


def clip(text: Any, limit: int = MAX_CHARS_PER_TEXT) -> dict:
    """A text cut for display.

    Returns:
        ``{"text": first ``limit`` characters or None when there is no text, "n_chars": its full
        length, "n_cut": characters not shown (0 when it fits)}``.
    """
    if not isinstance(text, str):
        return {"text": None, "n_chars": 0, "n_cut": 0}
    return {"text": text[:limit], "n_chars": len(text), "n_cut": max(0, len(text) - limit)}


def _refusal(label: Any, p: Any) -> dict:
    """A response's refusal label: ``{"label": "refusal" | "not a refusal" | "not labelled", "p": p(refusal)}``."""
    if label is None or (isinstance(label, float) and math.isnan(label)):
        return {"label": "not labelled", "p": finite(p)}
    return {"label": "refusal" if pair_flag(label) else "not a refusal", "p": finite(p)}


def _order(answer: Any, order: int, first: str, second: str) -> dict:
    """One presentation order's LMRA answer (a ``ratings.jsonl`` ``order1``/``order2`` object)."""
    base = {"order": order, "first": first, "second": second}
    if not isinstance(answer, dict):  # a failed or unrated pair: the LMRA was not asked
        return base | {"asked": False}
    probs = answer.get("probs") if isinstance(answer.get("probs"), dict) else None
    out = order_outcomes({o: float(probs.get(o, 0.0)) for o in OPTIONS}, order) if probs else None
    raw = [str(t) for t in answer.get("raw_texts") or [] if str(t).strip()]
    return base | {"asked": True, "probs": {o: finite(probs.get(o)) for o in OPTIONS} if probs else None,
                   "mass": finite(answer.get("mass")), "method": answer.get("method"),
                   "n_samples": answer.get("n_samples") or 1, "n_refused": answer.get("n_refused") or 0,
                   "n_unparseable": answer.get("n_unparseable") or 0,
                   "choice": max(OPTIONS, key=lambda o: probs.get(o, 0.0)) if probs else None,
                   "raw_texts": raw, "forward": out["F"] if out else None, "reverse": out["R"] if out else None}


def _excerpt(text: Any, limit: int = 100) -> str | None:
    """The start of a prompt on one line, for a pair's summary line."""
    if not isinstance(text, str):
        return None
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[:limit - 1] + "…"


def _status(r: dict) -> str:
    if pair_flag(r.get("failed")):
        return "failed: " + str(r.get("error") or "a model call failed")
    if pair_flag(r.get("refused")):
        return "not rated: a response was labelled a refusal"
    if pair_flag(r.get("unlabelled")):
        return "not rated: a refusal label could not be obtained"
    if not pair_flag(r.get("valid")):
        return "invalid: the LMRA's answers gave no usable rating"
    return "rated"


def _pair(r: dict, resp: dict, prompts: dict[str, str]) -> dict:
    ga, gb = str(r.get("group_a")), str(r.get("group_b"))
    ra = resp.get((r.get("prompt_id"), r.get("comparison"), ga, r.get("sample"))) or {}
    rb = resp.get((r.get("prompt_id"), r.get("comparison"), gb, r.get("sample"))) or {}
    return {"pair_id": r.get("pair_id"), "prompt_id": r.get("prompt_id"), "sample": r.get("sample"),
            "status": _status(r), "h": finite(r.get("h")), "q_F": finite(r.get("q_F")), "q_R": finite(r.get("q_R")),
            "q_N": finite(r.get("q_N")), "method": r.get("method"),
            "prompt": clip(prompts.get(r.get("prompt_id"))),
            "prompt_excerpt": _excerpt(prompts.get(r.get("prompt_id"))),
            "response_a": clip(ra.get("scrubbed")), "response_b": clip(rb.get("scrubbed")),
            "error_a": ra.get("error"), "error_b": rb.get("error"),
            "refusal_a": _refusal(r.get("refusal_a"), r.get("refusal_p_a")),
            "refusal_b": _refusal(r.get("refusal_b"), r.get("refusal_p_b")),
            "orders": (orders := [_order(r.get("order1"), 1, ga, gb), _order(r.get("order2"), 2, gb, ga)]),
            "position_note": _position_note(orders)}


def _position_note(orders: list[dict]) -> str | None:
    """Why a pair whose LMRA named the same response position in both orders (A and A: Response 1
    both times) reads as it does: those answers contradict each other on content — a position
    preference — so the combiners keep little of them (fresh-user finding, s45: "judge: order 1 A,
    order 2 A" beside "q_N 1.0000" read as a certain "no stereotype"); None otherwise."""
    choices = [o.get("choice") for o in orders if o.get("asked")]
    if len(choices) != 2 or choices[0] != choices[1] or choices[0] not in ("A", "B"):
        return None
    where = "Response 1" if choices[0] == "A" else "Response 2"
    return (f"the LMRA named {where} in both orders: the same position whichever group's response stood there — a "
            "position preference, which says nothing of the content. Under 'min' only the probability both orders "
            "left on the same outcome remains (often C, 'no stereotype', renormalised to 1; with none left the pair "
            "is invalid); under 'mean' the two orders cancel to h ≈ 0.")


def _size(p: dict) -> int:
    """Characters of text a pair adds to the section (prompt, its excerpt, responses, raw answers)."""
    texts = sum(len(p[k]["text"] or "") for k in ("prompt", "response_a", "response_b"))
    return texts + len(p["prompt_excerpt"] or "") + sum(len(t) for o in p["orders"] for t in o.get("raw_texts") or [])


def top_tasks(per_task: pd.DataFrame, n_tasks: int) -> pd.DataFrame:
    """The ``n_tasks`` rows of each comparison with the highest net rating.

    Args:
        per_task: ``RunFolder.per_task`` (``comparison, domain, task, net_rating, ci_low`` …).
        n_tasks: tasks per comparison (≥ 0).

    Returns:
        Those rows, by comparison, then net rating descending (ties: higher CI lower bound,
        then task name). Tasks without a net rating (no valid pair) are never chosen.
    """
    if per_task.empty or n_tasks <= 0:
        return per_task.iloc[0:0]
    df = per_task[pd.to_numeric(per_task["net_rating"], errors="coerce").notna()].copy()
    df["_h"] = pd.to_numeric(df["net_rating"], errors="coerce")
    df["_lo"] = pd.to_numeric(df["ci_low"], errors="coerce").fillna(-math.inf) if "ci_low" in df else -math.inf
    df = df.sort_values(["comparison", "_h", "_lo", "task"], ascending=[True, False, False, True], kind="mergesort")
    return df.groupby("comparison", sort=True).head(n_tasks).drop(columns=["_h", "_lo"])


def sorted_pairs(ratings: pd.DataFrame) -> pd.DataFrame:
    """One task's pairs, most stereotyped first: ``h`` descending, pairs without ``h`` last,
    ties by ``pair_id``."""
    df = ratings.copy()
    df["_h"] = pd.to_numeric(df["h"], errors="coerce") if "h" in df else math.nan
    return df.sort_values(["_h", "pair_id"], ascending=[False, True], na_position="last",
                          kind="mergesort").drop(columns=["_h"])


#: :func:`sorted_pairs`' order in SQL (a large run's shown pairs are picked by DuckDB; NaN tested
#: by :func:`lmra.pairstore.sql_isnan`: ``isnan`` is false on every row of a Parquet column)
_SQL_ORDER = "CASE WHEN h IS NULL OR (CAST(h AS VARCHAR) IN ('nan', '-nan')) THEN 1 ELSE 0 END, h DESC, pair_id"


def _n_pairs(rows: pd.DataFrame) -> int:
    """Pairs of a task: the rows, or the count DuckDB gave when it kept only the shown ones."""
    return int(rows["_n_in_group"].iloc[0]) if "_n_in_group" in rows and len(rows) else len(rows)


def task_ratings(ratings: pd.DataFrame, comparison: str, domain: Any, task: str) -> pd.DataFrame:
    """The ``ratings.jsonl`` rows of one (comparison, domain, task) of ``per_task.csv``."""
    if ratings.empty:
        return ratings
    mask = (ratings["comparison"] == comparison) & (ratings["task"] == task)
    if domain is not None and "domain" in ratings:
        mask &= ratings["domain"].astype(str) == str(domain)
    return ratings[mask]


def transcripts_context(run: RunFolder, n_tasks: int | None = None) -> dict:
    """The report's *Transcripts* section as plain values for the template.

    Args:
        run: a finished run folder.
        n_tasks: tasks per comparison to show (0 = none); default the run config's
            ``[report] transcripts`` (:data:`DEFAULT_TASKS` when absent).

    Returns:
        ``{"n_tasks", "omitted": None | "redacted" | "off", "limits": {...},
        "prompts_stored": bool, "truncated_total": bool, "comparisons": [{"comparison",
        "group_a", "group_b", "tasks": [{"domain", "task", "net_rating", "ci_low", "ci_high",
        "n_pairs", "pairs": [...], "n_more"}]}]}``. A pair has ``pair_id, status, h, q_F, q_R,
        q_N, method, prompt, response_a, response_b`` (texts as :func:`clip` dicts),
        ``refusal_a/b`` and ``orders`` (two dicts: ``order, first, second, probs {A,B,C},
        mass, choice, raw_texts, method, forward, reverse`` …). For a redacted run nothing is
        read from ``responses.jsonl`` and ``comparisons`` is empty.

    Raises:
        LmraInputError: a run-folder JSONL file has a malformed line (naming it).
    """
    n = configured_tasks(run) if n_tasks is None else int(n_tasks)
    ctx: dict[str, Any] = {"n_tasks": n, "omitted": None, "comparisons": [], "prompts_stored": False,
                           "truncated_total": False,
                           "limits": {"pairs": MAX_PAIRS_PER_TASK, "chars": MAX_CHARS_PER_TEXT,
                                      "total_chars": MAX_TOTAL_CHARS}}
    if is_redacted(run):
        return ctx | {"omitted": "redacted"}
    if n <= 0:
        return ctx | {"omitted": "off"}
    chosen = top_tasks(run.per_task, n)
    if chosen.empty:
        return ctx
    # the tasks shown, at most n in a comparison (fresh-user finding: "the 5 task(s)" of an audit of 3)
    ctx["n_shown"] = int(chosen.groupby("comparison").size().max())
    # only the chosen tasks' pairs, and only the shown pairs' responses and prompts, are read
    # (lmra.pairstore: DuckDB filters ratings.parquet and the JSON Lines files)
    from lmra.pairstore import jsonl_rows_where, read_pairs_where

    ratings = read_pairs_where(run.pairs_path, ["comparison", "task"],
                               {(c, t) for c, t in zip(chosen["comparison"], chosen["task"])},
                               top=(["comparison", "domain", "task"], _SQL_ORDER, MAX_PAIRS_PER_TASK))
    sorted_rows = {(comp, i): sorted_pairs(task_ratings(ratings, comp, t.get("domain"), t["task"]))
                   for comp, rows in chosen.groupby("comparison", sort=True)
                   for i, t in enumerate(rows.to_dict(orient="records"))}
    shown_ids = {str(p) for mine in sorted_rows.values() for p in mine.head(MAX_PAIRS_PER_TASK)["prompt_id"]}
    import duckdb

    try:
        resp = {(r.get("prompt_id"), r.get("comparison"), r.get("group"), r.get("sample")): r
                for r in jsonl_rows_where(run.verified("responses.jsonl"), "prompt_id", shown_ids)}
        prompt_rows = jsonl_rows_where(run.verified("prompts.jsonl"), "id", shown_ids)
    except duckdb.OutOfMemoryException as exc:  # (break-it finding: 8-MB answers ended `lmra report` in a traceback)
        return ctx | {"omitted": "too_large", "why": " ".join(str(exc).split())[:300]}
    prompts = {str(p.get("id")): p.get("text") for p in prompt_rows}
    stored = run.path / "prompts.jsonl"
    ctx["prompts_stored"] = bool(prompt_rows) or (not shown_ids and stored.is_file() and stored.stat().st_size > 0)
    budget = MAX_TOTAL_CHARS
    for comp, rows in chosen.groupby("comparison", sort=True):
        first = rows.iloc[0]
        block = {"comparison": comp, "group_a": first.get("group_a"), "group_b": first.get("group_b"), "tasks": []}
        for i, t in enumerate(rows.to_dict(orient="records")):
            mine = sorted_rows[(comp, i)]
            pairs = []
            for r in mine.head(MAX_PAIRS_PER_TASK).to_dict(orient="records"):
                p = _pair(r, resp, prompts)
                if _size(p) > budget:
                    ctx["truncated_total"] = True
                    break
                budget -= _size(p)
                pairs.append(p)
            block["tasks"].append({"domain": t.get("domain"), "task": t["task"],
                                   "net_rating": finite(t.get("net_rating")), "ci_low": finite(t.get("ci_low")),
                                   "ci_high": finite(t.get("ci_high")), "n_pairs": _n_pairs(mine), "pairs": pairs,
                                   "n_more": _n_pairs(mine) - len(pairs)})
        ctx["comparisons"].append(block)
    return ctx
