"""Browser fixtures: Debian's Chromium driven by Playwright against a live Gaia process.

Screenshots of every page land in ``var/screenshots/`` (a test artifact; CI keeps the folder).
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import ROOT

CHROMIUM = os.environ.get("GAIA_CHROMIUM", "/usr/bin/chromium")
SCREENSHOTS = ROOT / "var" / "screenshots"
STAFF_PASSWORD = "pw-operator-123"  # noqa: S105 - a test account's password


@pytest.fixture(scope="module")
def browser(gaia_server: Any) -> Iterator[Any]:
    from playwright import sync_api

    if not Path(CHROMIUM).exists():
        pytest.fail(f"{CHROMIUM} is missing: apt-get install -y chromium")
    # Playwright's sync API runs an event loop in the test's thread, which makes Django refuse
    # the test's own ORM calls (the test database setup, factories). Playwright's documented
    # answer for Django; set after the live server started, so it never runs with it.
    # Module-scoped: the loop and the variable end with the browser tests, before any other
    # test runs (pytest-django runs the tests without a database last, after these).
    with pytest.MonkeyPatch.context() as mp, sync_api.sync_playwright() as pw:
        mp.setenv("DJANGO_ALLOW_ASYNC_UNSAFE", "true")
        browser = pw.chromium.launch(executable_path=CHROMIUM, headless=True,
                                     args=["--no-sandbox", "--disable-gpu"])
        yield browser
        browser.close()


@pytest.fixture
def staff_user(transactional_db: Any) -> Any:
    from django.contrib.auth import get_user_model

    return get_user_model().objects.create_user("operator", password=STAFF_PASSWORD,
                                                is_staff=True)


@pytest.fixture
def page(browser: Any, gaia_server: Any, staff_user: Any) -> Iterator[Any]:
    """A logged-in staff page (through the real login form)."""
    context = browser.new_context(base_url=gaia_server.url, viewport={"width": 1280,
                                                                      "height": 900})
    page = context.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    page.goto("/login/")
    page.fill("input[name=username]", "operator")
    page.fill("input[name=password]", STAFF_PASSWORD)
    page.click("button[type=submit]")
    page.wait_for_url(re.compile(r"/$"))
    page.js_errors = errors
    yield page
    context.close()
    assert not errors, f"JavaScript errors on the page: {errors}"


RAW_TIME = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d")


def no_raw_times(page: Any) -> None:
    """The page's text shows no ISO time as it came from the API ("2026-11-29T10:14:…"): the
    console writes times as people read them ("3 min ago", the full time on hover)."""
    text = page.locator("main").inner_text()
    assert not RAW_TIME.search(text), RAW_TIME.findall(text)


def screenshot(page: Any, name: str) -> Path:
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    path = SCREENSHOTS / f"{name}.png"
    page.screenshot(path=str(path), full_page=True)
    return path


@pytest.fixture
def run_server(gaia_server: Any, gaia_server_factory: Any, transactional_db: Any
               ) -> Iterator[Any]:
    """A live server whose benchmark runs really execute, the way each mode runs them: with
    ``REDIS_URL``, the shared server and a real Celery worker process (same database, same
    data dir for the artifacts); without it, a server with its embedded worker, as ``./run``.
    It shares the logged-in page's secret key, so the page's session cookie is valid there."""
    import subprocess
    import sys

    from django.conf import settings

    from tests.conftest import live_database_url

    if not settings.REDIS_URL:
        secret = (gaia_server.log_path.parent / "secret_key").read_text().strip()
        yield gaia_server_factory(GAIA_EMBEDDED_WORKER="1", SECRET_KEY=secret)
        return
    log_path = gaia_server.log_path.with_name("celery-worker.log")
    env = {**os.environ, "DATABASE_URL": live_database_url(), "REDIS_URL": settings.REDIS_URL,
           "GAIA_DATA_DIR": str(gaia_server.log_path.parent), "PYTHONUNBUFFERED": "1"}
    env.pop("DJANGO_ALLOW_ASYNC_UNSAFE", None)
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(
            [sys.executable, "-m", "celery", "-A", "gaia_site", "worker", "--pool", "solo",
             "--concurrency", "1", "--loglevel", "warning", "--without-heartbeat",
             "--without-gossip", "--without-mingle"],
            cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT)
    yield gaia_server
    proc.terminate()
    try:
        proc.wait(15)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(5)


@pytest.fixture
def bench_suite(transactional_db: Any) -> Any:
    """A suite of the shipped HotpotQA questions (a transactional test has no migration
    data)."""
    import json

    from benchmarks.services import suite_create
    from mesh.suite import default_suite_path

    questions = json.loads(default_suite_path().read_text(encoding="utf-8"))
    return suite_create(name="ui-hotpotqa", questions=questions[:6],
                        description="The first six shipped HotpotQA dev questions.")
