"""Writes of what agents remember: a fact an agent's remember tool stores, an operator's
deletion.

A user fills their own memory, and every turn with memory ranks it, so a scope is finite: a
fact is at most ``GAIA_MEMORY_MAX_FACT_CHARS`` characters (a longer one is refused: the model
can say it shorter, a cut would keep half a fact) and a scope keeps its newest
``GAIA_MEMORY_MAX_FACTS`` facts: a new fact past the cap forgets the oldest. Forgetting
rather than refusing: a scope is one key's or one user's own, so its writer forgets only
their own facts, and a full memory that refused would keep its first facts for ever (a user
who moved could never be remembered elsewhere) until an operator deleted some."""

from __future__ import annotations

from typing import Any

from django.conf import settings

from agents.kernel.exceptions import InvalidRequest, NotFound
from agents.models import Agent, Memory
from agents.models.memory import scope_user


def memory_remember(*, agent: Agent, scope: str, text: str, thread_id: Any = None) -> Memory:
    """Store ``text`` as a fact ``agent`` remembers for ``scope`` (as
    :func:`agents.selectors.memory_scope` names it: ``key:<id>``, ``key:<id>/user:<name>``,
    ``user:<name>`` ...), with the user it is about; the same fact again is stored once. The
    scope's oldest facts past ``GAIA_MEMORY_MAX_FACTS`` are forgotten
    (the result's ``forgotten`` says how many); :class:`InvalidRequest` for an empty
    fact or one longer than ``GAIA_MEMORY_MAX_FACT_CHARS``."""
    text = " ".join(text.split())
    if not text:
        raise InvalidRequest("An empty fact.", param="fact")
    longest = settings.GAIA_MEMORY_MAX_FACT_CHARS
    if len(text) > longest:
        raise InvalidRequest(f"A fact is at most {longest} characters (this one has "
                             f"{len(text)}): remember a shorter one.", code="fact_too_long",
                             param="fact")
    found = Memory.objects.filter(agent=agent, scope=scope, text=text).first()
    if found is not None:
        found.forgotten = 0
        return found
    row = Memory.objects.create(agent=agent, scope=scope, user=scope_user(scope),
                                text=text, thread_id=thread_id)
    stale = list(Memory.objects.filter(agent=agent, scope=scope).order_by("-created_at", "-pk")
                 .values_list("pk", flat=True)[settings.GAIA_MEMORY_MAX_FACTS:])
    row.forgotten = Memory.objects.filter(pk__in=stale).delete()[0] if stale else 0
    return row


def memory_delete(*, agent: Agent, memory_id: Any) -> None:
    """Forget one fact of ``agent``; :class:`NotFound` if it has no such memory."""
    key = str(memory_id)
    if not key.isdecimal() or len(key) > 18 or not Memory.objects.filter(
            agent=agent, pk=int(key)).delete()[0]:
        raise NotFound(f"The agent '{agent.slug}' has no memory {memory_id}.",
                       code="memory_not_found", param="memory_id")
