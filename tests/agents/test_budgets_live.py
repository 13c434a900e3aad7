"""Budgets that hold (issue 41): fifty concurrent requests through two server processes on
the same database (PostgreSQL + Redis in CI's first leg, one SQLite file in its second) at a
budget with room for ten: ten answer, the rest get OpenAI's 429 ``insufficient_quota``
envelope naming the budget with a ``Retry-After`` until the period resets, and spend never
passes the limit. The same for a key's budget in money, an agent's in tokens and an end
user's in tokens; then a new period; then a turn killed mid-stream settles to what it used."""

from __future__ import annotations

import asyncio
import time
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from typing import Any

import httpx
import pytest

from agents.kernel import llm
from agents.models import AuditEvent, Budget, Message, ModelPrice, Thread
from agents.models.spend import NANOS

pytestmark = pytest.mark.django_db(transaction=True)

ASK = "How much is left in the budget today?"
OUTPUT_LIMIT = 16
TURN_WORDS = " ".join(f"w{i}" for i in range(OUTPUT_LIMIT))  # exactly the output limit
# Each turn streams its 16 words 0.15 s apart (about 2.5 s): the fifty requests all reserve
# while the first ten still run, whatever the machine's pace.
SLOW = {"reply": TURN_WORDS, "delay_ms": 150}


def worst_case(agent: Any) -> int:
    """A turn's reservation, by the documented rule: the prompt's estimate (the client's
    messages and the agent's instructions, 4 characters a token) plus its output limit."""
    asked = llm.LLMRequest(model=agent.slug, system="", messages=[
        llm.Message(role="user", parts=(llm.TextPart(ASK),))])
    return (llm.estimate_request_tokens(asked) + llm.estimate_tokens(agent.instructions)
            + OUTPUT_LIMIT)


async def _fire(servers: list[Any], key: str, model: str, count: int, user: str | None
                ) -> list[httpx.Response]:
    body: dict[str, Any] = {"model": model, "messages": [{"role": "user", "content": ASK}]}
    if user:
        body["user"] = user
    headers = {"Authorization": f"Bearer {key}"}
    async with httpx.AsyncClient(timeout=120, limits=httpx.Limits(max_connections=count)) as c:
        return await asyncio.gather(*(
            c.post(f"{servers[i % len(servers)].v1}/chat/completions", json=body,
                   headers=headers) for i in range(count)))


def fire(servers: list[Any], key: str, model: str, count: int = 50,
         user: str | None = None) -> tuple[int, list[httpx.Response]]:
    responses = asyncio.run(_fire(servers, key, model, count, user))
    ok = [r for r in responses if r.status_code == 200]
    refused = [r for r in responses if r.status_code != 200]
    return len(ok), refused


def refused_as_quota(refused: list[httpx.Response], budget: str) -> None:
    for r in refused:
        assert r.status_code == 429, r.text
        error = r.json()["error"]
        assert error["type"] == error["code"] == "insufficient_quota", error
        assert f"Budget '{budget}'" in error["message"], error
        assert int(r.headers["retry-after"]) > 0


def settled(budget: Budget) -> Budget:
    """The budget once every turn has settled (no hold left)."""
    deadline = time.monotonic() + 30
    while Thread.objects.filter(budget_holds__isnull=False).exists() and (
            time.monotonic() < deadline):
        time.sleep(0.1)
    budget.refresh_from_db()
    assert budget.reserved == 0
    return budget


@pytest.fixture
def two_servers(gaia_server: Any, gaia_server_factory: Any) -> list[Any]:
    return [gaia_server, gaia_server_factory()]


def test_fifty_at_once_through_two_processes_get_ten_turns(two_servers: list[Any],
                                                           make_agent: Any, make_key: Any
                                                           ) -> None:
    agent = make_agent(slug="metered", max_output_tokens=OUTPUT_LIMIT, instructions="Be brief.",
                       provider__options=SLOW)
    # Money: the fake model priced at $1 a million tokens, in and out; the key may spend
    # ten turns' worst case (and a half, so rounding cannot make it nine).
    ModelPrice.objects.create(provider=agent.provider, model="", input_per_mtok=1,
                              output_per_mtok=1)
    key, secret = make_key("metered-key")
    per_turn = worst_case(agent)
    money = Budget.objects.create(
        name="key-money", scope="key", api_key=key, unit="usd", period="day",
        limit=per_turn * 1000 * 10 + per_turn * 500,  # nano-dollars: $1/Mtok = 1000 n$/token
        period_start=datetime(1970, 1, 1, tzinfo=UTC))
    ok, refused = fire(two_servers, secret, "metered")
    assert 10 <= ok <= 11, (ok, [r.text for r in refused[:3]])
    refused_as_quota(refused, "key-money")
    money = settled(money)
    assert 0 < money.spent <= money.limit
    replies = Message.objects.filter(thread__api_key=key, role="assistant", internal=False)
    assert replies.count() == ok  # a refused request stored nothing
    cost = sum((m.cost for m in replies), Decimal(0))
    assert money.spent == int(cost * NANOS)  # what the turns stored is what was charged
    assert {m.cost_source for m in replies} == {"admin"}
    money.delete()

    # An agent's budget, in tokens: every key's turns count.
    tokens = Budget.objects.create(
        name="agent-tokens", scope="agent", agent=agent, unit="tokens", period="month",
        limit=per_turn * 10 + per_turn // 2, period_start=datetime(1970, 1, 1, tzinfo=UTC))
    ok, refused = fire(two_servers, secret, "metered")
    assert 10 <= ok <= 11, ok
    refused_as_quota(refused, "agent-tokens")
    tokens = settled(tokens)
    assert tokens.spent <= tokens.limit
    tokens.delete()

    # An end user's, as this key names them: bob of this key is not limited by it.
    user = Budget.objects.create(
        name="alice-tokens", scope="user", api_key=key, user="alice", unit="tokens",
        period="total", limit=per_turn * 10 + per_turn // 2,
        period_start=datetime(1970, 1, 1, tzinfo=UTC))
    ok, refused = fire(two_servers, secret, "metered", user="alice")
    assert 10 <= ok <= 11, ok
    for r in refused:  # a total budget never resets: no Retry-After
        assert r.status_code == 429
        assert "retry-after" not in r.headers, r.headers
        assert r.json()["error"]["code"] == "insufficient_quota"
    assert fire(two_servers, secret, "metered", count=3, user="bob")[0] == 3
    user = settled(user)
    assert user.spent <= user.limit

    # Three budgets on every turn at once (the key's, the agent's and a global one), the
    # global one with room for ten: their rows are held together by every request, in
    # both processes, and none waits for another in a circle (no deadlock: no 500).
    for name, scope, extra in (("k", "key", {"api_key": key}), ("a", "agent", {"agent": agent}),
                               ("g", "global", {})):
        Budget.objects.create(name=f"all-{name}", scope=scope, unit="tokens", period="day",
                              limit=per_turn * (10 if scope == "global" else 1000)
                              + per_turn // 2,
                              period_start=datetime(1970, 1, 1, tzinfo=UTC), **extra)
    ok, refused = fire(two_servers, secret, "metered")
    assert 10 <= ok <= 11, (ok, [r.text for r in refused[:3]])
    refused_as_quota(refused, "all-g")
    for budget in Budget.objects.filter(name__startswith="all-"):
        assert settled(budget).spent <= budget.limit


def test_a_new_period_starts_afresh_and_a_killed_turn_pays_what_it_used(
        gaia_server: Any, make_agent: Any, make_key: Any) -> None:
    make_agent(slug="daily", max_output_tokens=OUTPUT_LIMIT,
               provider__options={"reply": TURN_WORDS, "delay_ms": 400})
    key, secret = make_key("daily-key")
    yesterday = datetime.now(UTC).replace(hour=0, minute=0, second=0, microsecond=0) \
        - timedelta(days=1)
    budget = Budget.objects.create(name="daily", scope="key", api_key=key, unit="tokens",
                                   period="day", limit=1000, period_start=yesterday,
                                   spent=1000)  # yesterday's was spent whole
    ok, refused = fire([gaia_server], secret, "daily", count=1)
    assert ok == 1, [r.text for r in refused]
    budget = settled(budget)
    assert budget.period_start > yesterday
    first = Message.objects.get(thread__api_key=key, role="assistant", internal=False)
    assert budget.spent == first.input_tokens + first.output_tokens  # today's only

    # A stream killed after a few words: the budget is charged what the turn used.
    _, operator = make_key("killer", scopes=["operator"])
    before = budget.spent
    body = {"model": "daily", "stream": True,
            "messages": [{"role": "user", "content": ASK}]}
    with httpx.stream("POST", f"{gaia_server.v1}/chat/completions", json=body, timeout=60,
                      headers={"Authorization": f"Bearer {secret}"}) as stream:
        thread_id = stream.headers["x-gaia-thread-id"]
        words, killed = 0, None
        for line in stream.iter_lines():  # read to the end: the kill ends the stream
            if '"content":"' in line.replace(" ", ""):
                words += 1
            if words >= 3 and killed is None:
                killed = httpx.post(f"{gaia_server.url}/api/v1/threads/{thread_id}/kill",
                                    headers={"Authorization": f"Bearer {operator}"},
                                    timeout=30)
                assert killed.status_code == 202, killed.text
    budget = settled(budget)
    reply = Message.objects.get(thread_id=thread_id, role="assistant", internal=False)
    assert reply.finish_reason == "killed"
    assert 0 < reply.output_tokens < OUTPUT_LIMIT
    assert budget.spent - before == reply.input_tokens + reply.output_tokens
    assert not AuditEvent.objects.filter(action="budget_update").exists()  # no one edited it


def test_a_turn_whose_process_died_gives_its_holds_back(gaia_server_factory, make_agent,
                                                        make_key) -> None:
    """``kill -9`` mid-turn: the budget keeps the dead turn's hold only until its lease is
    found expired (the next server's sweep), which gives it back and charges nothing."""
    import signal

    from tests.agents.test_crash_leftovers import SETTINGS, Stream
    from tests.agents.test_leases import wait_for

    agent = make_agent(slug="slow", max_output_tokens=OUTPUT_LIMIT * 10,
                       provider__options={"reply": " ".join(["w"] * 120), "delay_ms": 100})
    key, secret = make_key("crashy")
    budget = Budget.objects.create(name="crashy", scope="agent", agent=agent, unit="tokens",
                                   limit=10_000, period="day",
                                   period_start=datetime(1970, 1, 1, tzinfo=UTC))
    server = gaia_server_factory(**SETTINGS)
    stream = Stream(server, secret, "chat", session="crash")
    try:
        stream.read_until(lambda: len(stream.text.split()) >= 3)
        budget.refresh_from_db()
        assert budget.reserved > 0  # held while it runs, on its thread
        assert Thread.objects.get(pk=stream.thread_id).budget_holds
        server.process.send_signal(signal.SIGKILL)
        server.process.wait(10)
        stream.read_to_end()
    finally:
        stream.close()
    gaia_server_factory(**SETTINGS)  # sweeps the dead process's turn a lease after it starts
    assert wait_for(lambda: Thread.objects.filter(pk=stream.thread_id, lock_token="").first())
    budget.refresh_from_db()
    assert (budget.reserved, budget.spent) == (0, 0)
    assert Thread.objects.get(pk=stream.thread_id).budget_holds is None
