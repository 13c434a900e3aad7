"""The access table's rows and column of issue 41 (docs/manual/security.md), against a live
server: a spent budget on every channel that opens a turn, an exemption only staff give, and
the ``admin`` key, which may do over ``/api/v1`` what a staff session may and nothing on the
channels of chat, and can never make another admin key."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import httpx
import pytest

from agents import services
from agents.models import Agent, ApiKey, AuditEvent, Budget
from tests.operator.test_access_rules import (
    CHAT,
    OPERATOR,
    a2a_error,
    a2a_send,
    mcp_call,
    mcp_raw,
    rest,
    v1,
    ws_command,
)

pytestmark = pytest.mark.django_db(transaction=True)

ADMIN = ApiKey.Scope.ADMIN


@pytest.fixture
def agents(make_agent: Any) -> dict[str, Agent]:
    return {"echo": make_agent(slug="echo", provider__options={}),
            "other": make_agent(slug="other", provider__name="other", provider__options={})}


def test_a_spent_budget_refuses_a_turn_on_every_channel(gaia_server: Any, agents: Any,
                                                        make_key: Any) -> None:
    Budget.objects.create(name="echo-day", scope="agent", agent=agents["echo"], unit="tokens",
                          limit=5, period="day", period_start=datetime(1970, 1, 1, tzinfo=UTC))
    _, key = make_key("k", scopes=[CHAT, OPERATOR])
    said = "Budget 'echo-day' (agent:echo, 5 tokens a day): it has no room for this request."
    r = v1(gaia_server, key)
    assert r.status_code == 429
    assert r.json()["error"] == {"message": said, "type": "insufficient_quota",
                                 "param": None, "code": "insufficient_quota"}
    assert 0 < int(r.headers["retry-after"]) <= 86400
    r = httpx.post(f"{gaia_server.v1}/messages", timeout=30, headers={"x-api-key": key},
                   json={"model": "echo", "max_tokens": 10,
                         "messages": [{"role": "user", "content": "hi"}]})
    assert (r.status_code, r.json()["error"]) == (
        429, {"type": "insufficient_quota", "message": said})
    assert mcp_call(gaia_server, key) == (True, said)
    assert a2a_error(a2a_send(gaia_server, key)) == (200, -32004, said)
    r = rest(gaia_server, key, "POST", "/inject", {"to": "echo", "payload": "x"})
    assert (r.status_code, r.json()["code"], r.json()["detail"]) == (
        429, "insufficient_quota", said)
    answer = ws_command(gaia_server, key, {"cmd": "inject", "to": "echo", "payload": "x"})
    assert (answer["status"], answer["code"]) == (429, "insufficient_quota")
    assert not AuditEvent.objects.filter(action="inject").exists()  # nothing was done
    # a key staff exempted goes through, and says so in the trail
    _, exempt = make_key("vip", scopes=[CHAT], budget_exempt=True)
    assert v1(gaia_server, exempt).status_code == 200


def test_an_admin_key_does_over_the_api_what_staff_may_and_no_more(
        gaia_server: Any, agents: Any, make_key: Any, make_thread: Any) -> None:
    admin_key, admin = make_key("provisioner", scopes=[ADMIN],
                                actor=services.Actor(label="cli", channel="cli"))
    _, ops = make_key("ops", scopes=[OPERATOR])
    # what staff manage
    assert rest(gaia_server, admin, "GET", "/keys").status_code == 200
    assert rest(gaia_server, admin, "GET", "/providers").status_code == 200
    made = rest(gaia_server, admin, "POST", "/keys", {"name": "bot", "scopes": ["chat"]})
    assert made.status_code == 201, made.text
    budget = rest(gaia_server, admin, "POST", "/budgets", {
        "name": "bot-month", "scope": "key", "key": made.json()["prefix"], "unit": "usd",
        "limit": "12.50", "period": "month", "soft_percent": 80})
    assert budget.status_code == 201, budget.text
    assert budget.json()["limit"] == "12.500000000"
    price = rest(gaia_server, admin, "POST", "/prices", {
        "provider": agents["echo"].provider.name, "input_per_mtok": "0.5",
        "output_per_mtok": "1.5"})
    assert price.status_code == 200, price.text
    # and what an operator may (a staff session may watch and steer too)
    assert rest(gaia_server, admin, "GET", "/threads").status_code == 200
    assert rest(gaia_server, admin, "POST", "/agents/echo/pause").status_code == 200
    audit = rest(gaia_server, admin, "GET", "/audit?actor=key:provisioner")
    assert {e["action"] for e in audit.json()["results"]} == {
        "key_create", "budget_create", "price_set", "pause"}
    # never another admin key, nor an exemption from budgets: staff only
    for body in ({"name": "heir", "scopes": ["admin"]},
                 {"name": "vip", "scopes": ["chat"], "budget_exempt": True}):
        r = rest(gaia_server, admin, "POST", "/keys", body)
        assert (r.status_code, r.json()["code"]) == (403, "staff_required"), body
    r = rest(gaia_server, admin, "PATCH", f"/keys/{made.json()['id']}", {"scopes": ["admin"]})
    assert (r.status_code, r.json()["code"]) == (403, "staff_required")
    assert not ApiKey.objects.filter(name__in=["heir", "vip"]).exists()
    assert ApiKey.objects.get(name="bot").scopes == ["chat"]
    # nothing on the channels of chat
    r = v1(gaia_server, admin)
    assert (r.status_code, r.json()["error"]["code"]) == (403, "insufficient_scope")
    assert mcp_raw(gaia_server, admin).status_code == 403
    # an operator key manages none of it
    for method, path in (("GET", "/keys"), ("GET", "/budgets"), ("GET", "/prices"),
                         ("POST", "/keys")):
        r = rest(gaia_server, ops, method, path, {"name": "x", "scopes": ["admin"]})
        assert (r.status_code, r.json()["code"]) == (403, "staff_required"), path
    # the rows of an agent's state: as for an operator key
    r = rest(gaia_server, admin, "POST", "/inject", {"to": "echo", "payload": "x"})
    assert (r.status_code, r.json()["code"]) == (503, "agent_paused")
    thread_id = make_thread(agents["echo"], "hello")
    r = rest(gaia_server, admin, "POST", "/inject",
             {"to": "other", "payload": "x", "thread_id": thread_id})
    assert (r.status_code, r.json()["code"]) == (400, "thread_agent_mismatch")
    Agent.objects.filter(slug="other").update(enabled=False)
    services.config_changed()
    r = rest(gaia_server, admin, "POST", "/inject", {"to": "other", "payload": "x"})
    assert (r.status_code, r.json()["code"]) == (400, "agent_disabled")
    _, narrow = make_key("narrow-admin", scopes=[ADMIN], agents=[agents["other"]],
                         actor=services.Actor(label="cli", channel="cli"))
    r = rest(gaia_server, narrow, "POST", "/agents/echo/resume")
    assert (r.status_code, r.json()["code"]) == (403, "agent_not_allowed")
    # revoked: refused at once
    services.api_key_revoke(key=admin_key)
    assert rest(gaia_server, admin, "GET", "/keys").status_code == 401
