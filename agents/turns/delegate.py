"""An agent asks another (its ``agent:<slug>`` tool): the callee answers in a turn of its own,
a child thread linked to the call's message in the caller's thread, with its own tools,
knowledge and limits. The key that reached the caller must be allowed the callee; a paused
callee refuses; delegation goes at most :data:`MAX_DEPTH` agents deep."""

from __future__ import annotations

import uuid

from agents import llm, services
from agents.database import run_db
from agents.exceptions import GaiaError
from agents.tools import ToolContext, ToolResult
from agents.turns import loop
from agents.turns.runtime import Turn
from agents.turns.spec import TurnSpec

MAX_DEPTH = 3


async def delegate(slug: str, task: str, ctx: ToolContext) -> ToolResult:
    """``task`` for the agent ``slug``; its answer (or why there is none) as the result."""
    caller = ctx.agent.slug
    if ctx.depth >= MAX_DEPTH:
        return ToolResult(f"agent__{slug}: agents may delegate at most {MAX_DEPTH} deep",
                          is_error=True)
    try:
        _, agent = await run_db(services.request_authorize, raw_key=None,
                                anonymous_allowed=True, agent_slug=slug)
    except GaiaError as exc:
        return ToolResult(f"agent__{slug}: {exc.message}", is_error=True)
    allowed = getattr(ctx.api_key, "allowed_agent_ids", None) if ctx.api_key else None
    if agent is None or (allowed and agent.pk not in allowed):
        return ToolResult(f"agent__{slug}: this conversation's key may not use it",
                          is_error=True)
    request = llm.LLMRequest(model=slug, system="", user=caller,
                             messages=[llm.Message(role="user", parts=(llm.TextPart(task),))])
    turn = Turn(TurnSpec(
        agent=agent, api_key=ctx.api_key, request=request, dialect="agent",
        response_id=f"agent-{uuid.uuid4().hex[:24]}", session_key=f"agent:{uuid.uuid4().hex}",
        user=caller, title=f"{caller} → {slug}: {task}"[:200], store_first=True, lease_wait=0,
        run_id=ctx.extra.get("run_id"), parent_message_id=ctx.extra.get("call_message_id"),
        depth=ctx.depth + 1))
    try:
        await turn.open()
        result = await turn.collect(await turn.first(wait=3600))
    except GaiaError as exc:
        return ToolResult(f"agent__{slug}: {exc.message}", is_error=True)
    if result.error:
        return ToolResult(f"agent__{slug}: {result.error}", is_error=True)
    return ToolResult(result.text or "(no answer)")


loop.delegate_hook = delegate
