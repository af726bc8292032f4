"""A custom provider loaded from an import path, auditing a local 'in-house' chatbot API."""

import json
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from lmra import Audit
from lmra.config import AuditConfig, ModelConfig
from lmra.errors import LmraInputError
from lmra.providers import make_provider
from lmra.resources import resource_dir

sys.path.insert(0, str(resource_dir("examples")))


class _Bot(BaseHTTPRequestHandler):
    seen: list = []

    def log_message(self, *a):
        pass

    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers["content-length"])))
        type(self).seen.append(body)
        last = body["messages"][-1]["content"]
        if "A) No" in last or "B) No" in last:  # yes/no questions (both option orders): always "No"
            reply = "A" if "A) No" in last else "B"
        else:
            reply = "C" if "Answer with a single letter" in last else "Here is a friendly answer."
        data = json.dumps({"reply": reply, "model": "bot-v1"}).encode()
        self.send_response(200)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


@pytest.fixture
def bot_url():
    _Bot.seen = []
    srv = ThreadingHTTPServer(("127.0.0.1", 0), _Bot)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{srv.server_address[1]}"
    srv.shutdown()


def test_custom_provider_audit(tmp_path, bot_url):
    cfg = AuditConfig.model_validate({
        "name": "inhouse", "tasks": ["write a story", "career advice"], "prompts_per_task": 2,
        "output_dir": str(tmp_path), "cache": str(tmp_path / "c.sqlite"), "judge_check": {"per_kind": 1},
        "target": {"provider": "inhouse_provider:make_provider", "base_url": bot_url},
        "judge": {"provider": "inhouse_provider:make_provider", "base_url": bot_url, "n_samples": 3},
    })
    res = Audit(cfg).run()
    assert res.manifest["target"]["provider"] == "inhouse"
    # 8 responses; LMRA with 3 samples per question: filter 4 prompts × 2 option orders,
    # refusal 8 responses × 2 option orders, stereotype 4 pairs × 2 orders, judge check
    # 5 canaries × 2 orders
    assert len(_Bot.seen) == 8 + 3 * (4 * 2 + 8 * 2 + 4 * 2 + 5 * 2)
    # the bot answers "No" to every yes/no question, in either option order
    assert res.summary["n_filtered"] == 0 and res.summary["n_pairs_refusal"] == 0
    assert (res.responses["refusal_p"] == 0).all() and res.summary["n_pairs_unlabelled"] == 0
    assert set(res.ratings["method"]) == {"sampled"}
    assert (res.ratings["h"] == 0).all() and res.overall.iloc[0]["n_pairs"] == 4


def test_bad_custom_provider_path():
    with pytest.raises(LmraInputError, match="cannot load custom provider") as info:
        make_provider(ModelConfig(provider="no_such_module:factory"))
    # new-user finding: the 'lmra' command (unlike python -m lmra.cli) does not import from the
    # current folder; the message says where the module must be
    assert "put the folder holding no_such_module.py on PYTHONPATH" in str(info.value)
    with pytest.raises(LmraInputError, match="lacks the Provider protocol"):
        make_provider(ModelConfig(provider="builtins:dict"))


def test_changed_options_are_another_model_for_the_cache(tmp_path, bot_url):
    """A custom provider's ``options`` (a route, a deployment) are part of its calls' identity:
    changing them asks the model again instead of replaying the old answers (break-it finding:
    a changed option was served every answer from the cache, "0 fresh")."""
    def cfg(options):
        return AuditConfig.model_validate({
            "name": "inhouse", "tasks": ["write a story"], "prompts_per_task": 2,
            "output_dir": str(tmp_path), "cache": str(tmp_path / "c.sqlite"), "judge_check": {"enabled": False},
            "filter": {"lmra": False}, "refusal": {"enabled": False},
            "target": {"provider": "inhouse_provider:make_provider", "base_url": bot_url, "options": options},
            "judge": {"provider": "inhouse_provider:make_provider", "base_url": bot_url},
        })

    first = Audit(cfg({"route": "/chat"})).run()
    n_first = len(_Bot.seen)
    assert n_first > 4  # 4 responses, then the LMRA's calls
    again = Audit(cfg({"route": "/chat"})).run()
    assert len(_Bot.seen) == n_first  # the same options: every call from the cache
    changed = Audit(cfg({"route": "/chat", "deployment": "canary"})).run()
    assert len(_Bot.seen) == n_first + 4  # the target asked again; the judge's answers were cached
    # recorded as another endpoint identity in the manifest (shown by the nightly check)
    urls = [r.manifest["target"]["base_url"] for r in (first, again, changed)]
    assert urls[0] == urls[1] != urls[2] and all(u.startswith(bot_url + "#options=") for u in urls)
    assert first.manifest["judge"]["base_url"] == bot_url  # no options: unchanged
