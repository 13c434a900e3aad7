"""Writes of a turn's end: its reply stored (partial and failed ones too) with what it cost,
the thread updated and its lease released, the usage roll-up and the turn's budgets settled
in the same write, and what the feed hears of it. The turn's start is
:mod:`agents.services.threads`."""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from django.db import transaction
from django.utils import timezone

from agents import selectors
from agents.infra.rows import Add, rows_insert, rows_update
from agents.kernel import llm
from agents.models import Message, Thread
from agents.outlet import events, realtime
from agents.services.budgets import (
    Holds,
    budget_settle,
    budget_settle_statement,
    budget_settled,
)
from agents.services.digests import digest_chain
from agents.services.prices import cost_decimal, turn_cost
from agents.services.threads import TurnStart
from agents.services.turn_statements import NotOneStatement, single_statements, turn_finish_one
from agents.services.usage import UsageTurn, usage_error_kind, usage_record

log = logging.getLogger("gaia.threads")


@dataclass
class TurnResult:
    text: str = ""
    reasoning: str = ""
    tool_calls: list[llm.ToolCall] = field(default_factory=list)
    # The text's tokens' log probabilities (agents.kernel.llm.TokenLogprob), when asked and given:
    # rendered in the reply, not stored.
    logprobs: list[Any] = field(default_factory=list)
    finish_reason: str = "stop"
    input_tokens: int = 0
    output_tokens: int = 0
    usage_estimated: bool = False
    # What it cost, nano-dollars (None: its model has no known price), set when it is stored
    cost_nanos: int | None = 0
    latency_ms: int | None = None
    ttft_ms: int | None = None
    error: str = ""
    response_id: str = ""
    provider: str = ""  # the provider that answered (an agent may fall back to others)
    model: str = ""  # the upstream model asked (usage counts per model)
    route: dict[str, Any] | None = None  # how a virtual model reached the agent (the thread's)
    sender: str = ""  # who answered, when not the thread's agent (a team member)
    passages: list[dict[str, Any]] | None = None  # knowledge-base passages the model got
    note: str = ""  # what Gaia did to serve the turn, stored on the reply
    dropped_tools: list[str] = field(default_factory=list)  # hosted tools left out
    # The agent's own tool calls (agents.kernel.llm.ToolActivity, ended) and the MCP servers' tool
    # lists it was offered: stored as the turn's internal messages, rendered by the dialects.
    tool_steps: list[Any] = field(default_factory=list)
    tool_listings: list[Any] = field(default_factory=list)
    # Calls a Responses client must approve (agents.kernel.llm.ApprovalRequest): the reply
    # ends there.
    approval_requests: list[Any] = field(default_factory=list)

    @property
    def status(self) -> str:
        """The thread's status once this turn is recorded (it follows its last turn)."""
        if self.finish_reason == "killed":
            return Thread.Status.KILLED
        return Thread.Status.ERROR if self.error else Thread.Status.COMPLETED


def thread_turn_finish(
    *, start: TurnStart, result: TurnResult, dialect: str, busy_with: Any = None,
    price_provider: str = "", holds: Holds | None = None, user: str = "",
) -> None:
    """Store the assistant's reply (partial and failed ones too) with what it cost, update
    the thread and release the lease. Two writes while the lease is held; a lease that
    expired meanwhile still gets its reply stored, after the thread's current last message.

    ``busy_with``: another thread the agent is at work on, if the caller knows one (a turn
    of its own process); else the database is asked (any process's). ``price_provider``: the
    provider whose price applies when the result names none (it failed before answering).
    ``holds``: the turn's budget reservations, settled to what it cost once it is stored.
    ``user``: the end user the turn's client named (counted per user, with its key)."""
    now = timezone.now()
    result.cost_nanos, cost_source = turn_cost(
        provider_name=result.provider or price_provider, model=result.model,
        input_tokens=result.input_tokens, output_tokens=result.output_tokens)

    def settle(kept: bool) -> None:
        if holds is None:
            return
        try:
            budget_settle(holds=holds, input_tokens=result.input_tokens,
                          output_tokens=result.output_tokens, cost_nanos=result.cost_nanos,
                          now=now, kept=kept)
        except Exception:  # the reply is stored: the hold stays until its period ends
            log.exception("could not settle the budgets of turn %s", result.response_id)

    def settling() -> tuple[str, list[Any]] | None:  # its statement, in the reply's
        if holds is None:
            return None
        return budget_settle_statement(holds=holds, input_tokens=result.input_tokens,
                                       output_tokens=result.output_tokens,
                                       cost_nanos=result.cost_nanos)

    def settled(spent: list[Any] | None) -> None:  # its signals, once the reply is stored
        if holds is None:
            return
        try:
            budget_settled(holds=holds, spent=spent, now=now)
        except Exception:  # the reply and its settlement are stored: only a signal is lost
            log.exception("could not signal the budgets of turn %s", result.response_id)

    _finish(start=start, result=result, dialect=dialect, busy_with=busy_with, now=now,
            cost_source=cost_source, user=user, settle=settle, settling=settling,
            settled=settled)


def _finish(*, start: TurnStart, result: TurnResult, dialect: str, busy_with: Any, now: Any,
            cost_source: str, user: str, settle: Callable[[bool], None],
            settling: Callable[[], tuple[str, list[Any]] | None],
            settled: Callable[[list[Any] | None], None]) -> None:
    reply = llm.Message(
        role="assistant",
        parts=(llm.TextPart(result.text),) if result.text else (),
        tool_calls=tuple(result.tool_calls),
    )
    update: dict[str, Any] = {
        "input_tokens": Add(result.input_tokens),
        "output_tokens": Add(result.output_tokens),
        "updated_at": now,
        "status": result.status,
        "last_error": result.error,
        "lock_token": "",
        "lock_expires_at": None,
        "partial_reply": "",
        "budget_holds": None,
    }
    if result.usage_estimated:
        update["usage_estimated"] = True
    if result.route is not None:
        update["route"] = result.route
    replayable = not result.error or result.text or result.tool_calls
    seq = start.next_seq
    update["message_count"] = seq + 1
    if replayable:
        update["history_digest"] = digest_chain([reply], start=start.base_digest)[-1]
    row = _reply_row(reply, result, thread_id=start.thread_id, seq=seq, dialect=dialect,
                     agent_id=start.agent_id or None)
    row.cost, row.cost_source = cost_decimal(result.cost_nanos), cost_source

    def usage_of(row: Message) -> UsageTurn:
        return UsageTurn(
            at=row.created_at, agent_id=start.agent_id, key_id=start.key_id, model=result.model,
            error_kind=usage_error_kind(finish_reason=result.finish_reason, error=result.error),
            input_tokens=result.input_tokens, output_tokens=result.output_tokens,
            ttft_ms=result.ttft_ms, latency_ms=result.latency_ms, cost_nanos=result.cost_nanos,
            user=user)

    if single_statements():
        try:
            busy, spent = turn_finish_one(
                thread_id=start.thread_id, lock_token=start.lock_token, update=update, row=row,
                usage_of=usage_of, agent_id=start.agent_id, now=now,
                ask_busy=busy_with is None, settle=settling())
        except NotOneStatement:
            pass
        else:
            settled(spent)  # in the same statement: its lease held, so did its holds
            _announce_turn_finish(start=start, result=result, row=row, now=now,
                                  message_count=update["message_count"],
                                  busy_with=busy_with or busy, asked=True)
            return
    with transaction.atomic():
        held = {"id": start.thread_id, "lock_token": start.lock_token}
        kept = True
        if not rows_update(Thread, where=held, values=update):
            # The lease expired and another turn moved the thread on: append after it.
            thread = Thread.objects.select_for_update().get(pk=start.thread_id)
            row.seq = seq = thread.message_count
            update["message_count"] = seq + 1
            if replayable:
                update["history_digest"] = digest_chain([reply], start=thread.history_digest)[-1]
            for lease_field in ("lock_token", "lock_expires_at", "partial_reply",
                                "budget_holds"):  # the other turn's
                update.pop(lease_field)
            kept = False  # the turn that took the lease gave its holds back
            rows_update(Thread, where={"id": start.thread_id}, values=update)
        rows_insert([row])
        usage_record(turn=usage_of(row))
        settle(kept)  # in this transaction (SQLite: no commit of its own)
        _announce_turn_finish(start=start, result=result, row=row, now=now,
                              message_count=update["message_count"], busy_with=busy_with)


def _reply_row(reply: llm.Message, result: TurnResult, *, thread_id: Any, seq: int,
               dialect: str, agent_id: int | None) -> Message:
    row = Message.from_llm(reply, thread_id=thread_id, seq=seq, dialect=dialect,
                           agent_id=agent_id)
    for name in _REPLY_FIELDS:  # the result's figures, under the same names on the row
        setattr(row, name, getattr(result, name))
    row.note, row.dropped_tools = result.note[:500], result.dropped_tools or None
    return row


_REPLY_FIELDS = ("reasoning", "finish_reason", "error", "input_tokens", "output_tokens",
                 "usage_estimated", "latency_ms", "ttft_ms", "response_id", "provider",
                 "sender", "passages")


def _announce_turn_finish(*, start: TurnStart, result: TurnResult, row: Message, now: Any,
                          message_count: int, busy_with: Any = None, asked: bool = False
                          ) -> None:
    """The feed hears of the reply, the thread's new status, any error and whether the agent
    is still at work (another thread of its may hold a lease, in any process)."""
    slug = start.agent_slug
    busy = busy_with if busy_with or asked else selectors.agent_leased_thread(
        agent_id=start.agent_id, now=now, other_than=start.thread_id)
    announced = [
        events.message(row, agent=slug, client=start.client),
        events.thread_updated(thread_id=start.thread_id, agent=slug, status=result.status,
                              message_count=message_count, at=now, error=result.error),
    ]
    if result.error:
        announced.append(events.error(thread_id=start.thread_id, agent=slug, error=result.error))
    announced.append(events.agent_state(agent=slug, agent_id=start.agent_id,
                                        state="processing" if busy else "idle",
                                        current_thread=busy))
    for e in announced:
        realtime.send_event_on_commit(e)
