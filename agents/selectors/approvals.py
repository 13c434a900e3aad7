"""Reads of approvals: the tool calls waiting for an operator (``GET /api/v1/approvals``) and
the shape every interface shows them in."""

from __future__ import annotations

import uuid
from typing import Any

from django.db.models import Case, F, IntegerField, QuerySet, Value, When

from agents.kernel.exceptions import NotFound
from agents.models import Approval
from agents.selectors.threads import iso


def approval_list(*, status: str | None = Approval.Status.PENDING, agent: str | None = None,
                  thread_id: Any = None) -> QuerySet[Approval]:
    """Operators' approvals (a client's own MCP approvals are the client's), newest first:
    the pending ones unless ``status`` says otherwise (``None``: every status)."""
    rows = (Approval.objects.filter(decided_by_client=False).select_related("agent")
            .order_by("-created_at", "-pk"))
    if status:
        rows = rows.filter(status=status)
    if agent:
        rows = rows.filter(agent__slug=agent)
    if thread_id:
        rows = rows.filter(thread_id=thread_id)
    return rows


def approval_inbox(*, status: str | None = None, agent: str | None = None
                   ) -> QuerySet[Approval]:
    """The approvals inbox (``/approvals/``): operators' approvals (of ``status``, of
    ``agent``), those that wait first, oldest first (the longest wait is the most urgent),
    then the decided ones, the latest decision first."""
    rows = approval_list(status=status or None, agent=agent or None)
    waiting = Case(When(status=Approval.Status.PENDING, then=Value(0)), default=Value(1),
                   output_field=IntegerField())
    asked = Case(When(status=Approval.Status.PENDING, then=F("created_at")))
    return rows.order_by(waiting, asked.asc(nulls_last=True), F("decided_at").desc(nulls_last=True),
                         "-created_at", "-pk")


def approval_pending_count() -> int:
    """How many operators' approvals wait (the console's navigation badge)."""
    return Approval.objects.filter(decided_by_client=False,
                                   status=Approval.Status.PENDING).count()


def approval_get(*, approval_id: Any) -> Approval:
    try:
        key = uuid.UUID(str(approval_id))
    except ValueError:
        key = None
    found = (Approval.objects.filter(pk=key, decided_by_client=False).select_related("agent")
             .first() if key else None)
    if found is None:
        raise NotFound(f"No approval {approval_id!r}.", code="approval_not_found",
                       param="approval_id")
    return found


def approval_public(row: Approval) -> dict[str, Any]:
    return {"id": str(row.pk), "status": row.status, "agent": row.agent.slug,
            "thread_id": str(row.thread_id), "tool": row.tool, "server": row.server or None,
            "arguments": row.arguments, "call_id": row.call_id or None,
            "created_at": iso(row.created_at), "expires_at": iso(row.expires_at),
            "decided_at": iso(row.decided_at),
            "decided_by": row.decided_by or None, "reason": row.reason or None}
