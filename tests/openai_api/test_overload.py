"""Grace under overload (issue 37): past ``GAIA_MAX_TURNS_IN_FLIGHT`` a turn is refused at
once with 503, ``Retry-After`` and its dialect's error body, while the turns admitted run on,
``/health``, the operator API and the feed answer, and a slot comes back however its turn
ends (a reply, a client gone mid-stream)."""

from __future__ import annotations

import asyncio
import json
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx
import pytest
from websockets.sync.client import connect

from agents.models import ApiKey
from tests import cost

pytestmark = pytest.mark.django_db(transaction=True)

SLOW_MS = 3000  # the admitted turns' provider takes this long to its first token
ASK = [{"role": "user", "content": "hello"}]


def chat(server: Any, key: str, model: str = "slow", **extra: Any) -> httpx.Response:
    return httpx.post(f"{server.v1}/chat/completions",
                      json={"model": model, "messages": ASK, **extra},
                      headers={"Authorization": f"Bearer {key}"}, timeout=60)


def overloaded_openai(r: httpx.Response) -> None:
    assert r.status_code == 503, r.text
    assert int(r.headers["retry-after"]) >= 1
    error = r.json()["error"]
    assert (error["type"], error["code"]) == ("server_error", "server_overloaded")
    assert "limit of 2 requests" in error["message"]


def test_turns_past_the_limit_are_refused_at_once_in_their_dialect(
        gaia_server_factory: Any, make_agent: Any, make_key: Any) -> None:
    make_agent(slug="slow", provider__options={"ttft_ms": SLOW_MS, "reply": "late"})
    make_agent(slug="quick", provider__options={"reply": "quick"})
    _, key = make_key("load")
    _, ops = make_key("ops", scopes=[ApiKey.Scope.OPERATOR])
    server = gaia_server_factory(GAIA_MAX_TURNS_IN_FLIGHT="2")
    answered: list[tuple[str, httpx.Response]] = []
    lock = threading.Lock()

    def send(i: int) -> None:
        r = chat(server, key)
        with lock:
            answered.append((f"chat-{i}", r))

    with ThreadPoolExecutor(5) as pool:
        # Two turns take the process's two slots, then three more come while they run.
        slow = [pool.submit(send, i) for i in range(2)]
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and not _busy(server, ops, 2):
            time.sleep(0.05)
        more = [pool.submit(send, i) for i in range(2, 5)]
        for f in more:
            f.result()
        # The three were answered while the two admitted turns still ran: nothing queued.
        with lock:
            early = list(answered)
        assert len(early) == 3, [(n, r.status_code) for n, r in early]
        for _, r in early:
            overloaded_openai(r)
        # Every other dialect in its own envelope; a list, /health, the operator API, the feed
        # answer meanwhile.
        messages = httpx.post(f"{server.v1}/messages", timeout=30, json={
            "model": "quick", "max_tokens": 20, "messages": ASK},
            headers={"x-api-key": key, "anthropic-version": "2023-06-01"})
        assert messages.status_code == 503, messages.text
        assert messages.json() == {"type": "error", "error": {
            "type": "overloaded_error", "message": messages.json()["error"]["message"]}}
        assert int(messages.headers["retry-after"]) >= 1
        responses = httpx.post(f"{server.v1}/responses", timeout=30,
                               json={"model": "quick", "input": "hi"},
                               headers={"Authorization": f"Bearer {key}"})
        overloaded_openai(responses)
        assert httpx.get(f"{server.url}/health", timeout=30).status_code == 200
        assert httpx.get(f"{server.v1}/models", timeout=30,
                         headers={"Authorization": f"Bearer {key}"}).status_code == 200
        assert httpx.get(f"{server.url}/api/v1/threads", timeout=30,
                         headers={"Authorization": f"Bearer {ops}"}).status_code == 200
        with connect(server.url.replace("http://", "ws://") + "/ws", open_timeout=10,
                     additional_headers={"Authorization": f"Bearer {ops}"}) as sock:
            assert json.loads(sock.recv(timeout=10))["event"] == "connected"
        for f in slow:
            f.result()
    admitted = [r for name, r in answered if name in ("chat-0", "chat-1")]
    assert [r.status_code for r in admitted] == [200, 200]
    assert all(r.json()["choices"][0]["message"]["content"] == "late" for r in admitted)
    # Their slots are back: new turns are admitted again.
    for _ in range(2):
        r = chat(server, key, model="quick")
        assert r.status_code == 200, r.text


def _busy(server: Any, ops: str, n: int) -> bool:
    """Whether ``n`` turns are at work (the operator API's threads that are active)."""
    r = httpx.get(f"{server.url}/api/v1/threads?status=active", timeout=30,
                  headers={"Authorization": f"Bearer {ops}"})
    return r.status_code == 200 and r.json()["count"] >= n


def test_streams_cut_by_their_clients_give_their_slots_back(
        gaia_server_factory: Any, make_agent: Any, make_key: Any) -> None:
    make_agent(slug="slow", provider__options={"reply": "word " * 400, "delay_ms": 20})
    make_agent(slug="quick", provider__options={"reply": "quick"})
    _, key = make_key("cut")
    server = gaia_server_factory(GAIA_MAX_TURNS_IN_FLIGHT="2")
    for _ in range(3):  # more cuts than slots: a slot that leaked would show
        with httpx.Client(timeout=30) as client, client.stream(
                "POST", f"{server.v1}/chat/completions",
                json={"model": "slow", "messages": ASK, "stream": True},
                headers={"Authorization": f"Bearer {key}"}) as r:
            assert r.status_code == 200
            next(r.iter_lines())  # the stream has begun; the client goes away
    # The server notices each cut and ends its turn; then the slots are free again.
    deadline = time.monotonic() + 20
    while True:
        statuses = [chat(server, key, model="quick").status_code for _ in range(2)]
        if statuses == [200, 200] or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    assert statuses == [200, 200]


@pytest.fixture
def streaming_key(make_agent: Any, make_key: Any) -> str:
    make_agent(slug="slow", provider__options={"reply": "word " * 200, "delay_ms": 10})
    return make_key("inproc")[1]


async def test_a_slot_is_given_back_when_the_client_leaves_mid_stream(
        streaming_key: str, settings: Any) -> None:
    """In the process: the count of turns in flight is 0 again once a stream's client has
    gone, and a turn past the limit is refused while one runs."""
    from agents.turns import admission
    from gaia_site.asgi import application

    settings.GAIA_MAX_TURNS_IN_FLIGHT = 1
    key = streaming_key

    body = json.dumps({"model": "slow", "messages": ASK, "stream": True}).encode()
    scope = {"type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1",
             "method": "POST", "scheme": "http", "path": "/v1/chat/completions",
             "raw_path": b"/v1/chat/completions", "query_string": b"", "root_path": "",
             "headers": [(b"host", b"testserver"), (b"content-type", b"application/json"),
                         (b"authorization", f"Bearer {key}".encode())],
             "client": ("127.0.0.1", 40001), "server": ("testserver", 80)}
    first_frame = asyncio.Event()
    gone = asyncio.Event()
    state = {"sent": False}

    async def receive() -> dict[str, Any]:
        if not state["sent"]:
            state["sent"] = True
            return {"type": "http.request", "body": body, "more_body": False}
        await gone.wait()
        return {"type": "http.disconnect"}

    async def send(message: dict[str, Any]) -> None:
        if message["type"] == "http.response.body" and message.get("body"):
            first_frame.set()

    request = asyncio.create_task(application(scope, receive, send))
    await asyncio.wait_for(first_frame.wait(), 30)
    assert admission.turns_in_flight() == 1
    refused = await cost.asgi_request(
        "POST", "/v1/chat/completions", body={"model": "slow", "messages": ASK},
        headers={"Authorization": f"Bearer {key}"})
    assert refused.status == 503
    assert refused.headers["retry-after"] == "1"
    assert refused.json()["error"]["code"] == "server_overloaded"
    gone.set()  # the client disconnects mid-stream
    await asyncio.wait_for(request, 30)
    await cost.settle()  # the turn's record runs on in a task of its own
    assert admission.turns_in_flight() == 0
