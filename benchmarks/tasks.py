"""Celery tasks: interfaces that take ids and call the executor (which claims the run)."""

from __future__ import annotations

from celery import shared_task
from celery.signals import worker_ready, worker_shutdown


@shared_task(name="benchmarks.benchmark_run_execute", acks_late=True,
             reject_on_worker_lost=False, ignore_result=True)
def benchmark_run_execute(run_id: int) -> str | None:
    """Run one benchmark run. A redelivered message finds the run claimed and does nothing;
    a run whose worker died is recovered by the stale-run check, not by redelivery. Run in
    this process (eagerly) it is the embedded worker's (agents.infra.background)."""
    from benchmarks.executor import benchmark_run_execute as execute
    from benchmarks.executor import worker_name

    request = benchmark_run_execute.request
    worker = worker_name() + (":embedded" if request.is_eager else "")
    return execute(run_id=run_id, worker=worker,
                   task_id="" if request.is_eager else (request.id or ""))


@worker_ready.connect
def _start_reaper(**_: object) -> None:
    """The worker's periodic check, and its beat (benchmarks.queue)."""
    from benchmarks.worker import celery_worker_beat, reaper_start

    reaper_start(celery_worker_beat)


@worker_shutdown.connect
def _stop_reaper(**_: object) -> None:
    from benchmarks.worker import reaper_stop, worker_name_here

    reaper_stop(worker_name_here())
