"""What the HTTP provider kinds share: mapping upstream failures to Gaia's errors.

Unreachable or 5xx → 502, timeout → 504, upstream 401/403 → 502 saying the provider's
credentials are wrong (never quoting them), 429 → 429 with the upstream's ``Retry-After``.
"""

from __future__ import annotations

import asyncio
import email.utils
import importlib
import math
import sys
import time
from typing import Any

import httpx

from agents.kernel.exceptions import BackendError, BackendRateLimited, BackendTimeout


async def load_sdk(name: str) -> Any:
    """The SDK module, imported off the event loop the first time: ``anthropic`` takes ~2 s
    to import, which would stall every other stream on the server."""
    module = sys.modules.get(name)
    if module is None:
        module = await asyncio.to_thread(importlib.import_module, name)
    return module


def retry_after_seconds(headers: httpx.Headers | None) -> int | None:
    """Seconds from ``retry-after-ms`` / ``retry-after`` (seconds or an HTTP date)."""
    if headers is None:
        return None
    ms = headers.get("retry-after-ms")
    if ms:
        try:
            return max(1, math.ceil(float(ms) / 1000))
        except ValueError:
            pass
    value = headers.get("retry-after")
    if not value:
        return None
    try:
        return max(0, math.ceil(float(value)))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(0, math.ceil(when.timestamp() - time.time()))


def error_message(body: Any, fallback: str = "", limit: int = 300) -> str:
    """The upstream's own error message (``error.message`` in its JSON body), shortened."""
    message = None
    if isinstance(body, dict):
        inner = body.get("error", body)
        message = inner.get("message") if isinstance(inner, dict) else inner
    return str(message or fallback)[:limit]


def upstream_error_text(exc: Any, limit: int = 300) -> str:
    """:func:`error_message` of an SDK exception."""
    return error_message(getattr(exc, "body", None),
                         str(getattr(exc, "message", "") or exc), limit)


def scrub(text: str, credential: str) -> str:
    return text.replace(credential, "***") if credential and len(credential) >= 4 else text


REDACTED = "[redacted]"
# Shorter values ("gaia", "2024-06") are no credential, and redacting them would mangle text.
SECRET_MIN_CHARS = 8


class Redactor:
    """Every configured secret value of one upstream (a provider's API key and each
    ``extra_headers`` value; an MCP server's ``env`` and header values) taken out of what
    that upstream says, before Gaia stores or sends it: an upstream that echoes the request
    (an error quoting its headers) must not hand a credential to the client, the thread, the
    pages or the feed.

    :meth:`text` redacts a whole text; :meth:`feed` a stream of pieces, holding back a
    piece's end only while it could be the start of a secret (a secret split across two
    deltas is still found; ordinary text is not delayed) until :meth:`flush`."""

    __slots__ = ("secrets", "hold", "_pending")

    def __init__(self, secrets: Any) -> None:
        found = {str(s) for s in secrets if s and len(str(s)) >= SECRET_MIN_CHARS}
        self.secrets = sorted(found, key=len, reverse=True)  # a longer one first
        self.hold = max((len(s) for s in self.secrets), default=1) - 1
        self._pending: dict[Any, str] = {}

    def __bool__(self) -> bool:
        return bool(self.secrets)

    def text(self, text: str) -> str:
        for secret in self.secrets:
            if secret in text:
                text = text.replace(secret, REDACTED)
        return text

    def feed(self, kind: Any, piece: str) -> str:
        """What of the ``kind`` stream (its pieces so far plus ``piece``) can be sent now."""
        text = self.text(self._pending.pop(kind, "") + piece)
        keep = self._secret_start(text)
        if not keep:
            return text
        self._pending[kind] = text[-keep:]
        return text[:-keep]

    def _secret_start(self, text: str) -> int:
        """How many of ``text``'s last characters could begin a secret (0: none)."""
        keep = 0
        start = max(0, len(text) - self.hold)
        for secret in self.secrets:
            i = text.find(secret[0], start)
            while i != -1:
                if len(text) - i < len(secret) and secret.startswith(text[i:]):
                    keep = max(keep, len(text) - i)
                    break
                i = text.find(secret[0], i + 1)
        return keep

    def flush(self) -> list[tuple[Any, str]]:
        """Every held-back tail, as ``(kind, text)``; nothing is held afterwards."""
        out = [(kind, text) for kind, text in self._pending.items() if text]
        self._pending.clear()
        return out


def status_error(status: int, *, provider: str, message: str, credential: str = "",
                 headers: httpx.Headers | None = None) -> BackendError:
    """The error for an upstream HTTP error status; never leaks the credential."""
    if status in (401, 403):
        return BackendError(
            f"Provider {provider!r} rejected Gaia's credentials (upstream HTTP {status}); "
            "an administrator must check the provider's API key.",
            code="upstream_auth_failed",
        )
    text = scrub(message, credential)
    if status == 429:
        return BackendRateLimited(
            f"Provider {provider!r} is rate limiting requests: {text}",
            retry_after=retry_after_seconds(headers),
        )
    if status >= 500:
        return BackendError(f"Provider {provider!r} failed (upstream HTTP {status}): {text}")
    return BackendError(
        f"Provider {provider!r} refused the request (upstream HTTP {status}): {text}",
        code="upstream_refused")


def transport_error(exc: BaseException, *, provider: str) -> BackendError:
    """The error for a timeout or connection failure (httpx's, aiohttp's or asyncio's)."""
    if isinstance(exc, httpx.TimeoutException | TimeoutError):
        return BackendTimeout(f"Provider {provider!r} did not answer in time.")
    return BackendError(
        f"Provider {provider!r} is unreachable or closed the connection "
        f"({type(exc.__cause__ or exc).__name__})."
    )


def map_sdk_error(exc: BaseException, *, provider: str, sdk: Any,
                  credential: str = "") -> BackendError:
    """One :class:`BackendError` for an exception from an official SDK (``sdk`` is the
    ``openai`` or ``anthropic`` module: their exception classes share names)."""
    if isinstance(exc, BackendError):
        return exc
    if isinstance(exc, sdk.APITimeoutError | httpx.TimeoutException):
        return BackendTimeout(f"Provider {provider!r} did not answer in time.")
    if isinstance(exc, sdk.APIStatusError):
        return status_error(exc.status_code, provider=provider, credential=credential,
                            message=upstream_error_text(exc), headers=exc.response.headers)
    if isinstance(exc, sdk.APIConnectionError | httpx.TransportError):
        return transport_error(exc, provider=provider)
    if isinstance(exc, sdk.APIError):
        return BackendError(
            f"Provider {provider!r} failed: {scrub(upstream_error_text(exc), credential)}")
    return BackendError(f"Provider {provider!r} failed ({type(exc).__name__}).")
