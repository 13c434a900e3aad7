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

Listening (one channel per event loop and group, and stopping it) is
:mod:`agents.outlet.listeners`; its functions are importable from here too.

Groups. :data:`FEED_GROUP` carries every feed event to one listener per process, which hands
each batch to the process's feed sockets (:mod:`agents.feed.fanout`; each filters by its
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

from agents.outlet import listeners
from agents.outlet.listeners import (  # the listening half, re-exported for the outlet's callers
    listen as listen,
)
from agents.outlet.listeners import listener_tasks as listener_tasks
from agents.outlet.listeners import listeners_stop as listeners_stop
from agents.outlet.listeners import listening as listening
from agents.outlet.listeners import off_layer_lost as off_layer_lost
from agents.outlet.listeners import on_layer_lost as on_layer_lost

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
# agents.outlet.events, benchmarks.events), once, at import; the schema test in
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
                handle = listeners.sole_handler(layer, group) if group == FEED_GROUP else None
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
    listeners.listener_start(CONTROL_GROUP, _handle_control)


async def control_ready() -> None:
    """Wait until this loop's control listener has joined its group (tests, start-up)."""
    await listeners.listen(CONTROL_GROUP, _handle_control)


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
