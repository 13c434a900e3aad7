"""A turn's trace (``GET /api/v1/threads/{id}/turns[/{n}]``): its steps as a tree on one time
axis, against a live server, turns made through the official OpenAI SDK with the fake
provider's ``script``: a tool call then a delegation to another agent, and a call an operator
approves."""

from __future__ import annotations

import json
import threading
import time
from datetime import datetime
from typing import Any

import httpx
import openai
import pytest

pytestmark = pytest.mark.django_db(transaction=True)

SCRIPT = [{"tool_calls": [{"name": "calculator", "arguments": {"expression": "6 * 7"}}]},
          {"tool_calls": [{"name": "agent__helper", "arguments": {"task": "Say hi"}}]},
          {"reply": "Done: {results}"}]


@pytest.fixture
def operator(make_key: Any) -> dict[str, str]:
    return {"Authorization": f"Bearer {make_key('ops', scopes=['operator'])[1]}"}


def at(value: str | None) -> datetime:
    assert value is not None
    return datetime.fromisoformat(value.replace("Z", "+00:00"))


def nested(node: dict[str, Any]) -> None:
    """Every node's children lie within it on the time axis, and its duration is its span."""
    start, end = at(node["started_at"]), at(node["ended_at"])
    assert start <= end, node
    assert node["duration_ms"] == round((end - start).total_seconds() * 1000), node
    for child in node.get("children") or ():
        if child["kind"] == "message":
            continue
        assert start <= at(child["started_at"]) <= at(child["ended_at"]) <= end, (node, child)
        nested(child)


def ask(server: Any, key: str, model: str, text: str, thread: str | None = None) -> Any:
    client = openai.OpenAI(base_url=server.v1, api_key=key, max_retries=0, timeout=60)
    headers = {"X-Gaia-Thread-Id": thread} if thread else None
    return client.chat.completions.with_raw_response.create(
        model=model, messages=[{"role": "user", "content": text}], extra_headers=headers)


def test_trace_of_a_tool_call_and_a_delegation(gaia_server: Any, api_key: str, make_agent: Any,
                                               operator: dict[str, str]) -> None:
    make_agent(slug="tracer", tools=["calculator", "agent:helper"],
               provider__options={"script": SCRIPT})
    make_agent(slug="helper", provider__options={"reply": "hi from the helper"})
    raw = ask(gaia_server, api_key, "tracer", "Compute, then ask the helper.")
    assert raw.parse().choices[0].message.content == "Done: hi from the helper"
    thread_id = raw.headers["x-gaia-thread-id"]
    again = ask(gaia_server, api_key, "tracer", "Once more.", thread=thread_id)
    assert again.parse().choices[0].message.content == "Done: hi from the helper"

    listed = httpx.get(f"{gaia_server.url}/api/v1/threads/{thread_id}/turns", headers=operator)
    assert listed.status_code == 200, listed.text
    turns = listed.json()["turns"]
    assert [(t["index"], t["input"], t["status"]) for t in turns] == [
        (0, "Compute, then ask the helper.", "completed"), (1, "Once more.", "completed")]
    assert listed.json()["parent"] is None
    assert at(turns[0]["ended_at"]) <= at(turns[1]["started_at"])

    r = httpx.get(f"{gaia_server.url}/api/v1/threads/{thread_id}/turns/1", headers=operator)
    assert r.status_code == 200, r.text
    turn = r.json()
    assert (turn["kind"], turn["index"], turn["status"], turn["output"]) == (
        "turn", 1, "completed", "Done: hi from the helper")
    assert turn["usage"]["input_tokens"] > 0
    assert turn["usage"]["output_tokens"] > 0
    # model, tool, model, delegation tool, model: in the order they ran
    kinds = [(c["kind"], c.get("name")) for c in turn["children"]]
    assert kinds == [("model_call", None), ("tool_call", "calculator"), ("model_call", None),
                     ("tool_call", "agent__helper"), ("model_call", None)]
    calc, delegating = turn["children"][1], turn["children"][3]
    assert (calc["server"], calc["origin"], json.loads(calc["arguments"]), calc["result"],
            calc["is_error"]) == ("gaia", "agent", {"expression": "6 * 7"}, "42", False)
    assert calc["duration_ms"] >= calc["latency_ms"] >= 0
    # per-call tokens are not stored (one Usage for the turn's calls): said, not made up
    assert turn["children"][0]["input_tokens"] is None
    assert delegating["server"] == "agents"
    (child,) = delegating["children"]
    assert (child["kind"], child["agent"], child["status"]) == ("delegation", "helper",
                                                               "completed")
    assert child["thread_url"] == f"/threads/{child['thread_id']}/"
    assert child["turn"]["input"] == "Say hi"
    assert child["turn"]["output"] == "hi from the helper"
    assert delegating["result"] == "hi from the helper"
    nested(turn)
    # the child's own trace names its caller: the parent thread and the calling message
    down = httpx.get(f"{gaia_server.url}{child['api_url']}", headers=operator).json()
    assert down["parent"]["thread_id"] == thread_id
    assert down["parent"]["agent"] == "tracer"
    assert down["parent"]["message_id"] == delegating["message_id"]
    assert down["parent"]["turn"] == 1
    nested(down)


def test_trace_of_an_approved_call(gaia_server: Any, api_key: str, make_agent: Any,
                                   operator: dict[str, str]) -> None:
    make_agent(slug="careful", tools=["calculator"], require_approval="always",
               approval_timeout_seconds=120, provider__options={"script": [
                   SCRIPT[0], {"reply": "Results: {results}"}]})
    out: dict[str, Any] = {}

    def run() -> None:
        out["raw"] = ask(gaia_server, api_key, "careful", "What is six times seven?")

    worker = threading.Thread(target=run, daemon=True)
    worker.start()
    deadline = time.monotonic() + 60
    waiting: list[Any] = []
    while not waiting and time.monotonic() < deadline:
        waiting = httpx.get(f"{gaia_server.url}/api/v1/approvals",
                            headers=operator).json()["results"]
        time.sleep(0.05)
    assert waiting, "no approval was requested"
    # while it waits, the turn is there, waiting, and its call with its approval undecided
    thread_id = waiting[0]["thread_id"]
    live = httpx.get(f"{gaia_server.url}/api/v1/threads/{thread_id}/turns/0",
                     headers=operator).json()
    assert live["status"] == "waiting"
    assert live["ended_at"] is None
    assert live["children"][1]["children"][0]["status"] == "pending"
    r = httpx.post(f"{gaia_server.url}/api/v1/approvals/{waiting[0]['id']}", headers=operator,
                   json={"decision": "approve", "reason": "fine"})
    assert r.status_code == 200, r.text
    worker.join(60)
    assert out["raw"].parse().choices[0].message.content == "Results: 42"

    turn = httpx.get(f"{gaia_server.url}/api/v1/threads/{thread_id}/turns/0",
                     headers=operator).json()
    assert [c["kind"] for c in turn["children"]] == ["model_call", "tool_call", "model_call"]
    call = turn["children"][1]
    (approval,) = call["children"]
    assert (approval["kind"], approval["status"], approval["decided_by"], approval["reason"]) == (
        "approval", "approved", "key:ops", "fine")
    assert approval["wait_ms"] == approval["duration_ms"] >= 0
    assert call["result"] == "42"
    assert call["duration_ms"] >= approval["duration_ms"]
    nested(turn)


def test_trace_access(gaia_server: Any, api_key: str, make_agent: Any,
                      operator: dict[str, str]) -> None:
    make_agent(slug="plain", provider__options={"reply": "hello"})
    thread_id = ask(gaia_server, api_key, "plain", "hi").headers["x-gaia-thread-id"]
    url = f"{gaia_server.url}/api/v1/threads/{thread_id}/turns"
    assert httpx.get(f"{url}/0").status_code == 401
    chat = httpx.get(f"{url}/0", headers={"Authorization": f"Bearer {api_key}"})
    assert (chat.status_code, chat.json()["code"]) == (403, "insufficient_scope")
    assert httpx.get(url, headers={"Authorization": f"Bearer {api_key}"}).status_code == 403
    one = httpx.get(f"{url}/0", headers=operator).json()
    assert [c["kind"] for c in one["children"]] == ["model_call"]
    only = one["children"][0]
    assert only["output_tokens"] == one["usage"]["output_tokens"] > 0  # its only call
    assert only["ttft_ms"] == one["ttft_ms"]
    for bad in ("1", "-1", "x"):
        r = httpx.get(f"{url}/{bad}", headers=operator)
        assert (r.status_code, r.json()["code"]) == (404, "turn_not_found"), bad
    other = f"{gaia_server.url}/api/v1/threads/00000000-0000-0000-0000-000000000000/turns"
    for path in (other, other + "/0", f"{gaia_server.url}/api/v1/threads/nope/turns/0"):
        r = httpx.get(path, headers=operator)
        assert (r.status_code, r.json()["code"]) == (404, "thread_not_found"), path
