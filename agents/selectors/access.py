"""Reads of access: API keys and agents as the hot path needs them, valid while the
configuration stamp (:class:`agents.models.ConfigStamp`) is unchanged."""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import Any

from django.db import connection

from agents.database import read_nowait
from agents.exceptions import PermissionDenied
from agents.models import Agent, ApiKey


@dataclass
class _AccessCache:
    version: str | None
    keys: dict[str, ApiKey] = field(default_factory=dict)
    agents: dict[str, Agent] = field(default_factory=dict)
    keys_loaded: bool = False  # every key is in ``keys``: a prefix not there is unknown


_access = _AccessCache(version="<never read>")
_access_lock = threading.Lock()


# Raw SQL: this runs on every request, and the ORM would cost ten times as much.
_STAMP_SQL = "SELECT version FROM agents_configstamp WHERE id = 1"


def config_version() -> str | None:
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
        version = config_version()
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

    Every key is read at once (two queries) the first time any is needed: then a known
    prefix and an unknown one cost the same (a dictionary lookup), so timing tells an
    attacker nothing about which prefixes exist, and guessing cannot grow the cache."""
    if not cache.keys_loaded:
        api_keys_load(cache=cache)
    return cache.keys.get(prefix)


def api_keys_load(*, cache: _AccessCache) -> None:
    allowed: dict[int, set[int]] = {}
    for key_id, agent_id in ApiKey.agents.through.objects.values_list("apikey_id", "agent_id"):
        allowed.setdefault(key_id, set()).add(agent_id)
    keys = {}
    for key in ApiKey.objects.all():
        key.allowed_agent_ids = frozenset(allowed.get(key.pk, ()))
        keys[key.prefix] = key
    cache.keys.update(keys)
    cache.keys_loaded = True


def agent_cached(*, cache: _AccessCache, slug: str) -> Agent | None:
    """The enabled agent with this model id (with its provider), or ``None``."""
    agent = cache.agents.get(slug)
    if agent is None and "\x00" not in slug:  # no model id has a NUL (PostgreSQL refuses it)
        agent = Agent.objects.select_related("provider").filter(slug=slug, enabled=True).first()
        if agent is not None:
            agent_provider_chain_load(agent)
            cache.agents[slug] = agent
    return agent


def agent_provider_chain_load(agent: Agent) -> list[Any]:
    """Set and return ``agent.provider_chain``: its provider, then its fallback providers in
    order (what :func:`agents.backends.fallback_stream` tries; the turn runtime reads it)."""
    fallbacks = agent.fallbacks.select_related("provider").order_by("position", "pk")
    agent.provider_chain = [agent.provider, *(f.provider for f in fallbacks)]
    # and the knowledge bases its turns retrieve from (agents.knowledge)
    agent.knowledge_base_ids = list(agent.knowledge_bases.values_list("pk", flat=True))
    return agent.provider_chain


def api_key_agent_check(*, api_key: ApiKey | None, agent: Agent, param: str | None = None
                        ) -> None:
    """The "allowed agents" rule, the same for every operator action on every channel
    (inject, kill, pause, resume, approve, deny; REST and the feed): a key limited to some
    agents acts only for them (403 ``agent_not_allowed``). A staff session (no key) and a key
    with no list act for every agent. ``/v1`` applies the same list to its model id
    (:func:`agents.services.request_authorize`)."""
    allowed = getattr(api_key, "allowed_agent_ids", None) if api_key is not None else None
    if allowed is None and api_key is not None:
        allowed = frozenset(api_key.agents.values_list("pk", flat=True))
    if allowed and agent.pk not in allowed:
        raise PermissionDenied(f"This API key may not act for the agent '{agent.slug}'.",
                               param=param, code="agent_not_allowed")
