"""The audit trail: every operator action, stored with who, when, what and from where, in the
same transaction as the change it records (so a rolled-back action leaves no entry, and an
action that happened always has one). Callers name the actor with :func:`audit_actor` from
whatever carried the action (a REST or page request, a feed socket's scope)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from agents.models import ApiKey, AuditEvent


@dataclass(frozen=True, slots=True)
class Actor:
    """Who acts: a staff user or an API key, over which channel, from which address."""

    label: str  # user:<name> or key:<name> (<prefix>)
    channel: str  # rest, ws, page, admin
    user: Any = None
    api_key: ApiKey | None = None
    ip: str | None = None


# The system itself, where the trail must say what happened without anyone acting: an approval
# nobody decided in time, a call refused because a budget was spent.
SYSTEM = Actor(label="system", channel="system")


def actor_label(*, user: Any = None, api_key: ApiKey | None = None) -> str:
    """``user:<name>`` for a staff user, ``key:<name> (<prefix>)`` for an API key: how an
    operator is named in the trail and on the messages they inject."""
    if api_key is not None:
        return f"key:{api_key.name} ({api_key.prefix})"
    if user is not None and getattr(user, "is_authenticated", False):
        return f"user:{user.get_username()}"
    return "anonymous"


def audit_actor(*, user: Any = None, api_key: ApiKey | None = None, channel: str,
                ip: str | None = None) -> Actor:
    user = user if user is not None and getattr(user, "is_authenticated", False) else None
    return Actor(label=actor_label(user=user, api_key=api_key), channel=channel,
                 user=user, api_key=api_key, ip=ip or None)


def audit_actor_of_request(request: Any, *, channel: str = "rest") -> Actor:
    """The actor of a Django or DRF request: its API key if it authenticated with one, else
    its user. The address is the connection's (``REMOTE_ADDR``): a forwarded-for header is
    the client's word, not a fact."""
    auth = getattr(request, "auth", None)
    meta = getattr(getattr(request, "_request", request), "META", {})
    key = auth if isinstance(auth, ApiKey) else None
    if channel == "rest" and key is None and meta.get("HTTP_X_GAIA_CHANNEL") == "page":
        # The console's pages call the API with the staff session (their fetch says so):
        # their actions are the trail's ``page`` ones. A key's call is a script's, whatever
        # it says.
        channel = "page"
    return audit_actor(user=getattr(request, "user", None), api_key=key,
                       channel=channel, ip=meta.get("REMOTE_ADDR"))


def audit_record(*, actor: Actor | None, action: str, target: str,
                 detail: dict[str, Any] | None = None) -> AuditEvent | None:
    """Store one action (``AuditEvent.Action``) on ``target``; ``detail`` says what changed
    (never a secret: callers pass names, not values). ``actor=None``: nothing to account for
    (a worker's routine), nothing stored; :data:`SYSTEM` for what Gaia did of its own accord
    that the trail must show (an approval expired, a call refused by a budget)."""
    if actor is None:
        return None
    return AuditEvent.objects.create(
        actor=actor.label[:320], user=actor.user, api_key=actor.api_key, channel=actor.channel,
        ip=actor.ip, action=action, target=target[:300], detail=detail or {})
