"""ASGI entry point: HTTP through Django, WebSockets through Channels (Channels tutorial layout).

HTTP is split by path. The machine API (``/v1``, ``/health``) runs behind a lean, fully async
middleware stack (``API_MIDDLEWARE``): Django's browser middleware (sessions, CSRF, auth,
messages...) are sync-with-async-shims that hop to a thread twice each per request, which
halved the API's throughput and does nothing for API-key clients. The admin and every other
page keep the full ``MIDDLEWARE``.
"""

import asyncio
import contextlib
import gc
import importlib
import io
import os
from typing import Any

from django.core.asgi import get_asgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "gaia_site.settings")
get_asgi_application()  # django.setup(), as Django's entry point does

from gaia_site.site_handler import SiteASGIHandler  # noqa: E402

django_asgi_app = SiteASGIHandler()

from channels.routing import ProtocolTypeRouter, URLRouter  # noqa: E402
from django.conf import settings  # noqa: E402
from django.contrib.staticfiles.handlers import ASGIStaticFilesHandler  # noqa: E402
from django.core.exceptions import RequestAborted  # noqa: E402
from django.core.handlers.asgi import ASGIHandler, get_script_prefix  # noqa: E402
from django.urls import get_resolver, set_script_prefix  # noqa: E402

from agents.http.middleware import feed_auth_stack, origin_checked  # noqa: E402
from gaia_site.lifespan import Lifespan  # noqa: E402
from gaia_site.routing import websocket_urlpatterns  # noqa: E402
from mcp_api.server import mcp_application  # noqa: E402
from openai_api.asgi import BodyLimit  # noqa: E402


class ApiASGIHandler(ASGIHandler):
    """Django's ASGI handler without its thread hops, for the machine API.

    Django's ``handle`` opens a ``ThreadSensitiveContext`` per request and sends
    ``request_started`` and ``request_finished`` through ``sync_to_async``: two trips to a
    thread per request, about 0.7 ms of every time to first token together with its disk-backed
    body buffer (``scripts/perf/upstream.py``). Their receivers look after the database
    connections and caches of the thread they run on, and API views use none there: the ORM
    runs on ``agents.infra.database``'s threads, which check their own connections. So this handler
    reads the body into memory (``BodyLimit`` has already bounded it), runs the view and the
    disconnect watch exactly as Django does, and closes the response (which sends
    ``request_finished``) on the event loop.
    """

    async def __call__(self, scope, receive, send):  # type: ignore[no-untyped-def]
        if scope["type"] != "http":
            raise ValueError(f"Django can only handle ASGI/HTTP connections, not {scope['type']}.")
        await self.handle(scope, receive, send)

    async def read_body(self, receive):  # type: ignore[no-untyped-def]
        body = io.BytesIO()
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                raise RequestAborted()
            body.write(message.get("body", b""))
            if not message.get("more_body", False):
                break
        body.seek(0)
        return body

    async def handle(self, scope, receive, send):  # type: ignore[no-untyped-def]
        try:
            body_file = await self.read_body(receive)
        except RequestAborted:
            return
        set_script_prefix(get_script_prefix(scope))
        request, error_response = self.create_request(scope, body_file)
        if request is None:
            await self.send_response(error_response, send)
            error_response.close()
            return

        async def process_request() -> Any:
            response = await self.run_get_response(request)
            with contextlib.suppress(asyncio.CancelledError):  # the client left mid-send
                await self.send_response(response, send)
            return response

        # As Django does: a client disconnecting while the view runs cancels the view.
        tasks = [
            asyncio.create_task(self.listen_for_disconnect(receive)),
            asyncio.create_task(process_request()),
        ]
        try:
            await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
        except asyncio.CancelledError:
            # The server cancels the request (a shutdown past its graceful period): the view
            # is cancelled with it, so that the turn records what happened.
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            raise
        for task in tasks:
            if task.done():
                with contextlib.suppress(RequestAborted):
                    task.result()
            else:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task
        if not tasks[1].cancelled():
            tasks[1].result().close()


def _api_handler() -> ASGIHandler:
    # Django builds a handler's middleware chain from settings.MIDDLEWARE when it is created;
    # build this one from the API list instead (once, at start-up).
    full = settings.MIDDLEWARE
    settings.MIDDLEWARE = settings.API_MIDDLEWARE
    try:
        return ApiASGIHandler()
    finally:
        settings.MIDDLEWARE = full


api_asgi_app = _api_handler()
# Static files (admin CSS) are served by Django itself: one process, nothing to deploy.
site_asgi_app = ASGIStaticFilesHandler(django_asgi_app)


_a2a_application = None


async def _a2a_load():  # type: ignore[no-untyped-def]
    """``/a2a``'s application, imported on its first request: the a2a-sdk's server takes
    0.3-0.5 s of CPU to import (python -X importtime), which every process start paid (the
    suite starts a couple of hundred servers) whether or not anyone speaks A2A to it. The
    import runs on a thread, so the first A2A request waits for it and no one else does."""
    global _a2a_application
    module = await asyncio.to_thread(importlib.import_module, "a2a_api.server")
    _a2a_application = module.a2a_application
    return _a2a_application


async def http_application(scope, receive, send):  # type: ignore[no-untyped-def]
    path = scope["path"]
    if path.startswith("/v1/") or path in ("/v1", "/health", "/metrics") or (
            path == "/" and scope["method"] in ("HEAD", "OPTIONS")):  # clients' probes
        await api_asgi_app(scope, receive, send)
    elif path == "/mcp":
        await mcp_application(scope, receive, send)
    elif path == "/a2a" or path.startswith("/a2a/"):
        await (_a2a_application or await _a2a_load())(scope, receive, send)
    else:
        await site_asgi_app(scope, receive, send)


application = Lifespan(ProtocolTypeRouter(
    {
        "http": BodyLimit(http_application),
        # Browser pages of Gaia's own origin or of GAIA_OPERATOR_ALLOWED_ORIGINS; clients
        # without an Origin go on to the feed's own authentication (agents.feed.consumers).
        "websocket": origin_checked(feed_auth_stack(URLRouter(websocket_urlpatterns))),
    }
))

# Start-up state leaves the cycle collector's care. A full collection over it (~120,000
# objects: Django, the apps, their views) takes 35-40 ms and runs inside whichever request
# sets it off (45 ms inside a chat request in a run of scripts/perf/upstream.py); after
# gc.freeze() it takes microseconds. The URL configuration, and with it every view
# module, is loaded first rather than by the first request. Frozen objects are still freed
# by their reference counts; objects made later are collected as before.
get_resolver().url_patterns  # noqa: B018 - loads the URL configuration
gc.freeze()

# Without REDIS_URL this process also executes benchmark runs, in a thread of its own.
from benchmarks.worker import embedded_start  # noqa: E402

embedded_start()

# Without REDIS_URL this process also fires schedules (a Celery beat on a thread of its own).
from gaia_site.beat import embedded_beat_start  # noqa: E402

embedded_beat_start()

# Without REDIS_URL this process also runs background responses (POST /v1/responses with
# "background": true).
from openai_api.background_run import embedded_start as background_embedded_start  # noqa: E402

background_embedded_start()
