"""Single-process mode: no Redis, the server process executes runs in its embedded worker
thread (never in a request or on the event loop) while /v1 keeps answering. And the CLI."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from benchmarks.models import BenchmarkRun
from tests.benchmarks.processes import mesh_agents_of
from tests.conftest import ROOT

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]
API = "/api/v1/benchmarks"


@pytest.fixture
def server(gaia_server_factory: Any) -> Any:
    return gaia_server_factory(REDIS_URL="", GAIA_EMBEDDED_WORKER="1",
                               GAIA_BENCH_HEARTBEAT_SECONDS="0.5")


@pytest.fixture
def http(server: Any, bench_key: tuple[Any, str]) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=server.url, timeout=10,
                      headers={"Authorization": f"Bearer {bench_key[1]}"}) as client:
        yield client


def test_run_in_the_server_process_while_v1_keeps_answering(
        suite: Any, server: Any, http: httpx.Client, make_agent: Any, make_key: Any,
        echo_agent: Any) -> None:
    make_agent(slug="slow-reason", provider__options={"reply": "x", "ttft_ms": 1000})
    _, chat_key = make_key(name="chat")
    r = http.post(f"{API}/runs", json={"limit": 3, "tools": {"reason": "slow-reason"}})
    assert r.status_code == 201, r.text
    run_id = r.json()["id"]
    answered_while_running = 0
    agents_seen = False
    deadline = time.monotonic() + 60
    while True:
        run = http.get(f"{API}/runs/{run_id}").json()
        if run["status"] in ("succeeded", "failed", "cancelled"):
            break
        assert time.monotonic() < deadline, run
        if run["status"] == "running":
            # the agents are children of the server process: the run executes there
            agents_seen = agents_seen or len(mesh_agents_of(server.process.pid)) == 4
            chat = httpx.post(f"{server.v1}/chat/completions", timeout=5,
                              headers={"Authorization": f"Bearer {chat_key}"},
                              json={"model": "echo", "messages": [
                                  {"role": "user", "content": f"ping {answered_while_running}"}]})
            assert chat.status_code == 200, chat.text
            assert chat.json()["choices"][0]["message"]["content"] == (
                f"ping {answered_while_running}")
            if http.get(f"{API}/runs/{run_id}").json()["status"] == "running":
                answered_while_running += 1
        time.sleep(0.05)
    assert run["status"] == "succeeded", run
    assert answered_while_running >= 3
    assert agents_seen
    assert run["worker"].endswith(f":{server.process.pid}:embedded")
    assert run["progress"]["questions_done"] == 3
    assert http.get(f"{API}/runs/{run_id}/artifacts/summary.json").json()["count"] == 3
    assert mesh_agents_of(server.process.pid) == []  # ended with the run


def cli(server: Any, key: str, *argv: str, timeout: float = 90) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "GAIA_URL": server.url, "GAIA_API_KEY": key}
    return subprocess.run([sys.executable, "-m", "gaia_site.cli", "bench", *argv], cwd=ROOT,
                          env=env, capture_output=True, text=True, timeout=timeout)


def test_cli_submit_wait_list_status_results_compare_cancel(
        suite: Any, server: Any, bench_key: tuple[Any, str], make_agent: Any) -> None:
    key = bench_key[1]
    first = cli(server, key, "submit", "--limit", "2", "--wait")
    assert first.returncode == 0, first.stdout + first.stderr
    assert "queued run" in first.stdout
    assert " succeeded " in first.stdout
    assert "baseline" in first.stdout
    assert "[" + "#" * 30 + "] 2/2 succeeded" in first.stderr
    run_a = int(first.stdout.split("queued run ")[1].split()[0])
    second = cli(server, key, "submit", "--indexes", "0,8", "--protocol", "anp", "--wait")
    assert second.returncode == 0, second.stdout + second.stderr
    run_b = int(second.stdout.split("queued run ")[1].split()[0])

    listing = cli(server, key, "list", "--protocol", "anp")
    assert listing.returncode == 0
    assert f"run {run_b} succeeded" in listing.stdout
    assert f"run {run_a} " not in listing.stdout
    status = cli(server, key, "status", str(run_a))
    assert '"status": "succeeded"' in status.stdout
    results = cli(server, key, "results", str(run_b))
    assert "quality: baseline" in results.stdout
    assert "q8    completed EM 1" in results.stdout
    compare = cli(server, key, "compare", str(run_a), str(run_b))
    assert compare.returncode == 0, compare.stderr
    assert "question(s) differ" in compare.stdout
    assert "q1 " in compare.stdout  # only run a answered question 1

    make_agent(slug="slow-reason", provider__options={"reply": "x", "ttft_ms": 1000})
    slow = cli(server, key, "submit", "--limit", "10", "--tools", "reason=slow-reason")
    run_c = int(slow.stdout.split("queued run ")[1].split()[0])
    cancel = cli(server, key, "cancel", str(run_c))
    assert cancel.returncode == 0, cancel.stderr
    assert f"run {run_c} cancelled" in cancel.stdout
    again = cli(server, key, "cancel", str(run_a))
    assert again.returncode == 2
    assert "HTTP 409" in again.stderr
    assert cli(server, "gaia_bad_key", "list").returncode == 2
    bad = cli(server, key, "submit", "--limit", "99")
    assert (bad.returncode, "HTTP 400" in bad.stderr) == (2, True)
    assert BenchmarkRun.objects.get(pk=run_c).status == "cancelled"


def test_server_killed_mid_run_recovers_in_the_next_server(
        suite: Any, gaia_server_factory: Any, bench_key: tuple[Any, str],
        make_agent: Any) -> None:
    make_agent(slug="slow-reason", provider__options={"reply": "x", "ttft_ms": 1000})
    env = {"REDIS_URL": "", "GAIA_EMBEDDED_WORKER": "1", "GAIA_BENCH_HEARTBEAT_SECONDS": "0.5",
           "GAIA_BENCH_STALE_SECONDS": "3", "GAIA_BENCH_REAP_SECONDS": "0.5"}
    headers = {"Authorization": f"Bearer {bench_key[1]}"}
    first = gaia_server_factory(**env)
    run_id = httpx.post(f"{first.url}{API}/runs", headers=headers, json={
        "limit": 4, "tools": {"reason": "slow-reason"}}).json()["id"]
    deadline = time.monotonic() + 60
    while BenchmarkRun.objects.get(pk=run_id).questions_done < 1:
        assert time.monotonic() < deadline
        time.sleep(0.1)
    first.process.kill()  # SIGKILL: no shutdown code runs
    first.process.wait(10)
    assert BenchmarkRun.objects.get(pk=run_id).status == "running"
    second = gaia_server_factory(**env)
    deadline = time.monotonic() + 60
    while (run := BenchmarkRun.objects.get(pk=run_id)).status not in ("succeeded", "failed"):
        assert time.monotonic() < deadline, (run.status, run.notes)
        time.sleep(0.2)
    assert run.status == "succeeded", run.error
    assert run.attempts == 2
    assert "re-queued after attempt 1" in run.notes
    assert run.worker.endswith(f":{second.process.pid}:embedded")
    assert sorted(run.results.values_list("question_index", flat=True)) == [0, 1, 2, 3]
