"""Replay schedules (issue 42): a schedule that replays a conversation suite against agents
is checked as a replay run would be, and each claimed tick queues a replay run of the suite's
newest version, visible as the schedule's ``last_run_id``."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

import pytest
from rest_framework.test import APIClient

from agents import services, turns
from agents.models import Schedule
from benchmarks.models import BenchmarkRun
from benchmarks.replay.suites import suite_from_jsonl

pytestmark = pytest.mark.django_db(transaction=True)


def test_a_replay_schedule_queues_a_run_of_its_suite_each_tick(django_user_model: Any,
                                                               make_agent: Any) -> None:
    make_agent(slug="echo", provider__options={"reply": "Paris."})
    body = "\n".join(json.dumps({"input": q, "ideal": "Paris."})
                     for q in ("Capital of France?", "Where is the Louvre?")).encode()
    suite_from_jsonl(name="capitals", body=body)
    staff = APIClient()
    staff.force_login(django_user_model.objects.create_user("ann", password="pw-12345678",
                                                            is_staff=True))
    good = {"name": "nightly", "cron": "30 2 * * *", "timezone": "UTC", "suite": "capitals",
            "targets": ["echo"]}
    for bad, param in (({"suite": "hotpot-none"}, "suite"), ({"targets": []}, "targets"),
                       ({"targets": ["nobody"]}, "targets[0]"),
                       ({"agent": "echo"}, "agent")):
        r = staff.post("/api/v1/schedules", {**good, **bad}, format="json")
        assert r.status_code == 400, (bad, r.content)
        assert r.json()["param"] == param, (bad, r.json())
    made = staff.post("/api/v1/schedules", good, format="json")
    assert made.status_code == 201, made.content
    assert (made.json()["kind"], made.json()["targets"]) == ("replay", ["echo"])
    schedule_id = made.json()["id"]

    assert services.schedule_tick_claim(schedule_id=schedule_id,
                                        tick=datetime(2026, 3, 4, 2, 30, tzinfo=UTC))
    assert turns.schedule_run(schedule_id=schedule_id) == "ok"
    schedule = Schedule.objects.get(pk=schedule_id)
    run = BenchmarkRun.objects.get()
    assert (schedule.last_status, schedule.last_run_id) == ("ok", run.pk)
    assert (run.kind, run.suite.name, run.agents, run.status) == (
        "replay", "capitals", ["echo"], "queued")
    assert staff.get(f"/api/v1/schedules/{schedule_id}").json()["last_run_id"] == run.pk
    r = staff.patch(f"/api/v1/schedules/{schedule_id}", {"targets": ["echo", "auto"]},
                    format="json")
    assert (r.status_code, r.json()["kind"], r.json()["targets"]) == (
        200, "replay", ["echo", "auto"]), r.content
    # turned into an agent's schedule: the suite and targets go
    r = staff.patch(f"/api/v1/schedules/{schedule_id}", {"agent": "echo", "prompt": "Hi."},
                    format="json")
    assert r.status_code == 200, r.content
    assert (r.json()["kind"], r.json()["suite"], r.json()["targets"]) == ("agent", None, [])
