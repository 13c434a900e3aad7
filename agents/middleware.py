"""ASGI middleware of the WebSocket feed (``/ws``): which browsers may open it, and the
session it reads (never writes). The consumer itself is :mod:`agents.consumers`."""

from __future__ import annotations

from importlib import import_module
from typing import Any

from channels.auth import AuthMiddleware
from channels.security.websocket import OriginValidator
from channels.sessions import CookieMiddleware
from django.conf import settings


class BrowserOriginValidator(OriginValidator):
    """Channels' ``AllowedHostsOriginValidator``, except that a handshake without ``Origin``
    is let through: browsers always send it (so a cross-site page is still refused), and
    CLI clients (``websocat``, Python ``websockets``) do not. Authentication follows in the
    consumer either way."""

    def valid_origin(self, parsed_origin: Any) -> bool:
        return parsed_origin is None or super().valid_origin(parsed_origin)


def origin_checked(application: Any) -> BrowserOriginValidator:
    allowed = settings.ALLOWED_HOSTS
    if settings.DEBUG and not allowed:
        allowed = ["localhost", "127.0.0.1", "[::1]"]
    return BrowserOriginValidator(application, allowed)


class SessionReader:
    """Channels' ``SessionMiddleware`` for consumers that read the session and never write
    it (the feed): the session the cookie names goes into the scope as Channels puts it there,
    but without Channels' wrapper around ``send``, which asked on every message sent whether
    the session needed saving (lazy-object lookups on each feed message: a visible share of
    what a socket costs, scripts/perf/feed.py). Needs ``CookieMiddleware`` outside it."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> Any:
        if "cookies" not in scope:
            raise ValueError("SessionReader needs CookieMiddleware outside it")
        store = import_module(settings.SESSION_ENGINE).SessionStore
        key = scope["cookies"].get(settings.SESSION_COOKIE_NAME)
        return await self.inner(dict(scope, session=store(key)), receive, send)


def feed_auth_stack(inner: Any) -> Any:
    """Channels' ``AuthMiddlewareStack`` with a session that is read, never saved."""
    return CookieMiddleware(SessionReader(AuthMiddleware(inner)))
