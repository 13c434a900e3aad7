"""Recovering the claims of workers that died: a run claimed whole, or a part of a run, whose
heartbeat is older than ``GAIA_BENCH_STALE_SECONDS`` is re-queued (resuming after what it
recorded) or, past ``GAIA_BENCH_MAX_ATTEMPTS``, its run ends ``failed`` saying why.

:func:`benchmark_run_recover_stale` is run periodically by every worker and every web process
(:mod:`benchmarks.worker`), so it happens when no worker is left too: a re-queued run then
waits, saying so, until a worker starts. Every change is a conditional update that re-checks
staleness (heartbeats are written and judged by the database's clock), so any number of
processes may check at once. It also re-sends queued runs whose message never reached the
broker.
"""

from __future__ import annotations

import logging
from datetime import timedelta
from typing import Any

from django.conf import settings
from django.db import transaction
from django.db.models import Exists, F, OuterRef, Q, Value
from django.db.models.functions import Concat
from django.utils import timezone

from benchmarks.models import BenchmarkRun, RunPart
from benchmarks.services.runs import RUN_STATUS, announce_run, benchmark_run_dispatch, setting

log = logging.getLogger("gaia.benchmarks")

NO_WORKER = "no worker alive"


def lost_note(*, worker: str, beat: Any) -> tuple[str, bool]:
    """How a lost worker is named in a run's notes and errors, and whether any other worker
    is alive now (:func:`benchmarks.selectors.queue_state`). Not the lost one: its own beat
    may still look fresh for a moment after its run's heartbeat went stale (they are written
    by two threads), and the note then left out that no worker was left."""
    from benchmarks.selectors import queue_state

    seen = beat.isoformat() if beat else "never"
    return (f"worker {worker} lost (last heartbeat {seen})",
            queue_state(besides=worker)["alive"])


def _stale(cutoff: Any, status: str) -> Q:
    return Q(status=status) & (Q(heartbeat_at__lt=cutoff) | Q(heartbeat_at__isnull=True))


def benchmark_run_recover_stale(*, stale_after_s: float | None = None,
                                max_attempts: int | None = None) -> list[int]:
    """Re-queue (resuming) or fail every stale claim: runs claimed whole, then parts. Announces
    ``run_requeued`` or ``run_finished``; returns the ids of the runs it changed (and of the
    queued runs it sent again)."""
    from benchmarks.selectors import stale_cutoff

    max_attempts = max_attempts if max_attempts is not None else int(setting(
        "GAIA_BENCH_MAX_ATTEMPTS", 2))
    cutoff = stale_cutoff(stale_after_s)
    changed = _runs_recover(cutoff, max_attempts) + _parts_recover(cutoff, max_attempts)
    if settings.REDIS_URL:
        # Queued runs whose message never reached the broker (it was away at submit time):
        # send them again. A duplicate message is harmless (the claim is conditional).
        unsent = BenchmarkRun.objects.filter(
            status=RUN_STATUS.QUEUED, celery_task_id="",
            queued_at__lt=timezone.now() - timedelta(seconds=5)).values_list("pk", flat=True)
        for run_id in unsent:
            benchmark_run_dispatch(run_id=run_id)
            changed.append(run_id)
    return changed


def _requeued_note(lost: str, attempts: int, alive: bool) -> str:
    return f"{lost}; re-queued after attempt {attempts}" + (
        "" if alive else f"; {NO_WORKER}: it waits until one starts") + "\n"


def _failed_error(lost: str, attempts: int, max_attempts: int, alive: bool) -> str:
    return (f"{lost} on attempt {attempts} of {max_attempts}; not retried"
            + ("" if alive else f"; {NO_WORKER}"))


def _requeued(run_id: int) -> None:
    announce_run("run_requeued", run_id)
    transaction.on_commit(lambda: benchmark_run_dispatch(run_id=run_id))


def _runs_recover(cutoff: Any, max_attempts: int) -> list[int]:
    is_stale = _stale(cutoff, RUN_STATUS.RUNNING)
    whole = ~Exists(RunPart.objects.filter(run_id=OuterRef("pk")))  # parts: _parts_recover
    changed = []
    stale = BenchmarkRun.objects.filter(whole, is_stale).values_list(
        "pk", "attempts", "heartbeat_at", "worker")
    for run_id, attempts, beat, worker in stale:
        lost, alive = lost_note(worker=worker, beat=beat)
        with transaction.atomic():
            # Still stale, same worker, same attempt: a conditional update, so two processes
            # checking at once change it once.
            match = BenchmarkRun.objects.filter(is_stale, pk=run_id, worker=worker,
                                                attempts=attempts)
            if attempts < max_attempts:
                ok = match.update(status=RUN_STATUS.QUEUED, worker="", celery_task_id="",
                                  notes=Concat(F("notes"), Value(
                                      _requeued_note(lost, attempts, alive)))) == 1
                if ok:
                    _requeued(run_id)
            else:
                ok = match.update(status=RUN_STATUS.FAILED, finished_at=timezone.now(),
                                  error=_failed_error(lost, attempts, max_attempts, alive)) == 1
                if ok:
                    announce_run("run_finished", run_id)
        if ok:
            log.warning("benchmark run %s: stale heartbeat from %s recovered", run_id, worker)
            changed.append(run_id)
    return changed


def _parts_recover(cutoff: Any, max_attempts: int) -> list[int]:
    """A stale part goes back to the queue (its run too, once no part of it runs: it waits
    for a worker, as a new run does), or past ``max_attempts`` its run fails."""
    is_stale = _stale(cutoff, RunPart.Status.RUNNING)
    changed = []
    for part_id, run_id, attempts, worker, beat in RunPart.objects.filter(
            is_stale, run__status=RUN_STATUS.RUNNING).values_list(
            "pk", "run_id", "attempts", "worker", "heartbeat_at"):
        lost, alive = lost_note(worker=worker, beat=beat)
        with transaction.atomic():
            match = RunPart.objects.filter(is_stale, pk=part_id, worker=worker,
                                           attempts=attempts)
            if attempts < max_attempts:
                ok = match.update(status=RunPart.Status.QUEUED, worker="") == 1
                if ok:
                    BenchmarkRun.objects.filter(pk=run_id).update(notes=Concat(
                        F("notes"), Value("part " + _requeued_note(lost, attempts, alive))))
                    running = RunPart.objects.filter(run_id=OuterRef("pk"),
                                                     status=RunPart.Status.RUNNING)
                    BenchmarkRun.objects.filter(~Exists(running), pk=run_id,
                                                status=RUN_STATUS.RUNNING).update(
                        status=RUN_STATUS.QUEUED, worker="")
                    _requeued(run_id)
            else:
                ok = match.update(status=RunPart.Status.DONE) == 1 and bool(
                    BenchmarkRun.objects.filter(pk=run_id, status=RUN_STATUS.RUNNING).update(
                        status=RUN_STATUS.FAILED, finished_at=timezone.now(),
                        error=_failed_error(lost, attempts, max_attempts, alive)))
                if ok:
                    announce_run("run_finished", run_id)
        if ok:
            log.warning("benchmark run %s: part %s of worker %s recovered", run_id, part_id,
                        worker)
            changed.append(run_id)
    return changed

