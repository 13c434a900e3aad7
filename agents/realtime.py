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
each batch to the process's feed sockets (:mod:`agents.fanout`; each filters by its
subscription). :data:`CONTROL_GROUP` reaches one listener per process
(:func:`ensure_control_listener`) for cross-process commands: stop a turn, flush caches.
"""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import itertools
import logging
import threading
import weakref
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, TypeVar

from django.db import transaction

log = logging.getLogger("gaia.realtime")
T = TypeVar("T")

FEED_GROUP = "agents.feed"
CONTROL_GROUP = "agents.control"
# The channel-layer message types (Channels maps "agents.feed_events" to the consumer's
# ``agents_feed_events`` handler).
FEED_MESSAGE = "agents.feed_events"
CONTROL_MESSAGE = "agents.control"

# Every event type the feed carries, with the fields each event has besides ``event`` and
# ``timestamp`` (consumers add ``seq``). Each app declares its own (:func:`event_types_declare`:
# agents.events, benchmarks.events), once, at import; the schema test in
# tests/agents/test_realtime.py checks every event sent against this table.
EVENT_FIELDS: dict[str, tuple[str, ...]] = {}


def event_types_declare(types: dict[str, tuple[str, ...]]) -> None:
    """Declare feed event types and their fields (an app's ``events`` module, at import).
    Raises ``ValueError`` for a type another app declared with other fields."""
    for name, fields in types.items():
        if EVENT_FIELDS.get(name, fields) != fields:
            raise ValueError(f"feed event {name!r} is declared twice, with other fields")
        EVENT_FIELDS[name] = fields


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


def serving_loop() -> asyncio.AbstractEventLoop | None:
    """The loop :func:`bind` made this process's publishing loop (the server's), if it runs."""
    return _bound if _bound is not None and _bound.is_running() else None


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


def _only_this_loop_listens(layer: Any, group: str) -> Handler | None:
    """The handler of this loop's listener of ``group`` if it is the in-memory layer's only
    member, with nothing of it still queued: then a batch can be handed to it at once, without
    the layer's deep copy of every event (a copy per batch: a few % of a turn when sockets
    watch the feed). Same order, same loop, same moment: the copy happened here too."""
    from channels.layers import InMemoryChannelLayer

    if not isinstance(layer, InMemoryChannelLayer):
        return None
    key = (asyncio.get_running_loop(), group)
    channel = _channels.get(key)
    if channel is None or list(layer.groups.get(group) or ()) != [channel]:
        return None
    queue = layer.channels.get(channel)
    return _handlers.get(key) if queue is None or queue.empty() else None


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
                handle = _only_this_loop_listens(layer, group) if group == FEED_GROUP else None
                if handle is not None:
                    await handle({"type": FEED_MESSAGE, "events": payloads})
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


def run_and_flush(main: Awaitable[T]) -> T:
    """``asyncio.run(main)`` for a worker's work, handing over the events it queued before
    the loop closes. Turns bind the running loop as the publishing loop, so the events of a
    service that commits on a database thread near the end (a run's ``run_finished``) are
    queued on this loop: ``asyncio.run`` would cancel their sender and lose them."""
    async def run() -> T:
        try:
            return await main
        finally:
            await asyncio.sleep(0)  # hand-offs already made by other threads are queued now
            await flush()

    return asyncio.run(run())


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


Handler = Callable[[dict[str, Any]], Awaitable[None]]
_listeners: dict[tuple[asyncio.AbstractEventLoop, str], asyncio.Task[None]] = {}
_handlers: dict[tuple[asyncio.AbstractEventLoop, str], Handler] = {}
_listening: dict[tuple[asyncio.AbstractEventLoop, str], asyncio.Event] = {}
_channels: dict[tuple[asyncio.AbstractEventLoop, str], str] = {}  # each listener's channel
# Told (on the listener's loop) when a group's listener loses the channel layer.
_lost: dict[tuple[asyncio.AbstractEventLoop, str], list[Callable[[], None]]] = {}


def on_layer_lost(group: str, callback: Callable[[], None]) -> None:
    """Call ``callback`` (on this loop, inline) if this loop's listener of ``group`` loses
    the channel layer (Redis went away): what it passed on has stopped until it rejoins."""
    _lost.setdefault((asyncio.get_running_loop(), group), []).append(callback)


def off_layer_lost(group: str, callback: Callable[[], None]) -> None:
    with contextlib.suppress(ValueError, KeyError):
        _lost[(asyncio.get_running_loop(), group)].remove(callback)


def listening(group: str) -> bool:
    """Whether this loop's listener of ``group`` is in its group now."""
    ready = _listening.get((asyncio.get_running_loop(), group))
    return ready is not None and ready.is_set()


async def listen(group: str, handle: Handler) -> None:
    """Pass the messages of ``group`` to ``handle`` on this loop (one channel per loop, however
    many callers); returns once the listener has joined the group."""
    _ensure_listener(group, handle)
    await _listening[(asyncio.get_running_loop(), group)].wait()


def _ensure_listener(group: str, handle: Handler) -> None:
    """One channel per event loop in ``group``, its messages passed to ``handle``."""
    loop = asyncio.get_running_loop()
    task = _listeners.get((loop, group))
    if task is None or task.done():
        for key in [k for k in _listeners if k[0].is_closed()]:  # loops gone (tests)
            _listeners.pop(key, None)
            _listening.pop(key, None)
            _channels.pop(key, None)
            _handlers.pop(key, None)
        _listening[(loop, group)] = asyncio.Event()
        _handlers[(loop, group)] = handle
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
        _handlers.pop(key, None)


async def _group_listen(group: str, handle: Handler) -> None:
    from channels.layers import get_channel_layer

    layer = get_channel_layer()
    loop = asyncio.get_running_loop()
    ready = _listening[(loop, group)]
    delay = 0.1
    failures = 0
    while True:
        channel = None
        try:
            channel = await layer.new_channel()
            await layer.group_add(group, channel)
            _channels[(asyncio.get_running_loop(), group)] = channel
            ready.set()
            if failures:
                log.warning("listener of %s rejoined its channel layer", group)
            delay, failures = 0.1, 0
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
            # One traceback when the layer goes, then a line per try (it was two tracebacks
            # every 2.5 s for as long as Redis was down).
            log.warning("listener of %s lost its channel layer; rejoining (try %d)", group,
                        failures + 1, exc_info=not failures)
            failures += 1
            was_ready = ready.is_set()
            ready.clear()  # new feed sockets wait (and are told), not joined to nothing
            if was_ready:
                for callback in list(_lost.get((loop, group)) or ()):
                    try:
                        callback()
                    except Exception:
                        log.exception("layer-lost callback failed")
            await asyncio.sleep(delay)
            delay = min(delay * 2, 5.0)


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
