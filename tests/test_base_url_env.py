"""The SDKs' own endpoint variables (``OPENAI_BASE_URL``, ``ANTHROPIC_BASE_URL``) are honoured by
the SDKs when a config gives no ``base_url``; lmra records the endpoint they point at as the run's
``base_url`` — in the manifest, the call cache's keys and the comparability checks — and refuses
a value ``base_url`` may not hold. Fresh-user finding (s34): ``OPENAI_BASE_URL`` redirected
``--target openai:MODEL`` to another server while the manifest said ``base_url: ""``, so a
staging and a production endpoint shared cached answers and read as one chatbot. A real local
server (tests/faultserver.py)."""

from __future__ import annotations

import json
import re

import pytest

from faultserver import FaultServer, audit_config
from lmra.config import ModelConfig
from lmra.errors import LmraInputError
from lmra.providers.anthropic import AnthropicProvider
from lmra.providers.base import ChatRequest, Message, request_key
from lmra.providers.openai import OpenAIProvider


def test_an_audit_sent_by_openai_base_url_records_that_endpoint(tmp_path, monkeypatch, capsys):
    from lmra.cli import main

    with FaultServer() as srv:
        path = audit_config(tmp_path / "a.toml", srv.url, tmp_path / "c.sqlite", tmp_path / "out",
                            tasks=["write a story"], per_task=2, key_env={"target": "OPENAI_API_KEY",
                                                                        "judge": "OPENAI_API_KEY"})
        text = path.read_text()
        path.write_text(re.sub(r'base_url = ".*"\n', "", text))  # no base_url in the config
        monkeypatch.setenv("OPENAI_BASE_URL", srv.url)
        monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
        assert main(["audit", "--config", str(path), "--no-progress", "--allow-unvalidated-judge"]) == 0
        assert srv.requests > 0  # the variable's server answered
    (run,) = [p for p in (tmp_path / "out").iterdir() if (p / "manifest.json").is_file()]
    manifest = json.loads((run / "manifest.json").read_text())
    assert manifest["target"]["base_url"] == manifest["judge"]["base_url"] == srv.url
    # the plan line says where the calls go (fresh-user finding: only "Target: openai, LMRA: openai")
    out = " ".join(capsys.readouterr().out.split())
    assert f"Target: openai:fake at {srv.url}, LMRA: openai:fake at {srv.url};" in out


def test_the_variable_changes_the_cache_key_and_a_bad_value_is_named(monkeypatch):
    cfg = ModelConfig(provider="openai", model="m")
    req = ChatRequest(messages=[Message(role="user", content="hi")], max_tokens=4)
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    default = OpenAIProvider(cfg)
    assert default.base_url == ""  # the SDK's default endpoint: the keys earlier versions wrote
    monkeypatch.setenv("OPENAI_BASE_URL", "http://127.0.0.1:9/v1")
    staged = OpenAIProvider(cfg)
    assert staged.base_url == "http://127.0.0.1:9/v1" and str(staged.client.base_url).startswith(staged.base_url)
    assert request_key(staged.name, staged.base_url, staged.model_id, req) != request_key(
        default.name, default.base_url, default.model_id, req)
    # the config's base_url wins over the variable, as in the SDK
    assert OpenAIProvider(ModelConfig(provider="openai", model="m", base_url="http://127.0.0.1:8/v1")).base_url \
        == "http://127.0.0.1:8/v1"
    for bad in ("http://\uff4cocalhost/v1", "ftp://127.0.0.1/v1", "http://u:S3CRET@127.0.0.1/v1"):
        monkeypatch.setenv("OPENAI_BASE_URL", bad)
        with pytest.raises(LmraInputError) as info:
            OpenAIProvider(cfg)
        assert "OPENAI_BASE_URL" in info.value.reason and "S3CRET" not in str(info.value)
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-test")
    monkeypatch.setenv("ANTHROPIC_BASE_URL", "http://127.0.0.1:7")
    assert AnthropicProvider(ModelConfig(provider="anthropic", model="c")).base_url == "http://127.0.0.1:7"


def test_a_blank_variable_is_an_input_error_and_a_keyless_server_needs_base_url_in_the_config(monkeypatch):
    """Break-it findings (s34): a set but blank OPENAI_BASE_URL (an unset CI secret) made the SDK
    call '' — "unreachable", blaming a base_url the config did not have. ``api_key_required =
    false`` needs the config's base_url, whatever the environment says: a config valid in one shell
    only (the variable set) broke ``lmra merge`` of its run folders in another (round 3)."""
    from lmra.config import parse_config

    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    for blank in ("", "   "):
        monkeypatch.setenv("OPENAI_BASE_URL", blank)
        with pytest.raises(LmraInputError) as info:
            OpenAIProvider(ModelConfig(provider="openai", model="m"))
        assert "OPENAI_BASE_URL is set but blank" in info.value.reason
    keyless = {"target": {"provider": "openai", "model": "m", "api_key_required": False}}
    for env in (None, "http://127.0.0.1:9/v1"):
        if env is None:
            monkeypatch.delenv("OPENAI_BASE_URL")
        else:
            monkeypatch.setenv("OPENAI_BASE_URL", env)
        with pytest.raises(LmraInputError, match="needs base_url in the config"):
            parse_config(keyless)


def test_a_bad_variable_names_no_line_of_the_config(tmp_path, monkeypatch, capsys):
    """Break-it finding (s34, round 3): "cfg.toml, line 11: field 'target.base_url': environment
    variable OPENAI_BASE_URL is set but blank" — the config has no base_url; line 11 is [target]."""
    from lmra.cli import main

    cfg = tmp_path / "c.toml"
    cfg.write_text('name = "x"\n\n[target]\nprovider = "openai"\nmodel = "m"\n', encoding="utf-8")
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    for value in ("", "ftp://127.0.0.1/v1"):
        monkeypatch.setenv("OPENAI_BASE_URL", value)
        assert main(["validate", str(cfg)]) == 2
        err = " ".join(capsys.readouterr().err.split())
        assert "environment variable OPENAI_BASE_URL" in err and "line" not in err and "target.base_url" not in err
