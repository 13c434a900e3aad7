"""Schedules (issue 42): the staff API's rules and errors, the periodic task each schedule
owns, the claim that makes one run per tick however many beats fire it, a run through the
turn path (a thread on the channel ``schedule``), continue vs new threads, and a failure
recorded on the schedule and announced on the feed."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest
from django_celery_beat.models import CrontabSchedule, PeriodicTask
from rest_framework.test import APIClient

from agents import services, turns
from agents.models import AuditEvent, Message, Schedule, Thread
from agents.outlet import realtime
from agents.tasks import schedule_fire_task

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def staff(django_user_model: Any) -> APIClient:
    user = django_user_model.objects.create_user("ann", password="pw-12345678", is_staff=True)
    client = APIClient()
    client.force_login(user)
    return client


def _heard(monkeypatch: pytest.MonkeyPatch) -> list[dict[str, Any]]:
    heard: list[dict[str, Any]] = []
    monkeypatch.setattr(realtime, "send_event", heard.append)
    return heard


def test_the_schedules_api_checks_its_input_keeps_the_beat_in_step_and_audits(
        staff: APIClient, make_agent: Any, make_key: Any) -> None:
    make_agent(slug="echo")
    good = {"name": "daily", "cron": "0 9 * * 1-5", "timezone": "Europe/Paris",
            "agent": "echo", "prompt": "Summarise yesterday.", "thread": "continue"}
    for bad, param in (({"cron": "not a cron"}, "cron"), ({"cron": "61 * * * *"}, "cron"),
                       ({"cron": "* * * *"}, "cron"),
                       ({"cron": "* * * * " + ",".join(["1"] * 40)}, "cron"),
                       ({"timezone": "Mars/Olympus"}, "timezone"),
                       ({"timezone": "../etc/passwd"}, "timezone"), ({"agent": "nobody"}, "agent"),
                       ({"prompt": ""}, "prompt"), ({"thread": "sometimes"}, "thread"),
                       ({"suite": "no-such-suite", "targets": ["echo"]}, "suite"),
                       ({"surprise": 1}, None)):
        body = {k: v for k, v in {**good, **bad}.items()}
        if "suite" in bad:
            body.pop("agent"), body.pop("prompt")
        r = staff.post("/api/v1/schedules", body, format="json")
        assert r.status_code == 400, (bad, r.content)
        error = r.json()
        assert {"detail", "code", "param"} <= set(error), error
        if param is not None:
            assert error["param"] == param, (bad, error)
    assert not Schedule.objects.exists()
    assert not PeriodicTask.objects.exists()

    made = staff.post("/api/v1/schedules", good, format="json")
    assert made.status_code == 201, made.content
    shown = made.json()
    assert (shown["kind"], shown["agent"], shown["thread"], shown["last_status"]) == (
        "agent", "echo", "continue", "never")
    task = PeriodicTask.objects.get()
    assert (task.task, task.args, task.enabled) == ("agents.schedule_fire",
                                                    f"[{shown['id']}]", True)
    cron = task.crontab
    assert (cron.minute, cron.hour, cron.day_of_week, str(cron.timezone)) == (
        "0", "9", "1-5", "Europe/Paris")
    assert staff.post("/api/v1/schedules", good, format="json").json()["code"] == \
        "schedule_exists"

    r = staff.patch(f"/api/v1/schedules/{shown['id']}",
                    {"cron": "*/5 * * * *", "enabled": False}, format="json")
    assert r.status_code == 200, r.content
    assert (r.json()["cron"], r.json()["enabled"]) == ("*/5 * * * *", False)
    task.refresh_from_db()
    assert (task.crontab.minute, task.enabled) == ("*/5", False)
    assert staff.patch(f"/api/v1/schedules/{shown['id']}", {"cron": "x"},
                       format="json").json()["param"] == "cron"
    listed = staff.get("/api/v1/schedules").json()
    assert [s["name"] for s in listed["results"]] == ["daily"]
    assert staff.get(f"/api/v1/schedules/{shown['id']}").json()["timezone"] == "Europe/Paris"

    for missing in ("999999", "nope", "9" * 30):
        r = staff.get(f"/api/v1/schedules/{missing}")
        assert (r.status_code, r.json()["code"]) == (404, "schedule_not_found")
    assert staff.delete("/api/v1/schedules/999999").status_code == 404
    # not staff: no credentials 401, a key without the admin scope 403
    assert APIClient().get("/api/v1/schedules").status_code == 401
    _, chat_key = make_key("chatty", scopes=["chat", "operator"])
    r = APIClient().get("/api/v1/schedules", HTTP_AUTHORIZATION=f"Bearer {chat_key}")
    assert r.status_code == 403, r.content
    _, admin_key = make_key("boss", scopes=["admin"])
    r = APIClient().get("/api/v1/schedules", HTTP_AUTHORIZATION=f"Bearer {admin_key}")
    assert r.status_code == 200, r.content

    assert staff.delete(f"/api/v1/schedules/{shown['id']}").status_code == 204
    assert not PeriodicTask.objects.exists()
    assert not CrontabSchedule.objects.exists()
    assert [e.action for e in AuditEvent.objects.order_by("pk")] == [
        "schedule_create", "schedule_update", "schedule_delete"]


def test_the_schedules_api_is_in_the_openapi_schema(staff: APIClient) -> None:
    schema = staff.get("/api/schema?format=json").json()
    paths = schema["paths"]
    assert {"get", "post"} <= set(paths["/api/v1/schedules"])
    assert {"get", "patch", "delete"} <= set(paths["/api/v1/schedules/{schedule_id}"])


def test_the_tick_is_the_newest_time_the_cron_names_in_its_time_zone() -> None:
    now = datetime(2026, 3, 4, 10, 17, 30, tzinfo=UTC)  # a Wednesday, 11:17 in Paris
    assert services.schedule_tick(cron="* * * * *", timezone="UTC", now=now) == \
        datetime(2026, 3, 4, 10, 17, tzinfo=UTC)
    assert services.schedule_tick(cron="0 9 * * *", timezone="Europe/Paris", now=now) == \
        datetime(2026, 3, 4, 8, 0, tzinfo=UTC)
    assert services.schedule_tick(cron="30 11 * * *", timezone="Europe/Paris", now=now) == \
        datetime(2026, 3, 3, 10, 30, tzinfo=UTC)  # not yet today: yesterday's
    assert services.schedule_tick(cron="0 12 * * 1", timezone="UTC", now=now) == \
        datetime(2026, 3, 2, 12, 0, tzinfo=UTC)  # Monday's


def test_two_firings_of_one_tick_make_one_run(make_agent: Any, monkeypatch: Any) -> None:
    make_agent(slug="echo", provider__options={"reply": "Tick."})
    schedule = services.schedule_save(schedule=None, actor=None, fields={
        "name": "twice", "cron": "* * * * *", "agent": "echo", "prompt": "Say tick."})
    runs: list[int] = []
    monkeypatch.setattr("agents.tasks.background_dispatch",
                        lambda name, sid, **_: runs.append(sid))
    tick = "2026-03-04T10:17:00+00:00"
    assert schedule_fire_task.apply(args=[schedule.pk], kwargs={"tick": tick}).get() is True
    assert schedule_fire_task.apply(args=[schedule.pk], kwargs={"tick": tick}).get() is False
    assert runs == [schedule.pk]
    schedule.refresh_from_db()
    assert (schedule.run_count, schedule.last_status) == (1, "running")
    assert schedule.last_fired_for == datetime(2026, 3, 4, 10, 17, tzinfo=UTC)
    # an older tick (a late beat) runs nothing; the next one does
    assert not services.schedule_tick_claim(schedule_id=schedule.pk,
                                            tick=datetime(2026, 3, 4, 10, 16, tzinfo=UTC))
    assert services.schedule_tick_claim(schedule_id=schedule.pk,
                                        tick=datetime(2026, 3, 4, 10, 18, tzinfo=UTC))
    # a disabled schedule claims nothing
    services.schedule_save(schedule=schedule, fields={"enabled": False}, actor=None)
    assert not services.schedule_tick_claim(schedule_id=schedule.pk,
                                            tick=datetime(2026, 3, 4, 10, 19, tzinfo=UTC))


def test_a_run_is_a_turn_on_a_thread_of_its_own_or_the_schedules_one(make_agent: Any) -> None:
    agent = make_agent(slug="echo", provider__options={"reply": "Good morning."})
    new = services.schedule_save(schedule=None, actor=None, fields={
        "name": "fresh", "cron": "0 9 * * *", "agent": "echo", "prompt": "Morning report."})
    kept = services.schedule_save(schedule=None, actor=None, fields={
        "name": "kept", "cron": "0 9 * * *", "agent": "echo", "prompt": "Morning report.",
        "thread": "continue"})
    for minute in (1, 2):
        for s in (new, kept):
            assert services.schedule_tick_claim(
                schedule_id=s.pk, tick=datetime(2026, 3, 4, 9, minute, tzinfo=UTC))
            assert turns.schedule_run(schedule_id=s.pk) == "ok"
    new.refresh_from_db()
    kept.refresh_from_db()
    assert (new.last_status, new.last_error, new.run_count) == ("ok", "", 2)
    fresh_threads = Thread.objects.filter(agent=agent,
                                          session_key__startswith=f"schedule:{new.pk}:")
    assert fresh_threads.count() == 2
    kept_thread = Thread.objects.get(pk=kept.thread_id)
    replies = list(Message.objects.filter(thread=kept_thread).order_by("seq")
                   .values_list("role", "content", "dialect"))
    assert replies == [("user", "Morning report.", "schedule"),
                       ("assistant", "Good morning.", "schedule")] * 2
    assert kept_thread.user == "schedule kept"
    assert Thread.objects.filter(agent=agent).count() == 3


def test_a_failed_run_is_recorded_and_announced(make_agent: Any, monkeypatch: Any) -> None:
    from agents.services import agent_set_paused

    agent = make_agent(slug="echo", provider__options={"reply": "Never."})
    schedule = services.schedule_save(schedule=None, actor=None, fields={
        "name": "paused", "cron": "* * * * *", "agent": "echo", "prompt": "Hello?"})
    agent_set_paused(agent=agent, paused=True, actor=None)
    heard = _heard(monkeypatch)
    from agents.models import WebhookDelivery, WebhookEndpoint

    hooked = WebhookEndpoint.objects.create(  # told of it too (sending: test_webhooks_live.py)
        url="https://hooks.example.com/x", events=["schedule.failed"],
        secret=services.webhook_secret_new())
    monkeypatch.setattr("agents.services.webhooks.webhook_delivery_schedule",
                        lambda *, delivery_id, delay: None)
    assert services.schedule_tick_claim(schedule_id=schedule.pk,
                                        tick=datetime(2026, 3, 4, 9, 0, tzinfo=UTC))
    assert turns.schedule_run(schedule_id=schedule.pk) == "failed"
    schedule.refresh_from_db()
    assert schedule.last_status == "failed"
    assert "paused" in schedule.last_error.lower()
    failed = [e for e in heard if e["event"] == "schedule_failed"]
    assert len(failed) == 1
    assert {k: failed[0][k] for k in ("schedule", "schedule_id", "kind", "agent", "tick")} == {
        "schedule": "paused", "schedule_id": schedule.pk, "kind": "agent", "agent": "echo",
        "tick": "2026-03-04T09:00:00+00:00"}
    assert failed[0]["error"] == schedule.last_error
    (delivery,) = WebhookDelivery.objects.filter(endpoint=hooked)
    assert delivery.type == "schedule.failed"
    data = delivery.payload["data"]
    assert {k: data[k] for k in ("schedule", "schedule_id", "agent", "error", "tick")} == {
        "schedule": "paused", "schedule_id": schedule.pk, "agent": "echo",
        "error": schedule.last_error, "tick": "2026-03-04T09:00:00+00:00"}

    # the agent deleted: the schedule stays, and says so when it runs
    agent.delete()
    assert services.schedule_tick_claim(schedule_id=schedule.pk,
                                        tick=datetime(2026, 3, 4, 9, 1, tzinfo=UTC))
    assert turns.schedule_run(schedule_id=schedule.pk) == "failed"
    schedule.refresh_from_db()
    assert "deleted" in schedule.last_error
    assert [e["agent"] for e in heard if e["event"] == "schedule_failed"] == ["echo", None]


def test_the_admin_makes_schedules_by_the_apis_rules(django_user_model: Any,
                                                     make_agent: Any) -> None:
    from django.test import Client
    from django.urls import reverse

    agent = make_agent(slug="echo")
    boss = django_user_model.objects.create_superuser("boss", password="pw-12345678")
    client = Client()
    client.force_login(boss)
    url = reverse("admin:agents_schedule_add")
    form = {"name": "from-admin", "enabled": "on", "cron": "0 * * * *", "timezone": "UTC",
            "kind": "agent", "agent": agent.pk, "prompt": "Hourly.", "thread_mode": "new",
            "suite": "", "targets": "[]"}
    page = client.post(url, {**form, "cron": "61 * * * *"})
    assert page.status_code == 200
    assert b"does not parse" in page.content
    assert client.post(url, form).status_code == 302
    schedule = Schedule.objects.get()
    assert PeriodicTask.objects.get().args == f"[{schedule.pk}]"
    assert AuditEvent.objects.get().action == "schedule_create"
