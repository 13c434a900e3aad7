"""Reads of webhooks: endpoints and their delivery log as the API and the console show them
(never an endpoint's secret), and the enabled endpoints an event goes to, read once per
configuration stamp (an endpoint's save renews it)."""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass
from typing import Any

from django.conf import settings
from django.db.models import OuterRef, QuerySet, Subquery

from agents.kernel.exceptions import NotFound
from agents.models import WebhookDelivery, WebhookEndpoint
from agents.selectors.access import access_cache
from agents.selectors.threads import iso
from agents.selectors.urls import Url, UrlRefused, url_listed, url_parsed


@dataclass(frozen=True)
class EndpointRule:
    """An enabled endpoint as the event fan-out needs it."""

    id: int
    events: frozenset[str]


def webhook_endpoints_for(event_type: str) -> list[int]:
    """The ids of the enabled endpoints subscribed to ``event_type``: one primary-key read of
    the configuration stamp, and a read of the endpoints only when the stamp changed (events
    are rare; an ordinary chat turn sends none, so it never comes here)."""
    cache = access_cache()
    if cache.webhooks is None:
        cache.webhooks = [EndpointRule(pk, frozenset(events or ()))
                          for pk, events in WebhookEndpoint.objects.filter(
                              enabled=True).order_by("pk").values_list("pk", "events")]
    return [rule.id for rule in cache.webhooks if event_type in rule.events]


def _id(value: Any) -> int | None:
    text = str(value)
    return int(text) if text.isdecimal() and len(text) < 19 else None


def webhook_endpoint_get(*, endpoint_id: Any) -> WebhookEndpoint:
    """:class:`NotFound` (``webhook_not_found``) for an unknown id, or one that is no id."""
    pk = _id(endpoint_id)
    found = WebhookEndpoint.objects.filter(pk=pk).first() if pk is not None else None
    if found is None:
        raise NotFound(f"No webhook endpoint {str(endpoint_id)[:40]!r}.",
                       code="webhook_not_found")
    return found


def webhook_endpoint_list() -> QuerySet[WebhookEndpoint]:
    return WebhookEndpoint.objects.order_by("pk")


def webhook_endpoint_list_with_last() -> QuerySet[WebhookEndpoint]:
    """The endpoints, each with its latest delivery's ``last_state``, ``last_at`` (when it
    was made) and ``last_status_code`` (one indexed read per endpoint: the console's list)."""
    latest = WebhookDelivery.objects.filter(endpoint=OuterRef("pk")).order_by("-pk")
    return webhook_endpoint_list().annotate(
        last_state=Subquery(latest.values("state")[:1]),
        last_at=Subquery(latest.values("created_at")[:1]),
        last_status_code=Subquery(latest.values("status_code")[:1]))


def webhook_endpoint_public(endpoint: WebhookEndpoint) -> dict[str, Any]:
    """An endpoint as staff see it: never its secret."""
    return {"id": endpoint.pk, "url": endpoint.url, "description": endpoint.description,
            "events": list(endpoint.events or []), "enabled": endpoint.enabled,
            "created_at": iso(endpoint.created_at), "updated_at": iso(endpoint.updated_at)}


def webhook_delivery_get(*, endpoint: WebhookEndpoint, delivery_id: Any) -> WebhookDelivery:
    pk = _id(delivery_id)
    found = (WebhookDelivery.objects.filter(pk=pk, endpoint=endpoint).first()
             if pk is not None else None)
    if found is None:
        raise NotFound(f"No delivery {str(delivery_id)[:40]!r} of webhook endpoint "
                       f"{endpoint.pk}.", code="webhook_delivery_not_found")
    return found


def webhook_delivery_list(*, endpoint: WebhookEndpoint, state: str | None = None,
                          event_type: str | None = None) -> QuerySet[WebhookDelivery]:
    """The endpoint's deliveries, newest first, each with its attempts."""
    rows = WebhookDelivery.objects.filter(endpoint=endpoint)
    if state:
        rows = rows.filter(state=state)
    if event_type:
        rows = rows.filter(type=event_type)
    return rows.prefetch_related("attempt_log").order_by("-pk")


def webhook_delivery_public(delivery: WebhookDelivery) -> dict[str, Any]:
    return {
        "id": delivery.pk, "endpoint": delivery.endpoint_id, "event_id": delivery.event_id,
        "type": delivery.type, "payload": delivery.payload, "state": delivery.state,
        "attempts": delivery.attempts, "status_code": delivery.status_code,
        "latency_ms": delivery.latency_ms, "response": delivery.response,
        "error": delivery.error or None,
        "next_attempt_at": iso(delivery.next_attempt_at)
        if delivery.state == WebhookDelivery.State.PENDING else None,
        "created_at": iso(delivery.created_at), "updated_at": iso(delivery.updated_at),
        "attempt_log": [{"number": a.number, "manual": a.manual, "started_at": iso(a.started_at),
                         "status_code": a.status_code, "latency_ms": a.latency_ms,
                         "response": a.response, "error": a.error or None}
                        for a in delivery.attempt_log.all()],
    }


# ---------------------------------------------------------------------------------------------
# Which URLs an endpoint may have (GAIA_WEBHOOK_ALLOWED_URLS)

ALLOWED_SETTING = "GAIA_WEBHOOK_ALLOWED_URLS"


def address_private(address: str) -> bool:
    """Whether ``address`` (an IP address, an IPv6 one with or without brackets) is not a
    public one: private, loopback, link-local, shared, reserved or unspecified."""
    try:
        ip = ipaddress.ip_address(address.strip("[]").split("%", 1)[0])
    except ValueError:
        return False
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    return not ip.is_global or ip.is_multicast


def webhook_url_refusal(url: str | Url, *, addresses: list[str] | None = None) -> str | None:
    """Why ``url`` may not be a webhook endpoint's, naming the rule, or ``None`` if it may:
    listed in ``GAIA_WEBHOOK_ALLOWED_URLS``; or, the list being empty, a public address (a
    host that is an IP address, ``localhost``, or one of ``addresses`` it resolved to, that is
    private, loopback or link-local is refused unless listed)."""
    try:
        parsed = url if isinstance(url, Url) else url_parsed(url)
    except UrlRefused as exc:
        return f"url is not a URL Gaia calls: {exc}."
    rules = list(getattr(settings, ALLOWED_SETTING, []) or [])
    if url_listed(parsed, rules):
        return None
    if rules:
        return (f"url {parsed.text} is not allowed: {ALLOWED_SETTING} does not list it "
                "(compared parsed: scheme, host, port and path exactly, or a path prefix "
                "ending in '*').")
    host = parsed.host
    if host == "localhost" or host.endswith(".localhost") or address_private(host):
        return (f"url {parsed.text} is a private, loopback or link-local address: refused "
                f"unless {ALLOWED_SETTING} lists it.")
    for address in addresses or ():
        if address_private(address):
            return (f"url {parsed.text}'s host resolves to {address}, a private, loopback or "
                    f"link-local address: refused unless {ALLOWED_SETTING} lists it.")
    return None
