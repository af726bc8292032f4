"""A judge-check waiver holds only for the LMRA it was written for (``[judge_check]
waiver_judge``): new-user finding — a copy of the demo config, or ``--judge``, kept the demo's
waiver ("the embedded 270M base model …") for another LMRA that failed validation, exit 0."""

from __future__ import annotations

import pytest

from test_gates import FLAT, write_config
from lmra.cli import main
from lmra.config import load_config
from lmra.resources import resolve_resource


def test_the_demo_configs_waive_the_embedded_model_only():
    cfg = load_config(resolve_resource("examples/default.toml", "examples"))
    assert cfg.judge.provider == "llamacpp" and cfg.judge.model is None
    assert cfg.judge_waiver().startswith("demo on the embedded 270M base model")
    other = cfg.model_copy(update={"judge": cfg.judge.model_copy(update={"provider": "openai", "model": "gpt-x"})})
    assert other.judge_waiver() == ""  # a real LMRA: the failure is gated
    gguf = cfg.model_copy(update={"judge": cfg.judge.model_copy(update={"model": "/models/other.gguf"})})
    assert gguf.judge_waiver() == ""  # another GGUF through the same provider: gated too
    named = cfg.model_copy(update={"judge_check": cfg.judge_check.model_copy(update={"waiver_judge": "openai:gpt-x"})})
    assert named.model_copy(update={"judge": other.judge}).judge_waiver().startswith("demo")
    assert cfg.model_copy(update={"judge_check": cfg.judge_check.model_copy(update={"gate": True})}).judge_waiver() == ""


@pytest.mark.parametrize("waiver_judge, status", [("llamacpp", 5), ("test_gates:make_judge", 0), ("", 0)])
def test_a_waiver_for_another_lmra_leaves_the_failure_gated(tmp_path, capsys, waiver_judge, status):
    cfg = write_config(tmp_path, name="waived", rates=FLAT, judge_check=True, n_prompts=8)
    text = cfg.read_text().replace("per_kind = 3\n", "per_kind = 3\ngate = false\nwaiver = \"the demo's judge\"\n"
                                   + (f'waiver_judge = "{waiver_judge}"\n' if waiver_judge else ""))
    cfg.write_text(text)
    assert main(["audit", "--config", str(cfg), "--no-progress", "--no-report"]) == status
    out = capsys.readouterr().out
    if status == 5:
        assert "the failure is not waived" in out and "Waived (the demo's judge" not in out
    else:
        assert "the failure is waived" in out
