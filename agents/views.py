"""The operator pages: Django templates that are useful without JavaScript, patched live by
``static/gaia/feed.js`` from the ``/ws`` feed. Buttons and forms call the operator REST API
(``/api/v1``) with the staff session and its CSRF token: the pages have no endpoint of their
own that another client could not use.

Every page needs a logged-in, active staff user (:func:`staff_required`); the login form
refuses anyone else.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import datetime, time
from typing import Any

from django import forms
from django.contrib.auth import views as auth_views
from django.contrib.auth.decorators import user_passes_test
from django.contrib.auth.forms import AuthenticationForm
from django.core.exceptions import BadRequest
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import render
from django.urls import reverse_lazy
from django.utils import timezone

from agents import selectors
from agents.exceptions import InvalidRequest, NotFound
from agents.models import Agent, ApiKey, AuditEvent, Provider, Thread
from agents.paging import SeekPaginator

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


def page_sort(request: HttpRequest, ordering: Any) -> str | None:
    """The page's ``?sort=`` checked by the list's ordering: a 400 page for another."""
    sort = request.GET.get("sort") or None
    try:
        ordering.check(sort)
    except InvalidRequest as exc:
        raise BadRequest(exc.message) from exc
    return sort


@staff_required
def agent_list(request: HttpRequest) -> HttpResponse:
    return render(request, "ui/agents.html", {
        "page": "agents", "ordering": selectors.AGENT_ORDERING,
        "agents": selectors.agent_list_public(
            sort=page_sort(request, selectors.AGENT_ORDERING))})


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
        "last_error": selectors.agent_last_error(agent_id=agent.pk),
        "admin_url": f"/admin/agents/agent/{agent.pk}/change/",
    })


class ThreadFilterForm(forms.Form):
    status = forms.ChoiceField(choices=[("", "any status"), *Thread.Status.choices],
                               required=False)
    agent = forms.CharField(required=False, max_length=100)
    q = forms.CharField(required=False, max_length=200, label="search")
    since = forms.DateField(required=False, label="active since",
                            widget=forms.DateInput(attrs={"type": "date"}))
    until = forms.DateField(required=False, label="begun until",
                            widget=forms.DateInput(attrs={"type": "date"}))
    run = forms.IntegerField(required=False, min_value=1, label="benchmark run",
                             widget=forms.HiddenInput)

    def selector_filters(self) -> dict[str, Any]:
        """The thread list selector's filters for what the form holds (nothing for a form
        that does not validate): ``since`` from the start of its day, ``until`` to the end of
        its day, in the server's time zone. The page sends the same filters, but ``run``, to
        make an evaluation suite of the threads it lists."""
        data = self.cleaned_data if self.is_valid() else {}
        zone = timezone.get_current_timezone()
        since, until = data.get("since"), data.get("until")
        return {
            "status": data.get("status") or None, "agent": data.get("agent") or None,
            "q": data.get("q") or None, "run": data.get("run"),
            "since": datetime.combine(since, time.min, zone) if since else None,
            "until": datetime.combine(until, time.max, zone) if until else None,
        }


@staff_required
def thread_list(request: HttpRequest) -> HttpResponse:
    form = ThreadFilterForm(request.GET or None)
    filters = form.selector_filters()
    sort = page_sort(request, selectors.THREAD_ORDERING)
    page = SeekPaginator(selectors.thread_list(**filters, sort=sort), THREADS_PER_PAGE,
                         count=selectors.thread_list_count(**filters)
                         ).get_page(request.GET.get("page"))
    query = request.GET.copy()
    query.pop("page", None)
    # a benchmark run's own threads make no suite (they are replays, not conversations)
    suite_filter = None if filters["run"] else {
        k: v.isoformat() if isinstance(v, datetime) else v
        for k, v in filters.items() if v is not None and k != "run"}
    return render(request, "ui/threads.html", {
        "page": "threads",
        "form": form,
        "ordering": selectors.THREAD_ORDERING,
        "threads": [_thread_row(t) for t in page.object_list],
        "page_obj": page,
        "per_page": THREADS_PER_PAGE,
        "query": query.urlencode(),
        "agents": Agent.objects.order_by("slug").values_list("slug", flat=True),
        "suite_filter": suite_filter,
        "can_make_suite": suite_filter is not None,
        "filter_text": ", ".join(f"{form.fields[k].label or k} {v}" for k, v in (
            form.cleaned_data.items() if form.is_valid() else ()) if v and k != "run"),
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


# ---------------------------------------------------------------------------------------------
# Keys, providers and the audit trail: read here, written through /api/v1 (apis/console.py)

PER_PAGE = 50


class KeyFilterForm(forms.Form):
    state = forms.ChoiceField(choices=[("", "any state"), ("active", "active"),
                                       ("expired", "expired"), ("revoked", "revoked")],
                              required=False)
    q = forms.CharField(required=False, max_length=200, label="name or prefix")


def _page_of(request: HttpRequest, rows: Any) -> tuple[Any, str]:
    page = SeekPaginator(rows, PER_PAGE).get_page(request.GET.get("page"))
    query = request.GET.copy()
    query.pop("page", None)
    return page, query.urlencode()


@staff_required
def key_list(request: HttpRequest) -> HttpResponse:
    form = KeyFilterForm(request.GET or None)
    f = form.cleaned_data if form.is_valid() else {}
    page, query = _page_of(request, selectors.key_list(
        state=f.get("state") or None, q=f.get("q") or None,
        sort=page_sort(request, selectors.KEY_ORDERING)))
    return render(request, "ui/keys.html", {
        "page": "keys", "form": form, "page_obj": page, "query": query,
        "ordering": selectors.KEY_ORDERING,
        "keys": [selectors.key_public(k) for k in page],
        "scopes": ApiKey.Scope.choices,
        "agents": Agent.objects.order_by("slug").values_list("slug", flat=True)})


def _trail(target: str) -> list[dict[str, Any]]:
    """The latest 20 audit entries about ``target`` (a key's or a provider's page)."""
    return [selectors.audit_public(r) for r in selectors.audit_list(target=target)[:20]]


@staff_required
def key_detail(request: HttpRequest, key_id: str) -> HttpResponse:
    try:
        key = selectors.key_public(selectors.key_get(key_id=key_id))
    except NotFound as exc:
        raise Http404(exc.message) from exc
    return render(request, "ui/key.html", {
        "page": "key", "key": key, "scopes": ApiKey.Scope.choices,
        "agents": Agent.objects.order_by("slug").values_list("slug", flat=True),
        "trail": _trail(f"key:{key['prefix']}")})


@staff_required
def provider_list(request: HttpRequest) -> HttpResponse:
    return render(request, "ui/providers.html", {
        "page": "providers", "kinds": Provider.Kind.choices,
        "ordering": selectors.PROVIDER_ORDERING,
        "providers": [selectors.provider_public(p) for p in selectors.provider_list(
            sort=page_sort(request, selectors.PROVIDER_ORDERING))]})


@staff_required
def provider_detail(request: HttpRequest, name: str) -> HttpResponse:
    try:
        provider = selectors.provider_public(selectors.provider_get(name=name))
    except NotFound as exc:
        raise Http404(exc.message) from exc
    return render(request, "ui/provider.html", {
        "page": "provider", "provider": provider, "kinds": Provider.Kind.choices,
        "options_json": json.dumps(provider["options"], indent=2),
        "trail": _trail(f"provider:{name}")})


class AuditFilterForm(forms.Form):
    action = forms.ChoiceField(choices=[("", "any action"), *AuditEvent.Action.choices],
                               required=False)
    actor = forms.CharField(required=False, max_length=320)
    target = forms.CharField(required=False, max_length=300)


@staff_required
def audit_list(request: HttpRequest) -> HttpResponse:
    form = AuditFilterForm(request.GET or None)
    f = form.cleaned_data if form.is_valid() else {}
    page, query = _page_of(request, selectors.audit_list(
        action=f.get("action") or None, actor=f.get("actor") or None,
        target=f.get("target") or None, sort=page_sort(request, selectors.AUDIT_ORDERING)))
    return render(request, "ui/audit.html", {
        "page": "audit", "form": form, "page_obj": page, "query": query,
        "ordering": selectors.AUDIT_ORDERING,
        "rows": [selectors.audit_public(r) for r in page]})
