"""Counting what the server does for one request, in this process (the cost guard, issue 37).

:func:`measure` sends a request through Gaia's ASGI application (:func:`asgi_request`: the
same stack uvicorn runs, minus the socket) once to warm it, then a few times while counting,
on every thread that serves it (the event loop, the database threads, the pages' threads),
and keeps the least of each count (what every sending does):

* ``sql.<alias>.statements``: SQL statements sent to each database (Django's cursors on any
  thread, and the configuration-stamp reads made on the event loop, ``agents.infra.database``);
* ``sql.<alias>.round_trips``: those plus the commits and rollbacks (a trip each);
* ``redis.round_trips``: commands (or pipelines) sent to Redis, blocking reads left out (the
  channel layer's listeners wait in them whether or not a request runs);
* ``calls``: Python and C function calls (``cProfile``'s total), the request's own work
  with what it leaves running until that settles (the turn's record, the feed's batch);
* ``alloc_peak_bytes``: the most memory the request held at once (``tracemalloc``, a pass of
  its own: tracing costs allocations of its own, and counts none of cProfile's).

The counts are the same from one run to the next: what varies with the clock is switched off
while counting (:func:`steady`: the feed's delta coalescing, reply checkpoints, the lease
keeper), the cycle collector does not run inside the request, and the request waits for what
it left running before the counting stops. No time is measured.
"""

from __future__ import annotations

import _weakrefset
import asyncio
import concurrent.futures
import contextlib
import dis
import gc
import inspect
import json
import os
import queue
import selectors
import sys
import threading
import tracemalloc
import uuid
from collections import Counter
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

# Blocking reads a channel-layer listener sits in whatever the server does; PING is a
# health check made by the clock.
_REDIS_IGNORED = {b"BZPOPMIN", b"BLPOP", b"BRPOP", b"PING"}


@dataclass
class Response:
    status: int
    headers: dict[str, str]
    body: bytes

    def json(self) -> Any:
        return json.loads(self.body)


async def asgi_request(method: str, url: str, *, body: Any = None,
                       headers: dict[str, str] | None = None) -> Response:
    """One HTTP request through ``gaia_site.asgi.application`` (the body and disconnect
    handling, the API's or the pages' handler, their middleware), in this event loop."""
    from gaia_site.asgi import application

    parts = urlsplit(url)
    data = json.dumps(body).encode() if body is not None else b""
    head = [(b"host", b"testserver"), *[(k.lower().encode(), v.encode())
                                        for k, v in (headers or {}).items()]]
    if data:
        head += [(b"content-type", b"application/json"),
                 (b"content-length", str(len(data)).encode())]
    scope = {"type": "http", "asgi": {"version": "3.0", "spec_version": "2.3"},
             "http_version": "1.1", "method": method, "scheme": "http", "path": parts.path,
             "raw_path": parts.path.encode(), "query_string": parts.query.encode(),
             "root_path": "", "headers": head, "client": ("127.0.0.1", 40000),
             "server": ("testserver", 80)}
    done = asyncio.Event()
    sent: list[dict[str, Any]] = []
    delivered = False

    async def receive() -> dict[str, Any]:
        nonlocal delivered
        if not delivered:
            delivered = True
            return {"type": "http.request", "body": data, "more_body": False}
        await done.wait()
        return {"type": "http.disconnect"}

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)
        if message["type"] == "http.response.body" and not message.get("more_body"):
            done.set()

    await application(scope, receive, send)
    done.set()
    start = next(m for m in sent if m["type"] == "http.response.start")
    return Response(start["status"],
                    {k.decode().lower(): v.decode() for k, v in start["headers"]},
                    b"".join(m.get("body", b"") for m in sent
                             if m["type"] == "http.response.body"))


# -- what varies with the clock ------------------------------------------------------------


@contextlib.contextmanager
def steady() -> Iterator[None]:
    """Hold still the work a turn does by the clock rather than by what it is asked: the
    feed's coalesced reply deltas (one per 0.1 s of a reply), the reply's checkpoints (one a
    second), the lease keeper's renewals (a third of the lease): a turn on a slow machine
    would otherwise do more of each; their cost is per second, not per turn
    (``scripts/perf/checkpoint.py``, ``scripts/perf/chat.py``). And the feed's batches: the
    events a request queues leave in one batch once it is done (:func:`settle`), as they do
    under load, where a batch carries many turns' events, rather than in as many batches as
    the database threads' timing happened to cut them into."""
    from django.conf import settings

    from agents.outlet import realtime
    from agents.turns import reply

    def hold(loop: asyncio.AbstractEventLoop, group: str, payload: dict[str, Any]) -> None:
        outlet = realtime._outlets.get(loop)
        if outlet is None:
            outlet = realtime._outlets[loop] = realtime._LoopOutlet()
        outlet.pending.append((group, payload))

    saved = (reply.DELTA_INTERVAL, settings.GAIA_REPLY_CHECKPOINT_SECONDS,
             settings.GAIA_THREAD_LOCK_SECONDS, realtime._enqueue)
    reply.DELTA_INTERVAL = 3600.0
    settings.GAIA_REPLY_CHECKPOINT_SECONDS = 3600.0
    settings.GAIA_THREAD_LOCK_SECONDS = 3600.0
    realtime._enqueue = hold
    try:
        yield
    finally:
        (reply.DELTA_INTERVAL, settings.GAIA_REPLY_CHECKPOINT_SECONDS,
         settings.GAIA_THREAD_LOCK_SECONDS, realtime._enqueue) = saved


# -- counting --------------------------------------------------------------------------------


def _server_threads() -> list[Any]:
    """The executors whose threads serve requests beside the event loop."""
    from agents.infra import database
    from gaia_site import site_handler

    return [*database._executors, *site_handler._executors]


async def settle() -> None:
    """Wait until what the request left running is done: a turn's record (a task of its
    own), the database threads' queued work, the feed's batch of events."""
    from agents.outlet import realtime
    from agents.turns import registry

    loop = asyncio.get_running_loop()
    for _ in range(3):
        await asyncio.sleep(0)
        pending = [t for t in registry._background if not t.done()]
        if pending:
            await asyncio.wait(pending)
        executors = _server_threads()
        if executors:
            await asyncio.gather(*(loop.run_in_executor(e, lambda: None) for e in executors))
    await asyncio.sleep(0)  # hand-offs from the database threads are queued now
    outlet = realtime._outlets.get(loop)
    if outlet is not None and outlet.pending:  # the feed's batch (held by steady())
        outlet.sender = loop.create_task(realtime._send_pending(outlet))
        await realtime.flush()


@dataclass
class _Statements:
    counts: Counter[str] = field(default_factory=Counter)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def add(self, name: str) -> None:
        with self.lock:
            self.counts[name] += 1


@contextlib.contextmanager
def _count_statements(seen: _Statements) -> Iterator[None]:
    from django.db.backends.base.base import BaseDatabaseWrapper
    from django.db.backends.utils import CursorWrapper

    from agents.infra import database

    patches: list[tuple[Any, str, Any]] = []

    def patch(owner: Any, name: str, wrapper: Callable[[Any], Any]) -> None:
        original = getattr(owner, name)
        patches.append((owner, name, original))
        setattr(owner, name, wrapper(original))

    def statement(original: Any) -> Any:
        def counted(self: Any, sql: Any, params: Any, many: Any, executor: Any) -> Any:
            seen.add(f"sql.{self.db.alias}.statements")
            seen.add(f"sql.{self.db.alias}.round_trips")
            return original(self, sql, params, many, executor)
        return counted

    def ending(original: Any) -> Any:
        def counted(self: Any) -> Any:
            if self.connection is not None:
                seen.add(f"sql.{self.alias}.round_trips")
            return original(self)
        return counted

    def loop_read(original: Any) -> Any:
        def counted(*args: Any) -> Any:
            seen.add("sql.default.statements")
            seen.add("sql.default.round_trips")
            return original(*args)
        return counted

    def async_loop_read(original: Any) -> Any:
        async def counted(*args: Any) -> Any:
            seen.add("sql.default.statements")
            seen.add("sql.default.round_trips")
            return await original(*args)
        return counted

    patch(CursorWrapper, "_execute_with_wrappers", statement)
    patch(BaseDatabaseWrapper, "_commit", ending)
    patch(BaseDatabaseWrapper, "_rollback", ending)
    patch(database, "_sqlite_read", loop_read)
    patch(database, "_pg_read", async_loop_read)
    try:
        import redis.asyncio.connection as aredis
        import redis.connection as sredis
    except ImportError:  # pragma: no cover - redis is a dependency
        pass
    else:
        def redis_name(command: Any) -> bytes:
            packed = command if isinstance(command, bytes | bytearray) else b"".join(
                bytes(c) for c in list(command)[:2])
            lines = bytes(packed).split(b"\r\n")
            return lines[2].upper() if len(lines) > 2 else b""

        def redis_sync(original: Any) -> Any:
            def counted(self: Any, command: Any, *args: Any, **kwargs: Any) -> Any:
                if redis_name(command) not in _REDIS_IGNORED:
                    seen.add("redis.round_trips")
                return original(self, command, *args, **kwargs)
            return counted

        def redis_async(original: Any) -> Any:
            async def counted(self: Any, command: Any, *args: Any, **kwargs: Any) -> Any:
                if redis_name(command) not in _REDIS_IGNORED:
                    seen.add("redis.round_trips")
                return await original(self, command, *args, **kwargs)
            return counted

        patch(sredis.AbstractConnection, "send_packed_command", redis_sync)
        patch(aredis.AbstractConnection, "send_packed_command", redis_async)
    try:
        yield
    finally:
        for owner, name, original in reversed(patches):
            setattr(owner, name, original)


_GENERATOR_FLAGS = (inspect.CO_GENERATOR | inspect.CO_COROUTINE | inspect.CO_ASYNC_GENERATOR
                    | inspect.CO_ITERABLE_COROUTINE)
# The event loop's and the threads' own machinery: how often it runs depends on when the
# database threads answer, not on what the request asks for.
_SCHEDULING = tuple(str(Path(m.__file__).parent if m.__file__.endswith("__init__.py") else
                        Path(m.__file__)) for m in (asyncio, selectors, threading,
                                                    concurrent.futures, queue, _weakrefset)
                    ) + (__file__,)  # and the counting's own


class _Calls:
    """A profiler hook on the event loop's thread and every server thread (and any thread
    started meanwhile) counting function calls: Python functions (a generator or coroutine
    once, when it starts, not each time it resumes) and the C functions they call, leaving
    out the scheduling machinery (``_SCHEDULING``) and what it calls."""

    def __init__(self) -> None:
        self.totals: list[list[int]] = []
        self.lock = threading.Lock()
        self.skip: dict[Any, bool] = {}  # by code object: scheduling machinery?
        self.first: dict[Any, int] = {}  # by generator code object: where it starts
        # Calls by function, when asked (GAIA_COST_FUNCTIONS: scripts/perf/budget.py).
        self.by_function: Counter[Any] | None = (
            Counter() if os.environ.get("GAIA_COST_FUNCTIONS") else None)

    def _skipped(self, code: Any) -> bool:
        found = self.skip.get(code)
        if found is None:
            found = self.skip[code] = code.co_filename.startswith(_SCHEDULING)
        return found

    def _starts(self, code: Any) -> int:
        found = self.first.get(code)
        if found is None:
            found = self.first[code] = next(
                (i.offset for i in dis.get_instructions(code) if i.opname == "RESUME"), 0)
        return found

    def hook(self) -> Callable[[Any, str, Any], None]:
        total = [0]
        with self.lock:
            self.totals.append(total)
        skipped, starts, by_function = self._skipped, self._starts, self.by_function

        def counted(frame: Any, event: str, arg: Any) -> None:
            if event == "call":
                code = frame.f_code
                if skipped(code):
                    return
                if code.co_flags & _GENERATOR_FLAGS and frame.f_lasti > starts(code):
                    return  # resumed, not called
                total[0] += 1
                if by_function is not None:
                    by_function[code] += 1
            elif event == "c_call" and not skipped(frame.f_code):
                total[0] += 1
                if by_function is not None:
                    by_function[arg] += 1

        return counted

    def functions(self, top: int | None = 40) -> list[tuple[str, int]]:
        """The functions called most, with their counts (when asked for)."""
        def name(key: Any) -> str:
            if hasattr(key, "co_filename"):
                return f"{key.co_filename}:{key.co_firstlineno}({key.co_name})"
            return f"<{getattr(key, '__qualname__', repr(key))}>"

        return [(name(k), n) for k, n in (self.by_function or Counter()).most_common(top)]

    def _enable_here(self) -> None:
        sys.setprofile(self.hook())

    def _starter(self, frame: Any, event: str, arg: Any) -> None:
        # A thread started while counting: counted from its first event on.
        hook = self.hook()
        sys.setprofile(hook)
        hook(frame, event, arg)

    async def start(self) -> None:
        loop = asyncio.get_running_loop()
        for executor in _server_threads():
            await loop.run_in_executor(executor, self._enable_here)
        threading.setprofile(self._starter)
        self._enable_here()

    async def stop(self) -> int:
        sys.setprofile(None)
        threading.setprofile(None)  # type: ignore[arg-type]
        loop = asyncio.get_running_loop()
        for executor in _server_threads():
            await loop.run_in_executor(executor, sys.setprofile, None)
        with self.lock:
            return sum(total[0] for total in self.totals)


Request = Callable[[], Awaitable[Response]]
last_functions: list[tuple[str, int]] = []  # the last measure's busiest functions, if asked


async def measure(request: Request, *, check: Callable[[Response], None] | None = None,
                  warm: int = 1, counted: int = 2, peaks: int = 4) -> dict[str, int]:
    """What the server does for ``request`` (sent ``warm`` times first, uncounted): the
    least of each count over ``counted`` sendings with every count taken, and ``peaks``
    more with tracemalloc on (whose own allocations would count as calls) and the
    statements counted. ``check`` is run on every response."""
    def checked(response: Response) -> None:
        if check is not None:
            check(response)

    restore = _channel_layer_of_its_own()
    try:
        return await _measure(request, checked, warm, counted, peaks)
    finally:
        await restore()


def _channel_layer_of_its_own() -> Callable[[], Awaitable[None]]:
    """With Redis, a channel layer under a prefix of its own while counting: the feed's
    groups in a shared Redis keep members other processes left (a server killed mid-test),
    and a group with members costs more round trips to send to than an empty one."""
    from channels.layers import channel_layers
    from django.conf import settings

    config = settings.CHANNEL_LAYERS["default"]
    if not config["BACKEND"].startswith("channels_redis"):
        async def nothing() -> None:
            return None
        return nothing
    from channels_redis.core import RedisChannelLayer

    saved = channel_layers.backends.get("default")
    own = RedisChannelLayer(**{**config.get("CONFIG", {}),
                               "prefix": f"gaia-cost-{uuid.uuid4().hex[:12]}"})
    channel_layers.backends["default"] = own

    async def restore() -> None:
        if saved is None:
            channel_layers.backends.pop("default", None)
        else:
            channel_layers.backends["default"] = saved
        with contextlib.suppress(Exception):
            await own.close_pools()

    return restore


def _statement_cache_clear() -> None:
    """Empty psycopg's cache of parsed statements (by their text): whether a statement was
    parsed already depends on what ran before in the process (a turn's usage roll-up writes
    one to three buckets, the cache holds 128), so while counting each is parsed anew."""
    try:
        from psycopg import _queries
    except ImportError:  # SQLite only
        return
    for cached in (getattr(_queries, "_query2pg", None),
                   getattr(_queries, "_query2pg_client", None)):
        if cached is not None and hasattr(cached, "cache_clear"):
            cached.cache_clear()


async def _measure(request: Request, checked: Callable[[Response], None], warm: int,
                   counted: int, peaks: int) -> dict[str, int]:
    from agents.outlet import realtime

    with steady():
        for _ in range(warm):
            checked(await request())
            await settle()
        # The channel layer's listeners (control messages) wake on their own clock whether or
        # not a request runs: stopped while counting (this loop's turns do not restart them).
        await realtime.listeners_stop()
        gc.collect()
        gc.disable()  # the cycle collector runs when it likes; what it frees is not the turn's
        try:
            found: list[dict[str, int]] = []  # each sending's counts
            for _ in range(counted):
                _statement_cache_clear()
                await realtime.listeners_stop()  # any started meanwhile (a feed listener)
                seen = _Statements()
                calls = _Calls()
                with _count_statements(seen):
                    await calls.start()
                    response = await request()
                    await settle()
                    total = await calls.stop()
                checked(response)
                found.append({**seen.counts, "calls": total})
                global last_functions
                last_functions = calls.functions()
            for _ in range(peaks):
                gc.collect()
                await realtime.listeners_stop()
                seen = _Statements()
                with _count_statements(seen):
                    tracemalloc.start()
                    try:
                        base = tracemalloc.get_traced_memory()[0]
                        tracemalloc.reset_peak()
                        response = await request()
                        await settle()
                        held = tracemalloc.get_traced_memory()[1] - base
                    finally:
                        tracemalloc.stop()
                checked(response)
                found.append({**seen.counts, "alloc_peak_bytes": held})
        finally:
            gc.enable()
    # The least of each count over the sendings that took it: the work every sending does.
    # Work a sending did now and then (the clock's, another thread's timing) is left out; work
    # a change adds is done by every sending, and shows.
    names = {"sql.default.statements", "sql.default.round_trips", "redis.round_trips",
             *(name for counts in found for name in counts)}
    counts = {name: min(c.get(name, 0) for c in found
                        if name.startswith(("sql.", "redis.")) or name in c)
              for name in names}
    return dict(sorted(counts.items()))
