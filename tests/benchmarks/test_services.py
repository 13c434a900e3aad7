"""Benchmark services and the executor, in process: real mesh agent processes, real storage."""

from __future__ import annotations

import json
import tarfile
from datetime import timedelta
from io import BytesIO
from pathlib import Path
from typing import Any

import pytest
from django.utils import timezone

from agents.kernel.exceptions import Conflict, InvalidRequest
from agents.outlet import realtime
from benchmarks import services
from benchmarks.executor import benchmark_run_execute
from benchmarks.kinds import mesh
from benchmarks.models import BASELINE_LABEL, BenchmarkResult, BenchmarkRun

pytestmark = pytest.mark.django_db(transaction=True)


def test_run_create_validates_and_names_the_field(suite: Any) -> None:
    cases = [
        ({"protocol": "xml"}, "protocol"),
        ({"limit": 31}, "limit"),
        ({"limit": 0}, "limit"),
        ({"indexes": [0, 30]}, "indexes"),
        ({"indexes": [1, 1]}, "indexes"),
        ({"indexes": []}, "indexes"),
        ({"limit": 2, "indexes": [1]}, "indexes"),
        ({"tools": {"dance": "deterministic"}}, "tools"),
        ({"tools": {"reason": "no-such-agent"}}, "tools.reason"),
        ({"tools": ["x"]}, "tools"),
        ({"question_timeout_s": 0.0}, "question_timeout_s"),
    ]
    for kwargs, param in cases:
        with pytest.raises(InvalidRequest) as info:
            mesh.benchmark_run_create(suite=suite, **kwargs)
        assert info.value.param == param, kwargs
    assert BenchmarkRun.objects.count() == 0


@pytest.mark.django_db  # inside the test's transaction: on-commit callbacks are captured
def test_run_create_announces_after_commit(suite: Any, events: list[dict[str, Any]],
                                           django_capture_on_commit_callbacks: Any) -> None:
    with django_capture_on_commit_callbacks(execute=True):
        run = mesh.benchmark_run_create(suite=suite, indexes=[3, 5], protocol="msgpack+crc")
        assert events == []  # not before the commit
    assert [e["event"] for e in events] == ["run_created"]
    payload = events[0]["run"]
    assert set(events[0]) == {"event", "timestamp", "run"}
    assert payload["id"] == run.pk
    assert payload["status"] == "queued"
    assert payload["question_indexes"] == [3, 5]
    assert payload["tools"] == dict.fromkeys(mesh.ROLES, "deterministic")
    assert payload["baseline"] is True
    assert payload["quality_label"] == BASELINE_LABEL
    realtime.event("run_created", run=payload)  # the schema accepts it


def test_suite_create_validates_shape_and_limits(db: Any) -> None:
    good = json.loads((Path(__file__).resolve().parents[2] / "mesh" / "data"
                       / "hotpotqa-dev-30.json").read_text())[:2]
    for bad in ([], {"a": 1}, [{"question": "q?"}], [{"question": "", "answer": "a",
                                                     "context": {"title": [], "sentences": []}}]):
        with pytest.raises(InvalidRequest) as info:
            services.suite_create(name="bad", questions=bad)
        assert info.value.param == "questions"
    suite = services.suite_create(name="two", questions=good, licence="CC BY-SA 4.0")
    assert suite.question_count == 2
    again = services.suite_create(name="two", questions=good[:1])  # an edit: a new version
    assert (again.version, again.question_count) == (2, 1)
    suite.refresh_from_db()
    assert (suite.version, suite.question_count) == (1, 2)  # the old version is unchanged


def test_claim_is_conditional(suite: Any) -> None:
    run = mesh.benchmark_run_create(suite=suite, limit=1)
    assert services.benchmark_run_claim(run_id=run.pk, worker="a") is not None
    assert services.benchmark_run_claim(run_id=run.pk, worker="b") is None
    assert services.benchmark_run_claim(run_id=999999, worker="b") is None
    run.refresh_from_db()
    assert (run.status, run.worker, run.attempts) == ("running", "a", 1)


def test_execute_two_questions_records_results_artifacts_and_events(
        suite: Any, storage_dir: Path, events: list[dict[str, Any]]) -> None:
    run = mesh.benchmark_run_create(suite=suite, indexes=[8, 12])
    assert benchmark_run_execute(run_id=run.pk, worker="w1") == "succeeded"
    assert benchmark_run_execute(run_id=run.pk, worker="w2") is None  # delivered twice
    run.refresh_from_db()
    assert (run.status, run.attempts, run.questions_done, run.questions_total) == (
        "succeeded", 1, 2, 2)
    results = list(run.results.order_by("question_index"))
    assert [(r.question_index, r.prediction, r.exact_match) for r in results] == [
        (8, "Terry Richardson", 1.0), (12, "1999", 1.0)]
    assert all(r.packets == 8 and r.bytes_tx > 1000 and r.tokens == 0 for r in results)
    assert run.summary["mean_exact_match"] == 1.0
    assert run.summary["quality_label"] == BASELINE_LABEL
    assert run.packets == 16  # pkt_cnt: 4 hellos + 4 data events a question
    assert run.bytes == sum(r.bytes_tx + r.bytes_rx for r in results)
    files = storage_dir / "benchmarks" / "runs" / str(run.pk)
    summary = json.loads((files / "summary.json").read_text())
    assert summary["count"] == 2
    assert json.loads((files / "q8" / "metrics.json").read_text())["answer"] == "Terry Richardson"
    with tarfile.open(files / "run_artifacts.tar.gz") as tar:
        names = tar.getnames()
    assert "q12/workspaces/3/agent.log" in names
    with tarfile.open(files / "q12" / "run_artifacts.tar.gz") as tar:
        assert "workspaces/0/memory.json" in tar.getnames()
    kinds = [e["event"] for e in events]
    assert kinds[:2] == ["run_created", "run_started"]
    assert kinds.count("question_finished") == 2
    assert "run_progress" in kinds
    assert kinds[-1] == "run_finished"
    for e in events:  # every event fits the outlet's schema
        realtime.event(e["event"], **{k: v for k, v in e.items()
                                      if k not in ("event", "timestamp")})
    finished = [e for e in events if e["event"] == "question_finished"]
    assert finished[0]["result"]["prediction"] == "Terry Richardson"
    assert events[-1]["run"]["status"] == "succeeded"


def test_requeued_run_resumes_after_the_last_recorded_question(
        suite: Any, storage_dir: Path) -> None:
    run = mesh.benchmark_run_create(suite=suite, indexes=[8, 12])
    services.benchmark_run_claim(run_id=run.pk, worker="dead")
    BenchmarkResult.objects.create(run=run, question_index=8, status="completed",
                                   prediction="from attempt 1", gold="Terry Richardson",
                                   metrics={"status": "completed", "question_index": 8,
                                            "exact_match": 0, "f1": 0.0})
    BenchmarkRun.objects.filter(pk=run.pk).update(
        heartbeat_at=timezone.now() - timedelta(seconds=120))
    assert services.benchmark_run_recover_stale(stale_after_s=30) == [run.pk]
    run.refresh_from_db()
    assert run.status == "queued"
    assert "re-queued after attempt 1" in run.notes
    assert benchmark_run_execute(run_id=run.pk, worker="w2") == "succeeded"
    run.refresh_from_db()
    assert run.attempts == 2
    got = {r.question_index: r.prediction for r in run.results.all()}
    assert got == {8: "from attempt 1", 12: "1999"}  # q8 was not run again
    assert run.summary["count"] == 2
    with tarfile.open(storage_dir / "benchmarks" / "runs" / str(run.pk)
                      / "run_artifacts.tar.gz") as tar:
        names = tar.getnames()
    assert "q12/workspaces/3/agent.log" in names
    assert "q12/metrics.json" in names


def test_stale_run_past_its_attempts_fails_with_the_reason(suite: Any) -> None:
    run = mesh.benchmark_run_create(suite=suite, limit=1)
    services.benchmark_run_claim(run_id=run.pk, worker="gone")
    BenchmarkRun.objects.filter(pk=run.pk).update(
        attempts=2, heartbeat_at=timezone.now() - timedelta(seconds=120))
    fresh = mesh.benchmark_run_create(suite=suite, limit=1)
    services.benchmark_run_claim(run_id=fresh.pk, worker="alive")
    assert services.benchmark_run_recover_stale(stale_after_s=30, max_attempts=2) == [run.pk]
    run.refresh_from_db()
    assert run.status == "failed"
    assert "worker gone lost" in run.error
    assert "not retried" in run.error
    assert BenchmarkRun.objects.get(pk=fresh.pk).status == "running"


def test_cancel_queued_never_starts_and_finished_conflicts(suite: Any, storage_dir: Path
                                                          ) -> None:
    run = mesh.benchmark_run_create(suite=suite, limit=1)
    services.benchmark_run_cancel(run=run)
    services.benchmark_run_cancel(run=run)  # idempotent
    assert benchmark_run_execute(run_id=run.pk) is None
    assert BenchmarkRun.objects.get(pk=run.pk).status == "cancelled"
    done = mesh.benchmark_run_create(suite=suite, limit=1)
    benchmark_run_execute(run_id=done.pk)
    with pytest.raises(Conflict):
        services.benchmark_run_cancel(run=done)


def test_time_limit_fails_the_run_with_the_reason(suite: Any, storage_dir: Path,
                                                  make_agent: Any) -> None:
    make_agent(slug="slow-reason", provider__options={"reply": "x", "ttft_ms": 3000})
    run = mesh.benchmark_run_create(suite=suite, limit=3, time_limit_s=2.0,
                                        tools={"reason": "slow-reason"})
    assert benchmark_run_execute(run_id=run.pk) == "failed"
    run.refresh_from_db()
    assert "time limit of 2 s reached" in run.error
    assert run.questions_done == 0


def test_gaia_agents_as_tools_count_tokens_per_agent(suite: Any, storage_dir: Path,
                                                     make_agent: Any) -> None:
    make_agent(slug="fake-reason", instructions="Answer briefly.",
               provider__options={"reply": "Terry Richardson"})
    make_agent(slug="fake-search", provider__options={"reply": "Annie Morton Terry"})
    run = mesh.benchmark_run_create(
        suite=suite, indexes=[8], tools={"reason": "fake-reason", "search": "fake-search"})
    assert benchmark_run_execute(run_id=run.pk) == "succeeded"
    run.refresh_from_db()
    result = run.results.get()
    assert result.prediction == "Terry Richardson"
    assert set(result.tokens_by_agent) == {"fake-reason", "fake-search"}
    assert all(n > 0 for n in result.tokens_by_agent.values())
    assert result.tokens == sum(result.tokens_by_agent.values())  # the wire agrees
    assert run.baseline is True  # extract and triple stayed deterministic
    assert run.summary["tokens_by_agent"] == result.tokens_by_agent


def test_archive_bytes_are_gzip(suite: Any, storage_dir: Path) -> None:
    run = mesh.benchmark_run_create(suite=suite, limit=1)
    benchmark_run_execute(run_id=run.pk)
    data = (storage_dir / "benchmarks" / "runs" / str(run.pk) / "q0"
            / "run_artifacts.tar.gz").read_bytes()
    with tarfile.open(fileobj=BytesIO(data)) as tar:
        assert any(n.endswith("agent.log") for n in tar.getnames())


def test_builtin_suite_migration_creates_the_30_questions_once() -> None:
    import importlib

    from django.apps import apps

    from benchmarks.models import BenchmarkSuite
    from mesh.suite import parse_suite

    migration = importlib.import_module("benchmarks.migrations.0002_bench_builtin_suite")
    BenchmarkSuite.objects.filter(name="hotpotqa-dev-30").delete()
    migration.create(apps, None)
    migration.create(apps, None)  # idempotent
    suite = BenchmarkSuite.objects.get(name="hotpotqa-dev-30")
    assert (suite.question_count, suite.builtin, suite.licence) == (30, True, "CC BY-SA 4.0")
    assert len(parse_suite(suite.questions)) == 30


def test_a_run_submitted_while_the_broker_is_away_is_dispatched_later(
        suite: Any, settings: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    from benchmarks.tasks import benchmark_run_execute as task

    settings.REDIS_URL = "redis://127.0.0.1:1/0"  # dispatch goes to Celery
    sent: list[list[int]] = []

    class Sent:
        id = "task-1"

    def down(**kwargs: Any) -> Any:
        raise OSError("connection refused")

    monkeypatch.setattr(task, "apply_async", down)
    run = mesh.benchmark_run_create(suite=suite, limit=1)  # no 500, stays queued
    run.refresh_from_db()
    assert (run.status, run.celery_task_id) == ("queued", "")

    def up(**kwargs: Any) -> Any:
        sent.append(kwargs["args"])
        return Sent()

    monkeypatch.setattr(task, "apply_async", up)
    BenchmarkRun.objects.filter(pk=run.pk).update(
        queued_at=timezone.now() - timedelta(seconds=10))
    assert services.benchmark_run_recover_stale() == [run.pk]
    assert sent == [[run.pk]]
    run.refresh_from_db()
    assert run.celery_task_id == "task-1"
    assert services.benchmark_run_recover_stale() == []  # sent once
