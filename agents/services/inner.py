"""An agent's own work within a turn: a team's inner messages, the tool calls it ran itself,
stored in the turn's thread while the turn holds its lease."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from django.db import transaction
from django.utils import timezone

from agents.infra.rows import Add, rows_insert, rows_update
from agents.models import Message, Thread
from agents.outlet import events, realtime
from agents.services.threads import TurnStart


@dataclass
class InnerMessage:
    """One step of an agent's own work within a turn: a team's task (``role="user"``, leader
    to member) or a member's reply (``role="assistant"``); an agent's call of its own tools
    (``role="assistant"`` with ``tool_calls``) or a tool's result (``role="tool"``, from the
    tool: ``sender``, with ``latency_ms`` its duration and ``error`` why it failed)."""

    sender: str
    recipient: str
    role: str
    content: str
    reasoning: str = ""
    finish_reason: str = ""
    input_tokens: int | None = None
    output_tokens: int | None = None
    usage_estimated: bool = False
    latency_ms: int | None = None
    ttft_ms: int | None = None
    provider: str = ""
    passages: list[dict[str, Any]] | None = None
    tool_calls: list[dict[str, Any]] | None = None
    tool_call_id: str = ""
    error: str = ""


@transaction.atomic
def inner_messages_store(*, start: TurnStart, messages: list[InnerMessage],
                         dialect: str = "team") -> list[Message]:
    """Store an agent's own work in its thread, after what the turn stored so far
    (``start.next_seq`` moves on, so the turn's answer lands after it). The caller holds
    the thread's lease. It never joins the history a client holds (``internal``); its
    tokens count in the thread's usage. The feed hears of each message once stored."""
    rows = []
    for m in messages:
        rows.append(Message(
            thread_id=start.thread_id, agent_id=start.agent_id or None,
            seq=start.next_seq + len(rows), role=m.role,
            content=m.content, reasoning=m.reasoning, finish_reason=m.finish_reason,
            input_tokens=m.input_tokens, output_tokens=m.output_tokens,
            usage_estimated=m.usage_estimated, latency_ms=m.latency_ms, ttft_ms=m.ttft_ms,
            provider=m.provider, sender=m.sender, recipient=m.recipient, internal=True,
            passages=m.passages, tool_calls=m.tool_calls, tool_call_id=m.tool_call_id,
            error=m.error, dialect=dialect))
    # The turn's own row writers (agents.infra.rows): an agent's tool round writes here twice, and
    # through bulk_create() and update() with F() these two were 70 % of a step's server
    # time (scripts/perf/tools.py's profile).
    rows_insert(rows)
    start.next_seq += len(rows)
    update: dict[str, Any] = {"message_count": start.next_seq, "updated_at": timezone.now()}
    tokens_in = sum(m.input_tokens or 0 for m in messages)
    tokens_out = sum(m.output_tokens or 0 for m in messages)
    if tokens_in or tokens_out:
        update["input_tokens"], update["output_tokens"] = Add(tokens_in), Add(tokens_out)
    if any(m.usage_estimated for m in messages):
        update["usage_estimated"] = True
    rows_update(Thread, where={"id": start.thread_id}, values=update)
    for row in rows:
        realtime.send_event_on_commit(events.message(row, agent=row.sender, client=row.recipient))
    return rows
