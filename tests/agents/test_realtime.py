"""The event outlet (agents.outlet.realtime): sent only after commit, one schema per event type, the
thread-safe hand-off to the event loop; and the registry of in-flight turns (agents.turns)."""

from __future__ import annotations

import asyncio
import itertools
import json
import re
import threading
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from channels.db import database_sync_to_async
from channels.layers import channel_layers, get_channel_layer
from django.db import transaction

from agents import services, turns
from agents.feed import fanout
from agents.infra.database import run_db
from agents.models import Agent, ApiKey, Thread
from agents.outlet import realtime

ISO = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?Z$")


@pytest.fixture
def sent(monkeypatch: pytest.MonkeyPatch) -> list[dict[str, Any]]:
    """Every feed event handed to the outlet (still published for real)."""
    events: list[dict[str, Any]] = []
    real = realtime.send_event

    def record(payload: dict[str, Any]) -> None:
        events.append(payload)
        real(payload)

    monkeypatch.setattr(realtime, "send_event", record)
    return events


@pytest.fixture
def memory_layer(settings: Any) -> Iterator[Any]:
    """An in-memory channel layer of this test's own, whatever REDIS_URL says."""
    settings.CHANNEL_LAYERS = {"default": {"BACKEND": "channels.layers.InMemoryChannelLayer",
                                           "CONFIG": {"capacity": 100_000}}}
    channel_layers.backends.clear()
    yield get_channel_layer()
    channel_layers.backends.clear()


# ---------------------------------------------------------------------------------------------
# On commit


def test_events_wait_for_the_commit(db: Any, echo_agent: Agent, sent: list[dict[str, Any]],
                                    django_capture_on_commit_callbacks: Any) -> None:
    with django_capture_on_commit_callbacks(execute=False) as callbacks:
        services.agent_set_paused(agent=echo_agent, paused=True)
        assert sent == []  # nothing before the commit
    assert len(callbacks) == 3
    for callback in callbacks:
        callback()
    assert [e["event"] for e in sent] == ["config_changed", "agent_changed", "agent_state"]


def test_nothing_is_sent_for_a_rolled_back_write(db: Any, echo_agent: Agent,
                                                 sent: list[dict[str, Any]],
                                                 django_capture_on_commit_callbacks: Any
                                                 ) -> None:
    class Abort(Exception):
        pass

    @transaction.atomic
    def pause_then_fail() -> None:
        services.agent_set_paused(agent=echo_agent, paused=True)
        services.agent_changed_announce(agent=echo_agent, change="updated")
        raise Abort

    with django_capture_on_commit_callbacks(execute=True) as callbacks:
        with pytest.raises(Abort):
            pause_then_fail()
        services.agent_changed_announce(agent=echo_agent, change="committed")
    assert len(callbacks) == 1
    assert [(e["event"], e["change"]) for e in sent] == [("agent_changed", "committed")]
    assert not Agent.objects.get(pk=echo_agent.pk).paused


def test_event_rejects_unknown_types_and_wrong_fields() -> None:
    with pytest.raises(ValueError, match="unknown feed event"):
        realtime.event("nope")
    with pytest.raises(ValueError, match="fields"):
        realtime.event("agent_changed", agent="a")
    with pytest.raises(ValueError, match="fields"):
        realtime.event("config_changed", reason="x", extra=1)


# ---------------------------------------------------------------------------------------------
# One schema per event type (Zulip's event_schema.py in miniature)

OPT_STR = (str, type(None))
OPT_INT = (int, type(None))
MESSAGE = {
    "id": int, "thread_id": str, "seq": int, "from": str, "to": str, "role": str,
    "payload_type": str, "payload": dict, "timestamp": str, "input_tokens": OPT_INT,
    "output_tokens": OPT_INT, "usage_estimated": bool, "finish_reason": OPT_STR,
    "ttft_ms": OPT_INT, "latency_ms": OPT_INT, "response_id": OPT_STR, "dialect": OPT_STR,
    "provider": OPT_STR, "internal": bool, "passages": (list, type(None)), "error": OPT_STR,
    "note": OPT_STR, "dropped_tools": (list, type(None)),
}
THREAD = {
    "id": str, "agent": str, "title": str, "status": str, "participants": list,
    "user": OPT_STR, "message_count": int, "input_tokens": int, "output_tokens": int,
    "usage_estimated": bool, "workspace_root": OPT_STR, "forked_from": OPT_STR,
    "created_at": str, "last_activity": str, "error": OPT_STR, "route": (dict, type(None)),
    "run": OPT_INT,
}
SCHEMAS: dict[str, dict[str, Any]] = {
    "agent_state": {"agent": str, "state": str, "current_thread": OPT_STR, "queue_depth": int},
    "agent_changed": {"agent": str, "change": str},
    "config_changed": {"reason": str},
    "message": {"message": MESSAGE},
    "message_delta": {"thread_id": str, "agent": str, "response_id": str, "text": str,
                      "reasoning": str, "tool_calls": list, "output_chars": int},
    "thread_created": {"thread": THREAD},
    "thread_updated": {"thread_id": str, "agent": str, "status": str, "message_count": int,
                       "last_activity": str, "error": OPT_STR},
    "error": {"thread_id": str, "agent": str, "error": str},
}
STATES = {"idle", "processing", "waiting", "paused", "error"}
THREAD_STATUSES = {s.value for s in Thread.Status}


def check_shape(value: Any, schema: Any, where: str) -> None:
    if isinstance(schema, dict):
        assert isinstance(value, dict), where
        assert set(value) == set(schema), f"{where}: {sorted(value)} != {sorted(schema)}"
        for key, sub in schema.items():
            check_shape(value[key], sub, f"{where}.{key}")
    else:
        assert isinstance(value, schema), f"{where}: {value!r} is not {schema}"


def check_event(event: dict[str, Any]) -> None:
    name = event["event"]
    check_shape({k: v for k, v in event.items() if k not in ("event", "timestamp")},
                SCHEMAS[name], name)
    assert set(SCHEMAS[name]) == set(realtime.EVENT_FIELDS[name])
    assert ISO.match(event["timestamp"]), event["timestamp"]
    if name == "agent_state":
        assert event["state"] in STATES
    if name == "thread_updated":
        assert event["status"] in THREAD_STATUSES
        assert ISO.match(event["last_activity"])
    if name == "thread_created":
        assert event["thread"]["status"] in THREAD_STATUSES
    if name == "message":
        assert ISO.match(event["message"]["timestamp"])


@pytest.mark.django_db(transaction=True)
async def test_every_feed_event_type_matches_its_schema(
        sent: list[dict[str, Any]], make_agent: Callable[..., Any],
        make_key: Callable[..., Any]) -> None:
    def setup() -> tuple[Agent, Agent, ApiKey]:
        echo = make_agent(slug="echo", provider__options={})
        broken = make_agent(slug="broken", provider__name="broken",
                            provider__options={"fail": "after", "fail_after": 1})
        return echo, broken, make_key("ops", scopes=[ApiKey.Scope.OPERATOR])[0]

    echo, broken, key = await database_sync_to_async(setup)()
    realtime.bind()
    first = await turns.inject(to="echo", api_key=key, payload="one two three")
    await first.task
    again = await turns.inject(to="echo", api_key=key, payload="more",
                                    thread_id=first.thread_id)
    await again.task
    failed = await turns.inject(to="broken", api_key=key, payload="a b c")
    await failed.task
    await run_db(services.agent_set_paused, agent=echo, paused=True)
    thread = await database_sync_to_async(Thread.objects.get)(pk=first.thread_id)
    await run_db(services.thread_kill, thread=thread)
    await run_db(services.organism_reload)
    await realtime.flush()
    assert {e["event"] for e in sent} == set(SCHEMAS)
    for event in sent:
        check_event(event)


# ---------------------------------------------------------------------------------------------
# The hand-off from other threads


async def test_events_from_many_threads_arrive_complete_and_in_order(memory_layer: Any
                                                                     ) -> None:
    realtime.bind()
    channel = await memory_layer.new_channel()
    await memory_layer.group_add(realtime.FEED_GROUP, channel)
    threads, per_thread = 8, 400
    start = threading.Barrier(threads)

    def produce(t: int) -> None:
        start.wait()
        for i in range(per_thread):
            realtime.send_event(realtime.event("config_changed", reason=f"{t}:{i}"))

    workers = [threading.Thread(target=produce, args=(t,)) for t in range(threads)]
    for w in workers:
        w.start()
    got: list[str] = []
    batches = 0
    async with asyncio.timeout(20):
        while len(got) < threads * per_thread:
            message = await memory_layer.receive(channel)
            assert message["type"] == realtime.FEED_MESSAGE
            batches += 1
            got += [e["reason"] for e in message["events"]]
    for w in workers:
        w.join()
    assert len(got) == threads * per_thread
    for t in range(threads):
        mine = [int(r.split(":")[1]) for r in got if r.startswith(f"{t}:")]
        assert mine == list(range(per_thread))
    assert batches < len(got)  # events that queued up together left in one message


def test_events_from_a_process_without_a_loop_leave_from_a_thread_of_their_own(
        memory_layer: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """A Celery worker or a management command has no event loop: the outlet runs one on a
    daemon thread and publishes from there."""
    monkeypatch.setattr(realtime, "_bound", None)
    loop = realtime._thread_loop()
    assert loop.is_running()
    assert loop is not None

    async def join() -> str:
        channel = await memory_layer.new_channel()
        await memory_layer.group_add(realtime.FEED_GROUP, channel)
        return channel

    channel = asyncio.run_coroutine_threadsafe(join(), loop).result(5)
    realtime.send_event(realtime.event("config_changed", reason="from a worker"))
    message = asyncio.run_coroutine_threadsafe(memory_layer.receive(channel), loop).result(5)
    assert [e["reason"] for e in message["events"]] == ["from a worker"]


def test_a_worker_loop_hands_over_the_events_queued_at_its_end(
        memory_layer: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """A benchmark worker runs its turns in ``asyncio.run``-style loops: the turns make that
    loop the publishing loop, so the run's last events (committed on a database thread just
    before the loop ends: ``run_finished``) are queued there. Its loop hands them over before
    it closes; a plain ``asyncio.run`` cancelled their sender and pages never heard the run
    end."""
    monkeypatch.setattr(realtime, "_bound", None)

    async def join() -> str:
        channel = await memory_layer.new_channel()
        await memory_layer.group_add(realtime.FEED_GROUP, channel)
        return channel

    channel = asyncio.run(join())
    layer_send = memory_layer.group_send

    async def over_the_network(*args: Any) -> None:  # as Redis takes a round trip
        await asyncio.sleep(0.05)
        await layer_send(*args)

    monkeypatch.setattr(memory_layer, "group_send", over_the_network)

    async def work() -> str:
        realtime.bind()  # as a turn does
        await asyncio.get_running_loop().run_in_executor(
            None, realtime.send_event, realtime.event("config_changed", reason="run ended"))
        return "done"

    assert realtime.run_and_flush(work()) == "done"
    message = asyncio.run(asyncio.wait_for(memory_layer.receive(channel), 5))
    assert [e["reason"] for e in message["events"]] == ["run ended"]


# ---------------------------------------------------------------------------------------------
# The runtime's registry of in-flight turns


@pytest.mark.django_db(transaction=True)
async def test_inflight_registry_holds_a_turn_while_it_runs_and_a_kill_stops_it(
        make_agent: Callable[..., Any]) -> None:
    words = " ".join(f"w{i}" for i in range(300))
    agent = await database_sync_to_async(make_agent)(
        slug="slow", provider__options={"reply": words, "delay_ms": 10})
    realtime.bind()
    injected = await turns.inject(to=agent.slug, payload="go")
    running = turns.inflight_turns().get(injected.thread_id)
    assert running
    assert len(running) == 1
    await asyncio.sleep(0.2)
    turns.thread_kill_local({"thread_id": injected.thread_id})
    await asyncio.wait_for(injected.task, 10)
    assert injected.thread_id not in turns.inflight_turns()
    row = await database_sync_to_async(
        lambda: Thread.objects.get(pk=injected.thread_id).messages.order_by("seq").last())()
    assert row.role == "assistant"
    assert row.finish_reason == "killed"
    assert 0 < len(row.content) < len(words)


@pytest.mark.django_db(transaction=True)
async def test_a_kill_for_another_thread_leaves_a_turn_alone(
        make_agent: Callable[..., Any]) -> None:
    agent = await database_sync_to_async(make_agent)(
        slug="slowish", provider__options={"reply": "a b c d e f", "delay_ms": 20})
    realtime.bind()
    injected = await turns.inject(to=agent.slug, payload="go")
    turns.thread_kill_local({"thread_id": "00000000-0000-0000-0000-000000000000"})
    turns.thread_kill_local({})
    await asyncio.wait_for(injected.task, 10)
    row = await database_sync_to_async(
        lambda: Thread.objects.get(pk=injected.thread_id).messages.order_by("seq").last())()
    assert row.finish_reason == "stop"
    assert row.content == "a b c d e f"
    assert turns.inflight_turns() == {}


# ---------------------------------------------------------------------------------------------
# The fan-out to this process's sockets


def test_feed_texts_are_ascii_and_mean_the_same() -> None:
    event = realtime.event("config_changed", reason="un café… 100 % 雨")
    text = fanout.open_text(event) + "}"
    assert text.isascii()
    assert json.loads(text) == event


@pytest.mark.parametrize("first", [1, 2, 9_990, 9_999, 10_000, 12_345, 19_997, 10**9 + 7])
def test_a_chunk_numbers_its_events_from_the_sockets_next_seq(first: int) -> None:
    events = [realtime.event("config_changed", reason=f"{i}: 100 %d %s {{}}") for i in range(7)]
    chunk = fanout.FeedChunk(events, [fanout.open_text(e) for e in events])
    array = json.loads(chunk.array(first))
    assert array == [{**e, "seq": first + i} for i, e in enumerate(events)]
    assert json.loads(f"[{chunk.items(first)}]") == array
    assert json.loads(f"[{chunk.items(first + 7)},{chunk.items(first)}]") == [
        {**e, "seq": first + 7 + i} for i, e in enumerate(events)] + array


async def test_paced_subscribers_get_a_chunk_per_interval_immediate_ones_every_batch(
        memory_layer: Any) -> None:
    realtime.bind()
    loop = asyncio.get_running_loop()
    immediate: list[list[str]] = []
    paced: list[tuple[float, list[str]]] = []

    def on_batch(batch: fanout.FeedBatch) -> None:
        assert not isinstance(batch, fanout.FeedChunk)
        immediate.append([e["reason"] for e in batch.events])

    def on_chunk(chunk: fanout.FeedBatch) -> None:
        assert isinstance(chunk, fanout.FeedChunk)
        paced.append((loop.time(), [e["reason"] for e in chunk.events]))

    await fanout.feed_join(on_batch)
    await fanout.feed_join(on_chunk, paced=True)
    try:
        start = loop.time()
        sent = []
        for i in range(40):  # over about 0.4 s: four or five intervals
            sent.append(str(i))
            realtime.send_event(realtime.event("config_changed", reason=str(i)))
            await asyncio.sleep(0.01)
        await asyncio.sleep(2 * fanout.FEED_BATCH_INTERVAL)
        assert [r for batch in immediate for r in batch] == sent
        assert [r for _, chunk in paced for r in chunk] == sent
        # The first event after a quiet spell goes at once, then one chunk per interval.
        assert paced[0][0] - start < fanout.FEED_BATCH_INTERVAL / 2
        gaps = [b[0] - a[0] for a, b in itertools.pairwise(paced)]
        assert min(gaps) >= fanout.FEED_BATCH_INTERVAL - 0.01, gaps
        assert len(paced) < len(immediate)
    finally:
        fanout.feed_leave(on_batch)
        fanout.feed_leave(on_chunk)
        await realtime.listeners_stop()


async def test_a_process_alone_on_the_in_memory_layer_hands_events_over_without_it(
        memory_layer: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """With the in-memory layer and this loop's listener its only member, a batch goes to the
    listener's handler directly (no deep copy through the layer), in order; with another
    member too, through the layer."""
    realtime.bind()
    got: list[str] = []

    def on_batch(batch: fanout.FeedBatch) -> None:
        got.extend(e["reason"] for e in batch.events)

    sends: list[str] = []
    real_group_send = memory_layer.group_send

    async def group_send(group: str, message: dict[str, Any]) -> None:
        sends.append(group)
        await real_group_send(group, message)

    monkeypatch.setattr(memory_layer, "group_send", group_send)
    await fanout.feed_join(on_batch)
    try:
        for i in range(5):
            realtime.send_event(realtime.event("config_changed", reason=f"a{i}"))
        await realtime.flush()
        assert got == [f"a{i}" for i in range(5)]
        assert realtime.FEED_GROUP not in sends
        other = await memory_layer.new_channel()
        await memory_layer.group_add(realtime.FEED_GROUP, other)
        for i in range(5):
            realtime.send_event(realtime.event("config_changed", reason=f"b{i}"))
        await realtime.flush()
        async with asyncio.timeout(5):
            while len(got) < 10:
                await asyncio.sleep(0.01)
        assert got == [f"a{i}" for i in range(5)] + [f"b{i}" for i in range(5)]
        assert realtime.FEED_GROUP in sends
        message = await memory_layer.receive(other)
        assert [e["reason"] for e in message["events"]][0] == "b0"
    finally:
        fanout.feed_leave(on_batch)
        await realtime.listeners_stop()


def test_paced_subscribers_get_the_last_state_not_every_step() -> None:
    """Within one interval: an agent's last agent_state, a thread's last thread_updated, no
    delta of a reply whose message is there too; every other event, in order."""
    def state(agent: str, value: str) -> dict[str, Any]:
        return realtime.event("agent_state", agent=agent, state=value, current_thread=None,
                              queue_depth=0)

    def updated(thread: str, status: str) -> dict[str, Any]:
        return realtime.event("thread_updated", thread_id=thread, agent="a", status=status,
                              message_count=2, last_activity=None, error=None)

    def delta(response: str, text: str) -> dict[str, Any]:
        return realtime.event("message_delta", thread_id="t1", agent="a", response_id=response,
                              text=text, reasoning="", tool_calls=[], output_chars=len(text))

    reply = realtime.event("message", message={"role": "assistant", "response_id": "r1",
                                               "payload": {"content": "hi there"}})
    events = [state("a", "processing"), delta("r1", "hi"), state("b", "processing"),
              updated("t1", "active"), delta("r2", "still"), delta("r1", " there"), reply,
              updated("t1", "completed"), state("a", "idle"), updated("t2", "active")]
    texts = [fanout.open_text(e) for e in events]
    kept, kept_texts = fanout._coalesced(events, texts)
    assert kept == [events[i] for i in (2, 4, 6, 7, 8, 9)]
    assert kept_texts == [texts[i] for i in (2, 4, 6, 7, 8, 9)]
    plain = [state("a", "idle"), updated("t1", "active"), delta("r3", "x")]
    assert fanout._coalesced(plain, texts[:3]) == (plain, texts[:3])


def test_the_batch_interval_grows_with_the_sockets_it_serves(settings: Any) -> None:
    settings.GAIA_FEED_BATCH_RATE = 250
    assert fanout.feed_batch_interval(1) == fanout.FEED_BATCH_INTERVAL
    assert fanout.feed_batch_interval(25) == fanout.FEED_BATCH_INTERVAL
    assert fanout.feed_batch_interval(100) == pytest.approx(0.4)
    settings.GAIA_FEED_BATCH_RATE = 1000
    assert fanout.feed_batch_interval(100) == fanout.FEED_BATCH_INTERVAL


async def test_a_full_chunk_leaves_before_its_interval(memory_layer: Any, settings: Any
                                                       ) -> None:
    """A flood reaches paced subscribers as it comes (FEED_BATCH_FLOOD events at a time, in
    chunks of FEED_BATCH_MAX), not as one heap per interval (which would overrun a socket's
    queue though it keeps up)."""
    settings.GAIA_FEED_BATCH_RATE = 0.5  # one subscriber: one chunk per 2 s
    realtime.bind()
    chunks: list[list[str]] = []

    def on_chunk(chunk: fanout.FeedBatch) -> None:
        chunks.append([e["reason"] for e in chunk.events])

    await fanout.feed_join(on_chunk, paced=True)
    try:
        realtime.send_event(realtime.event("config_changed", reason="first"))
        await realtime.flush()
        await asyncio.sleep(0.05)
        assert chunks == [["first"]]  # after a quiet spell: at once
        for burst in range(12):
            for i in range(100):
                realtime.send_event(realtime.event("config_changed", reason=f"{burst}.{i}"))
            await realtime.flush()
        await asyncio.sleep(0.2)
        sizes = [len(c) for c in chunks[1:]]
        assert fanout.FEED_BATCH_FLOOD == 1000  # the numbers below
        assert sizes == [fanout.FEED_BATCH_MAX, fanout.FEED_BATCH_MAX]
        assert [r for c in chunks[1:] for r in c] == [
            f"{b}.{i}" for b in range(12) for i in range(100)][:1000]
    finally:
        fanout.feed_leave(on_chunk)
        await realtime.listeners_stop()


@pytest.mark.django_db(transaction=True)
async def test_a_key_change_just_after_a_socket_joined_is_not_the_pollers_baseline(
        settings: Any) -> None:
    """Without Redis the configuration stamp is polled. A change committed after a socket
    checked its key but before the poller's first read was taken for the starting point,
    and the socket of a key revoked right then stayed open (CI, SQLite). Whatever joined
    before a read is called once that read is done."""
    settings.GAIA_FEED_KEY_CHECK_SECONDS = 0.05
    calls: list[str] = []

    def watcher() -> None:
        calls.append("recheck")

    fanout.feed_on_config_changed(watcher)
    await database_sync_to_async(services.config_changed)()  # before the first read
    try:
        async with asyncio.timeout(10):
            while not calls:
                await asyncio.sleep(0.02)
        await asyncio.sleep(0.3)  # with Redis the change's own event calls it as well
        settled = len(calls)
        await asyncio.sleep(0.3)  # later reads see no change: no more calls
        assert len(calls) == settled
    finally:
        fanout.feed_off_config_changed(watcher)
