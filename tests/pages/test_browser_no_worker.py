"""A run's page when its worker dies and no other is left, in a real browser (Debian's Chromium
through Playwright): the page is open on a web process without a worker of its own while a run
executes elsewhere; the worker is killed with SIGKILL; without a reload, the page shows the run
back in the queue, why, and "No worker is running". With Redis the worker is a real Celery
worker, and one that starts later clears the notice live (its beat's event crosses processes
through Redis) and the run ends on the page; without Redis it is another ``./run`` process's
embedded worker, and with no channel between processes the later worker shows on a reload."""

from __future__ import annotations

import time
from typing import Any

import httpx
import pytest
from django.conf import settings

from tests.benchmarks.processes import start_worker
from tests.pages.conftest import screenshot

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]

FAST = {"GAIA_BENCH_HEARTBEAT_SECONDS": "0.5", "GAIA_BENCH_STALE_SECONDS": "3",
        "GAIA_BENCH_REAP_SECONDS": "0.5"}
NOTICE = "No worker is running: this run waits until one starts."
WAIT = 60_000  # ms: the loss is noticed within a few seconds (3 s stale, checked every 0.5 s)


def expect() -> Any:
    from playwright.sync_api import expect as pw_expect

    return pw_expect


def test_the_run_page_says_when_its_worker_died_and_none_is_left(
        page: Any, gaia_server: Any, gaia_server_factory: Any, bench_suite: Any,
        make_agent: Any, make_key: Any) -> None:
    make_agent(slug="slow-reason", provider__options={"reply": "x", "ttft_ms": 1500})
    _, key = make_key("bench", scopes=["benchmarks"])
    # the logged-in page's session is valid on every server that shares its secret key
    secret = (gaia_server.log_path.parent / "secret_key").read_text().strip()
    redis = bool(settings.REDIS_URL)
    env = {**FAST, "SECRET_KEY": secret, **({} if redis else {"REDIS_URL": ""})}
    web = gaia_server_factory(GAIA_EMBEDDED_WORKER="0", **env)  # no worker of its own
    if redis:
        from gaia_site.celery import app

        app.control.purge()
        worker = start_worker(web.log_path.parent, "a", settings.REDIS_URL, **FAST)
        kill, runner = worker.kill, web
    else:
        runner = gaia_server_factory(GAIA_EMBEDDED_WORKER="1", **env)
        kill = runner.process.kill
    try:
        with httpx.Client(base_url=runner.url + "/api/v1/benchmarks", timeout=10,
                          headers={"Authorization": f"Bearer {key}"}) as http:
            made = http.post("/runs", json={"suite": bench_suite.pk, "limit": 3,
                                            "tools": {"reason": "slow-reason"}})
            assert made.status_code == 201, made.text
            run_id = made.json()["id"]
            # without Redis the page's process hears nothing from the runner's: open the page
            # once the run is running
            deadline = time.monotonic() + WAIT / 1000
            while http.get(f"/runs/{run_id}").json()["status"] != "running":
                assert time.monotonic() < deadline
                time.sleep(0.1)
        page.goto(f"{web.url}/runs/{run_id}/")
        expect()(page.locator("#run-status")).to_have_text("running", timeout=WAIT)
        expect()(page.locator("#run-queue")).to_be_hidden()
        expect()(page.locator("#run-notes")).to_be_hidden()
        with httpx.Client(base_url=web.url + "/api/v1/benchmarks", timeout=10,
                          headers={"Authorization": f"Bearer {key}"}) as http:
            deadline = time.monotonic() + WAIT / 1000  # earlier tests' workers age out
            while http.get("/queue").json() != {"workers": 1, "alive": True}:
                assert time.monotonic() < deadline
                time.sleep(0.1)

        kill()  # SIGKILL: the worker says nothing

        notice = page.locator("#run-queue")
        expect()(notice).to_be_visible(timeout=WAIT)
        expect()(notice).to_have_text(NOTICE)
        expect()(page.locator("#run-status")).to_have_text("queued")
        expect()(page.locator("#run-notes li")).to_have_count(1)
        expect()(page.locator("#run-notes li")).to_contain_text(
            "re-queued after attempt 1; no worker alive: it waits until one starts")
        screenshot(page, "run-no-worker")

        if redis:
            later = start_worker(web.log_path.parent, "b", settings.REDIS_URL, **FAST)
            try:
                expect()(notice).to_be_hidden(timeout=WAIT)  # live, from the new worker
                expect()(page.locator("#run-status")).to_have_text("succeeded",
                                                                   timeout=WAIT)
            finally:
                later.stop()
        else:
            gaia_server_factory(GAIA_EMBEDDED_WORKER="1", **env)
            with httpx.Client(base_url=web.url + "/api/v1/benchmarks", timeout=10,
                              headers={"Authorization": f"Bearer {key}"}) as http:
                deadline = time.monotonic() + WAIT / 1000
                while http.get(f"/runs/{run_id}").json()["status"] != "succeeded":
                    assert time.monotonic() < deadline
                    time.sleep(0.2)
            page.reload()
            expect()(page.locator("#run-status")).to_have_text("succeeded")
            expect()(notice).to_be_hidden()
    finally:
        if redis:
            worker.stop()
