"""Running the synchronous ORM from async code on a few long-lived database threads.

Django's ``sync_to_async`` gives every ASGI request its own thread, and so its own database
connection, opened and closed per request; with SQLite, concurrent requests then fight over
the write lock with the driver's busy-wait sleeps (up to 100 ms each), and throughput falls as
concurrency rises. Here every service call from the async side runs on one of a fixed set of
threads that keep their connections: one thread for SQLite (writes are serial anyway, so no
lock contention within the process), ``GAIA_DB_THREADS`` (default 4) for PostgreSQL.
"""

from __future__ import annotations

import asyncio
import contextvars
import functools
import itertools
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, ParamSpec, TypeVar

from django.conf import settings
from django.db import connections

P = ParamSpec("P")
R = TypeVar("R")

_lock = threading.Lock()
_executors: list[ThreadPoolExecutor] = []
_cycle: Any = None
_last_used: dict[int, float] = {}
IDLE_CHECK_SECONDS = 30.0


def _size() -> int:
    if settings.DATABASES["default"]["ENGINE"].endswith("sqlite3"):
        return 1
    return max(1, int(getattr(settings, "GAIA_DB_THREADS", 4)))


def _executor() -> ThreadPoolExecutor:
    global _cycle
    if _cycle is None:
        with _lock:
            if _cycle is None:
                _executors.extend(
                    ThreadPoolExecutor(max_workers=1, thread_name_prefix=f"gaia-db-{i}")
                    for i in range(_size())
                )
                _cycle = itertools.cycle(_executors)
    return next(_cycle)


def _call(fn: Callable[..., R], args: Any, kwargs: Any) -> R:
    ident = threading.get_ident()
    last = _last_used.get(ident)
    now = time.monotonic()
    if last is not None and now - last > IDLE_CHECK_SECONDS:
        # A connection idle for a while may have been dropped by the server: check it.
        for conn in connections.all(initialized_only=True):
            if conn.connection is not None and not conn.is_usable():
                conn.close()
    _last_used[ident] = now
    return fn(*args, **kwargs)


async def run_db(fn: Callable[P, R], /, *args: P.args, **kwargs: P.kwargs) -> R:
    """Await ``fn(*args, **kwargs)`` run on a database thread (context variables carried)."""
    loop = asyncio.get_running_loop()
    ctx = contextvars.copy_context()
    call = functools.partial(ctx.run, _call, fn, args, kwargs)
    return await loop.run_in_executor(_executor(), call)


def close_db_threads() -> None:
    """Close every database thread's connections (tests call this before dropping a DB)."""
    for executor in list(_executors):
        executor.submit(connections.close_all).result()
