"""Which browser pages may use the operator surfaces (``/api`` over CORS, the ``/ws`` feed):
one rule for both (:mod:`agents.middleware`)."""

from __future__ import annotations

from urllib.parse import urlsplit

from django.conf import settings

DEFAULT_PORTS = {"http": 80, "https": 443, "ws": 80, "wss": 443}


def origin_normalized(origin: str) -> str | None:
    """``scheme://host:port`` in lower case with the port spelled out, or ``None`` for what is
    not an http(s) origin (``null``, a file page, garbage)."""
    try:
        parts = urlsplit(origin.strip().lower())
        port = parts.port
    except ValueError:
        return None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        return None
    host = f"[{parts.hostname}]" if ":" in parts.hostname else parts.hostname
    return f"{parts.scheme}://{host}:{port or DEFAULT_PORTS[parts.scheme]}"


def operator_origin_listed(origin: str) -> bool:
    """Whether ``origin`` is one of ``GAIA_OPERATOR_ALLOWED_ORIGINS`` (empty by default: none,
    so only Gaia's own pages use the operator API from a browser)."""
    wanted = origin_normalized(origin)
    return wanted is not None and any(
        origin_normalized(listed) == wanted for listed in settings.GAIA_OPERATOR_ALLOWED_ORIGINS)


def operator_origin_allowed(origin: str | None, *, host: str) -> bool:
    """Whether a browser page at ``origin`` may use the operator surfaces of the server it
    reached as ``host`` (the ``Host`` header): no ``Origin`` (not a browser), the server's own
    origin, or a listed one. The scheme is not compared: behind a TLS-terminating proxy the
    page is ``https`` where the server hears ``http``; a ``Host`` without a port stands for
    the page's default one."""
    if origin is None:
        return True
    page = origin_normalized(origin)
    if page is None:
        return False
    try:
        own = urlsplit(f"//{host.strip().lower()}")
        own_port = own.port
    except ValueError:
        return False
    parts = urlsplit(page)
    if own.hostname and parts.hostname == own.hostname and parts.port == (
            own_port or DEFAULT_PORTS[parts.scheme]):
        return True
    return operator_origin_listed(origin)
