"""Inject is one rule on every channel (agents.turns.inject): ``POST /api/v1/inject`` and the
feed's ``inject`` command, against a live server, refuse and accept the same things."""

from __future__ import annotations

import json
import time
from typing import Any

import httpx
import pytest
from websockets.sync.client import connect

from agents.models import Agent, ApiKey, Message, Thread

pytestmark = pytest.mark.django_db(transaction=True)


def rest(server: Any, key: str, body: dict[str, Any]) -> httpx.Response:
    return httpx.post(f"{server.url}/api/v1/inject", json=body, timeout=30,
                      headers={"Authorization": f"Bearer {key}"})


def ws(server: Any, key: str, body: dict[str, Any]) -> dict[str, Any]:
    """The feed's answer (ack or error) to an inject command."""
    url = server.url.replace("http://", "ws://") + "/ws"
    with connect(url, additional_headers={"Authorization": f"Bearer {key}"},
                 open_timeout=10) as sock:
        assert json.loads(sock.recv(timeout=10))["event"] == "connected"
        sock.send(json.dumps({"cmd": "inject", "id": "i", **body}))
        while True:
            event = json.loads(sock.recv(timeout=10))
            if event.get("id") == "i":
                return event


def settled(thread_id: str, messages: int) -> list[tuple[str, str]]:
    """The thread's messages once it holds ``messages`` and no turn runs on it."""
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline:
        thread = Thread.objects.get(pk=thread_id)
        if thread.message_count >= messages and thread.status != "active":
            return list(thread.messages.order_by("seq").values_list("role", "content"))
        time.sleep(0.05)
    raise AssertionError(f"thread {thread_id} did not settle")


@pytest.fixture
def agents(make_agent: Any) -> dict[str, Agent]:
    return {"echo": make_agent(slug="echo", provider__options={}),
            "other": make_agent(slug="other", provider__name="other", provider__options={})}


def test_a_key_not_allowed_an_agent_is_refused_alike(gaia_server: Any, agents: Any,
                                                     make_key: Any) -> None:
    _, narrow = make_key("narrow", scopes=[ApiKey.Scope.OPERATOR], agents=[agents["other"]])
    r = rest(gaia_server, narrow, {"to": "echo", "payload": "hello"})
    assert (r.status_code, r.json()["code"], r.json()["param"]) == (403, "agent_not_allowed",
                                                                    "to")
    answer = ws(gaia_server, narrow, {"to": "echo", "payload": "hello"})
    assert (answer["event"], answer["code"], answer["param"], answer["status"]) == (
        "error", "agent_not_allowed", "to", 403)
    assert answer["error"] == r.json()["detail"]
    assert not Message.objects.exists()
    # the agent it may use: both accept
    assert rest(gaia_server, narrow, {"to": "other", "payload": "hi"}).status_code == 202
    assert ws(gaia_server, narrow, {"to": "other", "payload": "hi"})["event"] == "ack"


def test_a_paused_agent_is_refused_alike(gaia_server: Any, agents: Any, make_key: Any) -> None:
    _, ops = make_key("ops", scopes=[ApiKey.Scope.OPERATOR])
    Agent.objects.filter(slug="echo").update(paused=True)
    r = rest(gaia_server, ops, {"to": "echo", "payload": "hello"})
    assert (r.status_code, r.json()["code"], r.headers["retry-after"]) == (503, "agent_paused",
                                                                          "30")
    answer = ws(gaia_server, ops, {"to": "echo", "payload": "hello"})
    assert (answer["event"], answer["code"], answer["status"], answer["retry_after"]) == (
        "error", "agent_paused", 503, 30)
    assert answer["error"] == r.json()["detail"]
    assert not Message.objects.exists()


def test_a_v1_clients_thread_is_continued_from_both(gaia_server: Any, agents: Any,
                                                   make_key: Any) -> None:
    owner, secret = make_key("client", scopes=[ApiKey.Scope.CHAT, ApiKey.Scope.OPERATOR])
    _, ops = make_key("ops", scopes=[ApiKey.Scope.OPERATOR])
    r = httpx.post(f"{gaia_server.v1}/chat/completions", timeout=30,
                   headers={"Authorization": f"Bearer {secret}"},
                   json={"model": "echo", "messages": [{"role": "user", "content": "one"}]})
    assert r.status_code == 200, r.text
    thread_id = r.headers["x-gaia-thread-id"]
    settled(thread_id, 2)
    sent = 2
    for key, channel, text in ((secret, "rest", "two"), (secret, "ws", "three"),
                               (ops, "rest", "four"), (ops, "ws", "five")):
        body = {"to": "echo", "payload": {"text": text}, "thread_id": thread_id}
        if channel == "rest":
            r = rest(gaia_server, key, body)
            assert r.status_code == 202, r.text
            answer = r.json()
        else:
            answer = ws(gaia_server, key, body)
            assert answer["event"] == "ack", answer
        assert answer["thread_id"] == thread_id
        sent += 2
        settled(thread_id, sent)
    messages = settled(thread_id, sent)
    assert messages == [("user", "one"), ("assistant", "one"), ("user", "two"),
                        ("assistant", "two"), ("user", "three"), ("assistant", "three"),
                        ("user", "four"), ("assistant", "four"), ("user", "five"),
                        ("assistant", "five")]
    thread = Thread.objects.get(pk=thread_id)
    assert thread.api_key_id == owner.pk  # still the client's conversation
    assert Thread.objects.count() == 1


def test_an_object_payload_is_its_json_on_both(gaia_server: Any, agents: Any,
                                               make_key: Any) -> None:
    """Reference 003's own example, ``{"name": "Dan"}``."""
    _, ops = make_key("ops", scopes=[ApiKey.Scope.OPERATOR])
    r = rest(gaia_server, ops, {"to": "echo", "payload": {"name": "Dan"}})
    assert r.status_code == 202, r.text
    answer = ws(gaia_server, ops, {"to": "echo", "payload": {"name": "Dan"}})
    for thread_id in (r.json()["thread_id"], answer["thread_id"]):
        assert settled(thread_id, 2)[0] == ("user", '{"name": "Dan"}')
    for bad in ({}, [], "  ", 42, {"text": ""}):
        r = rest(gaia_server, ops, {"to": "echo", "payload": bad})
        assert (r.status_code, r.json()["code"], r.json()["param"]) == (
            400, "invalid_payload", "payload"), bad
        answer = ws(gaia_server, ops, {"to": "echo", "payload": bad})
        assert (answer["status"], answer["code"], answer["param"]) == (
            400, "invalid_payload", "payload"), bad
