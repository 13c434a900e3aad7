"""The /api/v1/benchmarks/ contract in process: auth, validation, shapes, downloads."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from django.utils import timezone
from rest_framework.test import APIClient

from benchmarks import services
from benchmarks.executor import benchmark_run_execute
from benchmarks.kinds import mesh
from benchmarks.models import BASELINE_LABEL, BenchmarkRun

BASE = "/api/v1/benchmarks"


@pytest.fixture
def client(bench_key: tuple[Any, str]) -> APIClient:
    c = APIClient()
    c.credentials(HTTP_AUTHORIZATION=f"Bearer {bench_key[1]}")
    return c


@pytest.mark.django_db
def test_auth_needs_a_benchmarks_or_operator_key_or_staff(make_key: Any, suite: Any,
                                              django_user_model: Any) -> None:
    anon = APIClient()
    r = anon.get(f"{BASE}/runs")
    assert r.status_code == 401
    assert r.json()["code"] == "missing_api_key"
    r = anon.get(f"{BASE}/runs", HTTP_AUTHORIZATION="Bearer gaia_nothing_x")
    assert (r.status_code, r.json()["code"]) == (401, "invalid_api_key")
    _, chat = make_key(name="chat")  # chat scope only
    r = anon.get(f"{BASE}/runs", HTTP_X_API_KEY=chat)
    assert (r.status_code, r.json()["code"]) == (403, "insufficient_scope")
    _, bench = make_key(name="b", scopes=["benchmarks"])
    assert anon.get(f"{BASE}/runs", HTTP_X_API_KEY=bench).status_code == 200
    _, ops = make_key(name="o", scopes=["operator"])  # operators steer runs too
    assert anon.get(f"{BASE}/runs", HTTP_X_API_KEY=ops).status_code == 200
    user = django_user_model.objects.create_user("op", password="pw-123456")
    anon.force_login(user)
    r = anon.get(f"{BASE}/runs")
    assert (r.status_code, r.json()["code"]) == (403, "staff_required")
    user.is_staff = True
    user.save()
    assert anon.get(f"{BASE}/runs").status_code == 200


@pytest.mark.django_db
def test_post_run_validation_names_the_field(client: APIClient, suite: Any) -> None:
    cases = [
        ({"limit": "many"}, "limit"),
        ({"limit": 0}, "limit"),
        ({"limit": 99}, "limit"),
        ({"indexes": [0, 99]}, "indexes"),
        ({"indexes": "0,1"}, "indexes"),
        ({"protocol": "xml"}, "protocol"),
        ({"suite": "nope"}, "suite"),
        ({"tools": {"reason": "ghost"}}, "tools.reason"),
        ({"tools": 3}, "tools"),
        ({"question_timeout_s": -1}, "question_timeout_s"),
        ({"limmit": 2}, "limmit"),
    ]
    for body, param in cases:
        r = client.post(f"{BASE}/runs", body, format="json")
        assert r.status_code == 400, (body, r.content)
        data = r.json()
        assert data["param"] == param, (body, data)
        assert data["code"] in ("invalid", "agent_not_found")
        assert data["detail"]
    r = client.post(f"{BASE}/runs", data=b"[1, 2]", content_type="application/json")
    assert r.status_code == 400
    r = client.post(f"{BASE}/runs", data=b"{not json", content_type="application/json")
    assert (r.status_code, r.json()["code"]) == (400, "parse_error")
    assert BenchmarkRun.objects.count() == 0


@pytest.mark.django_db
def test_post_run_list_filters_and_pages(client: APIClient, suite: Any,
                                         bench_key: tuple[Any, str]) -> None:
    r = client.post(f"{BASE}/runs", {"limit": 2, "protocol": "msgpack"}, format="json")
    assert r.status_code == 201, r.content
    run = r.json()
    assert r["Location"] == f"{BASE}/runs/{run['id']}"
    assert run["status"] == "queued"
    assert run["submitted_by"] == "bench"
    assert run["question_indexes"] == [0, 1]
    assert run["quality_label"] == BASELINE_LABEL
    for _ in range(3):
        client.post(f"{BASE}/runs", {"indexes": [4]}, format="json")
    BenchmarkRun.objects.filter(pk=run["id"]).update(status="failed")
    listing = client.get(f"{BASE}/runs", {"limit": 2}).json()
    assert listing["count"] == 4
    assert len(listing["results"]) == 2
    assert listing["next"]
    assert [x["id"] for x in client.get(f"{BASE}/runs", {"status": "failed"}).json()[
        "results"]] == [run["id"]]
    assert client.get(f"{BASE}/runs", {"protocol": "msgpack"}).json()["count"] == 1
    assert client.get(f"{BASE}/runs", {"suite": "hotpotqa-dev-30"}).json()["count"] == 4
    assert client.get(f"{BASE}/runs", {"suite": "other"}).json()["count"] == 0
    assert client.get(f"{BASE}/runs", {"agent": "mesh-reason"}).json()["count"] == 0
    future = (timezone.now() + timedelta(hours=1)).isoformat()
    assert client.get(f"{BASE}/runs", {"since": future}).json()["count"] == 0
    for bad in ({"status": "done"}, {"since": "yesterday"}, {"limit": 0}):
        r = client.get(f"{BASE}/runs", bad)
        assert r.status_code == 400
        assert r.json()["param"] == next(iter(bad))


@pytest.mark.django_db(transaction=True)
def test_results_artifacts_compare_cancel(client: APIClient, suite: Any, storage_dir: Path,
                                          make_agent: Any) -> None:
    make_agent(slug="fake-reason", provider__options={"reply": "Terry Richardson"})
    a = client.post(f"{BASE}/runs", {"indexes": [8, 0]}, format="json").json()
    b = client.post(f"{BASE}/runs", {"indexes": [8, 0], "tools": {"reason": "fake-reason"}},
                    format="json").json()
    assert client.get(f"{BASE}/runs", {"agent": "fake-reason"}).json()["count"] == 1
    for run in (a, b):
        assert benchmark_run_execute(run_id=run["id"]) == "succeeded"
    detail = client.get(f"{BASE}/runs/{a['id']}").json()
    assert detail["status"] == "succeeded"
    assert detail["progress"]["questions_done"] == 2
    assert detail["summary"]["quality_label"] == BASELINE_LABEL
    assert set(detail["artifacts"]) == {"summary.json", "run_artifacts.tar.gz",
                                        "q0/metrics.json", "q0/run_artifacts.tar.gz",
                                        "q8/metrics.json", "q8/run_artifacts.tar.gz"}
    results = client.get(f"{BASE}/runs/{a['id']}/results").json()
    assert results["quality_label"] == BASELINE_LABEL
    assert [(x["question_index"], x["prediction"]) for x in results["results"]] == [
        (0, "yes"), (8, "Terry Richardson")]
    r = client.get(f"{BASE}/runs/{a['id']}/artifacts/q8/metrics.json")
    assert r.status_code == 200
    assert b'"Terry Richardson"' in b"".join(r.streaming_content)
    r = client.get(f"{BASE}/runs/{a['id']}/artifacts/run_artifacts.tar.gz")
    assert (r.status_code, r["Content-Type"]) == (200, "application/gzip")
    for name in ("q9/metrics.json", "../../secret_key", "nothing"):
        r = client.get(f"{BASE}/runs/{a['id']}/artifacts/{name}")
        assert (r.status_code, r.json()["code"]) == (404, "artifact_not_found")
    compare = client.get(f"{BASE}/compare", {"runs": f"{a['id']},{b['id']}"}).json()
    assert [x["id"] for x in compare["runs"]] == [a["id"], b["id"]]
    assert compare["runs"][0]["quality_label"] == BASELINE_LABEL
    by_index = {q["question_index"]: q for q in compare["questions"]}
    assert by_index[8]["runs"][str(b["id"])]["prediction"] == "Terry Richardson"
    assert by_index[0]["runs"][str(b["id"])]["prediction"] == "Terry Richardson"
    assert compare["differences"] == [0]
    for bad in ("", "1", "x,y", f"{a['id']},{a['id']}"):
        r = client.get(f"{BASE}/compare", {"runs": bad})
        assert (r.status_code, r.json()["param"]) == (400, "runs")
    assert client.get(f"{BASE}/compare", {"runs": f"{a['id']},99999"}).status_code == 404
    assert client.get(f"{BASE}/runs/99999").status_code == 404
    assert client.get(f"{BASE}/runs/99999/results").json()["code"] == "run_not_found"
    # cancel: finished -> 409; queued -> cancelled, never starts
    r = client.post(f"{BASE}/runs/{a['id']}/cancel")
    assert (r.status_code, r.json()["code"]) == (409, "run_finished")
    c = client.post(f"{BASE}/runs", {"limit": 1}, format="json").json()
    r = client.post(f"{BASE}/runs/{c['id']}/cancel")
    assert (r.status_code, r.json()["status"]) == (200, "cancelled")
    assert benchmark_run_execute(run_id=c["id"]) is None


@pytest.mark.django_db
def test_suites_list_and_upload(client: APIClient, suite: Any) -> None:
    listing = client.get(f"{BASE}/suites").json()["results"]
    assert listing[0]["name"] == "hotpotqa-dev-30"
    assert listing[0]["question_count"] == 30
    assert listing[0]["licence"] == "CC BY-SA 4.0"
    one = suite.questions[:1]
    r = client.post(f"{BASE}/suites", {"name": "mine", "questions": one,
                                       "licence": "CC BY-SA 4.0"}, format="json")
    assert r.status_code == 201, r.content
    assert r.json()["question_count"] == 1
    assert r.json()["version"] == 1
    # the same name again: its next version (the first stays as it was, for its runs)
    two = suite.questions[:2]
    r = client.post(f"{BASE}/suites", {"name": "mine", "questions": two}, format="json")
    assert (r.status_code, r.json()["version"], r.json()["question_count"]) == (201, 2, 2)
    for body, param in (({"name": "x y", "questions": one}, "name"),
                        ({"name": "bad", "questions": [{"q": 1}]}, "questions"),
                        ({"name": "bad"}, None)):  # neither questions nor from_threads
        r = client.post(f"{BASE}/suites", body, format="json")
        assert (r.status_code, r.json()["param"]) == (400, param), r.content
    run = client.post(f"{BASE}/runs", {"suite": "mine"}, format="json").json()
    assert (run["question_indexes"], run["suite_version"]) == ([0, 1], 2)  # the newest
    first = client.post(f"{BASE}/runs", {"suite": "mine@1"}, format="json").json()
    assert (first["question_indexes"], first["suite_version"]) == ([0], 1)
    assert services.benchmark_run_cancel(run=BenchmarkRun.objects.get(pk=first["id"]))
    assert services.benchmark_run_cancel(run=BenchmarkRun.objects.get(pk=run["id"]))


@pytest.mark.django_db
def test_unknown_routes_and_methods_answer_json(client: APIClient, suite: Any) -> None:
    for path in ("/runs/abc", "/runs/1/nothing", "/nope"):
        r = client.get(BASE + path)
        assert (r.status_code, r.json()["code"]) == (404, "not_found"), path
    r = client.delete(f"{BASE}/runs")
    assert (r.status_code, r.json()["code"]) == (405, "method_not_allowed")
    assert APIClient().get(f"{BASE}/nope").status_code == 401  # auth first


@pytest.mark.django_db(transaction=True)
def test_admin_lists_runs_cancels_and_reruns(admin_client: Any, suite: Any) -> None:
    queued = mesh.benchmark_run_create(suite=suite, indexes=[2, 4], protocol="anp")
    r = admin_client.get("/admin/benchmarks/benchmarkrun/")
    assert r.status_code == 200
    assert b"anp" in r.content
    assert admin_client.get(f"/admin/benchmarks/benchmarkrun/{queued.pk}/change/"
                            ).status_code == 200
    assert b"baseline" in admin_client.get(
        f"/admin/benchmarks/benchmarkrun/{queued.pk}/change/").content
    admin_client.post("/admin/benchmarks/benchmarkrun/", {
        "action": "rerun_runs", "_selected_action": [queued.pk]})
    rerun = BenchmarkRun.objects.exclude(pk=queued.pk).get()
    assert (rerun.status, rerun.protocol, rerun.question_indexes) == ("queued", "anp", [2, 4])
    admin_client.post("/admin/benchmarks/benchmarkrun/", {
        "action": "cancel_runs", "_selected_action": [queued.pk, rerun.pk]})
    assert set(BenchmarkRun.objects.values_list("status", flat=True)) == {"cancelled"}
    assert admin_client.get("/admin/benchmarks/benchmarksuite/").status_code == 200
