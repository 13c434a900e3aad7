"""Celery's documented Django wiring (``CELERY_`` settings namespace, task autodiscovery), and
a worker's own Prometheus endpoint: with ``GAIA_METRICS_PORT`` set, a Celery worker serves
``/metrics`` on that port (``GAIA_METRICS_HOST``, 127.0.0.1 unless said), adding up its pool's
processes (prometheus-client's multiprocess mode, in a directory of its own made here, before
anything imports prometheus-client, which decides then). No key is asked on that port: bind it
where only Prometheus reaches it."""

import os
import sys
import tempfile

from celery import Celery, signals

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "gaia_site.settings")
_WORKER_METRICS = bool(os.environ.get("GAIA_METRICS_PORT")) and "worker" in sys.argv[1:]
if _WORKER_METRICS and not os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
    os.environ["PROMETHEUS_MULTIPROC_DIR"] = tempfile.mkdtemp(prefix="gaia-worker-metrics-")

app = Celery("gaia")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()
app.autodiscover_tasks(["agents.services"])  # agents' tasks live with its services


@signals.worker_init.connect
def _serve_metrics(**_: object) -> None:
    if not _WORKER_METRICS:
        return
    from prometheus_client import CollectorRegistry, multiprocess, start_http_server

    registry = CollectorRegistry(auto_describe=False)
    multiprocess.MultiProcessCollector(registry)
    start_http_server(int(os.environ["GAIA_METRICS_PORT"]),
                      addr=os.environ.get("GAIA_METRICS_HOST", "127.0.0.1"), registry=registry)


@signals.worker_process_shutdown.connect
def _process_gone(pid: int | None = None, **_: object) -> None:
    if _WORKER_METRICS and pid:
        from prometheus_client import multiprocess

        multiprocess.mark_process_dead(pid)
