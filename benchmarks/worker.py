"""Who executes runs besides Celery, and the stale-run check every worker runs.

* Without ``REDIS_URL`` (one machine, ``./run``), the server process runs them on the
  **embedded worker** of the ``benchmarks`` queue (:mod:`agents.infra.background`): one daemon
  thread that executes each dispatched run, and between runs claims the oldest run left queued (one
  submitted while the server was down), through the same service code a Celery worker uses. It
  starts with the server (``gaia_site.asgi``) and on the first submit; it never runs inside a
  request or on the event loop, and uses a database connection of its own for short
  transactions only. ``GAIA_EMBEDDED_WORKER=0`` switches it off.
* **Stale-run recovery** is a periodic check (every ``GAIA_BENCH_REAP_SECONDS``) on a daemon
  thread of every process that has a say: each Celery worker process starts one when it is
  ready (``worker_ready``), and each web process when it starts (``gaia_site.lifespan``), so
  runs whose worker died are recovered when no worker is left too; the embedded worker also
  checks on its polls. A run whose heartbeat is older than ``GAIA_BENCH_STALE_SECONDS`` is
  re-queued (resuming: it waits, queued, until a worker takes it) or, past
  ``GAIA_BENCH_MAX_ATTEMPTS``, failed with the reason.
* **Liveness**: the same thread beats for the process's worker (:mod:`benchmarks.queue`): a
  Celery worker for itself, a web process for its embedded worker while that thread lives. A
  worker whose beat went stale is marked lost by whoever checks next, so the run pages know
  when nothing will run a queued run.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

from django.conf import settings
from django.db import close_old_connections

from agents import services
from agents.infra.background import EmbeddedWorker, embedded_worker
from benchmarks import queue
from benchmarks.models import BenchmarkRun, QueueWorker
from benchmarks.services import RUN_QUEUE, benchmark_run_recover_stale

log = logging.getLogger("gaia.benchmarks")

_lock = threading.Lock()
_reaper: threading.Thread | None = None
_stop = threading.Event()
_last_reap = 0.0
Beat = tuple[str, str] | None  # (name, kind) of the worker a process beats for, if any


def _reap_seconds() -> float:
    return float(getattr(settings, "GAIA_BENCH_REAP_SECONDS", 10.0))


def recover_stale_once(beat: Beat = None) -> list[int]:
    """One check: beat for ``beat``'s worker, mark lost the workers whose beat went stale,
    then recover the runs (and replay parts) whose heartbeat did."""
    try:
        if beat is not None:
            queue.queue_worker_beat(name=beat[0], kind=beat[1])
        queue.queue_workers_reap()
        # background responses (/v1/responses) whose worker died: queued again
        services.background_responses_recover_stale()
        return benchmark_run_recover_stale()
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
    if not worker.launched:
        return None
    # Its beat and the stale-run check; the lifespan starts them too (a server without
    # lifespan, such as daphne, still beats for the worker it has).
    reaper_start(embedded_worker_beat)
    return worker


def reaper_start(beat: Callable[[], Beat] = lambda: None) -> None:
    """Start this process's periodic check (:func:`recover_stale_once`) on a daemon thread,
    once; ``beat`` names the worker it beats for each time (``None``: none now)."""
    global _reaper
    with _lock:
        if _reaper is not None and _reaper.is_alive():
            return
        _stop.clear()

        def loop() -> None:
            while not _stop.is_set():
                recover_stale_once(beat())
                _stop.wait(_reap_seconds())

        _reaper = threading.Thread(target=loop, name="gaia-bench-reaper", daemon=True)
        _reaper.start()


def reaper_stop(name: str | None) -> None:
    """This process stops: no more checks, and its worker ``name`` (if any) is gone now (after
    the check under way, whose beat would otherwise count it again)."""
    _stop.set()
    reaper = _reaper
    if reaper is not None and reaper is not threading.current_thread():
        reaper.join(timeout=5)
    if name is not None:
        try:
            queue.queue_worker_gone(name=name)
        except Exception:
            log.warning("could not record worker %s as stopped", name, exc_info=True)


def celery_worker_beat() -> Beat:
    return worker_name_here(), QueueWorker.Kind.CELERY


def embedded_worker_beat() -> Beat:
    """This web process's embedded worker, while its thread lives."""
    worker = embedded()
    if worker.launched and worker.is_alive() and worker.on():
        return worker_name_here() + ":embedded", QueueWorker.Kind.EMBEDDED
    return None


def worker_name_here() -> str:
    from benchmarks.executor import worker_name

    return worker_name()
