"""Conversations as threads: session headers, history reconciliation, forks, serialised turns,
client disconnects, and concurrency, against a live Gaia process."""

from __future__ import annotations

import asyncio
import time

import httpx
import pytest

from agents.models import Message, Thread

pytestmark = pytest.mark.django_db(transaction=True)


def chat(server, key, messages, model="echo", stream=False, **headers):
    return httpx.post(server.v1 + "/chat/completions", timeout=30,
                      json={"model": model, "messages": messages, "stream": stream},
                      headers={"Authorization": f"Bearer {key}", **headers})


def u(text):
    return {"role": "user", "content": text}


def a(text):
    return {"role": "assistant", "content": text}


def roles_and_text(thread_id):
    return [(m.role, m.content) for m in Message.objects.filter(thread_id=thread_id)]


def test_resent_history_continues_one_thread_without_duplicates(gaia_server, echo_agent, api_key):
    r1 = chat(gaia_server, api_key, [u("one")])
    r2 = chat(gaia_server, api_key, [u("one"), a("one"), u("two")])
    r3 = chat(gaia_server, api_key, [{"role": "system", "content": "s"}, u("one"), a("one"),
                                     u("two"), a("two"), u("three")])
    ids = {r.headers["x-gaia-thread-id"] for r in (r1, r2, r3)}
    assert len(ids) == 1
    assert roles_and_text(ids.pop()) == [
        ("user", "one"), ("assistant", "one"), ("user", "two"), ("assistant", "two"),
        ("user", "three"), ("assistant", "three")]


def test_edited_history_forks_a_new_thread(gaia_server, echo_agent, api_key):
    r1 = chat(gaia_server, api_key, [u("one")])
    chat(gaia_server, api_key, [u("one"), a("one"), u("two")])
    edited = chat(gaia_server, api_key, [u("one"), a("one"), u("TWO (edited)")])
    # Same conversation start, same session hash, but a different history from message 3 on.
    forked = Thread.objects.get(pk=edited.headers["x-gaia-thread-id"])
    assert str(forked.pk) != r1.headers["x-gaia-thread-id"]
    assert str(forked.forked_from_id) == r1.headers["x-gaia-thread-id"]
    assert roles_and_text(forked.pk)[-2:] == [("user", "TWO (edited)"),
                                              ("assistant", "TWO (edited)")]
    assert len(roles_and_text(r1.headers["x-gaia-thread-id"])) == 4


@pytest.mark.parametrize("header", [
    "X-Session-Id", "X-OpenWebUI-Chat-Id", "X-LibreChat-Conversation-Id",
    "X-Claude-Code-Session-Id", "session-id",
])
def test_session_headers_name_the_thread(gaia_server, echo_agent, api_key, header):
    r1 = chat(gaia_server, api_key, [u("alpha")], **{header: "conv-1"})
    r2 = chat(gaia_server, api_key, [u("beta")], **{header: "conv-2"})
    r3 = chat(gaia_server, api_key, [u("alpha"), a("alpha"), u("more")], **{header: "conv-1"})
    assert r1.headers["x-gaia-thread-id"] == r3.headers["x-gaia-thread-id"]
    assert r1.headers["x-gaia-thread-id"] != r2.headers["x-gaia-thread-id"]
    thread = Thread.objects.get(pk=r1.headers["x-gaia-thread-id"])
    assert thread.session_key == f"{header.lower()}:conv-1"


def test_session_header_cascade_order(gaia_server, echo_agent, api_key):
    r = chat(gaia_server, api_key, [u("x")], **{"session-id": "low", "X-Session-Id": "high"})
    assert Thread.objects.get(pk=r.headers["x-gaia-thread-id"]).session_key == "x-session-id:high"


def test_threads_are_namespaced_by_api_key(gaia_server, echo_agent, make_key):
    _, k1 = make_key("one")
    _, k2 = make_key("two")
    r1 = chat(gaia_server, k1, [u("same")], **{"X-Session-Id": "s"})
    r2 = chat(gaia_server, k2, [u("same")], **{"X-Session-Id": "s"})
    assert r1.headers["x-gaia-thread-id"] != r2.headers["x-gaia-thread-id"]
    # Another key cannot continue someone else's thread by id.
    r3 = chat(gaia_server, k2, [u("hi")], **{"X-Gaia-Thread-Id": r1.headers["x-gaia-thread-id"]})
    assert r3.status_code == 404


def test_explicit_thread_id_continues_statefully(gaia_server, make_agent, api_key):
    make_agent(slug="count", provider__options={"echo": "system"}, instructions="")
    r1 = chat(gaia_server, api_key, [u("first")], model="count")
    tid = r1.headers["x-gaia-thread-id"]
    r2 = chat(gaia_server, api_key, [u("second")], model="count", **{"X-Gaia-Thread-Id": tid})
    assert r2.headers["x-gaia-thread-id"] == tid
    assert [m[0] for m in roles_and_text(tid)] == ["user", "assistant", "user", "assistant"]


def test_explicit_thread_history_reaches_backend(gaia_server, echo_agent, api_key):
    # Echo answers the last user message; with only the new message sent the stored history
    # still precedes it, so the thread holds four messages in order.
    r1 = chat(gaia_server, api_key, [u("first")])
    tid = r1.headers["x-gaia-thread-id"]
    chat(gaia_server, api_key, [u("second")], **{"X-Gaia-Thread-Id": tid})
    assert roles_and_text(tid) == [("user", "first"), ("assistant", "first"),
                                   ("user", "second"), ("assistant", "second")]


def test_turns_on_one_thread_are_serialised(gaia_server, make_agent, api_key):
    make_agent(slug="slowecho", provider__options={"ttft_ms": 600})
    r1 = chat(gaia_server, api_key, [u("start")], model="slowecho", **{"X-Session-Id": "ser"})
    tid = r1.headers["x-gaia-thread-id"]

    async def both():
        async with httpx.AsyncClient(timeout=30) as client:
            async def send(text):
                return await client.post(
                    gaia_server.v1 + "/chat/completions",
                    json={"model": "slowecho", "messages": [u(text)]},
                    headers={"Authorization": f"Bearer {api_key}", "X-Gaia-Thread-Id": tid})
            t0 = time.monotonic()
            rs = await asyncio.gather(send("A"), send("B"))
            return rs, time.monotonic() - t0

    rs, elapsed = asyncio.run(both())
    assert all(r.status_code == 200 for r in rs)
    assert elapsed >= 1.2  # two 0.6 s turns, one after the other
    roles = [m[0] for m in roles_and_text(tid)]
    assert roles == ["user", "assistant"] * 3  # never user, user, assistant, assistant


def test_a_busy_named_session_stops_its_request_and_waits(gaia_server, make_agent, api_key):
    # A named session's request is sent while its turn is stored; if the thread turns out
    # to be busy with another turn, that request is stopped and sent again once it is free.
    # (Different new messages would not wait: the second finds a history it does not
    # share, and forks at once.)
    from tests.fakes.openai_upstream import FakeOpenAIUpstream

    with FakeOpenAIUpstream(tokens=4, ttft_ms=600) as up:
        make_agent(slug="slow-up", provider__kind="openai", provider__base_url=up.base_url,
                   provider__name="slow-upstream")
        session = {"X-Session-Id": "busy-session"}
        r1 = chat(gaia_server, api_key, [u("start")], model="slow-up", **session)
        tid = r1.headers["x-gaia-thread-id"]
        said = a(r1.json()["choices"][0]["message"]["content"])

        async def both():  # the same message twice at once (a double submit, a retry)
            async with httpx.AsyncClient(timeout=30) as client:
                async def send():
                    return await client.post(
                        gaia_server.v1 + "/chat/completions",
                        json={"model": "slow-up", "messages": [u("start"), said, u("next")]},
                        headers={"Authorization": f"Bearer {api_key}", **session})
                t0 = time.monotonic()
                rs = await asyncio.gather(send(), send())
                return rs, time.monotonic() - t0

        rs, elapsed = asyncio.run(both())
        assert [r.status_code for r in rs] == [200, 200]
        assert elapsed >= 1.2  # two 0.6 s turns, one after the other
        # One continued the thread, the other found it moved on and forked from it.
        threads = {r.headers["x-gaia-thread-id"] for r in rs}
        assert tid in threads
        assert len(threads) == 2
        assert [m[0] for m in roles_and_text(tid)] == ["user", "assistant"] * 2
        (fork,) = threads - {tid}
        assert str(Thread.objects.get(pk=fork).forked_from_id) == tid
        # The waiting turn's first request was stopped, not left to run to its end.
        completed = [r for r in up.requests if r.completed]
        assert len(completed) == 3
        assert len(up.requests) - len(completed) == up.disconnects <= 1


def test_stream_disconnect_cancels_and_stores_partial_reply(gaia_server, make_agent, api_key):
    words = " ".join(f"w{i}" for i in range(200))
    make_agent(slug="long", provider__options={"reply": words, "delay_ms": 50})
    with httpx.stream("POST", gaia_server.v1 + "/chat/completions", timeout=30,
                      json={"model": "long", "stream": True, "messages": [u("go")]},
                      headers={"Authorization": f"Bearer {api_key}"}) as r:
        tid = r.headers["x-gaia-thread-id"]
        seen = 0
        for line in r.iter_lines():
            if line.startswith("data: "):
                seen += 1
            if seen >= 5:
                break
    # The client is gone: the server must notice, stop the backend and record it.
    deadline = time.monotonic() + 10
    reply = None
    while time.monotonic() < deadline:
        reply = Message.objects.filter(thread_id=tid, role="assistant").first()
        if reply:
            break
        time.sleep(0.1)
    assert reply is not None
    assert reply.finish_reason == "client_disconnected"
    assert 0 < len(reply.content.split()) < 200
    time.sleep(0.5)
    reply.refresh_from_db()
    assert len(reply.content.split()) < 200  # nothing kept generating
    thread = Thread.objects.get(pk=tid)
    assert thread.lock_token == ""  # the lease was released
    assert "disconnected" in thread.last_error


def test_json_disconnect_is_recorded(gaia_server, make_agent, api_key):
    make_agent(slug="slowjson", provider__options={"ttft_ms": 3000})
    with pytest.raises(httpx.ReadTimeout):
        httpx.post(gaia_server.v1 + "/chat/completions", timeout=0.8,
                   json={"model": "slowjson", "messages": [u("go")]},
                   headers={"Authorization": f"Bearer {api_key}"})
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        thread = Thread.objects.filter(agent__slug="slowjson").first()
        if thread and thread.lock_token == "" and thread.last_error:
            break
        time.sleep(0.1)
    assert thread is not None
    assert "disconnected" in thread.last_error


@pytest.mark.parametrize("stream", [False, True])
def test_twenty_slow_requests_run_concurrently(gaia_server, make_agent, api_key, stream):
    make_agent(slug="onesec", provider__options={"ttft_ms": 1000, "reply": "done"})

    async def run():
        async with httpx.AsyncClient(timeout=60) as client:
            async def one(i):
                r = await client.post(
                    gaia_server.v1 + "/chat/completions",
                    json={"model": "onesec", "stream": stream, "messages": [u("same question")]},
                    headers={"Authorization": f"Bearer {api_key}"})
                assert r.status_code == 200
                return r.text
            t0 = time.monotonic()
            bodies = await asyncio.gather(*(one(i) for i in range(20)))
            return bodies, time.monotonic() - t0

    bodies, elapsed = asyncio.run(run())
    assert all("done" in b for b in bodies)
    assert elapsed < 10, f"20 one-second requests took {elapsed:.1f} s"
    # Identical first messages without a session id are separate conversations, not a queue.
    assert Thread.objects.filter(agent__slug="onesec").count() == 20
