"""The turns running in this process: by thread, with their leases kept alive, stopped by an
operator's kill from any process, and recorded when the server stops.

A turn's lease on its thread is short (``GAIA_THREAD_LOCK_SECONDS``) and renewed while the turn
runs, by one task per process for all its turns (one write per renewal period, none per turn):
a process that dies stops renewing, and its threads are free a lease later.

A kill reaches every process as a control message (:mod:`agents.outlet.realtime`); each stops the
turns it runs on that thread (:func:`thread_kill_local`), on the event loop the turn runs on.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any, Protocol

from django.conf import settings

from agents import selectors, services
from agents.infra.database import run_db
from agents.outlet import realtime

log = logging.getLogger("gaia.turns")


class Registered(Protocol):
    """What the registry needs of a turn (:class:`agents.turns.runtime.Turn`)."""

    agent: Any
    lease_token: str
    closed: bool
    loop: asyncio.AbstractEventLoop

    def kill(self) -> None: ...

    def interrupt(self) -> None: ...

    def publish_snapshot(self) -> None: ...


# The turns running in this process, by thread id (known once the turn is stored).
_inflight: dict[str, set[Registered]] = {}
_background: set[asyncio.Task[Any]] = set()
_keeper: asyncio.Task[None] | None = None
_draining = False  # set when the server has been told to stop (gaia_site.lifespan)


def inflight_turns() -> dict[str, set[Registered]]:
    """The turns running in this process, by thread id (read-only use)."""
    return _inflight


def background_keep(task: asyncio.Task[Any]) -> None:
    """Hold a reference to ``task`` until it is done (a turn's close, an inject's reply), so
    that the server's drain waits for it."""
    _background.add(task)
    task.add_done_callback(_background.discard)


def register(turn: Registered, thread_id: str) -> None:
    """``turn`` runs on ``thread_id`` and holds its lease (renewed from now on)."""
    _inflight.setdefault(thread_id, set()).add(turn)
    _keeper_ensure()


def unregister(turn: Registered, thread_id: str) -> None:
    turns = _inflight.get(thread_id)
    if turns is not None:
        turns.discard(turn)
        if not turns:
            del _inflight[thread_id]


def agent_busy_elsewhere(turn: Registered, thread_id: str | None) -> str | None:
    """Another thread this process's turns of the same agent hold, if any: the agent is still
    at work there, and the end of ``turn`` need not ask the database so (under load there
    nearly always is one)."""
    for other_id, turns in _inflight.items():
        if other_id != thread_id and any(
                t.agent.pk == turn.agent.pk and not t.closed for t in turns):
            return other_id
    return None


def draining() -> bool:
    """Whether the server has been told to stop (its cancelled turns are ``interrupted``)."""
    return _draining


# -- leases ---------------------------------------------------------------------------------


def lease_renew_interval() -> float:
    return max(0.05, settings.GAIA_THREAD_LOCK_SECONDS / 3)


def _lease_tokens() -> list[str]:
    return [turn.lease_token for turns in _inflight.values() for turn in turns
            if turn.lease_token and not turn.closed]


def _keeper_ensure() -> None:
    """Start this process's lease keeper on the running loop unless it runs already."""
    global _keeper
    if _keeper is None or _keeper.done() or _keeper.get_loop() is not asyncio.get_running_loop():
        _keeper = asyncio.get_running_loop().create_task(_keep_leases(), name="gaia-leases")


async def _keep_leases() -> None:
    """Renew the leases of every turn of this process until none is left."""
    while True:
        await asyncio.sleep(lease_renew_interval())
        tokens = _lease_tokens()
        if not tokens:
            return
        try:
            await run_db(services.thread_leases_renew, tokens=tokens,
                         lease_seconds=settings.GAIA_THREAD_LOCK_SECONDS)
        except Exception:  # a database hiccup: try again next period, the leases still hold
            log.exception("could not renew %d thread leases", len(tokens))


# -- stopping -------------------------------------------------------------------------------


def drain_begin() -> None:
    """The server is stopping: turns that have not finished when it cancels them are recorded
    as ``interrupted`` (not as a client that went away)."""
    global _draining
    _draining = True


def drain_interrupt() -> None:
    """Stop every turn of this process now, recorded as ``interrupted`` with its partial
    reply; a streaming client gets its dialect's error frame (and the stream's end) while the
    connection is still open: the server calls this before its graceful period runs out and
    it cuts what is left (gaia_site.lifespan)."""
    drain_begin()
    for turns in list(_inflight.values()):
        for turn in list(turns):
            _on_its_loop(turn, turn.interrupt)


async def drain_wait(within: float) -> None:
    """Wait (at most ``within`` seconds) until every turn of this process is recorded and
    its lease released; turns still running are stopped and recorded as interrupted."""
    drain_interrupt()
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        pending = [t for t in _background if not t.done()]
        if not pending and not _inflight:
            return
        if pending:
            await asyncio.wait(pending, timeout=max(0.0, deadline - time.monotonic()))
        else:
            await asyncio.sleep(0.02)  # an interrupted turn is on its way to closing


def _on_its_loop(turn: Registered, call: Any) -> None:
    """Run ``call`` on the loop ``turn`` runs on (a benchmark worker's turns may run on a loop
    of their own): a turn's queue and tasks belong to its loop."""
    try:
        running = asyncio.get_running_loop()
    except RuntimeError:
        running = None
    if turn.loop is running:
        call()
    elif not turn.loop.is_closed():
        turn.loop.call_soon_threadsafe(call)


@realtime.on_control("reload")
def reload_local(message: dict[str, Any]) -> None:
    """Drop this process's cached keys and agents (``organism/reload``). Provider clients are
    kept: they are keyed by their provider's last edit already, and dropping the local
    model's would load it again for nothing."""
    selectors.access_cache_drop()


def snapshots_request(*, thread_ids: Any) -> None:
    """Ask every process for the replies streaming on these threads, whole (a page that
    subscribed to them missed their earlier deltas): :func:`thread_snapshot_local`."""
    for thread_id in sorted(thread_ids)[:50]:
        realtime.send_control("turn_snapshot", thread_id=str(thread_id))


@realtime.on_control("turn_snapshot")
def thread_snapshot_local(message: dict[str, Any]) -> None:
    """A page subscribed to ``message["thread_id"]``: each turn of this process running on it
    publishes its reply so far (the page missed the deltas sent before it subscribed)."""
    for turn in list(_inflight.get(str(message.get("thread_id")), ())):
        _on_its_loop(turn, turn.publish_snapshot)


@realtime.on_control("turn_kill")
def thread_kill_local(message: dict[str, Any]) -> None:
    """Stop every turn of this process running on ``message["thread_id"]``."""
    for turn in list(_inflight.get(str(message.get("thread_id")), ())):
        _on_its_loop(turn, turn.kill)
