"""A tool call an operator must approve: it waits (the thread ``waiting``, the approval listed
and announced), and an operator's decision over REST or the WebSocket feed runs it or refuses
it; no decision within the agent's approval timeout is a denial. Against a live server, with
the official OpenAI SDK as the client whose turn waits (the thread page's buttons are tested
in tests/pages/test_browser_tools.py)."""

from __future__ import annotations

import asyncio
import json
import threading
import time
from typing import Any

import httpx
import openai
import pytest
import websockets

from agents.models import Approval, McpServer, Message, Thread

pytestmark = pytest.mark.django_db(transaction=True)

ASK = [{"role": "user", "content": "What is six times seven?"}]
CALC = [{"tool_calls": [{"name": "calculator", "arguments": {"expression": "6 * 7"}}]},
        {"reply": "Results: {results}"}]


@pytest.fixture
def operator(make_key: Any) -> dict[str, str]:
    _, secret = make_key("night-shift", scopes=["operator"])
    return {"Authorization": f"Bearer {secret}"}


@pytest.fixture
def careful(make_agent: Any) -> Any:
    return make_agent(slug="careful", tools=["calculator"], require_approval="always",
                      approval_timeout_seconds=120, provider__options={"script": CALC})


def ask_in_background(server: Any, key: str, model: str, *, stream: bool = False
                      ) -> tuple[threading.Thread, dict[str, Any]]:
    """The client's turn, running until the approval is decided."""
    out: dict[str, Any] = {}
    client = openai.OpenAI(base_url=server.v1, api_key=key, max_retries=0, timeout=300)

    def run() -> None:
        try:
            if stream:
                chunks = list(client.chat.completions.create(model=model, messages=ASK,
                                                              stream=True))
                out["content"] = "".join(c.choices[0].delta.content or "" for c in chunks
                                         if c.choices)
                out["reasoning"] = "".join(
                    (c.choices[0].delta.model_extra or {}).get("reasoning_content") or ""
                    for c in chunks if c.choices)
            else:
                out["content"] = client.chat.completions.create(
                    model=model, messages=ASK).choices[0].message.content
        except Exception as exc:  # noqa: BLE001 - the test reads it
            out["error"] = exc

    worker = threading.Thread(target=run, daemon=True)
    worker.start()
    return worker, out


def pending(server: Any, headers: dict[str, str]) -> dict[str, Any]:
    """The first waiting approval, as ``GET /api/v1/approvals`` lists it."""
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        r = httpx.get(f"{server.url}/api/v1/approvals", headers=headers, timeout=10)
        assert r.status_code == 200, r.text
        if r.json()["results"]:
            return r.json()["results"][0]
        time.sleep(0.05)
    raise AssertionError("no approval was requested")


def test_approved_over_rest(gaia_server: Any, api_key: str, operator: dict[str, str],
                            careful: Any) -> None:
    worker, out = ask_in_background(gaia_server, api_key, "careful", stream=True)
    approval = pending(gaia_server, operator)
    assert (approval["agent"], approval["tool"], approval["server"], approval["status"]) == (
        "careful", "calculator", "gaia", "pending")
    assert json.loads(approval["arguments"]) == {"expression": "6 * 7"}
    thread = Thread.objects.get(pk=approval["thread_id"])
    assert thread.status == "waiting"
    # the agent shows it too
    agent = httpx.get(f"{gaia_server.url}/api/v1/agents/careful", headers=operator).json()
    assert agent["state"] == "waiting"
    r = httpx.post(f"{gaia_server.url}/api/v1/approvals/{approval['id']}", headers=operator,
                   json={"decision": "approve", "reason": "arithmetic is harmless"})
    assert r.status_code == 200, r.text
    assert (r.json()["status"], r.json()["decided_by"]) == ("approved", "key:night-shift")
    worker.join(60)
    assert out["content"] == "Results: 42"
    assert "waiting for an operator's approval" in out["reasoning"]  # the stream said so
    thread.refresh_from_db()
    assert thread.status == "completed"
    stored = Approval.objects.get(pk=approval["id"])
    assert (stored.status, stored.decided_by, stored.reason) == (
        "approved", "key:night-shift", "arithmetic is harmless")
    # decided once: a second decision is a conflict, an unknown one a 404
    again = httpx.post(f"{gaia_server.url}/api/v1/approvals/{approval['id']}", headers=operator,
                       json={"decision": "deny"})
    assert (again.status_code, again.json()["code"]) == (409, "approval_decided")
    unknown = httpx.post(f"{gaia_server.url}/api/v1/approvals/nope", headers=operator,
                         json={"decision": "deny"})
    assert (unknown.status_code, unknown.json()["code"]) == (404, "approval_not_found")
    listed = httpx.get(f"{gaia_server.url}/api/v1/approvals?status=approved", headers=operator)
    assert [a["id"] for a in listed.json()["results"]] == [approval["id"]]


def test_denied_over_rest(gaia_server: Any, api_key: str, operator: dict[str, str],
                          careful: Any) -> None:
    worker, out = ask_in_background(gaia_server, api_key, "careful")
    approval = pending(gaia_server, operator)
    bad = httpx.post(f"{gaia_server.url}/api/v1/approvals/{approval['id']}", headers=operator,
                     json={"decision": "maybe"})
    assert (bad.status_code, bad.json()["param"]) == (400, "decision")
    r = httpx.post(f"{gaia_server.url}/api/v1/approvals/{approval['id']}", headers=operator,
                   json={"decision": "deny", "reason": "not now"})
    assert r.status_code == 200, r.text
    worker.join(60)
    assert out["content"] == ("Results: calculator was not run: key:night-shift denied it: "
                              "not now.")
    result = Message.objects.get(thread_id=approval["thread_id"], role="tool")
    assert result.error.startswith("calculator was not run")


def test_no_decision_in_time_is_a_denial(gaia_server: Any, api_key: str,
                                         operator: dict[str, str], make_agent: Any) -> None:
    make_agent(slug="hasty", tools=["calculator"], require_approval=["calculator"],
               approval_timeout_seconds=1, provider__options={"script": CALC})
    worker, out = ask_in_background(gaia_server, api_key, "hasty")
    worker.join(60)
    assert out["content"] == "Results: calculator was not run: nobody approved it within 1 s."
    approval = Approval.objects.get()
    assert (approval.status, approval.decided_by) == ("expired", "timeout")
    assert Thread.objects.get(pk=approval.thread_id).status == "completed"
    late = httpx.post(f"{gaia_server.url}/api/v1/approvals/{approval.pk}", headers=operator,
                      json={"decision": "approve"})
    assert late.status_code == 409


def ws_url(server: Any) -> str:
    return server.url.replace("http://", "ws://") + "/ws"


async def decide_over_the_feed(server: Any, headers: dict[str, str], decision: str,
                               start: Any) -> tuple[dict[str, Any], dict[str, Any],
                                                    list[dict[str, Any]]]:
    """Subscribed to the feed, ``start()`` the turn, wait for its approval_requested event and
    decide it with a command; the event, the command's answer and the events seen until the
    approval_decided one."""
    seen: list[dict[str, Any]] = []
    async with websockets.connect(ws_url(server), additional_headers=headers) as ws:
        assert json.loads(await ws.recv())["event"] == "connected"
        await ws.send(json.dumps({"cmd": "subscribe", "id": 1, "agents": ["mcp-careful"]}))
        async with asyncio.timeout(60):
            while json.loads(await ws.recv()).get("id") != 1:  # subscribed
                pass
        start()
        requested = None
        async with asyncio.timeout(60):
            while requested is None:
                event = json.loads(await ws.recv())
                if event.get("event") == "approval_requested":
                    requested = event
            await ws.send(json.dumps({"cmd": decision, "id": 2,
                                      "approval_id": requested["approval_id"],
                                      "reason": "over the feed"}))
            answer = None
            while answer is None or not any(e["event"] == "approval_decided" for e in seen):
                event = json.loads(await ws.recv())
                seen.append(event)
                if event.get("event") in ("ack", "error") and event.get("id") == 2:
                    answer = event
            return requested, answer, seen


@pytest.mark.parametrize("decision", ["approve", "deny"])
def test_decided_over_the_websocket(gaia_server: Any, api_key: str, operator: dict[str, str],
                                    make_agent: Any, everything_bin: Any, decision: str) -> None:
    """An MCP server's own rule (``require_approval`` of the server: get-sum only)."""
    McpServer.objects.create(name="ev", command=str(everything_bin), args=["stdio"],
                             require_approval=["get-sum"])
    make_agent(slug="mcp-careful", tools=["mcp:ev"], provider__options={"script": [
        {"tool_calls": [{"name": "mcp__ev__echo", "arguments": {"message": "free"}},
                        {"name": "mcp__ev__get-sum", "arguments": {"a": 20, "b": 22}}]},
        {"reply": "Results: {results}"}]})
    started: dict[str, Any] = {}

    def start() -> None:
        started["worker"], started["out"] = ask_in_background(gaia_server, api_key,
                                                              "mcp-careful")

    requested, answer, seen = asyncio.run(decide_over_the_feed(gaia_server, operator, decision,
                                                               start))
    worker, out = started["worker"], started["out"]
    assert (requested["tool"], requested["server"], requested["agent"]) == (
        "mcp__ev__get-sum", "ev", "mcp-careful")
    assert json.loads(requested["arguments"]) == {"a": 20, "b": 22}
    status = "approved" if decision == "approve" else "denied"
    assert answer == {**answer, "event": "ack", "cmd": decision, "status": status}
    decided = next(e for e in seen if e["event"] == "approval_decided")
    assert (decided["decision"], decided["decided_by"], decided["reason"]) == (
        status, "key:night-shift", "over the feed")
    worker.join(60)
    if decision == "approve":
        assert out["content"] == "Results: Echo: free; The sum of 20 and 22 is 42."
    else:
        assert out["content"] == ("Results: Echo: free; mcp__ev__get-sum was not run: "
                                  "key:night-shift denied it: over the feed.")


def test_a_decision_the_key_may_not_make(gaia_server: Any, api_key: str, make_key: Any,
                                         careful: Any, make_agent: Any,
                                         operator: dict[str, str]) -> None:
    other = make_agent(slug="other", provider__options={})
    _, narrow = make_key("narrow", scopes=["operator"], agents=[other])
    worker, out = ask_in_background(gaia_server, api_key, "careful")
    approval = pending(gaia_server, operator)
    r = httpx.post(f"{gaia_server.url}/api/v1/approvals/{approval['id']}",
                   headers={"Authorization": f"Bearer {narrow}"}, json={"decision": "approve"})
    assert (r.status_code, r.json()["code"]) == (403, "agent_not_allowed")
    httpx.post(f"{gaia_server.url}/api/v1/approvals/{approval['id']}", headers=operator,
               json={"decision": "approve"})
    worker.join(60)
    assert out["content"] == "Results: 42"
