"""The /v1/chat/completions contract over real HTTP against a live Gaia process."""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest

from agents.models import Message, Thread
from tests.conftest import free_port
from tests.sse import parse_sse

pytestmark = pytest.mark.django_db(transaction=True)


def chat(server: Any, key: str | None, body: dict[str, Any], **headers: str) -> httpx.Response:
    h = {"Authorization": f"Bearer {key}"} if key else {}
    h.update(headers)
    return httpx.post(server.v1 + "/chat/completions", json=body, headers=h, timeout=30)


def user(text: str) -> dict[str, str]:
    return {"role": "user", "content": text}


def test_chat_json_reply_shape(gaia_server, echo_agent, api_key):
    r = chat(gaia_server, api_key, {"model": "echo", "messages": [user("héllo wörld 你好")]})
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["object"] == "chat.completion"
    assert body["id"].startswith("chatcmpl-")
    assert body["model"] == "echo"
    choice = body["choices"][0]
    assert choice["message"] == {"role": "assistant", "content": "héllo wörld 你好",
                                 "refusal": None}
    assert choice["finish_reason"] == "stop"
    assert body["usage"] == {"prompt_tokens": 5, "completion_tokens": 3, "total_tokens": 8}
    thread = Thread.objects.get(pk=r.headers["x-gaia-thread-id"])
    assert [m.role for m in thread.messages.all()] == ["user", "assistant"]
    assert thread.output_tokens == 3
    assert not thread.usage_estimated


def test_chat_stream_frames(gaia_server, echo_agent, api_key):
    r = chat(gaia_server, api_key, {
        "model": "echo", "stream": True, "stream_options": {"include_usage": True},
        "messages": [user("one two three")],
    })
    assert r.status_code == 200
    assert r.headers["content-type"].startswith("text/event-stream")
    assert r.headers["cache-control"] == "no-cache"
    assert r.headers["x-accel-buffering"] == "no"
    stream = parse_sse(r.text)
    assert stream.data[-1] == "[DONE]"
    chunks = stream.json_payloads()
    assert chunks[0]["choices"][0]["delta"]["role"] == "assistant"
    text = "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks if c["choices"])
    assert text == "one two three"
    finals = [c for c in chunks if c["choices"] and c["choices"][0]["finish_reason"]]
    assert len(finals) == 1
    assert finals[0]["choices"][0]["finish_reason"] == "stop"
    assert chunks[-1]["choices"] == []
    assert chunks[-1]["usage"]["completion_tokens"] == 3
    assert chunks.index(finals[0]) == len(chunks) - 2


def test_chat_stream_without_include_usage_has_no_usage_chunk(gaia_server, echo_agent, api_key):
    r = chat(gaia_server, api_key, {"model": "echo", "stream": True, "messages": [user("hi")]})
    chunks = parse_sse(r.text).json_payloads()
    assert all(c["choices"] for c in chunks)


def test_chat_tolerates_unknown_fields_and_content_forms(gaia_server, echo_agent, api_key):
    r = chat(gaia_server, api_key, {
        "model": "echo", "seed": 7, "logit_bias": {"50256": -100}, "user": "u1",
        "frequency_penalty": 0.5, "presence_penalty": 0.1, "logprobs": False, "n": 1,
        "response_format": {"type": "text"}, "something_new": {"x": 1},
        "messages": [
            {"role": "developer", "content": "Dev note."},
            {"role": "system", "content": [{"type": "text", "text": "Sys note."}]},
            user("first"),
            {"role": "assistant", "content": None, "tool_calls": [
                {"id": "call_1", "type": "function",
                 "function": {"name": "lookup", "arguments": "{\"q\": 1}"}}]},
            {"role": "tool", "tool_call_id": "call_1", "content": "42"},
            {"role": "user", "content": [{"type": "text", "text": "second"},
                                         {"type": "text", "text": "part"}]},
        ],
    })
    assert r.status_code == 200, r.text
    assert r.json()["choices"][0]["message"]["content"] == "second\npart"


def test_client_system_messages_augment_agent_instructions(gaia_server, make_agent, api_key):
    make_agent(slug="sys", instructions="AGENT RULES", provider__options={"echo": "system"})
    r = chat(gaia_server, api_key, {"model": "sys", "messages": [
        {"role": "system", "content": "CLIENT RULES"}, user("hi")]})
    assert r.json()["choices"][0]["message"]["content"] == "AGENT RULES\n\nCLIENT RULES"


def test_copilot_workspace_root_reaches_the_agent(gaia_server, make_agent, api_key):
    make_agent(slug="ws", instructions="I", provider__options={"echo": "system"})
    content = ("<workspace_info>\nI am working in a workspace with the following folders:\n"
               "- /home/dev/project\n</workspace_info>\nFix the bug.")
    r = chat(gaia_server, api_key, {"model": "ws", "messages": [user(content)]})
    assert "/home/dev/project" in r.json()["choices"][0]["message"]["content"]
    thread = Thread.objects.get(pk=r.headers["x-gaia-thread-id"])
    assert thread.workspace_root == "/home/dev/project"


@pytest.mark.parametrize(
    ("body", "param"),
    [
        ({"model": "echo", "messages": [{"role": "system", "content": "only"}]}, "messages"),
        ({"model": "echo", "messages": []}, "messages"),
        ({"model": "echo"}, "messages"),
        ({"messages": [{"role": "user", "content": "x"}]}, "model"),
        ({"model": "echo", "messages": [{"role": "wizard", "content": "x"}]}, "messages[0].role"),
        ({"model": "echo", "temperature": 9, "messages": [{"role": "user", "content": "x"}]},
         "temperature"),
        ({"model": "echo", "messages": [{"role": "user", "content": [{"type": "audio"}]}]},
         "messages[0].content[0].type"),
    ],
)
def test_chat_invalid_requests_are_400_with_param(gaia_server, echo_agent, api_key, body, param):
    r = chat(gaia_server, api_key, body)
    assert r.status_code == 400, r.text
    error = r.json()["error"]
    assert error["type"] == "invalid_request_error"
    assert error["param"] == param
    assert set(error) == {"message", "type", "param", "code"}


def test_chat_malformed_json_is_400(gaia_server, echo_agent, api_key):
    r = httpx.post(gaia_server.v1 + "/chat/completions", content=b'{"model": "echo", ',
                   headers={"Authorization": f"Bearer {api_key}"})
    assert r.status_code == 400
    assert r.json()["error"]["code"] == "invalid_json"


def test_unknown_model_is_404_on_model_param(gaia_server, api_key):
    r = chat(gaia_server, api_key, {"model": "nope", "messages": [user("x")]})
    assert r.status_code == 404
    assert r.json()["error"]["param"] == "model"
    assert r.json()["error"]["code"] == "model_not_found"


def test_disabled_agent_is_404(gaia_server, make_agent, api_key):
    make_agent(slug="off", enabled=False)
    assert chat(gaia_server, api_key, {"model": "off", "messages": [user("x")]}).status_code == 404


def test_wrong_method_is_405_in_envelope(gaia_server, api_key):
    r = httpx.get(gaia_server.v1 + "/chat/completions",
                  headers={"Authorization": f"Bearer {api_key}"})
    assert r.status_code == 405
    assert r.json()["error"]["code"] == "method_not_allowed"
    assert "POST" in r.headers["allow"]


def test_unknown_route_is_404_in_envelope(gaia_server, api_key):
    r = httpx.get(gaia_server.v1 + "/engines", headers={"Authorization": f"Bearer {api_key}"})
    assert r.status_code == 404
    assert "error" in r.json()


def test_oversized_body_is_413(gaia_server, echo_agent, api_key):
    from django.conf import settings

    big = "x" * (settings.GAIA_MAX_BODY_BYTES + 10)
    r = chat(gaia_server, api_key, {"model": "echo", "messages": [user(big)]})
    assert r.status_code == 413
    assert r.json()["error"]["code"] == "request_too_large"


def test_context_over_agent_limit_is_400(gaia_server, make_agent, api_key):
    make_agent(slug="tiny", max_input_tokens=5)
    r = chat(gaia_server, api_key, {"model": "tiny", "messages": [user("a b c d e f g h i j")]})
    assert r.status_code == 400
    assert r.json()["error"]["code"] == "context_length_exceeded"


def test_max_tokens_caps_the_reply_with_length(gaia_server, echo_agent, api_key):
    r = chat(gaia_server, api_key, {"model": "echo", "max_tokens": 2,
                                    "messages": [user("a b c d")]})
    body = r.json()
    assert body["choices"][0]["message"]["content"] == "a b"
    assert body["choices"][0]["finish_reason"] == "length"


@pytest.mark.parametrize(("fail", "status", "code"), [
    ({"fail": "before"}, 502, "upstream_error"),
    ({"fail": "before", "fail_status": 504}, 504, "upstream_timeout"),
    ({"fail": "before", "fail_status": 429, "retry_after": 9}, 429, "upstream_rate_limited"),
])
def test_provider_failure_before_output_is_http_error(gaia_server, make_agent, api_key,
                                                      fail, status, code):
    make_agent(slug="broken", provider__options=fail)
    for stream in (False, True):
        r = chat(gaia_server, api_key, {"model": "broken", "stream": stream,
                                        "messages": [user("x")]})
        assert r.status_code == status, r.text
        assert r.json()["error"]["code"] == code
        assert "Traceback" not in r.text
        if status == 429:
            assert r.headers["retry-after"] == "9"
    thread = Thread.objects.get(pk=Thread.objects.latest("updated_at").pk)
    assert thread.status == Thread.Status.ERROR
    assert thread.last_error


def test_unreachable_upstream_is_502_and_the_turn_is_still_recorded(gaia_server, make_agent,
                                                                    api_key):
    """A turn without a session id is stored once its request reaches the provider; one
    that never got there (connection refused) is recorded all the same."""
    port = free_port()  # nothing listens there
    make_agent(slug="nowhere", provider__kind="openai",
               provider__base_url=f"http://127.0.0.1:{port}/v1", provider__name="nowhere")
    for stream in (False, True):
        r = chat(gaia_server, api_key, {"model": "nowhere", "stream": stream,
                                        "messages": [user(f"anyone there? {stream}")]})
        assert r.status_code == 502, r.text
        assert "unreachable" in r.json()["error"]["message"]
        thread = Thread.objects.get(title=f"anyone there? {stream}")
        assert thread.status == Thread.Status.ERROR
        assert "unreachable" in thread.last_error
        assert [m.role for m in thread.messages.order_by("seq")] == ["user", "assistant"]


def test_provider_timeout_is_504(gaia_server, make_agent, api_key):
    make_agent(slug="slow", provider__options={"fail": "timeout"}, provider__timeout_seconds=0.5)
    r = chat(gaia_server, api_key, {"model": "slow", "messages": [user("x")]})
    assert r.status_code == 504
    assert r.json()["error"]["code"] == "upstream_timeout"


def test_failure_after_first_byte_is_in_band(gaia_server, make_agent, api_key):
    make_agent(slug="midfail", provider__options={"fail": "after", "fail_after": 2})
    r = chat(gaia_server, api_key, {"model": "midfail", "stream": True,
                                    "messages": [user("a b c d")]})
    assert r.status_code == 200
    stream = parse_sse(r.text)
    assert stream.data[-1] == "[DONE]"
    error = json.loads(stream.data[-2])["error"]
    assert error["code"] == "upstream_error"
    assert error["message"]
    text = "".join(c["choices"][0]["delta"].get("content") or ""
                   for c in stream.json_payloads()[:-1])
    assert text == "a b"
    reply = Message.objects.filter(role="assistant").latest("created_at")
    assert reply.content == "a b"
    assert reply.finish_reason == "error"


def test_keepalive_comments_while_backend_is_silent(gaia_server, make_agent, api_key):
    # The server runs with GAIA_KEEPALIVE_SECONDS=1.
    make_agent(slug="pause", provider__options={"ttft_ms": 2600, "reply": "late"})
    r = chat(gaia_server, api_key, {"model": "pause", "stream": True, "messages": [user("x")]})
    stream = parse_sse(r.text)
    assert stream.comments.count("keepalive") >= 2
    assert stream.data[-1] == "[DONE]"
    assert "late" in r.text


def test_usage_estimate_is_labelled(gaia_server, make_agent, api_key):
    make_agent(slug="nousage", provider__options={"usage": False, "reply": "abcdefgh"})
    r = chat(gaia_server, api_key, {"model": "nousage", "messages": [user("x")]})
    assert r.json()["usage"]["completion_tokens"] == 2
    thread = Thread.objects.get(pk=r.headers["x-gaia-thread-id"])
    assert thread.usage_estimated
    assert thread.messages.get(role="assistant").usage_estimated
