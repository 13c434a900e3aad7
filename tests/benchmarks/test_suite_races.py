"""Imports of one suite name at once (JSONL, the same file sent by several clients to several
server processes): each gets a version of its own, never a 500 (on PostgreSQL the second
writer of a version used to hit the unique (name, version) constraint)."""

from __future__ import annotations

import json
import threading
from typing import Any

import httpx
import pytest

from benchmarks.models import BenchmarkSuite

pytestmark = pytest.mark.django_db(transaction=True)

API = "/api/v1/benchmarks"
CLIENTS = 12
JSONL = "".join(json.dumps({"input": [{"role": "user", "content": f"Question {i}?"}],
                            "ideal": f"Answer {i}."}) + "\n" for i in range(1500)).encode()


def test_concurrent_jsonl_imports_of_one_name_each_get_a_version(
        gaia_server: Any, gaia_server_factory: Any, make_key: Any) -> None:
    servers = [gaia_server, gaia_server_factory(), gaia_server_factory()]
    _, key = make_key(name="bench", scopes=["benchmarks"])
    start = threading.Barrier(CLIENTS)
    answers: list[Any] = [None] * CLIENTS

    def post(i: int) -> None:
        server = servers[i % len(servers)]
        with httpx.Client(base_url=server.url + API, timeout=120,
                          headers={"Authorization": f"Bearer {key}",
                                   "Content-Type": "application/jsonl"}) as http:
            start.wait(30)
            r = http.post("/suites", params={"name": "imported"}, content=JSONL)
            answers[i] = (r.status_code, r.json())

    workers = [threading.Thread(target=post, args=(i,)) for i in range(CLIENTS)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join(180)
    statuses = sorted(status for status, _ in answers)
    assert all(status in (201, 409) for status in statuses), answers
    made = sorted(body["version"] for status, body in answers if status == 201)
    assert made == sorted(set(made)), made  # a version each
    stored = BenchmarkSuite.objects.filter(name="imported")
    assert sorted(stored.values_list("version", flat=True)) == made
    assert all(s.question_count == 1500 and s.cases.count() == 1500 for s in stored)
    assert statuses.count(201) >= CLIENTS // 2, answers  # a 409 is the exception
