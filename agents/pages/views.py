"""The operator pages: Django templates that are useful without JavaScript, patched live by
``static/gaia/`` from the ``/ws`` feed. Buttons and forms call the operator REST API
(``/api/v1``) with the staff session and its CSRF token.

One markup per thing: a live update does not draw a row, a message or an approval in
JavaScript, it asks :func:`fragment` for the partial template the page includes, rendered from
the same context builder as the page (``_agents``, ``_thread_rows``, ``_thread_context``...),
and swaps it in. A fragment is HTML for the page's own script, not an API.

Every page needs a logged-in, active staff user (:func:`staff_required`); the login form
refuses anyone else.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import datetime, time
from decimal import Decimal
from typing import Any, TypeVar
from urllib.parse import quote

from django import forms
from django.contrib.auth import views as auth_views
from django.contrib.auth.forms import AuthenticationForm
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import render
from django.urls import reverse_lazy
from django.utils import timezone

from agents import selectors, services
from agents.http.pages import LOGIN_URL, is_staff, page_sort, staff_required
from agents.kernel.exceptions import NotFound
from agents.models import Agent, ApiKey, Approval, AuditEvent, Budget, Provider, Thread
from agents.pages import approvals as approval_pages
from agents.pages.agent_editor import agent_editor_context
from agents.pages.paging import page_of as _page_of

THREADS_PER_PAGE = 50

T = TypeVar("T")


def _or_404(get: Callable[..., T], **lookup: Any) -> T:
    """``get(**lookup)``, a selector's one row; its :class:`NotFound` is the page's 404 (with
    the selector's message), as every page answers for a row that is not there."""
    try:
        return get(**lookup)
    except NotFound as exc:
        raise Http404(exc.message) from exc


class StaffAuthenticationForm(AuthenticationForm):
    """One answer for every refusal (a wrong password, an unknown user, an inactive or a
    non-staff account): a message only a right password gets would confirm the credential."""

    error_messages = {
        **AuthenticationForm.error_messages,
        "invalid_login": "Please enter the username and password of a staff account (this "
                         "page is for staff accounts only).",
    }

    def confirm_login_allowed(self, user: Any) -> None:
        if not is_staff(user):  # the pages' own gate (staff_required) asks the same
            raise self.get_invalid_login_error()


class LoginView(auth_views.LoginView):
    template_name = "ui/login.html"
    authentication_form = StaffAuthenticationForm
    redirect_authenticated_user = False
    next_page = reverse_lazy("ui:dashboard")


class LogoutView(auth_views.LogoutView):
    next_page = LOGIN_URL


def _agents(request: HttpRequest) -> list[dict[str, Any]]:
    """The agents' rows of the dashboard and the agent list, in the page's ``?sort=``."""
    return selectors.agent_list_public(sort=page_sort(request, selectors.AGENT_ORDERING))


def _active_threads() -> list[dict[str, Any]]:
    """The dashboard's thread rows: the most recently active threads still active."""
    return selectors.thread_list_active(limit=20)


@staff_required
def dashboard(request: HttpRequest) -> HttpResponse:
    return render(request, "ui/dashboard.html", {
        "page": "dashboard",
        "organism": selectors.organism_info(),
        "agents": _agents(request),
        "threads": _active_threads(),
    })


@staff_required
def agent_list(request: HttpRequest) -> HttpResponse:
    return render(request, "ui/agents.html", {
        "page": "agents", "ordering": selectors.AGENT_ORDERING, "agents": _agents(request),
        **agent_editor_context(None)})


def _agent_threads(slug: str) -> list[dict[str, Any]]:
    """An agent page's recent threads."""
    return [_thread_row(t) for t in selectors.thread_list(agent=slug)[:20]]


@staff_required
def agent_detail(request: HttpRequest, slug: str) -> HttpResponse:
    agent = _or_404(selectors.agent_get, slug=slug)
    state = selectors.agent_public_get(slug=slug)
    return render(request, "ui/agent.html", {
        "page": "agent",
        "agent": state,
        "config": selectors.agent_config(agent),
        "threads": _agent_threads(slug),
        "last_error": selectors.agent_last_error(agent_id=agent.pk),
        "admin_url": f"/admin/agents/agent/{agent.pk}/change/",
        "agent_path": quote(slug, safe=""),
        "thread_count": Thread.objects.filter(agent_id=agent.pk).count(),
        "trail": _trail(f"agent:{slug}"),
        **agent_editor_context(agent),
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


def _thread_list_context(request: HttpRequest) -> dict[str, Any]:
    """The thread list page's context for its query (filters, sort, page)."""
    form = ThreadFilterForm(request.GET or None)
    filters = form.selector_filters()
    sort = page_sort(request, selectors.THREAD_ORDERING)
    page, query = _page_of(request, selectors.thread_list(**filters, sort=sort),
                           per_page=THREADS_PER_PAGE,
                           count=selectors.thread_list_count(**filters))
    # a benchmark run's own threads make no suite (they are replays, not conversations)
    suite_filter = None if filters["run"] else {
        k: v.isoformat() if isinstance(v, datetime) else v
        for k, v in filters.items() if v is not None and k != "run"}
    return {
        "page": "threads",
        "form": form,
        "ordering": selectors.THREAD_ORDERING,
        "threads": [_thread_row(t) for t in page.object_list],
        "page_obj": page,
        "per_page": THREADS_PER_PAGE,
        "query": query,
        "agents": Agent.objects.order_by("slug").values_list("slug", flat=True),
        "suite_filter": suite_filter,
        "can_make_suite": suite_filter is not None,
        "filter_text": ", ".join(f"{form.fields[k].label or k} {v}" for k, v in (
            form.cleaned_data.items() if form.is_valid() else ()) if v and k != "run"),
    }


@staff_required
def thread_list(request: HttpRequest) -> HttpResponse:
    return render(request, "ui/threads.html", _thread_list_context(request))


THREAD_PAGE_MESSAGES = 100  # the thread page shows this many, with a link to earlier ones


def _thread_approvals(thread: Thread, *, status: str | None = None) -> list[Approval]:
    """A thread's approvals, oldest first: in every state (a decided one stays, with its
    outcome), or the ``pending`` ones."""
    return list(selectors.approval_list(thread_id=thread.pk, status=status)
                .order_by("created_at", "pk"))


def _call_approval(approvals: list[Approval], call_id: Any, start: Any, end: Any) -> str | None:
    """The status of the approval of call ``call_id`` of the message stored at ``start`` (the
    next message at ``end``, ``None``: none yet): a call's approval is asked after its call
    is stored and before its result is (call ids repeat from one turn to the next)."""
    found = None
    for a in approvals:
        if a.call_id == call_id and a.created_at >= start and (end is None or a.created_at < end):
            found = a.status
    return found


def _thread_context(request: HttpRequest, thread_id: str) -> dict[str, Any]:
    """The thread page's context: the thread, its pending approvals and a page of messages
    (``?before=``: the page of earlier ones), a tool call and its result drawn as one
    (``ui/_tool_call.html``): each result joins the latest call of its id before it (ids
    repeat from one turn to the next); one whose call is not in the thread stands alone."""
    thread = _or_404(selectors.thread_get, thread_id=thread_id)
    shown = selectors.thread_public_row(thread)
    approvals = _thread_approvals(thread)
    messages: list[dict[str, Any]] = []
    calls: dict[str, dict[str, Any]] = {}
    try:
        before = int(request.GET["before"]) if request.GET.get("before") else None
    except ValueError:
        before = None
    rows, older = selectors.thread_messages_page(thread_id=thread.pk, before=before,
                                                 limit=THREAD_PAGE_MESSAGES)
    for i, row in enumerate(rows):
        m = selectors.message_public_row(row)
        payload = m["payload"]
        end = rows[i + 1].created_at if i + 1 < len(rows) else None
        m["calls"] = [{**c, "origin": payload.get("origin"), "result": None,
                       "approval": _call_approval(approvals, c.get("id"), row.created_at, end)
                       if approvals and c.get("id") else None}
                      for c in payload.get("tool_calls") or ()]
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
    _mark_turns(thread, rows, messages)
    shown["messages"] = messages
    return {"page": "thread", "thread": shown, "older": older, "before": before,
            "approvals": [selectors.approval_public(a) for a in approvals],
            "parent": selectors.thread_parent(thread=thread)}


def _mark_turns(thread: Thread, rows: list[Any], messages: list[dict[str, Any]]) -> None:
    """Give each turn's last reply on the page its turn's index (``trace_turn``: its "Trace"
    toggle, agents/pages/traces.py); turns count the client's messages, as the trace API."""
    if not rows:
        return
    turn = selectors.turn_count_before(thread_id=thread.pk, seq=rows[0].seq) - 1
    last: dict[int, dict[str, Any]] = {}
    by_id = {m["id"]: m for m in messages}
    for row in rows:
        if row.role == "user" and not row.internal:
            turn += 1
        elif row.role == "assistant" and not row.internal and row.pk in by_id:
            last[max(turn, 0)] = by_id[row.pk]
    for index, m in last.items():
        m["trace_turn"] = index


@staff_required
def thread_detail(request: HttpRequest, thread_id: str) -> HttpResponse:
    return render(request, "ui/thread.html", _thread_context(request, thread_id))


def _thread_row(thread: Thread) -> dict[str, Any]:
    return selectors.thread_public_row(thread)


# ---------------------------------------------------------------------------------------------
# Keys, providers and the audit trail: read here, written through /api/v1 (apis/console.py)

class KeyFilterForm(forms.Form):
    state = forms.ChoiceField(choices=[("", "any state"), ("active", "active"),
                                       ("expired", "expired"), ("revoked", "revoked")],
                              required=False)
    q = forms.CharField(required=False, max_length=200, label="name or prefix")


def _key_list_context(request: HttpRequest) -> dict[str, Any]:
    """The key list page's context for its query (state, name or prefix, sort, page)."""
    form = KeyFilterForm(request.GET or None)
    f = form.cleaned_data if form.is_valid() else {}
    page, query = _page_of(request, selectors.key_list(
        state=f.get("state") or None, q=f.get("q") or None,
        sort=page_sort(request, selectors.KEY_ORDERING)))
    return {
        "page": "keys", "form": form, "page_obj": page, "query": query,
        "ordering": selectors.KEY_ORDERING,
        "keys": [selectors.key_public(k) for k in page],
        "scopes": ApiKey.Scope.choices,
        "agents": Agent.objects.order_by("slug").values_list("slug", flat=True)}


@staff_required
def key_list(request: HttpRequest) -> HttpResponse:
    return render(request, "ui/keys.html", _key_list_context(request))


def _trail(target: str) -> list[dict[str, Any]]:
    """The latest 20 audit entries about ``target`` (a key's or a provider's page)."""
    return [selectors.audit_public(r) for r in selectors.audit_list(target=target)[:20]]


@staff_required
def key_detail(request: HttpRequest, key_id: str) -> HttpResponse:
    key = selectors.key_public(_or_404(selectors.key_get, key_id=key_id))
    return render(request, "ui/key.html", {
        "page": "key", "key": key, "scopes": ApiKey.Scope.choices,
        "agents": Agent.objects.order_by("slug").values_list("slug", flat=True),
        "trail": _trail(f"key:{key['prefix']}")})


@staff_required
def budget_list(request: HttpRequest) -> HttpResponse:
    """Budgets with what each spent this period (a bar each), the form that makes one and
    those that change or delete it: all through ``/api/v1/budgets``, as the API's rules say."""
    rows = []
    for b in selectors.budget_list(sort=page_sort(request, selectors.BUDGET_ORDERING)):
        shown = selectors.budget_public(b)
        used = Decimal(str(shown["spent"])) + Decimal(str(shown["reserved"]))
        shown["percent"] = min(100, int(used * 100 / Decimal(str(shown["limit"]))))
        shown["warn"] = bool(b.soft_percent and shown["percent"] >= b.soft_percent)
        rows.append(shown)
    trail = AuditEvent.objects.filter(action__in=BUDGET_ACTIONS)[:20]
    return render(request, "ui/budgets.html", {
        "page": "budgets", "budgets": rows, "ordering": selectors.BUDGET_ORDERING,
        "scopes": Budget.Scope.choices, "units": Budget.Unit.choices,
        "periods": Budget.Period.choices,
        "agents": Agent.objects.order_by("slug").values_list("slug", flat=True),
        "keys": ApiKey.objects.filter(revoked_at__isnull=True).order_by("name").values_list(
            "prefix", "name"),
        "trail": [selectors.audit_public(r) for r in trail]})


BUDGET_ACTIONS = ("budget_create", "budget_update", "budget_delete", "price_set",
                  "price_delete")


@staff_required
def provider_list(request: HttpRequest) -> HttpResponse:
    return render(request, "ui/providers.html", {
        "page": "providers", "kinds": Provider.Kind.choices,
        "ordering": selectors.PROVIDER_ORDERING,
        "providers": [selectors.provider_public(p) for p in selectors.provider_list(
            sort=page_sort(request, selectors.PROVIDER_ORDERING))]})


@staff_required
def provider_detail(request: HttpRequest, name: str) -> HttpResponse:
    found = _or_404(selectors.provider_get, name=name)
    provider = selectors.provider_public(found)
    models = sorted({a.model_name for a in found.agents.all()} | {found.default_model} - {""})
    return render(request, "ui/provider.html", {
        "page": "provider", "provider": provider, "kinds": Provider.Kind.choices,
        "options_json": json.dumps(provider["options"], indent=2),
        "prices": [{"model": m, "price": services.price_lookup(provider=found, model=m)}
                   for m in models],
        "overrides": found.prices.order_by("model"),
        "trail": _trail(f"provider:{name}")})


class AuditFilterForm(forms.Form):
    action = forms.ChoiceField(choices=[("", "any action"), *AuditEvent.Action.choices],
                               required=False)
    actor = forms.CharField(required=False, max_length=320)
    target = forms.CharField(required=False, max_length=300)


@staff_required
def audit_list(request: HttpRequest) -> HttpResponse:
    selectors.audit_read_check(api_key=None, user=request.user)  # the REST API's rule
    form = AuditFilterForm(request.GET or None)
    f = form.cleaned_data if form.is_valid() else {}
    page, query = _page_of(request, selectors.audit_list(
        action=f.get("action") or None, actor=f.get("actor") or None,
        target=f.get("target") or None, sort=page_sort(request, selectors.AUDIT_ORDERING)))
    return render(request, "ui/audit.html", {
        "page": "audit", "form": form, "page_obj": page, "query": query,
        "ordering": selectors.AUDIT_ORDERING,
        "rows": [selectors.audit_public(r) for r in page]})


# ---------------------------------------------------------------------------------------------
# Fragments: the partial templates the pages include, for the pages' own scripts to swap in

def _thread_rows(request: HttpRequest) -> dict[str, Any]:
    """The thread rows of the page named by ``?of=``: the dashboard's active threads, an
    agent page's recent ones (``?agent=``), else the thread list for the rest of the query."""
    of = request.GET.get("of")
    if of == "dashboard":
        return {"threads": _active_threads(), "empty": "No thread is active."}
    if of == "agent":
        return {"threads": _agent_threads(request.GET.get("agent", "")),
                "empty": "No threads yet."}
    context = _thread_list_context(request)
    return {"threads": context["threads"], "selectable": context["can_make_suite"],
            "empty": "No thread matches."}


def _approvals(request: HttpRequest) -> dict[str, Any]:
    """A thread's approvals in every state (``?status=pending``: the waiting ones)."""
    thread = _or_404(selectors.thread_get, thread_id=request.GET.get("thread", ""))
    status = "pending" if request.GET.get("status") == "pending" else None
    return {"approvals": [selectors.approval_public(a)
                          for a in _thread_approvals(thread, status=status)]}


def _agent_error(request: HttpRequest) -> dict[str, Any]:
    agent = _or_404(selectors.agent_get, slug=request.GET.get("agent", ""))
    return {"last_error": selectors.agent_last_error(agent_id=agent.pk)}


FRAGMENTS: dict[str, tuple[str, Callable[[HttpRequest], dict[str, Any]]]] = {
    "agent-rows": ("ui/_agent_rows.html", lambda request: {"agents": _agents(request)}),
    "agent-error": ("ui/_agent_error.html", _agent_error),
    "thread-rows": ("ui/_thread_rows.html", _thread_rows),
    "messages": ("ui/_messages.html",
                 lambda request: _thread_context(request, request.GET.get("thread", ""))),
    "approvals": ("ui/_approvals.html", _approvals),
    "key-rows": ("ui/_key_rows.html", _key_list_context),
    "approval-rows": ("ui/_approval_rows.html", approval_pages.inbox_context),
    "approval-pager": ("ui/_approval_pager.html", approval_pages.inbox_context),
    "approvals-count": ("ui/_approvals_count.html", approval_pages.pending_count),
}


@staff_required
def fragment(request: HttpRequest, name: str) -> HttpResponse:
    """``GET /fragments/<name>/?...``: the partial template ``name`` of a page, rendered from
    the page's own context builder for the same query; 404 for an unknown name."""
    try:
        template, context = FRAGMENTS[name]
    except KeyError:
        raise Http404(f"No fragment {name!r}.") from None
    return render(request, template, context(request))
