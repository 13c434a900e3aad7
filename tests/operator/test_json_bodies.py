"""Any JSON body, to every operator and benchmark input, over REST and the feed's WebSocket, is
answered in JSON: a success or a 4xx naming the problem; never a 5xx, an HTML page, an
``internal_error`` or a dropped socket (issue 26 item 4). The bodies include what broke them:
text with a NUL or a lone surrogate (escaped, and as CESU-8 bytes ``ED A0 80``), keys holding
them, and nesting thousands deep.

REST in-process (DRF's test client, hundreds of examples); the WebSocket against a live
server (one socket answers every example of a test)."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from rest_framework.test import APIClient
from websockets.sync.client import connect

from agents.models import Agent, ApiKey

pytestmark = pytest.mark.django_db

SETTINGS = settings(max_examples=60, deadline=None,
                    suppress_health_check=[HealthCheck.function_scoped_fixture,
                                           HealthCheck.too_slow])

# Every code point, surrogates included (hypothesis leaves them out by default).
any_text = st.text(st.characters(codec=None, exclude_categories=()), max_size=12)
nasty_text = st.sampled_from(["\x00", "a\x00b", "\ud800", "\udfff", "x\udc00y", "🙂", ""])
scalars = (st.none() | st.booleans() | st.integers(min_value=-(2**70), max_value=2**70)
           | st.floats(allow_nan=False, allow_infinity=False) | any_text | nasty_text)
json_values = st.recursive(
    scalars, lambda inner: st.lists(inner, max_size=3)
    | st.dictionaries(any_text | nasty_text, inner, max_size=3), max_leaves=10)


def deep(depth: int, leaf: Any = 1) -> Any:
    value = leaf
    for i in range(depth):
        value = [value] if i % 2 else {"a": value}
    return value


deep_values = st.builds(deep, st.sampled_from([101, 1_000, 5_000, 50_000]), scalars)
bodies = json_values | deep_values


def encoded(body: Any, cesu: bool) -> bytes:
    """``body`` as JSON: escapes (``\\ud800``), or raw UTF-8 with surrogates as CESU-8."""
    if cesu:
        return json.dumps(body, ensure_ascii=False).encode("utf-8", "surrogatepass")
    return json.dumps(body).encode()


def dumps(body: Any) -> bytes | None:
    try:
        return encoded(body, False)
    except RecursionError:  # too deep for the encoder: written by hand
        return None


def deep_text(depth: int) -> bytes:
    return b'{"to": "echo", "payload": ' + b"[" * depth + b"]" * depth + b"}"


def assert_json_answer(response: Any, allowed: set[int]) -> dict[str, Any]:
    assert response.status_code < 500, (response.status_code, response.content[:300])
    assert response.status_code in allowed, (response.status_code, response.content[:300])
    assert response["Content-Type"].startswith("application/json"), response.content[:300]
    out = response.json()
    if response.status_code >= 400:
        assert isinstance(out.get("detail"), str), out
        assert isinstance(out.get("code"), str), out
    return out


@pytest.fixture
def client(make_key: Callable[..., tuple[Any, str]]) -> APIClient:
    _, secret = make_key("props", scopes=["operator", "benchmarks"])
    api = APIClient()
    api.credentials(HTTP_AUTHORIZATION=f"Bearer {secret}")
    return api


@pytest.fixture
def paused_agent(make_agent: Callable[..., Any]) -> Agent:
    """A valid inject stops at the pause check (503) after every parse and lookup: no turn."""
    return make_agent(slug="echo", provider__options={}, paused=True)


# Each operator and benchmark input with a body, and what it may answer besides a 4xx.
REST_INPUTS = {
    "/api/v1/inject": {503},
    "/api/v1/approvals/00000000-0000-0000-0000-000000000000": set(),
    "/api/v1/agents/echo/pause": {200},
    "/api/v1/organism/reload": {202},
    "/api/v1/benchmarks/runs": {201},
    "/api/v1/benchmarks/suites": {201},
}


@pytest.mark.parametrize("path", REST_INPUTS)
def test_any_json_body_to_any_rest_input_is_answered_in_json(
        client: APIClient, paused_agent: Agent, path: str) -> None:
    allowed = {400, 403, 404, 405, 409, 413, *REST_INPUTS[path]}

    @SETTINGS
    @given(body=bodies, cesu=st.booleans())
    @example(body={"to": "echo", "payload": "a\x00b"}, cesu=False)
    @example(body={"to": "echo", "payload": "\ud800"}, cesu=True)
    @example(body={"\ud800": 1}, cesu=False)
    @example(body={"name": "s", "questions": [{"question": "\x00"}]}, cesu=False)
    @example(body=deep(5_000), cesu=False)
    def check(body: Any, cesu: bool) -> None:
        raw = encoded(body, cesu) if dumps(body) is not None else deep_text(5_000)
        response = client.post(path, raw, content_type="application/json")
        out = assert_json_answer(response, allowed)
        if response.status_code == 400 and out["code"] == "invalid_value":
            assert out["param"] is None or isinstance(out["param"], str)

    check()


def test_the_named_500s_are_400s(client: APIClient, paused_agent: Agent) -> None:
    """What the probe found, each named."""
    cases = [
        ("/api/v1/inject", b'{"to": "echo", "payload": "\\ud800"}', "invalid_value"),
        ("/api/v1/inject", b'{"to": "echo", "payload": "a\\u0000b"}', "invalid_value"),
        ("/api/v1/inject", deep_text(1_000), "parse_error"),
        ("/api/v1/inject", b'{"to": "echo", "payload": "\xed\xa0\x80"}', "invalid_value"),
        ("/api/v1/benchmarks/runs", deep_text(50_000), "parse_error"),
        ("/api/v1/benchmarks/runs", b'{"\\ud800": 1}', "invalid_value"),
        ("/api/v1/benchmarks/suites", b'{"name": "a\\u0000"}', "invalid_value"),
        ("/api/v1/benchmarks/suites", deep_text(2_000), "parse_error"),
    ]
    for path, raw, code in cases:
        response = client.post(path, raw, content_type="application/json")
        out = assert_json_answer(response, {400})
        assert out["code"] == code, (path, raw[:60], out)


# -- the WebSocket --------------------------------------------------------------------------

WS_COMMANDS = ["auth", "subscribe", "inject", "kill", "pause", "resume", "approve", "deny"]


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("cmd", WS_COMMANDS)
def test_any_json_command_on_the_feed_is_an_ack_or_a_4xx_error(
        gaia_server: Any, make_key: Any, paused_agent: Agent, cmd: str) -> None:
    _, secret = make_key("ops", scopes=[ApiKey.Scope.OPERATOR])
    url = gaia_server.url.replace("http://", "ws://") + "/ws"
    with connect(url, additional_headers={"Authorization": f"Bearer {secret}"},
                 open_timeout=10, max_size=None) as sock:
        assert json.loads(sock.recv(timeout=10))["event"] == "connected"
        counter = iter(range(10**9))

        @SETTINGS
        @given(fields=bodies, cesu=st.booleans())
        @example(fields={"to": "echo", "payload": "\x00"}, cesu=False)
        @example(fields={"agent": "\ud800"}, cesu=True)
        @example(fields=deep(5_000), cesu=False)
        def check(fields: Any, cesu: bool) -> None:
            n = next(counter)
            body = {**fields, "cmd": cmd, "id": n} if isinstance(fields, dict) else fields
            raw = encoded(body, cesu) if dumps(body) is not None else (
                b'{"cmd": "%s", "id": %d, "x": ' % (cmd.encode(), n) + b"[" * 5_000
                + b"]" * 5_000 + b"}")
            try:
                text = raw.decode("utf-8")
            except UnicodeDecodeError:  # CESU-8 is no UTF-8: a text frame cannot carry it
                return
            sock.send(text)
            while True:
                event = json.loads(sock.recv(timeout=10))
                if event["event"] in ("ack", "error"):
                    break
            if event["event"] == "error":
                assert 400 <= event["status"] < 500, event
                assert event["code"] != "internal_error", event
            if isinstance(fields, dict) and event.get("id") is not None:
                assert event["id"] == n

        check()


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("raw", ['{"cmd": "auth", "x": ' + "[" * 5_000 + "]" * 5_000 + "}",
                                 '{"cmd": "auth", "api_key": "\\u0000"}',
                                 '{"cmd": "auth", "api_key": "\\ud800"}'])
def test_a_bad_first_message_closes_the_socket_cleanly_before_auth(gaia_server: Any,
                                                                   raw: str) -> None:
    """Before authentication, what cannot be a command closes the socket with 4001 and a
    reason (it was a 1006 and a logged traceback for a message nested 5,000 deep)."""
    from websockets.exceptions import ConnectionClosed

    url = gaia_server.url.replace("http://", "ws://") + "/ws"
    logged = len(gaia_server.log())
    with connect(url, open_timeout=10, max_size=None) as sock:
        sock.send(raw)
        with pytest.raises(ConnectionClosed) as closed:
            sock.recv(timeout=10)
    assert closed.value.rcvd is not None
    assert closed.value.rcvd.code == 4001
    assert "Traceback" not in gaia_server.log()[logged:]
