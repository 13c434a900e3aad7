"""DRF authentication with Gaia API keys, for the REST APIs under ``/api/v1``.

:class:`ApiKeyAuthentication` reads ``Authorization: Bearer KEY`` or ``X-API-Key: KEY``, checks it
with :func:`agents.services.api_key_authenticate` for its ``scope`` and counts it against the
key's rate limit; subclass it per scope. No key header: it stands aside, so a session
authentication class after it can let staff in. Errors are Gaia's (401, 403, 429), rendered by
the API's exception handler.
"""

from __future__ import annotations

import re
from typing import Any

from django.contrib.auth.models import AnonymousUser
from rest_framework.authentication import BaseAuthentication, SessionAuthentication
from rest_framework.request import Request

from agents import services
from agents.kernel.exceptions import PermissionDenied
from agents.models import ApiKey


def raw_api_key(request: Any) -> str | None:
    """The key a request carries (a Django or DRF request), or ``None``."""
    auth = request.headers.get("authorization", "")
    if auth[:7].lower() == "bearer ":
        return auth[7:].strip() or None
    return request.headers.get("x-api-key") or None


_KEY_PREFIX = re.compile(r"gaia_[0-9a-f]{8}(?=_)")


def key_prefix(raw: str | None) -> str | None:
    """The visible prefix of a Gaia key (never its secret), for logs: no query."""
    found = _KEY_PREFIX.match(raw or "")
    return found.group(0) if found else None


def note(request: Any, **facts: Any) -> None:
    """Attach facts (key, agent, thread...) for the request's log line
    (``openai_api.middleware.ApiEdgeMiddleware`` creates ``gaia_facts``)."""
    django_request = getattr(request, "_request", request)
    store = getattr(django_request, "gaia_facts", None)
    if store is not None:
        store.update(facts)


class ApiKeyAuthentication(BaseAuthentication):
    """An API key with ``scope``; no key: the next authenticator (a staff session)."""

    scope: str = ApiKey.Scope.OPERATOR

    def authenticate(self, request: Request) -> tuple[Any, ApiKey] | None:
        raw = raw_api_key(request)
        if raw is None:
            return None
        key = services.api_key_authenticate(raw=raw, scope=self.scope)
        services.api_key_throttle(key=key)
        note(request, key=key.prefix)
        return (key.owner or AnonymousUser()), key

    def authenticate_header(self, request: Request) -> str:
        return 'Bearer realm="gaia"'  # makes "no credentials" a 401, not a 403


class OperatorKeyAuthentication(ApiKeyAuthentication):
    scope = ApiKey.Scope.OPERATOR


class AdminKeyAuthentication(ApiKeyAuthentication):
    """A key with the ``admin`` scope: what a staff session may do, for provisioning scripts."""

    scope = ApiKey.Scope.ADMIN

    def authenticate(self, request: Request) -> tuple[Any, ApiKey] | None:
        try:
            return super().authenticate(request)
        except PermissionDenied:
            raise PermissionDenied(
                "Keys, providers, prices and budgets are managed by staff: this needs a staff "
                "session or a key with the 'admin' scope.", code="staff_required") from None


class BenchmarksKeyAuthentication(ApiKeyAuthentication):
    """A key with the ``benchmarks`` scope, or the ``operator`` one (operators steer runs and
    make suites from the conversations they watch)."""

    scope = ApiKey.Scope.BENCHMARKS
    also = ApiKey.Scope.OPERATOR

    def authenticate(self, request: Request) -> tuple[Any, ApiKey] | None:
        try:
            return super().authenticate(request)
        except PermissionDenied:
            raw = raw_api_key(request)
            assert raw is not None
            try:
                key = services.api_key_authenticate(raw=raw, scope=self.also)
            except PermissionDenied:
                raise PermissionDenied("This API key has neither the 'benchmarks' nor the "
                                       "'operator' scope.", code="insufficient_scope") from None
            services.api_key_throttle(key=key)
            note(request, key=key.prefix)
            return (key.owner or AnonymousUser()), key


class StaffSessionAuthentication(SessionAuthentication):
    """A logged-in user's session (CSRF enforced on unsafe methods); the views' permission
    decides whether the user must be staff."""

    def authenticate(self, request: Request) -> tuple[Any, None] | None:
        found = super().authenticate(request)
        if found is not None:
            note(request, user=found[0].get_username())
        return found
