"""Who executes runs besides Celery, and the stale-run check every worker runs.

* Without ``REDIS_URL`` (one machine, ``./run``), the server process runs them on the
  **embedded worker** of the ``benchmarks`` queue (:mod:`agents.background`): one daemon thread
  that executes each dispatched run, and between runs claims the oldest run left queued (one
  submitted while the server was down), through the same service code a Celery worker uses. It
  starts with the server (``gaia_site.asgi``) and on the first submit; it never runs inside a
  request or on the event loop, and uses a database connection of its own for short
  transactions only. ``GAIA_EMBEDDED_WORKER=0`` switches it off.
* **Stale-run recovery** is a periodic check in every worker: the embedded worker does it on
  its polls, and each Celery worker process starts a daemon thread for it when it is ready
  (``worker_ready``). A run whose heartbeat is older than ``GAIA_BENCH_STALE_SECONDS`` is
  re-queued once (resuming) or failed with the reason.
"""

from __future__ import annotations

import logging
import threading
import time

from django.conf import settings
from django.db import close_old_connections

from agents.background import EmbeddedWorker, embedded_worker
from benchmarks.models import BenchmarkRun
from benchmarks.services import RUN_QUEUE, benchmark_run_recover_stale

log = logging.getLogger("gaia.benchmarks")

_lock = threading.Lock()
_reaper: threading.Thread | None = None
_last_reap = 0.0


def _reap_seconds() -> float:
    return float(getattr(settings, "GAIA_BENCH_REAP_SECONDS", 10.0))


def recover_stale_once() -> list[int]:
    from benchmarks.replay.runs import replay_parts_recover_stale

    try:
        return benchmark_run_recover_stale() + replay_parts_recover_stale()
    except Exception:  # the database is away for a moment: try again next time
        log.warning("stale-run check failed", exc_info=True)
        return []
    finally:
        close_old_connections()


def embedded_enabled() -> bool:
    return not settings.REDIS_URL and bool(getattr(settings, "GAIA_EMBEDDED_WORKER", True))


def _poll() -> None:
    """Between runs: the stale-run check (every ``GAIA_BENCH_REAP_SECONDS``), then the oldest
    run left queued, if any."""
    global _last_reap
    from benchmarks.executor import benchmark_run_execute, worker_name

    now = time.monotonic()
    if now - _last_reap >= _reap_seconds():
        _last_reap = now
        recover_stale_once()
    run_id = (BenchmarkRun.objects.filter(status=BenchmarkRun.Status.QUEUED)
              .order_by("queued_at", "id").values_list("pk", flat=True).first())
    if run_id is not None:
        benchmark_run_execute(run_id=run_id, worker=worker_name() + ":embedded")


def embedded() -> EmbeddedWorker:
    """This process's embedded worker of the ``benchmarks`` queue (configured, not started)."""
    return embedded_worker(RUN_QUEUE, poll=_poll, enabled=embedded_enabled,
                           poll_seconds=float(getattr(settings, "GAIA_BENCH_POLL_SECONDS", 2.0)))


def embedded_start() -> EmbeddedWorker | None:
    """Start this process's embedded worker if runs execute here (no ``REDIS_URL``)."""
    worker = embedded()
    worker.wake()
    return worker if worker.launched else None


def reaper_start() -> None:
    """Start the periodic stale-run check in this (Celery worker) process."""
    global _reaper
    with _lock:
        if _reaper is not None and _reaper.is_alive():
            return

        def loop() -> None:
            while True:
                recover_stale_once()
                time.sleep(_reap_seconds())

        _reaper = threading.Thread(target=loop, name="gaia-bench-reaper", daemon=True)
        _reaper.start()
