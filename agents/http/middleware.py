"""The operator surfaces' browser edge: which pages may open the WebSocket feed (``/ws``) and
call ``/api`` across origins (one rule, :mod:`agents.selectors.origins`), and the session the
feed reads (never writes). The consumer itself is :mod:`agents.feed.consumers`."""

from __future__ import annotations

from importlib import import_module
from typing import Any

from asgiref.sync import iscoroutinefunction, markcoroutinefunction
from channels.auth import AuthMiddleware
from channels.security.websocket import WebsocketDenier
from channels.sessions import CookieMiddleware
from django.conf import settings
from django.http import HttpRequest, HttpResponse
from django.http.request import split_domain_port, validate_host
from django.utils.cache import patch_vary_headers

from agents.selectors.origins import operator_origin_allowed, operator_origin_listed


class OriginChecked:
    """The feed's handshake check: a browser page (it always sends ``Origin``) may open
    ``/ws`` from Gaia's own origin, on a host in ``ALLOWED_HOSTS`` (no DNS rebinding), or
    from one of ``GAIA_OPERATOR_ALLOWED_ORIGINS``; anything else gets HTTP 403 and no socket.
    A client without ``Origin`` (``websocat``, Python ``websockets``: no cross-site risk)
    goes on to authenticate like anyone else."""

    def __init__(self, application: Any) -> None:
        self.application = application

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> Any:
        headers = dict(scope.get("headers") or ())
        origin = headers.get(b"origin")
        host = headers.get(b"host", b"").decode("latin-1")
        allowed_hosts = settings.ALLOWED_HOSTS
        if settings.DEBUG and not allowed_hosts:
            allowed_hosts = ["localhost", "127.0.0.1", "[::1]"]
        domain, _ = split_domain_port(host)
        known_host = bool(domain) and validate_host(domain, allowed_hosts)
        page = origin.decode("latin-1") if origin is not None else None
        if not operator_origin_allowed(page, host=host if known_host else ""):
            return await WebsocketDenier()(scope, receive, send)
        return await self.application(scope, receive, send)


def origin_checked(application: Any) -> OriginChecked:
    return OriginChecked(application)


PREFLIGHT_HEADERS = "authorization, content-type, x-api-key, x-csrftoken"
PREFLIGHT_METHODS = "GET, POST, PUT, PATCH, DELETE, OPTIONS"


class OperatorCorsMiddleware:
    """CORS for ``/api`` (reference 003: GUIs are consumers of the API): a page on one of
    ``GAIA_OPERATOR_ALLOWED_ORIGINS`` may call it, with credentials (a staff session's cookie
    as well as an API key); any other origin gets no CORS headers, so the browser keeps the
    answer from it (same-origin only, the default). ``/v1`` has its own, credential-free
    policy (``CORS_*`` settings, django-cors-headers)."""

    async_capable = True
    sync_capable = False  # no thread hop in front of the whole site (as ApiEdgeMiddleware)

    def __init__(self, get_response: Any) -> None:
        self.get_response = get_response
        if iscoroutinefunction(self.get_response):
            markcoroutinefunction(self)

    async def __call__(self, request: HttpRequest) -> HttpResponse:
        origin = request.headers.get("Origin")
        if not request.path.startswith("/api/") or origin is None:
            return await self.get_response(request)
        if not operator_origin_listed(origin):
            response = await self.get_response(request)
        elif request.method == "OPTIONS" and "Access-Control-Request-Method" in request.headers:
            response = HttpResponse(status=204)  # the preflight: answered here, no view runs
            response["Access-Control-Allow-Methods"] = PREFLIGHT_METHODS
            response["Access-Control-Allow-Headers"] = PREFLIGHT_HEADERS
            response["Access-Control-Max-Age"] = "600"
        else:
            response = await self.get_response(request)
        if operator_origin_listed(origin):
            response["Access-Control-Allow-Origin"] = origin
            response["Access-Control-Allow-Credentials"] = "true"
        patch_vary_headers(response, ["Origin"])
        return response


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
