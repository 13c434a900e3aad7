"""``POST /api/v1/organism/stop`` and ``/start`` (reference 003, issue 36 item 5), against real
server processes: stopped, every ``/v1`` dialect answers a new turn with 503 and
``Retry-After`` in its own error body (on every process: the state is on the configuration
stamp), while the operator API, the feed and ``/health`` answer; a stream begun before the
stop finishes, or is killed once the grace is over; start takes turns again; each is audited,
announced on the feed and shown in the snapshot and the console."""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest
from django.test import Client
from websockets.sync.client import connect

from agents.models import AuditEvent, Thread
from tests.operator.test_live import (
    SLOW_REPLY,
    StreamReader,
    chat,
    keys,  # noqa: F401 - a fixture
    ops_get,
    ops_post,
    slow_agent,  # noqa: F401 - a fixture
    wait_for,
)

pytestmark = pytest.mark.django_db(transaction=True)

ASK = [{"role": "user", "content": "hello"}]


def feed_until(sock: Any, event: str, **match: Any) -> dict[str, Any]:
    while True:
        got = json.loads(sock.recv(timeout=15))
        if got["event"] == event and all(got.get(k) == v for k, v in match.items()):
            return got


def assert_stopped_openai(r: httpx.Response) -> None:
    assert r.status_code == 503, r.text
    assert r.headers["retry-after"] == "30"
    error = r.json()["error"]
    assert (error["type"], error["code"]) == ("server_error", "organism_stopped")
    assert "stopped by an operator" in error["message"]


def every_dialect_refused(server: Any, key: str) -> None:
    assert_stopped_openai(chat(server, key, "quick", "hi"))
    stream = httpx.post(f"{server.v1}/chat/completions", timeout=30,
                        json={"model": "quick", "messages": ASK, "stream": True},
                        headers={"Authorization": f"Bearer {key}"})
    assert_stopped_openai(stream)
    assert_stopped_openai(httpx.post(f"{server.v1}/responses", timeout=30,
                                     json={"model": "quick", "input": "hi"},
                                     headers={"Authorization": f"Bearer {key}"}))
    assert_stopped_openai(httpx.post(f"{server.v1}/chat/completions", timeout=30,
                                     json={"model": "auto", "messages": ASK},
                                     headers={"Authorization": f"Bearer {key}"}))
    messages = httpx.post(f"{server.v1}/messages", timeout=30, json={
        "model": "quick", "max_tokens": 20, "messages": ASK},
        headers={"x-api-key": key, "anthropic-version": "2023-06-01"})
    assert messages.status_code == 503, messages.text
    assert messages.headers["retry-after"] == "30"
    assert messages.json() == {"type": "error", "error": {
        "type": "overloaded_error", "message": messages.json()["error"]["message"]}}
    assert "stopped by an operator" in messages.json()["error"]["message"]


def test_stop_refuses_new_turns_everywhere_lets_running_ones_finish_and_start_restores(
        gaia_server_factory, slow_agent, make_agent, keys):  # noqa: F811
    make_agent(slug="quick", provider__options={"reply": "quick"})
    server, other = gaia_server_factory(), gaia_server_factory()
    ops, key = keys["operator"], keys["chat"]
    assert chat(other, key, "quick", "warm up").status_code == 200  # its caches are read
    with connect(server.url.replace("http://", "ws://") + "/ws", open_timeout=10,
                 additional_headers={"Authorization": f"Bearer {ops}"}) as sock:
        hello = json.loads(sock.recv(timeout=10))
        assert hello["event"] == "connected"
        assert hello["organism"]["status"] == "running"
        reader = StreamReader(server, key, "slow")  # about 9 s of tokens
        reader.start()
        wait_for(lambda: len(reader.frames) >= 4, what="the first tokens")

        r = ops_post(server, ops, "organism/stop", {"grace_seconds": 120})
        assert r.status_code == 200, r.text
        assert r.json()["state"] == "stopped"
        assert r.json()["by"].startswith("key:ops (")
        stopped = feed_until(sock, "organism_state")
        assert (stopped["state"], stopped["by"], stopped["grace_seconds"]) == (
            "stopped", r.json()["by"], 120)

        # Every dialect, on this process and on the other one, in its own envelope.
        every_dialect_refused(server, key)
        every_dialect_refused(other, key)
        # Stopping again changes nothing (the same since, no second entry).
        again = ops_post(other, ops, "organism/stop")
        assert again.status_code == 200
        assert again.json() == r.json()
        # The operator API, the model list and /health answer, and say it is stopped.
        info = ops_get(other, ops, "organism").json()
        assert (info["status"], info["status_by"]) == ("stopped", r.json()["by"])
        assert info["status_since"]
        health = httpx.get(f"{other.url}/health", timeout=30)
        assert (health.status_code, health.json()) == (200, {"status": "ok",
                                                             "organism": "stopped"})
        detail = httpx.get(f"{other.url}/health", timeout=30,
                           headers={"x-api-key": ops}).json()
        assert (detail["organism"]["state"], detail["organism"]["by"]) == (
            "stopped", r.json()["by"])
        assert httpx.get(f"{server.v1}/models", timeout=30,
                         headers={"Authorization": f"Bearer {key}"}).status_code == 200
        inject = ops_post(server, ops, "inject", {"to": "quick", "payload": "hi"})
        assert (inject.status_code, inject.json()["code"]) == (503, "organism_stopped")
        assert inject.headers["retry-after"] == "30"

        # The stream begun before the stop finishes whole.
        assert reader.done.wait(60), "the running stream did not finish"
        assert not [f for f in reader.frames if "error" in f]
        assert reader.text() == SLOW_REPLY
        thread = Thread.objects.get(pk=reader.thread_id)
        assert thread.status != "killed"

        r = ops_post(server, ops, "organism/start")
        assert r.status_code == 200, r.text
        assert r.json()["state"] == "running"
        started = feed_until(sock, "organism_state", state="running")
        assert started["by"] == r.json()["by"]
    for s in (server, other):
        reply = chat(s, key, "quick", "again")
        assert reply.status_code == 200, reply.text
        assert reply.json()["choices"][0]["message"]["content"] == "quick"
    assert httpx.get(f"{server.url}/health", timeout=30).json()["organism"] == "running"
    audit = list(AuditEvent.objects.filter(target="organism").order_by("pk")
                 .values_list("action", "actor", "channel", "detail"))
    assert audit == [("stop", stopped["by"], "rest", {"grace_seconds": 120.0}),
                     ("start", stopped["by"], "rest", {})]


def test_turns_still_running_after_the_grace_are_killed(gaia_server, slow_agent, keys):  # noqa: F811
    ops = keys["operator"]
    reader = StreamReader(gaia_server, keys["chat"], "slow")
    reader.start()
    wait_for(lambda: len(reader.frames) >= 4, what="the first tokens")
    r = ops_post(gaia_server, ops, "organism/stop", {"grace_seconds": 1})
    assert r.status_code == 200, r.text
    assert reader.done.wait(20), "the stream was not killed"
    assert [f["error"]["code"] for f in reader.frames if "error" in f] == ["turn_killed"]
    assert len(reader.text()) < len(SLOW_REPLY)
    wait_for(lambda: Thread.objects.get(pk=reader.thread_id).status == "killed",
             what="the thread killed")
    kill = AuditEvent.objects.get(action="kill")
    assert (kill.target, kill.actor) == (f"thread:{reader.thread_id}", r.json()["by"])
    assert ops_post(gaia_server, ops, "organism/start").json()["state"] == "running"
    assert chat(gaia_server, keys["chat"], "slow", "hi").status_code == 200


def test_stop_input_and_access_are_checked(gaia_server, keys):  # noqa: F811
    ops = keys["operator"]
    for body, param in [({"grace_seconds": -1}, "grace_seconds"),
                        ({"grace_seconds": "soon"}, "grace_seconds"),
                        ({"grace_seconds": 10**9}, "grace_seconds"),
                        ({"grace_seconds": True}, "grace_seconds"),  # JSON true is no number
                        ({"grace": 3}, "grace"), ([1], None), (0, None)]:
        r = ops_post(gaia_server, ops, "organism/stop", body)
        assert r.status_code == 400, (body, r.text)
        if param:
            assert r.json()["param"] == param
    # a JSON null is a body, and no object: refused (no body at all is the defaults)
    r = httpx.post(f"{gaia_server.url}/api/v1/organism/stop", content=b"null", timeout=30,
                   headers={"Authorization": f"Bearer {ops}", "Content-Type": "application/json"})
    assert r.status_code == 400, r.text
    r = ops_post(gaia_server, keys["chat"], "organism/stop")
    assert (r.status_code, r.json()["code"]) == (403, "insufficient_scope")
    assert httpx.post(f"{gaia_server.url}/api/v1/organism/start", timeout=30).status_code == 401
    assert ops_get(gaia_server, ops, "organism").json()["status"] == "running"
    assert not AuditEvent.objects.filter(target="organism").exists()


def test_the_console_shows_a_stopped_organism_and_its_start_button(django_user_model, keys):  # noqa: F811
    user = django_user_model.objects.create_user("boss", password="pw-12345678", is_staff=True)
    client = Client(enforce_csrf_checks=True)
    client.force_login(user)
    page = client.get("/", HTTP_ACCEPT="text/html")
    assert 'id="organism-stop"' in page.content.decode()
    assert 'id="organism-stopped"' not in page.content.decode()
    token = page.context["csrf_token"]
    assert client.post("/api/v1/organism/stop", content_type="application/json",
                       data={}).status_code == 403  # a session needs its CSRF token
    r = client.post("/api/v1/organism/stop", content_type="application/json",
                    data={"grace_seconds": 5}, HTTP_X_CSRFTOKEN=str(token))
    assert (r.status_code, r.json()["by"]) == (200, "user:boss")
    html = client.get("/", HTTP_ACCEPT="text/html").content.decode()
    assert 'id="organism-stopped"' in html
    assert "Stopped by user:boss" in html
    assert 'action="/api/v1/organism/start"' in html
    r = client.post("/api/v1/organism/start", content_type="application/json",
                    HTTP_X_CSRFTOKEN=str(token))
    assert (r.status_code, r.json()["state"]) == (200, "running")
    html = client.get("/", HTTP_ACCEPT="text/html").content.decode()
    assert 'id="organism-stopped"' not in html
