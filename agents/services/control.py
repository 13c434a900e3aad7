"""Operator control: pause and resume agents, kill threads, reload every process."""

from __future__ import annotations

from django.db import transaction
from django.utils import timezone

from agents import selectors
from agents.models import Agent, ApiKey, Thread
from agents.outlet import events, realtime
from agents.services.audit import Actor, audit_record
from agents.services.config import config_changed

AGENT_PAUSED_RETRY_AFTER = 30  # seconds: what a paused agent's 503 tells clients to wait


@transaction.atomic
def agent_set_paused(*, agent: Agent, paused: bool, api_key: ApiKey | None = None,
                     actor: Actor | None = None) -> Agent:
    """Pause (new requests get 503 with ``Retry-After``; turns in flight finish) or resume an
    agent; idempotent. Every process sees it on its next request (configuration stamp).
    ``api_key``: the operator's key, if limited to some agents (403 for another agent)."""
    selectors.api_key_agent_check(api_key=api_key, agent=agent, param="agent")
    now = timezone.now()
    Agent.objects.filter(pk=agent.pk).update(paused=paused, updated_at=now)
    agent.paused, agent.updated_at = paused, now
    config_changed(reason="agent_paused" if paused else "agent_resumed")
    realtime.send_event_on_commit(events.agent_changed(
        agent=agent.slug, change="paused" if paused else "resumed"))
    realtime.send_event_on_commit(events.agent_state(
        agent=agent.slug, agent_id=agent.pk, state="paused" if paused else "idle"))
    audit_record(actor=actor, action="pause" if paused else "resume", target=f"agent:{agent.slug}")
    return agent


def agent_changed_announce(*, agent: Agent, change: str) -> None:
    """Tell the feed an agent was created, updated or deleted (the admin and imports)."""
    realtime.send_event_on_commit(events.agent_changed(agent=agent.slug, change=change))


@transaction.atomic
def thread_kill(*, thread: Thread, api_key: ApiKey | None = None,
                actor: Actor | None = None) -> bool:
    """Stop the thread's turn wherever it runs and mark the thread ``killed``.

    The running turn (if any, in any process) is stopped by a control message; it stores its
    partial reply with finish reason ``killed`` and releases the lease itself. Returns whether
    a turn held the thread's lease when the kill was sent. Idempotent. ``api_key``: the
    operator's key, if limited to some agents (403 for another agent's thread)."""
    selectors.api_key_agent_check(api_key=api_key, agent=thread.agent, param="thread_id")
    now = timezone.now()
    running = thread.lock_expires_at is not None and thread.lock_expires_at > now
    Thread.objects.filter(pk=thread.pk).update(status=Thread.Status.KILLED, updated_at=now)
    thread.status, thread.updated_at = Thread.Status.KILLED, now
    realtime.send_event_on_commit(events.thread_updated(
        thread_id=thread.pk, agent=thread.agent.slug, status=thread.status,
        message_count=thread.message_count, at=now, error=thread.last_error))
    realtime.send_control_on_commit("turn_kill", thread_id=str(thread.pk))
    audit_record(actor=actor, action="kill", target=f"thread:{thread.pk}",
                 detail={"agent": thread.agent.slug, "was_running": running})
    return running


@transaction.atomic
def organism_reload(*, actor: Actor | None = None) -> None:
    """Every process drops its cached keys and agents now (and reads them again)."""
    config_changed(reason="reload")
    realtime.send_control_on_commit("reload")
    audit_record(actor=actor, action="reload", target="organism")


