"""The ``openai`` provider against a real local OpenAI-compatible server:
llama-cpp-python's server on 127.0.0.1 serving the embedded model."""

import asyncio
import socket
import subprocess
import sys
import time
import urllib.request

import pytest

from lmra.config import JudgeConfig, ModelConfig
from lmra.judge.options import ask_options
from lmra.providers.base import ChatRequest, Message
from lmra.providers.llamacpp import embedded_model_path
from lmra.providers.openai import OpenAIProvider


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def llama_server(tmp_path_factory):
    port = _free_port()
    log = (tmp_path_factory.mktemp("llama-server") / "server.log").open("w")
    proc = subprocess.Popen(
        [sys.executable, "-m", "lmra.providers.llama_server", "--model", str(embedded_model_path()), "--host", "127.0.0.1",
         "--port", str(port), "--n_ctx", "2048", "--logits_all", "true", "--chat_format", "gemma",
         "--model_alias", "gemma-3-270m"],
        stdout=log, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}/v1"
    deadline = time.time() + 120
    while time.time() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"llama-cpp server exited; see {log.name}")
        try:
            urllib.request.urlopen(f"{url}/models", timeout=2)
            break
        except OSError:
            time.sleep(0.5)
    else:
        proc.kill()
        raise RuntimeError("llama-cpp server did not start in 120 s")
    yield url
    log.close()
    proc.terminate()
    try:
        proc.wait(10)
    except subprocess.TimeoutExpired:
        proc.kill()


def test_generation_through_sdk(llama_server):
    prov = OpenAIProvider(ModelConfig(provider="openai", model="gemma-3-270m", base_url=llama_server, api_key_required=False))

    async def go():
        req = ChatRequest(messages=[Message(role="user", content="Write one sentence about the sea.")],
                          temperature=0.0, max_tokens=24, seed=1)
        res = await prov.complete(req)
        await prov.aclose()
        return res

    res = asyncio.run(go())
    assert res.provider == "openai" and res.usage.completion_tokens > 0 and res.usage.prompt_tokens > 0
    assert isinstance(res.text, str) and res.finish_reason in {"stop", "length"}


def test_option_probabilities_from_top_logprobs(llama_server):
    prov = OpenAIProvider(ModelConfig(provider="openai", model="gemma-3-270m", base_url=llama_server, api_key_required=False))
    msgs = [Message(role="user", content="Which letter comes first in the alphabet? Options: A, B or C. "
                                         "Answer with a single letter.")]

    async def go():
        raw = await prov.complete(ChatRequest(messages=msgs, temperature=0.0, max_tokens=1, options=("A", "B", "C"),
                                              top_logprobs=5))
        op = await ask_options(prov, msgs, ("A", "B", "C"), JudgeConfig(provider="openai", model="x",
                                                                         base_url=llama_server, api_key_required=False))
        await prov.aclose()
        return raw, op

    raw, op = asyncio.run(go())
    assert raw.option_probs is not None and set(raw.option_probs) == {"A", "B", "C"}
    mass = sum(raw.option_probs.values())
    assert 0.0 <= mass <= 1.0 + 1e-9
    assert op.method == "logprobs" and op.mass == pytest.approx(min(mass, 1.0))
    if op.probs is not None:
        assert sum(op.probs.values()) == pytest.approx(1.0)


def test_audit_end_to_end_against_local_server(tmp_path, llama_server):
    from lmra import Audit
    from lmra.config import AuditConfig

    cfg = AuditConfig.model_validate({
        "name": "openai-local", "tasks": ["write a story"], "prompts_per_task": 1,
        "output_dir": str(tmp_path), "cache": str(tmp_path / "c.sqlite"),
        "filter": {"enabled": False}, "refusal": {"enabled": False}, "judge_check": {"per_kind": 1},
        "target": {"provider": "openai", "model": "gemma-3-270m", "base_url": llama_server, "api_key_required": False, "max_tokens": 24},
        "judge": {"provider": "openai", "model": "gemma-3-270m", "base_url": llama_server, "api_key_required": False},
    })
    res = Audit(cfg).run()
    # 2 responses + the stereotype question in 2 orders + the judge check (up to 5 canaries × 2
    # orders: it stops once it can no longer pass), all through the SDK and the server
    n_canaries = res.summary["judge_status"]["n_canaries"]
    assert 1 <= n_canaries <= 5 and res.manifest["calls"]["fresh"] == 4 + 2 * n_canaries
    assert res.manifest["calls"]["failed"] == 0
    assert res.summary["judge_status"]["checked"] and len(res.summary["judge_status"]["reasons"]) >= 1
    assert set(res.ratings["method"]) <= {"logprobs", "text"}
    assert len(res.per_task) == 1
