"""The cost guard (issue 37): what the server does for a JSON turn, a stream turn, a turn with
one server-side tool call and an operator API list (SQL statements and round trips per
database, Redis round trips, function calls, peak bytes held) stays within 10 % of the
budget checked in beside this file (``tests/perf_budget.json``, one set per database).

Counts, not times: a busy machine makes them no larger (tests/cost.py says how they are
taken and what is held still). A count over its budget fails with the figure, the budget
and the way to raise it: ``scripts/perf/budget.py --write``, in a commit that says why.
"""

from __future__ import annotations

import asyncio
import contextvars
import json
import os
from pathlib import Path
from typing import Any

import pytest

from tests import cost
from tests.conftest import within_one_rate_window

pytestmark = pytest.mark.django_db(transaction=True)

BUDGET_FILE = Path(__file__).parent / "perf_budget.json"
# Calls and bytes may grow this much over their budget before the guard fails: any change
# moves them a little. Statements and round trips are exact: each is a trip to a database,
# they are the same on every run, and one more is what the guard is there to catch (10 % of
# a turn's 3 to 15 statements would let one through).
MARGIN = 0.10
EXACT = ("sql.", "redis.")
REPLY = " ".join(f"tok{i}" for i in range(32))  # 32 tokens, as the measurements
ONE_CALL = [{"tool_calls": [{"name": "calculator", "arguments": {"expression": "6 * 7"}}]},
            {"reply": "The answer is {results}."}]
SCENARIOS = ("chat_json", "chat_stream", "tool_call", "threads_list")


def setup_name() -> str:
    """The budget's key: the database vendor, and whether Redis serves the cache and feed."""
    from django.db import connection

    return connection.vendor + ("+redis" if os.environ.get("REDIS_URL") else "")


def budget_over(counts: dict[str, int], budget: dict[str, int]) -> list[str]:
    """Each count over its budget (by more than ``MARGIN`` for calls and bytes), said in
    full."""
    over = []
    for name, allowed in sorted(budget.items()):
        measured = counts.get(name, 0)
        margin = 0.0 if name.startswith(EXACT) else MARGIN
        if measured > allowed * (1 + margin):
            over.append(f"{name}: measured {measured}, budget {allowed} "
                        f"(+{(measured - allowed) / max(allowed, 1):.1%}; "
                        + (f"up to +{margin:.0%} passes)" if margin else "exact)"))
    return over


def guard(scenario: str, counts: dict[str, int]) -> None:
    """Compare ``counts`` with the budget of ``scenario`` on this setup (or, for
    ``scripts/perf/budget.py``, record them in ``GAIA_COST_REPORT``)."""
    setup = setup_name()
    report = os.environ.get("GAIA_COST_REPORT")
    if report:  # scripts/perf/budget.py collects the figures
        path = Path(report)
        found = json.loads(path.read_text()) if path.exists() else {}
        found.setdefault(setup, {})[scenario] = counts
        if cost.last_functions:
            found.setdefault("functions", {}).setdefault(setup, {})[scenario] = (
                cost.last_functions)
        path.write_text(json.dumps(found, indent=2, sort_keys=True))
    budgets = json.loads(BUDGET_FILE.read_text())
    if setup not in budgets or scenario not in budgets[setup]:
        pytest.skip(f"no cost budget for {scenario} on {setup}: "
                    f"`scripts/perf/budget.py --write` records one")
    over = budget_over(counts, budgets[setup][scenario])
    assert not over, (
        f"{scenario} on {setup} costs more than its budget (tests/perf_budget.json):\n  "
        + "\n  ".join(over)
        + "\nIf the new work is worth it, raise the budget: run `.venv/bin/python "
          "scripts/perf/budget.py --write` (with DATABASE_URL and REDIS_URL for "
          "PostgreSQL + Redis) and commit tests/perf_budget.json saying why the turn "
          "needs it; else find the extra work (`scripts/perf/budget.py --functions`).")


# -- the requests --------------------------------------------------------------------------


@pytest.fixture
def keys(make_key: Any) -> dict[str, str]:
    from agents.models import ApiKey

    _, chat = make_key("cost", requests_per_minute=1_000_000)  # rate-limited, as clients are
    _, ops = make_key("cost-ops", scopes=[ApiKey.Scope.OPERATOR])
    return {"chat": chat, "operator": ops}


@pytest.fixture
def agents(make_agent: Any) -> None:
    make_agent(slug="cost", provider__options={"reply": REPLY})
    make_agent(slug="cost-tools", tools=["calculator"], provider__options={"script": ONE_CALL})


class Turns:
    """Chat Completions turns, each a new conversation of the same size (a request that
    repeated one would continue its thread)."""

    def __init__(self, key: str) -> None:
        self.key, self.n = key, 0

    async def send(self, model: str, *, stream: bool = False) -> cost.Response:
        self.n += 1
        text = f"Tell me about the lighthouse, question {self.n:06d}."
        return await cost.asgi_request(
            "POST", "/v1/chat/completions",
            body={"model": model, "stream": stream,
                  "messages": [{"role": "user", "content": text}]},
            headers={"Authorization": f"Bearer {self.key}"})


def ok_json(response: cost.Response) -> None:
    assert response.status == 200, response.body
    assert response.json()["choices"][0]["finish_reason"] == "stop"


def ok_stream(response: cost.Response) -> None:
    assert response.status == 200, response.body
    assert response.body.endswith(b"data: [DONE]\n\n")
    assert REPLY.split()[-1].encode() in response.body


def ok_tool(response: cost.Response) -> None:
    ok_json(response)
    assert response.json()["choices"][0]["message"]["content"] == "The answer is 42."


async def in_fresh_context(counting: Any) -> Any:
    """``counting`` run in an empty context, as a server's requests start: the test process's
    main thread has served sync test-client requests (a staff page, in the whole suite), and
    the asgiref locals those left in its context were owned by that thread, so every read of
    them on a site thread copied them again (784 copies and 5,400 more function calls for the
    thread list than the same request counted alone)."""
    return await asyncio.get_running_loop().create_task(counting, context=contextvars.Context())


async def scenario_counts(scenario: str, keys: dict[str, str]) -> dict[str, int]:
    turns = Turns(keys["chat"])
    within_one_rate_window(10)  # a minute's rate-limit counter starts with another command
    if scenario == "chat_json":
        return await cost.measure(lambda: turns.send("cost"), check=ok_json)
    if scenario == "chat_stream":
        return await cost.measure(lambda: turns.send("cost", stream=True), check=ok_stream)
    if scenario == "tool_call":
        return await cost.measure(lambda: turns.send("cost-tools"), check=ok_tool)
    assert scenario == "threads_list"
    for _ in range(6):  # a page of threads to list: the same rows every time
        ok_json(await turns.send("cost"))

    def ok_list(response: cost.Response) -> None:
        assert response.status == 200, response.body
        assert len(response.json()["results"]) == 5

    async def page() -> cost.Response:
        return await cost.asgi_request(
            "GET", "/api/v1/threads?limit=5",
            headers={"Authorization": f"Bearer {keys['operator']}"})

    return await cost.measure(page, check=ok_list)


# -- the guard -----------------------------------------------------------------------------


@pytest.mark.parametrize("scenario", SCENARIOS)
async def test_a_request_costs_no_more_than_its_budget(scenario: str, keys: dict[str, str],
                                                       agents: None) -> None:
    counts = await in_fresh_context(scenario_counts(scenario, keys))
    assert counts["calls"] > 1000, counts  # the hooks saw the request
    assert counts["sql.default.statements"] > 0, counts
    guard(scenario, counts)


async def test_a_turn_that_adds_a_query_fails_the_guard(keys: dict[str, str], agents: None,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    """The guard catches a commit that adds one query to a turn: here the turn's end does an
    extra ``Agent.objects.count()``, and the JSON turn's statement count goes over budget."""
    from agents import services
    from agents.models import Agent

    setup = setup_name()
    budgets = json.loads(BUDGET_FILE.read_text())
    if "chat_json" not in budgets.get(setup, {}):
        pytest.skip(f"no cost budget for chat_json on {setup}")
    finish = services.thread_turn_finish

    def finish_and_count(**kwargs: Any) -> Any:
        Agent.objects.count()  # the query a careless commit adds
        return finish(**kwargs)

    monkeypatch.setattr(services, "thread_turn_finish", finish_and_count)
    monkeypatch.delenv("GAIA_COST_REPORT", raising=False)
    counts = await in_fresh_context(scenario_counts("chat_json", keys))
    with pytest.raises(AssertionError) as failed:
        guard("chat_json", counts)
    said = str(failed.value)
    assert "sql.default.statements: measured" in said
    assert "scripts/perf/budget.py --write" in said
