"""Who executes runs besides Celery, and the stale-run check every worker runs.

* Without ``REDIS_URL`` (one machine, ``./run``), the server process runs an **embedded
  worker**: one daemon thread that claims queued runs (oldest first) and executes them through
  the same service code a Celery worker uses. It starts with the server (``gaia_site.asgi``)
  and on the first submit; it never runs inside a request or on the event loop, and uses a
  database connection of its own for short transactions only.
* **Stale-run recovery** is a periodic check in every worker: the embedded worker does it on
  each poll, and each Celery worker process starts a daemon thread for it when it is ready
  (``worker_ready``). A run whose heartbeat is older than ``GAIA_BENCH_STALE_SECONDS`` is
  re-queued once (resuming) or failed with the reason.
"""

from __future__ import annotations

import logging
import threading
import time

from django.conf import settings
from django.db import close_old_connections

from benchmarks.models import BenchmarkRun

log = logging.getLogger("gaia.benchmarks")

_lock = threading.Lock()
_embedded: EmbeddedWorker | None = None
_reaper: threading.Thread | None = None


def _reap_seconds() -> float:
    return float(getattr(settings, "GAIA_BENCH_REAP_SECONDS", 10.0))


def recover_stale_once() -> list[int]:
    from benchmarks.services import benchmark_run_recover_stale

    try:
        return benchmark_run_recover_stale()
    except Exception:  # the database is away for a moment: try again next time
        log.warning("stale-run check failed", exc_info=True)
        return []
    finally:
        close_old_connections()


class EmbeddedWorker(threading.Thread):
    def __init__(self) -> None:
        super().__init__(name="gaia-bench-worker", daemon=True)
        self.wake = threading.Event()
        self.stopping = False

    def run(self) -> None:
        from benchmarks.executor import benchmark_run_execute, worker_name

        name = worker_name() + ":embedded"
        poll = float(getattr(settings, "GAIA_BENCH_POLL_SECONDS", 2.0))
        last_reap = 0.0
        while not self.stopping:
            if not embedded_enabled():  # switched off since it started (settings changed)
                self.wake.wait(poll)
                self.wake.clear()
                continue
            now = time.monotonic()
            if now - last_reap >= _reap_seconds():
                last_reap = now
                recover_stale_once()
            try:
                run_id = (BenchmarkRun.objects.filter(status=BenchmarkRun.Status.QUEUED)
                          .order_by("queued_at", "id").values_list("pk", flat=True).first())
            except Exception:
                log.warning("embedded worker could not read the queue", exc_info=True)
                run_id = None
            finally:
                close_old_connections()
            if run_id is not None:
                try:
                    benchmark_run_execute(run_id=run_id, worker=name)
                except Exception:
                    log.exception("embedded worker: run %s", run_id)
                continue
            self.wake.wait(poll)
            self.wake.clear()


def embedded_enabled() -> bool:
    return not settings.REDIS_URL and bool(getattr(settings, "GAIA_EMBEDDED_WORKER", True))


def embedded_start() -> EmbeddedWorker | None:
    """Start this process's embedded worker if runs execute here (no ``REDIS_URL``)."""
    global _embedded
    if not embedded_enabled():
        return None
    with _lock:
        if _embedded is None or not _embedded.is_alive():
            _embedded = EmbeddedWorker()
            _embedded.start()
        return _embedded


def embedded_wake() -> None:
    """A run was queued: start the embedded worker or wake it now."""
    worker = embedded_start()
    if worker is not None:
        worker.wake.set()


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
