"""The operator pages: Django templates that are useful without JavaScript, patched live by
``static/gaia/feed.js`` from the ``/ws`` feed. Buttons and forms call the operator REST API
(``/api/v1``) with the staff session and its CSRF token: the pages have no endpoint of their
own that another client could not use.

Every page needs a logged-in, active staff user (:func:`staff_required`); the login form
refuses anyone else.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from django import forms
from django.contrib.auth import views as auth_views
from django.contrib.auth.decorators import user_passes_test
from django.contrib.auth.forms import AuthenticationForm
from django.core.paginator import Paginator
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import render
from django.urls import reverse_lazy

from agents import selectors
from agents.exceptions import NotFound
from agents.models import Agent, Thread

LOGIN_URL = reverse_lazy("ui:login")
THREADS_PER_PAGE = 50


def _is_staff(user: Any) -> bool:
    return bool(user.is_active and user.is_staff)


def staff_required(view: Callable[..., HttpResponse]) -> Callable[..., HttpResponse]:
    """Anyone but an active staff user goes to the login page (and back after)."""
    return user_passes_test(_is_staff, login_url=LOGIN_URL)(view)


class StaffAuthenticationForm(AuthenticationForm):
    """One answer for every refusal (a wrong password, an unknown user, an inactive or a
    non-staff account): a message only a right password gets would confirm the credential."""

    error_messages = {
        **AuthenticationForm.error_messages,
        "invalid_login": "Please enter the username and password of a staff account (this "
                         "page is for staff accounts only).",
    }

    def confirm_login_allowed(self, user: Any) -> None:
        if not user.is_active or not user.is_staff:
            raise self.get_invalid_login_error()


class LoginView(auth_views.LoginView):
    template_name = "ui/login.html"
    authentication_form = StaffAuthenticationForm
    redirect_authenticated_user = False
    next_page = reverse_lazy("ui:dashboard")


class LogoutView(auth_views.LogoutView):
    next_page = LOGIN_URL


@staff_required
def dashboard(request: HttpRequest) -> HttpResponse:
    return render(request, "ui/dashboard.html", {
        "page": "dashboard",
        "organism": selectors.organism_info(),
        "agents": selectors.agent_list_public(),
        "threads": selectors.thread_list_active(limit=20),
    })


@staff_required
def agent_list(request: HttpRequest) -> HttpResponse:
    return render(request, "ui/agents.html", {
        "page": "agents", "agents": selectors.agent_list_public()})


@staff_required
def agent_detail(request: HttpRequest, slug: str) -> HttpResponse:
    try:
        agent = selectors.agent_get(slug=slug)
    except NotFound as exc:
        raise Http404(exc.message) from exc
    state = selectors.agent_public_get(slug=slug)
    threads = selectors.thread_list(agent=slug)[:20]
    return render(request, "ui/agent.html", {
        "page": "agent",
        "agent": state,
        "config": selectors.agent_config(agent),
        "threads": [_thread_row(t) for t in threads],
        "admin_url": f"/admin/agents/agent/{agent.pk}/change/",
    })


class ThreadFilterForm(forms.Form):
    status = forms.ChoiceField(choices=[("", "any status"), *Thread.Status.choices],
                               required=False)
    agent = forms.CharField(required=False, max_length=100)
    q = forms.CharField(required=False, max_length=200, label="search")
    run = forms.IntegerField(required=False, min_value=1, label="benchmark run",
                             widget=forms.HiddenInput)


@staff_required
def thread_list(request: HttpRequest) -> HttpResponse:
    form = ThreadFilterForm(request.GET or None)
    filters = form.cleaned_data if form.is_valid() else {}
    threads = selectors.thread_list(
        status=filters.get("status") or None, agent=filters.get("agent") or None,
        q=filters.get("q") or None, run=filters.get("run"))
    page = Paginator(threads, THREADS_PER_PAGE).get_page(request.GET.get("page"))
    query = request.GET.copy()
    query.pop("page", None)
    return render(request, "ui/threads.html", {
        "page": "threads",
        "form": form,
        "threads": [_thread_row(t) for t in page.object_list],
        "page_obj": page,
        "per_page": THREADS_PER_PAGE,
        "query": query.urlencode(),
        "agents": Agent.objects.order_by("slug").values_list("slug", flat=True),
    })


THREAD_PAGE_MESSAGES = 100  # the thread page shows this many, with a link to earlier ones


@staff_required
def thread_detail(request: HttpRequest, thread_id: str) -> HttpResponse:
    try:
        thread = selectors.thread_get(thread_id=thread_id)
    except NotFound as exc:
        raise Http404(exc.message) from exc
    shown = selectors.thread_public_row(thread)
    approvals = [selectors.approval_public(a) for a in
                 selectors.approval_list(thread_id=thread.pk).order_by("created_at", "pk")]
    waiting = {a["call_id"] for a in approvals if a["call_id"]}
    # A tool call and its result are drawn as one (``ui/_tool_call.html``): each result joins
    # the latest call of its id before it (ids repeat from one turn to the next); one whose
    # call is not in the thread stands alone. static/gaia/ui.js pairs them alike.
    messages: list[dict[str, Any]] = []
    calls: dict[str, dict[str, Any]] = {}
    try:
        before = int(request.GET["before"]) if request.GET.get("before") else None
    except ValueError:
        before = None
    rows, older = selectors.thread_messages_page(thread_id=thread.pk, before=before,
                                                 limit=THREAD_PAGE_MESSAGES)
    for row in rows:
        m = selectors.message_public_row(row)
        payload = m["payload"]
        m["calls"] = [{**c, "origin": payload.get("origin"), "result": None,
                       "waiting": c.get("id") in waiting} for c in payload.get("tool_calls") or ()]
        calls.update((c["id"], c) for c in m["calls"] if c.get("id"))
        call_id = payload.get("tool_call_id")
        if call_id and call_id in calls:
            calls.pop(call_id)["result"] = m
            continue
        if call_id:
            name = m["from"] if m["internal"] else "tool result"  # a client's: from the client
            m["calls"] = [{"id": call_id, "name": name, "arguments": None,
                           "origin": payload.get("origin"), "result": m}]
        messages.append(m)
    shown["messages"] = messages
    return render(request, "ui/thread.html", {"page": "thread", "thread": shown,
                                              "approvals": approvals, "older": older,
                                              "before": before})


def _thread_row(thread: Thread) -> dict[str, Any]:
    return selectors.thread_public_row(thread)
