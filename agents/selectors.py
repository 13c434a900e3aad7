"""Reads: the model catalogue and the health report."""

from __future__ import annotations

import asyncio
import functools
import threading
import time
import uuid
from dataclasses import dataclass, field
from typing import Any

from django.conf import settings
from django.db import connection

from agents import llm, services
from agents.database import read_nowait, run_db
from agents.exceptions import NotFound
from agents.models import Agent, ApiKey, Message, Thread

# ---------------------------------------------------------------------------------------------
# The access cache: API keys and agents as the hot path needs them, valid while the
# configuration stamp (agents.models.ConfigStamp) is unchanged.


@dataclass
class _AccessCache:
    version: str | None
    keys: dict[str, ApiKey] = field(default_factory=dict)
    agents: dict[str, Agent] = field(default_factory=dict)


_access = _AccessCache(version="<never read>")
_access_lock = threading.Lock()


# Raw SQL: this runs on every request, and the ORM would cost ten times as much.
_STAMP_SQL = "SELECT version FROM agents_configstamp WHERE id = 1"


def _config_version() -> str | None:
    with connection.cursor() as cursor:
        cursor.execute(_STAMP_SQL)
        row = cursor.fetchone()
    return row[0] if row else None


async def config_version_nowait() -> str | None:
    """The configuration stamp, read on the event loop (:func:`agents.database.read_nowait`;
    raises ``ReadNotAvailable`` when it cannot be)."""
    row = await read_nowait(_STAMP_SQL)
    return row[0] if row else None


def access_cache(*, version: str | None | object = ...) -> _AccessCache:
    """The access cache as of ``version`` (read now if not given): one primary-key read
    decides whether it is still valid."""
    global _access
    if version is ...:
        version = _config_version()
    with _access_lock:
        if _access.version != version:
            _access = _AccessCache(version=version)  # type: ignore[arg-type]
        return _access


def access_cache_drop() -> None:
    """Forget every cached key and agent; the next request reads them again."""
    global _access
    with _access_lock:
        _access = _AccessCache(version="<dropped>")


def access_cache_current(version: str | None) -> _AccessCache | None:
    """The access cache if it is the one for ``version``, without touching it otherwise."""
    cache = _access
    return cache if cache.version == version else None


def api_key_cached(*, cache: _AccessCache, prefix: str) -> ApiKey | None:
    """The key with this visible prefix, with ``allowed_agent_ids`` (empty: all agents).

    Unknown prefixes are not remembered, so guessing cannot grow the cache."""
    key = cache.keys.get(prefix)
    if key is None:
        key = ApiKey.objects.filter(prefix=prefix).first()
        if key is not None:
            key.allowed_agent_ids = frozenset(key.agents.values_list("pk", flat=True))
            cache.keys[prefix] = key
    return key


def agent_cached(*, cache: _AccessCache, slug: str) -> Agent | None:
    """The enabled agent with this model id (with its provider), or ``None``."""
    agent = cache.agents.get(slug)
    if agent is None:
        agent = Agent.objects.select_related("provider").filter(slug=slug, enabled=True).first()
        if agent is not None:
            cache.agents[slug] = agent
    return agent


def model_list(*, api_key: ApiKey | None) -> list[Agent]:
    """Enabled, listed agents this key may use, read fresh on every call (admin edits show
    at once). Unlisted agents are left out here only: they answer when named."""
    agents = (Agent.objects.filter(enabled=True, listed=True).select_related("provider")
              .order_by("slug"))
    if api_key is not None:
        allowed = list(api_key.agents.values_list("pk", flat=True))
        if allowed:
            agents = agents.filter(pk__in=allowed)
    return list(agents)


def stored_reply_get(*, response_id: str, api_key: ApiKey | None) -> Message | None:
    """The stored reply ``response_id`` of a thread this key owns (any dialect's id)."""
    return (
        Message.objects.select_related("thread__agent")
        .filter(response_id=response_id, role=Message.Role.ASSISTANT, thread__api_key=api_key)
        .order_by("-pk")
        .first()
    )


def thread_branch_for_response(*, response_id: str, api_key: ApiKey | None
                       ) -> tuple[str, str, list[llm.Message] | None]:
    """``(thread id, session key, history)`` to continue from the stored reply ``response_id``.

    ``history`` is ``None`` when that reply is its thread's latest message (the thread simply
    continues); otherwise it holds the thread up to that reply, which the caller resends as
    client-held history so the conversation branches there (a fork), as the Responses API
    branches from an older response.
    """
    row = stored_reply_get(response_id=response_id, api_key=api_key)
    if row is None:
        raise NotFound(f"Previous response with id '{response_id}' not found.",
                       param="previous_response_id", code="previous_response_not_found")
    thread = row.thread
    if row.seq == thread.message_count - 1:
        return str(thread.pk), thread.session_key, None
    rows = thread.messages.filter(seq__lte=row.seq).order_by("seq")
    return str(thread.pk), thread.session_key, [services.message_from_row(r) for r in rows]


# ---------------------------------------------------------------------------------------------
# Turns waiting in this process (the runtime counts them; operators read the queue depth)

_waiting_turns: dict[int, int] = {}


def turn_waiting(*, agent_id: int, change: int) -> None:
    """Count a turn of this process starting (+1) or ending (-1) a wait for its agent's
    provider or for a thread lease. Event-loop only, so a plain dict suffices."""
    count = _waiting_turns.get(agent_id, 0) + change
    if count > 0:
        _waiting_turns[agent_id] = count
    else:
        _waiting_turns.pop(agent_id, None)


def queue_depth(*, agent_id: int) -> int:
    """Turns of this process waiting for the agent's provider or for a thread lease.

    Per process: with several web processes each counts its own (the feed's ``agent_state``
    events carry the count of the process whose turn changed state)."""
    return _waiting_turns.get(agent_id, 0)


# ---------------------------------------------------------------------------------------------
# Public shapes of threads and messages (the operator API and the feed; reference 003)


def iso(value: Any) -> str | None:
    return value.isoformat().replace("+00:00", "Z") if value is not None else None


def client_label(*, user: str | None, api_key: ApiKey | None) -> str:
    """Who speaks for the client in a thread: its user, else its key's name."""
    return user or (api_key.name if api_key is not None else "") or "anonymous"


def message_public(row: Message, *, agent: str, client: str) -> dict[str, Any]:
    """A stored message as operators see it: reference 003's ``id, thread_id, from, to,
    payload_type, payload, timestamp`` plus Gaia's own fields. Images are counted, not
    shown (they may be megabytes of base64)."""
    if row.role == Message.Role.ASSISTANT:
        sender, recipient = agent, client
        payload_type = "tool_calls" if row.tool_calls else "reply"
    else:  # user messages and tool results both come from the client
        sender, recipient = client, agent
        payload_type = "tool_result" if row.role == Message.Role.TOOL else "text"
    payload: dict[str, Any] = {"content": row.content}
    if row.reasoning:
        payload["reasoning"] = row.reasoning
    if row.tool_calls:
        payload["tool_calls"] = row.tool_calls
    if row.tool_call_id:
        payload["tool_call_id"] = row.tool_call_id
    if row.parts:
        payload["images"] = len(row.parts)
    return {
        "id": row.pk,
        "thread_id": str(row.thread_id),
        "seq": row.seq,
        "from": sender,
        "to": recipient,
        "role": row.role,
        "payload_type": payload_type,
        "payload": payload,
        "timestamp": iso(row.created_at),
        "input_tokens": row.input_tokens,
        "output_tokens": row.output_tokens,
        "usage_estimated": row.usage_estimated,
        "finish_reason": row.finish_reason or None,
        "ttft_ms": row.ttft_ms,
        "latency_ms": row.latency_ms,
        "response_id": row.response_id or None,
        "dialect": row.dialect or None,
    }


def thread_public(thread: Thread, *, agent: str, client: str) -> dict[str, Any]:
    """A thread as operators see it (reference 003 plus Gaia's own fields)."""
    return {
        "id": str(thread.pk),
        "agent": agent,
        "title": thread.title,
        "status": thread.status,
        "participants": [client, agent],
        "user": thread.user or None,
        "message_count": thread.message_count,
        "input_tokens": thread.input_tokens,
        "output_tokens": thread.output_tokens,
        "usage_estimated": thread.usage_estimated,
        "workspace_root": thread.workspace_root or None,
        "forked_from": str(thread.forked_from_id) if thread.forked_from_id else None,
        "created_at": iso(thread.created_at),
        "last_activity": iso(thread.updated_at),
        "error": thread.last_error or None,
    }


# ---------------------------------------------------------------------------------------------
# What operators see: the organism, agents with their state, active threads (reference 003)

_PROCESS_STARTED = time.monotonic()


def organism_info() -> dict[str, Any]:
    """Name, status, uptime (of this process), agent count, active threads, total messages."""
    return {
        "name": settings.GAIA_ORGANISM_NAME,
        "status": "running",
        "uptime_seconds": int(time.monotonic() - _PROCESS_STARTED),
        "agent_count": Agent.objects.filter(enabled=True).count(),
        "active_threads": Thread.objects.filter(status=Thread.Status.ACTIVE).count(),
        "total_messages": Message.objects.count(),
        "mode": "redis" if settings.REDIS_URL else "single-process",
    }


def agent_list_public(*, slug: str | None = None) -> list[dict[str, Any]]:
    """Every agent (or the one ``slug``) with its live state:

    ``paused`` (an operator paused it), ``processing`` (a thread of its holds a live lease, in
    any process: ``current_thread`` names one), ``waiting`` (turns of this process wait for its
    provider or a thread lease, none running), ``error`` (its latest turn failed), else
    ``idle``. ``queue_depth`` counts this process's waiting turns (:func:`queue_depth`)."""
    from django.db.models import Max
    from django.utils import timezone

    now = timezone.now()
    agents = Agent.objects.select_related("provider").order_by("slug")
    if slug is not None:
        agents = agents.filter(slug=slug)
    agents = list(agents.annotate(last_activity=Max("threads__updated_at")))
    ids = [a.pk for a in agents]
    busy: dict[int, str] = {}
    for agent_id, thread_id in (Thread.objects.filter(agent_id__in=ids, lock_expires_at__gt=now)
                                .order_by("-updated_at").values_list("agent_id", "pk")):
        busy.setdefault(agent_id, str(thread_id))
    out = []
    for a in agents:
        depth = queue_depth(agent_id=a.pk)
        latest = (Thread.objects.filter(agent_id=a.pk).order_by("-updated_at")
                  .values_list("status", flat=True).first())
        if a.paused:
            state = "paused"
        elif a.pk in busy:
            state = "processing"
        elif depth:
            state = "waiting"
        elif latest == Thread.Status.ERROR:
            state = "error"
        else:
            state = "idle"
        out.append({
            "name": a.slug,
            "slug": a.slug,
            "display_name": a.display_name,
            "description": a.description,
            "enabled": a.enabled,
            "paused": a.paused,
            "state": state,
            "current_thread": busy.get(a.pk),
            "queue_depth": depth,
            "last_activity": iso(a.last_activity),
            "peers": [],
            "provider": a.provider.name,
            "model": a.model_name,
        })
    return out


def thread_list_active(*, limit: int = 100) -> list[dict[str, Any]]:
    """The most recently active threads with status ``active`` (the feed's snapshot)."""
    threads = (Thread.objects.filter(status=Thread.Status.ACTIVE)
               .select_related("agent", "api_key").order_by("-updated_at")[:limit])
    return [thread_public(t, agent=t.agent.slug,
                          client=client_label(user=t.user, api_key=t.api_key))
            for t in threads]


def model_entry(agent: Agent) -> dict[str, Any]:
    """An agent as an OpenAI model object (plus the fields chat frontends read)."""
    return {
        "id": agent.slug,
        "object": "model",
        "created": int(agent.created_at.timestamp()),
        "owned_by": "gaia",
        "name": agent.display_name,
        "description": agent.description,
        "max_input_tokens": agent.max_input_tokens,
        "max_output_tokens": agent.max_output_tokens,
    }


def model_entry_anthropic(agent: Agent) -> dict[str, Any]:
    return {
        "type": "model",
        "id": agent.slug,
        "display_name": agent.display_name,
        "created_at": agent.created_at.isoformat().replace("+00:00", "Z"),
    }


def _database_check() -> None:
    with connection.cursor() as cursor:
        cursor.execute("SELECT 1")
        cursor.fetchone()


async def _timed(check: Any) -> dict[str, Any]:
    t0 = time.perf_counter()
    try:
        async with asyncio.timeout(3):
            detail = await check()
    except Exception as exc:  # a failing component is reported, not raised
        return {"status": "error", "error": f"{type(exc).__name__}: {exc}"[:300]}
    out = {"status": "ok", "latency_ms": round((time.perf_counter() - t0) * 1000, 2)}
    if detail:
        out.update(detail)
    return out


async def _channel_layer_check() -> dict[str, Any]:
    from channels.layers import get_channel_layer

    layer = get_channel_layer()
    channel = await layer.new_channel()
    token = uuid.uuid4().hex
    await layer.send(channel, {"type": "health.ping", "token": token})
    message = await layer.receive(channel)
    if message.get("token") != token:
        raise RuntimeError("channel layer returned a different message")
    return {"backend": type(layer).__name__}


async def _broker_check() -> dict[str, Any]:
    if not settings.REDIS_URL:
        return {"mode": "eager (no broker: tasks run in-process)"}
    import redis.asyncio as aioredis

    client = aioredis.from_url(settings.REDIS_URL)
    try:
        await client.ping()
    finally:
        await client.aclose()
    return {"mode": "redis"}


async def health_report() -> dict[str, Any]:
    """Per-component checks; ``status`` is ``ok`` only when every required component is."""
    database, layer, broker = await asyncio.gather(
        _timed(functools.partial(run_db, _database_check)),
        _timed(_channel_layer_check),
        _timed(_broker_check),
    )
    checks = {"database": database, "channel_layer": layer, "broker": broker}
    ok = all(c["status"] == "ok" for c in checks.values())
    return {
        "status": "ok" if ok else "unavailable",
        "checks": checks,
        "mode": "redis" if settings.REDIS_URL else "single-process",
    }
