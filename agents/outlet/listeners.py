"""The outlet's listening half: one channel per event loop in a group (the feed, control
messages), its messages passed to a handler; rejoined with backoff when the channel layer
goes away, and always stopped when cancelled (see :func:`_layer_io`).

Publishing is :mod:`agents.outlet.realtime`, which re-exports what callers use of this."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

log = logging.getLogger("gaia.realtime")
T = TypeVar("T")

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
    listener_start(group, handle)
    await _listening[(asyncio.get_running_loop(), group)].wait()


def listener_start(group: str, handle: Handler) -> None:
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
        _tasks.add(task)
        task.add_done_callback(_tasks.discard)


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


async def _layer_io(call: Awaitable[T], limit: float | None = None) -> T:
    """Await a channel-layer call in a task of its own, so that a cancellation (or
    ``limit`` seconds, raised as ``TimeoutError``) always ends the caller.

    Why not a plain ``await``: redis-py sends every command through ``asyncio.wait_for`` when
    a socket timeout is set, and Python 3.11's ``wait_for`` drops a cancellation that arrives
    as the send completes (CPython gh-86296; 3.12 rebuilt it). A listener cancelled while it
    joined its group went on into BZPOPMIN, re-armed every 5 s, for ever: 5 s of every feed
    consumer test's teardown (4 in 5 runs, measured), and a CI run hung twice in the event
    loop's shutdown. Here the caller stops waiting at once and :func:`_stop` cancels the call
    until it ends. One task more per message received: a few µs, the feed's batches only."""
    caller = asyncio.current_task()
    task = asyncio.get_running_loop().create_task(
        call, name=f"{caller.get_name() if caller else 'gaia'}:io")  # type: ignore[arg-type]
    try:
        done, _ = await asyncio.wait({task}, timeout=limit)
    except asyncio.CancelledError:
        await _stop(task)
        raise
    if not done:
        await _stop(task)
        raise TimeoutError
    return task.result()


async def _stop(task: asyncio.Future[Any], patience: float = 5.0) -> None:
    """Cancel ``task`` until it has ended (a cancel may be dropped, see :func:`_layer_io`),
    for at most ``patience`` seconds; a second cancellation of the caller does not cut this
    short (the caller re-raises its own)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + patience
    while not task.done() and loop.time() < deadline:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await asyncio.wait({task}, timeout=0.05)
    if task.done() and not task.cancelled():
        task.exception()  # retrieved, so asyncio does not log it as never retrieved


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
            await _layer_io(layer.group_add(group, channel))
            _channels[(asyncio.get_running_loop(), group)] = channel
            ready.set()
            if failures:
                log.warning("listener of %s rejoined its channel layer", group)
            delay, failures = 0.1, 0
            while True:
                try:
                    # Group membership expires (a day, in both layers): renew it hourly.
                    message = await _layer_io(layer.receive(channel), limit=3600)
                except TimeoutError:
                    await _layer_io(layer.group_add(group, channel))
                    continue
                await handle(message)
        except asyncio.CancelledError:
            _channels.pop((asyncio.get_running_loop(), group), None)
            if channel is not None:
                # Bounded: a Redis connection cut by the cancelled read can leave this
                # waiting forever, and with it the event loop's shutdown.
                with contextlib.suppress(Exception):
                    await _layer_io(layer.group_discard(group, channel), limit=2)
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


_tasks: set[asyncio.Task[None]] = set()  # a reference to each listener while it runs


def sole_handler(layer: Any, group: str) -> Handler | None:
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
