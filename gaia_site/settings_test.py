"""Gaia's settings for a test run: ``gaia_site.settings`` and what only the test machinery needs.

pytest loads this module (``DJANGO_SETTINGS_MODULE`` in pyproject.toml) and pytest-django puts
its name in the environment, so the servers, workers and commands the tests start with
``os.environ`` load it too, and agree with the test process. Infrastructure only: every switch
of Gaia's behaviour stays in ``gaia_site.settings``, driven by the environment as in production.
"""

from __future__ import annotations

import os

from gaia_site.settings import *  # noqa: F403
from gaia_site.settings import ALLOWED_HOSTS, DATA_DIR, DATABASES

# The host Django's and Channels' test clients send. Django's test set-up adds it to
# ALLOWED_HOSTS too, but after the test modules are collected, and Channels' origin check copies
# the list when gaia_site.asgi is imported.
if "testserver" not in ALLOWED_HOSTS:
    ALLOWED_HOSTS = [*ALLOWED_HOSTS, "testserver"]

if DATABASES["default"]["ENGINE"] == "django.db.backends.sqlite3":
    # A file (not :memory:) so the live server process of the tests shares it; one per
    # pytest process so two runs never collide.
    DATABASES["default"]["TEST"] = {"NAME": str(DATA_DIR / f"test-{os.getpid()}.sqlite3")}

# The test process fires no schedules (it imports gaia_site.asgi for its in-process clients):
# the beats are the processes the schedule tests start, or a server started with
# GAIA_EMBEDDED_BEAT=1 (tests/conftest.py's start_gaia says 0 unless a test asks).
GAIA_EMBEDDED_BEAT = os.environ.get("GAIA_EMBEDDED_BEAT", "0") == "1"
