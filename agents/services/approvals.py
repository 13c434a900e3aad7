"""Writes of approvals: a tool call that waits for an operator's decision (or, for a Responses
client's own MCP tool, for the client's), the decision, and the denial of an undecided one.

A decision reaches the process whose turn waits through a control message
(``approval_decided``); the turn itself reads the stored decision too, so none is lost.
Every outcome is in the audit trail: an operator's or a client's decision (``approve``,
``deny``), an approval nobody decided in time (``expire``) and a call refused because its
thread had ``GAIA_MAX_PENDING_APPROVALS`` waiting already (``refuse``).
"""

from __future__ import annotations

import uuid
from datetime import timedelta
from typing import Any

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from agents import selectors
from agents.kernel.exceptions import Conflict, InvalidRequest
from agents.models import Agent, ApiKey, Approval, Thread
from agents.outlet import events, realtime
from agents.services.audit import SYSTEM, Actor, audit_actor, audit_record
from agents.services.webhooks import webhook_approval_data, webhook_event_send

DECISIONS = {"approve": Approval.Status.APPROVED, "deny": Approval.Status.DENIED}


def approval_request(*, approval_id: uuid.UUID, thread_id: Any, agent: Agent, response_id: str,
                     call_id: str, tool: str, server: str, arguments: str, timeout: float,
                     by_client: bool = False) -> Approval:
    """A call of ``tool`` waits for a decision (at most ``timeout`` seconds): stored, its thread
    marked ``waiting``, the feed told (``approval_requested``). :class:`Conflict`
    (``too_many_approvals``) if the thread has ``GAIA_MAX_PENDING_APPROVALS`` calls waiting
    already: nothing is stored but the refusal, in the audit trail."""
    approval = _approval_request(
        approval_id=approval_id, thread_id=thread_id, agent=agent, response_id=response_id,
        call_id=call_id, tool=tool, server=server, arguments=arguments, timeout=timeout,
        by_client=by_client)
    if approval is None:
        limit = settings.GAIA_MAX_PENDING_APPROVALS
        raise Conflict(f"this thread has {limit} tool calls waiting for approval already "
                       "(GAIA_MAX_PENDING_APPROVALS).", code="too_many_approvals")
    return approval


@transaction.atomic
def _approval_request(*, approval_id: uuid.UUID, thread_id: Any, agent: Agent, response_id: str,
                      call_id: str, tool: str, server: str, arguments: str, timeout: float,
                      by_client: bool) -> Approval | None:
    now = timezone.now()
    # The thread's row, locked: the calls of one round ask at once, and count one by one.
    Thread.objects.select_for_update().filter(pk=thread_id).values_list("pk").first()
    limit = settings.GAIA_MAX_PENDING_APPROVALS
    waiting = Approval.objects.filter(thread_id=thread_id, status=Approval.Status.PENDING,
                                      expires_at__gt=now).count()
    if waiting >= limit:
        audit_record(actor=SYSTEM, action="refuse", target=f"thread:{thread_id}",
                     detail={"agent": agent.slug, "tool": tool[:200], "pending": waiting,
                             "limit": limit, "by_client": by_client})
        return None
    approval = Approval.objects.create(
        id=approval_id, thread_id=thread_id, agent=agent, response_id=response_id,
        call_id=call_id[:200], tool=tool[:200], server=server[:200], arguments=arguments,
        decided_by_client=by_client, expires_at=now + timedelta(seconds=timeout))
    if not by_client:
        _thread_status(thread_id, agent, Thread.Status.WAITING, now)
        realtime.send_event_on_commit(events.approval_requested(approval))
        realtime.send_event_on_commit(events.approvals_pending)
        webhook_event_send(type="approval.requested", data=webhook_approval_data(approval))
    return approval


def _thread_status(thread_id: Any, agent: Agent, status: str, now: Any,
                   was: str | None = None) -> None:
    """Set the thread's status (only if it is ``was``, when given) and tell the feed."""
    found = Thread.objects.filter(pk=thread_id)
    if not (found.filter(status=was) if was else found).update(status=status, updated_at=now):
        return
    count = Thread.objects.filter(pk=thread_id).values_list("message_count", flat=True).first()
    realtime.send_event_on_commit(events.thread_updated(
        thread_id=thread_id, agent=agent.slug, status=status, message_count=count or 0, at=now))


def approval_decider(*, api_key: ApiKey | None, username: str | None) -> str:
    """Who decided, as stored: the operator key's name, or the staff user's."""
    if api_key is not None:
        return f"key:{api_key.name or api_key.prefix}"
    return f"user:{username or '?'}"


@transaction.atomic
def approval_decide(*, approval_id: Any, decision: str, decided_by: str, reason: str = "",
                    api_key: ApiKey | None = None, actor: Actor | None = None) -> Approval:
    """Approve or deny a pending call (``decision``: ``approve`` or ``deny``), saying who.
    :class:`NotFound` for an unknown one, :class:`PermissionDenied` for one of an agent the
    operator's key may not use (as ``inject``), :class:`Conflict` for one decided already (or
    expired)."""
    if decision not in DECISIONS:
        raise InvalidRequest("'decision' is 'approve' or 'deny'.", param="decision",
                             code="invalid_decision")
    found = selectors.approval_get(approval_id=approval_id)
    selectors.api_key_agent_check(api_key=api_key, agent=found.agent)
    if not Approval.objects.filter(pk=found.pk, status=Approval.Status.PENDING).update(
            status=DECISIONS[decision], decided_by=decided_by[:300], reason=reason[:2000],
            decided_at=timezone.now()):
        found.refresh_from_db()
        raise Conflict(f"The approval is {found.status} already.", code="approval_decided")
    found.refresh_from_db()
    realtime.send_event_on_commit(events.approval_decided(found))
    realtime.send_event_on_commit(events.approvals_pending)
    realtime.send_control_on_commit("approval_decided", approval_id=str(found.pk))
    webhook_event_send(type="approval.decided", data=webhook_approval_data(found))
    audit_record(actor=actor, action=decision, target=f"approval:{found.pk}",
                 detail={"agent": found.agent.slug, "thread": str(found.thread_id),
                         "tool": found.tool, "reason": reason[:200]})
    return found


# Who "decided" an approval nobody decided: its time ran out, or its turn stopped first (a
# client gone, a kill, a server stopping); the thread's own status and error say which stop.
EXPIRED_BY_TIMEOUT = "timeout"
EXPIRED_BY_STOP = "turn stopped"


@transaction.atomic
def approval_settle(*, approval_id: Any, agent: Agent, stopped: bool = False) -> Approval:
    """The waiting turn's last word: an approval still pending is ``expired`` (a denial;
    ``decided_by`` says whether its time ran out or its turn was ``stopped`` first); its
    thread is ``active`` again, unless its turn has ended meanwhile (a kill, a client gone:
    the turn's record may be written first, and its status stands). Returns the approval as
    decided."""
    now = timezone.now()
    expired = Approval.objects.filter(pk=approval_id, status=Approval.Status.PENDING).update(
        status=Approval.Status.EXPIRED, decided_at=now,
        decided_by=EXPIRED_BY_STOP if stopped else EXPIRED_BY_TIMEOUT)
    approval = Approval.objects.select_related("agent").get(pk=approval_id)
    if expired:
        realtime.send_event_on_commit(events.approval_decided(approval))
        if not approval.decided_by_client:
            realtime.send_event_on_commit(events.approvals_pending)
        webhook_event_send(type="approval.decided", data=webhook_approval_data(approval))
        audit_record(actor=SYSTEM, action="expire", target=f"approval:{approval.pk}",
                     detail={"agent": approval.agent.slug, "thread": str(approval.thread_id),
                             "tool": approval.tool})
    if not approval.decided_by_client:
        _thread_status(approval.thread_id, agent, Thread.Status.ACTIVE, now,
                       was=Thread.Status.WAITING)
    return approval


CLIENT_REQUEST_PREFIX = "mcpr_"


def approval_client_request_id(approval: Approval) -> str:
    """The ``mcp_approval_request`` item's id of a client's approval."""
    return f"{CLIENT_REQUEST_PREFIX}{approval.pk.hex}"


@transaction.atomic
def approval_answer(*, request_id: str, approve: bool, reason: str, api_key: ApiKey | None,
                    param: str) -> Approval:
    """A Responses client's ``mcp_approval_response``: the approval it answers (a request of
    a response of this key's, not answered yet), now decided by the client.
    :class:`InvalidRequest` (about ``param``) otherwise."""
    found = None
    if request_id.startswith(CLIENT_REQUEST_PREFIX):
        try:
            key = uuid.UUID(request_id.removeprefix(CLIENT_REQUEST_PREFIX))
        except ValueError:
            key = None
        if key is not None:
            found = (Approval.objects.select_for_update().select_related("thread", "agent")
                     .filter(pk=key, decided_by_client=True, thread__api_key=api_key).first())
    if found is None:
        raise InvalidRequest(f"No MCP approval request {request_id!r} of yours.", param=param,
                             code="unknown_approval_request")
    if found.status != Approval.Status.PENDING:
        raise InvalidRequest(f"The approval request {request_id!r} was answered already.",
                             param=param, code="approval_answered")
    found.status = Approval.Status.APPROVED if approve else Approval.Status.DENIED
    found.decided_by, found.reason, found.decided_at = "client", reason[:2000], timezone.now()
    found.save(update_fields=["status", "decided_by", "reason", "decided_at"])
    audit_record(actor=audit_actor(api_key=api_key, channel="v1"),
                 action="approve" if approve else "deny", target=f"approval:{found.pk}",
                 detail={"agent": found.agent.slug, "thread": str(found.thread_id),
                         "tool": found.tool, "reason": reason[:200], "by_client": True})
    return found
