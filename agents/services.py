"""Writes: API keys, declarative agent config, and the thread turn lifecycle."""

from __future__ import annotations

import hashlib
import hmac
import json
import logging
import math
import secrets
import time
import uuid
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

from django.core.cache import cache, caches
from django.core.cache.backends.locmem import LocMemCache
from django.db import transaction
from django.db.models import F, Q
from django.utils import timezone

from agents import llm, realtime, selectors
from agents.exceptions import (
    AgentNotFound,
    AgentPaused,
    AuthenticationFailed,
    InvalidRequest,
    NotFound,
    PermissionDenied,
    RateLimited,
)
from agents.models import (
    Agent,
    ApiKey,
    ConfigStamp,
    Message,
    Provider,
    Thread,
    options_unmasked,
)
from agents.rows import Add, rows_insert, rows_update

# ---------------------------------------------------------------------------------------------
# API keys

log = logging.getLogger("gaia.services")

KEY_PREFIX = "gaia_"
AGENT_PAUSED_RETRY_AFTER = 30  # seconds: what a paused agent's 503 tells clients to wait


def _hash_secret(secret: str) -> str:
    # Keys carry 256 bits of randomness, so a fast hash is safe (no dictionary to attack).
    return hashlib.sha256(secret.encode()).hexdigest()


@transaction.atomic
def api_key_create(
    *,
    name: str,
    scopes: list[str] | None = None,
    agents: list[Agent] | None = None,
    owner: Any = None,
    expires_at: Any = None,
    requests_per_minute: int = 0,
) -> tuple[ApiKey, str]:
    """Create a key and return it with its secret, which is not stored and never shown again."""
    prefix = KEY_PREFIX + secrets.token_hex(4)
    secret = f"{prefix}_{secrets.token_urlsafe(32)}"
    key = ApiKey(
        name=name,
        prefix=prefix,
        hashed_secret=_hash_secret(secret),
        owner=owner,
        scopes=scopes if scopes is not None else [ApiKey.Scope.CHAT],
        expires_at=expires_at,
        requests_per_minute=requests_per_minute,
    )
    key.full_clean()
    key.save()
    if agents:
        key.agents.set(agents)
    return key, secret


def api_key_revoke(*, key: ApiKey) -> None:
    ApiKey.objects.filter(pk=key.pk, revoked_at__isnull=True).update(revoked_at=timezone.now())
    config_changed()


def config_changed(*, reason: str = "edited") -> None:
    """Renew the configuration stamp: every process drops its cached keys and agents on its
    next request. Called by signals on save/delete, and by services that use ``update()``.
    The feed hears of it (``config_changed``) once the change commits."""
    ConfigStamp.objects.update_or_create(pk=1, defaults={"version": uuid.uuid4().hex})
    realtime.send_event_on_commit(realtime.event("config_changed", reason=reason))


# ---------------------------------------------------------------------------------------------
# Operator control: pause and resume agents, kill threads, reload every process


@transaction.atomic
def agent_set_paused(*, agent: Agent, paused: bool) -> Agent:
    """Pause (new requests get 503 with ``Retry-After``; turns in flight finish) or resume an
    agent; idempotent. Every process sees it on its next request (configuration stamp)."""
    now = timezone.now()
    Agent.objects.filter(pk=agent.pk).update(paused=paused, updated_at=now)
    agent.paused, agent.updated_at = paused, now
    config_changed(reason="agent_paused" if paused else "agent_resumed")
    realtime.send_event_on_commit(realtime.event(
        "agent_changed", agent=agent.slug, change="paused" if paused else "resumed"))
    realtime.send_event_on_commit(realtime.event(
        "agent_state", agent=agent.slug, state="paused" if paused else "idle",
        current_thread=None, queue_depth=selectors.queue_depth(agent_id=agent.pk)))
    return agent


def agent_changed_announce(*, agent: Agent, change: str) -> None:
    """Tell the feed an agent was created, updated or deleted (the admin and imports)."""
    realtime.send_event_on_commit(realtime.event("agent_changed", agent=agent.slug,
                                                 change=change))


@transaction.atomic
def thread_kill(*, thread: Thread) -> bool:
    """Stop the thread's turn wherever it runs and mark the thread ``killed``.

    The running turn (if any, in any process) is stopped by a control message; it stores its
    partial reply with finish reason ``killed`` and releases the lease itself. Returns whether
    a turn held the thread's lease when the kill was sent. Idempotent."""
    now = timezone.now()
    running = thread.lock_expires_at is not None and thread.lock_expires_at > now
    Thread.objects.filter(pk=thread.pk).update(status=Thread.Status.KILLED, updated_at=now)
    thread.status, thread.updated_at = Thread.Status.KILLED, now
    realtime.send_event_on_commit(realtime.event(
        "thread_updated", thread_id=str(thread.pk), agent=thread.agent.slug,
        status=thread.status, message_count=thread.message_count,
        last_activity=selectors.iso(now),
        error=thread.last_error or None))
    realtime.send_control_on_commit("turn_kill", thread_id=str(thread.pk))
    return running


def organism_reload() -> None:
    """Every process drops its cached keys and agents now (and reads them again)."""
    config_changed(reason="reload")
    realtime.send_control_on_commit("reload")


class NeedsDatabase(Exception):
    """A cache-only authorization (:func:`request_authorize` with ``cached_only``) needs the
    database: a key or agent not in memory, a ``last_used_at`` to write, or a shared
    rate-limit counter to bump. Nothing was counted or written."""


def api_key_authenticate(
    *, raw: str, scope: str = ApiKey.Scope.CHAT, cache: Any = None, cached_only: bool = False
) -> ApiKey:
    """The key for ``raw`` or :class:`AuthenticationFailed`. Constant-time on the secret."""
    invalid = AuthenticationFailed("Incorrect API key provided.")
    prefix = raw[: len(KEY_PREFIX) + 8]
    if not raw.startswith(KEY_PREFIX) or raw[len(prefix) : len(prefix) + 1] != "_":
        raise invalid
    cache = cache or selectors.access_cache()
    if cached_only and not cache.keys_loaded:
        raise NeedsDatabase(prefix)
    key = selectors.api_key_cached(cache=cache, prefix=prefix)
    digest = _hash_secret(raw)
    if key is None:
        hmac.compare_digest(digest, digest)  # same work either way
        raise invalid
    if not hmac.compare_digest(key.hashed_secret, digest):
        raise invalid
    now = timezone.now()
    if key.revoked_at is not None:
        raise AuthenticationFailed("This API key has been revoked.")
    if key.expires_at is not None and key.expires_at <= now:
        raise AuthenticationFailed("This API key has expired.")
    if scope not in (key.scopes or []):
        raise PermissionDenied(
            f"This API key does not have the {scope!r} scope.", code="insufficient_scope"
        )
    if key.last_used_at is None or now - key.last_used_at > timedelta(seconds=60):
        if cached_only:
            raise NeedsDatabase("last_used_at")
        # Not a configuration change: no new stamp, the cached copy is updated in place.
        ApiKey.objects.filter(pk=key.pk).update(last_used_at=now)
        key.last_used_at = now
    return key


def _throttle_is_local() -> bool:
    """Whether the rate-limit counters live in this process (no Redis: one server process)."""
    return isinstance(caches["default"], LocMemCache)


# This process's own counters, used while the shared cache (Redis) cannot be reached.
_local_counts = LocMemCache("gaia-throttle-fallback", {"OPTIONS": {"MAX_ENTRIES": 10000}})
_fallback_warned_at = 0.0


def _count(counter: Any, cache_key: str) -> int:
    if counter.add(cache_key, 1, timeout=70):
        return 1
    try:
        return counter.incr(cache_key)
    except ValueError:  # expired between add and incr
        counter.add(cache_key, 1, timeout=70)
        return 1


def api_key_throttle(*, key: ApiKey) -> None:
    """Count one request against the key's per-minute budget (a fixed window in the cache,
    shared by every process when the cache is Redis).

    With Redis unreachable the request is counted in this process alone (a looser limit
    for as long as Redis is down, logged) rather than refused: the API keeps serving."""
    global _fallback_warned_at
    limit = key.requests_per_minute
    if not limit:
        return
    now = time.time()
    window = int(now // 60)
    cache_key = f"gaia:rl:{key.pk}:{window}"
    try:
        count = _count(cache, cache_key)
    except Exception as exc:  # the shared cache is down (redis.ConnectionError and kin)
        if now - _fallback_warned_at > 60:
            _fallback_warned_at = now
            log.warning("rate limits counted per process: the shared cache failed (%s)", exc)
        count = _count(_local_counts, cache_key)
    if count > limit:
        retry = max(1, math.ceil(60 - now % 60))
        raise RateLimited(
            f"Rate limit of {limit} requests per minute reached for this API key.",
            retry_after=retry,
        )


def request_authorize(
    *, raw_key: str | None, anonymous_allowed: bool, agent_slug: str | None,
    version: str | None | object = ..., cached_only: bool = False,
) -> tuple[ApiKey | None, Agent | None]:
    """Authenticate, throttle and resolve the agent in one database round of the caller.

    ``version`` is the configuration stamp if the caller has read it. With ``cached_only``
    (on the event loop, no database) it raises :class:`NeedsDatabase` before counting the
    request if anything is not in memory, and the caller runs it again on a database thread.

    Order of checks is the client-visible contract: 401, 429, then 404 (unknown model) and
    403 (model not allowed for this key).
    """
    if cached_only:
        cache = selectors.access_cache_current(version)  # type: ignore[arg-type]
        if cache is None:
            raise NeedsDatabase("configuration changed")
    else:
        cache = selectors.access_cache(version=version)
    key = None
    if raw_key:
        key = api_key_authenticate(raw=raw_key, cache=cache, cached_only=cached_only)
    elif not anonymous_allowed:
        raise AuthenticationFailed(
            "You didn't provide an API key. Send it as 'Authorization: Bearer KEY' or "
            "'x-api-key: KEY'."
        )
    agent = None
    if agent_slug is not None:
        if cached_only and agent_slug not in cache.agents:
            raise NeedsDatabase(agent_slug)
        agent = selectors.agent_cached(cache=cache, slug=agent_slug)
    if key is not None:
        if cached_only and key.requests_per_minute and not _throttle_is_local():
            raise NeedsDatabase("rate limit")
        api_key_throttle(key=key)
    if agent_slug is None:
        return key, None
    if agent is None:
        raise AgentNotFound(
            f"The model '{agent_slug}' does not exist or you do not have access to it.",
            param="model",
        )
    if key is not None and key.allowed_agent_ids and agent.pk not in key.allowed_agent_ids:
        raise PermissionDenied(
            f"This API key may not use the model '{agent_slug}'.", param="model"
        )
    if agent.paused:
        raise AgentPaused(
            f"The model '{agent_slug}' is paused by an operator; try again later.",
            retry_after=AGENT_PAUSED_RETRY_AFTER,
        )
    return key, agent


# ---------------------------------------------------------------------------------------------
# Declarative configuration (gaia agents import/export)

PROVIDER_FIELDS = ("kind", "base_url", "api_key_env", "default_model", "timeout_seconds",
                   "max_concurrency", "options")
AGENT_FIELDS = ("display_name", "description", "instructions", "upstream_model", "tool",
                "temperature", "top_p", "max_input_tokens", "max_output_tokens", "enabled",
                "listed", "context_overflow")


@dataclass
class ImportReport:
    created: list[str] = field(default_factory=list)
    updated: list[str] = field(default_factory=list)
    unchanged: list[str] = field(default_factory=list)


@transaction.atomic
def agents_import(*, data: dict[str, Any], create_only: bool = False) -> ImportReport:
    """Create or update providers and agents from a config document; idempotent.

    With ``create_only`` existing providers and agents are left exactly as they are (the
    defaults ``./run`` applies must never undo an admin's changes).

    ``api_key`` in a provider entry sets the write-only secret; prefer ``api_key_env``.
    Raises :class:`InvalidRequest` naming the offending entry; nothing is written then.
    """
    if not isinstance(data, dict):
        raise InvalidRequest("The config must be a mapping with 'providers' and 'agents'.")
    report = ImportReport()
    providers: dict[str, Provider] = {p.name: p for p in Provider.objects.all()}
    for i, entry in enumerate(data.get("providers") or []):
        if not isinstance(entry, dict) or not entry.get("name"):
            raise InvalidRequest(f"providers[{i}] needs a name.")
        name = entry["name"]
        unknown = set(entry) - {"name", "api_key", *PROVIDER_FIELDS}
        if unknown:
            raise InvalidRequest(f"providers[{i}] ({name}): unknown fields {sorted(unknown)}.")
        values = {k: entry[k] for k in PROVIDER_FIELDS if k in entry}
        if "api_key" in entry:
            values["api_key_secret"] = entry["api_key"] or ""
        if create_only and name in providers:
            report.unchanged.append(f"provider:{name}")
            continue
        provider = providers.get(name) or Provider(name=name)
        if "options" in values:  # an exported document shows header secrets masked
            values["options"] = options_unmasked(values["options"], provider.options)
        _apply(provider, values, f"provider {name}", report, label=f"provider:{name}")
        providers[name] = provider
    for i, entry in enumerate(data.get("knowledge_bases") or []):
        _knowledge_base_import(i, entry, report, create_only=create_only)
    for i, entry in enumerate(data.get("agents") or []):
        if not isinstance(entry, dict) or not entry.get("slug"):
            raise InvalidRequest(f"agents[{i}] needs a slug.")
        slug = entry["slug"]
        unknown = set(entry) - {"slug", "provider", "fallback_providers", "knowledge_bases",
                                *AGENT_FIELDS}
        if unknown:
            raise InvalidRequest(f"agents[{i}] ({slug}): unknown fields {sorted(unknown)}.")
        agent = Agent.objects.filter(slug=slug).first() or Agent(slug=slug)
        if create_only and agent.pk is not None:
            report.unchanged.append(f"agent:{slug}")
            continue
        values = {k: entry[k] for k in AGENT_FIELDS if k in entry}
        if "provider" in entry:
            provider = providers.get(entry["provider"])
            if provider is None:
                raise InvalidRequest(
                    f"agents[{i}] ({slug}): unknown provider {entry['provider']!r}."
                )
            values["provider"] = provider
        elif agent.pk is None:
            raise InvalidRequest(f"agents[{i}] ({slug}) needs a provider.")
        values.setdefault("display_name", agent.display_name or slug)
        _apply(agent, values, f"agent {slug}", report, label=f"agent:{slug}")
        if "fallback_providers" in entry:
            _agent_fallbacks_set(agent, entry["fallback_providers"], providers,
                                 f"agents[{i}] ({slug})", report)
        if "knowledge_bases" in entry:
            _agent_knowledge_set(agent, entry["knowledge_bases"], f"agents[{i}] ({slug})",
                                 report)
    if "routing" in data:
        _routing_policy_set(data["routing"], report)
    for i, entry in enumerate(data.get("teams") or []):
        _team_import(i, entry, report, create_only=create_only)
    return report


TEAM_FIELDS = ("display_name", "description", "mode", "max_total_tokens", "max_seconds",
               "member_timeout_seconds", "enabled")


def _team_import(i: int, entry: Any, report: ImportReport, *, create_only: bool) -> None:
    """One ``teams:`` entry: ``slug``, ``leader`` and ``members`` (agent slugs, in order)
    and :data:`TEAM_FIELDS`."""
    from agents.models import Team, TeamMember

    if not isinstance(entry, dict) or not entry.get("slug"):
        raise InvalidRequest(f"teams[{i}] needs a slug.")
    slug = entry["slug"]
    what = f"teams[{i}] ({slug})"
    unknown = set(entry) - {"slug", "leader", "members", *TEAM_FIELDS}
    if unknown:
        raise InvalidRequest(f"{what}: unknown fields {sorted(unknown)}.")
    team = Team.objects.filter(slug=slug).first() or Team(slug=slug)
    if create_only and team.pk is not None:
        report.unchanged.append(f"team:{slug}")
        return
    values = {k: entry[k] for k in TEAM_FIELDS if k in entry}
    agents = {a.slug: a for a in Agent.objects.all()}
    if "leader" in entry:
        if entry["leader"] not in agents:
            raise InvalidRequest(f"{what}: unknown leader agent {entry['leader']!r}.")
        values["leader"] = agents[entry["leader"]]
    elif team.pk is None:
        raise InvalidRequest(f"{what} needs a leader.")
    members = entry.get("members")
    if members is not None:
        if not isinstance(members, list) or not all(isinstance(m, str) for m in members):
            raise InvalidRequest(f"{what}: members must be a list of agent slugs.")
        missing = [m for m in members if m not in agents]
        if missing:
            raise InvalidRequest(f"{what}: unknown member agents {missing}.")
        if len(set(members)) != len(members):
            raise InvalidRequest(f"{what}: members repeats an agent.")
    elif team.pk is None:
        raise InvalidRequest(f"{what} needs members.")
    values.setdefault("display_name", team.display_name or slug)
    label = f"team:{slug}"
    current = {k: (team.leader_id if k == "leader" and team.pk else getattr(team, k, None))
               for k in values}
    changed = [k for k, v in values.items()
               if current[k] != (v.pk if k == "leader" else v)]
    for k in changed:
        setattr(team, k, values[k])
    from django.core.exceptions import ValidationError

    try:
        team.full_clean()
    except ValidationError as exc:
        raise InvalidRequest(f"team {slug}: {exc.message_dict}") from exc
    is_new = team.pk is None
    if is_new or changed:
        team.save()
    members_changed = False
    if members is not None:
        now = list(team.memberships.order_by("position", "pk").values_list("agent__slug",
                                                                           flat=True))
        if now != members:
            team.memberships.all().delete()
            TeamMember.objects.bulk_create([TeamMember(team=team, agent=agents[m], position=n)
                                            for n, m in enumerate(members)])
            config_changed(reason="team_members")
            members_changed = True
    if is_new:
        report.created.append(label)
    elif changed or members_changed:
        report.updated.append(label)
    else:
        report.unchanged.append(label)


KNOWLEDGE_BASE_FIELDS = ("name", "description", "chunk_chars", "chunk_overlap", "top_k")


def _knowledge_base_import(i: int, entry: Any, report: ImportReport, *,
                           create_only: bool) -> None:
    """One ``knowledge_bases:`` entry: :data:`KNOWLEDGE_BASE_FIELDS` and ``documents``
    (file paths; each is added, and indexed in the background, unless a document of that
    name is already there)."""
    from pathlib import Path

    from agents import knowledge
    from agents.models import KnowledgeBase

    if not isinstance(entry, dict) or not entry.get("slug"):
        raise InvalidRequest(f"knowledge_bases[{i}] needs a slug.")
    slug = entry["slug"]
    unknown = set(entry) - {"slug", "documents", *KNOWLEDGE_BASE_FIELDS}
    if unknown:
        raise InvalidRequest(f"knowledge_bases[{i}] ({slug}): unknown fields "
                             f"{sorted(unknown)}.")
    kb = KnowledgeBase.objects.filter(slug=slug).first() or KnowledgeBase(slug=slug)
    if create_only and kb.pk is not None:
        report.unchanged.append(f"knowledge_base:{slug}")
        return
    values = {k: entry[k] for k in KNOWLEDGE_BASE_FIELDS if k in entry}
    values.setdefault("name", kb.name or slug)
    _apply(kb, values, f"knowledge base {slug}", report, label=f"knowledge_base:{slug}")
    have = set(kb.documents.values_list("name", flat=True))
    for path in entry.get("documents") or []:
        file = Path(str(path))
        if file.name in have:
            continue
        try:
            data = file.read_bytes()
        except OSError as exc:
            raise InvalidRequest(f"knowledge_bases[{i}] ({slug}): cannot read {path}: "
                                 f"{exc.strerror}.") from exc
        knowledge.knowledge_document_add(knowledge_base=kb, name=file.name, data=data)


def _agent_knowledge_set(agent: Agent, slugs: Any, what: str, report: ImportReport) -> None:
    from agents.models import KnowledgeBase

    if not isinstance(slugs, list) or not all(isinstance(s, str) for s in slugs):
        raise InvalidRequest(f"{what}: knowledge_bases must be a list of slugs.")
    bases = {kb.slug: kb for kb in KnowledgeBase.objects.filter(slug__in=slugs)}
    missing = [s for s in slugs if s not in bases]
    if missing:
        raise InvalidRequest(f"{what}: unknown knowledge bases {missing}.")
    if set(agent.knowledge_bases.values_list("slug", flat=True)) == set(slugs):
        return
    agent.knowledge_bases.set(list(bases.values()))
    label = f"agent:{agent.slug}"
    if label in report.unchanged:
        report.unchanged.remove(label)
        report.updated.append(label)


def _routing_policy_set(entry: Any, report: ImportReport) -> None:
    """The ``routing:`` section: ``router``, ``default`` (agent slugs or null) and
    ``router_timeout_seconds``."""
    from agents.models import RoutingPolicy

    if not isinstance(entry, dict) or set(entry) - {"router", "default",
                                                    "router_timeout_seconds"}:
        raise InvalidRequest("routing: a mapping with router, default and "
                             "router_timeout_seconds.")
    policy = RoutingPolicy.objects.first() or RoutingPolicy()
    values: dict[str, Any] = {}
    for name, attr in (("router", "router"), ("default", "default_agent")):
        if name in entry:
            slug = entry[name]
            agent = Agent.objects.filter(slug=slug).first() if slug else None
            if slug and agent is None:
                raise InvalidRequest(f"routing: unknown {name} agent {slug!r}.")
            values[attr] = agent
    if "router_timeout_seconds" in entry:
        values["router_timeout_seconds"] = entry["router_timeout_seconds"]
    changed = [k for k, v in values.items() if getattr(policy, k) != v]
    for k in changed:
        setattr(policy, k, values[k])
    if policy.pk is not None and not changed:
        report.unchanged.append("routing")
        return
    try:
        policy.full_clean()
    except Exception as exc:
        raise InvalidRequest(f"routing: {exc}") from exc
    (report.created if policy.pk is None else report.updated).append("routing")
    policy.save()


def _agent_fallbacks_set(agent: Agent, names: Any, providers: dict[str, Provider], what: str,
                         report: ImportReport) -> None:
    """Replace the agent's fallback providers with ``names`` (in order) if they differ."""
    from agents.models import AgentFallback

    if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
        raise InvalidRequest(f"{what}: fallback_providers must be a list of provider names.")
    unknown = [n for n in names if n not in providers]
    if unknown:
        raise InvalidRequest(f"{what}: unknown fallback providers {unknown}.")
    if len(set(names)) != len(names) or agent.provider.name in names:
        raise InvalidRequest(f"{what}: fallback_providers repeats a provider.")
    current = list(agent.fallbacks.order_by("position", "pk").values_list("provider__name",
                                                                           flat=True))
    if current == names:
        return
    agent.fallbacks.all().delete()
    AgentFallback.objects.bulk_create([
        AgentFallback(agent=agent, provider=providers[n], position=i)
        for i, n in enumerate(names)])
    config_changed(reason="agent_fallbacks")
    label = f"agent:{agent.slug}"
    if label in report.unchanged:
        report.unchanged.remove(label)
        report.updated.append(label)


def _apply(
    obj: Any, values: dict[str, Any], what: str, report: ImportReport, *, label: str
) -> None:
    from django.core.exceptions import ValidationError

    is_new = obj.pk is None

    def current(name: str) -> Any:
        if name == "provider":
            return obj.provider_id
        return getattr(obj, name)

    changed = [k for k, v in values.items() if current(k) != (v.pk if k == "provider" else v)]
    for k in changed:
        setattr(obj, k, values[k])
    if not is_new and not changed:
        report.unchanged.append(label)
        return
    try:
        obj.full_clean()
    except ValidationError as exc:
        raise InvalidRequest(f"{what}: {exc.message_dict}") from exc
    if is_new:
        obj.save()
        report.created.append(label)
    else:
        obj.save(update_fields=[*changed, "updated_at"])
        report.updated.append(label)


def agents_export() -> dict[str, Any]:
    """The config document for every provider and agent. Secrets are never exported (header
    values in ``options.extra_headers`` show as ``[hidden]``; importing that keeps them)."""
    providers = []
    for p in Provider.objects.order_by("name"):
        entry: dict[str, Any] = {"name": p.name}
        for k in PROVIDER_FIELDS:
            entry[k] = p.options_public if k == "options" else getattr(p, k)
        providers.append(entry)
    agents = []
    for a in Agent.objects.select_related("provider").order_by("slug"):
        entry = {"slug": a.slug, "provider": a.provider.name}
        for k in AGENT_FIELDS:
            entry[k] = getattr(a, k)
        fallbacks = list(a.fallbacks.order_by("position", "pk")
                         .values_list("provider__name", flat=True))
        if fallbacks:
            entry["fallback_providers"] = fallbacks
        bases = list(a.knowledge_bases.order_by("slug").values_list("slug", flat=True))
        if bases:
            entry["knowledge_bases"] = bases
        agents.append(entry)
    doc: dict[str, Any] = {"providers": providers, "agents": agents}
    from agents.models import KnowledgeBase, RoutingPolicy, Team

    bases = [{"slug": kb.slug, **{k: getattr(kb, k) for k in KNOWLEDGE_BASE_FIELDS}}
             for kb in KnowledgeBase.objects.order_by("slug")]
    if bases:
        doc["knowledge_bases"] = bases

    teams = []
    for t in Team.objects.select_related("leader").order_by("slug"):
        entry = {"slug": t.slug, "leader": t.leader.slug, "members": list(
            t.memberships.order_by("position", "pk").values_list("agent__slug", flat=True))}
        for k in TEAM_FIELDS:
            entry[k] = getattr(t, k)
        teams.append(entry)
    if teams:
        doc["teams"] = teams
    policy = RoutingPolicy.objects.select_related("router", "default_agent").first()
    if policy is not None:
        doc["routing"] = {
            "router": policy.router.slug if policy.router else None,
            "default": policy.default_agent.slug if policy.default_agent else None,
            "router_timeout_seconds": policy.router_timeout_seconds}
    return doc


# ---------------------------------------------------------------------------------------------
# Threads: resolving a conversation, the turn lease, recording messages

FAILED_FINISHES = ("error", "client_disconnected", "interrupted")
INTERRUPTED_ERROR = ("The turn was interrupted: the server process running it stopped before "
                     "the reply was complete.")
EMPTY_DIGEST = hashlib.sha256(b"gaia-thread").hexdigest()


def digest_chain(messages: list[llm.Message], start: str = EMPTY_DIGEST) -> list[str]:
    """``[d0, d1, ..., dn]``: ``d_i`` identifies the first ``i`` messages."""
    out = [start]
    for m in messages:
        blob = json.dumps(m.fingerprint(), separators=(",", ":"), ensure_ascii=False)
        out.append(hashlib.sha256((out[-1] + blob).encode()).hexdigest())
    return out


def session_key_fallback(*, model: str, user: str | None, messages: list[llm.Message]) -> str:
    first = next((m.text for m in messages if m.role == "user"), "")
    blob = json.dumps([model, user or "anonymous", first], ensure_ascii=False)
    return "hash:" + hashlib.sha256(blob.encode()).hexdigest()


def message_from_row(row: Message) -> llm.Message:
    parts: list[llm.Part] = []
    if row.content:
        parts.append(llm.TextPart(row.content))
    for p in row.parts or []:
        parts.append(llm.ImagePart(url=p.get("url"), data=p.get("data"),
                                   media_type=p.get("media_type")))
    calls = tuple(llm.ToolCall(c["id"], c["name"], c["arguments"]) for c in row.tool_calls or [])
    return llm.Message(role=row.role, parts=tuple(parts), tool_calls=calls,  # type: ignore[arg-type]
                       tool_call_id=row.tool_call_id or None)


def _message_row(thread_id: uuid.UUID, seq: int, m: llm.Message, dialect: str) -> Message:
    images = [
        {"url": p.url, "data": p.data, "media_type": p.media_type}
        for p in m.parts
        if isinstance(p, llm.ImagePart)
    ]
    return Message(
        thread_id=thread_id,
        seq=seq,
        role=m.role,
        content=m.text,
        parts=images or None,
        tool_calls=[{"id": c.id, "name": c.name, "arguments": c.arguments} for c in m.tool_calls]
        or None,
        tool_call_id=m.tool_call_id or "",
        dialect=dialect,
    )


@dataclass
class TurnStart:
    """What a turn works with once it holds the thread's lease."""

    thread_id: uuid.UUID
    lock_token: str
    history: list[llm.Message]  # what the backend gets, system prompt aside
    base_digest: str  # the thread's digest once the new messages are stored
    next_seq: int  # the reply's position in the thread
    client: str = "anonymous"  # who speaks for the client (selectors.client_label)
    message_ids: tuple[int, ...] = ()  # the ids of the messages this turn stored
    agent_id: int = 0
    agent_slug: str = ""
    found: str = "new"  # how: new, forked, continued (history matched), stateful (log line)


def thread_turn_begin(
    *,
    agent: Agent,
    api_key: ApiKey | None,
    session_key: str,
    thread_id: str | None,
    user: str | None,
    incoming: list[llm.Message],
    workspace_root: str | None,
    dialect: str,
    lease_seconds: float,
    exclusive: bool = True,
    title: str | None = None,
) -> TurnStart | None:
    """Find or create the thread for this conversation, take its lease and store the new messages.

    Returns ``None`` when another turn holds the thread (the caller waits and calls again).
    With ``exclusive=False`` (a session derived from the content, not named by the client) a
    busy thread is not waited for: the request gets a thread of its own.
    A client resending its history continues the thread whose stored history is a prefix of
    it; a history that diverges from every stored thread (an edited message) forks a new
    thread. With an explicit ``thread_id``, a request carrying only new messages (no assistant
    turns) continues the stored conversation statefully.

    ``title`` names a new thread (default: its first user text).

    Raises :class:`NotFound` for an explicit thread id this key does not own.
    """
    chain = digest_chain(incoming)
    now = timezone.now()
    token = uuid.uuid4().hex
    client = selectors.client_label(user=user, api_key=api_key)
    lease = {"lock_token": token, "lock_expires_at": now + timedelta(seconds=lease_seconds)}
    with transaction.atomic():
        thread: Thread | None = None
        forked = stateful = False
        matched = 0
        if thread_id:
            try:
                thread = Thread.objects.get(pk=uuid.UUID(str(thread_id)), api_key=api_key)
            except (ValueError, Thread.DoesNotExist):
                raise NotFound(f"No thread {thread_id!r} for this API key.",
                               param="thread_id", code="thread_not_found") from None
            if thread.history_digest in chain:
                matched = chain.index(thread.history_digest)
            elif not any(m.role == "assistant" for m in incoming):
                stateful = True
            else:
                forked = True
        elif not exclusive and not any(m.role == "assistant" for m in incoming):
            # A first turn with no session id: nothing to continue (a retry after a failed
            # first turn starts afresh; the failed thread stays as the record of it).
            pass
        else:
            candidates = list(
                Thread.objects.filter(
                    api_key=api_key, session_key=session_key, agent=agent,
                    history_digest__in=chain,
                ).only("pk", "session_key", "history_digest", "message_count", "workspace_root",
                      "lock_expires_at")
                .order_by("-updated_at")[:20]
            )
            if candidates:
                by_len = {d: i for i, d in enumerate(chain)}
                thread = max(candidates, key=lambda t: by_len[t.history_digest])
                matched = by_len[thread.history_digest]
            elif any(m.role == "assistant" for m in incoming):
                # A history with earlier replies that no stored thread has: an edit, so the
                # new thread records the one it branched from. (A first turn is simply new.)
                thread = (
                    Thread.objects.filter(api_key=api_key, session_key=session_key, agent=agent)
                    .only("pk", "session_key").order_by("-updated_at").first()
                )
                forked = thread is not None

        def create(parent: Thread | None) -> TurnStart:
            # A new thread is born holding its lease and its messages: two writes in all.
            new = Thread(
                agent=agent,
                session_key=parent.session_key if (thread_id and parent) else session_key,
                api_key=api_key, user=(user or "")[:300], forked_from=parent,
                title=(title if title is not None
                       else next((m.text for m in incoming if m.role == "user"), ""))[:200],
                history_digest=chain[-1], workspace_root=workspace_root or "",
                message_count=len(incoming), **lease,
            )
            rows_insert([new])
            rows = rows_insert([_message_row(new.pk, i, m, dialect)
                                for i, m in enumerate(incoming)])
            _announce_turn_begin(agent=agent, client=client, thread=new, rows=rows,
                                 created=True)
            return TurnStart(new.pk, token, incoming, chain[-1], len(incoming), client,
                             message_ids=tuple(r.pk for r in rows), agent_id=agent.pk,
                             agent_slug=agent.slug, found="forked" if parent else "new")

        if thread is None or forked:
            return create(thread)
        got = Thread.objects.filter(
            _lease_free(now), pk=thread.pk, history_digest=thread.history_digest
        ).update(**lease)
        if got and thread.lock_expires_at is not None and thread.lock_expires_at < now:
            # The lease had expired without its turn finishing: the process running it died.
            thread.message_count = _thread_record_abandoned(thread=thread, agent=agent,
                                                            now=now)
        if not got:
            if exclusive or stateful:
                return None  # busy, or it moved on meanwhile: wait and resolve again
            # A derived session (no client session id) that is busy is a different person
            # who happened to start the same way: give them their own thread, don't queue.
            return create(None)
        if stateful:
            stored = [
                message_from_row(r) for r in thread.messages.filter(internal=False)
                .order_by("seq")
                if not (r.role == "assistant" and r.finish_reason in FAILED_FINISHES
                        and not r.content and not r.tool_calls)
            ]
            new_messages = incoming
            history = stored + incoming
            new_chain = digest_chain(incoming, start=thread.history_digest)
        else:
            # Client-held history: it is authoritative for what the backend sees.
            new_messages = incoming[matched:]
            history = incoming
            new_chain = chain[matched:]
        rows = rows_insert([
            _message_row(thread.pk, thread.message_count + i, m, dialect)
            for i, m in enumerate(new_messages)
        ])
        count = thread.message_count + len(new_messages)
        update: dict[str, Any] = {
            "message_count": count,
            "history_digest": new_chain[-1],
            "status": Thread.Status.ACTIVE,
            "updated_at": now,
        }
        if workspace_root and workspace_root != thread.workspace_root:
            update["workspace_root"] = workspace_root
        Thread.objects.filter(pk=thread.pk).update(**update)
        thread.message_count, thread.status, thread.updated_at = count, Thread.Status.ACTIVE, now
        _announce_turn_begin(agent=agent, client=client, thread=thread, rows=rows,
                             created=False)
    return TurnStart(thread.pk, token, history, new_chain[-1], count, client,
                     message_ids=tuple(r.pk for r in rows), agent_id=agent.pk,
                     agent_slug=agent.slug, found="stateful" if stateful else "continued")


def _announce_turn_begin(*, agent: Agent, client: str, thread: Thread, rows: list[Message],
                         created: bool) -> None:
    """The feed hears of a turn's thread, its new messages and its agent at work, once the
    turn's transaction commits."""
    if created:
        events = [realtime.event("thread_created", thread=selectors.thread_public(
            thread, agent=agent.slug, client=client))]
    else:
        events = [realtime.event(
            "thread_updated", thread_id=str(thread.pk), agent=agent.slug, status=thread.status,
            message_count=thread.message_count, last_activity=selectors.iso(thread.updated_at),
            error=None)]
    events += [realtime.event("message", message=selectors.message_public(
        row, agent=agent.slug, client=client)) for row in rows]
    events.append(realtime.event(
        "agent_state", agent=agent.slug, state="processing", current_thread=str(thread.pk),
        queue_depth=selectors.queue_depth(agent_id=agent.pk)))
    for e in events:
        realtime.send_event_on_commit(e)


def _lease_free(now: Any) -> Q:
    return Q(lock_expires_at__isnull=True) | Q(lock_expires_at__lt=now)


def _thread_record_abandoned(*, thread: Thread, agent: Agent, now: Any) -> int:
    """Record that the turn which held ``thread``'s (now expired) lease never finished: an
    empty assistant message with finish reason ``interrupted`` and the thread's
    ``last_error``; the feed hears of it. Call inside the transaction that takes the lease.
    Returns the thread's new message count."""
    seq = thread.message_count
    row = Message.objects.create(
        thread_id=thread.pk, seq=seq, role=Message.Role.ASSISTANT, content="",
        finish_reason="interrupted", error=INTERRUPTED_ERROR, dialect="",
    )
    Thread.objects.filter(pk=thread.pk).update(
        message_count=seq + 1, status=Thread.Status.ERROR, last_error=INTERRUPTED_ERROR,
        updated_at=now)
    for e in (
        realtime.event("message", message=selectors.message_public(
            row, agent=agent.slug, client="gaia")),
        realtime.event("thread_updated", thread_id=str(thread.pk), agent=agent.slug,
                       status=Thread.Status.ERROR, message_count=seq + 1,
                       last_activity=selectors.iso(now), error=INTERRUPTED_ERROR),
        realtime.event("error", thread_id=str(thread.pk), agent=agent.slug,
                       error=INTERRUPTED_ERROR),
    ):
        realtime.send_event_on_commit(e)
    return seq + 1


def thread_leases_renew(*, tokens: list[str], lease_seconds: float) -> int:
    """Extend the leases ``tokens`` (the turns running in one process) by ``lease_seconds``
    from now: one write for all of them. Returns how many were still held."""
    if not tokens:
        return 0
    until = timezone.now() + timedelta(seconds=lease_seconds)
    return Thread.objects.filter(lock_token__in=tokens).update(lock_expires_at=until)


def thread_leases_sweep() -> int:
    """Record every turn whose lease expired without it finishing (its process died) as
    interrupted and release the lease. Run once at server start, after a lease's length.
    Returns how many were found."""
    now = timezone.now()
    found = 0
    stale = Thread.objects.filter(lock_expires_at__lt=now).select_related("agent")
    for thread in stale.only("pk", "message_count", "lock_expires_at", "agent", "agent__slug"):
        with transaction.atomic():
            if Thread.objects.filter(pk=thread.pk, lock_expires_at__lt=now).update(
                    lock_token="", lock_expires_at=None):
                fresh = Thread.objects.only("message_count").get(pk=thread.pk)
                thread.message_count = fresh.message_count
                _thread_record_abandoned(thread=thread, agent=thread.agent, now=now)
                found += 1
    return found


@dataclass
class TurnResult:
    text: str = ""
    reasoning: str = ""
    tool_calls: list[llm.ToolCall] = field(default_factory=list)
    finish_reason: str = "stop"
    input_tokens: int = 0
    output_tokens: int = 0
    usage_estimated: bool = False
    latency_ms: int | None = None
    ttft_ms: int | None = None
    error: str = ""
    response_id: str = ""
    provider: str = ""  # the provider that answered (an agent may fall back to others)
    route: dict[str, Any] | None = None  # how a virtual model reached the agent (the thread's)
    sender: str = ""  # who answered, when not the thread's agent (a team member)
    passages: list[dict[str, Any]] | None = None  # knowledge-base passages the model got
    note: str = ""  # what Gaia did to serve the turn, stored on the reply

    @property
    def status(self) -> str:
        """The thread's status once this turn is recorded (it follows its last turn)."""
        if self.finish_reason == "killed":
            return Thread.Status.KILLED
        return Thread.Status.ERROR if self.error else Thread.Status.COMPLETED


def thread_turn_finish(
    *, start: TurnStart, result: TurnResult, dialect: str, busy_with: Any = None
) -> None:
    """Store the assistant's reply (partial and failed ones too), update the thread and
    release the lease. Two writes while the lease is held; a lease that expired meanwhile
    still gets its reply stored, after the thread's current last message.

    ``busy_with``: another thread the agent is at work on, if the caller knows one (a turn
    of its own process); else the database is asked (any process's)."""
    now = timezone.now()
    reply = llm.Message(
        role="assistant",
        parts=(llm.TextPart(result.text),) if result.text else (),
        tool_calls=tuple(result.tool_calls),
    )
    update: dict[str, Any] = {
        "input_tokens": Add(result.input_tokens),
        "output_tokens": Add(result.output_tokens),
        "updated_at": now,
        "status": result.status,
        "last_error": result.error,
        "lock_token": "",
        "lock_expires_at": None,
    }
    if result.usage_estimated:
        update["usage_estimated"] = True
    if result.route is not None:
        update["route"] = result.route
    replayable = not result.error or result.text or result.tool_calls
    with transaction.atomic():
        seq = start.next_seq
        update["message_count"] = seq + 1
        if replayable:
            update["history_digest"] = digest_chain([reply], start=start.base_digest)[-1]
        held = {"id": start.thread_id, "lock_token": start.lock_token}
        if not rows_update(Thread, where=held, values=update):
            # The lease expired and another turn moved the thread on: append after it.
            thread = Thread.objects.select_for_update().get(pk=start.thread_id)
            seq = thread.message_count
            update["message_count"] = seq + 1
            if replayable:
                update["history_digest"] = digest_chain([reply], start=thread.history_digest)[-1]
            for lease_field in ("lock_token", "lock_expires_at"):
                update.pop(lease_field)
            rows_update(Thread, where={"id": start.thread_id}, values=update)
        row = _message_row(start.thread_id, seq, reply, dialect)
        row.reasoning = result.reasoning
        row.finish_reason = result.finish_reason
        row.error = result.error
        row.input_tokens = result.input_tokens
        row.output_tokens = result.output_tokens
        row.usage_estimated = result.usage_estimated
        row.latency_ms = result.latency_ms
        row.ttft_ms = result.ttft_ms
        row.response_id = result.response_id
        row.provider = result.provider
        row.sender = result.sender
        row.passages = result.passages
        row.note = result.note[:500]
        rows_insert([row])
        _announce_turn_finish(start=start, result=result, row=row, now=now,
                              message_count=update["message_count"], busy_with=busy_with)


def _announce_turn_finish(*, start: TurnStart, result: TurnResult, row: Message,
                          now: Any, message_count: int, busy_with: Any = None) -> None:
    """The feed hears of the reply, the thread's new status, any error and whether the agent
    is still at work (another thread of its may hold a lease, in any process)."""
    slug = start.agent_slug
    busy = busy_with or selectors.agent_leased_thread(agent_id=start.agent_id, now=now,
                                                      other_than=start.thread_id)
    events = [
        realtime.event("message", message=selectors.message_public(
            row, agent=slug, client=start.client)),
        realtime.event("thread_updated", thread_id=str(start.thread_id), agent=slug,
                       status=result.status, message_count=message_count,
                       last_activity=selectors.iso(now), error=result.error or None),
    ]
    if result.error:
        events.append(realtime.event("error", thread_id=str(start.thread_id), agent=slug,
                                     error=result.error))
    events.append(realtime.event(
        "agent_state", agent=slug, state="processing" if busy else "idle",
        current_thread=str(busy) if busy else None,
        queue_depth=selectors.queue_depth(agent_id=start.agent_id)))
    for e in events:
        realtime.send_event_on_commit(e)


# ---------------------------------------------------------------------------------------------
# Teams: the inner messages of a team turn


@dataclass
class InnerMessage:
    """One step of a team's inner work: a task (``role="user"``, leader to member) or a
    member's reply (``role="assistant"``, member to leader)."""

    sender: str
    recipient: str
    role: str
    content: str
    reasoning: str = ""
    finish_reason: str = ""
    input_tokens: int | None = None
    output_tokens: int | None = None
    usage_estimated: bool = False
    latency_ms: int | None = None
    ttft_ms: int | None = None
    provider: str = ""
    passages: list[dict[str, Any]] | None = None


@transaction.atomic
def team_messages_store(*, start: TurnStart, messages: list[InnerMessage]) -> list[Message]:
    """Store a team's inner messages in its thread, after what the turn stored so far
    (``start.next_seq`` moves on, so the team's answer lands after them). The caller holds
    the thread's lease. They never join the history a client holds (``internal``); their
    tokens count in the thread's usage. The feed hears of each once stored."""
    rows = []
    for m in messages:
        rows.append(Message(
            thread_id=start.thread_id, seq=start.next_seq + len(rows), role=m.role,
            content=m.content, reasoning=m.reasoning, finish_reason=m.finish_reason,
            input_tokens=m.input_tokens, output_tokens=m.output_tokens,
            usage_estimated=m.usage_estimated, latency_ms=m.latency_ms, ttft_ms=m.ttft_ms,
            provider=m.provider, sender=m.sender, recipient=m.recipient, internal=True,
            passages=m.passages, dialect="team"))
    rows = Message.objects.bulk_create(rows)
    start.next_seq += len(rows)
    update: dict[str, Any] = {
        "message_count": start.next_seq,
        "input_tokens": F("input_tokens") + sum(m.input_tokens or 0 for m in messages),
        "output_tokens": F("output_tokens") + sum(m.output_tokens or 0 for m in messages),
        "updated_at": timezone.now(),
    }
    if any(m.usage_estimated for m in messages):
        update["usage_estimated"] = True
    Thread.objects.filter(pk=start.thread_id).update(**update)
    for row in rows:
        realtime.send_event_on_commit(realtime.event("message", message=selectors.message_public(
            row, agent=row.sender, client=row.recipient)))
    return rows
