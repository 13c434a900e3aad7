"""The console's webhooks: endpoints (``/webhooks/``) and each one's delivery log
(``/webhooks/<id>/``). Read here; every write (make, change, enable, delete, redeliver) is a
call of ``/api/v1/webhooks`` from the page (``static/gaia/console.js``, ``webhooks.js``), so the
API's rules and audit hold and the page checks nothing itself.

An endpoint's secret is never read here: the page shows it once from the API's answer that
made the endpoint, and a reload shows it no more."""

from __future__ import annotations

from typing import Any

from django.http import HttpRequest, HttpResponse
from django.shortcuts import render

from agents import selectors
from agents.http.pages import staff_required
from agents.models import WEBHOOK_EVENT_TYPES, WebhookDelivery, WebhookEndpoint
from agents.pages.views import FRAGMENTS, _or_404, _page_of

DELIVERIES_PER_PAGE = 25


def _endpoint_row(endpoint: WebhookEndpoint) -> dict[str, Any]:
    """An endpoint as the list shows it: what the API shows, and its latest delivery (from
    :func:`agents.selectors.webhook_endpoint_list_with_last`'s annotations)."""
    return {**selectors.webhook_endpoint_public(endpoint),
            "last_state": getattr(endpoint, "last_state", None),
            "last_at": selectors.iso(getattr(endpoint, "last_at", None)),
            "last_status_code": getattr(endpoint, "last_status_code", None)}


def _webhook_list_context(request: HttpRequest) -> dict[str, Any]:
    page, query = _page_of(request, selectors.webhook_endpoint_list_with_last())
    return {"page": "webhooks", "page_obj": page, "query": query,
            "endpoints": [_endpoint_row(e) for e in page],
            "event_types": WEBHOOK_EVENT_TYPES}


@staff_required
def webhook_list(request: HttpRequest) -> HttpResponse:
    return render(request, "ui/webhooks.html", _webhook_list_context(request))


def _delivery_context(request: HttpRequest, endpoint: WebhookEndpoint) -> dict[str, Any]:
    """A page of the endpoint's delivery log (``?page=``, ``?state=``), newest first."""
    state = request.GET.get("state") or None
    if state not in WebhookDelivery.State.values:
        state = None
    page, query = _page_of(request, selectors.webhook_delivery_list(endpoint=endpoint,
                                                                    state=state),
                           per_page=DELIVERIES_PER_PAGE)
    query = "&".join(p for p in query.split("&") if p and not p.startswith("endpoint="))
    return {"endpoint": selectors.webhook_endpoint_public(endpoint), "page_obj": page,
            "query": query, "state": state, "states": WebhookDelivery.State.values,
            "deliveries": [selectors.webhook_delivery_public(d) for d in page]}


@staff_required
def webhook_detail(request: HttpRequest, endpoint_id: str) -> HttpResponse:
    endpoint = _or_404(selectors.webhook_endpoint_get, endpoint_id=endpoint_id)
    return render(request, "ui/webhook.html", {
        "page": "webhook", "event_types": WEBHOOK_EVENT_TYPES,
        **_delivery_context(request, endpoint)})


def _delivery_rows(request: HttpRequest) -> dict[str, Any]:
    """The delivery rows of ``?endpoint=`` for the rest of the query (page, state)."""
    endpoint = _or_404(selectors.webhook_endpoint_get, endpoint_id=request.GET.get("endpoint"))
    return _delivery_context(request, endpoint)


# The pages' partials, for webhooks.js to swap in (agents.pages.views.fragment); registered
# when the console's URLs import this module.
FRAGMENTS.update({
    "webhook-table": ("ui/_webhook_table.html", _webhook_list_context),
    "delivery-rows": ("ui/_delivery_rows.html", _delivery_rows),
})
