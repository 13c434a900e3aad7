"""The pages', operator API's and admin's ASGI handler: Django's, on a few long-lived threads.

Django's ASGI handler opens a ``ThreadSensitiveContext`` per request, and with it a thread
of its own for the request's synchronous work (its middleware and view). A connection to the
database opened there lives as long as the request: on PostgreSQL every operator request
opened one and closed it again, 4-7 ms of each route at c=1 (issue 27, measured with
``scripts/perf/data_scale.py`` against a million messages). Here each request runs on one of
``GAIA_SITE_THREADS`` threads that live as long as the process, and keeps its connection
between requests (``CONN_MAX_AGE`` in the settings, with Django's health check before a kept
connection is used again). What runs on a thread is unchanged: one request's synchronous work
at a time, as asgiref's contract says.

A request takes a free thread; when every thread is taken it waits its turn (first come,
first served) for the first one freed, not behind one particular request: a request that
waits on the network (a provider's connection test, up to the provider's timeout) holds up
no one while another thread is free.
"""

from __future__ import annotations

import asyncio
import threading
from collections import deque
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from asgiref.sync import ThreadSensitiveContext
from django.conf import settings
from django.core.handlers.asgi import ASGIHandler

_lock = threading.Lock()
_executors: list[ThreadPoolExecutor] = []
_free: list[int] = []  # a stack: the thread used last is used next (its connection is fresh)
_waiting: deque[asyncio.Future[int]] = deque()


async def _acquire() -> int:
    with _lock:
        if not _executors:
            size = max(1, int(getattr(settings, "GAIA_SITE_THREADS", 4)))
            _executors.extend(ThreadPoolExecutor(max_workers=1, thread_name_prefix=f"gaia-site-{i}")
                              for i in range(size))
            _free.extend(reversed(range(size)))
        if _free:
            return _free.pop()
        waiter: asyncio.Future[int] = asyncio.get_running_loop().create_future()
        _waiting.append(waiter)
    try:
        return await waiter
    except asyncio.CancelledError:
        with _lock:
            try:
                _waiting.remove(waiter)  # not handed a thread yet: nothing to give back
            except ValueError:
                pass
        if waiter.done() and not waiter.cancelled():
            _release(waiter.result())  # handed one just as the request was cancelled
        raise


def _hand(waiter: asyncio.Future[int], i: int) -> None:
    """On the waiter's loop: give it thread ``i``, or free ``i`` again if it stopped waiting."""
    if waiter.cancelled():
        _release(i)
    else:
        waiter.set_result(i)


def _release(i: int) -> None:
    with _lock:
        while _waiting:
            waiter = _waiting.popleft()
            try:
                waiter.get_loop().call_soon_threadsafe(_hand, waiter, i)
                return
            except RuntimeError:  # its event loop is closed: the next waiter
                continue
        _free.append(i)


class SiteASGIHandler(ASGIHandler):
    """Django's ASGI handler with each request's synchronous work on a kept thread."""

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            raise ValueError(f"Django can only handle ASGI/HTTP connections, not {scope['type']}.")
        i = await _acquire()
        try:
            async with ThreadSensitiveContext(executor=_executors[i]):
                await self.handle(scope, receive, send)
        finally:
            _release(i)
