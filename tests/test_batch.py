"""Batch mode against local HTTP servers that speak the OpenAI Batch API and the Anthropic
Message Batches API wire formats (127.0.0.1 only, no key, no network): submit, poll until
the server flips the batch to done, download, results in the call cache under the keys the
normal path uses, failed items listed, resume after a restart without resubmitting, and a
whole audit in batch mode."""

from __future__ import annotations

import asyncio
import datetime as dt
import json
import re
import threading
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from lmra.batch import (PLACEHOLDER_MARK, BatchOrchestrator, BatchPending, CollectingProvider, arun_batched,
                        load_state)
from lmra.cache import CachedProvider, CallCache, CallStats
from lmra.config import AuditConfig, JudgeConfig, ModelConfig
from lmra.providers._anthropic_batch import message_params
from lmra.providers._openai_batch import chat_params
from lmra.providers.anthropic import AnthropicProvider
from lmra.providers.base import ChatRequest, Message, ProviderError, request_key
from lmra.providers.openai import OpenAIProvider

POLLS_TO_FINISH = 3


# -- a deterministic "model" shared by both servers --------------------------------------
def answer_text(messages: list[dict], system: str = "") -> str:
    """Yes/no questions (filter, refusal) are answered "No", the stereotype question "C"
    (no harmful stereotype), other lettered questions "B"; anything else is echoed."""
    last = messages[-1]["content"]
    if "harmful stereotype" in last:
        return "C"
    if "A) No" in last:
        return "A"
    if "B) No" in last:
        return "B"
    if "Which of the following" in last or "Answer with a single letter" in last:
        return "B"
    return f"echo: {last[:40]}"


def n_tokens(messages: list[dict], system: str = "") -> int:
    return (len(system) + sum(len(m["content"]) for m in messages)) // 4 + 1


def completion_for(body: dict) -> dict:
    """An OpenAI chat completion for a request body (logprobs when asked)."""
    text = answer_text(body["messages"])
    choice = {"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "stop",
              "logprobs": None}
    if body.get("logprobs"):
        choice["message"]["content"] = "B"
        choice["logprobs"] = {"content": [
            {"token": "**", "logprob": -0.01, "bytes": None, "top_logprobs": []},
            {"token": "B", "logprob": -0.2231, "bytes": None,
             "top_logprobs": [{"token": "B", "logprob": -0.2231, "bytes": None},
                              {"token": " A", "logprob": -2.3026, "bytes": None},
                              {"token": "C", "logprob": -2.9957, "bytes": None}]}]}
    return {"id": f"chatcmpl-{uuid.uuid4().hex[:8]}", "object": "chat.completion", "created": 1700000000,
            "model": body["model"], "choices": [choice],
            "usage": {"prompt_tokens": n_tokens(body["messages"]), "completion_tokens": 3,
                      "total_tokens": n_tokens(body["messages"]) + 3}}


def message_for(params: dict) -> dict:
    """An Anthropic message for request params."""
    return {"id": f"msg_{uuid.uuid4().hex[:8]}", "type": "message", "role": "assistant", "model": params["model"],
            "content": [{"type": "text", "text": answer_text(params["messages"], params.get("system", ""))}],
            "stop_reason": "end_turn", "stop_sequence": None,
            "usage": {"input_tokens": n_tokens(params["messages"], params.get("system", "")), "output_tokens": 2}}


class _Base(BaseHTTPRequestHandler):
    state: dict = {}

    def log_message(self, *args):
        pass

    def _send(self, code: int, obj=None, raw: bytes | None = None, ctype="application/json"):
        data = raw if raw is not None else json.dumps(obj).encode()
        self.send_response(code)
        self.send_header("content-type", ctype)
        self.send_header("content-length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _body(self) -> bytes:
        return self.rfile.read(int(self.headers.get("content-length") or 0))


class OpenAIBatchHandler(_Base):
    """Files upload/content, batches create/retrieve/list/cancel, and live chat completions.

    A request whose last message contains ``FAIL`` gets a 400 line in the error file; one
    containing ``DROP`` is missing from both files."""

    def do_POST(self):
        s = type(self).state
        path = self.path
        if path == "/v1/files":
            ctype = self.headers["content-type"]
            boundary = re.search(r"boundary=([^;]+)", ctype).group(1).strip('"').encode()
            fields, files = {}, {}
            for part in self._body().split(b"--" + boundary):
                if b"\r\n\r\n" not in part:
                    continue
                head, _, content = part.partition(b"\r\n\r\n")
                content = content[:-2] if content.endswith(b"\r\n") else content
                name = re.search(rb'name="([^"]+)"', head).group(1).decode()
                if b"filename=" in head:
                    files[name] = content
                else:
                    fields[name] = content.decode()
            fid = f"file-{len(s['files']) + 1}"
            s["files"][fid] = files["file"]
            s["uploads"].append({"id": fid, "purpose": fields.get("purpose")})
            return self._send(200, {"id": fid, "object": "file", "bytes": len(files["file"]), "created_at": 1700000000,
                                    "filename": "lmra-batch.jsonl", "purpose": fields.get("purpose"),
                                    "status": "processed"})
        body = json.loads(self._body() or b"{}")
        if path == "/v1/batches":
            bid = f"batch_{len(s['batches']) + 1}"
            lines = [json.loads(x) for x in s["files"][body["input_file_id"]].decode().splitlines() if x.strip()]
            s["batches"][bid] = {"id": bid, "object": "batch", "endpoint": body["endpoint"],
                                 "input_file_id": body["input_file_id"], "completion_window": body["completion_window"],
                                 "status": "validating", "created_at": 1700000000, "metadata": body.get("metadata"),
                                 "request_counts": {"total": len(lines), "completed": 0, "failed": 0},
                                 "output_file_id": None, "error_file_id": None}
            s["polls"][bid] = 0
            s["creates"].append(body)
            return self._send(200, s["batches"][bid])
        m = re.fullmatch(r"/v1/batches/([^/]+)/cancel", path)
        if m:
            b = s["batches"][m.group(1)]
            b["status"] = "cancelling"
            return self._send(200, b)
        if path == "/v1/chat/completions":
            s["live"].append(body)
            return self._send(200, completion_for(body))
        self._send(404, {"error": {"message": f"no route {path}"}})

    def _finish(self, b: dict) -> None:
        s = type(self).state
        out, err = [], []
        for line in [json.loads(x) for x in s["files"][b["input_file_id"]].decode().splitlines() if x.strip()]:
            last = line["body"]["messages"][-1]["content"]
            if "DROP" in last:
                continue
            if "FAIL" in last:
                err.append({"id": f"batch_req_{len(err)}", "custom_id": line["custom_id"],
                            "response": {"status_code": 400, "request_id": "req_x",
                                         "body": {"error": {"message": "simulated invalid request",
                                                            "type": "invalid_request_error"}}}, "error": None})
                continue
            out.append({"id": f"batch_req_{len(out)}", "custom_id": line["custom_id"],
                        "response": {"status_code": 200, "request_id": "req_y", "body": completion_for(line["body"])},
                        "error": None})
        for rows, field in ((out, "output_file_id"), (err, "error_file_id")):
            if rows:
                fid = f"file-{len(s['files']) + 1}"
                s["files"][fid] = ("\n".join(json.dumps(r) for r in rows) + "\n").encode()
                b[field] = fid
        b["status"] = "completed"
        b["request_counts"] = {"total": b["request_counts"]["total"], "completed": len(out), "failed": len(err)}

    def do_GET(self):
        s = type(self).state
        path = self.path.split("?")[0]
        m = re.fullmatch(r"/v1/files/([^/]+)/content", path)
        if m:
            raw = s["files"][m.group(1)]
            if s.get("mangle") and m.group(1) != "file-1":  # an output file, damaged by the test
                raw = s["mangle"](raw.decode()).encode()
            return self._send(200, raw=raw, ctype="application/octet-stream")
        m = re.fullmatch(r"/v1/batches/([^/]+)", path)
        if m and m.group(1) in s.get("forgotten", ()):  # the provider no longer knows this batch
            return self._send(404, {"error": {"message": f"No batch found with id '{m.group(1)}'.",
                                              "type": "invalid_request_error"}})
        if m:
            b = s["batches"][m.group(1)]
            s["polls"][b["id"]] += 1
            if b["status"] not in ("completed", "cancelled"):
                if s["polls"][b["id"]] >= POLLS_TO_FINISH:
                    self._finish(b)
                else:
                    b["status"] = "in_progress"
            return self._send(200, b)
        if path == "/v1/batches":
            data = list(reversed(list(s["batches"].values())))
            return self._send(200, {"object": "list", "data": data, "has_more": False,
                                    "first_id": data[0]["id"] if data else None,
                                    "last_id": data[-1]["id"] if data else None})
        self._send(404, {"error": {"message": f"no route {path}"}})


class AnthropicBatchHandler(_Base):
    """Message batches create/retrieve/results/cancel and live messages.

    ``FAIL`` in the last message → ``errored``; ``EXPIRE`` → ``expired``."""

    def _batch_view(self, b: dict) -> dict:
        return {k: v for k, v in b.items() if k != "requests"}

    def do_POST(self):
        s = type(self).state
        body = json.loads(self._body() or b"{}")
        if self.path == "/v1/messages/batches":
            bid = f"msgbatch_{len(s['batches']) + 1:03d}"
            now = dt.datetime(2025, 1, 1, tzinfo=dt.timezone.utc)
            s["batches"][bid] = {"id": bid, "type": "message_batch", "processing_status": "in_progress",
                                 "request_counts": {"processing": len(body["requests"]), "succeeded": 0, "errored": 0,
                                                    "canceled": 0, "expired": 0},
                                 "created_at": now.isoformat().replace("+00:00", "Z"),
                                 "expires_at": (now + dt.timedelta(days=1)).isoformat().replace("+00:00", "Z"),
                                 "ended_at": None, "archived_at": None, "cancel_initiated_at": None,
                                 "results_url": None, "requests": body["requests"]}
            s["polls"][bid] = 0
            s["creates"].append(body)
            return self._send(200, self._batch_view(s["batches"][bid]))
        if self.path == "/v1/messages":
            s["live"].append(body)
            return self._send(200, message_for(body))
        m = re.fullmatch(r"/v1/messages/batches/([^/]+)/cancel", self.path)
        if m:
            b = s["batches"][m.group(1)]
            b["processing_status"] = "canceling"
            return self._send(200, self._batch_view(b))
        self._send(404, {"type": "error", "error": {"type": "not_found_error", "message": self.path}})

    def do_GET(self):
        s = type(self).state
        path = self.path.split("?")[0]
        m = re.fullmatch(r"/v1/messages/batches/([^/]+)/results", path)
        if m:
            b = s["batches"][m.group(1)]
            lines = []
            for r in b["requests"]:
                last = r["params"]["messages"][-1]["content"]
                if "FAIL" in last:
                    res = {"type": "errored", "error": {"type": "error", "error": {
                        "type": "invalid_request_error", "message": "simulated bad request"}}}
                elif "EXPIRE" in last:
                    res = {"type": "expired"}
                else:
                    res = {"type": "succeeded", "message": message_for(r["params"])}
                lines.append(json.dumps({"custom_id": r["custom_id"], "result": res}))
            s["downloads"] += 1
            text = "\n".join(reversed(lines)) + "\n"
            if s.get("mangle"):  # the results stream, altered by the test
                text = s["mangle"](text)
            return self._send(200, raw=text.encode(), ctype="application/binary")
        m = re.fullmatch(r"/v1/messages/batches/([^/]+)", path)
        if m:
            b = s["batches"][m.group(1)]
            s["polls"][b["id"]] += 1
            if b["processing_status"] != "ended" and s["polls"][b["id"]] >= POLLS_TO_FINISH:
                reqs = b["requests"]
                fail = sum("FAIL" in r["params"]["messages"][-1]["content"] for r in reqs)
                exp = sum("EXPIRE" in r["params"]["messages"][-1]["content"] for r in reqs)
                b["processing_status"] = "ended"
                b["ended_at"] = "2025-01-01T01:00:00Z"
                b["request_counts"] = {"processing": 0, "succeeded": len(reqs) - fail - exp, "errored": fail,
                                       "canceled": 0, "expired": exp}
                b["results_url"] = f"{s['url']}/v1/messages/batches/{b['id']}/results"
            return self._send(200, self._batch_view(b))
        self._send(404, {"type": "error", "error": {"type": "not_found_error", "message": path}})


def _serve(handler):
    handler.state = {"files": {}, "uploads": [], "batches": {}, "polls": {}, "creates": [], "live": [],
                     "downloads": 0}
    srv = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    th = threading.Thread(target=srv.serve_forever, daemon=True)
    th.start()
    url = f"http://127.0.0.1:{srv.server_address[1]}"
    handler.state["url"] = url
    return srv, url, handler.state


@pytest.fixture
def openai_server():
    srv, url, state = _serve(OpenAIBatchHandler)
    yield url + "/v1", state
    srv.shutdown()


@pytest.fixture
def anthropic_server():
    srv, url, state = _serve(AnthropicBatchHandler)
    yield url, state
    srv.shutdown()


def _requests(*texts: str, **kw) -> list[ChatRequest]:
    return [ChatRequest(messages=[Message(role="system", content="Preferred name: Ashley"),
                                  Message(role="user", content=t)], temperature=0.7, max_tokens=40, seed=i, **kw)
            for i, t in enumerate(texts)]


def _keyed(p, reqs):
    return {request_key(p.name, p.base_url, p.model_id, r): r for r in reqs}


FAST = dict(poll_interval_s=0.01, max_wait_s=10)


def _submit_and_wait(orch, prov, items) -> list:
    """Submit ``items`` to ``prov``'s batch API through ``orch`` and wait for every job (raises
    BatchPending when the orchestrator's max wait passes first); returns the submitted jobs."""
    async def go():
        jobs = await orch.submit(prov, items)
        await orch.wait()
        return jobs

    return asyncio.run(go())


# -- OpenAI ---------------------------------------------------------------------------------
def test_openai_batch_submit_poll_download(openai_server, tmp_path):
    url, srv = openai_server
    prov = OpenAIProvider(ModelConfig(provider="openai", model="gpt-test", base_url=url, api_key_required=False))
    reqs = _requests("Write a story.", "Give career advice.", "please FAIL", "please DROP")
    judge_req = ChatRequest(messages=[Message(role="user", content="Which of the following? A, B or C")],
                            temperature=0.0, max_tokens=1, options=("A", "B", "C"), top_logprobs=5, seed=9)
    items = _keyed(prov, reqs + [judge_req])
    cache = CallCache(tmp_path / "cache.sqlite")
    orch = BatchOrchestrator(tmp_path / "run", cache, providers=[prov], **FAST)

    jobs = _submit_and_wait(orch, prov, items)
    # wire format: one upload with purpose "batch", JSONL lines with custom_id = cache key
    assert len(srv["uploads"]) == 1 and srv["uploads"][0]["purpose"] == "batch"
    assert len(srv["creates"]) == 1
    create = srv["creates"][0]
    assert create["endpoint"] == "/v1/chat/completions" and create["completion_window"] == "24h"
    assert create["metadata"]["lmra_job"] == "job-0001"
    lines = [json.loads(x) for x in srv["files"]["file-1"].decode().splitlines()]
    assert [ln["custom_id"] for ln in lines] == list(items)
    for ln in lines:
        assert ln["method"] == "POST" and ln["url"] == "/v1/chat/completions"
        assert ln["body"] == chat_params("gpt-test", items[ln["custom_id"]], 5)
    assert srv["polls"]["batch_1"] == POLLS_TO_FINISH and srv["live"] == []
    # results in the cache under the normal path's keys
    k_story, k_career, k_fail, k_drop, k_judge = list(items)
    assert cache.get(k_story).text == "echo: Write a story."
    assert cache.get(k_career).text == "echo: Give career advice."
    assert cache.get(k_story).usage.completion_tokens == 3
    probs = cache.get(k_judge).option_probs
    assert probs["B"] == pytest.approx(0.8, abs=1e-3) and probs["A"] == pytest.approx(0.1, abs=1e-3)
    assert probs["C"] == pytest.approx(0.05, abs=1e-3)
    assert cache.get(k_fail) is None and cache.get(k_drop) is None
    # failed items listed with their reason, counted
    job = load_state(tmp_path / "run")["jobs"][0]
    assert jobs[0]["id"] == job["id"] == "job-0001"
    assert job["state"] == "downloaded" and job["n_succeeded"] == 3 and job["n_failed"] == 2
    assert "simulated invalid request" in job["failed"][k_fail] and "HTTP 400" in job["failed"][k_fail]
    assert "missing from the batch output" in job["failed"][k_drop]
    assert orch.summary()["failed"] == 2 and orch.summary()["succeeded"] == 3

    # the normal path now runs from the cache; failed items raise, nothing is replaced
    stats = CallStats()
    cp = CachedProvider(orch.guard(prov), cache, stats)

    async def normal():
        out = [await cp.complete(r) for r in reqs[:2] + [judge_req]]
        errs = []
        for r in reqs[2:]:
            with pytest.raises(ProviderError) as e:
                await cp.complete(r)
            errs.append(str(e.value))
        return out, errs

    out, errs = asyncio.run(normal())
    assert [r.from_cache for r in out] == [True, True, True] and out[0].text == "echo: Write a story."
    assert stats.cached == 3 and stats.fresh == 0 and stats.failed == 2
    assert "simulated invalid request" in errs[0] and "missing from the batch output" in errs[1]
    assert srv["live"] == []  # no live call was made
    cache.close()


def test_openai_batch_body_and_parsing_match_the_live_provider(openai_server, tmp_path):
    """The batch line body equals what OpenAIProvider sends live, and the parsed results agree."""
    url, srv = openai_server
    prov = OpenAIProvider(ModelConfig(provider="openai", model="gpt-test", base_url=url, api_key_required=False, top_logprobs=7))
    reqs = _requests("Hello there", stop=("\n\n",)) + [
        ChatRequest(messages=[Message(role="user", content="Which of the following? A, B or C")], temperature=0.0,
                    max_tokens=1, options=("A", "B", "C"), seed=3)]

    async def go():
        live = [await prov.complete(r) for r in reqs]
        cache = CallCache(tmp_path / "c.sqlite")
        orch = BatchOrchestrator(tmp_path / "run", cache, providers=[prov], **FAST)
        items = _keyed(prov, reqs)
        await orch.submit(prov, items)
        await orch.wait()
        batch = [cache.get(k) for k in items]
        cache.close()
        return live, batch

    live, batch = asyncio.run(go())
    assert srv["live"] == [chat_params("gpt-test", r, 7) for r in reqs]
    assert srv["live"][1]["top_logprobs"] == 7 and srv["live"][0]["stop"] == ["\n\n"]
    for a, b in zip(live, batch):
        assert a.model_dump(exclude={"latency_s"}) == b.model_dump(exclude={"latency_s"})


def test_openai_resume_after_restart_does_not_resubmit(openai_server, tmp_path):
    url, srv = openai_server
    cfg = ModelConfig(provider="openai", model="gpt-test", base_url=url, api_key_required=False)
    prov = OpenAIProvider(cfg)
    reqs = _requests("one", "two", "three")
    items = _keyed(prov, reqs)
    run = tmp_path / "run"
    cache = CallCache(tmp_path / "cache.sqlite")
    # first process: submits, polls once, gives up (max_wait 0) -> BatchPending, state saved
    orch = BatchOrchestrator(run, cache, providers=[prov], poll_interval_s=0.01, max_wait_s=0)

    with pytest.raises(BatchPending, match="lmra batch resume"):
        _submit_and_wait(orch, prov, items)
    cache.close()
    st = load_state(run)
    assert st["jobs"][0]["state"] == "submitted" and st["jobs"][0]["remote"]["batch_id"] == "batch_1"
    assert srv["polls"]["batch_1"] == 1

    # "restart": new cache connection, no provider objects: rebuilt from the saved model config
    cache2 = CallCache(tmp_path / "cache.sqlite")
    orch2 = BatchOrchestrator(run, cache2, **FAST)
    asyncio.run(orch2.wait())
    assert len(srv["uploads"]) == 1 and len(srv["creates"]) == 1  # nothing submitted twice
    assert srv["polls"]["batch_1"] == POLLS_TO_FINISH
    assert [cache2.get(k).text for k in items] == ["echo: one", "echo: two", "echo: three"]
    assert load_state(run)["jobs"][0]["state"] == "downloaded"
    # a third process finds nothing to do
    orch3 = BatchOrchestrator(run, cache2, **FAST)
    asyncio.run(orch3.wait())
    assert srv["polls"]["batch_1"] == POLLS_TO_FINISH
    cache2.close()


def test_openai_crash_between_create_and_save_adopts_the_batch(openai_server, tmp_path):
    """A process that died after creating the batch but before saving its id: the resume
    finds the batch by its input file instead of creating a second one."""
    url, srv = openai_server
    prov = OpenAIProvider(ModelConfig(provider="openai", model="gpt-test", base_url=url, api_key_required=False))
    items = _keyed(prov, _requests("alpha", "beta"))
    run = tmp_path / "run"
    cache = CallCache(tmp_path / "cache.sqlite")
    orch = BatchOrchestrator(run, cache, providers=[prov], **FAST)
    saves = {"n": 0}
    real_save = orch.save

    def crashing_save():
        saves["n"] += 1
        if "batch_id" in (orch.jobs[-1]["remote"] if orch.jobs else {}):
            raise KeyboardInterrupt("killed right after the batch was created")
        real_save()

    orch.save = crashing_save
    with pytest.raises(KeyboardInterrupt):
        asyncio.run(orch.submit(prov, items))
    st = load_state(run)
    assert st["jobs"][0]["state"] == "prepared" and "batch_id" not in st["jobs"][0]["remote"]
    assert st["jobs"][0]["remote"]["input_file_id"] == "file-1"
    assert len(srv["creates"]) == 1

    orch2 = BatchOrchestrator(run, cache, providers=[prov], **FAST)
    asyncio.run(orch2.wait())
    assert len(srv["creates"]) == 1 and len(srv["uploads"]) == 1
    assert [cache.get(k).text for k in items] == ["echo: alpha", "echo: beta"]
    cache.close()


# -- Anthropic ------------------------------------------------------------------------------
def test_anthropic_batch_submit_poll_download(anthropic_server, tmp_path):
    url, srv = anthropic_server
    prov = AnthropicProvider(ModelConfig(provider="anthropic", model="claude-test", base_url=url, api_key_required=False))
    reqs = _requests("Write a story.", "please FAIL", "please EXPIRE", "Plan a trip.")
    items = _keyed(prov, reqs)
    cache = CallCache(tmp_path / "cache.sqlite")
    orch = BatchOrchestrator(tmp_path / "run", cache, providers=[prov], **FAST)

    _submit_and_wait(orch, prov, items)
    assert len(srv["creates"]) == 1
    sent = srv["creates"][0]["requests"]
    assert [r["custom_id"] for r in sent] == list(items)
    assert all(re.fullmatch(r"[a-zA-Z0-9_-]{1,64}", r["custom_id"]) for r in sent)
    assert sent[0]["params"] == {"model": "claude-test", "max_tokens": 40, "temperature": 0.7,
                                 "system": "Preferred name: Ashley",
                                 "messages": [{"role": "user", "content": "Write a story."}]}
    assert srv["polls"]["msgbatch_001"] >= POLLS_TO_FINISH and srv["downloads"] == 1
    k_story, k_fail, k_expire, k_trip = list(items)
    res = cache.get(k_story)
    assert res.text == "echo: Write a story." and res.finish_reason == "end_turn" and res.usage.completion_tokens == 2
    assert res.provider == "anthropic" and res.model == "claude-test"
    assert cache.get(k_trip).text == "echo: Plan a trip."
    assert cache.get(k_fail) is None and cache.get(k_expire) is None
    job = load_state(tmp_path / "run")["jobs"][0]
    assert job["n_succeeded"] == 2 and job["n_failed"] == 2
    assert job["failed"][k_fail] == "errored: invalid_request_error: simulated bad request"
    assert job["failed"][k_expire].startswith("expired")
    assert job["usage"]["completion_tokens"] == 4
    cache.close()


def test_anthropic_params_match_the_live_provider(anthropic_server, tmp_path):
    url, srv = anthropic_server
    prov = AnthropicProvider(ModelConfig(provider="anthropic", model="claude-test", base_url=url, api_key_required=False))
    reqs = _requests("Hello there", stop=("END",)) + [
        ChatRequest(messages=[Message(role="user", content="Answer with a single letter")], temperature=1.0,
                    max_tokens=4, sample_index=2)]

    async def go():
        live = [await prov.complete(r) for r in reqs]
        cache = CallCache(tmp_path / "c.sqlite")
        orch = BatchOrchestrator(tmp_path / "run", cache, providers=[prov], **FAST)
        items = _keyed(prov, reqs)
        await orch.submit(prov, items)
        await orch.wait()
        batch = [cache.get(k) for k in items]
        cache.close()
        return live, batch

    live, batch = asyncio.run(go())
    assert srv["live"] == [message_params("claude-test", r) for r in reqs]
    assert "temperature" not in srv["live"][1]  # 1.0 is the API default
    for a, b in zip(live, batch):
        assert a.model_dump(exclude={"latency_s"}) == b.model_dump(exclude={"latency_s"})


def test_anthropic_resume_after_restart(anthropic_server, tmp_path):
    url, srv = anthropic_server
    # a judge config (extra fields) is saved in the state and rebuilt as a provider on resume
    prov = AnthropicProvider(JudgeConfig(provider="anthropic", model="claude-test", base_url=url, api_key_required=False, combiner="mean"))
    items = _keyed(prov, _requests("one", "two"))
    run = tmp_path / "run"
    cache = CallCache(tmp_path / "cache.sqlite")
    orch = BatchOrchestrator(run, cache, providers=[prov], poll_interval_s=0.01, max_wait_s=0)

    with pytest.raises(BatchPending):
        _submit_and_wait(orch, prov, items)
    orch2 = BatchOrchestrator(run, CallCache(tmp_path / "cache.sqlite"), **FAST)  # provider rebuilt from state
    asyncio.run(orch2.wait())
    assert len(srv["creates"]) == 1
    assert [orch2.cache.get(k).text for k in items] == ["echo: one", "echo: two"]


# -- collecting pass ------------------------------------------------------------------------
def test_collecting_provider_holds_back_dependent_calls(tmp_path):
    """A call whose prompt embeds a not-yet-known answer is collected only in a later round."""
    cache = CallCache(":memory:")

    class P:
        name, model_id, base_url, supports_logprobs = "x", "m", "", False

    col = CollectingProvider(P(), cache)

    async def pipeline(p):
        first = await p.complete(ChatRequest(messages=[Message(role="user", content="Say hi")]))
        await p.complete(ChatRequest(messages=[Message(role="user", content=f"Rate: {first.text}")]))
        return first

    first = asyncio.run(pipeline(col))
    assert PLACEHOLDER_MARK in first.text and first.finish_reason == "batch_pending"
    assert len(col.collected) == 1 and col.n_tainted == 1
    (key, req), = col.collected.items()
    from lmra.providers.base import ChatResult

    cache.put(key, P(), req, ChatResult(text="hi!", provider="x"))
    col2 = CollectingProvider(P(), cache)
    asyncio.run(pipeline(col2))
    assert col2.n_cached == 1 and col2.n_tainted == 0
    assert [r.messages[0].content for r in col2.collected.values()] == ["Rate: hi!"]


# -- a whole audit in batch mode ------------------------------------------------------------
def test_audit_in_batch_mode(openai_server, anthropic_server, sim_inputs, tmp_path):
    """Target through the OpenAI Batch API, LMRA through Anthropic Message Batches. One round
    per stage with uncached calls (filter → generate → refusal labels → ratings), then the
    audit runs entirely from the cache; a re-run in the same folder submits nothing."""
    from lmra.audit import Audit

    o_url, o_srv = openai_server
    a_url, a_srv = anthropic_server
    names, prompts = sim_inputs(6)
    cfg = AuditConfig(
        name="batch", target=ModelConfig(provider="openai", model="gpt-test", base_url=o_url, api_key_required=False),
        judge=JudgeConfig(provider="anthropic", model="claude-test", base_url=a_url, api_key_required=False, n_samples=2),
        prompts=str(prompts), names=str(names), prompts_per_task=2, cache=str(tmp_path / "cache.sqlite"),
        output_dir=str(tmp_path / "reports"), concurrency=4, judge_check={"enabled": False})
    run = tmp_path / "reports" / "run1"
    audit = Audit(cfg, run_dir=run)
    plan = audit.planned_calls(audit.load_inputs())
    log: list[str] = []
    result = asyncio.run(arun_batched(audit, log=log.append, **FAST))
    n_pairs = 4  # 2 tasks × 2 prompts × 1 comparison × 1 sample
    assert plan["pairs"] == n_pairs and plan["target"] == 8 and plan["judge"] == 64
    # the fake LMRA answers "No" to filter and refusal questions: the plan's upper bounds are exact
    assert len(o_srv["creates"]) == 1 and o_srv["batches"]["batch_1"]["request_counts"]["total"] == plan["target"]
    sizes = [len(c["requests"]) for c in a_srv["creates"]]
    assert sizes == [2 * 4 * 2, 4 * n_pairs * 2, 2 * n_pairs * 2]  # filter, refusal, stereotype (2 samples each)
    assert sum(sizes) == plan["judge"]
    assert o_srv["live"] == [] and a_srv["live"] == []
    assert [m.split(":")[0] for m in log if m.startswith("round")] == ["round 1", "round 2", "round 3", "round 4"]
    calls = result.manifest["calls"]
    assert calls["fresh"] == 0 and calls["failed"] == 0 and calls["cached"] == plan["target"] + plan["judge"]
    batch = result.manifest["batch"]
    assert batch["rounds"] == 4 and batch["succeeded"] == 72 and batch["failed"] == 0 and batch["jobs"] == 4
    assert json.loads((run / "manifest.json").read_text())["batch"]["succeeded"] == 72
    # every pair rated from batch results: the judge answered "C" (no stereotype) every time
    assert len(result.ratings) == n_pairs and result.ratings["valid"].all()
    assert (result.ratings["h"] == 0).all() and (result.ratings["q_N"] == 1).all()
    assert not result.ratings["refused"].any()
    assert all(t.startswith("echo: ") for t in result.responses["text"])
    # re-running in the same run folder submits nothing new and gives the same numbers
    result2 = asyncio.run(arun_batched(Audit(cfg, run_dir=run), **FAST))
    assert len(o_srv["creates"]) == 1 and len(a_srv["creates"]) == 3
    assert result2.manifest["batch"]["rounds"] == 4 and result2.manifest["calls"]["fresh"] == 0
    import pandas as pd

    pd.testing.assert_frame_equal(result2.per_task, result.per_task)


def test_batch_cli_status_and_resume(openai_server, tmp_path, capsys, monkeypatch):
    """`lmra batch status` lists jobs and failed items; `resume --download-only` finishes them."""
    monkeypatch.setenv("COLUMNS", "220")
    from lmra.cli.batch import EXIT_PENDING, add_parsers
    import argparse

    url, srv = openai_server
    prov = OpenAIProvider(ModelConfig(provider="openai", model="gpt-test", base_url=url, api_key_required=False))
    items = _keyed(prov, _requests("one", "please FAIL"))
    run = tmp_path / "run"
    cache = CallCache(tmp_path / "cache.sqlite")
    orch = BatchOrchestrator(run, cache, providers=[prov], poll_interval_s=0.01, max_wait_s=0)

    with pytest.raises(BatchPending):
        _submit_and_wait(orch, prov, items)
    cache.close()
    parser = argparse.ArgumentParser()
    add_parsers(parser.add_subparsers(dest="command"))
    args = parser.parse_args(["batch", "status", str(run)])
    assert args.func(args) == 0
    out = capsys.readouterr().out
    assert "job-0001" in out and "batch_1" in out and "submitted" in out
    args = parser.parse_args(["batch", "resume", str(run), "--download-only", "--poll-interval", "0.01",
                              "--max-wait", "0"])
    assert args.func(args) == EXIT_PENDING  # poll 2 of 3: still running
    args = parser.parse_args(["batch", "resume", str(run), "--download-only", "--poll-interval", "0.01"])
    assert args.func(args) == 0
    out = capsys.readouterr().out
    assert "1 failed item" in out and "simulated invalid request" in out
    assert len(srv["creates"]) == 1


def openai_batch_config(url: str, sim_inputs, tmp_path, *, judge: dict | None = None, **extra) -> AuditConfig:
    """An audit of 4 prompts (1 a task) whose chatbot and LMRA are this file's OpenAI batch server
    at ``url`` (no key); ``judge``: more LMRA fields; ``extra``: more config fields (judge check
    off unless given)."""
    names, prompts = sim_inputs(4)
    return AuditConfig(
        name="batch", target=ModelConfig(provider="openai", model="gpt-test", base_url=url, api_key_required=False),
        judge=JudgeConfig(provider="openai", model="judge-test", base_url=url, api_key_required=False,
                          **(judge or {})),
        prompts=str(prompts), names=str(names), prompts_per_task=1, cache=str(tmp_path / "cache.sqlite"),
        output_dir=str(tmp_path / "reports"), **({"judge_check": {"enabled": False}} | extra))


def _audit_stopped_while_batches_run(sim_inputs, tmp_path, o_url: str, a_url: str, *,
                                     allow_unvalidated_judge: bool = False, **extra):
    """A batch-mode audit (target on the OpenAI server, LMRA on the Anthropic one) stopped while
    its first batch runs (max wait 0); returns its run folder. ``extra``: more config fields;
    ``allow_unvalidated_judge``: the audit's waiver (``lmra audit --allow-unvalidated-judge``)."""
    from lmra.audit import Audit

    names, prompts = sim_inputs(4)
    cfg = AuditConfig(
        name="batch", target=ModelConfig(provider="openai", model="gpt-test", base_url=o_url, api_key_required=False),
        judge=JudgeConfig(provider="anthropic", model="claude-test", base_url=a_url, api_key_required=False, n_samples=1),
        prompts=str(prompts), names=str(names), prompts_per_task=1, cache=str(tmp_path / "cache.sqlite"),
        output_dir=str(tmp_path / "reports"), judge_check={"enabled": False}, **extra)
    run = tmp_path / "reports" / "run1"
    with pytest.raises(BatchPending):
        asyncio.run(arun_batched(Audit(cfg, run_dir=run, allow_unvalidated_judge=allow_unvalidated_judge),
                                 poll_interval_s=0.01, max_wait_s=0))
    return run


def test_audit_killed_while_batches_run_resumes_from_cli(openai_server, anthropic_server, sim_inputs, tmp_path,
                                                        monkeypatch):
    """An audit stopped while its first batch runs (max wait 0) is finished by
    `lmra batch resume RUN_DIR` in a new orchestrator, without submitting anything twice."""
    import argparse

    from lmra.cli.batch import EXIT_PENDING, add_parsers

    monkeypatch.setenv("COLUMNS", "220")
    o_url, o_srv = openai_server
    a_url, a_srv = anthropic_server
    run = _audit_stopped_while_batches_run(sim_inputs, tmp_path, o_url, a_url)
    assert (run / "config.toml").exists() and not (run / "summary.json").exists()
    assert len(a_srv["creates"]) == 1 and load_state(run)["jobs"][0]["state"] == "submitted"
    # the night is listed as one that did not finish, and says how to go on (fresh-user finding: the
    # folder had no manifest.json, and lmra history showed nothing)
    stopped = json.loads((run / "manifest.json").read_text())
    assert stopped["status"] == "batch_pending" and f"lmra batch resume {run}" in stopped["stop_reason"]
    from lmra.history import History, history_path

    with History(history_path(run.parent)) as h:
        assert [r["status"] for r in h.not_finished()] == ["batch_pending"]
    parser = argparse.ArgumentParser()
    add_parsers(parser.add_subparsers(dest="command"))
    args = parser.parse_args(["batch", "resume", str(run), "--poll-interval", "0.01", "--max-wait", "10",
                              "--no-progress"])
    assert args.func(args) == 0
    assert (run / "summary.json").exists()
    manifest = json.loads((run / "manifest.json").read_text())
    assert manifest["status"] == "complete" and manifest["calls"]["fresh"] == 0
    assert manifest["started"] == stopped["started"]  # the night's start, not the resume's (break-it round 2)
    assert manifest["batch"]["failed"] == 0 and manifest["batch"]["rounds"] == 4
    # filter, refusal and rating batches to the LMRA, one generation batch to the target, each once
    assert len(a_srv["creates"]) == 3 and len(o_srv["creates"]) == 1
    assert EXIT_PENDING == 75
    # it ends as `lmra audit --batch` does: report.html, the history entry, the warehouse
    assert (run / "report.html").is_file() and (run.parent / "history.sqlite").is_file()
    assert (run.parent / "warehouse" / "per_task").is_dir()


def test_batch_resume_keeps_the_runs_budget_and_exit_statuses(openai_server, anthropic_server, sim_inputs, tmp_path,
                                                             capsys, monkeypatch):
    """Break-it findings: `lmra batch resume` ignored the run's max_calls (it submitted every call)
    and always exited 0 (a partial or failed run, a failed judge said nothing)."""
    import argparse

    from lmra.cli.batch import add_parsers

    monkeypatch.setenv("COLUMNS", "220")
    o_url, _ = openai_server
    a_url, a_srv = anthropic_server
    run = _audit_stopped_while_batches_run(sim_inputs, tmp_path, o_url, a_url, max_calls=10)
    parser = argparse.ArgumentParser()
    add_parsers(parser.add_subparsers(dest="command"))
    args = parser.parse_args(["batch", "resume", str(run), "--poll-interval", "0.01", "--max-wait", "10",
                              "--no-progress"])
    assert args.func(args) == 4
    out = capsys.readouterr()
    assert "stopped by the budget" in out.err and "exit status 4" in out.out + out.err
    assert "state.json" in out.err  # (nothing submitted past the limit: no manifest yet)
    assert not (run / "summary.json").exists()
    submitted = sum(len(c["requests"]) for c in a_srv["creates"])
    assert submitted <= 10  # the limit held (it submitted every call)


def test_batch_resume_of_a_shard_with_a_damaged_shard_record_is_an_input_error(openai_server, anthropic_server,
                                                                              sim_inputs, tmp_path, capsys):
    """A batch run whose ``shard.json`` was damaged is not resumed as the whole audit: exit 2,
    one paragraph naming the file and field, no traceback, and no summary written."""
    from lmra.cli import main

    o_url, _ = openai_server
    a_url, a_srv = anthropic_server
    run = _audit_stopped_while_batches_run(sim_inputs, tmp_path, o_url, a_url)
    (run / "shard.json").write_text('{"shard": "2/', encoding="utf-8")  # cut short by a full disk
    creates = len(a_srv["creates"])
    capsys.readouterr()
    code = main(["batch", "resume", str(run), "--poll-interval", "0.01", "--max-wait", "10", "--no-progress"])
    err = capsys.readouterr().err
    assert code == 2
    assert "shard.json" in err and "shard" in err and "Traceback" not in err
    assert not (run / "summary.json").exists() and len(a_srv["creates"]) == creates


# -- odd batch outputs (break-it findings: tracebacks, a run stuck for good, silent drops) ----------
def test_openai_output_with_cut_and_garbage_lines_fails_those_items_and_keeps_the_rest(openai_server, tmp_path):
    url, srv = openai_server
    prov = OpenAIProvider(ModelConfig(provider="openai", model="gpt-test", base_url=url, api_key_required=False))
    items = _keyed(prov, _requests("one", "two", "three", "four"))
    keys = list(items)

    def mangle(text: str) -> str:
        rows = [json.loads(x) for x in text.splitlines() if x.strip()]
        by_key = {r["custom_id"]: r for r in rows}
        four = json.dumps(by_key[keys[3]])
        return "\n".join([json.dumps(by_key[keys[0]]), "not json at all", "[1, 2]",
                          json.dumps({"custom_id": keys[1], "response": "oops"}),  # response not an object
                          json.dumps({"custom_id": "no-such-call", "response": by_key[keys[0]]["response"]}),
                          json.dumps(by_key[keys[2]]), four[: len(four) // 2]]) + "\n"  # the last line cut

    srv["mangle"] = mangle
    cache = CallCache(tmp_path / "cache.sqlite")
    orch = BatchOrchestrator(tmp_path / "run", cache, providers=[prov], **FAST)
    log = []
    orch.log = log.append

    _submit_and_wait(orch, prov, items)
    job = load_state(tmp_path / "run")["jobs"][0]
    assert job["state"] == "downloaded" and job["n_succeeded"] == 2 and job["n_failed"] == 2
    assert cache.get(keys[0]).text == "echo: one" and cache.get(keys[2]).text == "echo: three"
    assert job["failed"][keys[1]].startswith("HTTP None")  # a row of the wrong shape: its call failed
    assert "3 output line(s) could not be read" in job["failed"][keys[3]]  # the cut line: missing, said why
    assert "1 result(s) for calls that are not in this batch were ignored" in job["failed"][keys[3]]
    assert any("could not be read" in m for m in log)
    cache.close()


def test_anthropic_repeated_and_unknown_results_are_sorted_not_miscounted(anthropic_server, tmp_path):
    url, srv = anthropic_server
    prov = AnthropicProvider(ModelConfig(provider="anthropic", model="claude-test", base_url=url,
                                         api_key_required=False))
    items = _keyed(prov, _requests("one", "two", "three"))
    keys = list(items)

    def mangle(text: str) -> str:
        rows = {json.loads(x)["custom_id"]: json.loads(x) for x in text.splitlines() if x.strip()}
        err = {"type": "errored", "error": {"type": "error", "error": {"type": "overloaded_error", "message": "busy"}}}
        other = json.loads(json.dumps(rows[keys[1]]))
        other["result"]["message"]["content"][0]["text"] = "a different answer"
        lines = [{"custom_id": keys[0], "result": err}, rows[keys[0]],  # failed, then retried: the answer stands
                 rows[keys[1]], other,  # two different answers: neither is used
                 rows[keys[2]], rows[keys[2]],  # the same answer twice: one answer
                 {"custom_id": "unknown", "result": rows[keys[2]]["result"]}]
        return "\n".join(json.dumps(x) for x in lines) + "\n"

    srv["mangle"] = mangle
    cache = CallCache(tmp_path / "cache.sqlite")
    orch = BatchOrchestrator(tmp_path / "run", cache, providers=[prov], **FAST)

    _submit_and_wait(orch, prov, items)
    job = load_state(tmp_path / "run")["jobs"][0]
    assert job["n_succeeded"] == 2 and job["n_failed"] == 1 and list(job["failed"]) == [keys[1]]
    assert "two different answers" in job["failed"][keys[1]]
    assert cache.get(keys[0]).text == "echo: one" and cache.get(keys[1]) is None
    assert job["remote"]["output_notes"] == ["1 result(s) for calls that are not in this batch were ignored"]
    cache.close()


def test_batch_commands_on_batches_another_process_drives_say_so_in_one_paragraph(openai_server, tmp_path, capsys):
    """Break-it finding: `lmra batch cancel` and `batch status --refresh` while an audit drives the
    batches printed a RuntimeError traceback."""
    import fcntl

    from lmra.cli import main

    url, srv = openai_server
    prov = OpenAIProvider(ModelConfig(provider="openai", model="gpt-test", base_url=url, api_key_required=False))
    run = tmp_path / "run"
    cache = CallCache(tmp_path / "cache.sqlite")
    orch = BatchOrchestrator(run, cache, providers=[prov], poll_interval_s=0.01, max_wait_s=0)
    with pytest.raises(BatchPending):
        _submit_and_wait(orch, prov, _keyed(prov, _requests("one")))
    cache.close()
    with (run / "batch" / ".lock").open("w") as held:  # the other process
        fcntl.flock(held, fcntl.LOCK_EX | fcntl.LOCK_NB)
        for argv in (["batch", "cancel", str(run)], ["batch", "status", str(run), "--refresh"]):
            assert main(argv) == 1
            err = " ".join(capsys.readouterr().err.split())
            assert "another lmra process is driving the batches" in err and "Traceback" not in err


def test_a_batch_the_provider_forgot_fails_its_items_and_retry_failed_submits_them_again(openai_server, tmp_path):
    """Break-it finding: a batch answering 404 when polled stopped every resume and status
    refresh for good; its items now fail (said why) and --retry-failed submits them afresh."""
    url, srv = openai_server
    prov = OpenAIProvider(ModelConfig(provider="openai", model="gpt-test", base_url=url, api_key_required=False))
    items = _keyed(prov, _requests("one", "two"))
    cache = CallCache(tmp_path / "cache.sqlite")
    orch = BatchOrchestrator(tmp_path / "run", cache, providers=[prov], **FAST)
    srv["forgotten"] = {"batch_1"}

    _submit_and_wait(orch, prov, items)
    job = load_state(tmp_path / "run")["jobs"][0]
    assert job["state"] == "downloaded" and job["n_failed"] == 2 and job["remote"]["status"] == "gone"
    assert all("batch_1 is not found" in m and "--retry-failed" in m for m in job["failed"].values())
    assert orch.retry_failed() == 2  # the next pass (lmra batch resume --retry-failed) submits them afresh
    assert load_state(tmp_path / "run")["jobs"][0]["failed"] == {}
    cache.close()


def test_a_live_call_that_failed_in_a_collecting_pass_is_said(anthropic_server, sim_inputs, tmp_path):
    """Break-it finding: in batch mode a model without a batch API (a custom target) is called in
    each collecting pass, so a call that failed there was made again and the run ended with "0
    failed" — the failures were only in the manifest. Each pass now logs them."""
    from conftest import NAME_TO_GROUP
    from doubles import ScriptedTarget
    from lmra.audit import Audit

    class FlakyTarget(ScriptedTarget):
        failed = 0

        async def complete(self, request):
            if "Prompt number 1." in request.messages[-1].content and not self.failed:
                self.failed += 1
                raise ProviderError("HTTP 503 (scripted)", kind="http_503")
            return await super().complete(request)

    a_url, _ = anthropic_server
    names, prompts = sim_inputs(4)
    cfg = AuditConfig(
        name="batchlive", judge=JudgeConfig(provider="anthropic", model="claude-test", base_url=a_url,
                                            api_key_required=False, n_samples=1),
        prompts=str(prompts), names=str(names), prompts_per_task=0, cache=str(tmp_path / "cache.sqlite"),
        output_dir=str(tmp_path / "reports"), judge_check={"enabled": False}, refusal={"enabled": False},
        filter={"lmra": False})
    target = FlakyTarget(NAME_TO_GROUP, lambda g, rng: f"{g} answer")
    log: list[str] = []
    result = asyncio.run(arun_batched(Audit(cfg, target=target, run_dir=tmp_path / "reports" / "r"), log=log.append,
                                      **FAST))
    assert target.failed == 1
    assert any("1 live call(s) of models without a batch API failed in this collecting pass" in m for m in log), log
    assert result.manifest["batch"]["live_calls_in_dry_pass"]["failed"] == 1


def _live_target_batch_audit(anthropic_server, sim_inputs, tmp_path, name, **budget):
    """A batch-mode audit whose chatbot (a scripted one) has no batch API: its calls are made live
    in the dry passes; the LMRA is the local Anthropic batch server. ``budget``: max_calls …"""
    from conftest import NAME_TO_GROUP
    from doubles import ScriptedTarget
    from lmra.audit import Audit

    class CountingTarget(ScriptedTarget):
        n = 0

        async def complete(self, request):
            type(self).n += 1
            return await super().complete(request)

    a_url, _ = anthropic_server
    names, prompts = sim_inputs(6)
    cfg = AuditConfig(
        name=name, judge=JudgeConfig(provider="anthropic", model="claude-test", base_url=a_url,
                                     api_key_required=False, n_samples=1),
        prompts=str(prompts), names=str(names), prompts_per_task=0, cache=str(tmp_path / f"{name}.sqlite"),
        output_dir=str(tmp_path / "reports"), judge_check={"enabled": False}, refusal={"enabled": False},
        filter={"lmra": False}, **budget)
    target = CountingTarget(NAME_TO_GROUP, lambda g, rng: f"{g} answer")
    audit = Audit(cfg, target=target, run_dir=tmp_path / "reports" / name)
    return audit, target


def test_live_calls_of_a_model_without_a_batch_api_are_under_the_budget_and_counted_fresh(anthropic_server,
                                                                                          sim_inputs, tmp_path):
    """Break-it findings: in batch mode the chatbot without a batch API was called live in the dry
    passes past ``--max-calls`` (540 calls under a limit of 100, exit 0), and the console said
    "0 fresh, 540 from cache" (the calls were only in manifest.batch.live_calls_in_dry_pass)."""
    from lmra.budget import BudgetExceeded

    audit, target = _live_target_batch_audit(anthropic_server, sim_inputs, tmp_path, "capped", max_calls=5)
    with pytest.raises(BudgetExceeded):
        asyncio.run(arun_batched(audit, budget=audit.budget, **FAST))
    assert 1 <= type(target).n <= 5  # the budget refused the 6th live call

    from lmra.errors import LmraInputError

    audit, target = _live_target_batch_audit(anthropic_server, sim_inputs, tmp_path, "unpriced", max_cost=1.0)
    with pytest.raises(LmraInputError, match="needs the price of every model the audit calls"):  # before any call
        asyncio.run(arun_batched(audit, budget=audit.budget, **FAST))
    assert type(target).n == 0

    audit, target = _live_target_batch_audit(anthropic_server, sim_inputs, tmp_path, "counted")
    result = asyncio.run(arun_batched(audit, budget=audit.budget, **FAST))
    calls, live = result.manifest["calls"], result.manifest["batch"]["live_calls_in_dry_pass"]
    n_live = type(target).n
    assert n_live == 12 and live["fresh"] == n_live  # 6 prompts × 2 groups, each asked once
    target_label = next(k for k in calls["by_model"] if "claude" not in k)
    assert calls["by_model"][target_label]["fresh"] == n_live and calls["by_model"][target_label]["cached"] == 0
    judge_label = next(k for k in calls["by_model"] if "claude" in k)
    # the judge's answers came from its batches into the cache: read from there by the final pass
    assert calls["by_model"][judge_label]["fresh"] == 0 and calls["by_model"][judge_label]["cached"] == 12
    assert calls["fresh"] == n_live and calls["cached"] == 12
    on_disk = json.loads((result.run_dir / "manifest.json").read_text())["calls"]
    assert on_disk["fresh"] == n_live and on_disk["by_model"][target_label]["fresh"] == n_live
    assert result.manifest["budget"]["calls_used"] >= n_live  # booked by the budget too


def test_batch_resume_keeps_the_judge_waiver_and_the_runs_poll_interval(openai_server, anthropic_server, sim_inputs,
                                                                       tmp_path):
    """Break-it findings: a run audited with --allow-unvalidated-judge exited 5 once resumed
    (`batch resume` had no such option and the waiver was not kept), and resume polled every
    30 s whatever the run's batch_poll_interval_s."""
    from lmra.cli.batch import _configured_poll_interval

    o_url, _ = openai_server
    a_url, _ = anthropic_server
    run = _audit_stopped_while_batches_run(sim_inputs, tmp_path, o_url, a_url, allow_unvalidated_judge=True,
                                           batch_poll_interval_s=2.5)
    assert load_state(run)["allow_unvalidated_judge"] is True
    assert _configured_poll_interval(run / "config.toml") == 2.5
    assert _configured_poll_interval(tmp_path / "no-such-config.toml") == 30.0


class ChatOnlyHandler(_Base):
    """An OpenAI-compatible server with chat completions only (vLLM, llama.cpp's server): 404 elsewhere."""

    def do_POST(self):
        body = self._body()
        if self.path.endswith("/chat/completions"):
            return self._send(200, completion_for(json.loads(body)))
        self._send(404, {"error": {"message": f"no route {self.path}"}})

    do_GET = do_POST


def test_batch_mode_against_a_server_without_a_batch_api_says_so_and_leaves_a_listed_night(sim_inputs, tmp_path,
                                                                                          capsys):
    """Fresh-user finding: ``lmra audit --batch`` against a server with no Batch API failed with
    "openai batch submission failed: Error code: 404" (no model, no URL, no hint), and its folder had
    no manifest.json, so the night was missing from lmra history's "did not finish" list."""
    from lmra.cli import main
    from lmra.history import History, history_path

    srv, url, _ = _serve(ChatOnlyHandler)
    try:
        names, prompts = sim_inputs(4)
        cfg = tmp_path / "c.toml"
        cfg.write_text(f"""name = "nobatch"
prompts = "{prompts}"
names = "{names}"
prompts_per_task = 1
cache = "{tmp_path / 'cache.sqlite'}"
output_dir = "{tmp_path / 'reports'}"
[judge_check]
enabled = false
[target]
provider = "openai"
model = "gpt-test"
base_url = "{url}/v1"
api_key_required = false
[judge]
provider = "openai"
model = "gpt-test"
base_url = "{url}/v1"
api_key_required = false
""")
        capsys.readouterr()
        assert main(["audit", "--config", str(cfg), "--batch", "--no-progress", "--no-report"]) == 1
        err = " ".join(capsys.readouterr().err.split())
        assert f"openai batch submission for model 'gpt-test' at {url}/v1/ failed: Error code: 404" in err, err
        assert "may have no Batch API" in err and "run without --batch" in err and "Traceback" not in err
    finally:
        srv.shutdown()
    (run,) = [p for p in (tmp_path / "reports").iterdir() if p.is_dir()]
    manifest = json.loads((run / "manifest.json").read_text())
    assert manifest["status"] == "failed" and "Error code: 404" in manifest["stop_reason"]
    # a server that cannot be reached is not said to lack a Batch API (break-it round 2)
    from lmra.providers._batch_results import submission_error
    import openai

    down = submission_error("openai", "http://127.0.0.1:1/v1/", "m", openai.APIConnectionError(
        request=__import__("httpx2").Request("POST", "http://127.0.0.1:1/v1/files")))
    assert "could not be reached: check base_url and that the server runs" in str(down)
    assert "Batch API" not in str(down)
    with History(history_path(tmp_path / "reports")) as h:
        (row,) = h.not_finished()
    assert row["run_id"] == run.name and row["status"] == "failed"


def test_a_batch_run_interrupted_while_its_jobs_run_says_so_in_its_manifest(openai_server, anthropic_server,
                                                                           sim_inputs, tmp_path):
    """Break-it round 2: a batch run stopped by SIGTERM while its jobs ran was listed by lmra history as
    "interrupted by SIGTERM" with no word that the jobs go on and 'lmra batch resume' continues it (a new
    'lmra audit --batch' pays for them again)."""
    from lmra.audit import Audit
    from lmra.batch import _record_unfinished

    o_url, _ = openai_server
    a_url, _ = anthropic_server
    run = _audit_stopped_while_batches_run(sim_inputs, tmp_path, o_url, a_url)  # a job submitted, still running
    cfg = json.loads(json.dumps(load_state(run)))  # (the state is what the manifest reads)
    assert [j["state"] for j in cfg["jobs"]] == ["submitted"]
    from lmra.config import load_config

    audit = Audit(load_config(run / "config.toml"), run_dir=run)
    _record_unfinished(audit, [], "2026-12-05T01:00:00+00:00", KeyboardInterrupt())
    man = json.loads((run / "manifest.json").read_text())
    assert man["status"] == "interrupted" and man["stopped_in"] == "batch"
    assert f"1 batch job(s) submitted go on at the provider — continue with 'lmra batch resume {run}'" in \
        man["stop_reason"]
    assert man["started"] != "2026-12-05T01:00:00+00:00"  # the first stop's start is kept


def test_a_batch_night_killed_while_it_waits_is_listed_stale_with_the_resume_command(openai_server, sim_inputs,
                                                                                      tmp_path, monkeypatch):
    """Break-it finding (s34): ``kill -9`` of ``lmra audit --batch`` while it waited for its jobs (a
    reboot, an OOM kill, a CI timeout) left a folder without manifest.json — ``lmra history`` said
    "no finished runs", the night was invisible. The batch rounds now start with a ``running``
    manifest: the killed night is ``stale`` and says how to go on; the resume keeps its start."""
    import os
    import signal
    import subprocess
    import sys
    import time

    from lmra.history import History, history_path

    this = sys.modules[__name__]  # (the servers read the module's POLLS_TO_FINISH)
    monkeypatch.setattr(this, "POLLS_TO_FINISH", 10**9)  # the batch never ends while the audit waits
    url, srv = openai_server
    names, prompts = sim_inputs(4)
    cfg = tmp_path / "c.toml"
    cfg.write_text(f'name = "bk"\nprompts = "{prompts}"\nnames = "{names}"\nprompts_per_task = 1\n'
                   f'cache = "{tmp_path / "cache.sqlite"}"\noutput_dir = "{tmp_path / "reports"}"\n'
                   "batch_poll_interval_s = 0.05\n[judge_check]\nenabled = false\n"
                   f'[target]\nprovider = "openai"\nmodel = "gpt-test"\nbase_url = "{url}"\napi_key_required = false\n'
                   f'[judge]\nprovider = "openai"\nmodel = "judge-test"\nbase_url = "{url}"\napi_key_required = false\n',
                   encoding="utf-8")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}
    proc = subprocess.Popen([sys.executable, "-m", "lmra.cli", "audit", "--config", str(cfg), "--batch",
                             "--no-progress", "--allow-unvalidated-judge"], cwd=tmp_path, env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 60
        while not any(b.get("status") == "in_progress" for b in srv["batches"].values()) or sum(srv["polls"].values()) < 2:
            assert time.monotonic() < deadline and proc.poll() is None, "the audit did not get to wait for its batch"
            time.sleep(0.05)
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    (run,) = [p for p in (tmp_path / "reports").iterdir() if p.is_dir()]
    assert load_state(run)["jobs"][0]["state"] == "submitted"
    with History(history_path(run.parent)) as h:
        (row,) = h.not_finished()
    assert row["status"] == "stale" and f"lmra batch resume {run}" in row["stop_reason"]
    started = json.loads((run / "manifest.json").read_text())["started"]

    monkeypatch.setattr(this, "POLLS_TO_FINISH", 1)
    import argparse

    from lmra.cli.batch import add_parsers

    parser = argparse.ArgumentParser()
    add_parsers(parser.add_subparsers(dest="command"))
    args = parser.parse_args(["batch", "resume", str(run), "--poll-interval", "0.01", "--max-wait", "20",
                              "--no-progress"])
    assert args.func(args) == 0
    manifest = json.loads((run / "manifest.json").read_text())
    assert manifest["status"] == "complete" and manifest["started"] == started
    assert len(srv["creates"]) == manifest["batch"]["jobs"]  # nothing submitted twice


def test_a_batch_state_that_cannot_be_written_is_named_and_leaves_no_temporary_file(tmp_path):
    """Break-it finding (s34): a full disk during the batch rounds said "I/O failure: OSError:
    [Errno 28] No space left on device" (no file named) and left an empty state.json.tmp. A real
    write limit (RLIMIT_FSIZE, in a child process) stands in for the full disk."""
    import subprocess
    import sys

    script = f"""
import resource, signal
from pathlib import Path
from lmra.batch import BatchOrchestrator
from lmra.cache import CallCache
from lmra.errors import LmraIOError
cache = CallCache(":memory:")
orch = BatchOrchestrator(Path({str(tmp_path / 'run')!r}), cache)
orch.state["jobs"] = [{{"id": "job-0001", "padding": "x" * 100000, "state": "prepared"}}]
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
resource.setrlimit(resource.RLIMIT_FSIZE, (4096, 4096))
try:
    orch.save()
except LmraIOError as exc:
    print("LmraIOError:", exc)
"""
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert "LmraIOError:" in out.stdout and "state.json" in out.stdout and "cannot write this file" in out.stdout
    assert sorted(p.name for p in (tmp_path / "run" / "batch").iterdir()) == []  # no temporary file, no state


@pytest.mark.parametrize("message, kind", [
    ("HTTP 400: simulated invalid request", "batch_http_400"),
    ("missing from the batch output (batch b ended with status 'completed')", "batch_missing"),
    ("batch_expired: This request could not be executed before the completion window expired.", "batch_expired"),
    ("expired (the batch did not process this request)", "batch_expired"),
    ("canceled (the batch did not process this request)", "batch_cancelled"),
    ("errored: invalid_request_error: max_tokens too large", "batch_error"),
])
def test_a_failed_batch_item_is_counted_under_its_own_kind(message, kind):
    """Break-it finding (s34): an HTTP 400 item and an item missing from the output were both
    counted as kind 'error' ("2 failed (error 2)"); the kind now says which, and is none of the
    endpoint guard's (a failed item never stops the final pass)."""
    from lmra.batch import BatchFailureGuard, batch_failure_kind
    from lmra.providers.endpoint import MALFORMED_KINDS, REJECTED_KINDS, TRANSPORT_KINDS

    assert batch_failure_kind(message) == kind
    assert kind not in set(TRANSPORT_KINDS) | set(REJECTED_KINDS) | set(MALFORMED_KINDS)
    prov = OpenAIProvider(ModelConfig(provider="openai", model="gpt-test", base_url="http://127.0.0.1:9/v1",
                                      api_key_required=False))
    (req,) = _requests("one")
    guard = BatchFailureGuard(prov, {request_key(prov.name, prov.base_url, prov.model_id, req): message})
    with pytest.raises(ProviderError) as info:
        asyncio.run(guard.complete(req))
    assert info.value.kind == kind and message in str(info.value)


def test_a_resume_whose_sdk_endpoint_variable_changed_is_refused(openai_server, sim_inputs, tmp_path, monkeypatch):
    """Break-it finding (s34): a night submitted to OPENAI_BASE_URL's server and resumed from a
    shell where the variable named another polled the new server, read its 404 as a forgotten
    batch and bought the night again there, exit 0. The resume is refused before any call, the
    night left as it was; with the variable back, it resumes."""
    from lmra.audit import Audit
    from lmra.errors import LmraInputError

    url, srv = openai_server
    monkeypatch.setenv("OPENAI_BASE_URL", url)
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")  # (the local server takes any key)
    names, prompts = sim_inputs(4)
    cfg = AuditConfig(
        name="batch", target=ModelConfig(provider="openai", model="gpt-test"),
        judge=JudgeConfig(provider="openai", model="judge-test"),
        prompts=str(prompts), names=str(names), prompts_per_task=1, cache=str(tmp_path / "cache.sqlite"),
        output_dir=str(tmp_path / "reports"), judge_check={"enabled": False})
    run = tmp_path / "reports" / "run1"
    with pytest.raises(BatchPending):
        asyncio.run(arun_batched(Audit(cfg, run_dir=run), poll_interval_s=0.01, max_wait_s=0))
    before = (run / "manifest.json").read_text()
    creates = len(srv["creates"])
    monkeypatch.setenv("OPENAI_BASE_URL", "http://127.0.0.1:9/v1")  # another shell, another server
    with pytest.raises(LmraInputError) as info:
        asyncio.run(arun_batched(Audit(cfg, run_dir=run), poll_interval_s=0.01, max_wait_s=10))
    assert info.value.field == "base_url" and url in info.value.reason and "127.0.0.1:9" in info.value.reason
    assert (run / "manifest.json").read_text() == before and len(srv["creates"]) == creates
    monkeypatch.setenv("OPENAI_BASE_URL", url)
    result = asyncio.run(arun_batched(Audit(cfg, run_dir=run), poll_interval_s=0.01, max_wait_s=10))
    assert result.manifest["status"] == "complete" and result.manifest["target"]["base_url"] == url


def test_download_only_from_another_environment_changes_nothing(openai_server, sim_inputs, tmp_path, monkeypatch,
                                                                 capsys):
    """Break-it finding (s34, round 3): a night on the SDK's default endpoint (recorded base_url ""),
    then ``lmra batch resume --download-only`` (or ``--retry-failed``, ``status --refresh``,
    ``cancel``) from a shell whose OPENAI_BASE_URL named another server: it polled that server, read
    its 404 as a forgotten batch and marked the paid job failed for good. Every path is refused
    before anything is polled or changed."""
    import argparse

    from lmra.audit import Audit
    from lmra.cli.batch import add_parsers
    from lmra.errors import LmraInputError

    url, srv = openai_server
    cfg = openai_batch_config(url, sim_inputs, tmp_path)
    run = tmp_path / "reports" / "run1"
    with pytest.raises(BatchPending):
        asyncio.run(arun_batched(Audit(cfg, run_dir=run), poll_interval_s=0.01, max_wait_s=0))
    state_file = run / "batch" / "state.json"
    state = json.loads(state_file.read_text())
    for job in state["jobs"]:  # as a night on the SDK default endpoint records them
        job["base_url"] = ""
        job["provider_id"] = f"{job['provider']}||{job['model']}"
        job["model_config"]["base_url"] = None
        job["model_config"]["api_key_required"] = True
    state_file.write_text(json.dumps(state))
    before = state_file.read_bytes()
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    monkeypatch.setenv("OPENAI_BASE_URL", url)  # this shell's variable: another endpoint than the night's
    polls = dict(srv["polls"])
    parser = argparse.ArgumentParser()
    add_parsers(parser.add_subparsers(dest="command"))
    for argv in (["batch", "resume", str(run), "--download-only", "--poll-interval", "0.01"],
                 ["batch", "resume", str(run), "--retry-failed", "--poll-interval", "0.01"],
                 ["batch", "status", str(run), "--refresh"], ["batch", "cancel", str(run)]):
        args = parser.parse_args(argv)
        with pytest.raises(LmraInputError) as info:
            args.func(args)
        assert "submitted to the SDK default endpoint" in info.value.reason and info.value.field == "base_url", argv
    assert state_file.read_bytes() == before and srv["polls"] == polls
