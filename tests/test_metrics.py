"""``/metrics`` (issue 40, its Prometheus half): who may read it, that its counters are the
requests, turns, tokens, tool calls and upstream errors just made, added up across the two
worker processes of ``gaia api start --workers 2``, and a real Prometheus (Debian's package)
scraping it with a ``metrics`` key and answering a PromQL query over ``gaia_requests_total``.
Parsed with prometheus-client's own parser."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import pytest
from django.test import override_settings
from prometheus_client.parser import text_string_to_metric_families

from agents.models import ApiKey
from gaia_site.metrics import address_allowed
from tests.conftest import ROOT, GaiaServer, free_port, live_database_url

pytestmark = pytest.mark.django_db(transaction=True)

CHAT = "v1/chat/completions"


def samples(text: str, name: str) -> dict[tuple[tuple[str, str], ...], float]:
    """The samples named ``name`` by their labels (sorted), from Prometheus' text format."""
    found = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == name:
                found[tuple(sorted(sample.labels.items()))] = sample.value
    return found


def value(text: str, name: str, **labels: str) -> float:
    """The sum of ``name``'s samples whose labels include ``labels``."""
    return sum(v for key, v in samples(text, name).items()
               if all((k, want) in key for k, want in labels.items()))


def scrape(server: GaiaServer, key: str) -> str:
    response = httpx.get(server.url + "/metrics", headers={"Authorization": f"Bearer {key}"},
                         timeout=30)
    assert response.status_code == 200, response.text
    assert response.headers["content-type"].startswith("text/plain; version=0.0.4")
    return response.text


def chat(server: GaiaServer, key: str, model: str) -> int:
    return httpx.post(server.v1 + "/chat/completions", timeout=60,
                      headers={"Authorization": f"Bearer {key}"},
                      json={"model": model, "messages": [{"role": "user", "content": "hi"}]}
                      ).status_code


@pytest.fixture
def metrics_key(make_key: Any) -> str:
    return make_key(name="prometheus", scopes=[ApiKey.Scope.METRICS])[1]


def test_who_may_read_metrics(gaia_server: GaiaServer, api_key: str, metrics_key: str,
                              gaia_server_factory: Any) -> None:
    """No key: 401; a key without the scope (a chat key): 403; a bad key: 401; all in the
    OpenAI envelope. A metrics key: 200. Without a key from an allowed address: 200."""
    url = gaia_server.url + "/metrics"
    nobody = httpx.get(url)
    assert nobody.status_code == 401
    assert nobody.json()["error"]["type"] == "invalid_request_error"  # OpenAI's, for a 401
    assert "'metrics' scope" in nobody.json()["error"]["message"]
    wrong = httpx.get(url, headers={"Authorization": f"Bearer {api_key}"})
    assert wrong.status_code == 403
    assert wrong.json()["error"]["code"] == "insufficient_scope"
    bad = httpx.get(url, headers={"Authorization": "Bearer gaia_00000000_nope"})
    assert bad.status_code == 401
    text = scrape(gaia_server, metrics_key)
    assert value(text, "gaia_approvals_waiting") == 0
    assert "gaia_benchmark_workers_live" in text
    allowed = gaia_server_factory(GAIA_METRICS_ALLOWED_IPS="10.0.0.0/8,127.0.0.1")
    assert httpx.get(allowed.url + "/metrics").status_code == 200


@pytest.mark.parametrize(("listed", "address", "allowed"), [
    (["127.0.0.1"], "127.0.0.1", True),
    (["127.0.0.1"], "127.0.0.10", False),  # not a text prefix
    (["10.0.0.0/8"], "10.2.3.4", True),
    (["10.0.0.0/8"], "100.2.3.4", False),
    (["127.0.0.1"], "::ffff:127.0.0.1", True),  # an IPv4 peer on a dual-stack socket
    (["::1"], "::1", True),
    ([], "127.0.0.1", False),
    (["127.0.0.1"], "not an address", False),
    (["127.0.0.1"], None, False),
])
def test_allowed_addresses_are_compared_parsed(listed: list[str], address: str | None,
                                               allowed: bool) -> None:
    with override_settings(GAIA_METRICS_ALLOWED_IPS=listed):
        assert address_allowed(address) is allowed


def start_workers(tmp: Path, workers: int, *, how: str = "cli") -> GaiaServer:
    """``gaia api start --workers N`` in the foreground (it execs uvicorn), as an operator
    runs it; or (``how="uvicorn"``) a bare ``uvicorn --workers N``."""
    port = free_port()
    log_path = tmp / f"gaia-{port}.log"
    env = {**os.environ, "DATABASE_URL": live_database_url(), "GAIA_DATA_DIR": str(tmp),
           "GAIA_EMBEDDED_WORKER": "0", "GAIA_BENCH_REAP_SECONDS": "3600",
           "PYTHONUNBUFFERED": "1"}
    env.pop("PROMETHEUS_MULTIPROC_DIR", None)
    cmd = [sys.executable, "-m", "gaia_site.cli", "api", "start", "--host", "127.0.0.1",
           "--port", str(port), "--workers", str(workers)]
    if how == "uvicorn":
        cmd = [sys.executable, "-m", "uvicorn", "gaia_site.asgi:application", "--host",
               "127.0.0.1", "--port", str(port), "--workers", str(workers)]
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT)
    server = GaiaServer(f"http://127.0.0.1:{port}", proc, log_path)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        assert proc.poll() is None, server.log()
        try:
            if httpx.get(server.url + "/health", timeout=2).status_code == 200:
                return server
        except httpx.HTTPError:
            pass
        time.sleep(0.2)
    server.stop()
    raise RuntimeError(f"Gaia did not start:\n{server.log()}")


@pytest.fixture(params=["cli", "uvicorn"])
def two_workers(request: pytest.FixtureRequest, tmp_path: Path) -> Any:
    """Two workers, as ``gaia api start --workers 2`` runs them or as a bare ``uvicorn
    --workers 2`` does (its workers find their shared directory by their parent), and that
    directory."""
    server = start_workers(tmp_path, 2, how=request.param)
    directory = tmp_path / "metrics" / server.url.rsplit(":", 1)[1]
    if request.param == "uvicorn":
        directory = Path(tempfile.gettempdir()) / f"gaia-metrics-uvicorn-{server.process.pid}"
    yield server, directory
    server.stop()
    if request.param == "uvicorn":
        shutil.rmtree(directory, ignore_errors=True)


def test_counters_are_the_requests_made_across_two_workers(
        two_workers: Any, api_key: str, metrics_key: str, make_agent: Any) -> None:
    """Concurrent chats to a slow fake agent (so both workers take some), a tool turn, a turn
    whose provider fails and a request for an unknown model: every scrape, whichever worker
    answers it, counts exactly them, by route, agent and status; tokens by agent and model;
    the tool call by tool and outcome; the upstream error by provider and kind."""
    server, directory = two_workers
    make_agent(slug="slow", provider__name="slow-fake", provider__options={
        "reply": "Hello there.", "delay_ms": 400})
    make_agent(slug="calc", tools=["calculator"], provider__options={"script": [
        {"tool_calls": [{"name": "calculator", "arguments": {"expression": "6 * 7"}}]},
        {"reply": "It is {results}."}]})
    make_agent(slug="down", provider__name="down-fake", provider__options={"fail": "before"})
    with ThreadPoolExecutor(12) as pool:
        statuses = list(pool.map(lambda _: chat(server, api_key, "slow"), range(24)))
    assert statuses == [200] * 24
    assert chat(server, api_key, "calc") == 200
    assert chat(server, api_key, "down") == 502
    assert chat(server, api_key, "no-such-agent") == 404

    pids = {p.stem.rsplit("_", 1)[1] for p in directory.glob("counter_*.db")}
    assert len(pids) == 2, f"both workers should have counted: {sorted(pids)}"
    for _ in range(4):  # any worker may answer a scrape: each must add up both
        text = scrape(server, metrics_key)
        assert value(text, "gaia_requests_total", route=CHAT, agent="slow", status="200") == 24
        assert value(text, "gaia_requests_total", route=CHAT, agent="calc", status="200") == 1
        assert value(text, "gaia_requests_total", route=CHAT, agent="down", status="502") == 1
        # An unknown model is no label value: what a client names never becomes one.
        assert value(text, "gaia_requests_total", route=CHAT, agent="", status="404") == 1
        assert not [k for k in samples(text, "gaia_requests_total")
                    if ("agent", "no-such-agent") in k]
        assert value(text, "gaia_request_duration_seconds_count", route=CHAT) == 27
        assert value(text, "gaia_turns_total", agent="slow", outcome="stop") == 24
        assert value(text, "gaia_tokens_total", agent="slow", type="output") > 0
        assert value(text, "gaia_tokens_total", agent="slow", model="fake-model",
                     type="input") > 0
        assert value(text, "gaia_tool_calls_total", agent="calc", tool="calculator",
                     outcome="completed") == 1
        assert value(text, "gaia_tool_call_duration_seconds_count", agent="calc") == 1
        assert value(text, "gaia_upstream_errors_total", provider="down-fake",
                     kind="upstream") == 1
        assert value(text, "gaia_time_to_first_token_seconds_count", agent="slow") == 24
        # Gaia's own time (the request's less the 400 ms the fake provider took) is observed
        # for every turn request; its size is the perf scripts' business, not a test's.
        assert value(text, "gaia_overhead_seconds_count", route=CHAT) >= 25
        assert value(text, "gaia_turns_in_flight") == 0


def test_a_real_prometheus_scrapes_gaia(gaia_server: GaiaServer, api_key: str,
                                        metrics_key: str, echo_agent: Any,
                                        tmp_path: Path) -> None:
    """Debian's Prometheus, configured as the README says (a bearer ``metrics`` key), scrapes
    Gaia every second; a PromQL query over ``gaia_requests_total`` returns the requests just
    made."""
    binary = shutil.which("prometheus")
    assert binary, "scripts/bootstrap.sh installs Debian's prometheus for this test"
    # The server is the session's: other tests' requests to echo are counted already.
    before = value(scrape(gaia_server, metrics_key), "gaia_requests_total", route=CHAT,
                   agent="echo", status="200")
    for _ in range(5):
        assert chat(gaia_server, api_key, "echo") == 200
    target = gaia_server.url.removeprefix("http://")
    (tmp_path / "prometheus.yml").write_text(f"""
global:
  scrape_interval: 1s
scrape_configs:
  - job_name: gaia
    metrics_path: /metrics
    authorization:
      credentials: {metrics_key}
    static_configs:
      - targets: ["{target}"]
""")
    port = free_port()
    with open(tmp_path / "prometheus.log", "wb") as log:
        prom = subprocess.Popen(
            [binary, f"--config.file={tmp_path / 'prometheus.yml'}",
             f"--storage.tsdb.path={tmp_path / 'data'}", f"--web.listen-address=127.0.0.1:{port}"],
            stdout=log, stderr=subprocess.STDOUT)
    try:
        query = f'sum(gaia_requests_total{{job="gaia",route="{CHAT}",agent="echo",status="200"}})'
        got: Any = None
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            assert prom.poll() is None, (tmp_path / "prometheus.log").read_text()
            try:
                answer = httpx.get(f"http://127.0.0.1:{port}/api/v1/query",
                                   params={"query": query}, timeout=5).json()
                result = answer["data"]["result"]
                got = float(result[0]["value"][1]) if result else None
                if got == before + 5:
                    break
            except (httpx.HTTPError, ValueError, KeyError):
                pass
            time.sleep(0.5)
        assert got == before + 5, (got, (tmp_path / "prometheus.log").read_text()[-2000:])
        health = httpx.get(f"http://127.0.0.1:{port}/api/v1/targets", timeout=5).json()
        [active] = health["data"]["activeTargets"]
        assert active["health"] == "up", active
        # The Grafana dashboard in docs/: each query is PromQL this Prometheus accepts, over
        # families Gaia exposes.
        exposed = {f.name for f in text_string_to_metric_families(
            scrape(gaia_server, metrics_key))}
        dashboard = json.loads((ROOT / "docs" / "grafana" / "gaia-dashboard.json").read_text())
        exprs = [t["expr"] for panel in dashboard["panels"] for t in panel["targets"]]
        assert len(exprs) >= 15
        for expr in exprs:
            answer = httpx.get(f"http://127.0.0.1:{port}/api/v1/query", timeout=5, params={
                "query": expr.replace("$__rate_interval", "1m")}).json()
            assert answer["status"] == "success", (expr, answer)
            names = {n.removesuffix("_bucket") for n in re.findall(r"gaia_[a-z_]+", expr)}
            assert names <= exposed | {n + "_total" for n in exposed}, (expr, names - exposed)
    finally:
        prom.send_signal(signal.SIGTERM)
        try:
            prom.wait(10)
        except subprocess.TimeoutExpired:
            prom.kill()


def test_counts_of_one_process(gaia_server: GaiaServer, api_key: str, metrics_key: str,
                               echo_agent: Any) -> None:
    """One process (``./run``, a bare uvicorn): no shared directory, the same families."""
    before = scrape(gaia_server, metrics_key)
    assert chat(gaia_server, api_key, "echo") == 200
    after = scrape(gaia_server, metrics_key)
    assert value(after, "gaia_requests_total", route=CHAT, agent="echo", status="200") == value(
        before, "gaia_requests_total", route=CHAT, agent="echo", status="200") + 1
    assert value(after, "gaia_tokens_total", agent="echo", type="output") > value(
        before, "gaia_tokens_total", agent="echo", type="output")


def test_spend_and_budgets_are_metrics(gaia_server: GaiaServer, api_key: str,
                                       metrics_key: str, make_agent: Any) -> None:
    """What turns cost, by agent and model (a counter), and each budget's limit, spend and
    what remains (gauges read from the database at the scrape)."""
    from datetime import UTC, datetime

    from agents.models import Budget, Message, ModelPrice

    agent = make_agent(slug="priced", provider__options={"reply": "one two three four"})
    ModelPrice.objects.create(provider=agent.provider, model="", input_per_mtok=5,
                              output_per_mtok=20)
    Budget.objects.create(name="priced-day", scope="agent", agent=agent, unit="usd",
                          limit=10**9, period="day",  # one dollar
                          period_start=datetime(1970, 1, 1, tzinfo=UTC))
    before = scrape(gaia_server, metrics_key)
    assert chat(gaia_server, api_key, "priced") == 200
    after = scrape(gaia_server, metrics_key)
    cost = float(Message.objects.get(thread__agent=agent, role="assistant").cost)
    assert cost > 0
    spent = value(after, "gaia_spend_usd_total", agent="priced") - value(
        before, "gaia_spend_usd_total", agent="priced")
    assert abs(spent - cost) < 1e-12
    labels = {"budget": "priced-day", "scope": "agent", "unit": "usd"}
    assert value(after, "gaia_budget_limit", **labels) == 1.0
    assert abs(value(after, "gaia_budget_spent", **labels) - cost) < 1e-12
    assert abs(value(after, "gaia_budget_remaining", **labels) - (1.0 - cost)) < 1e-12
