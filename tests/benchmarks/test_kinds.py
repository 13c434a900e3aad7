"""A kind of run is a module registered with benchmarks.registry, and nothing more: a third kind,
known only to this test, is submitted through the API, executed by the executor, cancelled
mid-run, resumed, and recovered from a lost worker through the one lifecycle, with no line of
the view or the executor aware of it."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta
from functools import partial
from typing import Any

import pytest
from django.db import transaction
from django.utils import timezone
from rest_framework.test import APIClient

from benchmarks import services
from benchmarks.executor import benchmark_run_execute
from benchmarks.models import BenchmarkResult, BenchmarkRun, BenchmarkSuite, RunPart
from benchmarks.registry import kind_register, kind_unregister

pytestmark = pytest.mark.django_db(transaction=True)
BASE = "/api/v1/benchmarks"


class EchoKind:
    """Answers each question with the question itself, in parts like a replay."""

    name = "echo"
    page = ("benchmarks/run.html", "run")

    def __init__(self) -> None:
        self.cancel_at: int | None = None  # an operator cancels the run before this item

    def accepts(self, suite: BenchmarkSuite, data: dict[str, Any]) -> bool:
        return False  # only when a submission names it

    def create(self, *, suite: BenchmarkSuite, data: dict[str, Any], submitted_by: Any = None,
               submitted_by_user: Any = None) -> BenchmarkRun:
        selection, chosen = services.run_selection(suite, data.get("limit"), None)
        run = BenchmarkRun(kind=self.name, suite=suite, selection=selection,
                           question_indexes=chosen, protocol="echo",
                           questions_total=len(chosen))
        with transaction.atomic():
            return services.benchmark_run_save(run, submitted_by=submitted_by,
                                               submitted_by_user=submitted_by_user,
                                               parts=data.get("parallel", 1), exclude=("tools",))

    def again(self, run: BenchmarkRun, *, submitted_by_user: Any = None) -> BenchmarkRun:
        raise NotImplementedError

    async def execute(self, claim: services.Claim, db: ThreadPoolExecutor) -> str | None:
        def call(fn: Any, /, **kwargs: Any) -> Any:
            return asyncio.get_running_loop().run_in_executor(db, partial(fn, **kwargs))

        run, progress = claim.run, services.Progress()
        parts = await call(run.parts.count)
        done = set(await call(_recorded, run_id=run.pk))
        for index in run.question_indexes[claim.part.index::parts]:
            if index in done:
                continue
            if index == self.cancel_at:
                await call(services.benchmark_run_cancel, run=run)
            if not await call(services.benchmark_run_heartbeat, claim=claim, progress=progress):
                await call(services.benchmark_run_summary_keep, run_id=run.pk,
                           summary=await call(self.summarize, run=run))
                return None
            question = run.suite.questions[index]["question"]
            fields = {"question_index": index, "question": question, "status": "completed",
                      "prediction": question, "gold": run.suite.questions[index]["answer"]}
            if await call(services.benchmark_result_record, claim=claim, fields=fields) is None:
                return None
        ended = await call(services.benchmark_run_finish, claim=claim,
                           status=BenchmarkRun.Status.SUCCEEDED,
                           summarize=partial(self.summarize, run), progress=progress)
        return BenchmarkRun.Status.SUCCEEDED if ended else None

    def summarize(self, run: BenchmarkRun) -> dict[str, Any]:
        return {"kind": self.name, "echoed": sorted(_recorded(run_id=run.pk))}

    def label(self, run: BenchmarkRun) -> str:
        return f"echo of {run.suite.label}"

    def columns(self, run: BenchmarkRun) -> list[tuple[str, str | None]]:
        return [(str(run.pk), None)]


def _recorded(*, run_id: int) -> list[int]:
    return list(BenchmarkResult.objects.filter(run_id=run_id).values_list("question_index",
                                                                         flat=True))


@pytest.fixture
def echo() -> Iterator[EchoKind]:
    kind = EchoKind()
    kind_register(kind)
    yield kind
    kind_unregister(kind.name)


@pytest.fixture
def api(bench_key: tuple[Any, str]) -> APIClient:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {bench_key[1]}")
    return client


def test_a_registered_kind_runs_through_the_one_lifecycle(
        suite: Any, echo: EchoKind, api: APIClient, storage_dir: Any) -> None:
    r = api.post(f"{BASE}/runs", {"kind": "echo", "limit": 4, "parallel": 2}, format="json")
    assert r.status_code == 201, r.json()
    run = r.json()
    assert (run["kind"], run["status"], run["progress"]["questions_total"]) == ("echo", "queued", 4)
    assert run["quality_label"] == f"echo of {suite.label}"
    assert RunPart.objects.filter(run_id=run["id"]).count() == 2

    # cancelled mid-run by an operator: both parts stop, the partial summary stays
    echo.cancel_at = 2
    assert benchmark_run_execute(run_id=run["id"], worker="w1") is None
    stopped = api.get(f"{BASE}/runs/{run['id']}").json()
    assert stopped["status"] == "cancelled"
    assert stopped["summary"] == {"kind": "echo", "echoed": [0]}

    # resumed: what it recorded stays, the rest runs, the last part ends the run
    echo.cancel_at = None
    r = api.post(f"{BASE}/runs/{run['id']}/resume")
    assert (r.status_code, r.json()["status"]) == (200, "queued")
    assert benchmark_run_execute(run_id=run["id"], worker="w2") == "succeeded"
    done = api.get(f"{BASE}/runs/{run['id']}").json()
    assert done["summary"] == {"kind": "echo", "echoed": [0, 1, 2, 3]}
    assert done["progress"]["questions_done"] == 4
    assert any(note.startswith("resumed by bench") for note in done["notes"])
    results = api.get(f"{BASE}/runs/{run['id']}/results").json()["results"]
    assert [r["prediction"] for r in results] == [q["question"] for q in suite.questions[:4]]
    assert benchmark_run_execute(run_id=run["id"], worker="w3") is None  # delivered twice

    # an unknown kind is a 400 naming the field, as is a kind named for a suite it cannot run
    r = api.post(f"{BASE}/runs", {"kind": "nope"}, format="json")
    assert (r.status_code, r.json()["param"]) == (400, "kind")
    talks = BenchmarkSuite.objects.create(name="talks", kind="conversations", question_count=1)
    r = api.post(f"{BASE}/runs", {"kind": "mesh", "suite": talks.pk}, format="json")
    assert (r.status_code, r.json()["param"]) == (400, "suite")


def test_a_registered_kinds_lost_part_is_recovered(suite: Any, echo: EchoKind,
                                                    api: APIClient) -> None:
    run_id = api.post(f"{BASE}/runs", {"kind": "echo", "limit": 2}, format="json").json()["id"]
    claim = services.benchmark_run_claim(run_id=run_id, worker="dead")
    assert claim is not None
    assert claim.part is not None
    RunPart.objects.filter(run_id=run_id).update(
        heartbeat_at=timezone.now() - timedelta(seconds=120))
    assert services.benchmark_run_recover_stale(stale_after_s=30) == [run_id]
    assert BenchmarkRun.objects.get(pk=run_id).status == "queued"
    assert benchmark_run_execute(run_id=run_id, worker="w2") == "succeeded"
    assert sorted(_recorded(run_id=run_id)) == [0, 1]
