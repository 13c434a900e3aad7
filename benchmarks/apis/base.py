"""What every view of ``/api/v1/benchmarks/`` shares: who may call it (API keys with the
``benchmarks`` or the ``operator`` scope, ``Authorization: Bearer`` or ``X-API-Key``, or a staff
session), the run a path names, and the JSON 404 of a path that names nothing. Errors are the
operator API's (:mod:`agents.http.rest`, the shared edge)."""

from __future__ import annotations

from typing import Any

from drf_spectacular.utils import extend_schema
from rest_framework import exceptions
from rest_framework.permissions import BasePermission
from rest_framework.request import Request
from rest_framework.response import Response

from agents.http.authentication import BenchmarksKeyAuthentication, StaffSessionAuthentication
from agents.http.rest import GaiaApi
from agents.kernel.exceptions import NotFound
from agents.models import ApiKey
from benchmarks import selectors
from benchmarks.models import BenchmarkRun


class BenchmarksAccess(BasePermission):
    """A ``benchmarks`` key, or a staff user's session."""

    def has_permission(self, request: Request, view: Any) -> bool:
        if isinstance(request.auth, ApiKey):
            return True
        user = request.user
        if user is not None and user.is_authenticated:
            if user.is_staff:
                return True
            raise exceptions.PermissionDenied("Staff only.", code="staff_required")
        raise exceptions.NotAuthenticated(
            "Send an API key with the 'benchmarks' scope (Authorization: Bearer KEY).",
            code="missing_api_key")


class BenchmarksApi(GaiaApi):
    authentication_classes = [BenchmarksKeyAuthentication, StaffSessionAuthentication]
    permission_classes = [BenchmarksAccess]

    def _key(self, request: Request) -> ApiKey | None:
        return request.auth if isinstance(request.auth, ApiKey) else None

    def _user(self, request: Request) -> Any:
        return request.user if request.user and request.user.is_authenticated else None


def run_or_404(run_id: int) -> BenchmarkRun:
    run = selectors.run_get(run_id=run_id)
    if run is None:
        raise NotFound(f"No run {run_id}.", code="run_not_found")
    return run


class UnknownRouteApi(BenchmarksApi):
    @extend_schema(exclude=True)
    def _missing(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        raise NotFound(f"No route {request.path}.", code="not_found")

    get = post = put = patch = delete = _missing
