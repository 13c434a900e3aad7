"""Evaluating agents on real conversations, end to end: a suite made from 20 stored threads,
replayed against two agents (fake providers with different replies, one with a tool) and
judged, on a live server: its embedded worker (single-process mode), and with Redis two real
Celery workers sharing a run. Scores, diffs, the judge (and a judge that answers garbage),
the JSONL round trip, cancel and resume."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from django.conf import settings

from agents import services
from agents.kernel import llm
from agents.models import Thread
from benchmarks.models import BenchmarkResult, BenchmarkRun, RunPart
from tests.benchmarks.processes import Worker, start_worker
from tests.test_tracing import receiver  # noqa: F401 - a fixture

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]
API = "/api/v1/benchmarks"
VERDICT = '{"score": 0.75, "verdict": "same", "reason": "Says what the reference says."}'


def conversation(agent: Any, i: int) -> str:
    """A stored conversation: a user asks, the agent answered (the reference)."""
    start = services.thread_turn_begin(
        agent=agent, api_key=None, session_key=f"seed-{i}", thread_id=None, user="alice",
        incoming=[llm.Message(role="user", parts=(llm.TextPart(f"What is 2 plus {i}?"),))],
        workspace_root=None, dialect="chat", lease_seconds=60)
    assert start is not None
    services.thread_turn_finish(start=start, result=services.TurnResult(
        text=f"The answer is {2 + i}.", error="", finish_reason="stop", input_tokens=5,
        output_tokens=4, ttft_ms=3), dialect="chat")
    return str(start.thread_id)


@pytest.fixture
def stored(make_agent: Any) -> list[str]:
    """20 conversations of the agent ``support``, and the agents a replay compares."""
    support = make_agent(slug="support", provider__options={})
    ids = [conversation(support, i) for i in range(20)]
    # echoes the question: far from the references
    make_agent(slug="parrot", provider__name="parrot", provider__options={})
    # runs its calculator, then answers with the result: right for the first case only
    make_agent(slug="adder", provider__name="adder", tools=["calculator"],
               provider__options={"script": [
                   {"tool_calls": [{"name": "calculator", "arguments": {"expression": "2 + 0"}}]},
                   {"reply": "The answer is {results}."}]})
    make_agent(slug="judge", provider__name="judge", provider__options={"reply": VERDICT})
    make_agent(slug="muddled", provider__name="muddled",
               provider__options={"reply": "Looks fine to me!"})
    return ids


def client(server: Any, key: str) -> httpx.Client:
    return httpx.Client(base_url=server.url + API, timeout=15,
                        headers={"Authorization": f"Bearer {key}"})


def wait(http: httpx.Client, run_id: int, statuses: tuple[str, ...], timeout: float = 120,
         done_at_least: int = 0) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    while True:
        run = http.get(f"/runs/{run_id}").json()
        if run["status"] in statuses and run["progress"]["questions_done"] >= done_at_least:
            return run
        assert time.monotonic() < deadline, run
        time.sleep(0.1)


def check_scored(http: httpx.Client, run_id: int, *, judged: bool) -> dict[str, Any]:
    """What every replay of the suite against parrot and adder must show."""
    results = http.get(f"/runs/{run_id}/results").json()["results"]
    assert len(results) == 40
    by = {(r["question_index"], r["agent"]): r for r in results}
    assert by[(0, "adder")]["prediction"] == "The answer is 2."
    assert (by[(0, "adder")]["exact_match"], by[(0, "adder")]["f1"]) == (1.0, 1.0)
    assert by[(0, "adder")]["tool_calls"] == 1  # its own tool ran in the replayed turn
    assert by[(7, "adder")]["exact_match"] == 0.0  # "The answer is 2." against 9
    assert by[(7, "adder")]["f1"] == pytest.approx(2 / 3, abs=1e-4)  # answer, is: 2 of 3
    assert by[(3, "parrot")]["prediction"] == "What is 2 plus 3?"
    assert by[(3, "parrot")]["f1"] == 0.25  # "is": 1 of 5 words, 1 of 3
    assert by[(3, "parrot")]["similarity"] < by[(3, "adder")]["similarity"]
    assert all(r["status"] == "completed" and r["thread_id"] for r in results)
    if judged:
        assert {(r["judge_score"], r["judge_verdict"]) for r in results} == {(0.75, "same")}
    summary = http.get(f"/runs/{run_id}").json()["summary"]
    adder, parrot = summary["agents"]["adder"], summary["agents"]["parrot"]
    assert (adder["completed"], parrot["completed"]) == (20, 20)
    assert adder["exact_match"] == 0.05
    assert adder["f1"] > parrot["f1"]
    assert adder["tool_calls"] == 20
    pair = summary["pairs"]["adder vs parrot"]
    assert sum(pair.values()) == 20
    if not judged:  # by similarity: the adder is nearer the reference every time
        assert pair["win"] == 20
    else:  # the judge called them all equal
        assert pair == {"win": 0, "tie": 20, "loss": 0}
        assert adder["vs_reference"] == {"win": 0, "tie": 20, "loss": 0}
    return summary


@pytest.fixture
def single(gaia_server_factory: Any) -> Any:
    return gaia_server_factory(REDIS_URL="", GAIA_EMBEDDED_WORKER="1",
                               GAIA_BENCH_HEARTBEAT_SECONDS="0.3")


def test_suite_from_threads_replayed_scored_judged_and_diffed(
        single: Any, bench_key: tuple[Any, str], stored: list[str]) -> None:
    with client(single, bench_key[1]) as http:
        r = http.post("/suites", json={"name": "support-q4",
                                       "from_threads": {"agent": "support"}})
        assert r.status_code == 201, r.text
        suite = r.json()
        assert (suite["kind"], suite["version"], suite["question_count"]) == (
            "conversations", 1, 20)
        assert suite["created_by"] == "bench"
        cases = http.get(f"/suites/{suite['id']}/cases", params={"limit": 50}).json()
        first = cases["results"][0]
        assert first["input"] == [{"role": "user", "content": "What is 2 plus 0?"}]
        assert first["ideal"] == "The answer is 2."
        assert first["source_thread"] == stored[0]

        r = http.post("/runs", json={"suite": suite["id"], "agents": ["parrot", "adder"],
                                     "judge": "judge"})
        assert r.status_code == 201, r.text
        run = wait(http, r.json()["id"], ("succeeded", "failed"))
        assert run["status"] == "succeeded", run
        assert (run["kind"], run["agents"], run["judge"]) == ("replay", ["parrot", "adder"],
                                                               "judge")
        check_scored(http, run["id"], judged=True)

        # side by side, against the first target: the adder's regressions first
        page = http.get(f"/runs/{run['id']}/cases", params={"baseline": "adder"}).json()
        assert page["count"] == 20
        top = page["results"][0]
        parrot = next(c for c in top["candidates"] if c["agent"] == "parrot")
        assert parrot["delta"] == 0.0  # the judge scored both 0.75
        words = http.get(f"/runs/{run['id']}/cases").json()["results"]
        case0 = next(c for c in words if c["index"] == 0)
        adder = next(c for c in case0["candidates"] if c["agent"] == "adder")
        assert adder["diff"] == [["=", "The answer is 2."]]
        parrot0 = next(c for c in case0["candidates"] if c["agent"] == "parrot")
        assert parrot0["diff"] == [["-", "The answer"], ["+", "What"], ["=", "is"],
                                   ["-", "2."], ["+", "2 plus 0?"]]

        # replayed turns (and the judge's) are threads of the run, apart from the originals
        assert Thread.objects.filter(run_id=run["id"]).count() == 80
        assert Thread.objects.filter(run_id=None).count() == 20
        assert set(Thread.objects.filter(run_id=run["id"], agent__slug="adder").values_list(
            "pk", flat=True)) == set(BenchmarkResult.objects.filter(
                run_id=run["id"], agent="adder").values_list("thread_id", flat=True))

        # the suite's trend has the run
        trend = http.get(f"/suites/{suite['id']}/trend").json()
        assert [p["run_id"] for p in trend["points"]] == [run["id"]]
        assert trend["points"][0]["agents"]["adder"]["judge_score"] == 0.75


def test_a_judge_that_answers_garbage_is_an_error_of_its_cases_not_of_the_run(
        single: Any, bench_key: tuple[Any, str], stored: list[str]) -> None:
    with client(single, bench_key[1]) as http:
        suite = http.post("/suites", json={"name": "muddle",
                                           "from_threads": {"ids": stored[:3]}}).json()
        run = http.post("/runs", json={"suite": suite["id"], "agents": ["adder"],
                                       "judge": "muddled"}).json()
        run = wait(http, run["id"], ("succeeded", "failed"))
        assert run["status"] == "succeeded"
        results = http.get(f"/runs/{run['id']}/results").json()["results"]
        assert len(results) == 3
        assert all(r["judge_score"] is None for r in results)
        assert all(r["judge_error"].startswith("the judge did not answer JSON") for r in results)
        assert results[0]["exact_match"] == 1.0  # the other scores are there
        assert run["summary"]["agents"]["adder"]["judge_errors"] == 3


def test_jsonl_round_trip(single: Any, bench_key: tuple[Any, str], stored: list[str]) -> None:
    with client(single, bench_key[1]) as http:
        made = http.post("/suites", json={"name": "export-me",
                                          "from_threads": {"ids": stored[:5]}}).json()
        exported = http.get(f"/suites/{made['id']}/export")
        assert exported.status_code == 200
        assert exported.headers["content-type"].startswith("application/jsonl")
        lines = exported.text.splitlines()
        assert len(lines) == 5
        r = http.post("/suites", params={"name": "export-me"}, content=exported.content,
                      headers={"Content-Type": "application/jsonl"})
        assert r.status_code == 201, r.text
        again = r.json()
        assert (again["name"], again["version"], again["question_count"]) == ("export-me", 2, 5)
        assert http.get(f"/suites/{again['id']}/export").text == exported.text
        # an Evals sample from elsewhere, and what is not one
        other = b'{"input": [{"role": "user", "content": "Hi"}], "ideal": "Hello"}\n'
        r = http.post("/suites", params={"name": "evals"}, content=other,
                      headers={"Content-Type": "application/jsonl"})
        assert (r.status_code, r.json()["question_count"]) == (201, 1)
        r = http.post("/suites", params={"name": "bad"}, content=b'{"input": "x"}\nnot json\n',
                      headers={"Content-Type": "application/jsonl"})
        assert (r.status_code, r.json()["code"]) == (400, "invalid_jsonl")
        assert "line 2" in r.json()["detail"]


def test_cancel_and_resume(single: Any, bench_key: tuple[Any, str], stored: list[str],
                           make_agent: Any) -> None:
    make_agent(slug="slowpoke", provider__name="slowpoke",
               provider__options={"reply": "Slowly.", "ttft_ms": 150})
    with client(single, bench_key[1]) as http:
        suite = http.post("/suites", json={"name": "slow",
                                           "from_threads": {"agent": "support"}}).json()
        run = http.post("/runs", json={"suite": suite["id"], "agents": ["slowpoke"],
                                       "concurrency": 1}).json()
        wait(http, run["id"], ("running",), done_at_least=3)
        r = http.post(f"/runs/{run['id']}/cancel")
        assert r.json()["status"] == "cancelled"
        # the worker stops at its next heartbeat and keeps the partial summary
        deadline = time.monotonic() + 30
        while (stopped := http.get(f"/runs/{run['id']}").json())["summary"] is None:
            assert time.monotonic() < deadline, stopped
            time.sleep(0.1)
        assert stopped["status"] == "cancelled"
        partial = BenchmarkResult.objects.filter(run_id=run["id"]).count()
        assert 3 <= partial < 20
        assert stopped["summary"]["agents"]["slowpoke"]["completed"] >= 3
        r = http.post(f"/runs/{run['id']}/resume")
        assert r.status_code == 200, r.text
        done = wait(http, run["id"], ("succeeded", "failed"))
        assert done["status"] == "succeeded"
        assert BenchmarkResult.objects.filter(run_id=run["id"]).count() == 20  # none twice
        assert any(n.startswith("resumed by bench") for n in done["notes"])
        assert http.post(f"/runs/{run['id']}/resume").status_code == 409


# -- with Redis: real Celery workers sharing one run --------------------------------------


@pytest.fixture
def workers(gaia_server: Any) -> Iterator[Any]:
    if not settings.REDIS_URL:
        pytest.skip("needs REDIS_URL (Celery broker)")
    from gaia_site.celery import app

    app.control.purge()
    started: list[Worker] = []

    def start(name: str, **env: str) -> Worker:
        worker = start_worker(gaia_server.log_path.parent, name, settings.REDIS_URL, **env)
        started.append(worker)
        return worker

    yield start
    for worker in started:
        worker.stop()


def test_two_celery_workers_share_a_replay(gaia_server: Any, workers: Any,
                                          bench_key: tuple[Any, str],
                                          stored: list[str]) -> None:
    a, b = workers("replay-a"), workers("replay-b")
    with client(gaia_server, bench_key[1]) as http:
        suite = http.post("/suites", json={"name": "shared",
                                           "from_threads": {"agent": "support"}}).json()
        run = http.post("/runs", json={"suite": suite["id"], "agents": ["parrot", "adder"],
                                       "parallel": 2}).json()
        done = wait(http, run["id"], ("succeeded", "failed"))
        assert done["status"] == "succeeded", done
        check_scored(http, run["id"], judged=False)
    parts = list(RunPart.objects.filter(run_id=run["id"]).values_list("status", "worker"))
    assert [s for s, _ in parts] == ["done", "done"]
    pids = {w.split(":")[-1] for _, w in parts}
    assert pids == {str(a.process.pid), str(b.process.pid)}  # each worker took a part
    assert BenchmarkRun.objects.get(pk=run["id"]).questions_done == 40


def test_a_workers_replay_cases_are_traced(gaia_server: Any, workers: Any,
                                           bench_key: tuple[Any, str], stored: list[str],
                                           receiver: Any) -> None:  # noqa: F811
    """A Celery worker with ``OTEL_EXPORTER_OTLP_ENDPOINT`` traces the turns its replay cases
    make: their ``invoke_agent`` spans reach the receiver from the worker's service."""
    received, port = receiver
    workers("traced", OTEL_EXPORTER_OTLP_ENDPOINT=f"http://127.0.0.1:{port}",
            OTEL_BSP_SCHEDULE_DELAY="100", OTEL_SERVICE_NAME="gaia-worker")
    with client(gaia_server, bench_key[1]) as http:
        suite = http.post("/suites", json={"name": "traced",
                                           "from_threads": {"agent": "support"}}).json()
        run = http.post("/runs", json={"suite": suite["id"], "agents": ["parrot"]}).json()
        done = wait(http, run["id"], ("succeeded", "failed"))
        assert done["status"] == "succeeded", done
    spans = received.wait(lambda: [s for s in received.spans if s["service"] == "gaia-worker"
                                   and s["name"] == "invoke_agent parrot"], "a case's span")
    assert all(s["attrs"]["gen_ai.agent.name"] == "parrot" for s in spans)
    assert any(s["name"].startswith("chat ") for s in received.spans
               if s["service"] == "gaia-worker")
