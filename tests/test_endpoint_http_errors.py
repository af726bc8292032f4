"""An endpoint that answers every call with an HTTP error is up — and the message says so, quoting it.

Fresh-user finding, s41: ``base_url`` pointing at a plain web server (Python's ``http.server``,
which answers a POST with HTTP 501 "Unsupported method") stopped the audit with "the target's
endpoint … is unreachable … Check that the server is running": the server was running, and its
own words were not shown. A real web server on 127.0.0.1 plays the wrong service.
"""

from __future__ import annotations

import http.server
import subprocess
import sys
import threading

from faultserver import audit_config

TASKS = ["write a story", "career advice"]


def test_a_web_server_that_is_not_the_api_is_named_as_such(tmp_path):
    (tmp_path / "site").mkdir()
    handler = lambda *a, **k: http.server.SimpleHTTPRequestHandler(*a, directory=str(tmp_path / "site"), **k)  # noqa: E731
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}/v1"
        cfg = audit_config(tmp_path / "c.toml", url, tmp_path / "c.sqlite", tmp_path / "out", tasks=TASKS,
                           per_task=8, retries=0)
        r = subprocess.run([sys.executable, "-m", "lmra.cli", "audit", "--config", str(cfg), "--no-progress",
                            "--no-report"], cwd=tmp_path, capture_output=True, text=True, timeout=300)
    finally:
        server.shutdown()
        server.server_close()
    err = " ".join(r.stderr.split())
    assert r.returncode == 1, err[-3000:]
    assert "answered every call with an HTTP error" in err and "failed with HTTP 501" in err, err[-3000:]
    assert "Unsupported method" in err, err[-3000:]  # the server's own words
    assert "is unreachable" not in err and "Traceback" not in err
    # the final line says it too, with the status (upgrade trial, s43: "unreachable" there, the code a line above)
    assert ("exit status 1: the run failed: the judge's endpoint answered every call with an HTTP error "
            "(http_501 × ") in " ".join(r.stdout.split()), r.stdout[-2000:]


def test_a_gateways_502_or_504_still_reads_as_unreachable():
    """Break-it round 2, s41: a proxy answering 502/504 because the model server behind it is down read
    "the server is up … points at the API" — the upstream is what is unreachable."""
    from collections import Counter

    from lmra.providers.endpoint import EndpointUnreachable

    for kinds in (Counter({"http_502": 8}), Counter({"http_504": 5, "http_502": 3})):
        text = str(EndpointUnreachable("target", "http://127.0.0.1:8080/v1", 8, kinds, False, False,
                                       first_error="Error code: 502 - Bad Gateway"))
        assert "is unreachable" in text and "answered every call with an HTTP error" not in text, text
    text = str(EndpointUnreachable("target", "http://127.0.0.1:8080/v1", 8, Counter({"http_500": 8}), False, False,
                                   first_error="Error code: 500 - boom"))
    assert "answered every call with an HTTP error" in text and "Error code: 500 - boom" in text, text
