"""Provider fallback over live HTTP: an agent's fallback providers take over after a
refused connection, a 5xx, a 429 or a timeout before the first token, never after it."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from agents.models import AgentFallback, Message, Thread
from tests.conftest import free_port
from tests.factories import ProviderFactory
from tests.fakes import Fail
from tests.fakes.openai_upstream import FakeOpenAIUpstream
from tests.sse import parse_sse

pytestmark = pytest.mark.django_db(transaction=True)


def chat(server: Any, key: str, model: str, text: str, *, stream: bool = False
         ) -> httpx.Response:
    return httpx.post(server.v1 + "/chat/completions", timeout=30,
                      headers={"Authorization": f"Bearer {key}"},
                      json={"model": model, "stream": stream,
                            "messages": [{"role": "user", "content": text}]})


def with_fallbacks(make_agent: Any, slug: str, primary: dict[str, Any],
                   *fallbacks: dict[str, Any]) -> Any:
    agent = make_agent(slug=slug, **{f"provider__{k}": v for k, v in primary.items()})
    for i, options in enumerate(fallbacks):
        AgentFallback.objects.create(agent=agent, provider=ProviderFactory(**options),
                                     position=i)
    return agent


def reply_row(response: httpx.Response) -> Message:
    thread = Thread.objects.get(pk=response.headers["x-gaia-thread-id"])
    return thread.messages.filter(role="assistant").latest("seq")


@pytest.mark.parametrize("stream", [False, True])
def test_refused_connection_moves_to_the_next_provider(gaia_server, make_agent, api_key,
                                                       stream):
    with_fallbacks(make_agent, f"fb-refused-{stream}",
                   {"name": f"dead-{stream}", "kind": "openai",
                    "base_url": f"http://127.0.0.1:{free_port()}/v1"},
                   {"name": f"backup-{stream}", "options": {"reply": "from the backup"}})
    r = chat(gaia_server, api_key, f"fb-refused-{stream}", "hello", stream=stream)
    assert r.status_code == 200, r.text
    if stream:
        chunks = parse_sse(r.text).json_payloads()
        text = "".join(c["choices"][0]["delta"].get("content") or ""
                       for c in chunks if c["choices"])
    else:
        text = r.json()["choices"][0]["message"]["content"]
    assert text == "from the backup"
    assert r.headers["x-gaia-provider"] == f"backup-{stream}"
    row = reply_row(r)
    assert row.provider == f"backup-{stream}"
    assert row.finish_reason == "stop"


def test_503_and_429_move_along_the_chain_in_order(gaia_server, make_agent, api_key):
    with FakeOpenAIUpstream(tokens=3) as first, FakeOpenAIUpstream(tokens=3) as second:
        first.script(Fail(503))
        second.script(Fail(429, headers={"Retry-After": "3"}))
        with_fallbacks(make_agent, "fb-chain",
                       {"name": "up-503", "kind": "openai", "base_url": first.base_url},
                       {"name": "up-429", "kind": "openai", "base_url": second.base_url},
                       {"name": "last-resort", "options": {"reply": "third time lucky"}})
        r = chat(gaia_server, api_key, "fb-chain", "hello")
        assert r.status_code == 200, r.text
        assert r.json()["choices"][0]["message"]["content"] == "third time lucky"
        assert len(first.requests) == 1
        assert len(second.requests) == 1
    assert reply_row(r).provider == "last-resort"


def test_a_timeout_before_the_first_token_moves_on(gaia_server, make_agent, api_key):
    with_fallbacks(make_agent, "fb-timeout",
                   {"name": "sleepy", "timeout_seconds": 0.5, "options": {"fail": "timeout"}},
                   {"name": "awake", "options": {"reply": "awake"}})
    r = chat(gaia_server, api_key, "fb-timeout", "hello")
    assert r.status_code == 200, r.text
    assert reply_row(r).provider == "awake"


def test_after_the_first_token_the_error_is_in_band_and_nobody_takes_over(
        gaia_server, make_agent, api_key):
    with_fallbacks(make_agent, "fb-late",
                   {"name": "half", "options": {"reply": "one two three four",
                                                "fail": "after", "fail_after": 2}},
                   {"name": "unused", "options": {"reply": "should not be heard"}})
    r = chat(gaia_server, api_key, "fb-late", "hello", stream=True)
    assert r.status_code == 200
    payloads = parse_sse(r.text).json_payloads()
    text = "".join(c["choices"][0]["delta"].get("content") or ""
                   for c in payloads if c.get("choices"))
    assert text == "one two"
    assert payloads[-1]["error"]["code"] == "upstream_error"
    row = reply_row(r)
    assert row.provider == "half"
    assert row.finish_reason == "error"
    assert "should not be heard" not in row.content


def test_a_refused_request_does_not_fall_back(gaia_server, make_agent, api_key):
    with FakeOpenAIUpstream(tokens=3) as up:
        up.script(Fail(400, message="bad field"))
        with_fallbacks(make_agent, "fb-400",
                       {"name": "picky", "kind": "openai", "base_url": up.base_url},
                       {"name": "never-asked", "options": {"reply": "no"}})
        r = chat(gaia_server, api_key, "fb-400", "hello")
    assert r.status_code == 502
    assert r.json()["error"]["code"] == "upstream_refused"


def test_every_provider_failing_is_the_last_ones_error(gaia_server, make_agent, api_key):
    with_fallbacks(make_agent, "fb-all",
                   {"name": "down-1", "options": {"fail": "before"}},
                   {"name": "down-2", "options": {"fail": "before", "fail_status": 429,
                                                  "retry_after": 4}})
    r = chat(gaia_server, api_key, "fb-all", "hello")
    assert r.status_code == 429
    assert r.headers["retry-after"] == "4"


def test_the_feed_shows_the_fallback(gaia_server, make_agent, api_key, feed_listener):
    with_fallbacks(make_agent, "fb-feed",
                   {"name": "feed-down", "options": {"fail": "before"}},
                   {"name": "feed-up", "options": {"reply": "ok"}})
    r = chat(gaia_server, api_key, "fb-feed", "hello")
    assert r.status_code == 200
    event = feed_listener.wait_for(lambda e: e["event"] == "provider_fallback"
                                   and e["agent"] == "fb-feed")
    assert event["failed_provider"] == "feed-down"
    assert event["next_provider"] == "feed-up"
    assert "fake provider failed" in event["error"]
    reply = feed_listener.wait_for(lambda e: e["event"] == "message"
                                   and e["message"]["role"] == "assistant"
                                   and e["message"]["thread_id"] == r.headers["x-gaia-thread-id"])
    assert reply["message"]["provider"] == "feed-up"


def test_agents_yaml_round_trips_fallbacks(db):
    from agents import services

    doc = {"providers": [{"name": "p1", "kind": "fake"}, {"name": "p2", "kind": "fake"},
                         {"name": "p3", "kind": "fake"}],
           "agents": [{"slug": "a", "provider": "p1", "fallback_providers": ["p3", "p2"]}]}
    report = services.agents_import(data=doc)
    assert "agent:a" in report.created
    exported = services.agents_export()
    assert exported["agents"][0]["fallback_providers"] == ["p3", "p2"]
    assert services.agents_import(data=doc).unchanged == ["provider:p1", "provider:p2",
                                                          "provider:p3", "agent:a"]
    from agents.kernel.exceptions import InvalidRequest

    bad = {"agents": [{"slug": "a", "fallback_providers": ["nope"]}]}
    with pytest.raises(InvalidRequest, match="unknown fallback providers"):
        services.agents_import(data=bad)
