"""What turns cost and what a key may spend (issue 41), against a live server: prices from
the shipped table and from admins, each reply's cost and the usage API's sums, unknown prices
said as such, a key's tokens per minute, the feed's budget signals, and the budgets API's
bad input."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from decimal import Decimal
from typing import Any

import httpx
import pytest
from websockets.sync.client import connect

from agents import services
from agents.models import AuditEvent, Budget, Message, ModelPrice, Provider
from tests.conftest import within_one_rate_window

pytestmark = pytest.mark.django_db(transaction=True)


def chat(server: Any, key: str, model: str, text: str = "hi", **extra: Any) -> httpx.Response:
    return httpx.post(f"{server.v1}/chat/completions", timeout=30,
                      headers={"Authorization": f"Bearer {key}"},
                      json={"model": model, "messages": [{"role": "user", "content": text}],
                            **extra})


def test_prices_come_from_admins_then_the_shipped_table_and_free_models_cost_nothing(
        make_provider: Any) -> None:
    openai_kind = make_provider(name="oai", kind=Provider.Kind.OPENAI,
                                base_url="https://api.openai.com/v1")
    anthropic = make_provider(name="claude", kind=Provider.Kind.ANTHROPIC, base_url="")
    fake = make_provider(name="fake")
    shipped = services.price_lookup(provider=openai_kind, model="gpt-4o-mini")
    assert shipped is not None
    assert shipped.source.startswith("genai-prices: openai/")
    assert shipped.public()["input_per_mtok"] == "0.15"  # the wheel's table, no download
    assert shipped.cost_nanos(1_000_000, 0) == 150_000_000
    sonnet = services.price_lookup(provider=anthropic, model="claude-sonnet-4-5")
    assert sonnet.public()["input_per_mtok"] == "3"  # its base rate; past 200k tokens, 6
    assert sonnet.cost_nanos(1000, 0) == 1000 * 3000  # n$ a token at $3 a million
    assert sonnet.cost_nanos(300_000, 0) == 300_000 * 6000
    assert services.price_lookup(provider=openai_kind, model="no-such-model-x") is None
    assert services.price_lookup(provider=fake, model="fake-model").source == "free: fake"
    # an admin's price wins, its model's own over the provider's catch-all
    ModelPrice.objects.create(provider=openai_kind, model="", input_per_mtok=1,
                              output_per_mtok=2)
    ModelPrice.objects.create(provider=openai_kind, model="gpt-4o-mini", input_per_mtok=3,
                              output_per_mtok=4, cached_input_per_mtok=Decimal("0.5"))
    own = services.price_lookup(provider=openai_kind, model="gpt-4o-mini")
    assert (own.source, own.cost_nanos(1000, 1000, cached_tokens=500)) == (
        "admin", 500 * 3000 + 500 * 500 + 1000 * 4000)
    assert services.price_lookup(provider=openai_kind, model="no-such-model-x").source == "admin"
    assert services.price_lookup(provider=fake, model="fake-model").source == "free: fake"


def test_each_reply_stores_its_cost_and_usage_sums_it(gaia_server: Any, make_agent: Any,
                                                      make_key: Any) -> None:
    priced = make_agent(slug="priced", provider__options={"reply": "one two three"})
    ModelPrice.objects.create(provider=priced.provider, model="", input_per_mtok=2,
                              output_per_mtok=10)
    # a provider Gaia cannot price: an OpenAI-compatible server of a model nobody lists
    upstream = make_agent(slug="mystery", provider__name="selfhosted",
                          provider__kind=Provider.Kind.OPENAI,
                          provider__base_url="http://127.0.0.1:9", upstream_model="mystery-7b")
    _, key = make_key("spender", scopes=["chat", "operator"])
    for user in ("alice", "alice", "bob"):
        assert chat(gaia_server, key, "priced", user=user).status_code == 200
    replies = Message.objects.filter(thread__agent=priced, role="assistant", internal=False)
    costs = []
    for m in replies:
        assert m.cost_source == "admin"
        assert m.cost == Decimal(m.input_tokens * 2 + m.output_tokens * 10) / 1_000_000
        costs.append(m.cost)
    usage = httpx.get(f"{gaia_server.url}/api/v1/usage?range=1h", timeout=30,
                      headers={"Authorization": f"Bearer {key}"}).json()
    assert Decimal(usage["totals"]["cost_usd"]) == sum(costs)
    by_agent = {a["agent"]: a for a in usage["by_agent"]}
    assert Decimal(by_agent["priced"]["cost_usd"]) == sum(costs)
    assert usage["totals"]["unpriced_requests"] == 0
    users = {u["user"]: u for u in usage["by_user"]}
    assert (users["alice"]["requests"], users["bob"]["requests"]) == (2, 1)
    assert users["alice"]["key"] == key[:13]  # the key's prefix: alice is this key's alice
    assert sum(Decimal(u["cost_usd"]) for u in users.values()) == sum(costs)
    # a model nobody prices: its turn's cost is unknown, and the usage says so
    assert chat(gaia_server, key, "mystery").status_code >= 500
    failed = Message.objects.get(thread__agent=upstream, role="assistant", internal=False)
    assert (failed.cost, failed.cost_source) == (None, "unknown")
    usage = httpx.get(f"{gaia_server.url}/api/v1/usage?range=1h", timeout=30,
                      headers={"Authorization": f"Bearer {key}"}).json()
    assert usage["totals"]["unpriced_requests"] == 1
    assert Decimal(usage["totals"]["cost_usd"]) == sum(costs)
    # rebuilt from the stored replies (an upgrade's usage_rebuild), the users' hours agree
    kept = usage["by_user"]
    services.usage_rebuild()
    rebuilt = httpx.get(f"{gaia_server.url}/api/v1/usage?range=1h", timeout=30,
                        headers={"Authorization": f"Bearer {key}"}).json()
    assert rebuilt["by_user"] == kept
    assert rebuilt["totals"]["cost_usd"] == usage["totals"]["cost_usd"]


def test_a_reply_of_a_model_with_no_price_says_unknown(make_agent: Any) -> None:
    from agents.kernel import llm

    agent = make_agent(slug="mystery", provider__name="selfhosted",
                       provider__kind=Provider.Kind.OPENAI,
                       provider__base_url="http://127.0.0.1:9", upstream_model="mystery-7b")
    start = services.thread_turn_begin(
        agent=agent, api_key=None, session_key="s", thread_id=None, user=None,
        incoming=[llm.Message(role="user", parts=(llm.TextPart("hi"),))], workspace_root=None,
        dialect="chat", lease_seconds=60)
    services.thread_turn_finish(start=start, dialect="chat", result=services.TurnResult(
        text="hello", input_tokens=5, output_tokens=7, provider="selfhosted",
        model="mystery-7b"))
    reply = Message.objects.get(thread_id=start.thread_id, role="assistant")
    assert (reply.cost, reply.cost_source) == (None, "unknown")
    from agents.selectors.usage import usage_summary, usage_window

    totals = usage_summary(window=usage_window(range_name="1h"))["totals"]
    assert (Decimal(totals["cost_usd"]), totals["unpriced_requests"]) == (0, 1)


def test_a_keys_tokens_per_minute_stop_its_turns_until_the_minute_ends(
        gaia_server: Any, make_agent: Any, make_key: Any) -> None:
    make_agent(slug="wordy", provider__options={"reply": " ".join(["word"] * 40)})
    _, key = make_key("tpm", scopes=["chat"], tokens_per_minute=60)
    _, other = make_key("free", scopes=["chat"])
    within_one_rate_window(20)
    assert chat(gaia_server, key, "wordy").status_code == 200  # about 45 tokens
    assert chat(gaia_server, key, "wordy").status_code == 200  # 90: past the limit now
    r = chat(gaia_server, key, "wordy")
    assert r.status_code == 429
    assert r.json()["error"]["code"] == "rate_limit_exceeded"
    assert "60 tokens per minute" in r.json()["error"]["message"]
    assert 0 < int(r.headers["retry-after"]) <= 60
    assert chat(gaia_server, other, "wordy").status_code == 200  # a limit of that key's only


def test_the_feed_hears_a_budgets_threshold_and_its_refusal_once(
        gaia_server: Any, make_agent: Any, make_key: Any) -> None:
    # each turn answers its whole output limit: after one, no other fits
    agent = make_agent(slug="watched", provider__options={"reply": " ".join(["ok"] * 100)},
                       max_output_tokens=100, instructions="")
    _, key = make_key("watched-key", scopes=["chat", "operator"])
    Budget.objects.create(name="watched", scope="agent", agent=agent, unit="tokens", limit=130,
                          period="day", soft_percent=5,
                          period_start=datetime(1970, 1, 1, tzinfo=UTC))
    url = gaia_server.url.replace("http://", "ws://") + "/ws"
    with connect(url, additional_headers={"Authorization": f"Bearer {key}"},
                 open_timeout=10) as sock:
        assert json.loads(sock.recv(timeout=10))["event"] == "connected"
        sock.send(json.dumps({"cmd": "subscribe", "id": "s",
                              "events": ["budget_threshold", "budget_exceeded"]}))
        assert json.loads(sock.recv(timeout=10))["event"] == "ack"
        assert chat(gaia_server, key, "watched").status_code == 200  # over 5 %
        for _ in range(2):  # refused twice: the feed hears it once
            assert chat(gaia_server, key, "watched").status_code == 429
        heard = []
        try:
            while True:
                heard.append(json.loads(sock.recv(timeout=3)))
        except TimeoutError:
            pass
    kinds = [(e["event"], e["budget"], e["scope"], e["target"], e["agent"]) for e in heard]
    assert kinds == [("budget_threshold", "watched", "agent", "agent:watched", "watched"),
                     ("budget_exceeded", "watched", "agent", "agent:watched", "watched")]
    assert heard[0]["limit"] == 130
    assert 0 < heard[0]["spent"] < 130


def test_the_budgets_api_answers_bad_input_with_its_error_and_audits_each_change(
        django_user_model: Any, make_agent: Any, make_key: Any) -> None:
    from rest_framework.test import APIClient

    make_agent(slug="echo")
    user = django_user_model.objects.create_user("ann", password="pw-12345678", is_staff=True)
    staff = APIClient()
    staff.force_login(user)
    key, _ = make_key("k")

    def post(body: dict[str, Any]) -> Any:
        return staff.post("/api/v1/budgets", body, format="json")

    good = {"name": "b", "scope": "key", "key": key.prefix, "unit": "usd", "limit": "5",
            "period": "day"}
    for bad, param in (({"scope": "agent"}, "agent"), ({"scope": "user"}, "user"),
                       ({"scope": "global"}, "key"), ({"limit": "0"}, "limit"),
                       ({"unit": "tokens", "limit": "1.5"}, "limit"),
                       ({"period": "week"}, "period"), ({"agent": "nobody"}, "agent"),
                       ({"key": "gaia_nope"}, "key"), ({"soft_percent": 101}, "soft_percent"),
                       ({"limit": "1e400"}, "limit"), ({"surprise": 1}, None)):
        r = post({**good, **bad})
        assert r.status_code == 400, (bad, r.content)
        body = r.json()
        assert {"detail", "code", "param"} <= set(body), body
        if param is not None:
            assert body["param"] == param, (bad, body)
    assert staff.post("/api/v1/budgets", "{not json", content_type="application/json"
                      ).status_code == 400
    assert not Budget.objects.exists()
    made = post(good)
    assert made.status_code == 201, made.content
    shown = made.json()
    assert (shown["limit"], Decimal(shown["spent"]), shown["remaining"]) == (
        "5.000000000", 0, "5.000000000")
    assert shown["resets_at"] is not None
    assert post(good).json()["code"] == "budget_exists"
    r = staff.patch(f"/api/v1/budgets/{shown['id']}", {"limit": "7.5", "soft_percent": 80},
                    format="json")
    assert r.status_code == 200, r.content
    assert r.json()["limit"] == "7.500000000"
    assert staff.get("/api/v1/budgets/999999").status_code == 404
    assert staff.delete(f"/api/v1/budgets/{shown['id']}").status_code == 204
    assert [e.action for e in AuditEvent.objects.order_by("pk")] == [
        "budget_create", "budget_update", "budget_delete"]


def test_the_admin_makes_budgets_by_the_apis_rules(django_user_model: Any, make_agent: Any
                                                   ) -> None:
    from django.test import Client
    from django.urls import reverse

    agent = make_agent(slug="echo")
    boss = django_user_model.objects.create_superuser("boss", password="pw-12345678")
    client = Client()
    client.force_login(boss)
    url = reverse("admin:agents_budget_add")
    form = {"name": "echo-day", "scope": "agent", "unit": "tokens", "period": "day",
            "limit_value": "1000", "user": ""}
    page = client.post(url, form)  # no agent for an agent budget: said on the form
    assert page.status_code == 200
    assert "An agent budget names its agent." in page.content.decode()
    assert not Budget.objects.exists()
    assert client.post(url, {**form, "agent": agent.pk}).status_code == 302
    made = Budget.objects.get()
    assert (made.agent_id, made.limit, made.unit) == (agent.pk, 1000, "tokens")
    event = AuditEvent.objects.get(action="budget_create")
    assert (event.channel, event.target) == ("admin", "budget:echo-day")


def test_end_users_over_days_read_the_day_rows_and_agree_with_the_hours() -> None:
    """A long range reads whole days from the day rows and its ragged ends from the hours:
    every window gives what the turns in its hours add up to."""
    import random
    from datetime import timedelta

    from agents.selectors.usage import usage_by_user

    rng = random.Random(41)
    base = datetime(2026, 11, 1, tzinfo=UTC)
    turns = [services.UsageTurn(
        at=base + timedelta(minutes=rng.randrange(6 * 24 * 60)), agent_id=rng.choice((1, 2)),
        key_id=rng.choice((7, 8)), model="m", error_kind="", input_tokens=rng.randrange(99),
        output_tokens=rng.randrange(99), ttft_ms=None, latency_ms=None,
        cost_nanos=rng.choice((None, 5, 1000)), user=rng.choice(("ann", "bo", "cy")))
        for _ in range(400)]
    services.usage_record_many(turns=turns)

    def expected(since: datetime, until: datetime, agent_id: int | None = None
                 ) -> dict[tuple[int, str], tuple[int, ...]]:
        first = since.replace(minute=0, second=0, microsecond=0)
        out: dict[tuple[int, str], list[int]] = {}
        for t in turns:
            if first <= t.at.replace(minute=0, second=0) < until and agent_id in (
                    None, t.agent_id):
                row = out.setdefault((t.key_id, t.user), [0] * 5)
                for i, v in enumerate((1, t.input_tokens, t.output_tokens, t.cost_nanos or 0,
                                       t.cost_nanos is None)):
                    row[i] += int(v)
        return {k: tuple(v) for k, v in out.items()}

    windows = [(base + timedelta(hours=5, minutes=30), base + timedelta(days=4, hours=7)),
               (base, base + timedelta(days=6)),  # whole days only
               (base + timedelta(hours=25), base + timedelta(hours=40)),  # inside one day
               (base - timedelta(days=30), base + timedelta(days=2, minutes=1))]
    for since, until in windows:
        for agent_id in (None, 2):
            got = {(k, u): tuple(rest) for k, u, *rest in usage_by_user(
                since=since, until=until, agent_id=agent_id)}
            assert got == expected(since, until, agent_id), (since, until, agent_id)
    assert sum(r[0] for r in expected(base, base + timedelta(days=6)).values()) == 400


def test_a_turns_budgets_add_no_statement_and_a_full_one_refuses_by_name(
        make_agent: Any, make_key: Any, monkeypatch: Any) -> None:
    """Held in the statement that stores the turn and settled in the one that stores its
    reply (PostgreSQL: CTEs; SQLite: its transactions), three budgets add no round trip; a
    budget with no room refuses the turn by name and nothing is stored or held."""
    from django.db import connection

    from agents import selectors
    from agents.kernel import llm
    from agents.kernel.exceptions import QuotaExceeded
    from agents.services import Actor, TurnResult

    agent = make_agent(slug="counted")
    key, _ = make_key("counted")
    cli = Actor(label="cli", channel="cli")
    for name, scope, limit in (("k", "key", 1000), ("a", "agent", 1000), ("g", "global", 120)):
        services.budget_save(budget=None, actor=cli, fields={
            "name": name, "scope": scope, "unit": "tokens", "limit": limit, "period": "day",
            **({"key": key.prefix} if scope == "key" else {}),
            **({"agent": "counted"} if scope == "agent" else {})})
    selectors.access_cache()  # the stamp read afresh, as every request does first
    rules = selectors.budgets_applying(selectors.budget_rules(), api_key=key,
                                       agent_id=agent.pk, user="")
    assert len(rules) == 3

    def statement() -> services.HoldStatement:
        return services.budget_reserve_statement(
            rules=rules, turn="t", provider_name=agent.provider.name, model="m",
            input_tokens=10, output_tokens=90)

    def reserve() -> Any:
        return services.budget_reserve(rules=rules, turn="t", provider_name=agent.provider.name,
                                       model="m", input_tokens=10, output_tokens=90).stored()

    sent: list[str] = []  # every statement the driver sends, Django's cursors' or not
    if connection.vendor == "postgresql":
        import psycopg

        execute = psycopg.Cursor.execute

        def counted(self: Any, query: Any, *args: Any, **kwargs: Any) -> Any:
            sent.append(str(query))
            return execute(self, query, *args, **kwargs)

        monkeypatch.setattr(psycopg.Cursor, "execute", counted)

    def turn(text: str, **holding: Any) -> tuple[int, Any]:
        hold = holding["hold"]() if holding else None
        sent.clear()
        start = services.thread_turn_begin(
            agent=agent, api_key=key, session_key=text, thread_id=None, user=None,
            incoming=[llm.Message("user", (llm.TextPart(text),))], workspace_root=None,
            dialect="chat", lease_seconds=60, exclusive=False,
            **({"before": reserve, "hold": lambda: hold} if hold else {}))
        services.thread_turn_finish(
            start=start, dialect="chat", holds=hold.holds if hold else None,
            result=TurnResult(text="ok", input_tokens=10, output_tokens=5))
        return len(sent), start

    plain, _ = turn("no budgets")
    budgeted, _ = turn("three budgets", hold=statement)
    if connection.vendor == "postgresql":  # (SQLite's: in its transactions, no round trip)
        assert budgeted == plain == 2  # no statement of their own
    assert sorted(Budget.objects.values_list("spent", "reserved")) == [(15, 0)] * 3
    # the global budget has 105 left: a worst case of 100 fits once more, then not
    turn("again", hold=statement)
    threads = Message.objects.filter(role="user").count()
    with pytest.raises(QuotaExceeded, match="Budget 'g'"):
        turn("refused", hold=statement)
    assert Message.objects.filter(role="user").count() == threads  # nothing stored
    assert sorted(Budget.objects.values_list("spent", "reserved")) == [(30, 0)] * 3
