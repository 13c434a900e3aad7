"""ASGI entry point: HTTP through Django, WebSockets through Channels (Channels tutorial layout).

HTTP is split by path. The machine API (``/v1``, ``/health``) runs behind a lean, fully async
middleware stack (``API_MIDDLEWARE``): Django's browser middleware (sessions, CSRF, auth,
messages...) are sync-with-async-shims that hop to a thread twice each per request, which
halved the API's throughput and does nothing for API-key clients. The admin and every other
page keep the full ``MIDDLEWARE``.
"""

import os

from django.core.asgi import get_asgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "gaia_site.settings")
django_asgi_app = get_asgi_application()

from channels.auth import AuthMiddlewareStack  # noqa: E402
from channels.routing import ProtocolTypeRouter, URLRouter  # noqa: E402
from channels.security.websocket import AllowedHostsOriginValidator  # noqa: E402
from django.conf import settings  # noqa: E402
from django.contrib.staticfiles.handlers import ASGIStaticFilesHandler  # noqa: E402
from django.core.handlers.asgi import ASGIHandler  # noqa: E402

from gaia_site.routing import websocket_urlpatterns  # noqa: E402
from openai_api.asgi import BodyLimit  # noqa: E402


class ApiASGIHandler(ASGIHandler):
    """Django's handler without a thread per request.

    ``ASGIHandler`` opens a ``ThreadSensitiveContext`` per request, so the few sync calls
    Django itself makes (the request_started/finished signal receivers) start a new thread for
    every request. API views never run sync code on that thread (the ORM runs on
    ``agents.database``'s threads), so those calls can share asgiref's one long-lived thread.
    """

    async def __call__(self, scope, receive, send):  # type: ignore[no-untyped-def]
        if scope["type"] != "http":
            raise ValueError(f"Django can only handle ASGI/HTTP connections, not {scope['type']}.")
        await self.handle(scope, receive, send)


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


async def http_application(scope, receive, send):  # type: ignore[no-untyped-def]
    path = scope["path"]
    if path.startswith("/v1/") or path in ("/v1", "/health"):
        await api_asgi_app(scope, receive, send)
    else:
        await site_asgi_app(scope, receive, send)


application = ProtocolTypeRouter(
    {
        "http": BodyLimit(http_application),
        "websocket": AllowedHostsOriginValidator(
            AuthMiddlewareStack(URLRouter(websocket_urlpatterns))
        ),
    }
)
