"""DRF authentication with Gaia API keys, for the operator-facing REST APIs.

``ApiKeyAuthentication`` reads ``Authorization: Bearer KEY`` or ``X-API-Key: KEY`` and checks it
with :func:`agents.services.api_key_authenticate` for its ``scope``; subclass it (or use
:func:`api_key_authentication`) per scope. No key header: it stands aside, so a session
authentication class after it can let staff in.
"""

from __future__ import annotations

from typing import Any

from rest_framework import exceptions
from rest_framework.authentication import BaseAuthentication
from rest_framework.request import Request

from agents.exceptions import AuthenticationFailed, PermissionDenied
from agents.models import ApiKey


def raw_api_key(request: Request) -> str | None:
    header = request.META.get("HTTP_AUTHORIZATION", "")
    if header[:7].lower() == "bearer ":
        return header[7:].strip() or None
    return request.META.get("HTTP_X_API_KEY", "").strip() or None


class ApiKeyAuthentication(BaseAuthentication):
    scope: str = ApiKey.Scope.OPERATOR

    def authenticate(self, request: Request) -> tuple[Any, ApiKey] | None:
        from django.contrib.auth.models import AnonymousUser

        from agents.services import api_key_authenticate

        raw = raw_api_key(request)
        if raw is None:
            return None
        try:
            key = api_key_authenticate(raw=raw, scope=self.scope)
        except AuthenticationFailed as exc:
            raise exceptions.AuthenticationFailed(exc.message, code=exc.code) from exc
        except PermissionDenied as exc:
            raise exceptions.PermissionDenied(exc.message, code=exc.code) from exc
        return (key.owner or AnonymousUser()), key

    def authenticate_header(self, request: Request) -> str:
        return 'Bearer realm="gaia"'


def api_key_authentication(scope: str) -> type[ApiKeyAuthentication]:
    return type(f"ApiKeyAuthentication_{scope}", (ApiKeyAuthentication,), {"scope": scope})
