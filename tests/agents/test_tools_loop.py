"""Agents that act: an agent's own tools run by Gaia, through the official OpenAI and Anthropic
SDKs over all three dialects, JSON and stream, against a live server; and the loop's limits,
failures and records."""

from __future__ import annotations

import json
from typing import Any

import anthropic
import openai
import pytest

from agents.models import Message, Thread

pytestmark = pytest.mark.django_db(transaction=True)

TWO_CALLS = [{"tool_calls": [{"name": "calculator", "arguments": {"expression": "6 * 7"}},
                             {"name": "current_time", "arguments": {"timezone": "UTC"}}]},
             {"reply": "Results: {results}"}]


@pytest.fixture
def calc(make_agent: Any) -> Any:
    return make_agent(slug="calc", tools=["calculator", "current_time"],
                      provider__options={"script": TWO_CALLS})


def oai(server: Any, key: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=server.v1, api_key=key, max_retries=0)


def ant(server: Any, key: str) -> anthropic.Anthropic:
    return anthropic.Anthropic(base_url=server.url, api_key=key, max_retries=0)


ASK = [{"role": "user", "content": "What is six times seven, and the time?"}]


def check_thread(thread_id: str) -> None:
    """The agent's own work is stored in the thread, apart from what the client holds."""
    rows = list(Message.objects.filter(thread_id=thread_id).order_by("seq"))
    assert [(m.role, m.internal) for m in rows] == [
        ("user", False), ("assistant", True), ("tool", True), ("tool", True),
        ("assistant", False)]
    call, *results = rows[1:4]
    assert [c["name"] for c in call.tool_calls] == ["calculator", "current_time"]
    assert (results[0].sender, results[0].recipient, results[0].content) == (
        "calculator", "calc", "42")
    assert results[0].latency_ms is not None
    assert results[0].error == ""
    assert rows[-1].content.startswith("Results: 42; ")
    assert Thread.objects.get(pk=thread_id).status == "completed"


@pytest.mark.parametrize("stream", [False, True])
def test_chat_completions(gaia_server: Any, api_key: str, calc: Any, stream: bool) -> None:
    client = oai(gaia_server, api_key)
    if not stream:
        raw = client.chat.completions.with_raw_response.create(model="calc", messages=ASK)
        done = raw.parse()
        content = done.choices[0].message.content
        reasoning = done.choices[0].message.model_extra["reasoning_content"]
        thread_id = raw.headers["x-gaia-thread-id"]
    else:
        with client.chat.completions.with_streaming_response.create(
                model="calc", messages=ASK, stream=True) as raw:
            thread_id = raw.headers["x-gaia-thread-id"]
            chunks = list(raw.parse())
        content = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
        reasoning = "".join((c.choices[0].delta.model_extra or {}).get("reasoning_content")
                            or "" for c in chunks if c.choices)
        assert chunks[-1].choices[0].finish_reason == "stop"
    assert content.startswith("Results: 42; ")
    assert "[calculator done" in reasoning
    assert "] 42" in reasoning
    if stream:
        assert '[calculator] {"expression": "6 * 7"}' in reasoning  # as it started
    check_thread(thread_id)


@pytest.mark.parametrize("stream", [False, True])
def test_responses(gaia_server: Any, api_key: str, calc: Any, stream: bool) -> None:
    client = oai(gaia_server, api_key)
    if not stream:
        response = client.responses.create(model="calc", input=ASK)
    else:
        with client.responses.stream(model="calc", input=ASK) as events:
            kinds = [e.type for e in events]
            response = events.get_final_response()
        assert kinds.count("response.mcp_call.in_progress") == 2
        assert kinds.count("response.mcp_call.completed") == 2
        assert kinds.index("response.mcp_call.completed") < kinds.index(
            "response.output_text.delta")
    calls = [item for item in response.output if item.type == "mcp_call"]
    assert [(c.server_label, c.name, c.output) for c in calls][0] == ("gaia", "calculator", "42")
    assert calls[1].name == "current_time"
    assert calls[1].error is None
    assert response.output_text.startswith("Results: 42; ")


@pytest.mark.parametrize("stream", [False, True])
def test_messages(gaia_server: Any, api_key: str, calc: Any, stream: bool) -> None:
    client = ant(gaia_server, api_key)
    if not stream:
        message = client.messages.create(model="calc", max_tokens=200, messages=ASK)
    else:
        with client.messages.stream(model="calc", max_tokens=200, messages=ASK) as events:
            message = events.get_final_message()
    thinking = "".join(b.thinking for b in message.content if b.type == "thinking")
    text = "".join(b.text for b in message.content if b.type == "text")
    assert "[calculator done" in thinking
    assert text.startswith("Results: 42; ")
    assert message.stop_reason == "end_turn"


def test_a_failing_tool_is_the_models_error_result(gaia_server: Any, api_key: str,
                                                  make_agent: Any) -> None:
    make_agent(slug="bad-calc", tools=["calculator"], provider__options={"script": [
        {"tool_calls": [{"name": "calculator", "arguments": {"expression": "__import__('os')"}}]},
        {"reply": "The tool said: {results}"}]})
    done = oai(gaia_server, api_key).chat.completions.create(model="bad-calc", messages=ASK)
    assert done.choices[0].message.content.startswith("The tool said: calculator: ")
    assert "is not allowed" in done.choices[0].message.content
    row = Message.objects.filter(role="tool").get()
    assert row.error.startswith("calculator: ")


def test_max_steps_ends_the_turn_with_a_note(gaia_server: Any, api_key: str,
                                            make_agent: Any) -> None:
    forever = [{"tool_calls": [{"name": "calculator", "arguments": {"expression": "1 + 1"}}]}]
    make_agent(slug="looper", tools=["calculator"], max_steps=3,
               provider__options={"script": forever, "reply": "unused"})
    raw = oai(gaia_server, api_key).chat.completions.with_raw_response.create(
        model="looper", messages=ASK)
    reply = Message.objects.filter(thread_id=raw.headers["x-gaia-thread-id"],
                                   internal=False, role="assistant").get()
    assert "after 3 rounds (max_steps)" in reply.note
    assert Message.objects.filter(role="tool").count() == 3
    assert raw.parse().choices[0].finish_reason == "stop"


def test_client_tools_keep_working_beside_the_agents(gaia_server: Any, api_key: str,
                                                    make_agent: Any) -> None:
    """A call of the client's own tool goes back to the client, as it always did."""
    make_agent(slug="both", tools=["calculator"], provider__options={"script": [
        {"tool_calls": [{"name": "get_weather", "arguments": {"city": "Paris"}}]}]})
    done = oai(gaia_server, api_key).chat.completions.create(
        model="both", messages=ASK, tools=[{"type": "function", "function": {
            "name": "get_weather", "parameters": {"type": "object", "properties": {
                "city": {"type": "string"}}}}}])
    call = done.choices[0].message.tool_calls[0]
    assert (call.function.name, json.loads(call.function.arguments)) == (
        "get_weather", {"city": "Paris"})
    assert done.choices[0].finish_reason == "tool_calls"


async def test_the_feed_hears_of_each_call_and_result(calc: Any, api_key: str,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    from django.test import AsyncClient

    from agents.outlet import realtime

    sent: list[dict[str, Any]] = []
    monkeypatch.setattr(realtime, "send_event", sent.append)
    r = await AsyncClient().post(
        "/v1/chat/completions", content_type="application/json",
        data=json.dumps({"model": "calc", "messages": ASK}),
        headers={"Authorization": f"Bearer {api_key}"})
    assert r.status_code == 200, r.content
    thread_id = r.headers["x-gaia-thread-id"]
    calls = [e for e in sent if e["event"] == "tool_call"]
    results = [e for e in sent if e["event"] == "tool_result"]
    for e in calls + results:
        assert set(e) == {"event", "timestamp", *realtime.EVENT_FIELDS[e["event"]]}
        assert (e["agent"], e["thread_id"], e["server"]) == ("calc", thread_id, "gaia")
    assert [(e["tool"], e["arguments"]) for e in calls] == [
        ("calculator", '{"expression": "6 * 7"}'), ("current_time", '{"timezone": "UTC"}')]
    done = {e["tool"]: e for e in results}
    assert (done["calculator"]["status"], done["calculator"]["output"]) == ("completed", "42")
    assert done["calculator"]["duration_ms"] >= 0
    stored = [e["message"] for e in sent if e["event"] == "message"]
    assert [(m["from"], m["to"], m["payload_type"], m["internal"]) for m in stored] == [
        ("anonymous" if False else stored[0]["from"], "calc", "text", False),
        ("calc", "calculator, current_time", "tool_calls", True),
        ("calculator", "calc", "tool_result", True), ("current_time", "calc", "tool_result", True),
        ("calc", stored[0]["from"], "reply", False)]
