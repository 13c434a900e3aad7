"""Thread leases against real server processes: renewed while a turn runs, released when the
process that holds them stops (SIGTERM) or dies (SIGKILL), the turn recorded either way."""

from __future__ import annotations

import contextlib
import json
import signal
import time

import httpx
import pytest
from django.utils import timezone

from agents.models import Message, Thread

pytestmark = pytest.mark.django_db(transaction=True)

LEASE = {"GAIA_THREAD_LOCK_SECONDS": "1.5", "GAIA_THREAD_WAIT_SECONDS": "20"}
WORDS = " ".join(f"w{i}" for i in range(120))


def stream_some(server, key, *, session, frames=3):
    """Start a streamed turn on ``session``, read ``frames`` data frames and return the open
    response (the caller closes it) and the thread id."""
    client = httpx.Client(timeout=30)
    request = client.build_request(
        "POST", server.v1 + "/chat/completions",
        json={"model": "slow", "stream": True, "messages": [{"role": "user", "content": "go"}]},
        headers={"Authorization": f"Bearer {key}", "X-Session-Id": session})
    response = client.send(request, stream=True)
    assert response.status_code == 200
    lines = response.iter_lines()
    seen = 0
    while seen < frames:
        if next(lines).startswith("data: "):
            seen += 1
    return client, response, lines, response.headers["x-gaia-thread-id"]


def wait_for(predicate, timeout=20.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.1)
    return predicate()


def test_a_turn_longer_than_its_lease_keeps_it(gaia_server_factory, make_agent, api_key):
    make_agent(slug="slow", provider__options={"reply": " ".join(WORDS.split()[:60]),
                                               "delay_ms": 60})
    server = gaia_server_factory(**LEASE)
    client, response, lines, tid = stream_some(server, api_key, session="renewed")
    try:
        time.sleep(2.5)  # longer than the lease: only renewals keep it
        thread = Thread.objects.get(pk=tid)
        assert thread.lock_token
        assert thread.lock_expires_at > timezone.now()
        for _ in lines:
            pass
    finally:
        response.close()
        client.close()
    reply = wait_for(lambda: Message.objects.filter(thread_id=tid, role="assistant").first())
    assert reply.finish_reason == "stop"
    assert len(reply.content.split()) == 60
    assert not Message.objects.filter(thread_id=tid, finish_reason="interrupted").exists()


def test_sigterm_mid_turn_records_the_partial_reply_and_frees_the_thread(
        gaia_server_factory, make_agent, api_key):
    make_agent(slug="slow", provider__options={"reply": WORDS, "delay_ms": 100})
    server = gaia_server_factory(**LEASE)
    client, response, lines, tid = stream_some(server, api_key, session="S")
    try:
        server.process.send_signal(signal.SIGTERM)
        with contextlib.suppress(httpx.HTTPError):  # the server ends or cuts the stream
            for _ in lines:
                pass
    finally:
        response.close()
        client.close()
    assert server.process.wait(20) is not None
    reply = Message.objects.get(thread_id=tid, role="assistant")
    assert reply.finish_reason == "interrupted"
    assert 0 < len(reply.content.split()) < 120
    thread = Thread.objects.get(pk=tid)
    assert thread.lock_token == ""
    assert thread.lock_expires_at is None
    assert thread.status == Thread.Status.ERROR
    assert "interrupted" in thread.last_error


def test_sigkill_mid_turn_frees_the_thread_a_lease_later_and_records_it(
        gaia_server_factory, make_agent, api_key):
    agent = make_agent(slug="slow", provider__options={"reply": WORDS, "delay_ms": 100})
    server = gaia_server_factory(**LEASE)
    client, response, _, tid = stream_some(server, api_key, session="S")
    server.process.send_signal(signal.SIGKILL)
    server.process.wait(10)
    response.close()
    client.close()
    assert Thread.objects.get(pk=tid).lock_token  # the dead process still holds it
    agent.provider.options = {"reply": "back again"}
    agent.provider.save()
    restarted = gaia_server_factory(**LEASE)
    r = httpx.post(restarted.v1 + "/chat/completions", timeout=30,
                   json={"model": "slow", "messages": [{"role": "user", "content": "go"}]},
                   headers={"Authorization": f"Bearer {api_key}", "X-Session-Id": "S"})
    assert r.status_code == 200, r.text
    assert r.headers["x-gaia-thread-id"] == tid
    assert r.json()["choices"][0]["message"]["content"] == "back again"
    rows = list(Message.objects.filter(thread_id=tid).values_list("role", "finish_reason"))
    assert rows == [("user", ""), ("assistant", "interrupted"), ("assistant", "stop")]


def test_a_dead_processs_turn_is_swept_without_any_new_request(
        gaia_server_factory, make_agent, api_key):
    make_agent(slug="slow", provider__options={"reply": WORDS, "delay_ms": 100})
    server = gaia_server_factory(**LEASE)
    client, response, _, tid = stream_some(server, api_key, session="S")
    server.process.send_signal(signal.SIGKILL)
    server.process.wait(10)
    response.close()
    client.close()
    gaia_server_factory(**LEASE)  # sweeps a lease's length after it starts

    def swept():
        thread = Thread.objects.get(pk=tid)
        return thread if thread.lock_token == "" else None

    thread = wait_for(swept)
    assert thread is not None
    assert thread.status == Thread.Status.ERROR
    assert "interrupted" in thread.last_error
    assert Message.objects.filter(thread_id=tid, finish_reason="interrupted").count() == 1


def test_an_interrupted_responses_turn_reads_back_as_failed(gaia_server_factory, make_agent,
                                                            api_key):
    make_agent(slug="slow", provider__options={"reply": WORDS, "delay_ms": 100})
    server = gaia_server_factory(**LEASE)
    headers = {"Authorization": f"Bearer {api_key}"}
    with httpx.Client(timeout=30) as client, client.stream(
            "POST", server.v1 + "/responses", headers=headers,
            json={"model": "slow", "input": "go", "stream": True}) as response:
        lines = response.iter_lines()
        response_id = None
        while response_id is None:
            line = next(lines)
            if line.startswith("data: ") and '"response.created"' in line:
                response_id = json.loads(line[6:])["response"]["id"]
        server.process.send_signal(signal.SIGTERM)
        with contextlib.suppress(httpx.HTTPError):
            for _ in lines:
                pass
    server.process.wait(20)
    again = gaia_server_factory(**LEASE)
    r = httpx.get(again.v1 + "/responses/" + response_id, headers=headers)
    assert r.status_code == 200
    assert r.json()["status"] == "failed"
    assert "interrupted" in r.json()["error"]["message"]
