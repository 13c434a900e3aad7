"""No worker left, with real processes: the only worker executing a run is killed with SIGKILL,
and the web process (with no worker of its own) notices the stale heartbeat, puts the run back
in the queue saying why, and says in the run API that no worker is alive; a worker that starts
later resumes it.

Both modes: a real Celery worker (with ``REDIS_URL``: skipped on the SQLite leg, which has no
broker), and a server's embedded worker (``./run`` without Redis) beside a server that has
none, as two ``./run`` processes on one database. The browser side is
tests/pages/test_browser_no_worker.py."""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import pytest
from django.conf import settings

from tests.benchmarks.processes import Worker, start_worker

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]
API = "/api/v1/benchmarks"
FAST = {"GAIA_BENCH_HEARTBEAT_SECONDS": "0.5", "GAIA_BENCH_STALE_SECONDS": "3",
        "GAIA_BENCH_REAP_SECONDS": "0.5"}
LOST = re.compile(r"^worker (\S+) lost \(last heartbeat \d{4}-\d\d-\d\dT[^)]+\); re-queued after "
                  r"attempt 1; no worker alive: it waits until one starts$")


@pytest.fixture
def slow_reason(make_agent: Any) -> Any:
    """A reason agent whose provider takes 1.5 s a call: the run is mid-way when killed."""
    return make_agent(slug="slow-reason", provider__options={"reply": "x", "ttft_ms": 1500})


def client(server: Any, key: str) -> httpx.Client:
    return httpx.Client(base_url=server.url + API, timeout=10,
                        headers={"Authorization": f"Bearer {key}"})


def wait_for(http: httpx.Client, run_id: int, ok: Callable[[dict[str, Any]], bool],
             timeout: float = 60.0) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    while True:
        run = http.get(f"/runs/{run_id}").json()
        if ok(run):
            return run
        assert time.monotonic() < deadline, run
        time.sleep(0.1)


def check_requeued_by_the_web(http: httpx.Client, run_id: int, worker: str) -> None:
    """The run leaves ``running`` with no worker anywhere, saying why, and the API says that
    no worker is alive."""
    run = wait_for(http, run_id, lambda r: r["status"] != "running")
    assert run["status"] == "queued", run
    assert run["worker"] is None
    assert len(run["notes"]) == 1
    lost = LOST.match(run["notes"][0])
    assert lost, run["notes"]
    assert lost.group(1) == worker
    assert run["queue"] == {"workers": 0, "alive": False}
    assert http.get("/queue").json() == {"workers": 0, "alive": False}


def logged(server: Any, line: str) -> None:
    """``line`` appears in the server's log within a few reaper passes: the worker's beat and
    the run's heartbeat come from two threads, so the pass that re-queues the run may come
    before the one that finds the worker's beat stale (CI, SQLite leg: the "lost" line was not
    yet there when the run had been re-queued), and a line is written after its commit."""
    deadline = time.monotonic() + 15
    while line not in server.log() and time.monotonic() < deadline:
        time.sleep(0.2)
    assert line in server.log()


@pytest.fixture
def celery_workers(gaia_server_factory: Any) -> Iterator[Callable[..., Worker]]:
    from gaia_site.celery import app

    app.control.purge()
    started: list[Worker] = []

    def start(server: Any, name: str) -> Worker:
        worker = start_worker(server.log_path.parent, name, settings.REDIS_URL, **FAST)
        started.append(worker)
        return worker

    yield start
    for worker in started:
        worker.stop()


@pytest.mark.skipif(not settings.REDIS_URL, reason="needs REDIS_URL (Celery broker)")
def test_celery_worker_killed_with_no_other_the_web_requeues_its_run(
        suite: Any, gaia_server_factory: Any, celery_workers: Any, bench_key: tuple[Any, str],
        slow_reason: Any) -> None:
    server = gaia_server_factory(**FAST)
    http = client(server, bench_key[1])
    first = celery_workers(server, "a")
    run_id = http.post("/runs", json={"limit": 3, "tools": {"reason": "slow-reason"}}).json()["id"]
    run = wait_for(http, run_id, lambda r: r["status"] == "running"
                   and r["progress"]["questions_done"] >= 1)
    assert run["queue"] == {"workers": 1, "alive": True}
    worker = run["worker"]
    assert worker.endswith(f":{first.process.pid}")
    first.kill()

    check_requeued_by_the_web(http, run_id, worker)
    logged(server, f"benchmark run {run_id}: stale heartbeat from {worker} recovered")
    logged(server, f"benchmark queue: worker {worker} lost (last beat")

    second = celery_workers(server, "b")  # a worker that starts later resumes it
    run = wait_for(http, run_id, lambda r: r["status"] in ("succeeded", "failed"))
    assert run["status"] == "succeeded", run
    assert (run["attempts"], run["progress"]["questions_done"]) == (2, 3)
    assert run["worker"].endswith(f":{second.process.pid}")
    assert run["queue"] == {"workers": 1, "alive": True}


def test_embedded_worker_killed_the_other_server_requeues_its_run(
        suite: Any, gaia_server_factory: Any, bench_key: tuple[Any, str],
        slow_reason: Any) -> None:
    alone = {"REDIS_URL": "", **FAST}
    runner = gaia_server_factory(GAIA_EMBEDDED_WORKER="1", **alone)
    web = gaia_server_factory(GAIA_EMBEDDED_WORKER="0", **alone)  # no worker of its own
    http = client(web, bench_key[1])
    run_id = client(runner, bench_key[1]).post("/runs", json={
        "limit": 3, "tools": {"reason": "slow-reason"}}).json()["id"]
    run = wait_for(http, run_id, lambda r: r["status"] == "running"
                   and r["progress"]["questions_done"] >= 1)
    assert run["queue"] == {"workers": 1, "alive": True}  # the runner's embedded worker
    worker = run["worker"]
    assert worker.endswith(f":{runner.process.pid}:embedded")
    runner.process.kill()  # SIGKILL: no shutdown code runs
    runner.process.wait(10)

    check_requeued_by_the_web(http, run_id, worker)
    logged(web, f"benchmark run {run_id}: stale heartbeat from {worker} recovered")
    logged(web, f"benchmark queue: worker {worker} lost (last beat")

    later = gaia_server_factory(GAIA_EMBEDDED_WORKER="1", **alone)
    run = wait_for(http, run_id, lambda r: r["status"] in ("succeeded", "failed"))
    assert run["status"] == "succeeded", run
    assert run["worker"].endswith(f":{later.process.pid}:embedded")
    assert run["queue"] == {"workers": 1, "alive": True}
