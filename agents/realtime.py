"""The event outlet: every change an operator can see leaves Gaia through this module.

Services and the turn runtime call :func:`send_event_on_commit` (inside a transaction: sent once
it commits, never for a rolled-back write) or :func:`send_event` (outside one). Nothing else in
Gaia touches the channel layer for the feed or for control messages; model signals are not used
(``bulk_create`` and ``update()`` never fire them). Zulip's ``send_event_on_commit`` is the model.

Threads. Services run on database threads, and the in-memory channel layer is not thread-safe:
an event is handed to the *publishing loop* with ``call_soon_threadsafe`` and published there.
The publishing loop is the server's event loop (bound by :func:`bind` from async code: the turn
runtime, the feed consumer), else, in a process without one (a Celery worker, a management
command), a daemon thread running a loop of its own. Events published by one process go out in
order, batched: one channel-layer message carries every event that queued up while the
previous one was being sent, so a burst costs one group send, not one per event.

Groups. :data:`FEED_GROUP` carries every feed event to one listener per process, which hands
each batch to the process's feed sockets (:func:`feed_join`; each filters by its
subscription). :data:`CONTROL_GROUP` reaches one listener per process
(:func:`ensure_control_listener`) for cross-process commands: stop a turn, flush caches.
"""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import itertools
import json
import logging
import threading
import weakref
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from django.db import transaction

log = logging.getLogger("gaia.realtime")

FEED_GROUP = "agents.feed"
CONTROL_GROUP = "agents.control"
# The channel-layer message types (Channels maps "agents.feed_events" to the consumer's
# ``agents_feed_events`` handler).
FEED_MESSAGE = "agents.feed_events"
CONTROL_MESSAGE = "agents.control"

# Every event type the feed carries, with the fields each event has besides ``event`` and
# ``timestamp`` (consumers add ``seq``). The schema test in tests/agents/test_realtime.py checks
# every event sent against this table.
EVENT_FIELDS: dict[str, tuple[str, ...]] = {
    "agent_state": ("agent", "state", "current_thread", "queue_depth"),
    "agent_changed": ("agent", "change"),  # created, updated, deleted, paused, resumed
    "config_changed": ("reason",),
    "message": ("message",),
    "message_delta": ("thread_id", "agent", "response_id", "text", "reasoning", "tool_calls",
                      "output_chars"),
    "thread_created": ("thread",),
    "thread_updated": ("thread_id", "agent", "status", "message_count", "last_activity",
                       "error"),
    "error": ("thread_id", "agent", "error"),
    # a request for ``auto`` went to ``agent`` (method: sticky, router, ranker, default)
    "route_chosen": ("model", "agent", "method", "reason", "response_id", "elapsed_ms"),
    # a team's inner work as it happens (step: plan, task, reply, failed, route, answer)
    "team_step": ("team", "thread_id", "response_id", "step", "sender", "recipient", "text"),
    # a knowledge base's document being indexed (status: queued, indexing, ready, error)
    "kb_indexing": ("knowledge_base", "document", "document_id", "status", "progress",
                    "chunks", "error"),
    # the knowledge-base passages a turn gave its model
    "knowledge_used": ("agent", "thread_id", "response_id", "passages"),
    # an agent's provider failed before its first token and the next one takes over
    "provider_fallback": ("agent", "thread_id", "response_id", "failed_provider",
                          "next_provider", "error"),
    # benchmark runs (benchmarks app) publish through here too
    "run_created": ("run",),
    "run_started": ("run",),
    "run_progress": ("run_id", "status", "questions_done", "questions_total", "packets",
                     "bytes"),
    "question_finished": ("run_id", "result"),
    "run_finished": ("run",),
}


def now_iso() -> str:
    return datetime.now(UTC).isoformat().replace("+00:00", "Z")


def event(name: str, **fields: Any) -> dict[str, Any]:
    """A feed event: ``{"event": name, "timestamp": ..., **fields}``.

    Raises ``ValueError`` for an unknown event type or a missing or unexpected field, so a
    typo fails in tests instead of reaching clients malformed."""
    expected = EVENT_FIELDS.get(name)
    if expected is None:
        raise ValueError(f"unknown feed event {name!r}")
    if set(fields) != set(expected):
        raise ValueError(f"{name}: fields {sorted(fields)} != {sorted(expected)}")
    return {"event": name, "timestamp": now_iso(), **fields}


# ---------------------------------------------------------------------------------------------
# Publishing


@dataclass
class _LoopOutlet:
    """The events waiting to leave from one event loop, and the task sending them."""

    pending: list[tuple[str, dict[str, Any]]] = field(default_factory=list)
    sender: asyncio.Task[None] | None = None


_outlets: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, _LoopOutlet] = (
    weakref.WeakKeyDictionary())
_bound: asyncio.AbstractEventLoop | None = None
_own_loop: asyncio.AbstractEventLoop | None = None
_own_lock = threading.Lock()
_background: set[asyncio.Task[Any]] = set()


def bind() -> None:
    """Make the running event loop this process's publishing loop (called from async code
    that serves requests or consumers; cheap enough to call on every turn)."""
    global _bound
    loop = asyncio.get_running_loop()
    if _bound is not loop:
        _bound = loop
        ensure_control_listener()


def _publishing_loop() -> asyncio.AbstractEventLoop:
    try:
        return asyncio.get_running_loop()
    except RuntimeError:
        pass
    if _bound is not None and _bound.is_running():
        return _bound
    return _thread_loop()


def _thread_loop() -> asyncio.AbstractEventLoop:
    """A loop on a daemon thread, for processes that have none of their own (workers)."""
    global _own_loop
    with _own_lock:
        if _own_loop is None or _own_loop.is_closed():
            loop = asyncio.new_event_loop()
            started = threading.Event()

            def run() -> None:
                asyncio.set_event_loop(loop)
                loop.call_soon(started.set)
                loop.run_forever()

            threading.Thread(target=run, name="gaia-realtime", daemon=True).start()
            started.wait()
            _own_loop = loop
            atexit.register(flush_thread_loop)
        return _own_loop


def flush_thread_loop(timeout: float = 5.0) -> None:
    """At exit, let the daemon thread's loop hand over what it still holds: a management
    command (``gaia agents import``) exits right after its last write, and the daemon thread
    would otherwise die with that write's events still queued. Also for tests: the events of
    writes made outside any event loop have reached the channel layer once this returns."""
    loop = _own_loop
    if loop is None or not loop.is_running():
        return
    with contextlib.suppress(Exception):
        # Queued after every call_soon_threadsafe hand-off made so far, so it sees them all.
        asyncio.run_coroutine_threadsafe(flush(), loop).result(timeout)


def _publish(group: str, payload: dict[str, Any]) -> None:
    """Queue ``payload`` (a feed event, or a whole control message) for ``group`` from any
    thread; returns at once."""
    loop = _publishing_loop()
    try:
        running = asyncio.get_running_loop()
    except RuntimeError:
        running = None
    if running is loop:
        _enqueue(loop, group, payload)
    else:
        loop.call_soon_threadsafe(_enqueue, loop, group, payload)


def _enqueue(loop: asyncio.AbstractEventLoop, group: str, payload: dict[str, Any]) -> None:
    outlet = _outlets.get(loop)
    if outlet is None:
        outlet = _outlets[loop] = _LoopOutlet()
    outlet.pending.append((group, payload))
    if outlet.sender is None or outlet.sender.done():
        outlet.sender = loop.create_task(_send_pending(outlet))


def _nobody_in(layer: Any, group: str) -> bool:
    """Whether ``group`` certainly has no member: known for the in-memory layer alone (one
    process, and a member of this process's groups joined them here). Sending to an empty
    group cost the in-memory layer a scan of every channel, on every batch of every turn."""
    from channels.layers import InMemoryChannelLayer

    return isinstance(layer, InMemoryChannelLayer) and not layer.groups.get(group)


def _only_this_loop_listens(layer: Any, group: str) -> bool:
    """Whether the in-memory layer's only member of ``group`` is this loop's listener, with
    nothing of it still queued: then a batch can be handed to the listener's handler at once,
    without the layer's deep copy of every event (a copy per batch: a few % of a turn when
    sockets watch the feed). Same order, same loop, same moment: the copy happened here too."""
    from channels.layers import InMemoryChannelLayer

    if not isinstance(layer, InMemoryChannelLayer):
        return False
    channel = _channels.get((asyncio.get_running_loop(), group))
    if channel is None or list(layer.groups.get(group) or ()) != [channel]:
        return False
    queue = layer.channels.get(channel)
    return queue is None or queue.empty()


async def _send_pending(outlet: _LoopOutlet) -> None:
    from channels.layers import get_channel_layer

    layer = get_channel_layer()
    while outlet.pending:
        batch, outlet.pending = outlet.pending, []
        for group, items in itertools.groupby(batch, key=lambda item: item[0]):
            payloads = [p for _, p in items]
            if _nobody_in(layer, group):
                continue
            try:
                if group == FEED_GROUP and _only_this_loop_listens(layer, group):
                    await _handle_feed({"type": FEED_MESSAGE, "events": payloads})
                elif group == FEED_GROUP:
                    await layer.group_send(group, {"type": FEED_MESSAGE, "events": payloads})
                else:
                    for payload in payloads:
                        await layer.group_send(group, payload)
            except Exception:  # a feed outage must never fail the work that made the event
                log.warning("could not publish %d event(s) to %s", len(payloads), group,
                            exc_info=True)


def send_event(payload: dict[str, Any]) -> None:
    """Publish a feed event now (from any thread or the event loop; never blocks)."""
    _publish(FEED_GROUP, payload)


def send_event_on_commit(payload: dict[str, Any] | Callable[[], dict[str, Any]]) -> None:
    """Publish a feed event once the current transaction commits (at once outside one).

    ``payload`` may be a callable that builds the event then (after the commit, on the
    committing thread), for events that need ids the transaction assigns."""
    def publish() -> None:
        send_event(payload() if callable(payload) else payload)

    transaction.on_commit(publish)


async def flush() -> None:
    """Wait until the events this loop queued have been handed to the channel layer."""
    outlet = _outlets.get(asyncio.get_running_loop())
    while outlet is not None and outlet.sender is not None and not outlet.sender.done():
        await asyncio.shield(outlet.sender)


# ---------------------------------------------------------------------------------------------
# Control messages: one listener per process


ControlHandler = Callable[[dict[str, Any]], Awaitable[None] | None]
_control_handlers: dict[str, ControlHandler] = {}


def on_control(action: str) -> Callable[[ControlHandler], ControlHandler]:
    """Register the handler this process runs when a control message ``action`` arrives."""
    def register(handler: ControlHandler) -> ControlHandler:
        _control_handlers[action] = handler
        return handler
    return register


def send_control(action: str, **fields: Any) -> None:
    """Send a control message to every process (this one included); from any thread."""
    _publish(CONTROL_GROUP, {"type": CONTROL_MESSAGE, "action": action, **fields})


def send_control_on_commit(action: str, **fields: Any) -> None:
    transaction.on_commit(lambda: send_control(action, **fields))


def ensure_control_listener() -> None:
    """Start this loop's control listener if it is not running (async code only)."""
    _ensure_listener(CONTROL_GROUP, _handle_control)


async def control_ready() -> None:
    """Wait until this loop's control listener has joined its group (tests, start-up)."""
    ensure_control_listener()
    await _listening[(asyncio.get_running_loop(), CONTROL_GROUP)].wait()


_listeners: dict[tuple[asyncio.AbstractEventLoop, str], asyncio.Task[None]] = {}
_listening: dict[tuple[asyncio.AbstractEventLoop, str], asyncio.Event] = {}
_channels: dict[tuple[asyncio.AbstractEventLoop, str], str] = {}  # each listener's channel


def _ensure_listener(group: str, handle: Callable[[dict[str, Any]], Awaitable[None]]) -> None:
    """One channel per event loop in ``group``, its messages passed to ``handle``."""
    loop = asyncio.get_running_loop()
    task = _listeners.get((loop, group))
    if task is None or task.done():
        for key in [k for k in _listeners if k[0].is_closed()]:  # loops gone (tests)
            _listeners.pop(key, None)
            _listening.pop(key, None)
            _channels.pop(key, None)
        _listening[(loop, group)] = asyncio.Event()
        task = _listeners[(loop, group)] = loop.create_task(
            _group_listen(group, handle), name=f"gaia-listen-{group}")
        _background.add(task)
        task.add_done_callback(_background.discard)


def listener_tasks() -> set[asyncio.Task[None]]:
    """This loop's listener tasks (control, feed)."""
    loop = asyncio.get_running_loop()
    return {task for (lp, _), task in _listeners.items() if lp is loop}


async def listeners_stop() -> None:
    """Stop this loop's listeners and wait until they have left their groups (a clean
    shutdown; tests)."""
    tasks = listener_tasks()
    for task in tasks:
        task.cancel()
    if tasks:
        await asyncio.wait(tasks, timeout=5)
    loop = asyncio.get_running_loop()
    for key in [k for k in _listeners if k[0] is loop]:
        _listeners.pop(key, None)
        _listening.pop(key, None)
        _channels.pop(key, None)


async def _group_listen(group: str, handle: Callable[[dict[str, Any]], Awaitable[None]]
                        ) -> None:
    from channels.layers import get_channel_layer

    layer = get_channel_layer()
    ready = _listening[(asyncio.get_running_loop(), group)]
    delay = 0.1
    while True:
        channel = None
        try:
            channel = await layer.new_channel()
            await layer.group_add(group, channel)
            _channels[(asyncio.get_running_loop(), group)] = channel
            ready.set()
            delay = 0.1
            while True:
                try:
                    # Group membership expires (a day, in both layers): renew it hourly.
                    async with asyncio.timeout(3600):
                        message = await layer.receive(channel)
                except TimeoutError:
                    await layer.group_add(group, channel)
                    continue
                await handle(message)
        except asyncio.CancelledError:
            _channels.pop((asyncio.get_running_loop(), group), None)
            if channel is not None:
                # Bounded: a Redis connection cut by the cancelled read can leave this
                # waiting forever, and with it the event loop's shutdown.
                with contextlib.suppress(Exception):
                    await asyncio.wait_for(layer.group_discard(group, channel), 2)
            raise
        except Exception:  # the layer went away (Redis restart): join again, with backoff
            task = asyncio.current_task()
            if task is not None and task.cancelling():
                # Cancelled mid-read: redis-py drops the connection and raises
                # ConnectionError instead of CancelledError. Retrying would swallow the
                # cancellation and hang the loop's shutdown.
                raise
            log.warning("listener of %s lost its channel layer; rejoining", group,
                        exc_info=True)
            await asyncio.sleep(delay)
            delay = min(delay * 2, 5.0)


# ---------------------------------------------------------------------------------------------
# The feed's fan-out in each process: one channel in FEED_GROUP per event loop, however many
# sockets listen. A channel per socket would cost, per batch and socket, a copy of the batch
# (in-memory layer), a channel-layer read and Channels' dispatch with its thread hop
# (close_old_connections): with 100 sockets that halved /v1's throughput
# (scripts/perf/feed.py). Each event is also serialised once here, not once per socket.
#
# Two kinds of subscriber. An *immediate* one (a socket sending one event per message) gets
# each FeedBatch as it reaches the process. A *paced* one (a socket sending arrays of events)
# gets at most one FeedChunk per interval (feed_batch_interval): what reached the process
# meanwhile, its texts laid out once with slots for the sockets' own ``seq`` numbers, so that
# 100 such sockets cost one join and one send each, not a Python step per event per socket.

# A paced subscriber's chunks: at most one per interval (seconds), at most this many events.
FEED_BATCH_INTERVAL = 0.1
FEED_BATCH_MAX = 500
# Events waiting for paced subscribers that leave at once, interval or not (two full chunks:
# what a socket's default queue, GAIA_FEED_QUEUE_MAX, holds). Lower cost /v1 a measurable
# share more messages at full load (scripts/perf/feed.py --side-by-side, medians of 6: the
# feed cost /v1 10.5 % at 500, 9.6 % at 1,000).
FEED_BATCH_FLOOD = 2 * FEED_BATCH_MAX

# ASCII (\u escapes): one non-ASCII character (a title's "…") made a whole message a wide
# string, which uvicorn's UTF-8 encode then walked a character at a time: 75 µs for a
# 150-event message against 1.3 µs, per socket (scripts/perf/feed.py).
_dumps = json.JSONEncoder(ensure_ascii=True, separators=(",", ":")).encode


def open_text(event: dict[str, Any]) -> str:
    """``event``'s JSON text without its closing brace: a socket appends its own ``seq``."""
    return _dumps(event)[:-1]


@dataclass
class FeedBatch:
    """Feed events as they reached this process, and each one's :func:`open_text` (made
    once per process, however many sockets send it)."""

    events: list[dict[str, Any]]
    texts: list[str]


# A socket's seq numbers written into a FeedChunk's text: numbers below 10,000 come from
# SEQ_SMALL, larger ones are str(seq // 10,000) followed by SEQ_LOW[seq % 10,000] (built on
# first use; 20,000 short strings). Formatting them per event per socket (str(), or a
# %-template, which copies its text a character at a time) was most of what a batch socket
# cost; looked up, a 150-event message takes 7 µs instead of 50 (scripts/perf/feed.py).
_SEQ_SPAN = 10_000
_seq_tables: tuple[list[str], list[str]] | None = None


def _seq_parts(first: int, n: int) -> tuple[list[str], list[str]] | None:
    """The high and low parts of seq ``first`` .. ``first + n - 1``, or None when they cross a
    multiple of 10,000 (then the caller writes them out)."""
    global _seq_tables
    high, low = divmod(first, _SEQ_SPAN)
    if low + n > _SEQ_SPAN:
        return None
    if _seq_tables is None:
        _seq_tables = ([str(i) for i in range(_SEQ_SPAN)],
                       [f"{i:04d}" for i in range(_SEQ_SPAN)])
    small, padded = _seq_tables
    if high:
        return [str(high)] * n, padded[low:low + n]
    return [""] * n, small[low:low + n]


class FeedChunk(FeedBatch):
    """Up to :data:`FEED_BATCH_MAX` feed events for paced subscribers, the same for all of
    them. :meth:`array` is a socket's message: the events as a JSON array, numbered from the
    socket's next ``seq``."""

    def __init__(self, events: list[dict[str, Any]], texts: list[str], *,
                 whole: FeedBatch | None = None) -> None:
        super().__init__(events, texts)
        # The interval's events before _coalesced (on its first chunk only): what a socket
        # with a subscription filter picks from, since whether an event is superseded can
        # depend on another it does not take.
        self.whole = whole
        # Every event's open text, three slots apart: a socket fills the two slots after
        # each (its seq's high and low parts) and joins the list.
        self._frame: list[str] | None = None

    def _fill(self, first: int, opening: str, closing: str) -> str:
        frame = self._frame
        n = len(self.texts)
        if frame is None:
            frame = self._frame = [""] * (3 * n + 1)
            frame[0::3] = [("}," if i else "") + text + ',"seq":'
                           for i, text in enumerate(self.texts)] + ["}"]
        parts = frame.copy()
        parts[0] = opening + parts[0]
        parts[-1] += closing
        seq = _seq_parts(first, n)
        if seq is None:
            parts[2::3] = map(str, range(first, first + n))
        else:
            parts[1::3], parts[2::3] = seq
        return "".join(parts)

    def array(self, first: int) -> str:
        """``[event, ...]`` with seq ``first``, ``first + 1``..."""
        return self._fill(first, "[", "]")

    def items(self, first: int) -> str:
        """The events, comma-separated, without the brackets (for an array that holds more)."""
        return self._fill(first, "", "")


FeedSubscriber = Callable[[FeedBatch], None]


@dataclass
class _Fanout:
    """One event loop's feed subscribers, and the events waiting for its paced ones."""

    immediate: list[FeedSubscriber] = field(default_factory=list)
    paced: list[FeedSubscriber] = field(default_factory=list)
    events: list[dict[str, Any]] = field(default_factory=list)
    texts: list[str] = field(default_factory=list)
    last: float = float("-inf")  # when the paced ones were last handed a chunk
    timer: asyncio.TimerHandle | None = None


_fanouts: dict[asyncio.AbstractEventLoop, _Fanout] = {}


async def feed_join(subscriber: FeedSubscriber, *, paced: bool = False) -> None:
    """Call ``subscriber`` (on this loop) with the feed's events from now on: every
    :class:`FeedBatch` as it arrives, or, if ``paced``, a :class:`FeedChunk` at most every
    :func:`feed_batch_interval` (the first at once, a flood sooner). Returns once this
    process's listener has joined the feed group (nothing committed after this returns is
    missed). ``subscriber`` must not block: it runs inline."""
    loop = asyncio.get_running_loop()
    for gone in [lp for lp in _fanouts if lp.is_closed()]:
        del _fanouts[gone]
    fanout = _fanouts.setdefault(loop, _Fanout())
    (fanout.paced if paced else fanout.immediate).append(subscriber)
    _ensure_listener(FEED_GROUP, _handle_feed)
    await _listening[(loop, FEED_GROUP)].wait()


def feed_leave(subscriber: FeedSubscriber) -> None:
    """Stop calling ``subscriber``; idempotent."""
    fanout = _fanouts.get(asyncio.get_running_loop())
    if fanout is None:
        return
    for subscribers in (fanout.immediate, fanout.paced):
        with contextlib.suppress(ValueError):
            subscribers.remove(subscriber)


def _call_each(subscribers: list[FeedSubscriber], batch: FeedBatch) -> None:
    for subscriber in list(subscribers):
        try:
            subscriber(batch)
        except Exception:
            log.exception("feed subscriber failed")


async def _handle_feed(message: dict[str, Any]) -> None:
    loop = asyncio.get_running_loop()
    fanout = _fanouts.get(loop)
    if fanout is None or message.get("type") != FEED_MESSAGE:
        return
    if not (fanout.immediate or fanout.paced):
        return
    events = message["events"]
    texts = [open_text(event) for event in events]
    if fanout.immediate:
        _call_each(fanout.immediate, FeedBatch(events, texts))
    if fanout.paced:
        fanout.events += events
        fanout.texts += texts
        if len(fanout.events) >= FEED_BATCH_FLOOD:
            # A flood leaves now: it would otherwise reach each socket as one heap per
            # interval, past its queue's bound (lagged) though it keeps up.
            if fanout.timer is not None:
                fanout.timer.cancel()
            _pace(fanout)
        elif fanout.timer is None:
            wait = max(0.0, fanout.last + feed_batch_interval(len(fanout.paced)) - loop.time())
            fanout.timer = loop.call_later(wait, _pace, fanout)


def feed_batch_interval(paced: int) -> float:
    """The time between two chunks for ``paced`` subscribers: :data:`FEED_BATCH_INTERVAL`, or
    longer when that would send them more than ``GAIA_FEED_BATCH_RATE`` messages a second in
    all (a message costs the server about as much as the events in it: scripts/perf/feed.py)."""
    from django.conf import settings

    return max(FEED_BATCH_INTERVAL, paced / settings.GAIA_FEED_BATCH_RATE)


def _coalesced(events: list[dict[str, Any]], texts: list[str]
               ) -> tuple[list[dict[str, Any]], list[str]]:
    """An interval's events less those a later one in it supersedes, for paced subscribers
    that take every event (who asked for the state at most every interval, not every
    step; a socket with a subscription filter picks from every event): of an agent's
    ``agent_state`` events the last, of a thread's ``thread_updated`` the last, and no
    ``message_delta`` of a reply whose stored ``message`` is in the same interval (it holds
    the whole text). Everything else is kept, in order."""
    last: dict[tuple[str, Any], int] = {}
    states = 0
    replied: set[Any] = set()
    for i, event in enumerate(events):
        kind = event["event"]
        if kind == "agent_state":
            last["agent", event["agent"]] = i
            states += 1
        elif kind == "thread_updated":
            last["thread", event["thread_id"]] = i
            states += 1
        elif kind == "message" and event["message"].get("role") == "assistant":
            replied.add(event["message"].get("response_id"))
    if len(last) == states and not replied:  # nothing superseded
        return events, texts
    keep_events, keep_texts = [], []
    for i, (event, text) in enumerate(zip(events, texts, strict=True)):
        kind = event["event"]
        if ((kind == "agent_state" and last["agent", event["agent"]] != i)
                or (kind == "thread_updated" and last["thread", event["thread_id"]] != i)
                or (kind == "message_delta" and event["response_id"] in replied)):
            continue
        keep_events.append(event)
        keep_texts.append(text)
    return keep_events, keep_texts


def _pace(fanout: _Fanout) -> None:
    """Hand the paced subscribers what gathered since the last time, in chunks of at most
    :data:`FEED_BATCH_MAX` events."""
    fanout.timer = None
    fanout.last = asyncio.get_running_loop().time()
    whole = FeedBatch(fanout.events, fanout.texts)
    fanout.events, fanout.texts = [], []
    events, texts = _coalesced(whole.events, whole.texts)
    for at in range(0, len(events), FEED_BATCH_MAX):
        _call_each(fanout.paced, FeedChunk(events[at:at + FEED_BATCH_MAX],
                                           texts[at:at + FEED_BATCH_MAX],
                                           whole=None if at else whole))


async def _handle_control(message: dict[str, Any]) -> None:
    handler = _control_handlers.get(message.get("action", ""))
    if handler is None:
        return
    try:
        result = handler(message)
        if asyncio.iscoroutine(result):
            await result
    except Exception:
        log.exception("control message %r failed", message.get("action"))
