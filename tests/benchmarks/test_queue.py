"""The benchmark queue's workers, in process: their beats, who is alive, a worker lost without a
word, and what the stale-run check does and says when no worker is left (the run pages and the
run API read the same state; the real processes are in test_no_worker_e2e.py)."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from django.utils import timezone

from benchmarks import queue, selectors, services
from benchmarks.kinds import mesh
from benchmarks.models import BenchmarkRun, QueueWorker, RunPart

pytestmark = pytest.mark.django_db(transaction=True)

NO_WORKER = "no worker alive: it waits until one starts"


def queue_events(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [e["queue"] for e in events if e["event"] == "queue_changed"]


def age(name: str, seconds: float = 120) -> None:
    QueueWorker.objects.filter(name=name).update(
        beat_at=timezone.now() - timedelta(seconds=seconds))


def test_a_beat_makes_a_worker_alive_and_a_new_one_is_announced_once(
        events: list[dict[str, Any]]) -> None:
    assert selectors.queue_state() == {"workers": 0, "alive": False}
    assert queue.queue_worker_beat(name="h:1", kind="celery") is True
    assert queue.queue_worker_beat(name="h:1", kind="celery") is False  # still the same one
    assert queue.queue_worker_beat(name="h:2:embedded", kind="embedded") is True
    assert selectors.queue_state() == {"workers": 2, "alive": True}
    assert queue_events(events) == [{"workers": 1, "alive": True},
                                    {"workers": 2, "alive": True}]
    for event in events:
        assert set(event) == {"event", "timestamp", "queue"}


def test_a_silent_worker_is_lost_once_and_counts_again_when_it_beats(
        settings: Any, events: list[dict[str, Any]]) -> None:
    settings.GAIA_BENCH_STALE_SECONDS = 30
    queue.queue_worker_beat(name="h:1", kind="celery")
    age("h:1")
    assert selectors.queue_state() == {"workers": 0, "alive": False}  # stale: not counted
    events.clear()
    assert queue.queue_workers_reap() == ["h:1"]
    assert queue.queue_workers_reap() == []  # a second check (another process) changes nothing
    assert queue_events(events) == [{"workers": 0, "alive": False}]
    assert QueueWorker.objects.get(name="h:1").lost_at is not None
    assert queue.queue_worker_beat(name="h:1", kind="celery") is True  # it was only slow
    assert queue_events(events)[-1] == {"workers": 1, "alive": True}


def test_a_worker_that_stops_cleanly_is_gone_at_once(events: list[dict[str, Any]]) -> None:
    queue.queue_worker_beat(name="h:1", kind="celery")
    assert queue.queue_worker_gone(name="h:1") is True
    assert queue.queue_worker_gone(name="h:1") is False
    assert selectors.queue_state() == {"workers": 0, "alive": False}
    assert queue_events(events)[-1] == {"workers": 0, "alive": False}


def test_long_lost_workers_are_forgotten() -> None:
    queue.queue_worker_beat(name="old", kind="celery")
    QueueWorker.objects.filter(name="old").update(
        lost_at=timezone.now() - timedelta(days=2), beat_at=timezone.now() - timedelta(days=2))
    queue.queue_workers_reap()
    assert not QueueWorker.objects.filter(name="old").exists()


def stale_run(suite: Any, *, worker: str = "h:9", attempts: int = 1) -> BenchmarkRun:
    run = mesh.benchmark_run_create(suite=suite, limit=1)
    services.benchmark_run_claim(run_id=run.pk, worker=worker)
    BenchmarkRun.objects.filter(pk=run.pk).update(
        attempts=attempts, heartbeat_at=timezone.now() - timedelta(seconds=120))
    return run


def test_a_lost_run_with_no_worker_left_is_requeued_saying_so_and_announced(
        suite: Any, events: list[dict[str, Any]]) -> None:
    run = stale_run(suite)
    events.clear()
    assert services.benchmark_run_recover_stale(stale_after_s=30) == [run.pk]
    run.refresh_from_db()
    assert (run.status, run.worker) == ("queued", "")
    assert run.notes.startswith("worker h:9 lost (last heartbeat 20")
    assert run.notes.rstrip().endswith(f"re-queued after attempt 1; {NO_WORKER}")
    requeued = [e for e in events if e["event"] == "run_requeued"]
    assert len(requeued) == 1
    assert requeued[0]["run"]["status"] == "queued"
    assert requeued[0]["run"]["notes"] == run.notes.splitlines()


def test_a_lost_run_while_a_worker_is_alive_says_nothing_of_the_queue(suite: Any) -> None:
    queue.queue_worker_beat(name="h:2", kind="celery")
    run = stale_run(suite)
    services.benchmark_run_recover_stale(stale_after_s=30)
    run.refresh_from_db()
    assert run.status == "queued"
    assert "re-queued after attempt 1" in run.notes
    assert "no worker" not in run.notes


def test_a_lost_runs_own_worker_does_not_count_as_alive(suite: Any) -> None:
    """Its beat and its run's heartbeat come from two threads: the run may go stale while
    the dead worker's last beat still looks fresh (CI, SQLite leg, a busy machine)."""
    queue.queue_worker_beat(name="h:9", kind="embedded")
    run = stale_run(suite)
    services.benchmark_run_recover_stale(stale_after_s=30)
    run.refresh_from_db()
    assert run.notes.rstrip().endswith(f"re-queued after attempt 1; {NO_WORKER}")


def test_a_lost_run_past_its_attempts_fails_naming_the_worker_and_the_empty_queue(
        suite: Any, events: list[dict[str, Any]]) -> None:
    run = stale_run(suite, attempts=2)
    services.benchmark_run_recover_stale(stale_after_s=30, max_attempts=2)
    run.refresh_from_db()
    assert run.status == "failed"
    assert run.error.startswith("worker h:9 lost (last heartbeat 20")
    assert run.error.endswith("on attempt 2 of 2; not retried; no worker alive")
    assert [e["run"]["status"] for e in events if e["event"] == "run_finished"] == ["failed"]


def test_a_replay_whose_only_running_part_is_lost_goes_back_to_queued(
        suite: Any, events: list[dict[str, Any]]) -> None:
    run = BenchmarkRun.objects.create(
        kind=BenchmarkRun.Kind.REPLAY, suite=suite, protocol="replay", agents=["a"],
        question_indexes=[0, 1], questions_total=2, parallel=2, status="running",
        worker="h:9", attempts=1, started_at=timezone.now())
    old = timezone.now() - timedelta(seconds=120)
    RunPart.objects.create(run=run, index=0, status="running", worker="h:9", attempts=1,
                           heartbeat_at=old)
    RunPart.objects.create(run=run, index=1, status="done", worker="h:8", attempts=1,
                           heartbeat_at=old)
    assert services.benchmark_run_recover_stale(stale_after_s=30) == [run.pk]
    run.refresh_from_db()
    assert run.status == "queued"
    assert f"re-queued after attempt 1; {NO_WORKER}" in run.notes
    assert [p.status for p in run.parts.order_by("index")] == ["queued", "done"]
    assert [e["run"]["status"] for e in events if e["event"] == "run_requeued"] == ["queued"]


def test_the_run_detail_and_the_queue_api_say_whether_a_worker_is_alive(
        suite: Any, client: Any, bench_key: tuple[Any, str]) -> None:
    run = mesh.benchmark_run_create(suite=suite, limit=1)
    auth = {"HTTP_AUTHORIZATION": f"Bearer {bench_key[1]}"}
    detail = client.get(f"/api/v1/benchmarks/runs/{run.pk}", **auth)
    assert detail.status_code == 200
    assert detail.json()["queue"] == {"workers": 0, "alive": False}
    queue.queue_worker_beat(name="h:1", kind="celery")
    assert client.get(f"/api/v1/benchmarks/runs/{run.pk}", **auth).json()["queue"] == {
        "workers": 1, "alive": True}
    assert client.get("/api/v1/benchmarks/queue", **auth).json() == {"workers": 1, "alive": True}
    assert client.get("/api/v1/benchmarks/queue").status_code == 401
