"""Reference 000's debug switches: raw request logging (secrets redacted) and show-prompts."""

from __future__ import annotations

import time

import httpx
import pytest

pytestmark = pytest.mark.django_db(transaction=True)


def wait_for(server, text, timeout=5.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        log = server.log()
        if text in log:
            return log
        time.sleep(0.1)
    return server.log()


def test_raw_request_log_redacts_secrets(gaia_server_factory, echo_agent, api_key):
    server = gaia_server_factory(GAIA_API_DEBUG="1")
    httpx.post(server.v1 + "/chat/completions", headers={"Authorization": f"Bearer {api_key}"},
               json={"model": "echo", "messages": [{"role": "user", "content": "debug me"}]})
    log = wait_for(server, "debug me")
    assert "POST /v1/chat/completions" in log
    assert "debug me" in log
    assert api_key not in log
    assert api_key[:13] in log  # the visible prefix identifies the key


def test_raw_request_log_redacts_credentials_in_the_query_string(gaia_server_factory,
                                                                echo_agent):
    server = gaia_server_factory(GAIA_API_DEBUG="1")
    httpx.get(server.v1 + "/models?api_key=plain-secret-value&x=query-marker")
    wait_for(server, "raw request")
    # Gaia's own log (the test server's uvicorn access log is on; `gaia api start` has none).
    log = "\n".join(line for line in server.log().splitlines()
                    if not line.startswith("INFO:"))
    assert "query-marker" in log
    assert "plain-secret-value" not in log
    assert "api_key=[redacted]" in log


def test_show_prompts_logs_what_goes_to_the_provider(gaia_server_factory, make_agent, api_key):
    make_agent(slug="shown", instructions="SECRET-SAUCE-INSTRUCTIONS")
    server = gaia_server_factory(GAIA_SHOW_PROMPTS="1")
    httpx.post(server.v1 + "/chat/completions", headers={"x-api-key": api_key},
               json={"model": "shown", "messages": [{"role": "user", "content": "q"}]})
    log = wait_for(server, "SECRET-SAUCE-INSTRUCTIONS")
    assert "SECRET-SAUCE-INSTRUCTIONS" in log
    assert "prompt to" in log


def test_no_debug_logging_by_default(gaia_server, echo_agent, api_key):
    httpx.post(gaia_server.v1 + "/chat/completions", headers={"x-api-key": api_key},
               json={"model": "echo", "messages": [{"role": "user", "content": "quiet-please"}]})
    time.sleep(0.3)
    assert "quiet-please" not in gaia_server.log()
