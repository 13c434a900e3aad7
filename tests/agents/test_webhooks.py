"""Webhooks (issue 42): the staff API's rules and bad input (URLs by
GAIA_WEBHOOK_ALLOWED_URLS, event types, unknown ids, who may), the secret shown once, and each
event leaving through the one door with its data. Deliveries to a live receiver are
test_webhooks_live.py."""

from __future__ import annotations

import uuid
from datetime import timedelta
from typing import Any

import pytest
from django.utils import timezone
from rest_framework.test import APIClient
from standardwebhooks import Webhook

from agents import services
from agents.models import (
    WEBHOOK_EVENT_TYPES,
    AuditEvent,
    Thread,
    WebhookDelivery,
    WebhookEndpoint,
)

pytestmark = pytest.mark.django_db


@pytest.fixture
def staff(django_user_model: Any) -> APIClient:
    user = django_user_model.objects.create_user("ann", password="pw-12345678", is_staff=True)
    client = APIClient()
    client.force_login(user)
    return client


def test_the_default_schedule_makes_six_attempts_over_more_than_an_hour() -> None:
    delays = services.webhook_retry_delays()
    assert len(delays) + 1 >= 6
    assert sum(delays) >= 3600
    assert delays == sorted(delays)  # backing off


def test_the_webhooks_api_refuses_urls_by_the_allow_list_naming_the_rule(
        staff: APIClient, settings: Any) -> None:
    def post(url: str, **extra: Any) -> Any:
        return staff.post("/api/v1/webhooks", {"url": url, **extra}, format="json")

    settings.GAIA_WEBHOOK_ALLOWED_URLS = ["http://127.0.0.1:9/hooks/*"]
    for url in ("http://127.0.0.1:9/other", "http://127.0.0.1:10/hooks/a",
                "https://example.com/hook", "http://127.0.0.1:9/hooks/../admin"):
        r = post(url)
        assert r.status_code == 400, (url, r.content)
        body = r.json()
        assert (body["code"], body["param"]) == ("url_not_allowed", "url"), body
    assert "GAIA_WEBHOOK_ALLOWED_URLS does not list it" in post("https://example.com/x").json()[
        "detail"]
    assert post("http://127.0.0.1:9/hooks/a").status_code == 201  # listed: a loopback is fine
    settings.GAIA_WEBHOOK_ALLOWED_URLS = []
    for url in ("http://127.0.0.1:9/hooks/a", "http://10.1.2.3/x", "http://localhost:8000/",
                "http://[::1]:80/x", "http://169.254.169.254/latest", "http://192.168.0.1/"):
        r = post(url)
        assert r.status_code == 400, (url, r.content)
        assert "private, loopback or link-local address: refused unless " \
               "GAIA_WEBHOOK_ALLOWED_URLS lists it" in r.json()["detail"], r.json()
    for url in ("ftp://example.com/x", "http://user@example.com/x", "not a url", ""):
        r = post(url)
        assert r.status_code == 400, (url, r.content)
        assert r.json()["param"] == "url"
    made = post("https://hooks.example.com/gaia")  # a public name: resolved when sending
    assert made.status_code == 201, made.content
    assert made.json()["url"] == "https://hooks.example.com/gaia"


def test_the_webhooks_api_manages_endpoints_showing_the_secret_once(
        staff: APIClient, settings: Any, make_key: Any) -> None:
    settings.GAIA_WEBHOOK_ALLOWED_URLS = ["http://127.0.0.1:9/*"]
    bad = staff.post("/api/v1/webhooks", {"url": "http://127.0.0.1:9/a",
                                          "events": ["approval.decided", "nope"]},
                     format="json")
    assert bad.status_code == 400
    assert (bad.json()["code"], bad.json()["param"]) == ("unknown_event_type", "events")
    for body in ({"url": "http://127.0.0.1:9/a", "events": []},
                 {"url": "http://127.0.0.1:9/a", "surprise": 1},
                 {"url": "http://127.0.0.1:9/a", "enabled": "maybe"},
                 {"events": ["run.finished"]}):
        assert staff.post("/api/v1/webhooks", body, format="json").status_code == 400, body
    assert not WebhookEndpoint.objects.exists()

    made = staff.post("/api/v1/webhooks", {"url": "http://127.0.0.1:9/a", "description": "ops",
                                           "events": ["approval.decided", "run.finished"]},
                      format="json")
    assert made.status_code == 201, made.content
    shown = made.json()
    secret = shown["secret"]
    assert secret.startswith("whsec_")
    Webhook(secret)  # a secret the receivers' library reads
    assert shown["events"] == ["approval.decided", "run.finished"]
    assert shown["enabled"] is True
    one = staff.get(f"/api/v1/webhooks/{shown['id']}")
    assert one.status_code == 200
    assert "secret" not in one.json()
    assert secret not in one.content.decode()
    listed = staff.get("/api/v1/webhooks").json()
    assert [w["id"] for w in listed["results"]] == [shown["id"]]
    assert secret not in str(listed)
    every = staff.post("/api/v1/webhooks", {"url": "http://127.0.0.1:9/b"}, format="json")
    assert every.json()["events"] == list(WEBHOOK_EVENT_TYPES)  # default: every type
    assert every.json()["secret"] != secret

    r = staff.patch(f"/api/v1/webhooks/{shown['id']}", {"enabled": False,
                                                         "events": ["budget.exceeded"]},
                    format="json")
    assert r.status_code == 200, r.content
    assert (r.json()["enabled"], r.json()["events"]) == (False, ["budget.exceeded"])
    r = staff.patch(f"/api/v1/webhooks/{shown['id']}", {"url": "http://127.0.0.2/"},
                    format="json")
    assert (r.status_code, r.json()["code"]) == (400, "url_not_allowed")
    r = staff.patch(f"/api/v1/webhooks/{shown['id']}", {"events": ["response.done"]},
                    format="json")
    assert (r.status_code, r.json()["param"]) == (400, "events")

    for path in ("/api/v1/webhooks/999999", "/api/v1/webhooks/nope",
                 "/api/v1/webhooks/999999/deliveries",
                 f"/api/v1/webhooks/{shown['id']}/deliveries/999999",
                 f"/api/v1/webhooks/{shown['id']}/deliveries/x"):
        r = staff.get(path)
        assert r.status_code == 404, (path, r.content)
    assert staff.get("/api/v1/webhooks/999999").json()["code"] == "webhook_not_found"
    assert staff.delete("/api/v1/webhooks/999999").status_code == 404
    assert staff.patch("/api/v1/webhooks/999999", {}, format="json").status_code == 404
    assert staff.post(f"/api/v1/webhooks/{shown['id']}/deliveries/999999/redeliver"
                      ).status_code == 404
    assert staff.get(f"/api/v1/webhooks/{shown['id']}/deliveries?state=lost"
                     ).status_code == 400

    # who may: staff or an admin key; no credentials 401, a key without admin 403
    assert APIClient().get("/api/v1/webhooks").status_code == 401
    _, chat_key = make_key("chat", scopes=["chat", "operator"])
    _, admin_key = make_key("admin", scopes=["admin"])
    keyed = APIClient()
    keyed.credentials(HTTP_AUTHORIZATION=f"Bearer {chat_key}")
    assert keyed.get("/api/v1/webhooks").status_code == 403
    assert keyed.post("/api/v1/webhooks", {"url": "http://127.0.0.1:9/c"},
                      format="json").status_code == 403
    keyed.credentials(HTTP_AUTHORIZATION=f"Bearer {admin_key}")
    assert keyed.get("/api/v1/webhooks").status_code == 200

    assert staff.delete(f"/api/v1/webhooks/{shown['id']}").status_code == 204
    assert staff.get(f"/api/v1/webhooks/{shown['id']}").status_code == 404
    assert [e.action for e in AuditEvent.objects.order_by("pk")] == [
        "webhook_create", "webhook_create", "webhook_update", "webhook_delete"]
    assert secret not in str(list(AuditEvent.objects.values_list("detail", flat=True)))


def test_the_schema_lists_the_webhooks_api(staff: APIClient) -> None:
    paths = staff.get("/api/schema?format=json").json()["paths"]
    for path in ("/api/v1/webhooks", "/api/v1/webhooks/{endpoint_id}",
                 "/api/v1/webhooks/{endpoint_id}/deliveries",
                 "/api/v1/webhooks/{endpoint_id}/deliveries/{delivery_id}/redeliver"):
        assert path in paths, sorted(paths)


@pytest.fixture
def scheduled(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The deliveries the events made, not sent (sending is test_webhooks_live.py's)."""
    sent: list[int] = []
    monkeypatch.setattr("agents.services.webhooks.webhook_delivery_schedule",
                        lambda *, delivery_id, delay: sent.append(delivery_id))
    return sent


def _endpoint(events: list[str], *, enabled: bool = True) -> WebhookEndpoint:
    return WebhookEndpoint.objects.create(url="https://hooks.example.com/x", events=events,
                                          secret=services.webhook_secret_new(),
                                          enabled=enabled)


def test_an_event_nobody_subscribed_to_costs_one_stamp_read_and_sends_nothing(
        django_assert_num_queries: Any, django_capture_on_commit_callbacks: Any,
        scheduled: list[int]) -> None:
    _endpoint(["run.finished"])
    _endpoint(["approval.decided"], enabled=False)
    services.webhook_event_send(type="run.finished", data={})  # reads the endpoints once
    with django_assert_num_queries(1), django_capture_on_commit_callbacks() as callbacks:
        services.webhook_event_send(type="approval.decided", data={"x": 1})
    assert callbacks == []
    with pytest.raises(ValueError, match="not a webhook event type"):
        services.webhook_event_send(type="approval.maybe", data={})


def test_each_event_leaves_through_the_one_door_with_ids_and_no_secrets(
        make_agent: Any, django_capture_on_commit_callbacks: Any,
        scheduled: list[int]) -> None:
    from agents.selectors.budgets import budget_rules
    from agents.services.budgets import _signal_once
    from benchmarks.models import BenchmarkRun, BenchmarkSuite
    from benchmarks.services import benchmark_run_cancel

    every = _endpoint(list(WEBHOOK_EVENT_TYPES))
    _endpoint(["run.finished"])
    _endpoint(list(WEBHOOK_EVENT_TYPES), enabled=False)  # disabled: nothing for it
    agent = make_agent(slug="hooked")
    thread = Thread.objects.create(agent=agent, session_key="s")
    with django_capture_on_commit_callbacks(execute=True):
        approval = services.approval_request(
            approval_id=uuid.uuid4(), thread_id=thread.pk, agent=agent, response_id="resp_1",
            call_id="c1", tool="calculator", server="gaia",
            arguments='{"api_key": "sk-secret"}', timeout=600)
    with django_capture_on_commit_callbacks(execute=True):
        services.approval_decide(approval_id=approval.pk, decision="approve",
                                 decided_by="user:ann")
    budget = services.budget_save(budget=None, actor=None, fields={
        "name": "day", "scope": "agent", "agent": agent.slug, "unit": "tokens",
        "limit": 100, "period": "day", "soft_percent": 50})
    rule = next(r for r in budget_rules() if r.id == budget.pk)
    from agents.models import Budget
    from agents.selectors.budgets import period_start

    now = timezone.now()
    Budget.objects.filter(pk=budget.pk).update(spent=120, period_start=period_start("day", now))
    with django_capture_on_commit_callbacks(execute=True):
        _signal_once(rule, "budget_threshold", "threshold_period", now, percent=50)
        _signal_once(rule, "budget_exceeded", "exceeded_period", now, percent=100)
        _signal_once(rule, "budget_exceeded", "exceeded_period", now, percent=100)  # once
    suite = BenchmarkSuite.objects.create(name="s", questions=[])
    run = BenchmarkRun.objects.create(suite=suite, status="queued")
    with django_capture_on_commit_callbacks(execute=True):
        benchmark_run_cancel(run=run)

    mine = WebhookDelivery.objects.filter(endpoint=every).order_by("pk")
    assert [d.type for d in mine] == ["approval.requested", "approval.decided",
                                      "budget.threshold", "budget.exceeded", "run.finished"]
    assert sorted(scheduled) == sorted(WebhookDelivery.objects.values_list("pk", flat=True))
    assert WebhookDelivery.objects.filter(type="run.finished").count() == 2
    for d in mine:
        assert (d.state, d.attempts) == ("pending", 0)
        assert d.event_id.startswith("evt_")
        assert d.payload["id"] == d.event_id
        assert set(d.payload) == {"id", "type", "created_at", "data"}
        assert d.payload["type"] == d.type
        assert "sk-secret" not in str(d.payload)
    requested, decided, threshold, exceeded, finished = (d.payload["data"] for d in mine)
    assert requested["approval_id"] == str(approval.pk)
    assert (requested["agent"], requested["thread_id"], requested["tool"]) == (
        "hooked", str(thread.pk), "calculator")
    assert (decided["status"], decided["decided_by"]) == ("approved", "user:ann")
    assert (threshold["budget_id"], threshold["percent"], threshold["limit"]) == (
        budget.pk, 50, 100)
    assert (exceeded["spent"], exceeded["agent"]) == (120, "hooked")
    assert (finished["run_id"], finished["status"]) == (run.pk, "cancelled")
    # one event, one id, whichever endpoint gets it
    ids = set(WebhookDelivery.objects.filter(type="run.finished").values_list(
        "event_id", flat=True))
    assert len(ids) == 1


def test_a_redelivery_is_audited_and_refused_while_sending(
        staff: APIClient, scheduled: list[int], django_capture_on_commit_callbacks: Any
) -> None:
    endpoint = _endpoint(["run.finished"])
    delivery = WebhookDelivery.objects.create(
        endpoint=endpoint, event_id="evt_1", type="run.finished", state="failed",
        payload={"id": "evt_1"}, attempts=6, next_attempt_at=timezone.now() - timedelta(1))
    url = f"/api/v1/webhooks/{endpoint.pk}/deliveries/{delivery.pk}/redeliver"
    with django_capture_on_commit_callbacks(execute=True):
        r = staff.post(url)
    assert r.status_code == 202, r.content
    assert (r.json()["state"], r.json()["attempts"]) == ("pending", 6)
    delivery.refresh_from_db()
    assert delivery.retrying is False  # one attempt, an operator's
    assert scheduled == [delivery.pk]
    WebhookDelivery.objects.filter(pk=delivery.pk).update(state="sending")
    r = staff.post(url)
    assert (r.status_code, r.json()["code"]) == (409, "webhook_delivery_sending")
    WebhookDelivery.objects.filter(pk=delivery.pk).update(state="failed")
    WebhookEndpoint.objects.filter(pk=endpoint.pk).update(enabled=False)
    assert staff.post(url).json()["code"] == "webhook_disabled"
    assert AuditEvent.objects.filter(action="webhook_redeliver").count() == 1


def test_a_background_response_that_ends_is_a_response_event(
        make_key: Any, django_capture_on_commit_callbacks: Any, scheduled: list[int]) -> None:
    """``response.completed`` (and the other ends) from the one place a background response
    ends, with its ids and status: not its request or its reply."""
    key, _ = make_key("bg")
    hooked = _endpoint(["response.completed", "response.cancelled", "response.failed"])
    with django_capture_on_commit_callbacks(execute=False):  # not sent to a worker here
        for rid in ("resp_done", "resp_stopped"):
            services.background_response_create(
                response_id=rid, api_key=key, model="echo", stream=False,
                request={"input": "sk-secret question"})
    assert services.background_response_claim(response_id="resp_done", worker="w")
    with django_capture_on_commit_callbacks(execute=True):
        services.background_response_finish(
            response_id="resp_done", status="completed",
            response={"id": "resp_done", "output_text": "the answer"})
        services.background_response_cancel(response_id="resp_stopped", api_key=key)
        services.background_response_cancel(response_id="resp_stopped", api_key=key)  # once
    got = [(d.type, d.payload["data"]) for d in
           WebhookDelivery.objects.filter(endpoint=hooked).order_by("pk")]
    assert [(t, d["response_id"], d["status"], d["key"]) for t, d in got] == [
        ("response.completed", "resp_done", "completed", key.prefix),
        ("response.cancelled", "resp_stopped", "cancelled", key.prefix)]
    assert "sk-secret" not in str(got)
    assert "the answer" not in str(got)
