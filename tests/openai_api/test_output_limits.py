"""Whose output limit cut a reply (issue 36, item 2): Anthropic's ``max_tokens`` stop reason,
the Responses API's ``incomplete`` status and Chat Completions' ``length`` name the limit the
*client* asked for. A reply cut by the agent's own smaller ``max_output_tokens`` ends the
agent's turn (``end_turn``, ``completed``, ``stop``): Claude Code answers ``max_tokens`` by
asking for more (and fails after four tries with "exceeded the 32000 output token maximum"),
Codex CLI fails an incomplete response. The stored turn keeps ``length`` either way."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from agents.models import Message
from tests.sse import parse_sse

pytestmark = pytest.mark.django_db(transaction=True)

ANTHROPIC = {"anthropic-version": "2023-06-01"}


@pytest.fixture
def short_agent(make_agent):
    """Echoes the question, at most 2 tokens of it (the agent's own limit)."""
    return make_agent(slug="short", provider__options={}, max_output_tokens=2)


def frames(r: httpx.Response) -> list[dict[str, Any]]:
    return [f.json() for f in parse_sse(r.text).frames if f.data not in (None, "[DONE]")]


def messages(server: Any, key: str, max_tokens: int, stream: bool) -> httpx.Response:
    return httpx.post(server.v1 + "/messages", headers={**ANTHROPIC, "x-api-key": key},
                      timeout=30, json={"model": "short", "max_tokens": max_tokens,
                                        "stream": stream,
                                        "messages": [{"role": "user", "content": "a b c d"}]})


def test_the_agents_limit_is_end_turn_the_clients_is_max_tokens(gaia_server, short_agent,
                                                                 api_key):
    body = messages(gaia_server, api_key, 32000, stream=False).json()
    assert body["content"][0]["text"] == "a b"
    assert body["stop_reason"] == "end_turn"
    [delta] = [e for e in frames(messages(gaia_server, api_key, 32000, stream=True))
               if e["type"] == "message_delta"]
    assert delta["delta"]["stop_reason"] == "end_turn"
    # The client's own limit, when it is what cut the reply.
    assert messages(gaia_server, api_key, 2, stream=False).json()["stop_reason"] == "max_tokens"
    [delta] = [e for e in frames(messages(gaia_server, api_key, 2, stream=True))
               if e["type"] == "message_delta"]
    assert delta["delta"]["stop_reason"] == "max_tokens"
    # Gaia's own record says what happened.
    stored = Message.objects.filter(thread__agent=short_agent, role="assistant")
    assert set(stored.values_list("finish_reason", flat=True)) == {"length"}
    assert stored.count() == 4


def responses(server: Any, key: str, stream: bool, **fields: Any) -> httpx.Response:
    return httpx.post(server.v1 + "/responses", headers={"Authorization": f"Bearer {key}"},
                      timeout=30, json={"model": "short", "input": "a b c d", "stream": stream,
                                        **fields})


def test_the_agents_limit_is_completed_the_clients_is_incomplete(gaia_server, short_agent,
                                                                  api_key):
    body = responses(gaia_server, api_key, stream=False).json()
    assert body["status"] == "completed"
    assert body["incomplete_details"] is None
    assert frames(responses(gaia_server, api_key, stream=True))[-1]["type"] == (
        "response.completed")
    body = responses(gaia_server, api_key, stream=False, max_output_tokens=2).json()
    assert body["status"] == "incomplete"
    assert body["incomplete_details"] == {"reason": "max_output_tokens"}
    evs = frames(responses(gaia_server, api_key, stream=True, max_output_tokens=2))
    assert evs[-1]["type"] == "response.incomplete"


def chat(server: Any, key: str, stream: bool, **fields: Any) -> httpx.Response:
    return httpx.post(server.v1 + "/chat/completions", headers={"Authorization": f"Bearer {key}"},
                      timeout=30, json={"model": "short", "stream": stream, **fields,
                                        "messages": [{"role": "user", "content": "a b c d"}]})


def chunks_finish(r: httpx.Response) -> list[str]:
    return [c["finish_reason"] for e in frames(r) for c in e["choices"] if c["finish_reason"]]


def test_the_agents_limit_is_stop_the_clients_is_length(gaia_server, short_agent, api_key):
    """Chat Completions: Aider shows "hit a token limit!" for ``length`` and applies no edit,
    Qwen Code asks again with twice the max_tokens and then for a continuation."""
    body = chat(gaia_server, api_key, False, max_tokens=32000).json()
    assert body["choices"][0]["message"]["content"] == "a b"
    assert body["choices"][0]["finish_reason"] == "stop"
    assert chat(gaia_server, api_key, False).json()["choices"][0]["finish_reason"] == "stop"
    r = chat(gaia_server, api_key, True, max_tokens=32000,
             stream_options={"include_usage": True})
    assert chunks_finish(r) == ["stop"]
    assert frames(r)[-1]["usage"]["completion_tokens"] == 2  # the usage chunk comes last
    # The client's own limit, when it is what cut the reply.
    for field in ("max_tokens", "max_completion_tokens"):
        body = chat(gaia_server, api_key, False, **{field: 2}).json()
        assert body["choices"][0]["finish_reason"] == "length"
        assert chunks_finish(chat(gaia_server, api_key, True, **{field: 2})) == ["length"]
    stored = Message.objects.filter(thread__agent=short_agent, role="assistant")
    assert set(stored.values_list("finish_reason", flat=True)) == {"length"}
