"""End to end with real processes: the API server (uvicorn), Celery workers (Redis broker) and
the database, with events read from the channel layer (Redis) where a web process reads them.

These need ``REDIS_URL`` (the broker): on the SQLite leg without Redis they are skipped and the
embedded worker is tested instead (test_embedded_e2e.py)."""

from __future__ import annotations

import asyncio
import gzip
import io
import json
import tarfile
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from django.conf import settings

from benchmarks.models import BenchmarkResult, BenchmarkRun
from tests.benchmarks.processes import Worker, mesh_agents_of, start_worker

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.slow,
    pytest.mark.skipif(not settings.REDIS_URL, reason="needs REDIS_URL (Celery broker)"),
]
API = "/api/v1/benchmarks"


@pytest.fixture
def workers(gaia_server: Any) -> Iterator[Any]:
    """Start Celery workers sharing the server's data dir (artifacts), on an empty queue."""
    from gaia_site.celery import app

    app.control.purge()
    started: list[Worker] = []
    data_dir = gaia_server.log_path.parent

    def start(name: str, **env: str) -> Worker:
        worker = start_worker(data_dir, name, settings.REDIS_URL, **env)
        started.append(worker)
        return worker

    yield start
    for worker in started:
        worker.stop()


@pytest.fixture
def http(gaia_server: Any, bench_key: tuple[Any, str]) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=gaia_server.url + API, timeout=10,
                      headers={"Authorization": f"Bearer {bench_key[1]}"}) as client:
        yield client


def wait_run(http: httpx.Client, run_id: int, status: tuple[str, ...], timeout: float = 60.0,
             done_at_least: int = 0) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    while True:
        run = http.get(f"/runs/{run_id}").json()
        if run["status"] in status and run["progress"]["questions_done"] >= done_at_least:
            return run
        assert time.monotonic() < deadline, run
        time.sleep(0.1)


@pytest.fixture
def slow_reason(make_agent: Any) -> Any:
    """A reason agent whose provider takes 1.5 s a call (a slow model, via the bridge)."""
    return make_agent(slug="slow-reason", provider__options={"reply": "x", "ttft_ms": 1500})


async def test_submit_run_two_questions_results_artifacts_and_events(
        suite: Any, workers: Any, http: httpx.Client) -> None:
    from channels.layers import channel_layers

    from agents.outlet import realtime

    worker = await asyncio.to_thread(workers, "a")
    # A layer of this test's own: the process-wide one may hold an earlier test's locks, bound
    # to that test's event loop ("bound to a different event loop" in one PostgreSQL run).
    layer = channel_layers.make_backend("default")
    channel = await layer.new_channel()
    await layer.group_add(realtime.FEED_GROUP, channel)

    r = await asyncio.to_thread(http.post, "/runs", json={"indexes": [8, 12],
                                                          "protocol": "msgpack+crc"})
    assert r.status_code == 201, r.text
    run_id = r.json()["id"]
    events: list[dict[str, Any]] = []
    async with asyncio.timeout(60):
        while not any(e["event"] == "run_finished" for e in events):
            message = await layer.receive(channel)
            events += [e for e in message["events"]
                       if (e.get("run") or {}).get("id") == run_id or e.get("run_id") == run_id]
    await layer.group_discard(realtime.FEED_GROUP, channel)
    if hasattr(layer, "close_pools"):  # channels-redis: its connections belong to this loop
        await layer.close_pools()

    kinds = [e["event"] for e in events]
    assert kinds.count("run_created") == 1  # from the server process
    from_worker = [k for k in kinds if k != "run_created"]  # in order, from the worker
    assert from_worker[0] == "run_started"
    assert from_worker.count("question_finished") == 2
    assert "run_progress" in from_worker
    assert from_worker[-1] == "run_finished"
    assert events[-1]["run"]["status"] == "succeeded"
    progress = [e for e in events if e["event"] == "run_progress"]
    assert progress[-1]["packets"] == 16
    started = next(e for e in events if e["event"] == "run_started")
    assert started["run"]["worker"].endswith(str(worker.process.pid))

    run = await asyncio.to_thread(lambda: http.get(f"/runs/{run_id}").json())
    assert (run["status"], run["attempts"], run["progress"]["questions_done"]) == (
        "succeeded", 1, 2)
    assert run["celery_task_id"]
    results = (await asyncio.to_thread(http.get, f"/runs/{run_id}/results")).json()
    assert [(x["question_index"], x["prediction"], x["exact_match"])
            for x in results["results"]] == [(8, "Terry Richardson", 1.0), (12, "1999", 1.0)]
    summary = (await asyncio.to_thread(http.get, f"/runs/{run_id}/artifacts/summary.json"))
    assert summary.json()["count"] == 2
    assert summary.json()["protocol"] == "msgpack+crc"
    archive = await asyncio.to_thread(http.get, f"/runs/{run_id}/artifacts/q8/run_artifacts.tar.gz")
    assert archive.status_code == 200
    assert gzip.decompress(archive.content)  # a real gzip stream
    metrics = await asyncio.to_thread(http.get, f"/runs/{run_id}/artifacts/q12/metrics.json")
    assert json.loads(metrics.content)["answer"] == "1999"


def test_same_message_delivered_twice_runs_once(suite: Any, workers: Any,
                                                http: httpx.Client) -> None:
    from benchmarks.tasks import benchmark_run_execute

    worker = workers("a")
    run_id = http.post("/runs", json={"limit": 2}).json()["id"]
    benchmark_run_execute.apply_async(args=[run_id])  # a second delivery of the same run
    wait_run(http, run_id, ("succeeded",))
    worker.wait_log(f"benchmark run {run_id} not queued; nothing to do")
    run = BenchmarkRun.objects.get(pk=run_id)
    assert run.attempts == 1
    assert worker.log().count(f"benchmark run {run_id} claimed") == 1
    assert BenchmarkResult.objects.filter(run=run).count() == 2


def test_cancel_mid_run_stops_between_questions_and_ends_agents(
        suite: Any, workers: Any, http: httpx.Client, slow_reason: Any) -> None:
    worker = workers("a")
    run_id = http.post("/runs", json={"limit": 6, "tools": {"reason": "slow-reason"}}).json()["id"]
    wait_run(http, run_id, ("running",), done_at_least=1)
    assert len(mesh_agents_of(worker.process.pid)) == 4  # started once for the run
    r = http.post(f"/runs/{run_id}/cancel")
    assert (r.status_code, r.json()["status"]) == (200, "cancelled")
    worker.wait_log(f"benchmark run {run_id} stopped: cancelled", timeout=15)
    deadline = time.monotonic() + 10
    while mesh_agents_of(worker.process.pid):
        assert time.monotonic() < deadline, "agent processes outlived the cancel"
        time.sleep(0.1)
    run = BenchmarkRun.objects.get(pk=run_id)
    assert run.status == "cancelled"
    assert 1 <= run.results.count() < 6
    assert run.summary is not None  # the partial summary is kept
    assert run.summary["count"] == run.results.count()


def test_worker_killed_mid_run_is_recovered_and_resumes(
        suite: Any, workers: Any, http: httpx.Client, slow_reason: Any) -> None:
    first = workers("a")
    run_id = http.post("/runs", json={"limit": 4, "tools": {"reason": "slow-reason"}}).json()["id"]
    wait_run(http, run_id, ("running",), done_at_least=1)
    first.kill()
    killed_at = time.monotonic()
    done_before = set(BenchmarkResult.objects.filter(run_id=run_id).values_list(
        "question_index", "created_at"))
    second = workers("b")
    run = wait_run(http, run_id, ("succeeded", "failed"), timeout=60)
    recovered_in = time.monotonic() - killed_at
    assert run["status"] == "succeeded", run
    assert run["attempts"] == 2
    assert run["error"] is None
    assert len(run["notes"]) == 1
    assert "re-queued after attempt 1" in run["notes"][0]
    assert run["worker"].endswith(str(second.process.pid))
    rows = set(BenchmarkResult.objects.filter(run_id=run_id).values_list("question_index",
                                                                         "created_at"))
    assert {i for i, _ in rows} == {0, 1, 2, 3}
    assert done_before <= rows  # what attempt 1 finished was kept, not run again
    assert recovered_in < 60
    second.wait_log(f"benchmark run {run_id} claimed")
    archive = http.get(f"/runs/{run_id}/artifacts/run_artifacts.tar.gz")
    with tarfile.open(fileobj=io.BytesIO(archive.content)) as tar:
        names = set(tar.getnames())
    for index in range(4):  # both attempts' questions, with their workspaces
        assert f"q{index}/metrics.json" in names
        assert f"q{index}/workspaces/3/memory.json" in names


def test_two_runs_on_two_workers_at_once(suite: Any, workers: Any, http: httpx.Client,
                                         slow_reason: Any) -> None:
    workers("a")
    workers("b")
    ids = [http.post("/runs", json={"limit": 3, "tools": {"reason": "slow-reason"}}).json()["id"]
           for _ in range(2)]
    deadline = time.monotonic() + 30
    while True:
        runs = [http.get(f"/runs/{i}").json() for i in ids]
        if all(r["status"] == "running" for r in runs):
            break
        assert time.monotonic() < deadline, runs
        time.sleep(0.1)
    assert runs[0]["worker"] != runs[1]["worker"]
    for i in ids:
        assert wait_run(http, i, ("succeeded",))["progress"]["questions_done"] == 3


def test_a_worker_serves_its_own_metrics(suite: Any, workers: Any, http: httpx.Client) -> None:
    """A Celery worker with ``GAIA_METRICS_PORT`` serves Prometheus' text on that port: the
    cases it ran are counted there (the web process never saw them)."""
    from tests.conftest import free_port
    from tests.test_metrics import value

    port = free_port()
    workers("metrics", GAIA_METRICS_PORT=str(port))
    r = http.post("/runs", json={"indexes": [8, 12]})
    assert r.status_code == 201, r.text
    run = wait_run(http, r.json()["id"], ("succeeded", "failed"))
    assert run["status"] == "succeeded", run
    text = httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=10).text
    assert value(text, "gaia_benchmark_cases_total", kind=run["kind"]) == 2

