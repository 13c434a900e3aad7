"""The pages', operator API's and admin's ASGI handler: Django's, on a few long-lived threads.

Django's ASGI handler opens a ``ThreadSensitiveContext`` per request, and with it a thread
of its own for the request's synchronous work (its middleware and view). A connection to the
database opened there lives as long as the request: on PostgreSQL every operator request
opened one and closed it again, 4-7 ms of each route at c=1 (issue 27, measured with
``scripts/perf/data_scale.py`` against a million messages). Here each request runs on one of
``GAIA_SITE_THREADS`` threads that live as long as the process (the one with the fewest
requests under way), and keeps its connection between requests (``CONN_MAX_AGE`` in the
settings, with Django's health check before a kept connection is used again). What runs on
a thread is unchanged: one request's synchronous work at a time, as asgiref's contract says.
"""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from asgiref.sync import ThreadSensitiveContext
from django.conf import settings
from django.core.handlers.asgi import ASGIHandler

_lock = threading.Lock()
_executors: list[ThreadPoolExecutor] = []
_busy: list[int] = []


def _executor_pick() -> int:
    with _lock:
        if not _executors:
            size = max(1, int(getattr(settings, "GAIA_SITE_THREADS", 8)))
            _executors.extend(ThreadPoolExecutor(max_workers=1, thread_name_prefix=f"gaia-site-{i}")
                              for i in range(size))
            _busy.extend([0] * size)
        i = min(range(len(_executors)), key=_busy.__getitem__)
        _busy[i] += 1
        return i


def _executor_done(i: int) -> None:
    with _lock:
        _busy[i] -= 1


class SiteASGIHandler(ASGIHandler):
    """Django's ASGI handler with each request's synchronous work on a kept thread."""

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            raise ValueError(f"Django can only handle ASGI/HTTP connections, not {scope['type']}.")
        i = _executor_pick()
        try:
            async with ThreadSensitiveContext(executor=_executors[i]):
                await self.handle(scope, receive, send)
        finally:
            _executor_done(i)
