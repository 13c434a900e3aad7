"""One parser, one answer: the same inject body sent as ``POST /api/v1/inject`` and as the
feed's ``inject`` command gets the same status, code and field, for every body of a table of
valid and invalid ones (agents.turns.inject_parse reads both), against a live server."""

from __future__ import annotations

import json
import time
from typing import Any

import httpx
import pytest
from websockets.sync.client import connect

from agents import services
from agents.kernel import llm
from agents.models import Agent, ApiKey, Thread

pytestmark = pytest.mark.django_db(transaction=True)

ECHO_THREAD = "<echo thread>"
OTHER_THREAD = "<other thread>"
DEEP = "[" * 150 + "]" * 150  # deeper than any JSON input may nest (agents.http.jsonbody)

# (body, the answer both must give: (status, code, param)); a body is JSON text when a str.
BODIES: list[tuple[Any, tuple[int, str | None, str | None]]] = [
    ({"to": "echo", "payload": "hi"}, (202, None, None)),
    ({"to": "echo", "payload": {"text": "hi"}}, (202, None, None)),
    ({"to": "echo", "payload": {"name": "Dan"}}, (202, None, None)),
    ({"to": "echo", "payload": "hi", "thread_id": None}, (202, None, None)),
    ({"to": "echo", "payload": "hi", "thread_id": ECHO_THREAD}, (202, None, None)),
    ({}, (400, "invalid", "to")),
    ({"payload": "hi"}, (400, "invalid", "to")),  # missing to
    ({"to": "echo"}, (400, "invalid", "payload")),  # missing payload
    ({"to": "echo", "payload": None}, (400, "invalid_payload", "payload")),
    ({"to": "echo", "payload": ""}, (400, "invalid_payload", "payload")),
    ({"to": "echo", "payload": 42}, (400, "invalid_payload", "payload")),
    ({"to": "echo", "payload": []}, (400, "invalid_payload", "payload")),
    ({"to": "echo", "payload": {"text": "  "}}, (400, "invalid_payload", "payload")),
    ({"to": "echo", "payload": "hi", "extra": 1}, (400, "invalid", "extra")),  # unknown field
    ({"to": "echo", "payload": "hi", "thread_id": "not-a-uuid"}, (400, "invalid", "thread_id")),
    ({"to": "echo", "payload": "hi", "thread_id": 5}, (400, "invalid", "thread_id")),
    ({"to": "echo", "payload": "hi", "thread_id": ""}, (400, "invalid", "thread_id")),
    ({"to": "echo", "payload": "hi", "thread_id": {"id": 1}}, (400, "invalid", "thread_id")),
    ({"to": "echo", "payload": "hi", "thread_id": "00000000-0000-0000-0000-000000000000"},
     (404, "thread_not_found", "thread_id")),
    ({"to": "echo", "payload": "hi", "thread_id": OTHER_THREAD},
     (400, "thread_agent_mismatch", "thread_id")),
    ({"to": "ghost", "payload": "hi"}, (404, "agent_not_found", "to")),
    ({"to": " echo", "payload": "hi"}, (404, "agent_not_found", "to")),
    ({"to": 5, "payload": "hi"}, (400, "invalid", "to")),
    ({"to": ["echo"], "payload": "hi"}, (400, "invalid", "to")),
    ({"to": "", "payload": "hi"}, (400, "invalid", "to")),
    ({"to": "x" * 101, "payload": "hi"}, (400, "invalid", "to")),
    ({"to": "paused", "payload": "hi"}, (503, "agent_paused", None)),
    ({"to": "off", "payload": "hi"}, (400, "agent_disabled", "to")),
    ('{"to": "echo", "payload": ' + DEEP + "}", (400, "parse_error", None)),  # 150 deep
    ({"to": "echo", "payload": "a\x00b"}, (400, "invalid_value", "payload")),
]


def rest_answer(server: Any, key: str, text: str) -> tuple[int, str | None, str | None]:
    r = httpx.post(f"{server.url}/api/v1/inject", content=text.encode(), timeout=30,
                   headers={"Authorization": f"Bearer {key}",
                            "Content-Type": "application/json"})
    if r.status_code == 202:
        return 202, None, None
    body = r.json()
    return r.status_code, body["code"], body["param"]


def feed_answer(sock: Any, text: str, cmd_id: str) -> tuple[int, str | None, str | None]:
    """The command is the body with ``cmd`` and ``id`` put first (the rest as sent)."""
    sock.send('{"cmd": "inject", "id": "' + cmd_id + '", ' + text.lstrip()[1:]
              if text.strip() != "{}" else json.dumps({"cmd": "inject", "id": cmd_id}))
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline:
        try:
            event = json.loads(sock.recv(timeout=max(0.1, deadline - time.monotonic())))
        except TimeoutError:
            break
        if event.get("event") in ("ack", "error") and event.get("id") == cmd_id:
            if event["event"] == "ack":
                return 202, None, None
            return event["status"], event["code"], event["param"]
    return 0, "no answer with the command's id", None


def idle(thread_id: str) -> None:
    """Wait until no turn holds the thread (an inject's reply has been recorded)."""
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if Thread.objects.filter(pk=thread_id, lock_token="").exists():
            return
        time.sleep(0.05)
    raise AssertionError(f"thread {thread_id} stayed busy")


def test_inject_answers_alike_over_rest_and_the_feed(gaia_server: Any, make_agent: Any,
                                                     make_key: Any) -> None:
    echo = make_agent(slug="echo", provider__options={})
    other = make_agent(slug="other", provider__name="other", provider__options={})
    make_agent(slug="paused", provider__name="p2", provider__options={}, paused=True)
    make_agent(slug="off", provider__name="p3", provider__options={}, enabled=False)
    threads = {}
    for name, agent in ((ECHO_THREAD, echo), (OTHER_THREAD, other)):
        start = services.thread_turn_begin(
            agent=agent, api_key=None, session_key=f"s:{name}", thread_id=None, user="op",
            incoming=[llm.Message(role="user", parts=(llm.TextPart("first"),))],
            workspace_root=None, dialect="chat", lease_seconds=60)
        services.thread_turn_finish(start=start, result=services.TurnResult(text="ok"),
                                    dialect="chat")
        threads[name] = str(start.thread_id)
    assert Agent.objects.count() == 4
    _, key = make_key("ops", scopes=[ApiKey.Scope.OPERATOR])
    url = gaia_server.url.replace("http://", "ws://") + "/ws"
    differ = []
    with connect(url, additional_headers={"Authorization": f"Bearer {key}"},
                 open_timeout=10, max_size=None) as sock:
        assert json.loads(sock.recv(timeout=10))["event"] == "connected"
        for i, (body, expected) in enumerate(BODIES):
            if isinstance(body, dict) and isinstance(body.get("thread_id"), str) and (
                    body["thread_id"] in threads):
                body = {**body, "thread_id": threads[body["thread_id"]]}
            text = body if isinstance(body, str) else json.dumps(body)
            over_rest = rest_answer(gaia_server, key, text)
            continued = isinstance(body, dict) and body.get("thread_id") in threads.values()
            if continued and over_rest[0] == 202:
                idle(body["thread_id"])  # the reply to the first, before the second
            over_feed = feed_answer(sock, text, f"c{i}")
            if continued and over_feed[0] == 202:
                idle(body["thread_id"])
            if over_rest != over_feed or over_rest != expected:
                differ.append((str(body)[:80], expected, over_rest, over_feed))
    assert not differ, "\n".join(map(str, differ))
