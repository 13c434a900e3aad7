"""Writes of API keys: create (the secret shown once), revoke, authenticate, throttle, and the
one authorization every request goes through (:func:`request_authorize`)."""

from __future__ import annotations

import hashlib
import hmac
import logging
import math
import secrets
import time
from datetime import timedelta
from typing import Any

from django.conf import settings
from django.core.cache import caches
from django.core.cache.backends.locmem import LocMemCache
from django.db import transaction
from django.utils import timezone

from agents import selectors
from agents.kernel.exceptions import (
    AgentNotFound,
    AgentPaused,
    AuthenticationFailed,
    Conflict,
    PermissionDenied,
    RateLimited,
)
from agents.models import Agent, ApiKey
from agents.services.audit import Actor, audit_record
from agents.services.config import config_changed
from agents.services.control import AGENT_PAUSED_RETRY_AFTER

log = logging.getLogger("gaia.services")

KEY_PREFIX = "gaia_"


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
    users_across_keys: bool = False,
    hosted_tools: str = "drop",
    actor: Actor | None = None,
    tokens_per_minute: int = 0,
    budget_exempt: bool = False,
) -> tuple[ApiKey, str]:
    """Create a key and return it with its secret, which is not stored and never shown again.
    ``users_across_keys``: trusted to speak for users across keys (see the field). The
    ``admin`` scope and ``budget_exempt`` only from staff (:data:`STAFF_ONLY`)."""
    _staff_only_check(actor, scopes=scopes, budget_exempt=budget_exempt)
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
        tokens_per_minute=tokens_per_minute,
        budget_exempt=budget_exempt,
        users_across_keys=users_across_keys,
        hosted_tools=hosted_tools,
    )
    key.full_clean()
    key.save()
    if agents:
        key.agents.set(agents)
    audit_record(actor=actor, action="key_create", target=f"key:{prefix}",
                 detail={"name": name, "scopes": key.scopes,
                         "users_across_keys": key.users_across_keys,
                         **({"budget_exempt": True} if budget_exempt else {})})
    return key, secret


KEY_EDITABLE = ("name", "scopes", "expires_at", "requests_per_minute", "tokens_per_minute",
                "users_across_keys", "hosted_tools", "budget_exempt")


@transaction.atomic
def api_key_update(*, key: ApiKey, fields: dict[str, Any], agents: list[Agent] | None = None,
                   actor: Actor | None = None) -> ApiKey:
    """Change a key's name, scopes, expiry, rate, trust (``users_across_keys``) or agents
    (``agents=[]``: every agent). A revoked key stays revoked: 409."""
    key = ApiKey.objects.select_for_update().get(pk=key.pk)
    if key.revoked:
        raise Conflict("This key is revoked; make a new one.", code="key_revoked")
    changed = sorted(k for k in fields if k in KEY_EDITABLE and getattr(key, k) != fields[k])
    if "budget_exempt" in changed or ("scopes" in changed and ApiKey.Scope.ADMIN in (
            set(fields["scopes"]) - set(key.scopes or []))):
        _staff_only_check(actor, scopes=fields.get("scopes"),
                          budget_exempt=bool(fields.get("budget_exempt")) or
                          "budget_exempt" in changed)
    for name in changed:
        setattr(key, name, fields[name])
    key.full_clean()
    key.save()
    if agents is not None and {a.pk for a in agents} != set(
            key.agents.values_list("pk", flat=True)):
        key.agents.set(agents)
        changed.append("agents")
    config_changed()
    audit_record(actor=actor, action="key_update", target=f"key:{key.prefix}",
                 detail={"fields": changed})
    return key


@transaction.atomic
def api_key_revoke(*, key: ApiKey, actor: Actor | None = None) -> None:
    done = ApiKey.objects.filter(pk=key.pk, revoked_at__isnull=True).update(
        revoked_at=timezone.now())
    config_changed()
    if done:
        audit_record(actor=actor, action="key_revoke", target=f"key:{key.prefix}",
                     detail={"name": key.name})




# What an admin key may do besides: what a staff session may (watch and steer, queue runs).
ADMIN_IMPLIES = (ApiKey.Scope.OPERATOR, ApiKey.Scope.BENCHMARKS)
# What only staff (a session, the admin, the CLI) may give a key; never another key, which
# could otherwise make itself a successor with more than it was given.
STAFF_ONLY = "An admin key or a budget exemption is given only by staff or the CLI."


def _staff_only_check(actor: Actor | None, *, scopes: list[str] | None,
                      budget_exempt: bool) -> None:
    if not (budget_exempt or ApiKey.Scope.ADMIN in (scopes or [])):
        return
    if actor is None or actor.channel in ("system", "cli"):
        return  # the CLI (a shell on the server), Gaia itself
    user = actor.user
    if actor.api_key is not None or user is None or not getattr(user, "is_staff", False):
        raise PermissionDenied(STAFF_ONLY, code="staff_required")


class NeedsDatabase(Exception):
    """A cache-only authorization (:func:`request_authorize` with ``cached_only``) needs the
    database: a key or agent not in memory, a ``last_used_at`` to write, or a shared
    rate-limit counter to bump. Nothing was counted or written."""


def _api_key_usable(key: ApiKey, scope: str, now: Any) -> None:
    """The rules a known key passes on every request, on every channel: not revoked, not
    expired (401), and holding ``scope`` (403)."""
    if key.revoked_at is not None:
        raise AuthenticationFailed("This API key has been revoked.")
    if key.expires_at is not None and key.expires_at <= now:
        raise AuthenticationFailed("This API key has expired.")
    held = key.scopes or []
    if scope not in held and not (ApiKey.Scope.ADMIN in held and scope in ADMIN_IMPLIES):
        # str(): a Scope member's repr is "ApiKey.Scope.CHAT", not what a client sends
        raise PermissionDenied(
            f"This API key does not have the '{str(scope)}' scope.", code="insufficient_scope"
        )


def api_key_recheck(*, key: ApiKey, scope: str) -> ApiKey:
    """``key`` as stored now (with ``allowed_agent_ids``), if it still passes the rules of
    :func:`api_key_authenticate`: what a long-lived connection (the feed) checks when the
    configuration changes or the key's expiry comes."""
    fresh = ApiKey.objects.filter(pk=key.pk).first()
    if fresh is None:
        raise AuthenticationFailed("This API key has been deleted.")
    fresh.allowed_agent_ids = frozenset(fresh.agents.values_list("pk", flat=True))
    _api_key_usable(fresh, scope, timezone.now())
    return fresh


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
    _api_key_usable(key, scope, now)
    if key.last_used_at is None or now - key.last_used_at > timedelta(seconds=60):
        if cached_only:
            raise NeedsDatabase("last_used_at")
        # Not a configuration change: no new stamp, the cached copy is updated in place.
        ApiKey.objects.filter(pk=key.pk).update(last_used_at=now)
        key.last_used_at = now
    return key


def _throttle_is_local() -> bool:
    """Whether the rate-limit counters live in this process (no Redis: one server process)."""
    return settings.CACHES["default"]["BACKEND"].endswith(".LocMemCache")


# INCR, and the window's expiry on its first count: one round trip, atomic.
_INCR_SCRIPT = ("local n = redis.call('INCR', KEYS[1]) "
                "if n == 1 then redis.call('EXPIRE', KEYS[1], ARGV[1]) end return n")
# INCRBY (a turn's tokens, ApiKey.tokens_per_minute), with the window's expiry: one round trip.
_INCRBY_SCRIPT = ("local n = redis.call('INCRBY', KEYS[1], ARGV[2]) "
                  "if n == tonumber(ARGV[2]) then redis.call('EXPIRE', KEYS[1], ARGV[1]) end "
                  "return n")


class _SharedCounter:
    """The rate-limit counters in the default cache, through one backend for the process.

    ``django.core.cache.cache`` is a new backend per async context, so under ASGI each request
    built a Redis client, a connection pool and a connection of its own (the connection's
    handshake was 6 of a JSON turn's 10 Redis round trips, the client's setup about 6,000 of
    its 12,300 Python calls). Here one client and its pool serve every request and thread of
    the process (redis-py's pool is thread-safe and starts anew in a forked child), and a count
    is one round trip (a script: INCR, and EXPIRE on the window's first count) where
    ``add`` then ``incr`` took two. The keys are the cache's own (``make_key``), so
    ``cache.delete`` of a counter still reaches it. Without Redis it is the process's
    LocMemCache, as before."""

    def __init__(self) -> None:
        self.backend = caches.create_connection("default")
        self.incr: Any = None
        self.incrby: Any = None
        if not isinstance(self.backend, LocMemCache):
            client = self.backend._cache.get_client(write=True)
            self.incr = client.register_script(_INCR_SCRIPT)
            self.incrby = client.register_script(_INCRBY_SCRIPT)

    def count(self, cache_key: str) -> int:
        if self.incr is None:
            return _count(self.backend, cache_key)
        return int(self.incr(keys=[self.backend.make_key(cache_key)], args=[70]))

    def add(self, cache_key: str, amount: int) -> int:
        if self.incrby is None:
            if self.backend.add(cache_key, amount, timeout=70):
                return amount
            return self.backend.incr(cache_key, amount)
        return int(self.incrby(keys=[self.backend.make_key(cache_key)], args=[70, amount]))

    def read(self, cache_key: str) -> int:
        if self.incrby is None:
            return int(self.backend.get(cache_key) or 0)
        value = self.backend._cache.get_client().get(self.backend.make_key(cache_key))
        return int(value or 0)


_shared: _SharedCounter | None = None


def _shared_counter() -> _SharedCounter:
    global _shared
    if _shared is None:
        _shared = _SharedCounter()
    return _shared


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


def counter_read(cache_key: str) -> int:
    """A shared counter's value (0: none); 0 while the shared cache is down (a looser
    limit, as for requests per minute, rather than refusing)."""
    try:
        return _shared_counter().read(cache_key)
    except Exception:
        log.warning("a shared counter could not be read", exc_info=True)
        return int(_local_counts.get(cache_key) or 0)


def counter_add(cache_key: str, amount: int) -> None:
    """Add ``amount`` to a shared counter of the current minute (kept 70 s)."""
    try:
        _shared_counter().add(cache_key, amount)
    except Exception:
        log.warning("a shared counter could not be written", exc_info=True)
        if not _local_counts.add(cache_key, amount, timeout=70):
            _local_counts.incr(cache_key, amount)


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
        count = _shared_counter().count(cache_key)
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
    version: str | None | object = ..., cached_only: bool = False, throttle: bool = True,
) -> tuple[ApiKey | None, Agent | None]:
    """Authenticate, throttle and resolve the agent in one database round of the caller.

    ``version`` is the configuration stamp if the caller has read it. With ``cached_only``
    (on the event loop, no database) it raises :class:`NeedsDatabase` before counting the
    request if anything is not in memory, and the caller runs it again on a database thread.

    Order of checks is the client-visible contract: 401, 429, then 404 (unknown model) and
    403 (model not allowed for this key). ``throttle=False``: the request was counted already
    (an MCP ``tools/call`` is authorized at its HTTP edge, then for the agent it names).
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
    if key is not None and throttle:
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
    if not selectors.api_key_may_use(api_key=key, agent=agent):
        raise PermissionDenied(
            f"This API key may not use the model '{agent_slug}'.", param="model"
        )
    if agent.paused:
        raise AgentPaused(
            f"The model '{agent_slug}' is paused by an operator; try again later.",
            retry_after=AGENT_PAUSED_RETRY_AFTER,
        )
    return key, agent


