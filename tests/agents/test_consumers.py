"""The operator feed's protocol (``/ws``) through Gaia's whole ASGI stack (origin check, session
middleware, routing) with Channels' ``WebsocketCommunicator``, on the configured channel layer
(in-memory, or Redis when ``REDIS_URL`` is set)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest
from channels.db import database_sync_to_async
from channels.layers import channel_layers, get_channel_layer
from channels.testing import WebsocketCommunicator

from agents import services
from agents.feed import fanout
from agents.feed.consumers import CLOSE_FORBIDDEN, CLOSE_UNAUTHENTICATED, FeedConsumer
from agents.infra.database import run_db
from agents.models import Agent, ApiKey, Message, Thread
from agents.outlet import realtime
from gaia_site.asgi import application

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.timeout(60)]

TIMEOUT = 10


@pytest.fixture
def operator_key(make_key: Callable[..., tuple[Any, str]]) -> tuple[ApiKey, str]:
    return make_key("ops", scopes=[ApiKey.Scope.OPERATOR])


@pytest.fixture
def chat_key(make_key: Callable[..., tuple[Any, str]]) -> str:
    return make_key("chat-only", scopes=[ApiKey.Scope.CHAT])[1]


@pytest.fixture
def slow_agent(make_agent: Callable[..., Any]) -> Agent:
    words = " ".join(f"w{i}" for i in range(200))
    return make_agent(slug="slow", provider__name="slow-provider",
                      provider__options={"reply": words, "delay_ms": 20})


@pytest.fixture
def broken_agent(make_agent: Callable[..., Any]) -> Agent:
    return make_agent(slug="broken", provider__name="broken",
                      provider__options={"fail": "after", "fail_after": 2})


@pytest.fixture
def other_agent(make_agent: Callable[..., Any]) -> Agent:
    return make_agent(slug="other", provider__name="other", provider__options={})


@pytest.fixture
async def layer() -> AsyncIterator[Any]:
    """A channel layer of this test's own (a Redis layer's connections belong to the event loop
    that opened them, and an in-memory one would keep earlier tests' channels)."""
    channel_layers.backends.clear()
    yield get_channel_layer()
    # Let the consumers finish closing (Channels hops to a thread on disconnect), then stop
    # this loop's listeners cleanly: cancelling a channels-redis read in the middle of the
    # loop's shutdown can leave its connection, and the shutdown, waiting.
    # Gaia's own tasks (listeners and their reads, pollers) and channels-redis's receive
    # helpers run until stopped: waiting for them cost every test here 1.5 s.
    others = {t for t in asyncio.all_tasks() if t is not asyncio.current_task()
              and not t.get_name().startswith("gaia-")
              and t.get_coro().__qualname__ not in ("Lock.acquire", "Queue.get")}
    if others:
        await asyncio.wait(others, timeout=1.5)
    await realtime.listeners_stop()
    channel_layers.backends.clear()


def communicator(*headers: tuple[str, str], path: str = "/ws") -> WebsocketCommunicator:
    # The fixtures' writes (an agent, a key) published their events from a loop of their own
    # (no loop runs while sync fixtures do): let those reach the layer now, not the socket
    # this opens. Blocks this loop briefly; the publishing loop is another thread's.
    realtime.flush_thread_loop()
    return WebsocketCommunicator(
        application, path, headers=[(k.encode(), v.encode()) for k, v in headers])


async def recv(comm: WebsocketCommunicator, timeout: float = TIMEOUT) -> dict[str, Any]:
    """The next event (first those a command() read past while waiting for its answer)."""
    held = getattr(comm, "held", None)
    if held:
        return held.pop(0)
    return await comm.receive_json_from(timeout=timeout)


async def recv_until(comm: WebsocketCommunicator, pred: Callable[[dict[str, Any]], bool],
                     timeout: float = TIMEOUT) -> list[dict[str, Any]]:
    """Every event up to and including the first for which ``pred`` holds."""
    seen: list[dict[str, Any]] = []
    async with asyncio.timeout(timeout):
        while True:
            seen.append(await recv(comm, timeout))
            if pred(seen[-1]):
                return seen


async def closed_with(comm: WebsocketCommunicator) -> int:
    out = await comm.receive_output(TIMEOUT)
    assert out["type"] == "websocket.close", out
    await comm.disconnect()  # the client's side of the closing handshake
    return out.get("code")


async def open_feed(key: str) -> tuple[WebsocketCommunicator, dict[str, Any]]:
    comm = communicator(("authorization", f"Bearer {key}"))
    connected, _ = await comm.connect(TIMEOUT)
    assert connected
    hello = await recv(comm)
    assert hello["event"] == "connected"
    return comm, hello


async def command(comm: WebsocketCommunicator, **content: Any) -> dict[str, Any]:
    """Send a command and return its answer (ack or error); feed events that came first are
    kept for the next recv()."""
    await comm.send_json_to(content)
    events = await recv_until(comm, lambda e: e["event"] in ("ack", "error")
                              and e.get("id") == content.get("id"))
    comm.held = [*getattr(comm, "held", []), *events[:-1]]
    return events[-1]


def is_thread_done(thread_id: str) -> Callable[[dict[str, Any]], bool]:
    return lambda e: (e["event"] == "thread_updated" and e["thread_id"] == thread_id
                      and e["status"] != "active")


# ---------------------------------------------------------------------------------------------
# Authentication and origin


async def test_feed_with_a_bearer_operator_key_gets_the_snapshot_first(layer, operator_key,
                                                                      echo_agent):
    comm, hello = await open_feed(operator_key[1])
    assert hello["seq"] == 1
    assert hello["timestamp"].endswith("Z")
    assert hello["organism"]["agent_count"] == 1
    assert [a["name"] for a in hello["agents"]] == ["echo"]
    assert hello["agents"][0]["state"] == "idle"
    assert hello["threads"] == []
    await comm.disconnect()


async def test_feed_snapshot_lists_active_threads(layer, operator_key, echo_agent):
    thread = await database_sync_to_async(Thread.objects.create)(
        agent=echo_agent, session_key="s1", status=Thread.Status.ACTIVE)
    comm, hello = await open_feed(operator_key[1])
    assert [t["id"] for t in hello["threads"]] == [str(thread.pk)]
    await comm.disconnect()


async def test_feed_accepts_the_x_api_key_header(layer, operator_key):
    comm = communicator(("x-api-key", operator_key[1]))
    assert (await comm.connect(TIMEOUT))[0]
    assert (await recv(comm))["event"] == "connected"
    await comm.disconnect()


async def test_feed_auth_by_first_message(layer, operator_key):
    comm = communicator(("origin", "http://localhost"), ("host", "localhost"))
    assert (await comm.connect(TIMEOUT))[0]
    assert await comm.receive_nothing(0.2)  # nothing before authentication
    await comm.send_json_to({"cmd": "auth", "api_key": operator_key[1]})
    hello = await recv(comm)
    assert hello["event"] == "connected"
    assert hello["seq"] == 1
    await comm.disconnect()


@pytest.mark.parametrize("headers", [
    (("authorization", "Bearer sk-gaia-nope_nope"),),
    (("x-api-key", "garbage"),),
])
async def test_feed_with_a_bad_key_is_closed_4001(layer, headers):
    comm = communicator(*headers)
    assert (await comm.connect(TIMEOUT))[0]
    assert await closed_with(comm) == CLOSE_UNAUTHENTICATED


async def test_feed_with_a_revoked_key_is_closed_4001(layer, operator_key):
    await database_sync_to_async(services.api_key_revoke)(key=operator_key[0])
    comm = communicator(("authorization", f"Bearer {operator_key[1]}"))
    assert (await comm.connect(TIMEOUT))[0]
    assert await closed_with(comm) == CLOSE_UNAUTHENTICATED


async def test_feed_with_a_chat_only_key_is_closed_4003(layer, chat_key):
    comm = communicator(("authorization", f"Bearer {chat_key}"))
    assert (await comm.connect(TIMEOUT))[0]
    assert await closed_with(comm) == CLOSE_FORBIDDEN


async def test_feed_auth_message_with_a_chat_key_is_closed_4003(layer, chat_key):
    comm = communicator()
    assert (await comm.connect(TIMEOUT))[0]
    await comm.send_json_to({"cmd": "auth", "api_key": chat_key})
    assert await closed_with(comm) == CLOSE_FORBIDDEN


@pytest.mark.parametrize("first", [
    {"cmd": "subscribe"}, {"cmd": "auth"}, {"cmd": "auth", "api_key": 5}, "not json", "[1]",
])
async def test_feed_first_message_not_auth_is_closed_4001(layer, first):
    comm = communicator()
    assert (await comm.connect(TIMEOUT))[0]
    if isinstance(first, dict):
        await comm.send_json_to(first)
    else:
        await comm.send_to(text_data=first)
    assert await closed_with(comm) == CLOSE_UNAUTHENTICATED


async def test_feed_without_credentials_is_closed_4001_after_the_auth_window(layer, settings):
    settings.GAIA_FEED_AUTH_SECONDS = 0.3
    comm = communicator()
    assert (await comm.connect(TIMEOUT))[0]
    assert await comm.receive_nothing(0.1)
    assert await closed_with(comm) == CLOSE_UNAUTHENTICATED


async def _session_cookie(client: Any, *, staff: bool) -> str:
    from django.contrib.auth import get_user_model

    def login() -> str:
        user = get_user_model().objects.create_user(
            "alice", password="pw-alice-123", is_staff=staff)
        client.force_login(user)
        return client.cookies["sessionid"].value

    return await database_sync_to_async(login)()


async def test_feed_with_a_staff_session(layer, client):
    cookie = await _session_cookie(client, staff=True)
    comm = communicator(("cookie", f"sessionid={cookie}"), ("origin", "http://localhost"),
                        ("host", "localhost"))
    assert (await comm.connect(TIMEOUT))[0]
    assert (await recv(comm))["event"] == "connected"
    await comm.disconnect()


async def test_feed_with_a_non_staff_session_is_closed_4003(layer, client):
    cookie = await _session_cookie(client, staff=False)
    comm = communicator(("cookie", f"sessionid={cookie}"), ("origin", "http://localhost"),
                        ("host", "localhost"))
    assert (await comm.connect(TIMEOUT))[0]
    assert await closed_with(comm) == CLOSE_FORBIDDEN


async def test_feed_from_a_foreign_origin_is_refused_at_the_handshake(layer, operator_key):
    comm = communicator(("origin", "http://evil.example"),
                        ("authorization", f"Bearer {operator_key[1]}"))
    connected, _ = await comm.connect(TIMEOUT)
    assert not connected


async def test_feed_from_another_port_of_the_same_host_is_refused(layer, operator_key):
    """Same-origin means the port too: a page on 127.0.0.1:3000 is not Gaia's."""
    comm = communicator(("origin", "http://127.0.0.1:3000"), ("host", "127.0.0.1:8000"),
                        ("authorization", f"Bearer {operator_key[1]}"))
    assert not (await comm.connect(TIMEOUT))[0]


async def test_feed_from_a_listed_origin(layer, operator_key, settings):
    settings.GAIA_OPERATOR_ALLOWED_ORIGINS = ["http://127.0.0.1:3000"]
    comm = communicator(("origin", "http://127.0.0.1:3000"), ("host", "127.0.0.1:8000"),
                        ("x-api-key", operator_key[1]))
    assert (await comm.connect(TIMEOUT))[0]
    assert (await recv(comm))["event"] == "connected"
    await comm.disconnect()


async def test_feed_from_a_rebound_host_is_refused(layer, operator_key):
    """DNS rebinding: a page of evil.example resolved to Gaia is its own origin, but on a host
    Gaia does not serve (ALLOWED_HOSTS)."""
    comm = communicator(("origin", "http://evil.example:8000"), ("host", "evil.example:8000"),
                        ("x-api-key", operator_key[1]))
    assert not (await comm.connect(TIMEOUT))[0]


async def test_feed_from_its_own_origin_and_without_one(layer, operator_key):
    for headers in ([("origin", "http://127.0.0.1:8000"), ("host", "127.0.0.1:8000")], []):
        comm = communicator(*headers, ("x-api-key", operator_key[1]))
        assert (await comm.connect(TIMEOUT))[0]
        assert (await recv(comm))["event"] == "connected"
        await comm.disconnect()


# ---------------------------------------------------------------------------------------------
# Events


async def test_feed_events_of_a_turn_in_order_with_seq(layer, operator_key, echo_agent):
    comm, _ = await open_feed(operator_key[1])
    ack = await command(comm, cmd="inject", id="i1", to="echo", payload="hello feed")
    assert ack["event"] == "ack"
    assert ack["cmd"] == "inject"
    thread_id = ack["thread_id"]
    events = await recv_until(comm, is_thread_done(thread_id))
    names = [e["event"] for e in events]
    assert names[:3] == ["thread_created", "message", "agent_state"]
    assert names[-1] == "thread_updated"
    assert "message_delta" in names
    seqs = [e["seq"] for e in events]
    assert seqs == sorted(seqs)
    assert sorted([*seqs, ack["seq"]]) == list(range(2, 3 + len(events)))  # 1: connected
    created = events[0]["thread"]
    assert created["id"] == thread_id
    assert created["agent"] == "echo"
    user_msg = events[1]["message"]
    assert user_msg["id"] == ack["message_id"]
    assert user_msg["payload"] == {"content": "hello feed"}
    assert user_msg["from"] == f"operator key:ops ({operator_key[0].prefix})"  # who sent it
    assert user_msg["to"] == "echo"
    assert events[2] == {**events[2], "agent": "echo", "state": "processing",
                         "current_thread": thread_id}
    delta = "".join(e["text"] for e in events if e["event"] == "message_delta")
    assert delta == "hello feed"
    reply = next(e["message"] for e in events
                 if e["event"] == "message" and e["message"]["role"] == "assistant")
    assert reply["payload"]["content"] == "hello feed"
    assert reply["finish_reason"] == "stop"
    assert events[-1]["status"] == "completed"
    assert events[-1]["message_count"] == 2
    idle = await recv(comm)
    assert idle["event"] == "agent_state"
    assert idle["state"] == "idle"
    assert all(e["timestamp"].endswith("Z") for e in events)
    await comm.disconnect()


async def test_feed_error_event_when_a_turn_fails(layer, operator_key, broken_agent):
    comm, _ = await open_feed(operator_key[1])
    ack = await command(comm, cmd="inject", id=1, to="broken", payload="x y z")
    events = await recv_until(comm, lambda e: e["event"] == "error" and "id" not in e)
    done = next(e for e in events if e["event"] == "thread_updated"
                and e["thread_id"] == ack["thread_id"] and e["status"] != "active")
    assert done["status"] == "error"
    assert done["error"]
    assert events[-1]["thread_id"] == ack["thread_id"]
    assert events[-1]["agent"] == "broken"
    assert events[-1]["error"] == done["error"]
    await comm.disconnect()


async def test_feed_config_events_on_pause_and_resume(layer, operator_key, echo_agent):
    comm, _ = await open_feed(operator_key[1])
    ack = await command(comm, cmd="pause", id="p", agent="echo")
    assert ack["event"] == "ack"
    assert ack["paused"] is True
    events = await recv_until(comm, lambda e: e["event"] == "agent_state")
    assert {"config_changed", "agent_changed"} <= {e["event"] for e in events}
    changed = next(e for e in events if e["event"] == "agent_changed")
    assert changed["agent"] == "echo"
    assert changed["change"] == "paused"
    assert events[-1]["state"] == "paused"
    assert (await database_sync_to_async(Agent.objects.get)(slug="echo")).paused
    ack = await command(comm, cmd="resume", id="r", agent="echo")
    assert ack["paused"] is False
    events = await recv_until(comm, lambda e: e["event"] == "agent_state")
    assert events[-1]["state"] == "idle"
    assert not (await database_sync_to_async(Agent.objects.get)(slug="echo")).paused
    await comm.disconnect()


async def test_feed_reaches_every_socket(layer, operator_key, echo_agent):
    socks = [(await open_feed(operator_key[1]))[0] for _ in range(3)]
    await database_sync_to_async(services.agent_changed_announce)(agent=echo_agent,
                                                                  change="updated")
    for comm in socks:
        got = await recv(comm)
        assert got["event"] == "agent_changed"
        assert got["seq"] == 2
        await comm.disconnect()


# ---------------------------------------------------------------------------------------------
# Commands


async def test_subscribe_filters_by_event_type(layer, operator_key, echo_agent):
    comm, _ = await open_feed(operator_key[1])
    ack = await command(comm, cmd="subscribe", id="s", events=["thread_updated"])
    comm.held = []  # sent before the subscription changed
    assert ack["event"] == "ack"
    assert ack["events"] == ["thread_updated"]
    assert ack["threads"] == []
    assert ack["agents"] == []
    ack = await command(comm, cmd="inject", id="i", to="echo", payload="hi")
    events = await recv_until(comm, is_thread_done(ack["thread_id"]))
    assert {e["event"] for e in events} == {"thread_updated"}
    await comm.disconnect()


async def test_subscribe_filters_by_thread(layer, operator_key, echo_agent):
    comm, _ = await open_feed(operator_key[1])
    first = await command(comm, cmd="inject", id="a", to="echo", payload="one")
    await recv_until(comm, is_thread_done(first["thread_id"]))
    await command(comm, cmd="subscribe", id="s", threads=[first["thread_id"]],
                  events=["message", "thread_created", "thread_updated"])
    comm.held = []  # sent before the subscription changed
    other = await command(comm, cmd="inject", id="b", to="echo", payload="two")
    again = await command(comm, cmd="inject", id="c", to="echo", payload="three",
                          thread_id=first["thread_id"])
    events = await recv_until(comm, is_thread_done(first["thread_id"]))
    assert {e.get("thread_id") or e.get("message", {}).get("thread_id") for e in events
            if e["event"] != "ack"} == {first["thread_id"]}
    assert other["thread_id"] != first["thread_id"] == again["thread_id"]
    await comm.disconnect()


async def test_subscribe_filters_by_agent(layer, operator_key, echo_agent, other_agent):
    comm, _ = await open_feed(operator_key[1])
    await command(comm, cmd="subscribe", id="s", agents=["other"])
    comm.held = []  # sent before the subscription changed
    await command(comm, cmd="inject", id="a", to="echo", payload="ignored")
    ack = await command(comm, cmd="inject", id="b", to="other", payload="seen")
    events = await recv_until(comm, is_thread_done(ack["thread_id"]))
    feed = [e for e in events if e["event"] != "ack"]
    assert {"thread_created", "message", "agent_state", "thread_updated"} <= {
        e["event"] for e in feed}
    for e in feed:
        agents = {e.get("agent"), e.get("thread", {}).get("agent"),
                  e.get("message", {}).get("from"), e.get("message", {}).get("to")}
        assert "other" in agents, e
        assert "echo" not in agents, e
    await comm.disconnect()


@pytest.mark.parametrize(("content", "code"), [
    ({"cmd": "subscribe", "events": ["nope"]}, "unknown_event"),
    ({"cmd": "subscribe", "threads": "abc"}, "invalid_request_error"),
    ({"cmd": "inject", "payload": "x"}, "invalid_request_error"),
    ({"cmd": "inject", "to": "echo"}, "invalid_request_error"),
    ({"cmd": "inject", "to": "echo", "payload": "   "}, "invalid_request_error"),
    ({"cmd": "inject", "to": "ghost", "payload": "x"}, "agent_not_found"),
    ({"cmd": "inject", "to": "echo", "payload": "x", "thread_id": "nope"}, "invalid"),
    ({"cmd": "inject", "to": "echo", "payload": "x",
      "thread_id": "00000000-0000-0000-0000-000000000000"}, "thread_not_found"),
    ({"cmd": "kill"}, "invalid_request_error"),
    ({"cmd": "kill", "thread_id": "00000000-0000-0000-0000-000000000000"}, "thread_not_found"),
    ({"cmd": "pause", "agent": "ghost"}, "agent_not_found"),
    ({"cmd": "resume"}, "invalid_request_error"),
    ({"cmd": "explode"}, "unknown_command"),
    ({"no": "cmd"}, "unknown_command"),
])
async def test_bad_commands_get_an_error_with_their_id(layer, operator_key, echo_agent,
                                                      content, code):
    comm, _ = await open_feed(operator_key[1])
    reply = await command(comm, id="bad-1", **content)
    assert reply["event"] == "error", reply
    assert reply["id"] == "bad-1"
    assert reply["code"] == code or (code == "invalid_request_error" and reply["code"])
    assert reply["error"]
    ack = await command(comm, cmd="subscribe", id="still-open")  # the socket stays open
    assert ack["event"] == "ack"
    await comm.disconnect()


async def test_bad_json_gets_an_error_and_the_socket_stays(layer, operator_key):
    comm, _ = await open_feed(operator_key[1])
    await comm.send_to(text_data="{not json")
    err = await recv(comm)
    assert err["event"] == "error"
    assert err["code"] == "parse_error"  # as the operator API calls a body it cannot read
    assert err["id"] is None
    await comm.send_to(bytes_data=b"\x00\x01")
    assert (await recv(comm))["code"] == "parse_error"
    assert (await command(comm, cmd="subscribe", id=7))["event"] == "ack"
    await comm.disconnect()


async def test_inject_with_an_object_payload_and_into_an_existing_thread(layer, operator_key,
                                                                        echo_agent):
    comm, _ = await open_feed(operator_key[1])
    first = await command(comm, cmd="inject", id=1, to="echo", payload={"name": "Dan"})
    await recv_until(comm, is_thread_done(first["thread_id"]))
    second = await command(comm, cmd="inject", id=2, to="echo", payload={"text": "again"},
                           thread_id=first["thread_id"])
    assert second["thread_id"] == first["thread_id"]
    await recv_until(comm, is_thread_done(first["thread_id"]))
    rows = await database_sync_to_async(lambda: list(
        Message.objects.filter(thread_id=first["thread_id"]).order_by("seq")
        .values_list("role", "content")))()
    assert rows == [("user", '{"name": "Dan"}'), ("assistant", '{"name": "Dan"}'),
                    ("user", "again"), ("assistant", "again")]
    await comm.disconnect()


async def test_kill_stops_a_running_turn(layer, operator_key, slow_agent):
    await realtime.control_ready()
    comm, _ = await open_feed(operator_key[1])
    ack = await command(comm, cmd="inject", id="i", to="slow", payload="go")
    thread_id = ack["thread_id"]
    await recv_until(comm, lambda e: e["event"] == "message_delta")
    kill = await command(comm, cmd="kill", id="k", thread_id=thread_id)
    assert kill == {**kill, "event": "ack", "cmd": "kill", "running": True,
                    "thread_id": thread_id}
    events = await recv_until(comm, lambda e: e["event"] == "message"
                              and e["message"]["role"] == "assistant")
    reply = events[-1]["message"]
    assert reply["finish_reason"] == "killed"
    assert 0 < len(reply["payload"]["content"]) < 800
    thread = await database_sync_to_async(Thread.objects.get)(pk=thread_id)
    assert thread.status == Thread.Status.KILLED
    assert thread.lock_expires_at is None
    await comm.disconnect()


async def test_kill_of_an_idle_thread_is_acked_not_running(layer, operator_key, echo_agent):
    comm, _ = await open_feed(operator_key[1])
    ack = await command(comm, cmd="inject", id="i", to="echo", payload="x")
    await recv_until(comm, is_thread_done(ack["thread_id"]))
    kill = await command(comm, cmd="kill", id="k", thread_id=ack["thread_id"])
    assert kill["running"] is False
    updated = await recv_until(comm, lambda e: e["event"] == "thread_updated")
    assert updated[-1]["status"] == "killed"
    await comm.disconnect()


async def test_auth_command_after_authentication_is_acked(layer, operator_key):
    comm, _ = await open_feed(operator_key[1])
    assert (await command(comm, cmd="auth", id="a", api_key="whatever"))["event"] == "ack"
    await comm.disconnect()


async def test_batch_mode_sends_arrays_of_events_in_order(layer, operator_key, echo_agent):
    comm = communicator(("x-api-key", operator_key[1]), path="/ws?batch=1")
    assert (await comm.connect(TIMEOUT))[0]
    first = await comm.receive_json_from(TIMEOUT)
    assert isinstance(first, list)
    assert [e["event"] for e in first] == ["connected"]
    await comm.send_json_to({"cmd": "inject", "id": "b", "to": "echo", "payload": "one two"})
    events = list(first)
    async with asyncio.timeout(TIMEOUT):
        while not any(e["event"] == "thread_updated" and e["status"] == "completed"
                      for e in events):
            got = await comm.receive_json_from(TIMEOUT)
            assert isinstance(got, list)
            assert got
            events += got
    assert [e["seq"] for e in events] == list(range(1, len(events) + 1))
    names = [e["event"] for e in events]
    assert "ack" in names
    assert names.index("thread_created") < names.index("message")
    # A delta of the reply may be left out when its stored message went in the same array.
    reply = next(e["message"] for e in events
                 if e["event"] == "message" and e["message"]["role"] == "assistant")
    assert reply["payload"]["content"] == "one two"
    await comm.disconnect()


# ---------------------------------------------------------------------------------------------
# A slow client


class GatedFeed(FeedConsumer):
    """A feed whose client reads only when the test opens the gate (a slow client)."""

    queue_max = 5
    gate: asyncio.Event

    async def send(self, text_data: Any = None, bytes_data: Any = None,
                   close: bool = False) -> None:
        payload = json.loads(text_data)
        first = payload[0] if isinstance(payload, list) else payload  # ?batch=1: arrays
        if first["event"] != "connected":
            await self.gate.wait()
        await super().send(text_data=text_data, bytes_data=bytes_data, close=close)


async def test_a_slow_client_is_told_how_many_events_it_missed(layer, operator_key,
                                                               echo_agent):
    from channels.auth import AuthMiddlewareStack

    GatedFeed.gate = asyncio.Event()
    slow = WebsocketCommunicator(AuthMiddlewareStack(GatedFeed.as_asgi()), "/ws",
                                 headers=[(b"x-api-key", operator_key[1].encode())])
    assert (await slow.connect(TIMEOUT))[0]
    assert (await recv(slow))["event"] == "connected"
    fast, _ = await open_feed(operator_key[1])
    for i in range(20):
        await run_db(services.agent_changed_announce, agent=echo_agent, change=f"c{i}")
    # The fast socket is not held up by the slow one.
    fast_events = await recv_until(fast, lambda e: e.get("change") == "c19")
    assert [e["change"] for e in fast_events] == [f"c{i}" for i in range(20)]
    GatedFeed.gate.set()
    got = await recv_until(slow, lambda e: e["event"] == "lagged")
    # One event is in the sender's hands when the queue fills, five wait in the queue.
    assert [e["change"] for e in got[:-1]] == [f"c{i}" for i in range(6)]
    assert got[-1]["missed"] == 14
    assert [e["seq"] for e in got] == list(range(2, 2 + len(got)))
    await run_db(services.agent_changed_announce, agent=echo_agent, change="after")
    assert (await recv(slow))["change"] == "after"
    await slow.disconnect()
    await fast.disconnect()


async def test_a_slow_batch_client_is_told_how_many_events_it_missed(layer, operator_key,
                                                                     echo_agent):
    """Batch mode queues whole chunks of events; one that does not fit is queued event by
    event up to the bound, the rest counted."""
    from channels.auth import AuthMiddlewareStack

    GatedFeed.gate = asyncio.Event()
    slow = WebsocketCommunicator(AuthMiddlewareStack(GatedFeed.as_asgi()), "/ws?batch=1",
                                 headers=[(b"x-api-key", operator_key[1].encode())])
    assert (await slow.connect(TIMEOUT))[0]
    first = await slow.receive_json_from(TIMEOUT)
    assert first[0]["event"] == "connected"
    # An earlier test's background work may announce itself in the same first batch (seen
    # once in CI, SQLite leg): those events come before the test's own, whose seqs follow.
    base = first[-1]["seq"]
    for i in range(20):
        await run_db(services.agent_changed_announce, agent=echo_agent, change=f"c{i}")
    await run_db(services.agent_changed_announce, agent=echo_agent, change="last")
    await asyncio.sleep(3 * fanout.FEED_BATCH_INTERVAL)  # every chunk handed over
    GatedFeed.gate.set()
    got: list[dict[str, Any]] = []
    async with asyncio.timeout(TIMEOUT):
        while not got or got[-1]["event"] != "lagged":
            message = await slow.receive_json_from(TIMEOUT)
            assert isinstance(message, list)
            got += message
    changes = [e["change"] for e in got if e["event"] == "agent_changed"]
    # Whatever fitted, in order and from the start; the lagged event counts the rest.
    assert changes == [f"c{i}" for i in range(len(changes))]
    assert 1 <= len(changes) <= 6
    assert got[-1]["missed"] == 21 - len(changes)
    assert [e["seq"] for e in got] == list(range(base + 1, base + 1 + len(got)))
    await run_db(services.agent_changed_announce, agent=echo_agent, change="after")
    message = await slow.receive_json_from(TIMEOUT)
    assert [e["change"] for e in message] == ["after"]
    assert message[0]["seq"] == got[-1]["seq"] + 1
    await slow.disconnect()


async def test_a_filtered_batch_socket_gets_only_what_it_subscribed_to(layer, operator_key,
                                                                      echo_agent,
                                                                      other_agent):
    comm = communicator(("x-api-key", operator_key[1]), path="/ws?batch=1")
    assert (await comm.connect(TIMEOUT))[0]
    await comm.receive_json_from(TIMEOUT)  # connected
    await comm.send_json_to({"cmd": "subscribe", "id": 1, "agents": ["other"],
                             "events": ["agent_changed"]})
    (ack,) = await comm.receive_json_from(TIMEOUT)
    assert ack["event"] == "ack"
    for agent in (echo_agent, other_agent, echo_agent, other_agent):
        await run_db(services.agent_changed_announce, agent=agent, change=agent.slug)
    got: list[dict[str, Any]] = []
    async with asyncio.timeout(TIMEOUT):
        while len(got) < 2:
            got += await comm.receive_json_from(TIMEOUT)
    assert [(e["event"], e["agent"]) for e in got] == [("agent_changed", "other")] * 2
    assert [e["seq"] for e in got] == [3, 4]
    await comm.disconnect()


async def test_a_filtered_batch_socket_gets_every_step_it_asked_for(layer, operator_key,
                                                                   echo_agent):
    """A socket taking only deltas gets them all, though the reply's message (which
    supersedes them for sockets that take everything) went in the same interval."""
    comm = communicator(("x-api-key", operator_key[1]), path="/ws?batch=1")
    assert (await comm.connect(TIMEOUT))[0]
    await comm.receive_json_from(TIMEOUT)  # connected
    await comm.send_json_to({"cmd": "subscribe", "id": 1, "events": ["message_delta"]})
    (ack,) = await comm.receive_json_from(TIMEOUT)
    assert ack["event"] == "ack"
    await comm.send_json_to({"cmd": "inject", "id": 2, "to": "echo", "payload": "one two"})
    text, got = "", []
    async with asyncio.timeout(TIMEOUT):
        while text != "one two":
            for event in await comm.receive_json_from(TIMEOUT):
                got.append(event)
                if event["event"] == "message_delta":
                    text += event["text"]
    assert {e["event"] for e in got} == {"ack", "message_delta"}
    await comm.disconnect()
