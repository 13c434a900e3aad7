"""ASGI entry point: HTTP through Django, WebSockets through Channels (Channels tutorial layout)."""

import os

from django.core.asgi import get_asgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "gaia_site.settings")
django_asgi_app = get_asgi_application()

from channels.auth import AuthMiddlewareStack  # noqa: E402
from channels.routing import ProtocolTypeRouter, URLRouter  # noqa: E402
from channels.security.websocket import AllowedHostsOriginValidator  # noqa: E402
from django.contrib.staticfiles.handlers import ASGIStaticFilesHandler  # noqa: E402

from gaia_site.routing import websocket_urlpatterns  # noqa: E402
from openai_api.asgi import BodyLimit  # noqa: E402

application = ProtocolTypeRouter(
    {
        # Static files (admin CSS) are served by Django itself: one process, nothing to deploy.
        "http": BodyLimit(ASGIStaticFilesHandler(django_asgi_app)),
        "websocket": AllowedHostsOriginValidator(
            AuthMiddlewareStack(URLRouter(websocket_urlpatterns))
        ),
    }
)
