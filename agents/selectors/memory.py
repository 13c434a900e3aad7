"""Reads of what agents remember: whose facts a turn is given (:func:`memory_scope`: a user
named by a client is scoped by the key that named it), the facts most relevant to a
conversation (BM25 over the scope's facts), and the list operators see.

A user fills their own memory (the remember tool), so what a recall reads is bounded before
any work: at most ``GAIA_MEMORY_MAX_FACTS`` facts, the newest, each read by its first
``GAIA_MEMORY_MAX_FACT_CHARS`` characters (the caps :func:`agents.services.memory_remember`
keeps; facts stored before them are read within them). From async code,
:func:`memory_search`: the read on a database thread, the index and the ranking on a worker
thread, the index kept per (agent, scope) until the facts read change (2,000 facts of 2,000
characters held the database thread 5.5 s a turn before)."""

from __future__ import annotations

import asyncio
import threading
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any

from django.conf import settings
from django.db.models import QuerySet
from django.db.models.functions import Substr

from agents.infra.database import run_db
from agents.kernel import bm25
from agents.models import ApiKey, Memory
from agents.selectors.threads import iso

CACHED_SCOPES = 64  # the (agent, scope) indexes a process keeps, the least recently used out


def memory_scope(*, agent: Any, api_key: ApiKey | None, user: str | None) -> str | None:
    """Whose facts a turn of ``agent`` remembers (``None``: no memory for this turn).

    ``per_key``: the key's own (``key:<id>``). ``per_user``: the end user the request names,
    as the key that named them: ``key:<id>/user:<name>``, so another key naming the same
    user neither reads nor writes these facts (``anonymous/user:<name>`` without a key).
    A key the admin trusts to speak for users across keys (``ApiKey.users_across_keys``)
    names the user everywhere: ``user:<name>``, written to the memory every trusted key
    shares and read with every key's facts about that user (:func:`memory_recall`)."""
    mode = getattr(agent, "memory", "off")
    if mode == "per_key" and api_key is not None:
        return f"key:{api_key.pk}"
    if mode == "per_user" and user:
        user = user[:300]  # as the thread stores it (Thread.user)
        if api_key is None:
            return f"anonymous/user:{user}"
        if getattr(api_key, "users_across_keys", False):
            return f"user:{user}"
        return f"key:{api_key.pk}/user:{user}"
    return None


def _scope_rows(*, agent_id: int, scope: str) -> QuerySet[Memory]:
    rows = Memory.objects.filter(agent_id=agent_id)
    if scope.startswith("user:"):  # a trusted key's user: every key's facts about them
        return rows.filter(user=scope[len("user:"):]).exclude(scope__startswith="anonymous/")
    return rows.filter(scope=scope)


@dataclass
class _Facts:
    """A scope's facts as one read found them (newest first), and their index."""

    rows: list[tuple[int, str]]  # (id, text) as read: the index holds while they do
    texts: list[str]
    _index: bm25.Index | None = None
    _lock: threading.Lock = field(default_factory=threading.Lock)

    @property
    def index(self) -> bm25.Index:
        """The facts' BM25 index, built on first use (by a ranking's worker thread)."""
        if self._index is None:
            with self._lock:
                if self._index is None:
                    self._index = bm25.Index(self.texts)
        return self._index


_cache: OrderedDict[tuple[int, str], _Facts] = OrderedDict()
_cache_lock = threading.Lock()


def memory_facts(*, agent_id: int, scope: str) -> _Facts:
    """The newest ``GAIA_MEMORY_MAX_FACTS`` facts of this agent and scope, each cut to
    ``GAIA_MEMORY_MAX_FACT_CHARS`` (one read: run on a database thread), with the index the
    process already holds for them when they have not changed. The scope of a trusted key's
    user (``user:<name>``) reads that user's facts of every key (not those named without
    one)."""
    rows = list(_scope_rows(agent_id=agent_id, scope=scope).order_by("-created_at", "-pk")
                .annotate(head=Substr("text", 1, settings.GAIA_MEMORY_MAX_FACT_CHARS))
                .values_list("pk", "head")[:settings.GAIA_MEMORY_MAX_FACTS])
    key = (agent_id, scope)
    with _cache_lock:
        held = _cache.get(key)
        if held is None or held.rows != rows:
            held = _cache[key] = _Facts(rows, list(dict.fromkeys(text for _, text in rows)))
        _cache.move_to_end(key)
        while len(_cache) > CACHED_SCOPES:
            _cache.popitem(last=False)
    return held


def memory_rank(facts: _Facts, query: str, limit: int) -> list[str]:
    """The ``limit`` facts that fit ``query`` best (the newest first when the query matches
    none, or is empty). CPU alone, bounded by the caps and the query's bound
    (:func:`agents.kernel.bm25.query_terms`): run on a worker thread, not a database one."""
    texts = facts.texts
    if not texts:
        return []
    ranked = facts.index.top(query, limit) if query.strip() else []
    if not ranked:
        return texts[:limit]
    return [texts[i] for i, _ in ranked]


def memory_recall(*, agent_id: int, scope: str, query: str, limit: int = 5) -> list[str]:
    """:func:`memory_rank` over :func:`memory_facts`, in one call (sync code)."""
    return memory_rank(memory_facts(agent_id=agent_id, scope=scope), query, limit)


async def memory_search(*, agent_id: int, scope: str, query: str, limit: int = 5) -> list[str]:
    """:func:`memory_recall` from async code: the facts read on a database thread, the index
    built and the facts ranked on a worker thread (neither holds the event loop nor every
    other request's database work)."""
    facts = await run_db(memory_facts, agent_id=agent_id, scope=scope)
    return await asyncio.to_thread(memory_rank, facts, bm25.query_text(query), limit)


def memory_list(*, agent_id: int, scope: str | None = None) -> QuerySet[Memory]:
    """An agent's memories, newest first (one scope's, or all)."""
    rows = Memory.objects.filter(agent_id=agent_id).order_by("-created_at", "-pk")
    return rows.filter(scope=scope) if scope else rows


def memory_public(row: Memory) -> dict[str, Any]:
    return {"id": row.pk, "scope": row.scope, "text": row.text,
            "thread_id": str(row.thread_id) if row.thread_id else None,
            "created_at": iso(row.created_at)}
