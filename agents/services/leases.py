"""A turn's lease on its thread: taking one that expired records the turn that held it as
interrupted (its process died), and expires the approvals it waited for; the running turns
renew theirs; a sweep at server start records those left behind."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from django.db import transaction
from django.db.models import Q
from django.utils import timezone

from agents.models import Agent, Approval, Message, Thread
from agents.models.threads import INTERRUPTED_ERROR
from agents.outlet import events, realtime
from agents.services.audit import SYSTEM, audit_record
from agents.services.budgets import budget_holds_release
from agents.services.digests import digest_chain
from agents.services.usage import UsageTurn, usage_record


def lease_free(now: Any) -> Q:
    return Q(lock_expires_at__isnull=True) | Q(lock_expires_at__lt=now)


def thread_record_abandoned(*, thread: Thread, agent: Agent, now: Any) -> int:
    """Record that the turn which held ``thread``'s (now expired) lease never finished: an
    assistant message with finish reason ``interrupted`` holding the reply's text as far as
    its last checkpoint, and the thread's ``last_error``; its budget holds given back; the
    approvals it waited for are ``expired`` (nobody is left to act on a decision); the feed
    hears of it. Call inside the
    transaction that takes the lease. Returns the thread's new message count."""
    seq = thread.message_count
    key_id, text, holds = Thread.objects.filter(pk=thread.pk).values_list(
        "api_key_id", "partial_reply", "budget_holds").get()  # the reply so far, its holds
    budget_holds_release(holds)  # what it used is unknown: nothing is charged
    row = Message.objects.create(
        thread_id=thread.pk, agent_id=agent.pk, seq=seq, role=Message.Role.ASSISTANT, content=text,
        finish_reason="interrupted", error=INTERRUPTED_ERROR, dialect="",
    )
    update: dict[str, Any] = {"message_count": seq + 1, "status": Thread.Status.ERROR,
                              "last_error": INTERRUPTED_ERROR, "updated_at": now}
    if text:  # replayable, as thread_turn_finish stores a partial reply
        thread.history_digest = update["history_digest"] = digest_chain(
            [row.to_llm()], start=thread.history_digest)[-1]
    Thread.objects.filter(pk=thread.pk).update(partial_reply="", budget_holds=None, **update)
    usage_record(turn=UsageTurn(
        at=row.created_at, agent_id=agent.pk, key_id=key_id or 0, model=agent.model_name,
        error_kind="interrupted", input_tokens=0, output_tokens=0, ttft_ms=None,
        latency_ms=None))
    for e in (
        events.message(row, agent=agent.slug, client="gaia"),
        events.thread_updated(thread_id=thread.pk, agent=agent.slug, status=Thread.Status.ERROR,
                              message_count=seq + 1, at=now, error=INTERRUPTED_ERROR),
        events.error(thread_id=thread.pk, agent=agent.slug, error=INTERRUPTED_ERROR),
    ):
        realtime.send_event_on_commit(e)
    _approvals_expire(thread_id=thread.pk, now=now)
    return seq + 1


def _approvals_expire(*, thread_id: Any, now: Any) -> None:
    """The operators' approvals of ``thread_id`` still pending, whose turn died waiting:
    ``expired`` by ``system`` (a denial no one can reverse), audited as a timeout's are. A
    client's own MCP approvals stay: its next request answers them, not this turn."""
    waiting = Approval.objects.filter(thread_id=thread_id, status=Approval.Status.PENDING,
                                      decided_by_client=False)
    for approval in waiting.select_related("agent"):
        if not Approval.objects.filter(pk=approval.pk, status=Approval.Status.PENDING).update(
                status=Approval.Status.EXPIRED, decided_at=now, decided_by="system",
                reason=INTERRUPTED_ERROR):
            continue  # decided meanwhile
        approval.status, approval.decided_at = Approval.Status.EXPIRED, now
        approval.decided_by, approval.reason = "system", INTERRUPTED_ERROR
        realtime.send_event_on_commit(events.approval_decided(approval))
        audit_record(actor=SYSTEM, action="expire", target=f"approval:{approval.pk}",
                     detail={"agent": approval.agent.slug, "thread": str(thread_id),
                             "tool": approval.tool, "reason": "interrupted"})


def thread_leases_renew(*, tokens: list[str], lease_seconds: float) -> int:
    """Extend the leases ``tokens`` (the turns running in one process) by ``lease_seconds``
    from now: one write for all of them. Returns how many were still held."""
    if not tokens:
        return 0
    until = timezone.now() + timedelta(seconds=lease_seconds)
    return Thread.objects.filter(lock_token__in=tokens).update(lock_expires_at=until)


def thread_leases_sweep() -> int:
    """Record every turn whose lease expired without it finishing (its process died) as
    interrupted and release the lease. Run once at server start, after a lease's length.
    Returns how many were found."""
    now = timezone.now()
    found = 0
    stale = Thread.objects.filter(lock_expires_at__lt=now).select_related("agent")
    for thread in stale.only("pk", "message_count", "lock_expires_at", "agent", "agent__slug"):
        with transaction.atomic():
            if Thread.objects.filter(pk=thread.pk, lock_expires_at__lt=now).update(
                    lock_token="", lock_expires_at=None):
                fresh = Thread.objects.only("message_count", "history_digest").get(pk=thread.pk)
                thread.message_count = fresh.message_count
                thread.history_digest = fresh.history_digest
                thread_record_abandoned(thread=thread, agent=thread.agent, now=now)
                found += 1
    return found
