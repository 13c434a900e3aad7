"""The /v1/responses contract over real HTTP against a live Gaia process."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from agents.models import Message, Thread
from tests.sse import parse_sse

pytestmark = pytest.mark.django_db(transaction=True)


def post(server: Any, key: str | None, body: dict[str, Any], **headers: str) -> httpx.Response:
    h = {"Authorization": f"Bearer {key}"} if key else {}
    h.update(headers)
    return httpx.post(server.v1 + "/responses", json=body, headers=h, timeout=30)


def events(r: httpx.Response) -> list[dict[str, Any]]:
    stream = parse_sse(r.text)
    out = []
    for frame in stream.frames:
        if frame.data is None or frame.data == "[DONE]":
            continue
        payload = frame.json()
        assert frame.event == payload["type"]
        out.append(payload)
    return out


def test_responses_json_reply_shape(gaia_server, echo_agent, api_key):
    r = post(gaia_server, api_key, {"model": "echo", "input": "héllo wörld"})
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["id"].startswith("resp_")
    assert body["object"] == "response"
    assert body["status"] == "completed"
    assert body["model"] == "echo"
    [item] = body["output"]
    assert item["type"] == "message"
    assert item["role"] == "assistant"
    assert item["content"][0]["type"] == "output_text"
    assert item["content"][0]["text"] == "héllo wörld"
    assert body["usage"]["output_tokens"] == 2
    assert body["usage"]["total_tokens"] == body["usage"]["input_tokens"] + 2
    thread = Thread.objects.get(pk=r.headers["x-gaia-thread-id"])
    assert [m.role for m in thread.messages.all()] == ["user", "assistant"]
    assert thread.messages.get(role="assistant").response_id == body["id"]


def test_responses_stream_events_in_order(gaia_server, echo_agent, api_key):
    r = post(gaia_server, api_key, {"model": "echo", "input": "one two three", "stream": True})
    assert r.status_code == 200
    assert r.headers["content-type"].startswith("text/event-stream")
    evs = events(r)
    kinds = [e["type"] for e in evs]
    assert kinds[:5] == ["response.created", "response.in_progress", "response.output_item.added",
                         "response.content_part.added", "response.output_text.delta"]
    assert kinds[-4:] == ["response.output_text.done", "response.content_part.done",
                          "response.output_item.done", "response.completed"]
    assert [e["sequence_number"] for e in evs] == list(range(len(evs)))
    text = "".join(e["delta"] for e in evs if e["type"] == "response.output_text.delta")
    assert text == "one two three"
    done = evs[-1]["response"]
    assert done["status"] == "completed"
    assert done["usage"]["output_tokens"] == 3
    assert done["output"][0]["content"][0]["text"] == "one two three"
    assert parse_sse(r.text).data[-1] == "[DONE]"


def test_responses_input_items_and_nested_tools(gaia_server, make_agent, api_key):
    make_agent(slug="sys", instructions="AGENT", provider__options={"echo": "system"})
    r = post(gaia_server, api_key, {
        "model": "sys", "instructions": "INSTR", "store": False, "reasoning": {"effort": "high"},
        "metadata": {"a": "b"}, "max_output_tokens": 50, "parallel_tool_calls": False,
        "tools": [{"type": "function", "function": {"name": "nested", "parameters": {}}},
                  {"type": "function", "name": "flat"}],
        "input": [
            {"type": "message", "role": "developer", "content": "DEV"},
            {"role": "user", "content": [{"type": "input_text", "text": "q"}]},
            {"type": "message", "role": "assistant",
             "content": [{"type": "output_text", "text": "calling"}]},
            {"type": "function_call", "call_id": "c1", "name": "flat", "arguments": "{}"},
            {"type": "function_call_output", "call_id": "c1", "output": "done"},
            {"type": "reasoning", "id": "rs_1", "summary": []},
            {"role": "user", "content": "go on"},
        ]})
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["output"][0]["content"][0]["text"] == "AGENT\n\nINSTR\n\nDEV"
    assert [t["name"] for t in body["tools"]] == ["nested", "flat"]
    assert body["metadata"] == {"a": "b"}
    assert body["max_output_tokens"] == 50
    assert body["reasoning"]["effort"] == "high"
    thread = Thread.objects.get(pk=r.headers["x-gaia-thread-id"])
    rows = list(thread.messages.order_by("seq"))
    assert [m.role for m in rows] == ["user", "assistant", "tool", "user", "assistant"]
    assert rows[1].content == "calling"
    assert rows[1].tool_calls == [{"id": "c1", "name": "flat", "arguments": "{}"}]


@pytest.mark.parametrize(("body", "param"), [
    ({"model": "echo"}, "input"),
    ({"input": "x"}, "model"),
    ({"model": "echo", "input": []}, "input"),
    ({"model": "echo", "input": [{"type": "mystery"}]}, "input[0].type"),
    ({"model": "echo", "input": [{"role": "wizard", "content": "x"}]}, "input[0].role"),
    ({"model": "echo", "input": [{"role": "user", "content": [{"type": "input_audio"}]}]},
     "input[0].content[0].type"),
    ({"model": "echo", "input": [{"role": "user", "content": [
        {"type": "input_image", "file_id": "file_1"}]}]}, "input[0].content[0].image_url"),
    ({"model": "echo", "input": [{"role": "user", "content": [
        {"type": "input_image", "image_url": "data:image/png;base64,@@@"}]}]},
     "input[0].content[0].image_url"),
    ({"model": "echo", "input": [{"type": "function_call", "name": "f"}]}, "input[0].call_id"),
    ({"model": "echo", "input": [{"type": "function_call_output", "output": "x"}]},
     "input[0].call_id"),
    ({"model": "echo", "input": "x", "tools": [{"type": "function"}]}, "tools[0].name"),
    ({"model": "echo", "input": "x", "max_output_tokens": 0}, "max_output_tokens"),
    ({"model": "echo", "input": "x", "temperature": 5}, "temperature"),
    ({"model": "echo", "input": "x", "metadata": {"a": {"b": 1}}}, "metadata.a"),
    ({"model": "echo", "input": 42}, "input"),
])
def test_responses_invalid_requests_are_400_with_param(gaia_server, echo_agent, api_key, body,
                                                       param):
    r = post(gaia_server, api_key, body)
    assert r.status_code == 400, r.text
    error = r.json()["error"]
    assert error["type"] == "invalid_request_error"
    assert error["param"] == param


def test_responses_malformed_json_and_auth(gaia_server, echo_agent, api_key):
    r = httpx.post(gaia_server.v1 + "/responses", content=b"{", timeout=10,
                   headers={"Authorization": f"Bearer {api_key}"})
    assert r.status_code == 400
    assert r.json()["error"]["code"] == "invalid_json"
    r = httpx.post(gaia_server.v1 + "/responses", json={"model": "echo", "input": "x"})
    assert r.status_code == 401
    assert r.json()["error"]["code"] == "invalid_api_key"
    assert post(gaia_server, api_key, {"model": "nope", "input": "x"}).status_code == 404


def test_responses_length_is_incomplete(gaia_server, echo_agent, api_key):
    body = post(gaia_server, api_key, {"model": "echo", "input": "a b c d",
                                       "max_output_tokens": 2}).json()
    assert body["status"] == "incomplete"
    assert body["incomplete_details"] == {"reason": "max_output_tokens"}
    evs = events(post(gaia_server, api_key, {"model": "echo", "input": "a b c d",
                                             "max_output_tokens": 2, "stream": True}))
    assert evs[-1]["type"] == "response.incomplete"
    assert evs[-1]["response"]["output"][0]["content"][0]["text"] == "a b"


def test_responses_get_returns_the_stored_response(gaia_server, make_agent, api_key):
    make_agent(slug="steps", provider__options={"reasoning": "Thought.", "reply": "Said."})
    created = post(gaia_server, api_key, {"model": "steps", "input": "q", "stream": True})
    final = events(created)[-1]["response"]
    r = httpx.get(gaia_server.v1 + f"/responses/{final['id']}",
                  headers={"Authorization": f"Bearer {api_key}"})
    assert r.status_code == 200
    got = r.json()
    assert got["id"] == final["id"]
    assert got["output"] == final["output"]  # same items, same ids
    assert got["usage"] == final["usage"]
    missing = httpx.get(gaia_server.v1 + "/responses/resp_nope",
                        headers={"Authorization": f"Bearer {api_key}"})
    assert missing.status_code == 404
    assert missing.json()["error"]["code"] == "response_not_found"


def test_responses_failure_before_output_is_http_error(gaia_server, make_agent, api_key):
    make_agent(slug="broken", provider__options={"fail": "before", "fail_status": 429})
    for stream in (False, True):
        r = post(gaia_server, api_key, {"model": "broken", "input": "x", "stream": stream})
        assert r.status_code == 429
        assert r.json()["error"]["code"] == "upstream_rate_limited"


def test_responses_failure_after_first_byte_is_response_failed(gaia_server, make_agent,
                                                               api_key):
    make_agent(slug="midfail", provider__options={"fail": "after", "fail_after": 2})
    r = post(gaia_server, api_key, {"model": "midfail", "input": "a b c d", "stream": True})
    assert r.status_code == 200
    evs = events(r)
    assert [e["sequence_number"] for e in evs] == list(range(len(evs)))
    failed = evs[-1]
    assert failed["type"] == "response.failed"
    assert failed["response"]["status"] == "failed"
    assert failed["response"]["error"]["message"]
    assert failed["response"]["output"][0]["content"][0]["text"] == "a b"
    reply = Message.objects.filter(role="assistant").latest("created_at")
    assert reply.content == "a b"
    assert reply.finish_reason == "error"


def test_responses_keepalive_while_backend_is_silent(gaia_server, make_agent, api_key):
    make_agent(slug="pause", provider__options={"ttft_ms": 2600, "reply": "late"})
    r = post(gaia_server, api_key, {"model": "pause", "input": "x", "stream": True})
    assert parse_sse(r.text).comments.count("keepalive") >= 2
    assert events(r)[-1]["type"] == "response.completed"
