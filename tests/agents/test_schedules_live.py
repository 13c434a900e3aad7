"""Schedules fired by real beats (issue 42): a schedule made through the API on ``* * * * *``
(cron's shortest interval: the first tick comes within a minute) is fired by two beats at once
and run once, as a thread holding the agent's reply.

With Redis: two ``celery beat`` processes with the database scheduler and a Celery worker, as
in production. Without (SQLite): two Gaia servers in ``./run``'s embedded mode, each with its
embedded beat and worker. Either way both beats fire every tick; the claim keeps one run."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from rest_framework.test import APIClient

from agents.models import Message, Schedule, Thread
from tests.conftest import ROOT, live_database_url, start_gaia

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]

TICK_WAIT = 150.0  # the next minute's tick, its run, and a slow machine's margin


def _stop(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(5)


@pytest.fixture
def two_beats(django_db_setup: Any, tmp_path: Path) -> Iterator[list[Path]]:
    """Two beats and what runs their firings; the log files to read."""
    url = os.environ.get("REDIS_URL")
    procs: list[Any] = []
    logs: list[Path] = []
    try:
        if url:
            env = {**os.environ, "DATABASE_URL": live_database_url(), "REDIS_URL": url}
            commands = [["worker", "--pool", "solo", "--concurrency", "1", "--loglevel", "info",
                         "--without-gossip", "--without-mingle", "--without-heartbeat"]]
            commands += [["beat", "-S", "django_celery_beat.schedulers:DatabaseScheduler",
                          "--max-interval", "5", "--loglevel", "info",
                          "--pidfile", str(tmp_path / f"beat{i}.pid")] for i in (1, 2)]
            for i, args in enumerate(commands):
                log_path = tmp_path / f"celery-{i}.log"
                with open(log_path, "wb") as log:
                    procs.append(subprocess.Popen(
                        [sys.executable, "-m", "celery", "-A", "gaia_site", *args], cwd=ROOT,
                        env=env, stdout=log, stderr=subprocess.STDOUT))
                logs.append(log_path)
        else:  # ./run's embedded mode: the server beats and runs the schedule itself
            for i in (1, 2):
                (tmp_path / f"s{i}").mkdir()
                server = start_gaia(tmp_path / f"s{i}", {"GAIA_EMBEDDED_BEAT": "1"})
                procs.append(server)
                logs.append(server.log_path)
        yield logs
    finally:
        for proc in procs:
            if hasattr(proc, "stop"):
                proc.stop()
            else:
                _stop(proc)


def test_a_real_beat_fires_a_schedule_once_per_tick_into_a_thread(
        two_beats: list[Path], django_user_model: Any, make_agent: Any) -> None:
    agent = make_agent(slug="ticker", provider__options={"reply": "Tick received."})
    staff = APIClient()
    staff.force_login(django_user_model.objects.create_user("ann", password="pw-12345678",
                                                            is_staff=True))
    r = staff.post("/api/v1/schedules", {"name": "every-minute", "cron": "* * * * *",
                                         "timezone": "UTC", "agent": "ticker",
                                         "prompt": "Report the tick.", "thread": "continue"},
                   format="json")
    assert r.status_code == 201, r.content
    schedule_id = r.json()["id"]

    deadline = time.monotonic() + TICK_WAIT
    schedule = Schedule.objects.get(pk=schedule_id)
    while time.monotonic() < deadline:
        schedule.refresh_from_db()
        if schedule.last_status in ("ok", "failed"):
            break
        time.sleep(0.5)
    logs = "\n".join(p.read_text(errors="replace") for p in two_beats)
    assert schedule.last_status == "ok", (schedule.last_status, schedule.last_error, logs[-6000:])
    first_tick = schedule.last_fired_for
    thread = Thread.objects.get(pk=schedule.thread_id)
    assert thread.agent_id == agent.pk
    rows = list(Message.objects.filter(thread=thread).order_by("seq")
                .values_list("role", "content", "dialect"))
    assert rows[:2] == [("user", "Report the tick.", "schedule"),
                        ("assistant", "Tick received.", "schedule")]

    # Both beats fired that tick, and each firing said whether it claimed it: one did.
    said = f"schedule {schedule_id} tick {first_tick.isoformat()}: "

    def firings() -> list[str]:
        text = "\n".join(p.read_text(errors="replace") for p in two_beats)
        return [line.split(said, 1)[1] for line in text.splitlines() if said in line]

    while time.monotonic() < deadline + 30 and len(firings()) < 2:
        time.sleep(0.5)
    assert sorted(firings()) == ["claimed", "claimed already (or disabled)"], logs[-6000:]
    assert Thread.objects.filter(agent=agent).count() == 1
