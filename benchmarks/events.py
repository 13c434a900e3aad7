"""The benchmarks app's feed events: their types (declared to :mod:`agents.outlet.realtime`, the one
outlet) and their builders. A run's life on the feed: ``run_created``, ``run_started``,
``run_progress`` (at most once a heartbeat), ``question_finished`` per question, then
``run_finished``; ``run_requeued`` when its worker was lost and it (or a replay's part) went
back to the queue. ``queue_changed`` says how many workers are alive, each time that changes
(:mod:`benchmarks.queue`)."""

from __future__ import annotations

from typing import Any

from agents.outlet import realtime
from benchmarks import selectors
from benchmarks.models import BenchmarkResult, BenchmarkRun

realtime.event_types_declare({
    "run_created": ("run",),
    "run_started": ("run",),
    "run_progress": ("run_id", "status", "questions_done", "questions_total", "packets",
                     "bytes"),
    "question_finished": ("run_id", "result"),
    "run_finished": ("run",),
    "run_requeued": ("run",),
    "queue_changed": ("queue",),
})

RUN_EVENTS = ("run_created", "run_started", "run_finished", "run_requeued")


def run_changed(name: str, run_id: int) -> dict[str, Any]:
    """``name`` (one of :data:`RUN_EVENTS`) with the run as it is stored now."""
    if name not in RUN_EVENTS:
        raise ValueError(f"not a run event: {name!r}")
    return realtime.event(name, run=selectors.run_public(BenchmarkRun.objects.get(pk=run_id)))


def run_progress(*, run_id: int, status: str, questions_done: int, questions_total: int,
                 packets: int, bytes: int) -> dict[str, Any]:  # noqa: A002 - the field's name
    return realtime.event("run_progress", run_id=run_id, status=status,
                          questions_done=questions_done, questions_total=questions_total,
                          packets=packets, bytes=bytes)


def question_finished(result: BenchmarkResult) -> dict[str, Any]:
    return realtime.event("question_finished", run_id=result.run_id,
                          result=selectors.result_public(result))


def queue_changed() -> dict[str, Any]:
    """The queue's workers as they are now (``{"workers": N, "alive": bool}``)."""
    return realtime.event("queue_changed", queue=selectors.queue_state())
