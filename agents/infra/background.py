"""Work done in the background, by whoever does it here: Celery workers when ``REDIS_URL`` is
set, else this process's embedded workers. Knowledge indexing and benchmark runs both go
through :func:`background_dispatch`, so the choice is made once.

An embedded worker is a daemon thread per queue (``default``, ``benchmarks``...) that runs the
queue's jobs in order, never on the event loop or in a request, each job between two checks of
its thread's database connections; when idle it runs the queue's ``poll`` (if one was
registered: the benchmarks queue claims runs left queued and recovers stale ones). A queue's
worker can be switched off (its ``enabled`` says no: ``GAIA_EMBEDDED_WORKER=0`` for benchmark
runs): its jobs then wait, stored, for another process to do them.
"""

from __future__ import annotations

import logging
import queue
import threading
from collections.abc import Callable
from typing import Any

from celery import current_app
from celery.exceptions import NotRegistered
from django.conf import settings
from django.db import close_old_connections

log = logging.getLogger("gaia.background")


class EmbeddedWorker(threading.Thread):
    """One queue's jobs, in order, on a daemon thread of this process."""

    def __init__(self, name: str, *, poll: Callable[[], None] | None = None,
                 poll_seconds: float = 2.0, enabled: Callable[[], bool] | None = None) -> None:
        super().__init__(name=f"gaia-worker-{name}", daemon=True)
        self.queue_name = name
        self.poll = poll
        self.poll_seconds = poll_seconds
        self.enabled = enabled  # asked before each job and poll (None: always on)
        self.launched = False
        self.jobs: queue.Queue[tuple[Callable[..., Any], tuple[Any, ...]]] = queue.Queue()

    def on(self) -> bool:
        return self.enabled is None or self.enabled()

    def submit(self, job: Callable[..., Any], *args: Any) -> None:
        """Run ``job(*args)`` on this worker (started on first use); dropped when it is off."""
        if self.on():
            self.jobs.put((job, args))
            self.wake()

    def wake(self) -> None:
        """Start the worker unless it runs already (it polls at once when it starts)."""
        if self.on() and not self.launched:
            with _lock:
                if not self.launched:
                    self.launched = True
                    self.start()

    def run(self) -> None:
        while True:
            if self.poll is None:
                job, args = self.jobs.get()
            else:
                if self.on():
                    self._run(self.poll, ())  # at start, after each job and each idle period
                try:
                    job, args = self.jobs.get(timeout=self.poll_seconds)
                except queue.Empty:
                    continue
            if self.on():  # switched off since it was queued: it waits for another worker
                self._run(job, args)

    def _run(self, job: Callable[..., Any] | None, args: tuple[Any, ...]) -> None:
        if job is None:
            return
        close_old_connections()
        try:
            job(*args)
        except Exception:
            log.exception("background job %s failed on the %s queue",
                          getattr(job, "__name__", job), self.queue_name)
        finally:
            close_old_connections()


_lock = threading.Lock()
_workers: dict[str, EmbeddedWorker] = {}


def embedded_worker(name: str = "default", *, poll: Callable[[], None] | None = None,
                    poll_seconds: float | None = None,
                    enabled: Callable[[], bool] | None = None) -> EmbeddedWorker:
    """This process's embedded worker for queue ``name`` (made on first use). ``poll``,
    ``poll_seconds`` and ``enabled`` configure it (the app that owns the queue says so once)."""
    with _lock:
        worker = _workers.get(name)
        if worker is None:
            worker = _workers[name] = EmbeddedWorker(name)
    if poll is not None:
        worker.poll = poll
    if poll_seconds is not None:
        worker.poll_seconds = poll_seconds
    if enabled is not None:
        worker.enabled = enabled
    return worker


def _task(name: str) -> Any:
    """The Celery task ``name``, by name: no import of the app that declares it. The apps'
    ``tasks`` modules are imported on first need (a worker imports them when it starts; a web
    process does not)."""
    try:
        return current_app.tasks[name]
    except NotRegistered:
        current_app.loader.import_default_modules()
        return current_app.tasks[name]


def background_dispatch(task: str, *args: Any, queue: str = "default",
                        **options: Any) -> str | None:
    """Run the Celery task named ``task`` with ``args`` in the background.

    With ``REDIS_URL``: sent to the broker for a Celery worker (``options`` are
    ``apply_async``'s, such as ``time_limit``); returns the task's id, and raises if the broker
    cannot be reached (the caller decides what waits). Without: run by this process's embedded
    worker for ``queue`` (see the module docstring); returns ``None``."""
    found = _task(task)
    if settings.REDIS_URL:
        return found.apply_async(args=list(args), **options).id
    embedded_worker(queue).submit(found.apply, args)
    return None
