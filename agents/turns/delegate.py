"""An agent asks another (its ``agent:<slug>`` tool): the callee answers in a turn of its own,
a child thread linked to the call's message in the caller's thread, with its own tools,
knowledge and limits. The key that reached the caller must be allowed the callee; a paused
callee refuses; delegation goes at most :data:`MAX_DEPTH` agents deep, within the request's
budget of turns and threads, and so many callees of a depth at once
(:mod:`agents.turns.budget`): a call past them is an error result, not run."""

from __future__ import annotations

import uuid
from typing import Any

from agents import selectors, services
from agents.infra.database import run_db
from agents.kernel import llm
from agents.kernel.exceptions import GaiaError
from agents.tools import ToolContext, ToolResult
from agents.turns import loop
from agents.turns.budget import budget_of
from agents.turns.runtime import Turn
from agents.turns.spec import TurnSpec

MAX_DEPTH = 3


async def delegate(slug: str, task: str, ctx: ToolContext) -> ToolResult:
    """``task`` for the agent ``slug``; its answer (or why there is none) as the result."""
    if ctx.depth >= MAX_DEPTH:
        return ToolResult(f"agent__{slug}: agents may delegate at most {MAX_DEPTH} deep",
                          is_error=True)
    try:
        _, agent = await run_db(services.request_authorize, raw_key=None,
                                anonymous_allowed=True, agent_slug=slug)
    except GaiaError as exc:
        return ToolResult(f"agent__{slug}: {exc.message}", is_error=True)
    # the key's list is on the key when the turn's key came through the access cache; read
    # on a database thread otherwise (a key without it must not mean "every agent")
    if agent is None or not await run_db(selectors.api_key_may_use, api_key=ctx.api_key,
                                         agent=agent):
        return ToolResult(f"agent__{slug}: this conversation's key may not use it",
                          is_error=True)
    budget = budget_of(ctx.extra)
    refused = budget.delegation_take()
    if refused is not None:
        return ToolResult(f"agent__{slug} was {refused}", is_error=True)
    async with budget.place(ctx.depth + 1):
        return await _delegated(slug, task, ctx, agent, budget)


async def _delegated(slug: str, task: str, ctx: ToolContext, agent: Any, budget: Any
                     ) -> ToolResult:
    caller = ctx.agent.slug
    request = llm.LLMRequest(model=slug, system="", user=caller,
                             messages=[llm.Message(role="user", parts=(llm.TextPart(task),))])
    turn = Turn(TurnSpec(
        agent=agent, api_key=ctx.api_key, request=request, dialect="agent",
        response_id=f"agent-{uuid.uuid4().hex[:24]}", session_key=f"agent:{uuid.uuid4().hex}",
        user=caller, title=f"{caller} → {slug}: {task}"[:200], store_first=True, lease_wait=0,
        run_id=ctx.extra.get("run_id"), parent_message_id=ctx.extra.get("call_message_id"),
        # the callee works for the caller's end user, with the caller's key: its memory is
        # theirs (agents.selectors.memory_scope), not one every user of the caller shares
        depth=ctx.depth + 1, end_user=ctx.user, budget=budget))
    turn.follow(ctx.thread_id)  # killed or interrupted with the caller's turn
    try:
        await turn.open()
        result = await turn.collect(await turn.first(wait=3600))
    except GaiaError as exc:
        return ToolResult(f"agent__{slug}: {exc.message}", is_error=True)
    if result.error:
        return ToolResult(f"agent__{slug}: {result.error}", is_error=True)
    return ToolResult(result.text or "(no answer)")


loop.delegate_hook = delegate
