"""Running the synchronous ORM from async code on a few long-lived database threads.

Django's ``sync_to_async`` gives every ASGI request its own thread, and so its own database
connection, opened and closed per request; with SQLite, concurrent requests then fight over
the write lock with the driver's busy-wait sleeps (up to 100 ms each), and throughput falls as
concurrency rises. Here every service call from the async side runs on one of a fixed set of
threads that keep their connections: one thread for SQLite (writes are serial anyway, so no
lock contention within the process), ``GAIA_DB_THREADS`` (default 4) for PostgreSQL.

One read happens on every API request before anything else can: the configuration stamp that
says whether the in-memory copies of API keys and agents are current. A trip to a database
thread for it cost about 0.5 ms of every time to first token (traced), so :func:`read_nowait`
does such reads without leaving the event loop: with psycopg's async connection (one per
event loop) on PostgreSQL, with a read-only ``sqlite3`` connection on SQLite (a primary-key
read of a local file takes microseconds and never waits for a writer in WAL mode). Where it
cannot (an in-memory SQLite database, another engine, a failed connection) it raises
:class:`ReadNotAvailable` and the caller uses :func:`run_db`.
"""

from __future__ import annotations

import asyncio
import contextvars
import functools
import itertools
import os
import sqlite3
import threading
import time
import weakref
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
_busy: list[int] = []  # per database thread: its calls queued or running
_last_used: dict[int, float] = {}
IDLE_CHECK_SECONDS = 30.0


def _size() -> int:
    if settings.DATABASES["default"]["ENGINE"].endswith("sqlite3"):
        return 1
    return max(1, int(getattr(settings, "GAIA_DB_THREADS", 4)))


def _pick() -> int:
    """The next database thread with nothing to do, in turn; the least busy when none is
    (counted as busy from here until :func:`_done`).

    A plain rotation queued a quick read behind whatever slow statement its thread happened
    to hold: on PostgreSQL storing a message of 1 MB waits for the trigram index of its text
    (migration 0015: 235 ms against 93 without it, psql on a quiet machine), and a ``/health``
    sent to that thread waited with it (676 ms in CI) while three threads stood idle."""
    global _cycle
    if _cycle is None:
        with _lock:
            if _cycle is None:
                _executors.extend(
                    ThreadPoolExecutor(max_workers=1, thread_name_prefix=f"gaia-db-{i}")
                    for i in range(_size())
                )
                _busy.extend(0 for _ in _executors)
                _cycle = itertools.cycle(range(len(_executors)))
    with _lock:  # the choice and its count at once: the next caller sees this one
        first = next(_cycle)
        count = len(_executors)
        pick = first
        for step in range(count):
            i = (first + step) % count
            if not _busy[i]:
                pick = i
                break
            if _busy[i] < _busy[pick]:
                pick = i
        _busy[pick] += 1
    return pick


def _done(index: int, _future: Any) -> None:
    with _lock:
        _busy[index] -= 1


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
    index = _pick()
    # the thread's own future: its callback runs when the call has ended, even when the
    # awaiting task was cancelled long before
    future = _executors[index].submit(call)
    future.add_done_callback(functools.partial(_done, index))
    return await asyncio.wrap_future(future, loop=loop)


def psycopg_tune() -> None:
    """Let psycopg keep the parsed form of the turn's long statements.

    psycopg caches how it splits a query around its placeholders only for queries of at
    most 50 parameters; a turn's writes have more (two message rows are 50 values, the
    usage roll-up's upsert ten rows of 10 to 12), so every turn parsed them again with a
    regular expression: 0.47 ms of the PostgreSQL leg's 0.8 ms extra CPU per chat turn
    (py-spy, `scripts/perf/chat.py --production`, c=16). Their shapes are few (rows_insert
    and the roll-up build them from a handful of templates): the cache (128) holds them."""
    try:
        from psycopg import _queries
    except ImportError:  # SQLite only
        return
    if getattr(_queries, "MAX_CACHED_STATEMENT_PARAMS", 0) < 1000:
        _queries.MAX_CACHED_STATEMENT_PARAMS = 1000  # type: ignore[attr-defined]
    if getattr(_queries, "MAX_CACHED_STATEMENT_LENGTH", 0) < 16384:
        _queries.MAX_CACHED_STATEMENT_LENGTH = 16384  # type: ignore[attr-defined]


def close_db_threads() -> None:
    """Close every database thread's connections, and the event loops' read connections
    (tests call this before dropping a DB)."""
    for executor in list(_executors):
        executor.submit(connections.close_all).result()
    close_loop_reads()


# ---------------------------------------------------------------------------------------------
# Reads on the event loop


class ReadNotAvailable(Exception):
    """This read cannot be done on the event loop now: use :func:`run_db`."""


_sqlite_reads = threading.local()  # per thread: (path, inode, connection)
_sqlite_conns: list[sqlite3.Connection] = []  # every thread's, for close_loop_reads
_pg_reads: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, Any] = (
    weakref.WeakKeyDictionary())
_reads_lock = threading.Lock()


async def read_nowait(sql: str) -> tuple[Any, ...] | None:
    """The first row of ``sql`` (a constant query) from the default database, read without
    a database thread; raises :class:`ReadNotAvailable` when it cannot be."""
    db = settings.DATABASES["default"]
    engine = db["ENGINE"]
    if engine.endswith("sqlite3"):
        return _sqlite_read(str(db["NAME"]), sql)
    if engine.endswith("postgresql"):
        return await _pg_read(sql)
    raise ReadNotAvailable(engine)


def _sqlite_read(path: str, sql: str) -> tuple[Any, ...] | None:
    if not path or path == ":memory:" or path.startswith("file:"):
        raise ReadNotAvailable("not a database file")
    try:
        inode = os.stat(path).st_ino  # a database deleted and created again: reconnect
        held = getattr(_sqlite_reads, "held", None)
        if held is None or held[0] != path or held[1] != inode:
            if held is not None:
                held[2].close()
                with _reads_lock:
                    if held[2] in _sqlite_conns:
                        _sqlite_conns.remove(held[2])
            conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=0.05,
                                   isolation_level=None, check_same_thread=False)
            with _reads_lock:
                _sqlite_conns.append(conn)
            held = _sqlite_reads.held = (path, inode, conn)
        return held[2].execute(sql).fetchone()
    except (OSError, sqlite3.Error) as exc:
        _sqlite_reads.held = None
        raise ReadNotAvailable(str(exc)) from exc


async def _pg_read(sql: str) -> tuple[Any, ...] | None:
    import psycopg

    loop = asyncio.get_running_loop()
    conn = _pg_reads.get(loop)
    try:
        if conn is None or conn.closed:
            params = connections["default"].get_connection_params()
            for django_only in ("cursor_factory", "context"):
                params.pop(django_only, None)
            conn = await psycopg.AsyncConnection.connect(autocommit=True, **params)
            with _reads_lock:
                _pg_reads[loop] = conn
        cursor = await conn.execute(sql)
        return await cursor.fetchone()
    except psycopg.Error as exc:
        _pg_drop(loop, conn)
        raise ReadNotAvailable(str(exc)) from exc
    except asyncio.CancelledError:  # mid-query: the connection's state is unknown
        _pg_drop(loop, conn)
        raise


def _pg_drop(loop: asyncio.AbstractEventLoop, conn: Any) -> None:
    with _reads_lock:
        if _pg_reads.get(loop) is conn:
            del _pg_reads[loop]
    if conn is not None and not conn.closed:
        conn.pgconn.finish()


def close_loop_reads() -> None:
    """Close the event loops' read connections (they may belong to loops that are gone)."""
    with _reads_lock:
        conns = list(_pg_reads.values())
        _pg_reads.clear()
        for lite in _sqlite_conns:
            lite.close()  # a thread still holding it reconnects on its next read
        _sqlite_conns.clear()
    for conn in conns:
        if not conn.closed:
            conn.pgconn.finish()
