"""ASGI guard in front of Django: refuse oversized bodies before they are read.

Django's ASGI handler reads the whole body before any middleware runs; this answers 413 from
``Content-Length`` alone, and stops a chunked upload at the limit, so a huge body costs
nothing. Django's own ``DATA_UPLOAD_MAX_MEMORY_SIZE`` stays as the second line.
"""

from __future__ import annotations

import json
from typing import Any

from django.conf import settings

Scope = dict[str, Any]


class BodyLimit:
    def __init__(self, app: Any) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        limit = settings.GAIA_MAX_BODY_BYTES
        length = None
        # The Messages routes answer in Anthropic's envelope whatever the headers say.
        anthropic = scope.get("path", "").startswith("/v1/messages")
        for name, value in scope.get("headers", []):
            if name == b"content-length":
                try:
                    length = int(value)
                except ValueError:
                    length = None
            elif name == b"anthropic-version":
                anthropic = True
        path = scope.get("path", "")
        jsonrpc = path == "/mcp" or path == "/a2a" or path.startswith("/a2a/")
        dialect = ("operator" if path.startswith("/api/") else "mcp" if jsonrpc else
                   "anthropic" if anthropic else "openai")
        if length is not None and length > limit:
            await _too_large(send, limit, dialect)
            return
        seen = 0

        async def guarded_receive() -> dict[str, Any]:
            nonlocal seen
            message = await receive()
            if message["type"] == "http.request":
                seen += len(message.get("body", b""))
                if seen > limit:
                    raise _TooLarge
            return message

        try:
            await self.app(scope, guarded_receive, send)
        except _TooLarge:
            await _too_large(send, limit, dialect)


class _TooLarge(Exception):
    pass


async def _too_large(send: Any, limit: int, dialect: str) -> None:
    message = f"The request body is larger than {limit} bytes."
    if dialect == "operator":  # the operator API's error body (agents.apis)
        body: dict[str, Any] = {"detail": message, "code": "request_too_large"}
    elif dialect == "mcp":  # JSON-RPC's error object (MCP's and A2A's SDKs answer this shape)
        body = {"jsonrpc": "2.0", "id": None, "error": {"code": -32600, "message": message}}
    elif dialect == "anthropic":
        body = {"type": "error", "error": {"type": "request_too_large", "message": message}}
    else:
        body = {"error": {"message": message, "type": "invalid_request_error", "param": None,
                          "code": "request_too_large"}}
    payload = json.dumps(body).encode()
    await send({"type": "http.response.start", "status": 413, "headers": [
        (b"content-type", b"application/json"), (b"content-length", str(len(payload)).encode()),
    ]})
    await send({"type": "http.response.body", "body": payload})
