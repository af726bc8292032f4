"""A redacted run keeps no prompt text in its error messages (break-it finding: a provider
error quoting the user's message — "backend rejected prompt: …" — reached responses.jsonl,
ratings.parquet, manifest.json's call errors, the exports and the warehouse of a run audited
with ``redact = true``). The failures are still counted by kind; unredacted runs keep the
messages as the providers wrote them."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from conftest import NAME_TO_GROUP
from doubles import ScriptedJudge, ScriptedTarget
from lmra import Audit
from lmra.config import AuditConfig
from lmra.providers.base import ProviderError
from lmra.redact import WITHHELD, error_text, redacted_calls, redacted_message

SECRET = "SECRETTOKEN"


class EchoingTarget(ScriptedTarget):
    """Fails prompts p0 and p6 with an error that quotes the message."""

    async def complete(self, request):
        text = request.messages[-1].content
        if f"{SECRET}0." in text or f"{SECRET}6." in text:
            raise ProviderError(f"backend rejected prompt: {text}", kind="http_400")
        return await super().complete(request)


class EchoingJudge(ScriptedJudge):
    """Fails the questions holding ``echo_on`` and ``SECRET`` (prompts p3 and p9: the target answers
    them) with an error quoting the question."""

    def __init__(self, echo_on: str):
        super().__init__(lambda r1, r2: {"C": 1.0})
        self.echo_on = echo_on

    async def complete(self, request):
        text = request.messages[-1].content
        if self.echo_on in text and SECRET in text:
            raise RuntimeError(f"judge could not read: {text}")  # not a ProviderError: counted as kind error
        return await super().complete(request)


def _prompts(tmp_path):
    rows = [{"id": f"p{i}", "text": f"Question {i}" + (f" about {SECRET}{i}" if i % 3 == 0 else "") + ".",
             "domain": "d", "task": "career advice" if i % 2 else "write a story"} for i in range(12)]
    path = tmp_path / "prompts.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def _run(tmp_path, sim_inputs, redact: bool, judge_echo: str):
    names, _ = sim_inputs(2)
    cfg = AuditConfig.model_validate(dict(
        name="redact", prompts=str(_prompts(tmp_path)), names=str(names), prompts_per_task=0, redact=redact,
        output_dir=str(tmp_path / f"out-{redact}"), cache=str(tmp_path / f"cache-{redact}-{judge_echo}.sqlite"),
        judge_check={"enabled": False}, filter={"lmra": False}, quality={"enabled": True, "criteria": ["clarity"]}))
    # the target echoes in its answers too: responses quote the user (the response text is redacted anyway)
    target = EchoingTarget(NAME_TO_GROUP, lambda g, rng: "An answer.")
    return Audit(cfg, target=target, judge=EchoingJudge(judge_echo)).run()


def _files_holding(run_dir, needle: str) -> list[str]:
    return sorted(str(p.relative_to(run_dir)) for p in run_dir.rglob("*") if p.is_file()
                  and needle.encode() in p.read_bytes())


@pytest.mark.parametrize("judge_echo", ["", "clarity"])  # "": every judge question about a secret prompt fails
def test_a_redacted_run_writes_no_prompt_text_from_error_messages(tmp_path, sim_inputs, judge_echo):
    res = _run(tmp_path, sim_inputs, True, judge_echo)
    assert _files_holding(res.run_dir, SECRET) == []
    calls = res.manifest["calls"]
    assert calls["failed"] > 0 and calls["errors"] and all(WITHHELD in e for e in calls["errors"])
    by = calls["by_model"]
    assert by["scripted-target:scripted"]["failed_by_kind"] == {"http_400": 4}  # p0, p6 × 2 groups: still counted
    assert by["scripted-judge:scripted"]["failed_by_kind"] == {"error": 2 if judge_echo else 4}  # quality ratings of p3, p9, or their 4 refusal labels
    failed = res.ratings[res.ratings["failed"].astype(bool)]
    # the judge's failures: refusal labels of p3 and p9 (every question fails), or their quality ratings
    assert set(failed["prompt_id"]) == ({"p0", "p6"} if judge_echo else {"p0", "p3", "p6", "p9"})
    assert all(e.startswith(("chatbot: ProviderError (http_400): ", "refusal label: ProviderError (error): "))
               and e.endswith(WITHHELD) for e in failed["error"])
    quality = res.quality_ratings
    q_errors = quality.loc[quality["failed"].astype(bool), "error"].tolist() if "error" in quality else []
    assert len(q_errors) == (2 if judge_echo else 0) and all(e.endswith(WITHHELD) for e in q_errors)
    # the exports are made from the run folder: nothing to leak either
    out = tmp_path / "exports"
    for fmt in ("csv", "json"):
        subprocess.run([sys.executable, "-m", "lmra.cli", "export", str(res.run_dir), "--format", fmt, "--out", str(out)],
                       check=True, capture_output=True)
    assert _files_holding(out, SECRET) == []


def test_an_unredacted_run_keeps_the_providers_messages(tmp_path, sim_inputs):
    res = _run(tmp_path, sim_inputs, False, "clarity")
    assert any(SECRET in e for e in res.manifest["calls"]["errors"])
    failed = res.ratings[res.ratings["failed"].astype(bool)]
    assert any(SECRET in e for e in failed["error"])
    quality = res.quality_ratings
    assert any(SECRET in str(e) for e in quality.loc[quality["failed"].astype(bool), "error"])


def test_the_redacted_forms():
    assert error_text(ProviderError("rejected: my text", kind="timeout"), True) == f"ProviderError (timeout): {WITHHELD}"
    assert error_text(ValueError("my text"), True) == f"ValueError: {WITHHELD}"
    assert error_text(ValueError("my text"), False) == "my text"
    assert redacted_message("ProviderError: rejected: my text") == f"ProviderError: {WITHHELD}"
    assert redacted_message("my text, no type") == WITHHELD
    calls = {"failed": 2, "errors": ["ProviderError: a", "x"], "by_model": {"m": {"errors": ["RuntimeError: b"]}}}
    assert redacted_calls(calls) == {"failed": 2, "errors": [f"ProviderError: {WITHHELD}", WITHHELD],
                                     "by_model": {"m": {"errors": [f"RuntimeError: {WITHHELD}"]}}}
    assert calls["errors"] == ["ProviderError: a", "x"]  # the run's own counts are not changed


def test_a_redacted_audit_says_the_call_cache_keeps_the_texts(tmp_path, sim_inputs, capsys):
    """Fresh-user finding: a ``--redact`` run said nothing of ``reports/cache.sqlite``, which keeps every
    prompt in full and sits in the folder a user copies to a dashboard host. It is said once, naming it."""
    from conftest import custom_audit_config
    from lmra.cli import main

    names, prompts = sim_inputs(4)
    cfg = custom_audit_config(tmp_path, names, prompts, target="test_classify_all_failed:make_target",
                              judge="test_classify_all_failed:make_judge", name="red")
    assert main(["audit", "--config", str(cfg), "--no-progress", "--no-report", "--redact"]) in (0, 1, 5)
    out = " ".join(capsys.readouterr().out.split())
    cache = next(line for line in cfg.read_text().splitlines() if line.startswith("cache")).split('"')[1]
    assert f"note: --redact keeps prompt text out of the run folder, not out of the call cache {cache}" in out, out
    assert main(["audit", "--config", str(cfg), "--no-progress", "--no-report"]) in (0, 1, 5)
    assert "--redact keeps" not in capsys.readouterr().out
