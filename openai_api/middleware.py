"""Edge middleware for /v1: raw request logging (secrets redacted) in debug mode, and the one
security header an API needs (the browser middleware does not run on /v1; see asgi.py).

Never reads or wraps a streaming response, so nothing here buffers SSE.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Awaitable, Callable
from typing import Any

from asgiref.sync import iscoroutinefunction, markcoroutinefunction
from django.conf import settings
from django.core.exceptions import DisallowedHost
from django.http import HttpRequest, HttpResponse

from agents.exceptions import InvalidRequest
from openai_api.errors import error_response

log = logging.getLogger("gaia.requests")

SECRET_HEADERS = {"authorization", "x-api-key", "cookie", "proxy-authorization"}
_KEY = re.compile(r"(gaia_[0-9a-f]{8})_[A-Za-z0-9_-]+|(sk-[A-Za-z0-9]{4})[A-Za-z0-9_-]+")


# Query parameters and JSON fields that carry credentials, whatever the credential looks like.
_SECRET_PARAM = re.compile(
    r"(?i)([?&](?:api[_-]?key|key|token|access[_-]?token|secret|password|auth)=)[^&#\s]*")
_SECRET_FIELD = re.compile(
    r'(?i)("(?:api[_-]?key|token|access[_-]?token|secret|password|authorization)"\s*:\s*")'
    r'(?:[^"\\]|\\.)*"')


def redact(text: str) -> str:
    text = _KEY.sub(lambda m: (m.group(1) or m.group(2)) + "…[redacted]", text)
    text = _SECRET_PARAM.sub(r"\1[redacted]", text)
    return _SECRET_FIELD.sub(r'\1[redacted]"', text)


def describe_request(request: HttpRequest) -> str:
    lines = [f"{request.method} {redact(request.get_full_path())}"]
    for name, value in request.headers.items():
        shown = "[redacted]" if name.lower() in SECRET_HEADERS else redact(value)
        if name.lower() == "authorization" and value[:7].lower() == "bearer ":
            shown = "Bearer " + redact(value[7:].strip())[:13] + "…[redacted]"
        lines.append(f"  {name}: {shown}")
    body = request.body[:20000].decode("utf-8", "replace")
    lines.append(f"  body: {redact(body)}")
    return "\n".join(lines)


class ApiEdgeMiddleware:
    async_capable = True
    sync_capable = False

    def __init__(self, get_response: Callable[[HttpRequest], Awaitable[HttpResponse]]) -> None:
        self.get_response = get_response
        if iscoroutinefunction(self.get_response):
            markcoroutinefunction(self)

    async def __call__(self, request: HttpRequest) -> Any:
        try:
            # The Host header against ALLOWED_HOSTS, as Django's CommonMiddleware does for
            # pages: a DNS-rebinding page must not reach a server that allows anonymous use.
            request.get_host()
        except DisallowedHost:
            return error_response(InvalidRequest(
                "The Host header of this request is not one this server answers to.",
                code="disallowed_host"),
                dialect="anthropic" if "anthropic-version" in request.headers else "openai")
        if settings.GAIA_DEBUG_REQUESTS and request.path.startswith("/v1/"):
            try:
                log.debug("raw request\n%s", describe_request(request))
            except Exception:  # logging must never fail a request
                log.debug("raw request (unreadable body) %s %s", request.method, request.path)
        response = await self.get_response(request)
        response.headers.setdefault("X-Content-Type-Options", "nosniff")
        return response
