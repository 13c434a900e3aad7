"""What reaches the provider (README, "What reaches the provider"): ``parallel_tool_calls``,
the request's user and Messages ``thinking``, sent over each dialect to an agent whose
provider is a fake upstream that records the request it got, for each provider kind.

- ``parallel_tool_calls`` (Chat, Responses; Messages ``tool_choice.disable_parallel_tool_use``)
  reaches an ``openai`` provider as ``parallel_tool_calls``; an ``anthropic`` provider gets a
  ``false`` as ``tool_choice.disable_parallel_tool_use`` (it has no "true" to send).
- the user (Chat and Responses ``user``, Responses ``safety_identifier``, Messages
  ``metadata.user_id``) reaches an ``openai`` provider as ``user`` and an ``anthropic`` one as
  ``metadata.user_id``: the thread's user, so a client's packed JSON never leaves as is.
- Messages ``thinking`` reaches an ``anthropic`` provider as sent; an ``openai`` one never
  sees it (a hint), and ``{"type": "disabled"}`` is not sent anywhere.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from tests.fakes.anthropic_upstream import FakeAnthropicUpstream
from tests.fakes.openai_upstream import FakeOpenAIUpstream

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.timeout(60)]

SCHEMA = {"type": "object", "properties": {"q": {"type": "string"}}}
QUESTION = "Look it up."


def body_for(dialect: str, **fields: Any) -> dict[str, Any]:
    """A request in ``dialect`` to the agent ``fwd`` offering one function tool, plus
    ``fields``."""
    if dialect == "chat":
        return {"model": "fwd", "messages": [{"role": "user", "content": QUESTION}],
                "tools": [{"type": "function", "function": {
                    "name": "lookup", "description": "Look up", "parameters": SCHEMA}}],
                **fields}
    if dialect == "responses":
        return {"model": "fwd", "input": QUESTION,
                "tools": [{"type": "function", "name": "lookup", "description": "Look up",
                           "parameters": SCHEMA}], **fields}
    return {"model": "fwd", "max_tokens": 2048, "messages": [{"role": "user", "content": QUESTION}],
            "tools": [{"name": "lookup", "description": "Look up", "input_schema": SCHEMA}],
            **fields}


PATHS = {"chat": "/chat/completions", "responses": "/responses", "messages": "/messages"}


@pytest.fixture(params=["openai", "anthropic"])
def upstream(request: pytest.FixtureRequest, make_agent: Any
             ) -> Iterator[FakeOpenAIUpstream | FakeAnthropicUpstream]:
    """A recording fake upstream of one provider kind, behind the agent ``fwd``."""
    kind = request.param
    fake = FakeOpenAIUpstream() if kind == "openai" else FakeAnthropicUpstream()
    with fake as up:
        make_agent(slug="fwd", provider__name=f"fwd-{kind}", provider__kind=kind,
                   provider__base_url=up.base_url, provider__options={})
        yield up


def kind_of(up: Any) -> str:
    return "openai" if isinstance(up, FakeOpenAIUpstream) else "anthropic"


def sent(server: Any, key: str, up: Any, dialect: str, **fields: Any) -> dict[str, Any]:
    """The body the upstream got for one request of ``dialect`` with ``fields``."""
    before = len(up.requests)
    r = httpx.post(server.v1 + PATHS[dialect], json=body_for(dialect, **fields),
                   headers={"Authorization": f"Bearer {key}"}, timeout=30)
    assert r.status_code == 200, r.text
    assert len(up.requests) == before + 1
    return up.last.body


@pytest.mark.parametrize("dialect", ["chat", "responses"])
@pytest.mark.parametrize("value", [False, True])
def test_parallel_tool_calls_reaches_each_provider_kind(gaia_server, api_key, upstream,
                                                        dialect, value):
    body = sent(gaia_server, api_key, upstream, dialect, parallel_tool_calls=value)
    if kind_of(upstream) == "openai":
        assert body["parallel_tool_calls"] is value
        return
    assert "parallel_tool_calls" not in body
    if value is False:
        assert body["tool_choice"] == {"type": "auto", "disable_parallel_tool_use": True}
    else:
        assert "disable_parallel_tool_use" not in body["tool_choice"]


def test_an_absent_parallel_tool_calls_sends_nothing(gaia_server, api_key, upstream):
    body = sent(gaia_server, api_key, upstream, "chat")
    assert "parallel_tool_calls" not in body
    assert "disable_parallel_tool_use" not in (body.get("tool_choice") or {})


def test_messages_disable_parallel_tool_use_reaches_each_provider_kind(gaia_server, api_key,
                                                                      upstream):
    body = sent(gaia_server, api_key, upstream, "messages",
                tool_choice={"type": "auto", "disable_parallel_tool_use": True})
    if kind_of(upstream) == "openai":
        assert body["parallel_tool_calls"] is False
    else:
        assert body["tool_choice"] == {"type": "auto", "disable_parallel_tool_use": True}


@pytest.mark.parametrize(("dialect", "fields"), [
    ("chat", {"user": "alice"}),
    ("responses", {"user": "alice"}),
    ("responses", {"safety_identifier": "alice"}),
    ("messages", {"metadata": {"user_id": "alice"}}),
], ids=["chat-user", "responses-user", "responses-safety_identifier", "messages-metadata"])
def test_the_user_reaches_each_provider_kind(gaia_server, api_key, upstream, dialect, fields):
    body = sent(gaia_server, api_key, upstream, dialect, **fields)
    if kind_of(upstream) == "openai":
        assert body["user"] == "alice"
        assert "metadata" not in body
    else:
        assert body["metadata"] == {"user_id": "alice"}
        assert "user" not in body


def test_claude_codes_packed_user_reaches_the_provider_as_the_threads_user(gaia_server,
                                                                           api_key, upstream):
    packed = json.dumps({"device_id": "d" * 64, "account_uuid": "acc-1",
                         "session_id": "0f0e0d0c-0b0a-4090-8070-605040302010"})
    body = sent(gaia_server, api_key, upstream, "messages", metadata={"user_id": packed})
    user = body["user"] if kind_of(upstream) == "openai" else body["metadata"]["user_id"]
    assert user.startswith("claude-code:")
    assert "{" not in user
    assert "acc-1" not in user


def test_no_user_sends_none(gaia_server, api_key, upstream):
    body = sent(gaia_server, api_key, upstream, "chat")
    assert "user" not in body
    assert "metadata" not in body


THINKING = {"type": "enabled", "budget_tokens": 1024}


def test_messages_thinking_reaches_an_anthropic_provider_only(gaia_server, api_key, upstream):
    body = sent(gaia_server, api_key, upstream, "messages", thinking=THINKING)
    if kind_of(upstream) == "anthropic":
        assert body["thinking"] == THINKING
    else:
        assert "thinking" not in body
        assert "reasoning_effort" not in body


def test_disabled_thinking_is_sent_nowhere(gaia_server, api_key, upstream):
    body = sent(gaia_server, api_key, upstream, "messages", thinking={"type": "disabled"})
    assert "thinking" not in body
