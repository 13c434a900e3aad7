"""The /v1/messages contract (Anthropic Messages API) over real HTTP against a live Gaia."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from agents.models import Message, Thread
from tests.sse import parse_sse

pytestmark = pytest.mark.django_db(transaction=True)

HEADERS = {"anthropic-version": "2023-06-01"}


def post(server: Any, key: str | None, body: dict[str, Any], path: str = "/messages",
         **headers: str) -> httpx.Response:
    h = {**HEADERS, "x-api-key": key} if key else dict(HEADERS)
    h.update(headers)
    return httpx.post(server.v1 + path, json=body, headers=h, timeout=30)


def user(text: str) -> dict[str, str]:
    return {"role": "user", "content": text}


def events(r: httpx.Response) -> list[dict[str, Any]]:
    out = []
    for frame in parse_sse(r.text).frames:
        if frame.data is not None:
            payload = frame.json()
            assert frame.event == payload["type"]  # every frame is a named event
            out.append(payload)
    return out


def test_messages_json_reply_shape(gaia_server, echo_agent, api_key):
    r = post(gaia_server, api_key, {"model": "echo", "max_tokens": 100,
                                    "messages": [user("héllo wörld")]})
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["id"].startswith("msg_")
    assert body["type"] == "message"
    assert body["role"] == "assistant"
    assert body["model"] == "echo"
    assert body["content"] == [{"type": "text", "text": "héllo wörld"}]
    assert body["stop_reason"] == "end_turn"
    assert body["stop_sequence"] is None
    assert body["usage"]["output_tokens"] == 2
    assert body["usage"]["input_tokens"] > 0
    thread = Thread.objects.get(pk=r.headers["x-gaia-thread-id"])
    reply = thread.messages.get(role="assistant")
    assert reply.response_id == body["id"]
    assert reply.dialect == "messages"


def test_messages_stream_events(gaia_server, make_agent, api_key):
    make_agent(slug="counted", instructions="", provider__options={})
    r = post(gaia_server, api_key, {"model": "counted", "max_tokens": 100, "stream": True,
                                    "messages": [user("one two three")]})
    assert r.status_code == 200
    assert r.headers["content-type"].startswith("text/event-stream")
    evs = events(r)
    assert [e["type"] for e in evs] == (
        ["message_start", "content_block_start"] + ["content_block_delta"] * 3
        + ["content_block_stop", "message_delta", "message_stop"])
    start = evs[0]["message"]
    assert start["usage"]["input_tokens"] == 3  # the real count, before any output
    assert start["content"] == []
    assert evs[1] == {"type": "content_block_start", "index": 0,
                      "content_block": {"type": "text", "text": ""}}
    assert "".join(e["delta"]["text"] for e in evs[2:5]) == "one two three"
    assert evs[-2]["delta"]["stop_reason"] == "end_turn"
    assert evs[-2]["usage"]["output_tokens"] == 3


def test_messages_system_blocks_and_content_blocks(gaia_server, make_agent, api_key):
    make_agent(slug="sys", instructions="AGENT", provider__options={"echo": "system"})
    r = post(gaia_server, api_key, {
        "model": "sys", "max_tokens": 100, "temperature": 0.2, "top_k": 5,
        "stop_sequences": ["END"], "metadata": {"user_id": "u-1"},
        "thinking": {"type": "enabled", "budget_tokens": 1024},
        "system": [{"type": "text", "text": "ONE", "cache_control": {"type": "ephemeral"}},
                   {"type": "text", "text": "TWO"}],
        "messages": [
            {"role": "user", "content": [{"type": "text", "text": "q"}]},
            {"role": "assistant", "content": [
                {"type": "thinking", "thinking": "hmm", "signature": "sig"},
                {"type": "text", "text": "calling"},
                {"type": "tool_use", "id": "toolu_1", "name": "ls", "input": {"p": "."}}]},
            {"role": "user", "content": [
                {"type": "tool_result", "tool_use_id": "toolu_1",
                 "content": [{"type": "text", "text": "a.txt"}]},
                {"type": "text", "text": "and now?"}]},
        ]},
        **{"anthropic-beta": "prompt-caching-2024-07-31"})
    assert r.status_code == 200, r.text
    assert r.json()["content"][0]["text"] == "AGENT\n\nONE\n\nTWO"
    thread = Thread.objects.get(pk=r.headers["x-gaia-thread-id"])
    assert thread.user == "u-1"
    rows = list(thread.messages.order_by("seq"))
    assert [m.role for m in rows] == ["user", "assistant", "tool", "user", "assistant"]
    assert rows[1].content == "calling"
    assert rows[1].tool_calls == [{"id": "toolu_1", "name": "ls", "arguments": '{"p": "."}'}]
    assert rows[2].tool_call_id == "toolu_1"
    assert rows[2].content == "a.txt"
    assert rows[3].content == "and now?"


def test_messages_auth_by_bearer_or_x_api_key(gaia_server, echo_agent, api_key):
    body = {"model": "echo", "max_tokens": 5, "messages": [user("x")]}
    assert post(gaia_server, api_key, body).status_code == 200
    r = httpx.post(gaia_server.v1 + "/messages", json=body, timeout=30,
                   headers={**HEADERS, "Authorization": f"Bearer {api_key}"})
    assert r.status_code == 200
    r = post(gaia_server, None, body)
    assert r.status_code == 401
    assert r.json() == {"type": "error", "error": {
        "type": "authentication_error", "message": r.json()["error"]["message"]}}
    r = post(gaia_server, "gaia_00000000_wrong", body)
    assert r.status_code == 401
    assert r.json()["error"]["type"] == "authentication_error"


@pytest.mark.parametrize("body", [
    {"model": "echo", "messages": [user("x")]},  # no max_tokens
    {"model": "echo", "max_tokens": 0, "messages": [user("x")]},
    {"model": "echo", "max_tokens": 5},
    {"model": "echo", "max_tokens": 5, "messages": []},
    {"max_tokens": 5, "messages": [user("x")]},
    {"model": "echo", "max_tokens": 5, "messages": [{"role": "system", "content": "x"}]},
    {"model": "echo", "max_tokens": 5, "messages": [{"role": "user", "content": [
        {"type": "document", "source": {}}]}]},
    {"model": "echo", "max_tokens": 5, "messages": [{"role": "user", "content": [
        {"type": "image", "source": {"type": "base64", "media_type": "image/bmp",
                                     "data": "AAAA"}}]}]},
    {"model": "echo", "max_tokens": 5, "messages": [{"role": "user", "content": [
        {"type": "image", "source": {"type": "base64", "media_type": "image/png",
                                     "data": "@@@@"}}]}]},
    {"model": "echo", "max_tokens": 5, "messages": [{"role": "user", "content": [
        {"type": "tool_result", "content": "x"}]}]},
    {"model": "echo", "max_tokens": 5, "messages": [{"role": "assistant", "content": [
        {"type": "tool_use", "name": "f"}]}]},
    {"model": "echo", "max_tokens": 5, "tools": [{"name": "f"}], "messages": [user("x")]},
    {"model": "echo", "max_tokens": 5, "system": [{"type": "image"}], "messages": [user("x")]},
    {"model": "echo", "max_tokens": 5, "temperature": 1.5, "messages": [user("x")]},
])
def test_messages_invalid_requests_are_400_in_anthropic_envelope(gaia_server, echo_agent,
                                                                 api_key, body):
    r = post(gaia_server, api_key, body)
    assert r.status_code == 400, r.text
    payload = r.json()
    assert payload["type"] == "error"
    assert payload["error"]["type"] == "invalid_request_error"
    assert payload["error"]["message"]
    assert set(payload) == {"type", "error"}


def test_messages_missing_max_tokens_names_it(gaia_server, echo_agent, api_key):
    r = post(gaia_server, api_key, {"model": "echo", "messages": [user("x")]})
    assert "max_tokens" in r.json()["error"]["message"]


def test_messages_unknown_model_and_malformed_json(gaia_server, api_key):
    r = post(gaia_server, api_key, {"model": "nope", "max_tokens": 5, "messages": [user("x")]})
    assert r.status_code == 404
    assert r.json()["error"]["type"] == "not_found_error"
    r = httpx.post(gaia_server.v1 + "/messages", content=b"{", timeout=10,
                   headers={**HEADERS, "x-api-key": api_key})
    assert r.status_code == 400
    assert r.json()["type"] == "error"


def test_messages_max_tokens_stop_reason(gaia_server, echo_agent, api_key):
    body = post(gaia_server, api_key, {"model": "echo", "max_tokens": 2,
                                       "messages": [user("a b c d")]}).json()
    assert body["content"][0]["text"] == "a b"
    assert body["stop_reason"] == "max_tokens"


def test_messages_failure_before_output_is_http_error(gaia_server, make_agent, api_key):
    make_agent(slug="broken", provider__options={"fail": "before", "fail_status": 504})
    for stream in (False, True):
        r = post(gaia_server, api_key, {"model": "broken", "max_tokens": 5, "stream": stream,
                                        "messages": [user("x")]})
        assert r.status_code == 504
        assert r.json()["error"]["type"] == "timeout_error"


def test_messages_failure_after_first_byte_is_error_event(gaia_server, make_agent, api_key):
    make_agent(slug="midfail", provider__options={"fail": "after", "fail_after": 2})
    r = post(gaia_server, api_key, {"model": "midfail", "max_tokens": 50, "stream": True,
                                    "messages": [user("a b c d")]})
    assert r.status_code == 200
    evs = events(r)
    assert evs[-1]["type"] == "error"
    assert evs[-1]["error"]["type"] == "api_error"
    assert evs[-1]["error"]["message"]
    text = "".join(e["delta"]["text"] for e in evs if e["type"] == "content_block_delta")
    assert text == "a b"
    reply = Message.objects.filter(role="assistant").latest("created_at")
    assert reply.finish_reason == "error"


def test_messages_pings_while_backend_is_silent(gaia_server, make_agent, api_key):
    make_agent(slug="pause", provider__options={"ttft_ms": 2600, "reply": "late"})
    r = post(gaia_server, api_key, {"model": "pause", "max_tokens": 5, "stream": True,
                                    "messages": [user("x")]})
    kinds = [e["type"] for e in events(r)]
    assert kinds[0] == "message_start"
    assert kinds.count("ping") >= 2
    assert kinds[-1] == "message_stop"


def test_count_tokens(gaia_server, make_agent, api_key):
    make_agent(slug="counter", instructions="agent rules", provider__options={})
    body = {"model": "counter", "system": "one two",
            "messages": [user("three four five")], "tools": [
                {"name": "f", "input_schema": {"type": "object"}}]}
    r = post(gaia_server, api_key, body, path="/messages/count_tokens")
    assert r.status_code == 200, r.text
    assert r.json() == {"input_tokens": 7}
    assert Thread.objects.count() == 0  # counting is not a turn
    r = post(gaia_server, api_key, {"model": "counter"}, path="/messages/count_tokens")
    assert r.status_code == 400
    assert r.json()["type"] == "error"


def test_models_in_anthropic_shape(gaia_server, echo_agent, api_key):
    r = httpx.get(gaia_server.v1 + "/models", headers={**HEADERS, "x-api-key": api_key})
    body = r.json()
    assert body["has_more"] is False
    assert "echo" in [m["id"] for m in body["data"]]
