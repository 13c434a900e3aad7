"""Reads of access: API keys and agents as the hot path needs them, valid while the
configuration stamp (:class:`agents.models.ConfigStamp`) is unchanged."""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from django.db import connection

from agents.infra.database import read_nowait
from agents.kernel.exceptions import PermissionDenied
from agents.models import Agent, ApiKey, ConfigStamp


@dataclass
class _AccessCache:
    version: str | None
    keys: dict[str, ApiKey] = field(default_factory=dict)
    agents: dict[str, Agent] = field(default_factory=dict)
    keys_loaded: bool = False  # every key is in ``keys``: a prefix not there is unknown
    organism: OrganismState | None = None  # read once per stamp (organism_state_cached)
    # (provider name, model) -> agents.services.prices.Price or None (unknown)
    prices: dict[tuple[str, str], Any] = field(default_factory=dict)
    budgets: list[Any] | None = None  # agents.selectors.budgets.BudgetRule, read once
    webhooks: list[Any] | None = None  # agents.selectors.webhooks.EndpointRule, read once


@dataclass(frozen=True)
class OrganismState:
    """``running`` or ``stopped`` (``POST /api/v1/organism/stop``), since when, by whom."""

    stopped: bool = False
    since: datetime | None = None
    by: str = ""

    def public(self) -> dict[str, Any]:
        return {"state": "stopped" if self.stopped else "running",
                "since": self.since.isoformat() if self.since else None, "by": self.by}


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
    """The configuration stamp, read on the event loop (:func:`agents.infra.database.read_nowait`;
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


def organism_state() -> OrganismState:
    """The organism's state as stored (on the configuration stamp's row)."""
    row = ConfigStamp.objects.filter(pk=1).values_list(
        "organism_stopped", "organism_state_at", "organism_state_by").first()
    return OrganismState(*row) if row else OrganismState()


def organism_state_current() -> OrganismState | None:
    """The organism's state held with the access cache, ``None`` if not read yet (for the
    event loop: :func:`organism_state_cached` on a database thread then)."""
    return _access.organism


def organism_state_cached() -> OrganismState:
    """The organism's state as of the latest configuration stamp this process read (every
    request reads it): one read when the stamp changes, none otherwise. Stopping and
    starting renew the stamp, so every process sees it on its next request."""
    cache = _access
    state = cache.organism
    if state is None:
        if (cache.version or "").startswith("<"):  # never read, or dropped: read the stamp now
            cache = access_cache()
        state = cache.organism = organism_state()
    return state


def access_cache_drop() -> None:
    """Forget every cached key and agent; the next request reads them again."""
    global _access
    with _access_lock:
        _access = _AccessCache(version="<dropped>")


def access_cache_latest() -> _AccessCache:
    """The cache as of the stamp this process read last: every request reads the stamp
    before its turn opens, so what a turn reads here is current without a query. Read
    afresh if the cache was never read or was dropped."""
    cache = _access
    return access_cache() if (cache.version or "").startswith("<") else cache


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


def api_key_agent_ids(api_key: ApiKey | None) -> frozenset[int]:
    """The agents ``api_key`` may use: its list (read once and kept on the key; the access
    cache reads every key's list in one query), empty for a key with no list and for no key
    (a staff session), which both mean every agent. The one rule behind every "may this key
    use this agent" (/v1, operator actions, the model list, delegation, the audit trail)."""
    if api_key is None:
        return frozenset()
    ids = getattr(api_key, "allowed_agent_ids", None)
    if ids is None:
        ids = api_key.allowed_agent_ids = frozenset(api_key.agents.values_list("pk", flat=True))
    return ids


def api_key_may_use(*, api_key: ApiKey | None, agent: Agent) -> bool:
    """Whether ``api_key`` may use ``agent`` (:func:`api_key_agent_ids`)."""
    ids = api_key_agent_ids(api_key)
    return not ids or agent.pk in ids


def api_key_agent_check(*, api_key: ApiKey | None, agent: Agent, param: str | None = None
                        ) -> None:
    """The "allowed agents" rule, the same for every operator action on every channel
    (inject, kill, pause, resume, approve, deny; REST and the feed): a key limited to some
    agents acts only for them (403 ``agent_not_allowed``). A staff session (no key) and a key
    with no list act for every agent. ``/v1`` applies the same list to its model id
    (:func:`agents.services.request_authorize`)."""
    if not api_key_may_use(api_key=api_key, agent=agent):
        raise PermissionDenied(f"This API key may not act for the agent '{agent.slug}'.",
                               param=param, code="agent_not_allowed")


def audit_read_check(*, api_key: ApiKey | None, user: Any = None) -> None:
    """Who reads the audit trail, on every channel that shows it (the REST API, the pages):
    a staff user, or an operator key with no agent list (full operator access). The trail
    names staff, keys, addresses and every agent's actions, so a key limited to some agents
    is refused (403 ``full_access_required``) rather than shown a part: the entries about its
    own agents still name who acted from where, and a thread's, a run's or an approval's
    entry cannot be told to be about its agents without reading what it points to."""
    if api_key is not None:
        if api_key_agent_ids(api_key):
            raise PermissionDenied("The audit trail needs full operator access: this API key "
                                   "is limited to some agents.", code="full_access_required")
        return
    if not (user is not None and getattr(user, "is_authenticated", False)
            and user.is_active and user.is_staff):
        raise PermissionDenied("The audit trail is read by staff or a full operator key.",
                               code="full_access_required")
