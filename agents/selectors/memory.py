"""Reads of what agents remember: the facts most relevant to a conversation (BM25 over the
scope's facts), and the list operators see."""

from __future__ import annotations

from typing import Any

from django.db.models import QuerySet

from agents import bm25
from agents.models import Memory
from agents.selectors.threads import iso

MAX_SCOPE_FACTS = 2000  # the newest a turn ranks (a scope that grew past it forgets the oldest)


def memory_recall(*, agent_id: int, scope: str, query: str, limit: int = 5) -> list[str]:
    """The ``limit`` facts of this agent and scope that fit ``query`` best (the newest first
    when the query matches none, or is empty)."""
    facts = list(Memory.objects.filter(agent_id=agent_id, scope=scope)
                 .order_by("-created_at").values_list("text", flat=True)[:MAX_SCOPE_FACTS])
    if not facts:
        return []
    ranked = bm25.Index(facts).top(query, limit) if query.strip() else []
    if not ranked:
        return facts[:limit]
    return [facts[i] for i, _ in ranked]


def memory_list(*, agent_id: int, scope: str | None = None) -> QuerySet[Memory]:
    """An agent's memories, newest first (one scope's, or all)."""
    rows = Memory.objects.filter(agent_id=agent_id).order_by("-created_at", "-pk")
    return rows.filter(scope=scope) if scope else rows


def memory_public(row: Memory) -> dict[str, Any]:
    return {"id": row.pk, "scope": row.scope, "text": row.text,
            "thread_id": str(row.thread_id) if row.thread_id else None,
            "created_at": iso(row.created_at)}
