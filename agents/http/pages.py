"""What every app's operator pages share (agents' console, the benchmark pages): the staff
gate and the ``?sort=`` check. Here, at the edge every app may use, so that no app imports
another's pages."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from django.contrib.auth.decorators import user_passes_test
from django.core.exceptions import BadRequest
from django.http import HttpRequest, HttpResponse
from django.urls import reverse_lazy

from agents.kernel.exceptions import InvalidRequest

LOGIN_URL = reverse_lazy("ui:login")


def is_staff(user: Any) -> bool:
    return bool(user.is_active and user.is_staff)


def staff_required(view: Callable[..., HttpResponse]) -> Callable[..., HttpResponse]:
    """Anyone but an active staff user goes to the login page (and back after)."""
    return user_passes_test(is_staff, login_url=LOGIN_URL)(view)


def page_sort(request: HttpRequest, ordering: Any) -> str | None:
    """The page's ``?sort=`` checked by the list's ordering: a 400 page for another."""
    sort = request.GET.get("sort") or None
    try:
        ordering.check(sort)
    except InvalidRequest as exc:
        raise BadRequest(exc.message) from exc
    return sort
