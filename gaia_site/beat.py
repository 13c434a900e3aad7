"""The embedded beat: without ``REDIS_URL`` (``./run``'s single process) the server fires
schedules itself, with Celery beat's database scheduler on a daemon thread
(``GAIA_EMBEDDED_BEAT=0``: it does not; another process beats). With Redis, beats are processes
of their own: ``celery -A gaia_site beat -S django_celery_beat.schedulers:DatabaseScheduler``
(as many as wanted: each tick runs once, :func:`agents.services.schedule_tick_claim`).

Without a broker Celery runs a task where it is sent, so the beat's firing claims the tick on
this thread and hands the run to the server's embedded ``schedules`` worker
(:mod:`agents.infra.background`): the beat never waits for a turn."""

from __future__ import annotations

import logging
import threading
from typing import Any

from django.conf import settings

log = logging.getLogger("gaia.beat")
SCHEDULER = "django_celery_beat.schedulers:DatabaseScheduler"
_lock = threading.Lock()
_service: Any = None


def embedded_beat_start() -> Any:
    """Start this process's beat thread once, if schedules are fired here; the service or
    ``None``."""
    global _service
    if settings.REDIS_URL or not settings.GAIA_EMBEDDED_BEAT:
        return None
    with _lock:
        if _service is None:
            from celery.beat import EmbeddedService

            from gaia_site.celery import app

            # Its tasks known here (a web process imports them on first need), so that a
            # firing runs in this process rather than going to a broker nobody reads.
            app.loader.import_default_modules()
            _service = EmbeddedService(app, thread=True, scheduler_cls=SCHEDULER,
                                       max_interval=5)
            _service.daemon = True
            _service.start()
            log.info("embedded beat started (database scheduler)")
    return _service


def embedded_beat_stop() -> None:
    global _service
    with _lock:
        if _service is not None:
            _service.stop()
            _service = None
