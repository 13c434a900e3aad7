"""Benchmark runs reach their agents through the turn runtime (agents.turns), with real
processes: the server and, with Redis, a Celery worker; without, the server's embedded worker.

A run's agent calls are threads of the run (``/api/v1/threads?run=<id>``, not in the default
list), the feed shows the agent at work while the run uses it, and an operator's kill of such a
thread fails that question, saying so, while the run goes on."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from django.conf import settings
from websockets.exceptions import ConnectionClosed
from websockets.sync.client import connect

from tests.benchmarks.processes import start_worker
from tests.operator.test_live import wait_for

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]
MODES = ["embedded", pytest.param("celery", marks=pytest.mark.skipif(
    not settings.REDIS_URL, reason="needs REDIS_URL (Celery broker)"))]


@pytest.fixture(params=MODES)
def server(request: Any, gaia_server_factory: Any) -> Iterator[Any]:
    """A server that executes runs itself (embedded), or one whose Celery worker does."""
    if request.param == "embedded":
        yield gaia_server_factory(REDIS_URL="", GAIA_EMBEDDED_WORKER="1",
                                  GAIA_BENCH_HEARTBEAT_SECONDS="0.5")
        return
    from gaia_site.celery import app

    app.control.purge()
    server = gaia_server_factory()
    worker = start_worker(server.log_path.parent, "turns", settings.REDIS_URL)
    yield server
    worker.stop()


class Feed(threading.Thread):
    """The operator feed of ``server``, every event recorded as it comes."""

    def __init__(self, server: Any, key: str) -> None:
        super().__init__(daemon=True)
        self.url = server.url.replace("http://", "ws://") + "/ws"
        self.key = key
        self.events: list[dict[str, Any]] = []
        self.ready = threading.Event()
        self.stopping = False

    def run(self) -> None:
        with connect(self.url, additional_headers={"Authorization": f"Bearer {self.key}"},
                     open_timeout=10) as ws:
            while not self.stopping:
                try:
                    event = json.loads(ws.recv(timeout=0.2))
                except TimeoutError:
                    continue
                except ConnectionClosed:
                    return
                self.ready.set()  # "connected": the snapshot came first
                self.events.append(event)


def test_a_runs_agent_calls_are_turns_threads_of_the_run_and_a_kill_fails_one_question(
        suite: Any, server: Any, make_agent: Any, make_key: Any) -> None:
    make_agent(slug="slow-reason", provider__options={"reply": "Terry Richardson",
                                                      "ttft_ms": 1500})
    ops = {"Authorization": f"Bearer {make_key('ops', scopes=['operator'])[1]}"}
    bench = {"Authorization": f"Bearer {make_key('ci', scopes=['benchmarks'])[1]}"}
    feed = Feed(server, ops["Authorization"].removeprefix("Bearer "))
    feed.start()
    assert feed.ready.wait(10)
    api = f"{server.url}/api/v1"
    r = httpx.post(f"{api}/benchmarks/runs", headers=bench, timeout=10,
                   json={"indexes": [8, 12, 0], "tools": {"reason": "slow-reason"}})
    assert r.status_code == 201, r.text
    run_id = r.json()["id"]

    def run_threads() -> list[dict[str, Any]]:
        return httpx.get(f"{api}/threads", params={"run": run_id}, headers=ops,
                         timeout=10).json()["results"]

    first = wait_for(lambda: [t for t in run_threads() if t["status"] == "active"], 60,
                     "the run's first agent call")[0]
    assert first["run"] == run_id
    assert first["agent"] == "slow-reason"
    assert first["title"] == f"Run {run_id} · q8 · reason"
    # The feed shows the agent at work on that thread while the run uses it.
    wait_for(lambda: any(e.get("event") == "agent_state" and e["agent"] == "slow-reason"
                         and e["state"] == "processing" and e["current_thread"] == first["id"]
                         for e in list(feed.events)), 10, "agent_state processing")
    killed = httpx.post(f"{api}/threads/{first['id']}/kill", headers=ops, timeout=10)
    assert killed.status_code == 202, killed.text
    assert killed.json()["was_running"] is True

    def finished() -> dict[str, Any] | None:
        run = httpx.get(f"{api}/benchmarks/runs/{run_id}", headers=bench, timeout=10).json()
        return run if run["status"] not in ("queued", "running") else None

    run = wait_for(finished, 90, "the run's end")
    feed.stopping = True
    feed.join(5)
    assert run["status"] == "succeeded", run  # the run went on
    results = httpx.get(f"{api}/benchmarks/runs/{run_id}/results", headers=bench,
                        timeout=10).json()["results"]
    by_index = {x["question_index"]: x for x in results}
    assert by_index[8]["status"] == "failed"
    assert "an operator stopped slow-reason (reason)" in by_index[8]["error"]
    assert by_index[12]["status"] == by_index[0]["status"] == "completed"
    assert by_index[12]["tokens_by_agent"]["slow-reason"] > 0

    threads = run_threads()
    assert len(threads) == 3  # one call of the reason tool per question
    assert {t["run"] for t in threads} == {run_id}
    assert [t["status"] for t in threads if t["id"] == first["id"]] == ["killed"]
    assert sorted(t["status"] for t in threads if t["id"] != first["id"]) == [
        "completed", "completed"]
    default = httpx.get(f"{api}/threads", headers=ops, timeout=10).json()["results"]
    assert not {t["id"] for t in threads} & {t["id"] for t in default}
    stored = httpx.get(f"{api}/threads/{threads[0]['id']}", headers=ops, timeout=10).json()
    assert [m["role"] for m in stored["messages"]] == ["user", "assistant"]
    assert stored["messages"][1]["dialect"] == "benchmark"
