"""The edge of Gaia's JSON-RPC interfaces (``/mcp``: :mod:`mcp_api.server`, ``/a2a``:
:mod:`a2a_api.server`), before their SDK sees a request: the key read from the headers, a
refusal as the HTTP status with a JSON-RPC error body, each request counted in
``gaia_requests_total{route=...}`` and logged on ``gaia.access``."""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any

from agents.http.authentication import key_prefix, raw_api_key
from agents.infra import metrics
from agents.kernel.exceptions import GaiaError

access_log = logging.getLogger("gaia.access")
Serve = Callable[[dict[str, Any], Any, Any, str | None], Awaitable[None]]


def scope_headers(scope: dict[str, Any]) -> dict[str, str]:
    """An ASGI scope's headers, by lower-case name."""
    return {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope.get("headers", [])}


class _Headers:
    """An ASGI scope's headers as :func:`raw_api_key` reads a request's."""

    def __init__(self, scope: dict[str, Any]) -> None:
        self.headers = scope_headers(scope)


async def json_answer(send: Any, status: int, body: Any,
                      extra: list[tuple[bytes, bytes]] | tuple[()] = ()) -> None:
    data = json.dumps(body).encode()
    headers = [(b"content-type", b"application/json"),
               (b"content-length", str(len(data)).encode()), *extra]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": data})


async def jsonrpc_refuse(send: Any, exc: GaiaError, *, code: int | None = None) -> None:
    """Refused before the protocol: ``exc``'s status (a 401 with ``WWW-Authenticate:
    Bearer``, ``Retry-After`` when it has one) and a JSON-RPC error (``code``; by default
    -32603 for a 5xx, else -32600)."""
    extra = []
    if exc.status == 401:
        extra.append((b"www-authenticate", b"Bearer"))
    if exc.retry_after is not None:
        extra.append((b"retry-after", str(exc.retry_after).encode()))
    if code is None:
        code = -32603 if exc.status >= 500 else -32600
    await json_answer(send, exc.status, {"jsonrpc": "2.0", "id": None,
                                         "error": {"code": code, "message": exc.message}},
                      extra)


def counted(route: str) -> Callable[[Serve], Callable[..., Awaitable[None]]]:
    """An ASGI application of ``serve(scope, receive, send, raw_key)``, each request counted
    and logged under ``route``."""
    def wrap(serve: Serve) -> Callable[..., Awaitable[None]]:
        async def application(scope: dict[str, Any], receive: Any, send: Any) -> None:
            started, status = time.perf_counter(), [0]

            async def counted_send(message: dict[str, Any]) -> None:
                if message["type"] == "http.response.start":
                    status[0] = message["status"]
                await send(message)

            raw = raw_api_key(_Headers(scope))
            try:
                await serve(scope, receive, counted_send, raw)
            finally:
                seconds = time.perf_counter() - started
                metrics.request_done(route, "", status[0], seconds, None)
                access_log.info("%s %s %s key_prefix=%s duration_ms=%.1f", scope.get("method"),
                                scope.get("path"), status[0], key_prefix(raw) or "-",
                                seconds * 1000)

        application.__doc__ = serve.__doc__
        return application
    return wrap
