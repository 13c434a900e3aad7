"""The approvals inbox (``/approvals/``): every tool call that waits for an operator, oldest
first, then the decided ones with who decided, when, why and what came of it; filtered by
agent and state, paged like the other tables. Decisions go through ``POST
/api/v1/approvals/{id}`` (the page never decides itself); ``static/gaia/approvals.js`` swaps
the rows in again (``/fragments/approval-rows/``) when the feed says an approval came or went.
"""

from __future__ import annotations

from typing import Any

from django import forms
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render

from agents import selectors
from agents.http.pages import staff_required
from agents.models import Agent, Approval
from agents.pages.paging import page_of

STATES = [("", "any state"), ("pending", "waiting"), *[
    (value, label) for value, label in Approval.Status.choices if value != "pending"]]


class ApprovalFilterForm(forms.Form):
    state = forms.ChoiceField(choices=STATES, required=False)
    agent = forms.CharField(required=False, max_length=100)


def approval_row(row: Approval) -> dict[str, Any]:
    """An inbox row: the API's shape (``approval_public``) and what it came to, in words."""
    shown = selectors.approval_public(row)
    shown["outcome"] = approval_outcome(shown)
    return shown


def approval_outcome(a: dict[str, Any]) -> str:
    """What became of the tool call, as the inbox and the thread page say it."""
    if a["status"] == Approval.Status.APPROVED:
        return "the tool ran"
    if a["status"] == Approval.Status.DENIED:
        return "not run: the model was told it was denied"
    if a["status"] == Approval.Status.EXPIRED:
        if a["decided_by"] == "turn stopped":
            return "not run: its turn stopped before anyone decided"
        return "not run: nobody decided in time"
    return "waits for a decision"


def inbox_context(request: HttpRequest) -> dict[str, Any]:
    """The inbox's context for its query (state, agent, page)."""
    form = ApprovalFilterForm(request.GET or None)
    f = form.cleaned_data if form.is_valid() else {}
    page, query = page_of(request, selectors.approval_inbox(
        status=f.get("state") or None, agent=f.get("agent") or None))
    return {
        "page": "approvals", "form": form, "page_obj": page, "query": query,
        "approvals": [approval_row(a) for a in page],
        "agents": Agent.objects.order_by("slug").values_list("slug", flat=True),
        "filtered": bool(f.get("state") or f.get("agent")),
    }


@staff_required
def approval_inbox(request: HttpRequest) -> HttpResponse:
    return render(request, "ui/approvals.html", inbox_context(request))


def pending_count(request: HttpRequest) -> dict[str, Any]:
    """The navigation's badge (``ui/_approvals_count.html``)."""
    return {"approvals_pending": selectors.approval_pending_count()}
