"""The console's webhook pages without a browser: staff only, useful without JavaScript (the
endpoints with their last delivery, an endpoint's delivery log paged and filtered), never an
endpoint's secret, their partials the very markup the page holds; and the admin's read-mostly
webhook pages (no secret, deliveries read-only, changes through the audited services)."""

from __future__ import annotations

import pytest
from django.contrib.auth import get_user_model
from django.test import Client
from django.urls import reverse
from django.utils import timezone

from agents import services
from agents.models import AuditEvent, WebhookAttempt, WebhookDelivery, WebhookEndpoint
from tests.pages.test_fragments import fragment_in_page
from tests.pages.test_views import HTML

pytestmark = pytest.mark.django_db


@pytest.fixture
def staff_client() -> Client:
    client = Client(**HTML)
    client.force_login(get_user_model().objects.create_user("op", is_staff=True))
    return client


def _endpoint(url: str = "https://hooks.example.com/gaia", **fields: object) -> WebhookEndpoint:
    return services.webhook_endpoint_save(endpoint=None, fields={"url": url, **fields},
                                          actor=None)


def _delivery(endpoint: WebhookEndpoint, n: int, **fields: object) -> WebhookDelivery:
    values = {"event_id": f"evt_{n:032x}", "type": "run.finished",
              "payload": {"id": f"evt_{n:032x}", "type": "run.finished", "data": {}},
              "state": "succeeded", "attempts": 1, "status_code": 200, "latency_ms": 12,
              "response": f"answer {n}", **fields}
    return WebhookDelivery.objects.create(endpoint=endpoint, **values)


@pytest.mark.parametrize("path", ["/webhooks/", "/webhooks/1/"])
def test_the_webhook_pages_are_for_staff_only(path: str) -> None:
    _endpoint()
    anonymous = Client(**HTML).get(path)
    assert anonymous.status_code == 302
    assert anonymous["Location"].startswith("/login/?next=")
    plain = Client(**HTML)
    plain.force_login(get_user_model().objects.create_user("plain", password="pw-plain-123"))
    assert plain.get(path)["Location"].startswith("/login/")
    assert plain.get("/fragments/webhook-table/")["Location"].startswith("/login/")


def test_the_list_shows_each_endpoint_its_last_delivery_and_never_a_secret(
        staff_client: Client) -> None:
    quiet = _endpoint("https://quiet.example.com/x", description="<script>alert(1)</script>",
                      events=["approval.requested"])
    busy = _endpoint(events=["run.finished", "budget.exceeded"], enabled=False)
    _delivery(busy, 1, state="succeeded", status_code=204)
    _delivery(busy, 2, state="failed", status_code=500)
    html = staff_client.get("/webhooks/").content.decode()
    assert 'href="/webhooks/"' in html
    assert "aria-current" in html
    for endpoint in (quiet, busy):
        assert endpoint.secret not in html
        assert endpoint.url in html
    row = html.split(f'data-webhook="{busy.pk}"')[1].split("</tr>")[0]
    assert "run.finished, budget.exceeded" in row
    assert "disabled" in row
    assert ">Enable<" in row
    assert 'delivery-failed">failed</span> 500' in row  # the latest of its two
    assert "<time datetime=" in row  # humanised by the page's script, as elsewhere
    quiet_row = html.split(f'data-webhook="{quiet.pk}"')[1].split("</tr>")[0]
    assert "none yet" in quiet_row
    assert ">Disable<" in quiet_row
    assert "<script>alert(1)" not in html
    assert "&lt;script&gt;alert(1)" in html
    # the form's events are the API's event types, as checkboxes; every write is the API's
    assert html.count('name="events" value="') == 10
    assert 'action="/api/v1/webhooks"' in html
    assert f'method="delete" action="/api/v1/webhooks/{busy.pk}"' in html
    assert "data-confirm=" in html
    fragment_in_page(staff_client, "/webhooks/", "/fragments/webhook-table/")


def test_an_endpoints_page_shows_its_delivery_log_paged_and_filtered(
        staff_client: Client) -> None:
    endpoint = _endpoint(events=["run.finished", "approval.decided"])
    other = _endpoint("https://other.example.com/x")
    _delivery(other, 99, response="not this endpoint's")
    for n in range(30):
        _delivery(endpoint, n, state="failed" if n == 3 else "succeeded")
    failed = WebhookDelivery.objects.get(endpoint=endpoint, event_id=f"evt_{3:032x}")
    WebhookAttempt.objects.create(delivery=failed, number=1, started_at=timezone.now(),
                                  status_code=None, latency_ms=2001,
                                  error="timed out <after> 2 s")
    first = staff_client.get(f"/webhooks/{endpoint.pk}/")
    assert first.status_code == 200
    html = first.content.decode()
    assert endpoint.secret not in html
    assert html.count('data-delivery="') == 25  # a page
    assert "page 1 of 2 (30 deliveries)" in html
    assert f"evt_{29:032x}" in html  # newest first
    assert "not this endpoint" not in html
    assert f'action="/api/v1/webhooks/{endpoint.pk}/deliveries/' in html
    assert "Redeliver" in html
    # its events ticked in the form that changes them
    assert 'value="run.finished" data-list checked' in html
    assert 'value="response.failed" data-list >' in html
    second = staff_client.get(f"/webhooks/{endpoint.pk}/?page=2").content.decode()
    assert second.count('data-delivery="') == 5
    row = second.split(f'data-delivery="{failed.pk}"')[1].split("</tr>")[0]
    assert 'data-state="failed"' in second
    assert "12 ms" in row
    assert "timed out &lt;after&gt; 2 s" in row  # the attempt, escaped
    only = staff_client.get(f"/webhooks/{endpoint.pk}/?state=failed").content.decode()
    assert only.count('data-delivery="') == 1
    fragment_in_page(staff_client, f"/webhooks/{endpoint.pk}/?page=2",
                     f"/fragments/delivery-rows/?endpoint={endpoint.pk}&page=2")
    assert staff_client.get("/webhooks/999999/").status_code == 404
    assert staff_client.get("/webhooks/nope/").status_code == 404
    assert staff_client.get("/fragments/delivery-rows/?endpoint=nope").status_code == 404


def test_the_admin_shows_webhooks_read_mostly_and_never_the_secret(admin_client: Client
                                                                  ) -> None:
    endpoint = _endpoint(description="ops")
    delivery = _delivery(endpoint, 1)
    WebhookAttempt.objects.create(delivery=delivery, number=1, started_at=timezone.now(),
                                  status_code=200, latency_ms=12, response="answer 1")
    listed = admin_client.get(reverse("admin:agents_webhookendpoint_changelist"))
    change = admin_client.get(reverse("admin:agents_webhookendpoint_change",
                                      args=[endpoint.pk]))
    for page in (listed, change):
        assert page.status_code == 200
        assert endpoint.secret not in page.content.decode()
    assert admin_client.get(reverse("admin:agents_webhookendpoint_add")).status_code == 403
    # a change goes through the service: audited
    answer = admin_client.post(reverse("admin:agents_webhookendpoint_change",
                                       args=[endpoint.pk]),
                               {"description": "paused", "enabled": ""})
    assert answer.status_code == 302, answer.content[:2000]
    endpoint.refresh_from_db()
    assert (endpoint.description, endpoint.enabled) == ("paused", False)
    audited = AuditEvent.objects.filter(target=f"webhook:{endpoint.pk}").latest("pk")
    assert audited.action == "webhook_update"
    # deliveries and their attempts: read, never written here
    shown = admin_client.get(reverse("admin:agents_webhookdelivery_change", args=[delivery.pk]))
    assert shown.status_code == 200
    assert "answer 1" in shown.content.decode()
    assert admin_client.post(reverse("admin:agents_webhookdelivery_change",
                                     args=[delivery.pk]), {"state": "failed"}).status_code == 403
    assert admin_client.get(reverse("admin:agents_webhookdelivery_add")).status_code == 403
    assert WebhookDelivery.objects.get(pk=delivery.pk).state == "succeeded"
    admin_client.post(reverse("admin:agents_webhookendpoint_delete", args=[endpoint.pk]),
                      {"post": "yes"})
    assert not WebhookEndpoint.objects.filter(pk=endpoint.pk).exists()
    assert AuditEvent.objects.filter(target=f"webhook:{endpoint.pk}",
                                     action="webhook_delete").exists()
