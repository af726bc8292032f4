"""Environment switches read strictly (break-it finding: LMRA_REPORT_PROCESS=false still forked the
report process; LMRA_LLAMA_EXTRA_BUFFERS=true counted as unset)."""

import pytest

from lmra.envflags import env_switch
from lmra.errors import LmraInputError


@pytest.mark.parametrize("value, expected", [("0", False), ("false", False), (" No ", False), ("OFF", False),
                                             ("1", True), ("true", True), ("yes", True), ("On", True),
                                             ("", None), ("  ", None)])
def test_on_off_and_unset(monkeypatch, value, expected):
    monkeypatch.setenv("LMRA_TEST_SWITCH", value)
    assert env_switch("LMRA_TEST_SWITCH") is expected


def test_unset_and_anything_else(monkeypatch):
    monkeypatch.delenv("LMRA_TEST_SWITCH", raising=False)
    assert env_switch("LMRA_TEST_SWITCH") is None
    monkeypatch.setenv("LMRA_TEST_SWITCH", "nope")
    with pytest.raises(LmraInputError, match="LMRA_TEST_SWITCH='nope' is neither on"):
        env_switch("LMRA_TEST_SWITCH")


def test_the_report_process_and_the_extra_buffers_follow_the_words(monkeypatch):
    from lmra.providers._llama_cpu import use_extra_buffers
    from lmra.report import worker

    monkeypatch.setenv("LMRA_REPORT_PROCESS", "false")
    assert not worker.forking_allowed()
    monkeypatch.setenv("LMRA_REPORT_PROCESS", "maybe")
    with pytest.raises(LmraInputError, match="LMRA_REPORT_PROCESS"):
        worker.forking_allowed()
    monkeypatch.setenv("LMRA_LLAMA_EXTRA_BUFFERS", "true")
    assert use_extra_buffers("/nonexistent") is True
    monkeypatch.setenv("LMRA_LLAMA_EXTRA_BUFFERS", "off")
    assert use_extra_buffers("/nonexistent") is False


def test_a_bad_switch_is_an_input_error_of_the_command(tmp_path, capsys, monkeypatch):
    from pathlib import Path

    from lmra.cli import main

    monkeypatch.setenv("LMRA_REPORT_PROCESS", "maybe")
    smoke = Path(__file__).resolve().parents[1] / "examples" / "smoke.toml"
    cfg = tmp_path / "c.toml"
    cfg.write_text(f'output_dir = "{(tmp_path / "out").as_posix()}"\n' + smoke.read_text())
    assert main(["audit", "--config", str(cfg), "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert "LMRA_REPORT_PROCESS" in err and "Traceback" not in err
    assert not (tmp_path / "out").exists()


def test_a_bad_llama_switch_is_not_blamed_on_the_config(tmp_path, capsys, monkeypatch):
    """Review finding: it read "smoke.toml, line 6: field 'target.LMRA_LLAMA_EXTRA_BUFFERS'"."""
    from pathlib import Path

    from lmra.cli import main

    from lmra.providers import llamacpp
    from lmra.providers._llama_cpu import use_extra_buffers

    monkeypatch.setenv("LMRA_LLAMA_EXTRA_BUFFERS", "maybe")

    def shared(cfg):  # the setting is read when a model loads; a model loaded by an earlier test is reused,
        use_extra_buffers("/nonexistent")  # so read it here as a first load would
        raise AssertionError("not reached")

    monkeypatch.setattr(llamacpp.LlamaCppProvider, "shared", staticmethod(shared))
    smoke = Path(__file__).resolve().parents[1] / "examples" / "smoke.toml"
    assert main(["audit", "--config", str(smoke), "--no-progress", "--output-dir", str(tmp_path / "out")]) == 2
    err = " ".join(capsys.readouterr().err.split())
    assert "field 'LMRA_LLAMA_EXTRA_BUFFERS'" in err and "smoke.toml" not in err and "target." not in err
    assert not (tmp_path / "out").exists()
