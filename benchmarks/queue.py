"""Writes of the queue's workers' liveness: who executes runs, as their beats say.

Every process that executes runs beats (:func:`queue_worker_beat`) every
``GAIA_BENCH_REAP_SECONDS`` from a thread of its own (:mod:`benchmarks.worker`): each Celery
worker, and each server process whose embedded worker thread is alive. Every process that
checks for stale runs (workers and web processes alike) also marks lost the workers whose
beat is older than ``GAIA_BENCH_STALE_SECONDS`` (:func:`queue_workers_reap`), so a worker
killed with SIGKILL, whose machine died, is known to be gone even when no worker is left. A
worker that stops cleanly says so at once (:func:`queue_worker_gone`).

Each change of the number of live workers (one came, one was lost) is announced once, as
``queue_changed``: the transitions are conditional updates, so two processes that notice the
same loss at once announce it once. Beats use the database's clock, as run heartbeats do.
"""

from __future__ import annotations

import logging
from datetime import timedelta

from django.db import transaction
from django.db.models.functions import Now
from django.utils import timezone

from agents.outlet import realtime
from benchmarks import events, selectors
from benchmarks.models import QueueWorker

log = logging.getLogger("gaia.benchmarks")

FORGET_AFTER = timedelta(days=1)  # a lost worker's row is deleted this long after


def _announce() -> None:
    realtime.send_event_on_commit(events.queue_changed)


def queue_worker_beat(*, name: str, kind: str) -> bool:
    """Say that worker ``name`` (``host:pid``) is alive now. Returns ``True`` when it was not
    counted as alive before (new, or lost since): then ``queue_changed`` is announced."""
    with transaction.atomic():
        if QueueWorker.objects.filter(name=name, lost_at__isnull=True).update(beat_at=Now()):
            return False
        came = QueueWorker.objects.filter(name=name).update(
            kind=kind, beat_at=Now(), lost_at=None, started_at=timezone.now())
        if not came:
            QueueWorker.objects.create(name=name, kind=kind, beat_at=Now())
        _announce()
    log.info("benchmark queue: %s worker %s is alive", kind, name)
    return True


def queue_worker_gone(*, name: str) -> bool:
    """Worker ``name`` stops (its process shuts down cleanly): it no longer counts."""
    with transaction.atomic():
        gone = QueueWorker.objects.filter(name=name, lost_at__isnull=True).update(
            lost_at=Now())
        if gone:
            _announce()
    return bool(gone)


def queue_workers_reap(*, stale_after_s: float | None = None) -> list[str]:
    """Mark lost every worker whose beat is older than ``stale_after_s`` (it died without a
    word), and forget those lost for a day. Safe from every process at once: each mark is a
    conditional update. Returns the names it marked."""
    cutoff = selectors.stale_cutoff(stale_after_s)
    stale = QueueWorker.objects.filter(lost_at__isnull=True, beat_at__lt=cutoff)
    marked = []
    with transaction.atomic():
        for pk, name, beat in stale.values_list("pk", "name", "beat_at"):
            if stale.filter(pk=pk).update(lost_at=Now()):
                log.warning("benchmark queue: worker %s lost (last beat %s)", name,
                            beat.isoformat())
                marked.append(name)
        if marked:
            _announce()
    forgotten = QueueWorker.objects.filter(lost_at__lt=timezone.now() - FORGET_AFTER)
    if forgotten.exists():  # a read first: no write (no SQLite write lock) on most checks
        forgotten.delete()
    return marked
