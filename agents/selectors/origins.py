"""Which browser pages may use the operator surfaces (``/api`` over CORS, the ``/ws`` feed):
one rule for both (:mod:`agents.http.middleware`)."""

from __future__ import annotations

from django.conf import settings

from agents.selectors.urls import Url, UrlRefused, url_parsed


def _origin(origin: str) -> Url | None:
    try:
        url = url_parsed(origin.strip())
    except UrlRefused:
        return None
    # An origin is scheme://host[:port]: a path, a query or userinfo is not one.
    return url if url.path == "/" and not url.query else None


def origin_normalized(origin: str) -> str | None:
    """``scheme://host:port`` in lower case with the port spelled out, or ``None`` for what is
    not an http(s) origin (``null``, a file page, userinfo, a path, garbage): parsed by the
    rules every URL allow-list follows (:mod:`agents.selectors.urls`)."""
    url = _origin(origin)
    return url.origin if url is not None else None


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
    page = _origin(origin)
    if page is None:
        return False
    # The Host header read as an authority of the page's scheme (its default port if none).
    own = _origin(f"{page.scheme}://{host}") if host else None
    if own is not None and (own.host, own.port) == (page.host, page.port):
        return True
    return operator_origin_listed(origin)
