"""Executing a run, whatever its kind: what a Celery task or the embedded worker calls with a
run id.

:func:`benchmark_run_execute` claims the run, or its parts one after another (another worker
claims the others at the same time), through the one lifecycle
(:func:`benchmarks.services.benchmark_run_claim`: a conditional update, so a second delivery
does nothing), and hands each claim to its kind (:mod:`benchmarks.registry`) in an event loop
of its own in the calling thread, with one database thread of the run's own (never the
server's database thread, never the event loop). A claim that raises ends the run ``failed``,
saying why.
"""

from __future__ import annotations

import logging
import os
import socket
from concurrent.futures import ThreadPoolExecutor

from django.db import close_old_connections, connections

from agents.outlet import realtime
from benchmarks import services
from benchmarks.models import BenchmarkRun
from benchmarks.registry import kind_get

log = logging.getLogger("gaia.benchmarks")


def worker_name() -> str:
    return f"{socket.gethostname()}:{os.getpid()}"


def benchmark_run_execute(*, run_id: int, worker: str | None = None,
                          task_id: str = "") -> str | None:
    """Claim and run ``run_id`` (the whole run, or its queued parts until none is left).
    Returns the run's status if this worker ended it (or stopped it: cancelled), ``None`` if
    there was nothing for it to run (taken, cancelled, finished or unknown)."""
    worker = worker or worker_name()
    status = None
    db = ThreadPoolExecutor(max_workers=1, thread_name_prefix=f"bench-db-{run_id}")
    try:
        while True:
            claim = services.benchmark_run_claim(run_id=run_id, worker=worker, task_id=task_id)
            if claim is None:
                if status is None:
                    log.info("benchmark run %s not queued; nothing to do", run_id)
                return status
            log.info("benchmark run %s%s claimed by %s (attempt %s)", run_id,
                     "" if claim.part is None else f" part {claim.part.index}", worker,
                     (claim.part or claim.run).attempts)
            try:
                kind = kind_get(claim.run.kind)
                status = realtime.run_and_flush(kind.execute(claim, db)) or status
            except Exception as exc:  # a bug or a vanished agent: the run ends failed
                log.exception("benchmark run %s failed", run_id)
                services.benchmark_run_finish(claim=claim, status=BenchmarkRun.Status.FAILED,
                                              error=f"worker error: {exc!r}")
                return BenchmarkRun.Status.FAILED
            if claim.part is None:  # a whole run is claimed once per delivery
                return status
    finally:
        db.submit(connections.close_all).result()
        db.shutdown()
        close_old_connections()
