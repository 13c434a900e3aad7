"""Celery's documented Django wiring (``CELERY_`` settings namespace, task autodiscovery)."""

import os

from celery import Celery

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "gaia_site.settings")

app = Celery("gaia")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()
app.autodiscover_tasks(["agents.services"])  # agents' tasks live with its services
