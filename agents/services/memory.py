"""Writes of what agents remember: a fact an agent's remember tool stores, an operator's
deletion."""

from __future__ import annotations

from typing import Any

from agents.exceptions import InvalidRequest, NotFound
from agents.models import Agent, Memory

MAX_FACT_CHARS = 2000


def memory_remember(*, agent: Agent, scope: str, text: str, thread_id: Any = None) -> Memory:
    """Store ``text`` as a fact ``agent`` remembers for ``scope`` (``key:<id>`` or
    ``user:<name>``); the same fact again is stored once."""
    text = " ".join(text.split())
    if not text:
        raise InvalidRequest("An empty fact.", param="fact")
    text = text[:MAX_FACT_CHARS]
    found = Memory.objects.filter(agent=agent, scope=scope, text=text).first()
    if found is not None:
        return found
    return Memory.objects.create(agent=agent, scope=scope, text=text, thread_id=thread_id)


def memory_delete(*, agent: Agent, memory_id: Any) -> None:
    """Forget one fact of ``agent``; :class:`NotFound` if it has no such memory."""
    key = str(memory_id)
    if not key.isdigit() or len(key) > 18 or not Memory.objects.filter(
            agent=agent, pk=int(key)).delete()[0]:
        raise NotFound(f"The agent '{agent.slug}' has no memory {memory_id}.",
                       code="memory_not_found", param="memory_id")
