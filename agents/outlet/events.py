"""The agents app's feed events: their types (declared to :mod:`agents.outlet.realtime`) and one
builder per type, so that a payload is assembled in one place whoever sends it (services, the
turn runtime, the consumer). Builders only build: sending is
:func:`agents.outlet.realtime.send_event` or ``send_event_on_commit``.

Every builder returns what :func:`agents.outlet.realtime.event` returns (``event``,
``timestamp`` and the declared fields); the shapes of threads and messages are the operator API's
(:func:`agents.selectors.thread_public`, :func:`agents.selectors.message_public`).
"""

from __future__ import annotations

from typing import Any

from agents import selectors
from agents.models import Message, Thread
from agents.outlet import realtime

realtime.event_types_declare({
    "agent_state": ("agent", "state", "current_thread", "queue_depth"),
    "agent_changed": ("agent", "change"),  # created, updated, deleted, paused, resumed
    "config_changed": ("reason",),
    # an operator stopped the organism (no new turn) or started it again
    "organism_state": ("state", "since", "by", "grace_seconds"),
    "message": ("message",),
    "message_delta": ("thread_id", "agent", "response_id", "text", "reasoning", "tool_calls",
                      "output_chars"),
    # a reply still streaming, whole so far: what a page that subscribed late starts from
    # (asked for by subscribing to its thread); later deltas continue at ``output_chars``
    "message_snapshot": ("thread_id", "agent", "response_id", "text", "reasoning",
                         "output_chars"),
    "thread_created": ("thread",),
    "thread_updated": ("thread_id", "agent", "status", "message_count", "last_activity",
                       "error"),
    "error": ("thread_id", "agent", "error"),
    # a request for ``auto`` went to ``agent`` (method: sticky, router, ranker, default)
    "route_chosen": ("model", "agent", "method", "reason", "response_id", "elapsed_ms"),
    # a team's inner work as it happens (step: plan, task, reply, failed, route, answer)
    "team_step": ("team", "thread_id", "response_id", "step", "sender", "recipient", "text"),
    # a knowledge base's document being indexed (status: queued, indexing, ready, error)
    "kb_indexing": ("knowledge_base", "document", "document_id", "status", "progress",
                    "chunks", "error"),
    # the knowledge-base passages a turn gave its model
    "knowledge_used": ("agent", "thread_id", "response_id", "passages"),
    # an agent's provider failed before its first token and the next one takes over
    "provider_fallback": ("agent", "thread_id", "response_id", "failed_provider",
                          "next_provider", "error"),
    # a call of one of an agent's own tools starts, and ends (status: completed, failed)
    "tool_call": ("agent", "thread_id", "response_id", "call_id", "tool", "server",
                  "arguments"),
    "tool_result": ("agent", "thread_id", "response_id", "call_id", "tool", "server", "status",
                    "output", "duration_ms"),
    # a tool call waits for an operator's decision, and gets it (decision: approved, denied,
    # expired: nobody decided in time)
    "approval_requested": ("approval_id", "agent", "thread_id", "call_id", "tool", "server",
                           "arguments", "expires_at"),
    "approval_decided": ("approval_id", "agent", "thread_id", "call_id", "tool", "decision",
                         "decided_by", "reason"),
    # how many operators' approvals wait now (the console's navigation badge): about no
    # thread and no agent, so every subscription gets it
    "approvals_pending": ("count",),
    # a budget's spend reached its soft threshold (once a period), or a turn was refused
    # because it would exceed the budget / spend reached the limit (once a period)
    "budget_threshold": ("budget", "scope", "target", "unit", "limit", "spent", "period_start",
                         "agent"),
    "budget_exceeded": ("budget", "scope", "target", "unit", "limit", "spent", "period_start",
                        "agent"),
    # /v1/embeddings answered (or failed: error) for an agent: no thread, a usage row
    "embeddings": ("agent", "key", "model", "provider", "inputs", "input_tokens",
                   "latency_ms", "error"),
})


# -- agents --------------------------------------------------------------------------------


def agent_state(*, agent: str, agent_id: int, state: str, current_thread: Any = None
                ) -> dict[str, Any]:
    """``agent`` is now ``state`` (``idle|processing|waiting|paused|error``), at work on
    ``current_thread`` if any; with this process's queue depth for it."""
    return realtime.event("agent_state", agent=agent, state=state,
                          current_thread=str(current_thread) if current_thread else None,
                          queue_depth=selectors.queue_depth(agent_id=agent_id))


def agent_changed(*, agent: str, change: str) -> dict[str, Any]:
    return realtime.event("agent_changed", agent=agent, change=change)


def config_changed(*, reason: str) -> dict[str, Any]:
    return realtime.event("config_changed", reason=reason)


def organism_state(*, state: str, since: Any, by: str, grace_seconds: float | None = None
                   ) -> dict[str, Any]:
    """The organism is now ``running`` or ``stopped`` (since, by whom); a stop's running
    turns are killed after ``grace_seconds``."""
    return realtime.event("organism_state", state=state, since=since, by=by,
                          grace_seconds=grace_seconds)


# -- threads and messages ------------------------------------------------------------------


def thread_created(thread: Thread, *, agent: str, client: str) -> dict[str, Any]:
    return realtime.event("thread_created", thread=selectors.thread_public(
        thread, agent=agent, client=client))


def thread_updated(*, thread_id: Any, agent: str, status: str, message_count: int,
                   at: Any, error: str | None = None) -> dict[str, Any]:
    """The thread's status and size after a change made at ``at`` (a datetime)."""
    return realtime.event("thread_updated", thread_id=str(thread_id), agent=agent,
                          status=status, message_count=message_count,
                          last_activity=selectors.iso(at), error=error or None)


def message(row: Message, *, agent: str, client: str) -> dict[str, Any]:
    """A stored message, ``agent`` being the thread's agent and ``client`` who speaks for the
    client (:func:`agents.selectors.client_label`)."""
    return realtime.event("message", message=selectors.message_public(row, agent=agent,
                                                                      client=client))


def message_delta(*, thread_id: Any, agent: str, response_id: str, text: str, reasoning: str,
                  tool_calls: list[dict[str, Any]], output_chars: int) -> dict[str, Any]:
    """What a streaming reply gained since its previous delta."""
    return realtime.event("message_delta", thread_id=thread_id, agent=agent,
                          response_id=response_id, text=text, reasoning=reasoning,
                          tool_calls=tool_calls, output_chars=output_chars)


def message_snapshot(*, thread_id: Any, agent: str, response_id: str, text: str,
                     reasoning: str) -> dict[str, Any]:
    """A streaming reply as it stands (``output_chars``: the length of ``text``)."""
    return realtime.event("message_snapshot", thread_id=thread_id, agent=agent,
                          response_id=response_id, text=text, reasoning=reasoning,
                          output_chars=len(text))


def error(*, thread_id: Any, agent: str, error: str) -> dict[str, Any]:
    return realtime.event("error", thread_id=str(thread_id), agent=agent, error=error)


# -- what a turn did -----------------------------------------------------------------------


def route_chosen(*, agent: str, method: str, reason: str, response_id: str,
                 elapsed_ms: float, model: str = "auto") -> dict[str, Any]:
    return realtime.event("route_chosen", model=model, agent=agent, method=method,
                          reason=reason, response_id=response_id, elapsed_ms=elapsed_ms)


def team_step(*, team: str, thread_id: Any, response_id: str, step: str, sender: str,
              recipient: str, text: str) -> dict[str, Any]:
    return realtime.event("team_step", team=team, thread_id=str(thread_id),
                          response_id=response_id, step=step, sender=sender,
                          recipient=recipient, text=text[:2000])


def embeddings(*, agent: str, key: str, model: str, provider: str, inputs: int,
               input_tokens: int, latency_ms: int, error: str) -> dict[str, Any]:
    return realtime.event("embeddings", agent=agent, key=key, model=model, provider=provider,
                          inputs=inputs, input_tokens=input_tokens, latency_ms=latency_ms,
                          error=error)


def knowledge_used(*, agent: str, thread_id: Any, response_id: str,
                   passages: list[dict[str, Any]]) -> dict[str, Any]:
    return realtime.event("knowledge_used", agent=agent, thread_id=thread_id,
                          response_id=response_id, passages=passages)


def provider_fallback(*, agent: str, thread_id: Any, response_id: str, failed_provider: str,
                      next_provider: str, error: str) -> dict[str, Any]:
    return realtime.event("provider_fallback", agent=agent, thread_id=thread_id,
                          response_id=response_id, failed_provider=failed_provider,
                          next_provider=next_provider, error=error)


def kb_indexing(document: Any, *, status: str, progress: float, error: str = ""
                ) -> dict[str, Any]:
    """A knowledge-base document's indexing stage (``queued|indexing|ready|error``)."""
    return realtime.event(
        "kb_indexing", knowledge_base=document.knowledge_base.slug, document=document.name,
        document_id=document.pk, status=status, progress=round(progress, 3),
        chunks=document.chunk_count, error=error or None)


# -- tools and approvals --------------------------------------------------------------------


def tool_call(*, agent: str, thread_id: Any, response_id: str, activity: Any) -> dict[str, Any]:
    """An agent's own tool call starts (``activity``: an
    :class:`agents.kernel.llm.ToolActivity`)."""
    return realtime.event("tool_call", agent=agent, thread_id=str(thread_id) if thread_id
                          else None, response_id=response_id, call_id=activity.call_id,
                          tool=activity.name, server=activity.server,
                          arguments=activity.arguments[:4000])


def tool_result(*, agent: str, thread_id: Any, response_id: str, activity: Any
                ) -> dict[str, Any]:
    """An agent's own tool call ended (``activity.status``: completed or failed)."""
    return realtime.event("tool_result", agent=agent, thread_id=str(thread_id) if thread_id
                          else None, response_id=response_id, call_id=activity.call_id,
                          tool=activity.name, server=activity.server, status=activity.status,
                          output=activity.output[:4000], duration_ms=activity.duration_ms)


def approval_requested(approval: Any) -> dict[str, Any]:
    return realtime.event("approval_requested", approval_id=str(approval.pk),
                          agent=approval.agent.slug, thread_id=str(approval.thread_id),
                          call_id=approval.call_id or None, tool=approval.tool,
                          server=approval.server,
                          arguments=approval.arguments[:4000],
                          expires_at=selectors.iso(approval.expires_at))


def approval_decided(approval: Any) -> dict[str, Any]:
    return realtime.event("approval_decided", approval_id=str(approval.pk),
                          agent=approval.agent.slug, thread_id=str(approval.thread_id),
                          call_id=approval.call_id or None, tool=approval.tool,
                          decision=approval.status,
                          decided_by=approval.decided_by or None, reason=approval.reason or None)


def approvals_pending() -> dict[str, Any]:
    """How many operators' approvals wait, counted when it is sent (after the commit that
    changed it: ``send_event_on_commit(approvals_pending)``)."""
    return realtime.event("approvals_pending", count=selectors.approval_pending_count())


# -- budgets -------------------------------------------------------------------------------


def budget_signal(kind: str, *, rule: Any, spent: int, period_start: Any) -> dict[str, Any]:
    """``budget_threshold`` or ``budget_exceeded`` for the budget ``rule``
    (:class:`agents.selectors.budgets.BudgetRule`); money in USD, as a string."""
    return realtime.event(kind, budget=rule.name, scope=rule.scope, target=rule.target,
                          unit=rule.unit, limit=rule.amount_public(rule.limit),
                          spent=rule.amount_public(spent), period_start=period_start,
                          agent=rule.agent_slug or None)


# -- schedules -----------------------------------------------------------------------------

realtime.event_types_declare({
    # a schedule's run failed (agent paused or gone, provider down...): what it recorded
    "schedule_failed": ("schedule", "schedule_id", "kind", "agent", "error", "tick",
                        "thread_id", "run_id"),
})


def schedule_failed(schedule: Any, *, error: str) -> dict[str, Any]:
    """``schedule`` (:class:`agents.models.Schedule`) failed its run with ``error``."""
    tick = schedule.last_fired_for
    return realtime.event("schedule_failed", schedule=schedule.name, schedule_id=schedule.pk,
                          kind=schedule.kind, agent=schedule.agent.slug if schedule.agent
                          else None, error=error, tick=tick.isoformat() if tick else None,
                          thread_id=str(schedule.thread_id) if schedule.thread_id else None,
                          run_id=schedule.last_run_id)
