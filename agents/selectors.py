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
from agents.models import Agent, ApiKey, Message

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
    """Enabled agents this key may use, read fresh on every call (admin edits show at once)."""
    agents = Agent.objects.filter(enabled=True).select_related("provider").order_by("slug")
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
