"""The live feed end to end: real server processes (uvicorn), real sockets, the real channel
layer. With ``REDIS_URL`` set (the PostgreSQL + Redis leg), a stream served by one process is
watched, and killed, from a feed socket connected to another; events written by a process
without an event loop (a worker, a management command) reach it too. Without Redis the same
flows run in one process."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from collections.abc import Callable
from typing import Any

import httpx
import pytest
import websockets
from django.conf import settings

from agents.models import ApiKey, Thread
from tests.conftest import ROOT, GaiaServer, live_database_url

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.timeout(120)]

needs_redis = pytest.mark.skipif(not settings.REDIS_URL,
                                 reason="two server processes share events through Redis")


@pytest.fixture
def keys(make_key: Callable[..., tuple[Any, str]]) -> tuple[str, str]:
    """(chat key, operator key)."""
    return make_key("client")[1], make_key("ops", scopes=[ApiKey.Scope.OPERATOR])[1]


@pytest.fixture
def slow_agent(make_agent: Callable[..., Any]) -> Any:
    words = " ".join(f"w{i}" for i in range(150))
    return make_agent(slug="slow", provider__name="slow-live",
                      provider__options={"reply": words, "delay_ms": 20})


@pytest.fixture
def paced_agent(make_agent: Callable[..., Any]) -> Any:
    return make_agent(slug="paced", provider__name="paced-live",
                      provider__options={"reply": " ".join(f"t{i}" for i in range(30)),
                                         "delay_ms": 15})


@pytest.fixture(params=["one process", "two processes"])
def servers(request: pytest.FixtureRequest, gaia_server: GaiaServer,
            gaia_server_factory: Callable[..., GaiaServer]) -> tuple[GaiaServer, GaiaServer]:
    """(the server that streams, the server the feed socket is connected to)."""
    if request.param == "one process":
        return gaia_server, gaia_server
    if not settings.REDIS_URL:
        pytest.skip("two server processes share events through Redis (REDIS_URL unset)")
    return gaia_server, gaia_server_factory()


def ws_url(server: GaiaServer) -> str:
    return server.url.replace("http://", "ws://") + "/ws"


async def open_feed(server: GaiaServer, key: str) -> Any:
    ws = await websockets.connect(ws_url(server),
                                  additional_headers={"Authorization": f"Bearer {key}"})
    hello = json.loads(await asyncio.wait_for(ws.recv(), 10))
    assert hello["event"] == "connected"
    return ws


async def events_until(ws: Any, pred: Callable[[dict[str, Any]], bool],
                       timeout: float = 30) -> list[dict[str, Any]]:
    seen: list[dict[str, Any]] = []
    async with asyncio.timeout(timeout):
        while True:
            seen.append(json.loads(await ws.recv()))
            if pred(seen[-1]):
                return seen


def thread_done(thread_id: str) -> Callable[[dict[str, Any]], bool]:
    return lambda e: (e["event"] == "thread_updated" and e["thread_id"] == thread_id
                      and e["status"] != "active")


async def test_a_v1_stream_is_seen_in_order_on_the_feed(servers, keys, paced_agent):
    streamer, watcher = servers
    chat_key, ops_key = keys
    ws = await open_feed(watcher, ops_key)
    async with httpx.AsyncClient(timeout=30) as http, http.stream(
        "POST", streamer.v1 + "/chat/completions",
        headers={"Authorization": f"Bearer {chat_key}"},
        json={"model": "paced", "stream": True,
              "messages": [{"role": "user", "content": "count"}]},
    ) as r:
        assert r.status_code == 200
        thread_id = r.headers["x-gaia-thread-id"]
        body = (await r.aread()).decode()
    assert "data: [DONE]" in body
    events = await events_until(ws, thread_done(thread_id))
    await ws.close()
    mine = [e for e in events if thread_id in (
        e.get("thread_id"), e.get("current_thread"), e.get("thread", {}).get("id"),
        e.get("message", {}).get("thread_id"))]
    names = [e["event"] for e in mine]
    assert names[:3] == ["thread_created", "message", "agent_state"]
    assert names[-2:] == ["message", "thread_updated"]
    assert set(names[3:-2]) == {"message_delta"}
    assert len(names[3:-2]) >= 2  # the reply took ~0.5 s: more than one coalesced delta
    assert mine[1]["message"]["role"] == "user"
    reply = mine[-2]["message"]
    assert reply["role"] == "assistant"
    assert reply["finish_reason"] == "stop"
    assert "".join(e["text"] for e in mine[3:-2]) == reply["payload"]["content"]
    assert reply["payload"]["content"] == " ".join(f"t{i}" for i in range(30))
    assert mine[-1]["status"] == "completed"
    seqs = [e["seq"] for e in events]
    assert seqs == sorted(seqs)
    assert len(set(seqs)) == len(seqs)


async def test_a_kill_on_the_feed_stops_a_stream_wherever_it_runs(servers, keys, slow_agent):
    streamer, watcher = servers
    chat_key, ops_key = keys
    ws = await open_feed(watcher, ops_key)
    await ws.send(json.dumps({"cmd": "subscribe", "id": "s", "agents": ["slow"]}))
    async with httpx.AsyncClient(timeout=30) as http, http.stream(
        "POST", streamer.v1 + "/chat/completions",
        headers={"Authorization": f"Bearer {chat_key}"},
        json={"model": "slow", "stream": True,
              "messages": [{"role": "user", "content": "go"}]},
    ) as r:
        assert r.status_code == 200
        thread_id = r.headers["x-gaia-thread-id"]
        lines = r.aiter_lines()
        async for line in lines:  # wait until the reply is under way
            if '"content":"w' in line or '"content": "w' in line:
                break
        await events_until(ws, lambda e: e["event"] == "message_delta")
        await ws.send(json.dumps({"cmd": "kill", "id": "k1", "thread_id": thread_id}))
        ack = (await events_until(ws, lambda e: e.get("id") == "k1"))[-1]
        assert ack["event"] == "ack"
        assert ack["running"] is True
        rest = [line async for line in lines]
    tail = "\n".join(rest)
    assert "turn_killed" in tail
    assert "w149" not in tail
    events = await events_until(ws, lambda e: e["event"] == "message"
                                and e["message"]["role"] == "assistant")
    await ws.close()
    reply = events[-1]["message"]
    assert reply["finish_reason"] == "killed"
    thread = await asyncio.to_thread(Thread.objects.get, pk=thread_id)
    assert thread.status == Thread.Status.KILLED
    last = await asyncio.to_thread(lambda: thread.messages.order_by("seq").last())
    assert last.finish_reason == "killed"
    assert 0 < len(last.content) < len(" ".join(f"w{i}" for i in range(150)))


@needs_redis
@pytest.mark.slow  # a management command's start-up: ~7 s
async def test_events_from_a_process_without_a_loop_reach_every_server(
        gaia_server, gaia_server_factory, keys, paced_agent):
    """A management command (no event loop, like a Celery worker) announces a change; feed
    sockets on two other processes hear it."""
    other = gaia_server_factory()
    ops_key = keys[1]
    sockets = [await open_feed(gaia_server, ops_key), await open_feed(other, ops_key)]
    code = ("from agents import services; from agents.models import Agent; "
            "services.agent_changed_announce(agent=Agent.objects.get(slug='paced'), "
            "change='from-a-worker')")
    env = {**os.environ, "DATABASE_URL": live_database_url(), "REDIS_URL": settings.REDIS_URL}
    done = await asyncio.to_thread(subprocess.run, [sys.executable, "manage.py", "shell", "-c",
                                                    code], cwd=ROOT, env=env, timeout=60,
                                   capture_output=True)
    assert done.returncode == 0, done.stderr.decode()
    for ws in sockets:
        events = await events_until(ws, lambda e: e.get("change") == "from-a-worker", 15)
        assert events[-1]["agent"] == "paced"
        await ws.close()


async def test_live_feed_refuses_bad_credentials_with_close_codes(gaia_server, keys):
    chat_key, _ = keys
    cases = [({}, 4001), ({"Authorization": "Bearer nope"}, 4001),
             ({"X-API-Key": chat_key}, 4003)]
    for headers, code in cases:
        async with websockets.connect(ws_url(gaia_server), additional_headers=headers,
                                      open_timeout=10) as ws:
            if not headers:
                await ws.send(json.dumps({"cmd": "subscribe"}))
            with pytest.raises(websockets.exceptions.ConnectionClosed) as closed:
                await asyncio.wait_for(ws.recv(), 10)
            assert closed.value.rcvd.code == code
    with pytest.raises(websockets.exceptions.InvalidStatus):
        await websockets.connect(ws_url(gaia_server), origin="http://evil.example",
                                 additional_headers={"X-API-Key": chat_key})
