"""Reads of what the console manages besides agents and threads: API keys (never a secret or
its hash), providers (never a credential: :func:`agents.selectors.provider_config`) and the
audit trail."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from django.db.models import Count, QuerySet
from django.utils import timezone

from agents.kernel.exceptions import NotFound
from agents.models import ApiKey, AuditEvent, Provider
from agents.selectors.config import provider_config
from agents.selectors.ordering import Ordering
from agents.selectors.threads import iso


def key_state(key: ApiKey, now: datetime | None = None) -> str:
    if key.revoked_at is not None:
        return "revoked"
    if key.expires_at is not None and key.expires_at <= (now or timezone.now()):
        return "expired"
    return "active"


KEY_ORDERING = Ordering(
    columns={"created_at": "created_at", "name": "name", "prefix": "prefix",
             "requests_per_minute": "requests_per_minute"}, default="-created_at")
PROVIDER_ORDERING = Ordering(
    columns={"name": "name", "kind": "kind", "updated_at": "updated_at"}, default="name")
AUDIT_ORDERING = Ordering(
    columns={"at": "created_at", "actor": "actor", "action": "action", "target": "target",
             "channel": "channel"}, default="-at")


def key_list(*, state: str | None = None, q: str | None = None, sort: str | None = None
             ) -> QuerySet[ApiKey]:
    """Keys, newest first (or by ``sort``, a column of :data:`KEY_ORDERING`); ``state``
    active, expired or revoked; ``q`` a name or prefix part."""
    keys = KEY_ORDERING.apply(ApiKey.objects.select_related("owner").prefetch_related(
        "agents"), sort)
    now = timezone.now()
    if state == "revoked":
        keys = keys.filter(revoked_at__isnull=False)
    elif state == "expired":
        keys = keys.filter(revoked_at__isnull=True, expires_at__lte=now)
    elif state == "active":
        keys = keys.filter(revoked_at__isnull=True).exclude(expires_at__lte=now)
    if q:
        keys = keys.filter(name__icontains=q) | keys.filter(prefix__icontains=q)
    return keys


def key_get(*, key_id: Any) -> ApiKey:
    try:
        return ApiKey.objects.select_related("owner").prefetch_related("agents").get(
            pk=int(key_id))
    except (ValueError, TypeError, ApiKey.DoesNotExist):
        raise NotFound(f"No API key {key_id!r}.", code="key_not_found") from None


def key_public(key: ApiKey) -> dict[str, Any]:
    return {
        "id": key.pk, "name": key.name, "prefix": key.prefix, "state": key_state(key),
        "owner": key.owner.get_username() if key.owner else None,
        "scopes": list(key.scopes or []),
        "agents": sorted(a.slug for a in key.agents.all()),
        "expires_at": iso(key.expires_at), "revoked_at": iso(key.revoked_at),
        "last_used_at": iso(key.last_used_at), "requests_per_minute": key.requests_per_minute,
        "tokens_per_minute": key.tokens_per_minute, "budget_exempt": key.budget_exempt,
        "users_across_keys": key.users_across_keys, "created_at": iso(key.created_at),
    }


def provider_list(*, sort: str | None = None) -> QuerySet[Provider]:
    """Providers by name (or by ``sort``, a column of :data:`PROVIDER_ORDERING`)."""
    return PROVIDER_ORDERING.apply(
        Provider.objects.annotate(agent_count=Count("agents", distinct=True)), sort)


def provider_get(*, name: str) -> Provider:
    try:
        return provider_list().get(name=name)
    except Provider.DoesNotExist:
        raise NotFound(f"No provider {name!r}.", code="provider_not_found") from None


def provider_public(provider: Provider) -> dict[str, Any]:
    """:func:`provider_config` (no credential) with what the console lists."""
    return {**provider_config(provider), "id": provider.pk,
            "agent_count": getattr(provider, "agent_count", None),
            "updated_at": iso(provider.updated_at)}


def audit_list(*, action: str | None = None, actor: str | None = None,
               target: str | None = None, since: Any = None, until: Any = None,
               sort: str | None = None) -> QuerySet[AuditEvent]:
    """The trail, newest first (or by ``sort``, a column of :data:`AUDIT_ORDERING`);
    ``actor`` and ``target`` match a part (``user:ann``, ``agent:support``)."""
    rows = AUDIT_ORDERING.apply(AuditEvent.objects.all(), sort)
    if action:
        rows = rows.filter(action=action)
    if actor:
        rows = rows.filter(actor__icontains=actor)
    if target:
        rows = rows.filter(target__icontains=target)
    if since is not None:
        rows = rows.filter(created_at__gte=since)
    if until is not None:
        rows = rows.filter(created_at__lte=until)
    return rows


def audit_public(row: AuditEvent) -> dict[str, Any]:
    return {"id": row.pk, "at": iso(row.created_at), "actor": row.actor,
            "channel": row.channel, "ip": row.ip, "action": row.action,
            "target": row.target, "detail": row.detail}
