"""The /v1/responses contract over real HTTP against a live Gaia process."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from agents.models import Thread
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
