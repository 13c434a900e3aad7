"""Edge middleware for /v1 and /api: raw request logging (secrets redacted) in debug mode, one
access line per request (``gaia.access``), and the one security header an API needs (the
browser middleware does not run on /v1; see asgi.py).

Never reads or wraps a streaming response, so nothing here buffers SSE: a stream's access line
is written when Django closes the response, once the whole reply was sent.
"""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Awaitable, Callable
from typing import Any

from asgiref.sync import iscoroutinefunction, markcoroutinefunction
from django.conf import settings
from django.core.exceptions import DisallowedHost
from django.http import HttpRequest, HttpResponse

from agents.http.authentication import key_prefix, raw_api_key
from agents.infra import metrics, tracing
from agents.kernel.exceptions import InvalidRequest
from openai_api.errors import error_response

log = logging.getLogger("gaia.requests")
access_log = logging.getLogger("gaia.access")

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
        path = request.path
        logged = path.startswith(("/v1/", "/api/")) or path == "/api"
        if logged:
            started = time.perf_counter()
            request.gaia_facts = {}  # views add what they know (agents.http.authentication.note)
        if settings.GAIA_DEBUG_REQUESTS and path.startswith("/v1/"):
            try:
                log.debug("raw request\n%s", describe_request(request))
            except Exception:  # logging must never fail a request
                log.debug("raw request (unreadable body) %s %s", request.method, request.path)
        if tracing.ENABLED and logged:
            # A client's traceparent is current while the view runs: its turn's parent.
            parent = request.gaia_trace_parent = tracing.extract(request.headers)
            with tracing.attached(parent):
                response = await self.get_response(request)
        else:
            response = await self.get_response(request)
        response.headers.setdefault("X-Content-Type-Options", "nosniff")
        if logged:
            if response.streaming:
                response._resource_closers.append(
                    lambda: access_line(request, response.status_code, started, streamed=True))
            else:
                access_line(request, response.status_code, started)
        return response


def _key_prefix(request: HttpRequest) -> str | None:
    """The visible prefix of the request's Gaia key, read from its header (no query)."""
    return key_prefix(raw_api_key(request))


def access_line(request: HttpRequest, status: int, started: float, *,
                streamed: bool = False) -> None:
    """One line per /v1 and /api request: method, path, status, key prefix, agent, thread,
    how the thread was found, TTFT, tokens, duration; whether it streamed, the model the
    client asked for (``auto``, ``team/...``) beside the agent that answered, how its turn
    finished, and for a turn that failed its error's kind and the status the client
    effectively got (a stream that failed mid-reply was sent as a 200). Plain ``key=value``
    text, or JSON fields with ``GAIA_LOG_FORMAT=json``. Never raises. The same request is
    counted in the Prometheus metrics, under its effective status."""
    try:
        facts: dict[str, Any] = dict(getattr(request, "gaia_facts", None) or {})
        turn = getattr(request, "gaia_turn", None)
        if turn is not None:
            facts.update(turn.log_facts())
        fields = {
            "method": request.method,
            "path": request.path,
            "status": status,
            "key_prefix": facts.get("key") or _key_prefix(request),
            "user": facts.get("user"),
            "agent": facts.get("agent"),
            "thread_id": facts.get("thread_id") or facts.get("thread"),
            "thread_found": facts.get("thread_found") or facts.get("found"),
            "ttft_ms": facts.get("ttft_ms"),
            "input_tokens": facts.get("input_tokens"),
            "output_tokens": facts.get("output_tokens"),
            "duration_ms": round((time.perf_counter() - started) * 1000, 1),
            "streamed": streamed,
            "model": facts.get("model"),
            "finish": facts.get("finish_reason"),
            "error_kind": facts.get("error_kind"),
            "effective_status": facts.get("effective_status") or status,
        }
        match = getattr(request, "resolver_match", None)
        if tracing.ENABLED and hasattr(request, "gaia_trace_parent"):
            # The turn's span, or (no turn) one for the request, recorded now.
            ids = tracing.span_ids(getattr(turn, "span", None)) or tracing.request_span_ids(
                method=request.method, route=match.route if match is not None else None,
                path=request.path, status=fields["effective_status"],
                error_kind=fields["error_kind"], seconds=fields["duration_ms"] / 1000,
                parent=request.gaia_trace_parent)
            fields["trace_id"], fields["span_id"] = ids or (None, None)
        metrics.request_done(
            match.route if match is not None else "unmatched",
            (facts.get("agent") or "") if turn is not None else "", fields["effective_status"],
            fields["duration_ms"] / 1000, getattr(turn, "upstream_seconds", None))
        text = " ".join(f"{k}={'-' if v is None else str(v).lower() if isinstance(v, bool) else v}"
                        for k, v in list(fields.items())[3:])
        access_log.info("%s %s %s %s", fields["method"], fields["path"], status, text,
                        extra=fields)
    except Exception:  # a log line must never fail a request
        access_log.debug("access line failed", exc_info=True)
