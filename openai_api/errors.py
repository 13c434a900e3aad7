"""Error bodies of each dialect. Every error leaving /v1 goes through here."""

from __future__ import annotations

import json
from typing import Any

from django.http import HttpResponse

from agents.kernel.exceptions import GaiaError

OPENAI_TYPES = {
    "invalid_request": "invalid_request_error",
    "authentication": "invalid_request_error",
    "permission": "permission_error",
    "not_found": "invalid_request_error",
    "conflict": "invalid_request_error",
    "request_too_large": "invalid_request_error",
    "rate_limit": "rate_limit_error",
    "insufficient_quota": "insufficient_quota",
    "upstream": "server_error",
    "timeout": "server_error",
    "overloaded": "server_error",
    "server_error": "server_error",
}

ANTHROPIC_TYPES = {
    "invalid_request": "invalid_request_error",
    "authentication": "authentication_error",
    "permission": "permission_error",
    "not_found": "not_found_error",
    "conflict": "invalid_request_error",
    "request_too_large": "request_too_large",
    "rate_limit": "rate_limit_error",
    "insufficient_quota": "insufficient_quota",  # a 429: the SDKs' RateLimitError
    "upstream": "api_error",
    "timeout": "timeout_error",
    "overloaded": "overloaded_error",
    "server_error": "api_error",
}


def openai_error_body(exc: GaiaError) -> dict[str, Any]:
    return {
        "error": {
            "message": exc.message,
            "type": OPENAI_TYPES.get(exc.kind, "server_error"),
            "param": exc.param,
            "code": exc.code,
        }
    }


def anthropic_error_body(exc: GaiaError) -> dict[str, Any]:
    return {
        "type": "error",
        "error": {"type": ANTHROPIC_TYPES.get(exc.kind, "api_error"), "message": exc.message},
    }


def error_response(exc: GaiaError, *, dialect: str = "openai") -> HttpResponse:
    body = anthropic_error_body(exc) if dialect == "anthropic" else openai_error_body(exc)
    response = HttpResponse(
        json.dumps(body), status=exc.status, content_type="application/json"
    )
    if exc.retry_after is not None:
        response["Retry-After"] = str(exc.retry_after)
    return response
