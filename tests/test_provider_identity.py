"""A custom provider's identity and methods are checked when it is loaded (break-it findings:
``self.base_url = cfg.base_url`` with no base_url in the config — the docs' own snippet — gave
None, every cache write failed on ``NOT NULL`` and was reported as a full disk, and the answers
logged meanwhile were dropped unseen at the next open; a plain ``def complete`` passed the
load-time check and every call then failed)."""

from __future__ import annotations

import sqlite3

import pytest

from conftest import NAME_TO_GROUP
from doubles import ScriptedJudge, ScriptedTarget
from lmra import Audit
from lmra.cache import CallCache
from lmra.config import AuditConfig, ModelConfig
from lmra.errors import LmraInputError
from lmra.providers import make_provider
from lmra.providers.base import ChatRequest, ChatResult, Message


class NoBaseUrl(ScriptedTarget):
    def __init__(self, cfg: ModelConfig):
        super().__init__(NAME_TO_GROUP, lambda g, rng: f"An answer {rng.random():.6f}.")
        self.base_url = cfg.base_url  # None: the config sets no base_url


def make_no_base_url(cfg):
    return NoBaseUrl(cfg)


def make_judge(cfg):
    return ScriptedJudge(lambda r1, r2: {"C": 1.0})


class _Bare:
    name, model_id, base_url, supports_logprobs = "bare", "m", "", True

    def __init__(self, cfg=None):
        pass

    async def complete(self, request):
        return ChatResult(text="x")

    async def aclose(self):
        return None


class SyncComplete(_Bare):
    def complete(self, request):  # not async: its result cannot be awaited
        return ChatResult(text="x")


class NumberName(_Bare):
    name = 12345


class EmptyModel(_Bare):
    model_id = ""


class IntBaseUrl(_Bare):
    base_url = 8080


class StrLogprobs(_Bare):
    supports_logprobs = "yes"


BROKEN = {"NumberName": "name must be a non-empty string",
          "EmptyModel": "model_id must be a non-empty string", "IntBaseUrl": "base_url must be a string or None",
          "StrLogprobs": "supports_logprobs must be True or False"}


@pytest.mark.parametrize("cls", sorted(BROKEN))
def test_a_custom_provider_with_a_broken_identity_is_refused_at_load(cls):
    with pytest.raises(LmraInputError) as err:
        make_provider(ModelConfig(provider=f"test_provider_identity:{cls}"), field="target")
    assert BROKEN[cls] in err.value.reason and err.value.field == "target.provider"


def test_a_plain_def_complete_is_awaited_only_when_it_returns_an_awaitable():
    """A plain ``def complete`` that answers at once (it holds the event loop meanwhile) or one
    that returns a coroutine (delegating to an async client) both work."""
    import asyncio

    class Delegating(_Bare):
        def complete(self, request):
            return _Bare.complete(self, request)  # a coroutine

    import test_provider_identity as me
    me.Delegating = Delegating
    try:
        for cls in ("SyncComplete", "Delegating"):
            p = make_provider(ModelConfig(provider=f"test_provider_identity:{cls}"))
            assert asyncio.run(p.complete(ChatRequest(messages=[Message(role="user", content="hi")]))).text == "x"
            asyncio.run(p.aclose())
    finally:
        del me.Delegating


def test_a_decorated_async_complete_is_accepted():
    import functools

    def logged(fn):
        @functools.wraps(fn)
        async def wrapper(*a, **k):
            return await fn(*a, **k)
        return wrapper

    class Decorated(_Bare):
        complete = logged(_Bare.complete)

    import test_provider_identity as me
    me.Decorated = Decorated
    try:
        assert make_provider(ModelConfig(provider="test_provider_identity:Decorated")).name == "bare"
    finally:
        del me.Decorated


def test_a_custom_provider_without_base_url_is_cached_under_an_empty_one(tmp_path, sim_inputs):
    names, prompts = sim_inputs(6)
    cfg = AuditConfig.model_validate(dict(
        name="no-base-url", prompts=str(prompts), names=str(names), prompts_per_task=0,
        output_dir=str(tmp_path / "reports"), cache=str(tmp_path / "cache.sqlite"), judge_check={"enabled": False},
        filter={"lmra": False}, target={"provider": "test_provider_identity:make_no_base_url"},
        judge={"provider": "test_provider_identity:make_judge"}))
    res = Audit(cfg).run()
    assert res.summary["run_status"] == "complete" and res.summary["n_pairs_failed"] == 0
    with sqlite3.connect(tmp_path / "cache.sqlite") as db:
        rows = db.execute("SELECT base_url, count(*) FROM calls WHERE provider = 'scripted-target' GROUP BY 1").fetchall()
    assert rows == [("", 12)]  # 6 prompts × 2 names, all written
    assert not list(tmp_path.glob("cache.sqlite-answers-*"))  # no log left behind


def test_unreadable_lines_of_a_dead_writers_log_are_kept_aside_and_said(tmp_path):
    path = tmp_path / "c.sqlite"
    CallCache(path).close()
    dead = tmp_path / "c.sqlite-answers-1-dead.log"
    dead.write_bytes(b'["k1","p","u","m","{}","{\\"text\\":\\"y\\"}",2.0]\n'
                     b'["k2","p",null,"m","{}","{\\"text\\":\\"z\\"}",2.0]\n'  # not a calls row
                     b'["k3","p","u"')  # cut short by the kill: expected, not counted
    said = []
    cache = CallCache(path, on_write_error=said.append)
    assert cache.recovered == 1 and cache.get("k1").text == "y"
    kept = tmp_path / "c.sqlite-answers-1-dead.log.unreadable"
    assert not dead.exists() and kept.exists() and b'"k2"' in kept.read_bytes()
    assert "1 line(s)" in said[0] and str(kept) in said[0] and "stored 1 answered call(s)" in said[1]
    cache.close()
    said.clear()
    CallCache(path, on_write_error=said.append).close()  # kept aside: not read (nor said) again
    assert said == [] and kept.exists()


def test_a_provider_object_without_base_url_passed_in_python_is_cached_under_an_empty_one(tmp_path, sim_inputs):
    """Review finding: the load-time fix covered providers named in the config only; an object
    passed to ``Audit(cfg, target=...)`` with base_url None still failed every cache write."""
    names, prompts = sim_inputs(4)
    cfg = AuditConfig.model_validate(dict(
        name="no-base-url-py", prompts=str(prompts), names=str(names), prompts_per_task=0,
        output_dir=str(tmp_path / "reports"), cache=str(tmp_path / "cache.sqlite"), judge_check={"enabled": False},
        filter={"lmra": False}, cache_write_retry_s=0))
    target = NoBaseUrl(ModelConfig())
    assert target.base_url is None
    res = Audit(cfg, target=target, judge=make_judge(None)).run()
    assert res.summary["run_status"] == "complete"
    with sqlite3.connect(tmp_path / "cache.sqlite") as db:
        assert db.execute("SELECT count(*) FROM calls WHERE base_url = '' AND provider = 'scripted-target'"
                          ).fetchone()[0] == 8
    again = Audit(cfg, target=NoBaseUrl(ModelConfig()), judge=make_judge(None)).run()
    assert again.manifest["calls"]["fresh"] == 0  # the same keys: every call cached


async def make_async(cfg=None):  # an async def factory: returns a coroutine, not a provider
    return _Bare()


def test_an_async_factory_is_named_as_such_without_a_never_awaited_warning():
    import warnings

    import gc

    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        with pytest.raises(LmraInputError) as err:
            make_provider(ModelConfig(provider="test_provider_identity:make_async"), field="judge")
        gc.collect()
    assert not [w for w in seen if "never awaited" in str(w.message)]
    assert "is an async def: it must return the provider itself" in err.value.reason
    assert err.value.field == "judge.provider"
