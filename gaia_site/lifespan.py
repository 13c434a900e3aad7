"""ASGI lifespan: what a server process does when it starts and when it is told to stop.

At start it chains its own handler before the server's for SIGTERM and SIGINT (uvicorn installs
its handlers before the lifespan starts), so from the moment a stop is asked for, turns that
the server later cancels are recorded as interrupted rather than as clients that left, and
streams still running shortly before the server's graceful period ends (uvicorn's
``--timeout-graceful-shutdown``, after which it cuts every connection) are stopped first, so
that each client gets its dialect's error frame and end of stream rather than a cut; and it
schedules one sweep for turns a dead process left behind (their leases expire a lease's length
after it died); and it starts the benchmark queue's periodic check (:mod:`benchmarks.worker`:
runs whose worker died are recovered even when no worker is left, and the process beats for
its embedded worker, if it has one). At shutdown, after the server's graceful period, it
waits until every turn of the process is recorded and its lease released, then closes its MCP
connections (the stdio servers it started stop). With ``GAIA_PIN_CORES`` it pins the process to
a core of its own (:mod:`gaia_site.affinity`).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
import threading
from typing import Any

from django.conf import settings

log = logging.getLogger("gaia.lifespan")

SHUTDOWN_RECORD_SECONDS = 10.0  # at most this long to record the turns still running
# Streams still running this long before the server's graceful period ends (at most half of
# it) are stopped with their dialect's error frame: time to send it and record the turn.
STREAM_STOP_MARGIN_SECONDS = 1.0


def _backends_preload() -> None:
    """The backends of the provider kinds in use, imported (agents.backends.backends_preload)."""
    from django.db import connection

    from agents.backends import backends_preload
    from agents.models import Provider

    try:
        kinds = list(Provider.objects.order_by().values_list("kind", flat=True).distinct())
    except Exception:  # no table yet (a server before its migrations): first use imports
        log.exception("reading the provider kinds failed")
        return
    finally:
        connection.close()
    backends_preload(kinds)


def grace_period(handler: Any) -> float | None:
    """The graceful-shutdown period of the server whose signal handler is ``handler``:
    uvicorn's ``--timeout-graceful-shutdown`` (its handler is a method of its ``Server``).
    ``None`` when unknown or unbounded (the server then waits for every stream to end)."""
    config = getattr(getattr(handler, "__self__", None), "config", None)
    grace = getattr(config, "timeout_graceful_shutdown", None)
    return float(grace) if isinstance(grace, int | float) else None


class Lifespan:
    """Wraps an ASGI application; answers the ``lifespan`` scope, passes everything else."""

    def __init__(self, app: Any) -> None:
        self.app = app
        self._sweep: asyncio.Task[None] | None = None
        self._stopping = False  # a stop signal came: the streams' stop is scheduled

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "lifespan":
            await self.app(scope, receive, send)
            return
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                self.startup()
                # the providers' HTTP libraries (their TLS certificates) before any request:
                # on a thread, the first call to a provider loaded them on the event loop
                await asyncio.to_thread(_backends_preload)
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                await self.shutdown()
                await send({"type": "lifespan.shutdown.complete"})
                return

    def startup(self) -> None:
        from agents import turns
        from agents.outlet import realtime

        loop = asyncio.get_running_loop()
        if threading.current_thread() is threading.main_thread():
            for sig in (signal.SIGTERM, signal.SIGINT):
                previous = signal.getsignal(sig)

                def handler(signum: int, frame: Any, previous: Any = previous) -> None:
                    turns.drain_begin()
                    self._streams_stop_later(loop, grace_period(previous))
                    if callable(previous):
                        previous(signum, frame)

                signal.signal(sig, handler)
        if settings.GAIA_PIN_CORES:
            from gaia_site.affinity import pin_to_free_core

            pin_to_free_core()
        # This loop publishes the process's events (and runs the turns of its benchmark
        # worker: agents.turns.turn_ask) from now on, not the first request's.
        realtime.bind()
        self._sweep = loop.create_task(self._sweep_later())
        from benchmarks.worker import embedded_worker_beat, reaper_start

        reaper_start(embedded_worker_beat)

    def _streams_stop_later(self, loop: asyncio.AbstractEventLoop, grace: float | None) -> None:
        """Once per stop: schedule, from the signal handler, the stop of the turns still
        running shortly before the server's graceful period of ``grace`` seconds ends."""
        if self._stopping or grace is None or loop.is_closed():
            return
        self._stopping = True
        delay = max(0.0, grace - min(STREAM_STOP_MARGIN_SECONDS, grace / 2))
        from agents import turns

        loop.call_soon_threadsafe(loop.call_later, delay, turns.drain_interrupt)

    async def _sweep_later(self) -> None:
        """Once a lease's length after start, record the turns a dead process left."""
        from agents import services
        from agents.infra.database import run_db

        await asyncio.sleep(settings.GAIA_THREAD_LOCK_SECONDS * 1.2)
        try:
            found = await run_db(services.thread_leases_sweep)
        except Exception:
            log.exception("sweeping abandoned turns failed")
            return
        if found:
            log.warning("recorded %d turns interrupted by a stopped server process", found)

    async def shutdown(self) -> None:
        from agents import turns
        from agents.infra.database import run_db
        from agents.outlet import realtime
        from benchmarks.worker import embedded_worker_beat, reaper_stop

        beat = embedded_worker_beat()
        with contextlib.suppress(Exception):  # this process's embedded worker stops with it
            await asyncio.wait_for(run_db(reaper_stop, beat[0] if beat else None), 5)
        if self._sweep is not None:
            self._sweep.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._sweep
        await turns.drain_wait(SHUTDOWN_RECORD_SECONDS)
        with contextlib.suppress(Exception):  # MCP servers this process started end with it
            await asyncio.wait_for(turns.tools_close(), 5)
        with contextlib.suppress(Exception):
            await asyncio.wait_for(realtime.flush(), 2)
