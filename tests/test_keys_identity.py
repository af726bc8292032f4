"""API keys and model identity (issue 13, item 2), against real local servers.

* ``validate`` (and ``audit``, before anything is written) fails with exit 2 naming the file,
  line, field ``api_key_env`` and the variable when a needed key is unset — with or without
  ``base_url``; ``api_key_required = false`` declares a keyless local server.
* HTTP 401/403 from either SDK is a failure of kind ``auth`` naming the variable and the
  endpoint; an audit stops at the first rejected call (exit 1, status ``failed``).
* Every answer's served model id and system fingerprint are counted per role in
  ``manifest.json``; ``check``, ``compare`` and ``report.html`` show them / their change.
* Chat-template tokens of another format in answers are warned about once per role and
  token, and counted.
"""

import asyncio
import json
import re
import subprocess
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from faultserver import FaultServer, audit_config
from monitor_helpers import lmra_cli  # noqa: F401  (fixture)
from lmra.cli import main
from lmra.config import ModelConfig
from lmra.errors import LmraInputError
from lmra.identity import ServedCounts, identity_changes, served_lines, template_tokens_in
from lmra.providers.anthropic import AnthropicProvider
from lmra.providers.base import ChatRequest, ChatResult, Message, ProviderError
from lmra.providers.openai import OpenAIProvider

ROOT = Path(__file__).resolve().parents[1]
TASKS = ["write a story", "career advice"]
REQ = ChatRequest(messages=[Message(role="user", content="Hello there")], max_tokens=20)


def run(capsys, *argv):
    code = main(list(argv))
    out = capsys.readouterr()
    return code, " ".join((out.out + out.err).split())  # Rich wraps long lines; compare words


def _line_of(path: Path, text: str) -> int:
    return next(i for i, line in enumerate(path.read_text().splitlines(), start=1) if line.strip() == text)


# -- keys: validate and audit ------------------------------------------------------------------
CONFIG = '''name = "keys"
output_dir = "reports"
cache = "reports/cache.sqlite"

[target]
provider = "openai"
model = "my-bot"
base_url = "http://127.0.0.1:9/v1"
api_key_env = "MY_BOT_KEY"

[judge]
provider = "openai"
model = "gpt-4o"
'''


def test_validate_names_an_unset_key_with_base_url_by_file_line_field_and_variable(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("MY_BOT_KEY", raising=False)
    monkeypatch.setenv("OPENAI_API_KEY", "sk-judge")
    cfg = tmp_path / "c.toml"
    cfg.write_text(CONFIG)
    code, text = run(capsys, "validate", str(cfg))
    assert code == 2 and "Traceback" not in text
    line = _line_of(cfg, 'api_key_env = "MY_BOT_KEY"')
    assert f"{cfg}, line {line}: field 'target.api_key_env': environment variable MY_BOT_KEY is not set" in text
    assert "http://127.0.0.1:9/v1" in text and "api_key_required = false" in text
    # the key set: valid
    monkeypatch.setenv("MY_BOT_KEY", "sk-bot")
    assert run(capsys, "validate", str(cfg))[0] == 0
    # a blank key is no key
    monkeypatch.setenv("MY_BOT_KEY", "  ")
    code, text = run(capsys, "validate", str(cfg))
    assert code == 2 and "MY_BOT_KEY is empty" in text


def test_validate_names_the_default_variable_at_the_section_header(tmp_path, capsys, monkeypatch):
    """The judge has no api_key_env: the SDK's own variable is named, at the [judge] line (never
    the target's api_key_env line)."""
    monkeypatch.setenv("MY_BOT_KEY", "sk-bot")
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    cfg = tmp_path / "c.toml"
    cfg.write_text(CONFIG)
    code, text = run(capsys, "validate", str(cfg))
    assert code == 2
    assert (f"{cfg}, line {_line_of(cfg, '[judge]')}: field 'judge.api_key_env': environment variable "
            "OPENAI_API_KEY (the default of provider 'openai'") in text
    assert "api_key_required" not in text  # no keyless advice for the provider's own API


def test_keyless_local_server_is_declared_explicitly(tmp_path, capsys, monkeypatch):
    monkeypatch.delenv("MY_BOT_KEY", raising=False)
    monkeypatch.setenv("OPENAI_API_KEY", "sk-judge")
    cfg = tmp_path / "c.toml"
    cfg.write_text(CONFIG.replace('api_key_env = "MY_BOT_KEY"', "api_key_required = false"))
    assert run(capsys, "validate", str(cfg))[0] == 0
    # contradictions are input errors: a keyless model naming a key, a keyless model on the real API
    cfg.write_text(CONFIG.replace('api_key_env = "MY_BOT_KEY"', 'api_key_env = "MY_BOT_KEY"\napi_key_required = false'))
    code, text = run(capsys, "validate", str(cfg))
    assert code == 2 and "api_key_env names one (MY_BOT_KEY)" in text and "field 'target'" in text
    cfg.write_text(CONFIG + "api_key_required = false\n")
    code, text = run(capsys, "validate", str(cfg))
    assert code == 2 and "api_key_required = false needs base_url" in text and "field 'judge'" in text
    cfg.write_text(CONFIG + 'api_key_required = "no"\n')
    assert run(capsys, "validate", str(cfg))[0] == 2  # strict type


@pytest.mark.parametrize("example,variable", [("openai.toml", "OPENAI_API_KEY"),
                                              ("nightly.toml", "ASSISTANT_API_KEY")])
def test_shipped_remote_examples_need_their_keys(example, variable, capsys, monkeypatch):
    for var in ("OPENAI_API_KEY", "ASSISTANT_API_KEY"):
        monkeypatch.delenv(var, raising=False)
    path = ROOT / "examples" / example
    code, text = run(capsys, "validate", str(path))
    assert code == 2 and f"field 'target.api_key_env': environment variable {variable} is not set" in text
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    monkeypatch.setenv("ASSISTANT_API_KEY", "sk-test")
    code, text = run(capsys, "validate", str(path))
    assert code == 0, text


def test_audit_with_an_unset_key_stops_before_writing_anything(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("MY_BOT_KEY", raising=False)
    monkeypatch.setenv("OPENAI_API_KEY", "sk-judge")
    cfg = tmp_path / "c.toml"
    cfg.write_text(CONFIG)
    code, text = run(capsys, "audit", "--config", str(cfg), "--no-progress")
    assert code == 2 and "field 'target.api_key_env'" in text and "MY_BOT_KEY" in text
    assert not (tmp_path / "reports").exists()


def test_anthropic_key_is_needed_with_base_url_too(monkeypatch):
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    with pytest.raises(LmraInputError, match="ANTHROPIC_API_KEY") as err:
        AnthropicProvider(ModelConfig(provider="anthropic", model="claude-test", base_url="http://127.0.0.1:9"))
    assert err.value.field == "api_key_env"
    AnthropicProvider(ModelConfig(provider="anthropic", model="claude-test", base_url="http://127.0.0.1:9",
                                  api_key_required=False))  # declared keyless: builds


# -- 401/403 ---------------------------------------------------------------------------------
def test_openai_401_and_403_name_the_variable_and_the_endpoint_and_are_not_retried(monkeypatch):
    monkeypatch.setenv("LMRA_TEST_KEY", "sk-wrong")
    with FaultServer(api_key="sk-right", forbidden_key="sk-readonly") as srv:
        prov = OpenAIProvider(ModelConfig(provider="openai", model="fake", base_url=srv.url,
                                          api_key_env="LMRA_TEST_KEY", max_retries=3))
        with pytest.raises(ProviderError) as err:
            asyncio.run(prov.complete(REQ))
        assert err.value.kind == "auth" and not err.value.retryable
        msg = str(err.value)
        assert "the key in LMRA_TEST_KEY" in msg and srv.url in msg and "HTTP 401" in msg and "rejected" in msg
        assert srv.auth_rejected == 1  # a rejected key is never retried
        monkeypatch.setenv("LMRA_TEST_KEY", "sk-readonly")
        prov = OpenAIProvider(ModelConfig(provider="openai", model="fake", base_url=srv.url,
                                          api_key_env="LMRA_TEST_KEY"))
        with pytest.raises(ProviderError, match="HTTP 403") as err:
            asyncio.run(prov.complete(REQ))
        assert err.value.kind == "auth" and "refused access with the key in LMRA_TEST_KEY" in str(err.value)
        # a model declared keyless whose server wants a key: the message says no key was configured
        prov = OpenAIProvider(ModelConfig(provider="openai", model="fake", base_url=srv.url, api_key_required=False))
        with pytest.raises(ProviderError, match=r"no key \(the config says api_key_required = false\)"):
            asyncio.run(prov.complete(REQ))
        monkeypatch.setenv("LMRA_TEST_KEY", "sk-right")
        prov = OpenAIProvider(ModelConfig(provider="openai", model="fake", base_url=srv.url,
                                          api_key_env="LMRA_TEST_KEY"))
        assert asyncio.run(prov.complete(REQ)).text  # the right key is accepted


class _AnthropicAuth(BaseHTTPRequestHandler):
    """Messages API: 401 for a wrong x-api-key, 403 for a read-only one, else an answer from a
    dated model snapshot."""

    def log_message(self, *args):
        pass

    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers["content-length"])))
        key = self.headers.get("x-api-key") or (self.headers.get("authorization") or "").removeprefix("Bearer ")
        if key in ("sk-wrong", "sk-readonly"):
            code, kind = (401, "authentication_error") if key == "sk-wrong" else (403, "permission_error")
            resp = {"type": "error", "error": {"type": kind, "message": "invalid x-api-key"}}
        else:
            code = 200
            resp = {"id": "msg_1", "type": "message", "role": "assistant", "model": body["model"] + "-20250101",
                    "content": [{"type": "text", "text": "hi"}], "stop_reason": "end_turn", "stop_sequence": None,
                    "usage": {"input_tokens": 3, "output_tokens": 1}}
        data = json.dumps(resp).encode()
        self.send_response(code)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


@pytest.fixture
def anthropic_server():
    srv = ThreadingHTTPServer(("127.0.0.1", 0), _AnthropicAuth)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{srv.server_address[1]}"
    srv.shutdown()
    srv.server_close()


def test_anthropic_401_403_are_auth_failures_and_the_served_model_is_recorded(anthropic_server, monkeypatch):
    cfg = ModelConfig(provider="anthropic", model="claude-test", base_url=anthropic_server, max_retries=2)
    for key, status in (("sk-wrong", 401), ("sk-readonly", 403)):
        monkeypatch.setenv("ANTHROPIC_API_KEY", key)
        with pytest.raises(ProviderError) as err:
            asyncio.run(AnthropicProvider(cfg).complete(REQ))
        assert err.value.kind == "auth" and f"HTTP {status}" in str(err.value)
        assert "the key in ANTHROPIC_API_KEY" in str(err.value) and anthropic_server in str(err.value)
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ok")
    res = asyncio.run(AnthropicProvider(cfg).complete(REQ))
    assert res.served_model == "claude-test-20250101" and res.system_fingerprint is None


def _audit_cli(cfg: Path, cwd: Path, *extra: str, env: dict | None = None) -> subprocess.CompletedProcess:
    import os
    import sys

    return subprocess.run([sys.executable, "-m", "lmra.cli", "audit", "--config", str(cfg), "--no-progress",
                           "--no-report", "--allow-unvalidated-judge", *extra], cwd=cwd, capture_output=True,
                          text=True, timeout=600, env=os.environ | (env or {}))


def test_audit_stops_at_the_first_rejected_key_with_exit_1_and_one_line(tmp_path):
    with FaultServer(api_key="sk-right") as srv:
        cfg = audit_config(tmp_path / "c.toml", srv.url, tmp_path / "c.sqlite", tmp_path / "out", tasks=TASKS,
                           per_task=3, key_env={"target": "ASSISTANT_API_KEY", "judge": "JUDGE_KEY"})
        proc = _audit_cli(cfg, tmp_path, env={"ASSISTANT_API_KEY": "sk-expired", "JUDGE_KEY": "sk-right"})
        rejected = srv.auth_rejected
    assert proc.returncode == 1, proc.stderr[-3000:]
    assert "Traceback" not in proc.stderr and "Task exception" not in proc.stderr
    failure = [line for line in proc.stderr.splitlines() if line.startswith("failure:")]
    assert len(failure) == 1
    err = " ".join(proc.stderr.split())
    assert "the target's endpoint does not accept its key, so lmra stopped at the first rejected call" in err
    assert "the key in ASSISTANT_API_KEY" in err
    assert "HTTP 401" in err and srv.url in err
    # stopped at once: the 12 target calls were not all made (the first ones in flight at most)
    assert 1 <= rejected <= 4
    (run_dir,) = [p.parent for p in (tmp_path / "out").glob("*/manifest.json")]
    manifest = json.loads((run_dir / "manifest.json").read_text())
    assert manifest["status"] == "failed" and "ASSISTANT_API_KEY" in manifest["stop_reason"]
    assert manifest["calls"]["failed_by_kind"]["auth"] == rejected  # counted like other failures


def test_judge_check_stops_on_a_rejected_key_and_takes_no_api_key_for_a_keyless_server(tmp_path, capsys,
                                                                                        monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("LMRA_TEST_KEY", "sk-wrong")
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    args = ["judge-check", "--judge", "openai", "--model", "fake", "--dimension", "gender", "--per-kind", "1"]
    with FaultServer(api_key="sk-right") as srv:
        code, text = run(capsys, *args, "--base-url", srv.url, "--api-key-env", "LMRA_TEST_KEY")
        assert code == 1 and "the judge's endpoint does not accept its key" in text and "LMRA_TEST_KEY" in text
        assert srv.auth_rejected <= 2  # stopped, not one 401 per canary and order
    with FaultServer() as srv:
        code, text = run(capsys, *args, "--base-url", srv.url)
        assert code == 2 and "OPENAI_API_KEY" in text  # a key is needed unless said otherwise
        code, text = run(capsys, *args, "--base-url", srv.url, "--no-api-key")
        assert code in (0, 5) and srv.requests > 0, text  # rated (the fake LMRA's verdict does not matter)


# -- served model identity -------------------------------------------------------------------
def _manifest(out: Path) -> tuple[Path, dict]:
    runs = sorted(p.parent for p in out.glob("*/manifest.json"))
    return runs[-1], json.loads((runs[-1] / "manifest.json").read_text())


def test_served_model_and_fingerprint_are_recorded_and_their_change_is_shown(tmp_path, lmra_cli, capsys):
    with FaultServer(served_model="gpt-4o-2024-05-13", system_fingerprint="fp_a") as srv:
        cfg = audit_config(tmp_path / "c.toml", srv.url, tmp_path / "c.sqlite", tmp_path / "out", tasks=TASKS,
                           per_task=2)
        first = _audit_cli(cfg, tmp_path, "--seed", "1")
        assert first.returncode == 0, first.stderr[-3000:]
        run1, m1 = _manifest(tmp_path / "out")
        n_target = sum(1 for line in (run1 / "responses.jsonl").read_text().splitlines()
                       if not json.loads(line)["error"])
        assert m1["target"]["served"] == {"responses": n_target, "model": {"gpt-4o-2024-05-13": n_target},
                                          "system_fingerprint": {"fp_a": n_target}}
        judge = m1["judge"]["served"]
        assert judge["responses"] > 0 and judge["model"] == {"gpt-4o-2024-05-13": judge["responses"]}
        assert m1["target"]["model"] == "fake"  # the configured model stays what it was
        assert m1["target"]["template_tokens"] == {"responses": 0, "tokens": {}}
        # the endpoint silently swaps the model behind the same name
        srv.served_model, srv.system_fingerprint = "gpt-4o-2024-08-06", "fp_b"
        second = _audit_cli(cfg, tmp_path, "--seed", "2")
        assert second.returncode == 0, second.stderr[-3000:]
        run2, m2 = _manifest(tmp_path / "out")
        assert set(m2["target"]["served"]["model"]) == {"gpt-4o-2024-08-06"}
        # a re-run from the cache keeps the id of the model that really answered
        third = _audit_cli(cfg, tmp_path, "--seed", "1")
        assert third.returncode == 0
        _, m3 = _manifest(tmp_path / "out")
        assert m3["calls"]["fresh"] == 0 and m3["target"]["served"] == m1["target"]["served"]
    capsys.readouterr()
    # the LMRA's endpoint answered as another model: the ratings are another judge's, so the
    # baseline is not comparable (it was only a warning: break-it finding)
    assert lmra_cli(["check", str(run2), "--baseline", str(run1)]) == 2
    err = " ".join(capsys.readouterr().err.split())
    assert ("its judge's served model (what its endpoint reported answering) is 'gpt-4o-2024-05-13', the run's is "
            "'gpt-4o-2024-08-06, gpt-4o-2024-05-13'") in err, err  # (some judge answers came from the cache)
    assert "replayed from the call cache (identity-filter, refusal and classification answers" in err  # said why
    # and what to do that works (new-user finding: "pin a night whose judge answers all came from one
    # model" named none: the filter's cached answers keep the old model's id every night)
    from lmra.runfolder import load_run

    if load_run(run2).judge_status.startswith("failed"):  # (nightly trial, s46: never advise pinning a failed judge's
        assert "This run's judge failed validation" in err and "do not pin it" in err, err  # run)
        assert "then pin a night it rated ('lmra pin RUN'): later nights mix alike" in err
    else:
        assert f"pin this run ('lmra pin {run2.name}'): later nights mix alike" in err
    # the target's served model changing is what an audit watches for: a warning, the check runs
    original = (run2 / "manifest.json").read_text()
    manifest2 = json.loads(original)
    manifest2["judge"]["served"] = m1["judge"]["served"]
    (run2 / "manifest.json").write_text(json.dumps(manifest2))
    lmra_cli(["check", str(run2), "--baseline", str(run1)])
    (run2 / "manifest.json").write_text(original)
    out = " ".join(capsys.readouterr().err.split())  # warnings: on stderr
    assert ("warning: the target's served model changed: gpt-4o-2024-05-13 → gpt-4o-2024-08-06 (baseline → run)"
            in out)
    assert "the target's system fingerprint changed: fp_a → fp_b" in out
    # recorded with the check: lmra history and the Prometheus export show the new model version
    # beside the verdict (fresh-user finding: only that night's console and report.html said it)
    assert lmra_cli(["history", "--reports-dir", str(tmp_path / "out"), "--json"]) == 0
    doc = {r["run_id"]: r for r in json.loads(capsys.readouterr().out)["runs"]}
    assert doc[run2.name]["check"]["identity_changes"] == [
        "the target's served model changed: gpt-4o-2024-05-13 → gpt-4o-2024-08-06",
        "the target's system fingerprint changed: fp_a → fp_b"]
    assert lmra_cli(["history", "--reports-dir", str(tmp_path / "out")]) == 0
    assert "the target's served model changed: gpt-4o-2024-05-13 → gpt-4o-2024-08-06" in " ".join(
        capsys.readouterr().out.split())
    assert lmra_cli(["export", str(run2), "--format", "prometheus", "--out", str(tmp_path / "prom")]) == 0
    prom = next((tmp_path / "prom").glob("*.prom")).read_text().splitlines()
    assert any(ln.startswith("lmra_run_served_model_changes{") and ln.endswith(" 2.0") for ln in prom)
    capsys.readouterr()
    assert lmra_cli(["compare", str(run1), str(run2)]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert "note: the target's served model changed: gpt-4o-2024-05-13 → gpt-4o-2024-08-06 (A → B)" in out
    # runs of the same served model: nothing to say
    lmra_cli(["check", str(run1), "--baseline", str(sorted((tmp_path / "out").glob("*/manifest.json"))[-1].parent)])
    cap = capsys.readouterr()
    assert "served model changed" not in cap.out + cap.err
    # report.html shows it in the run details (rendered in headless Chromium like the run report)
    from test_html_report import CHROMIUM, FLAGS, DomIndex

    lmra_cli(["report", str(run2)])
    assert (run2 / "report.html").exists()
    if not Path(CHROMIUM).exists():
        pytest.skip("Debian package 'chromium' is not installed")
    proc = subprocess.run([CHROMIUM, *FLAGS, f"--user-data-dir={tmp_path / 'profile'}", "--dump-dom",
                           (run2 / "report.html").resolve().as_uri()], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    dom = DomIndex(proc.stdout)
    target_line = dom.text_of("served-target")
    n2 = m2["target"]["served"]["responses"]
    assert f"gpt-4o-2024-08-06 × {n2}" in target_line and f"system fingerprints fp_b × {n2}" in target_line
    assert "gpt-4o-2024-08-06" in dom.text_of("served-judge")


def test_identity_changes_and_lines_from_manifests():
    def m(target_models, fps=None, judge=None):
        out = {"target": {"served": {"responses": sum(target_models.values()), "model": target_models,
                                     "system_fingerprint": fps or {}}}}
        if judge:
            out["judge"] = {"served": {"responses": 5, "model": judge}}
        return out

    assert identity_changes(m({"a": 3}), m({"a": 2})) == []  # counts differ, the set does not
    assert identity_changes(m({"a": 3}, {"fp1": 3}), m({"b": 1, "a": 2}, {"fp1": 3})) == [
        "the target's served model changed: a → b, a"]
    assert identity_changes(m({"a": 3}), {"target": {"model": "x"}}) == []  # an older run recorded nothing
    assert identity_changes(m({"a": 1}, judge={"j1": 5}), m({"a": 1}, judge={"j2": 5})) == [
        "the judge's served model changed: j1 → j2"]
    lines = dict(served_lines(m({"a": 2}, {"fp": 2}) | {"judge": {"served": {"responses": 4, "model": {}},
                                                                  "template_tokens": {"responses": 4,
                                                                                      "tokens": {"[/INST]": 4}}}}))
    assert lines["target"] == "a × 2; system fingerprints fp × 2"
    assert lines["judge"] == "no model id reported; chat-template tokens in 4 of 4 answers ([/INST] × 4)"


# -- chat-template tokens --------------------------------------------------------------------
def test_template_tokens_are_found_by_format():
    assert template_tokens_in("<<<<[/INST]") == ["[/INST]"]
    assert template_tokens_in("ok <|im_end|> then <|eot_id|>") == ["<|eot_id|>", "<|im_end|>"]
    assert template_tokens_in("An [instance] of <s>plain</s-like> text, INST.") == []
    c = ServedCounts()
    for text in ("fine", "x[/INST]", "y[/INST]</s>"):
        c.observe(ChatResult(text=text, served_model="m"))
    assert c.manifest_fields()["template_tokens"] == {"responses": 2, "tokens": {"[/INST]": 2, "</s>": 1}}
    assert c.manifest_fields()["served"] == {"responses": 3, "model": {"m": 3}, "system_fingerprint": {}}


def test_foreign_template_tokens_are_warned_once_per_model_and_token_and_counted(tmp_path):
    with FaultServer(reply_suffix="<<<<[/INST]") as srv:
        cfg = audit_config(tmp_path / "c.toml", srv.url, tmp_path / "c.sqlite", tmp_path / "out", tasks=TASKS,
                           per_task=2)
        proc = _audit_cli(cfg, tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    err = " ".join(proc.stderr.split())
    for role in ("target", "judge"):
        assert len(re.findall(rf"warning: the {role} \(openai:fake\) answered with the chat-template token "
                              r"'\[/INST\]' \(Llama 2 / Mistral instruct format\)", err)) == 1, err[-3000:]
    run_dir, manifest = _manifest(tmp_path / "out")
    for role in ("target", "judge"):
        n = manifest[role]["served"]["responses"]
        assert n > 0 and manifest[role]["template_tokens"] == {"responses": n, "tokens": {"[/INST]": n}}
    summary = json.loads((run_dir / "summary.json").read_text())
    assert any(w.startswith(f"{manifest['target']['served']['responses']} of ") and "'[/INST]'" in w
               for w in summary["warnings"])
    # the same audit on a clean server: no warning, nothing counted
    with FaultServer() as srv:
        cfg = audit_config(tmp_path / "d.toml", srv.url, tmp_path / "d.sqlite", tmp_path / "clean", tasks=TASKS,
                           per_task=2)
        proc = _audit_cli(cfg, tmp_path)
    assert proc.returncode == 0 and "chat-template token" not in proc.stderr
    _, manifest = _manifest(tmp_path / "clean")
    assert manifest["target"]["template_tokens"] == {"responses": 0, "tokens": {}}


def test_reported_identity_is_cleaned_and_a_fingerprint_that_appears_is_a_change():
    """Break-it: NUL and U+202E from the server reached manifest and report.html raw; a
    fingerprint appearing between runs (none → fp_abc) was not reported."""
    from lmra.identity import MAX_REPORTED_CHARS, ServedCounts, clean_reported, identity_changes
    from lmra.providers.base import ChatResult

    assert clean_reported("gpt\x00-4o\u202e-evil\n") == "gpt-4o-evil"
    assert clean_reported("m" * 500).endswith("…") and len(clean_reported("m" * 500)) == MAX_REPORTED_CHARS
    counts = ServedCounts()
    counts.observe(ChatResult(text="hi", served_model="a\u202eb", system_fingerprint="\x00"))
    assert dict(counts.model) == {"ab": 1} and not counts.system_fingerprint  # an all-control value is none

    def manifest(fp):
        return {"target": {"served": {"model": {"m": 3}, "system_fingerprint": fp}}}

    assert identity_changes(manifest({}), manifest({"fp_abc": 3})) == [
        "the target's system fingerprint changed: (none) → fp_abc"]
    assert identity_changes(manifest({"fp_abc": 3}), manifest({"fp_abc": 1})) == []
    assert identity_changes({}, manifest({"fp_abc": 3})) == []  # an older run without a record: not compared


def test_a_night_whose_check_was_refused_says_so_everywhere_not_never_checked(tmp_path, lmra_cli, capsys):
    """New-user finding: a judge served-model change refused the night's check (exit 2, as
    documented), but nothing recorded it: ``lmra history`` showed the night as never checked, the
    history page "not checked", report.html and the exports nothing. The refused check is recorded
    (no verdict, why) and every surface says it."""
    import html as _html

    from lmra.history import History

    with FaultServer(served_model="judge-old") as srv:
        cfg = audit_config(tmp_path / "c.toml", srv.url, tmp_path / "c.sqlite", tmp_path / "out", tasks=TASKS,
                           per_task=3)
        first = _audit_cli(cfg, tmp_path, "--seed", "1", "--allow-unvalidated-judge")
        assert first.returncode in (0, 1), first.stderr[-2000:]
        run1, _ = _manifest(tmp_path / "out")
        srv.served_model = "judge-new"  # the LMRA's endpoint now answers as another model
        second = _audit_cli(cfg, tmp_path, "--seed", "2", "--baseline", str(run1), "--allow-unvalidated-judge",
                            "--gate", "max_overall_ci_high=-0.99")  # a release gate breached too
        assert second.returncode == 2 and "is not comparable" in second.stderr
        # its last line names the status and the gate breached before the check was refused (fresh-user
        # finding: the line was missing, and with it the gate)
        last = " ".join(second.stdout.strip().splitlines()[-1].split())
        assert last.startswith("exit status 2: the error above (") and "is not comparable" in last, second.stdout[-2000:]
        assert "(takes precedence over 6: release gates not met" in last, second.stdout[-2000:]
        run2, _ = _manifest(tmp_path / "out")
        third = _audit_cli(cfg, tmp_path, "--seed", "3", "--allow-unvalidated-judge")  # a night of the new judge
        assert third.returncode in (0, 1), third.stderr[-2000:]
        run3, _ = _manifest(tmp_path / "out")
    with History(tmp_path / "out" / "history.sqlite") as h:
        check = h.latest_check(run2.name)
    assert check["verdict"] == "no_conclusion" and check["baseline_id"] == run1.name
    assert check["refused"].startswith("its judge's served model") and "'judge-new" in check["refused"]
    capsys.readouterr()
    assert lmra_cli(["history", "--reports-dir", str(tmp_path / "out"), "--json"]) == 0
    rows = {r["run_id"]: r for r in json.loads(capsys.readouterr().out)["runs"]}
    assert rows[run2.name]["check"]["refused"] == check["refused"]
    assert rows[run2.name]["check"]["verdict"] == "no_conclusion" and rows[run1.name]["check"] is None
    assert lmra_cli(["history", "--reports-dir", str(tmp_path / "out")]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert f"no conclusion (baseline {run1.name} not comparable: its judge's served model" in out.replace("│ ", "")
    assert lmra_cli(["report", str(run2)]) == 0  # (the audits here wrote none: --no-report)
    report = _html.unescape((run2 / "report.html").read_text())
    assert "No conclusion: the regression check was refused" in " ".join(report.split())
    assert lmra_cli(["report", "--history", "--reports-dir", str(tmp_path / "out")]) == 0
    page = " ".join(_html.unescape((tmp_path / "out" / "history.html").read_text()).split())
    assert f"no conclusion (baseline {run1.name} not comparable: its judge" in page
    assert lmra_cli(["export", str(run2), "--format", "prometheus", "--out", str(tmp_path / "prom")]) == 0
    # a check that ran, made later by hand against a comparable night, is that night's verdict (break-it
    # finding: the audit's refused record, preferred as the audit's, hid it)
    capsys.readouterr()
    assert lmra_cli(["check", str(run2), "--baseline", str(run3), "--allow-unvalidated-judge",
                     "--history", str(tmp_path / "out" / "history.sqlite")]) in (0, 2, 3)
    with History(tmp_path / "out" / "history.sqlite") as h:
        later = h.latest_check(run2.name)
    assert later["source"] == "check" and later["refused"] is None and later["baseline_id"] == run3.name
    prom = next((tmp_path / "prom").glob("*.prom")).read_text()
    assert re.search(r"^lmra_run_check_tested_tasks\{.*\} 0(\.0)?$", prom, re.M)  # no verdict metric
    assert re.search(r"^lmra_run_check_warnings\{.*\} 1(\.0)?$", prom, re.M)
    assert not re.search(r"^lmra_run_regressions\{", prom, re.M)  # (its HELP text names it)


def test_a_role_whose_served_model_changed_mid_run_is_warned_about(tmp_path):
    """Break-it finding: a judge endpoint that reported another served model after 60 answers
    gave a run whose ratings mixed two LMRAs, exit 0, not a word (across runs the same change
    makes the baseline not comparable). The run's warnings name the role and both ids."""
    import time

    from lmra.identity import RunIdentity

    ident = RunIdentity()
    target, judge = ident.counts.setdefault("target", ServedCounts()), ident.counts.setdefault("judge", ServedCounts())
    for i in range(10):
        target.observe(ChatResult(text="ok", served_model="chat-1", system_fingerprint=f"fp{i % 3}"))
        judge.observe(ChatResult(text="A", served_model="judge-a" if i < 7 else "judge-b"))
    (line,) = ident.warnings()  # the target's fingerprints vary (routine): no warning for them
    assert line.startswith("the judge's answers reported 2 served models in this run ('judge-a' × 7, 'judge-b' × 3): "
                           "its ratings mix LMRAs"), line

    with FaultServer(served_model="judge-old") as srv:  # and through an audit: the server switches mid-run
        cfg = audit_config(tmp_path / "c.toml", srv.url, tmp_path / "c.sqlite", tmp_path / "out", tasks=TASKS,
                           per_task=3, concurrency=1)
        def switch():
            while srv.requests < 12:
                time.sleep(0.01)
            srv.served_model = "judge-new"
        threading.Thread(target=switch, daemon=True).start()
        proc = _audit_cli(cfg, tmp_path, "--allow-unvalidated-judge")
    assert proc.returncode in (0, 1), proc.stderr[-2000:]
    out = " ".join((proc.stdout + proc.stderr).split())
    assert "served models in this run ('judge-new' ×" in out and "its ratings mix LMRAs" in out, out[-3000:]
    run_dir, _ = _manifest(tmp_path / "out")
    assert any("served models in this run" in w for w in json.loads((run_dir / "summary.json").read_text())["warnings"])


def test_an_earlier_models_answers_replayed_from_the_cache_are_said_as_such(tmp_path):
    """Fresh-user finding (round 33): after a judge update every later night warned that "its
    ratings mix LMRAs … re-run with another seed" — the old model's answers were the identity
    filter's, replayed from the cache each night whatever the seed, and every rating was fresh
    from the new model. The warning says which answers were called now, which were replayed,
    and that another cache file (not another seed) gives answers from the model served now."""
    c = ServedCounts()  # the unit: the fresh answers of one model, cached ones of another
    for i in range(10):
        c.observe(ChatResult(text="A", served_model="judge-new" if i < 6 else "judge-old", from_cache=i >= 6))
    line = c.served_models_warning("judge")
    assert line.startswith("the judge's answers reported 2 served models in this run ('judge-new' × 6, 'judge-old' "
                           "× 4): all 6 answers called in this run came from 'judge-new'; the 4 of 'judge-old' came "
                           "from the call cache"), line
    assert "use another cache file" in line and "ratings mix" not in line and "another seed" not in line
    assert "by this run before it was interrupted and resumed, or by earlier runs" in line  # (break-it round 2)
    assert "the run's LMRA answers mix those models" in line
    assert "the run's chatbot responses mix those models" in c.served_models_warning("target")
    c.observe(ChatResult(text="A", served_model="judge-old"))  # a fresh answer of the old one: a switch tonight
    assert "its ratings mix LMRAs" in c.served_models_warning("judge")

    cache, out = tmp_path / "c.sqlite", tmp_path / "out"
    with FaultServer(served_model="judge-old") as srv:  # and through two nights: the judge updated in between
        cfg = audit_config(tmp_path / "c1.toml", srv.url, cache, out, tasks=TASKS, per_task=3, concurrency=1,
                           top="seed = 1")
        assert _audit_cli(cfg, tmp_path, "--allow-unvalidated-judge").returncode in (0, 1)
        srv.served_model = "judge-new"
        cfg = audit_config(tmp_path / "c2.toml", srv.url, cache, out, tasks=TASKS, per_task=3, concurrency=1,
                           top="seed = 2")
        proc = _audit_cli(cfg, tmp_path, "--allow-unvalidated-judge")
    assert proc.returncode in (0, 1), proc.stderr[-2000:]
    out_text = " ".join((proc.stdout + proc.stderr).split())
    assert "answers called in this run came from 'judge-new'; the" in out_text, out_text[-3000:]
    assert "of 'judge-old' came from the call cache" in out_text and "ratings mix" not in out_text


def test_a_keyless_shorthand_says_how_to_reach_a_local_endpoint(tmp_path, capsys, monkeypatch):
    """Fresh-user finding (s48): `--target openai:MODEL` for a local server ended "OPENAI_API_KEY … is not set"
    with nothing on how to give a local endpoint (the shorthand has no base_url)."""
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    code, text = run(capsys, "audit", "--config", str(ROOT / "examples" / "smoke.toml"), "--target", "openai:my-bot",
                     "--no-progress")
    assert code == 2 and "environment variable OPENAI_API_KEY" in text
    assert "a local or in-house endpoint needs its base_url in the model's section of a config" in text


def test_answers_called_tonight_with_and_without_a_served_model_id_are_said():
    """Known-items trial (s49): 100 answers reporting one served model and 700 reporting none — a
    router falling back to a backend that does not name its model — passed unsaid (the warning
    needed two ids). Said for answers called in this run; cached answers without an id (rows
    cached before lmra kept it) are not counted; no id at all (a custom provider) is not a mix."""
    from lmra.identity import ServedCounts
    from lmra.providers.base import ChatResult

    def answers(n, served, cached=False):
        return [ChatResult(text="ok", served_model=served, from_cache=cached) for _ in range(n)]

    mixed = ServedCounts()
    for r in answers(100, "gpt-4o-2024-08-06") + answers(700, None):
        mixed.observe(r)
    said = mixed.served_models_warning("judge")
    assert said is not None and said.startswith(
        "of the judge's 800 answers called in this run, 100 reported a served model ('gpt-4o-2024-08-06' × 100) and "
        "700 reported none: its ratings may mix LMRAs")
    upgraded = ServedCounts()  # tonight's answers all name the model; the cache's older rows do not
    for r in answers(100, "gpt-4o-2024-08-06") + answers(700, None, cached=True):
        upgraded.observe(r)
    assert upgraded.served_models_warning("judge") is None
    custom = ServedCounts()  # a provider that never names a model
    for r in answers(50, None):
        custom.observe(r)
    assert custom.served_models_warning("target") is None and custom.fresh_without_model == 50
