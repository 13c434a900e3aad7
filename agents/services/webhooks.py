"""Webhooks by the Standard Webhooks specification (https://www.standardwebhooks.com/):
endpoints as staff manage them (each change audited), and the one door every event leaves
Gaia through, :func:`webhook_event_send`. How a delivery is sent and retried is
:mod:`agents.services.webhook_delivery`.

An event is ``{"id": "evt_...", "type", "created_at", "data": {...}}``; ``data`` holds ids and
states, never a secret or a prompt. Each enabled endpoint subscribed to its type gets a
:class:`WebhookDelivery`, sent by a Celery worker (or, without Redis, the embedded worker)."""

from __future__ import annotations

import base64
import logging
import secrets
import uuid
from collections.abc import Callable
from typing import Any

from django.db import transaction
from django.utils import timezone

from agents import selectors
from agents.kernel.exceptions import Conflict, InvalidRequest
from agents.models import WEBHOOK_EVENT_TYPES, WebhookDelivery, WebhookEndpoint
from agents.selectors.urls import url_parsed
from agents.services.audit import Actor, audit_record
from agents.services.webhook_delivery import webhook_delivery_schedule

log = logging.getLogger("gaia.webhooks")

WEBHOOK_FIELDS = ("url", "description", "events", "enabled")
SECRET_PREFIX = "whsec_"  # noqa: S105 - the format's prefix, no secret
EVENT_PREFIX = "evt_"


def webhook_secret_new() -> str:
    """``whsec_`` and 24 random bytes in base64, as Standard Webhooks libraries read it."""
    return SECRET_PREFIX + base64.b64encode(secrets.token_bytes(24)).decode()


def webhook_url_check(url: Any) -> str:
    """``url`` as Gaia will call it (parsed and normalised), or :class:`InvalidRequest`
    (``url_not_allowed``, param ``url``) naming the rule it breaks
    (:func:`agents.selectors.webhooks.webhook_url_refusal`)."""
    if not isinstance(url, str):
        raise InvalidRequest("url is a string.", param="url", code="invalid_url")
    why = selectors.webhook_url_refusal(url)
    if why is not None:
        raise InvalidRequest(why, param="url", code="url_not_allowed")
    return url_parsed(url).text


def webhook_events_check(events: Any) -> list[str]:
    """The event types, each known (:data:`WEBHOOK_EVENT_TYPES`), without repeats; else
    :class:`InvalidRequest` (``unknown_event_type``, param ``events``)."""
    if not isinstance(events, list | tuple) or not events:
        raise InvalidRequest("events is a list of one event type or more.", param="events",
                             code="invalid_events")
    for name in events:
        if name not in WEBHOOK_EVENT_TYPES:
            raise InvalidRequest(f"events: {str(name)[:100]!r} is not an event type (they are "
                                 f"{', '.join(WEBHOOK_EVENT_TYPES)}).", param="events",
                                 code="unknown_event_type")
    return list(dict.fromkeys(events))


def webhook_endpoint_save(*, endpoint: WebhookEndpoint | None, fields: dict[str, Any],
                          actor: Actor | None) -> WebhookEndpoint:
    """Create (``endpoint=None``: its secret made here, read it from the endpoint returned,
    once) or change an endpoint, audited. ``fields``: ``url``, ``description``, ``events``
    (default: every type), ``enabled``. :class:`InvalidRequest` naming the field."""
    creating = endpoint is None
    ep = endpoint or WebhookEndpoint(secret=webhook_secret_new(),
                                     events=list(WEBHOOK_EVENT_TYPES))
    before = {f: getattr(ep, f) for f in WEBHOOK_FIELDS}
    unknown = set(fields) - set(WEBHOOK_FIELDS)
    if unknown:
        raise InvalidRequest(f"Unknown field {sorted(unknown)[0]!r}.", param=sorted(unknown)[0])
    if creating and "url" not in fields:
        raise InvalidRequest("url is required.", param="url", code="invalid_url")
    if "url" in fields:
        ep.url = webhook_url_check(fields["url"])
    if "events" in fields:
        ep.events = webhook_events_check(fields["events"])
    if "description" in fields:
        ep.description = str(fields["description"] or "")[:500]
    if "enabled" in fields:
        ep.enabled = bool(fields["enabled"])
    with transaction.atomic():
        ep.save()
        changed = sorted(f for f in WEBHOOK_FIELDS if before[f] != getattr(ep, f))
        audit_record(actor=actor, action="webhook_create" if creating else "webhook_update",
                     target=f"webhook:{ep.pk}", detail={"url": ep.url, "changed": changed})
    return ep


def webhook_endpoint_delete(*, endpoint: WebhookEndpoint, actor: Actor | None) -> None:
    """Delete an endpoint and its delivery log (a delivery under way finds it gone)."""
    with transaction.atomic():
        pk, url = endpoint.pk, endpoint.url
        endpoint.delete()
        audit_record(actor=actor, action="webhook_delete", target=f"webhook:{pk}",
                     detail={"url": url})


def webhook_delivery_redeliver(*, delivery: WebhookDelivery,
                               actor: Actor | None) -> WebhookDelivery:
    """Send ``delivery`` again now, with the same event id (receivers deduplicate by it):
    one attempt for a delivery that succeeded or failed; for one waiting between attempts,
    its next attempt now. :class:`Conflict` while an attempt is under way, or when its
    endpoint is disabled."""
    if not delivery.endpoint.enabled:
        raise Conflict("The webhook endpoint is disabled: enable it first.",
                       code="webhook_disabled")
    State = WebhookDelivery.State
    update: dict[str, Any] = {"state": State.PENDING, "next_attempt_at": timezone.now()}
    if delivery.state != State.PENDING:
        update["retrying"] = False
    with transaction.atomic():
        if not WebhookDelivery.objects.filter(
                pk=delivery.pk, state__in=[State.PENDING, State.SUCCEEDED, State.FAILED]
        ).update(**update):
            raise Conflict("This delivery is being sent now.", code="webhook_delivery_sending")
        audit_record(actor=actor, action="webhook_redeliver",
                     target=f"webhook:{delivery.endpoint_id}",
                     detail={"delivery": delivery.pk, "event_id": delivery.event_id})
        pk = delivery.pk
        transaction.on_commit(lambda: webhook_delivery_schedule(delivery_id=pk, delay=0))
    delivery.refresh_from_db()
    return delivery


def webhook_event_send(*, type: str,  # noqa: A002 - the event's field
                       data: dict[str, Any] | Callable[[], dict[str, Any]]) -> None:
    """Send the event ``type`` to every enabled endpoint subscribed to it, once the current
    transaction commits (at once outside one). ``data`` may be a callable that builds it
    then. Cheap when no endpoint wants it: the endpoints are read once per configuration
    stamp. Never raises into the caller for a failed delivery (each is logged and retried)."""
    if type not in WEBHOOK_EVENT_TYPES:
        raise ValueError(f"not a webhook event type: {type!r}")
    try:
        if not selectors.webhook_endpoints_for(type):
            return
    except Exception:  # an event is never worth failing the work that caused it
        log.exception("webhooks: the endpoints for %s could not be read", type)
        return
    transaction.on_commit(lambda: _event_fan_out(type, data), robust=True)


def _event_fan_out(type: str,  # noqa: A002
                   data: dict[str, Any] | Callable[[], dict[str, Any]]) -> None:
    try:
        body = data() if callable(data) else data
        endpoints = selectors.webhook_endpoints_for(type)
        if not endpoints:
            return
        now = timezone.now()
        event_id = EVENT_PREFIX + uuid.uuid4().hex
        payload = {"id": event_id, "type": type, "created_at": selectors.iso(now),
                   "data": body}
        with transaction.atomic():
            rows = WebhookDelivery.objects.bulk_create([
                WebhookDelivery(endpoint_id=pk, event_id=event_id, type=type, payload=payload,
                                next_attempt_at=now)
                for pk in WebhookEndpoint.objects.filter(pk__in=endpoints, enabled=True
                                                         ).values_list("pk", flat=True)])
        ids = [r.pk for r in rows] if all(r.pk for r in rows) else list(
            WebhookDelivery.objects.filter(event_id=event_id).values_list("pk", flat=True))
    except Exception:
        log.exception("webhooks: the %s event could not be stored", type)
        return
    for pk in ids:
        webhook_delivery_schedule(delivery_id=pk, delay=0)


# ---------------------------------------------------------------------------------------------
# The events' data: ids and states, never a secret, a prompt or a tool's arguments


def webhook_approval_data(approval: Any) -> dict[str, Any]:
    """``approval.requested`` and ``approval.decided``."""
    return {"approval_id": str(approval.pk), "agent": approval.agent.slug,
            "thread_id": str(approval.thread_id), "response_id": approval.response_id or None,
            "call_id": approval.call_id or None, "tool": approval.tool,
            "server": approval.server or None, "status": approval.status,
            "decided_by": approval.decided_by or None,
            "expires_at": selectors.iso(approval.expires_at),
            "decided_at": selectors.iso(approval.decided_at)}


def webhook_budget_data(rule: Any, *, spent: int, period_start: str,
                        percent: int | None) -> dict[str, Any]:
    """``budget.threshold`` and ``budget.exceeded`` (``rule``: a
    :class:`agents.selectors.budgets.BudgetRule`); money in USD, as a string."""
    return {"budget_id": rule.id, "budget": rule.name, "scope": rule.scope,
            "target": rule.target, "agent": rule.agent_slug or None, "unit": rule.unit,
            "limit": rule.amount_public(rule.limit), "spent": rule.amount_public(spent),
            "percent": percent, "period": rule.period, "period_start": period_start}
