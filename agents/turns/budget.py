"""What one client request may make its agents do, whatever their models ask: every budget is
finite by default (``GAIA_MAX_*`` settings, each an environment variable of the same name).

* tool calls per round (``GAIA_MAX_TOOL_CALLS_PER_ROUND``): the calls past it are not run;
* rounds of tools per turn: the agent's ``max_steps``;
* turns and threads per request (``GAIA_MAX_TURNS_PER_REQUEST``,
  ``GAIA_MAX_THREADS_PER_REQUEST``), counted over the whole tree of agents asking agents: one
  :class:`RequestBudget`, made by the request's first turn and handed down to every turn it
  delegates to;
* delegated turns running at once (``GAIA_MAX_CONCURRENT_DELEGATIONS`` at each depth: a caller
  waiting for its callees holds a place of its own depth, never one they need);
* a tool result's size (``GAIA_MAX_TOOL_RESULT_CHARS``): cut, and said so;
* pending approvals per thread (``GAIA_MAX_PENDING_APPROVALS``,
  :func:`agents.services.approval_request`).

A budget spent is data for the model: the call's error result names the limit and its setting
(as every tool failure is), never an error of the request, which still answers.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Any

from django.conf import settings

from agents.tools import ToolResult
from agents.turns.reply import storable


def round_limit() -> int:
    return max(1, int(settings.GAIA_MAX_TOOL_CALLS_PER_ROUND))


def over_round_limit(name: str, limit: int) -> str:
    """The error result of a call past the round's limit."""
    return (f"{name} was not run: at most {limit} calls run in a round "
            "(GAIA_MAX_TOOL_CALLS_PER_ROUND).")


def result_bounded(result: ToolResult) -> ToolResult:
    """``result`` as the model, the feed and the thread get it: nothing a database column
    refuses (NUL, lone surrogates), at most ``GAIA_MAX_TOOL_RESULT_CHARS`` characters."""
    limit = max(1, int(settings.GAIA_MAX_TOOL_RESULT_CHARS))
    text = storable(result.text)
    if len(text) > limit:
        text = (text[:limit] + f"\n[output cut at {limit} of {len(text)} characters "
                "(GAIA_MAX_TOOL_RESULT_CHARS)]")
    if text is result.text:
        return result
    return ToolResult(text, is_error=result.is_error)


@dataclass
class RequestBudget:
    """The turns and threads one request has started (its first turn's included), and the
    places for its delegated turns to run at each depth. Lives on one event loop."""

    turns: int = 1
    threads: int = 1
    _places: dict[int, asyncio.Semaphore] = field(default_factory=dict)

    def delegation_take(self) -> str | None:
        """Count one more delegated turn (and its thread): ``None`` if the request may start
        it, else why not (the call's error result)."""
        turns = int(settings.GAIA_MAX_TURNS_PER_REQUEST)
        threads = int(settings.GAIA_MAX_THREADS_PER_REQUEST)
        if self.turns >= turns:
            return (f"not run: this request has started its {turns} turns, delegated ones "
                    "included (GAIA_MAX_TURNS_PER_REQUEST). Answer with what you have.")
        if self.threads >= threads:
            return (f"not run: this request has opened its {threads} threads "
                    "(GAIA_MAX_THREADS_PER_REQUEST). Answer with what you have.")
        self.turns += 1
        self.threads += 1
        return None

    def place(self, depth: int) -> asyncio.Semaphore:
        """The places for delegated turns at ``depth`` (a caller holds one of its own depth
        while its callees take theirs one level down: no wait can be circular)."""
        held = self._places.get(depth)
        if held is None:
            held = self._places[depth] = asyncio.Semaphore(
                max(1, int(settings.GAIA_MAX_CONCURRENT_DELEGATIONS)))
        return held


def budget_of(ctx_extra: dict[str, Any]) -> RequestBudget:
    """The request's budget a tool context carries (a new one if none: a turn of its own)."""
    budget = ctx_extra.get("budget")
    if not isinstance(budget, RequestBudget):
        budget = ctx_extra["budget"] = RequestBudget()
    return budget
