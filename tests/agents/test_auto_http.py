"""The model id ``auto`` over live HTTP: the deterministic ranker and a fake router pick the
agent whose description fits, in all three dialects; unclear or failed routing goes to the
default agent; a conversation stays with its agent until it clearly changes subject."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from agents.models import RoutingPolicy, Thread
from tests.sse import parse_sse

pytestmark = pytest.mark.django_db(transaction=True)

BREAD = "How long should I knead bread dough for a sourdough recipe?"


@pytest.fixture
def agents(make_agent: Any) -> dict[str, Any]:
    made = {
        "cooking": make_agent(slug="cooking", description="Recipes, cooking, baking bread and "
                              "kitchen techniques.", provider__options={"reply": "chef here"}),
        "weather": make_agent(slug="weather", description="Weather forecasts: rain, wind, "
                              "temperature and climate.",
                              provider__options={"reply": "forecaster here"}),
        "general": make_agent(slug="general", description="Small talk and anything else.",
                              provider__options={"reply": "generalist here"}),
    }
    RoutingPolicy.objects.create(default_agent=made["general"])
    return made


def post(server: Any, key: str, path: str, body: dict[str, Any], **headers: str
         ) -> httpx.Response:
    h = {"Authorization": f"Bearer {key}", **headers}
    return httpx.post(server.v1 + path, json=body, headers=h, timeout=30)


def ask(server: Any, key: str, dialect: str, text: str, *, stream: bool = False,
        history: list[dict[str, str]] | None = None) -> tuple[httpx.Response, str, str]:
    """``(response, model named in the reply, reply text)`` in ``dialect``."""
    messages = [*(history or []), {"role": "user", "content": text}]
    if dialect == "chat":
        r = post(server, key, "/chat/completions",
                 {"model": "auto", "stream": stream, "messages": messages})
        if stream:
            chunks = parse_sse(r.text).json_payloads()
            return r, chunks[0]["model"], "".join(
                c["choices"][0]["delta"].get("content") or "" for c in chunks if c["choices"])
        body = r.json()
        return r, body.get("model"), body["choices"][0]["message"]["content"] \
            if r.status_code == 200 else ""
    if dialect == "responses":
        r = post(server, key, "/responses", {"model": "auto", "stream": stream,
                                             "input": messages})
        if stream:
            events = parse_sse(r.text).json_payloads()
            done = next(e for e in events if e["type"] == "response.completed")["response"]
        else:
            done = r.json()
        text = "".join(c["text"] for item in done["output"] if item["type"] == "message"
                       for c in item["content"])
        return r, done["model"], text
    r = post(server, key, "/messages", {"model": "auto", "max_tokens": 100, "stream": stream,
                                        "messages": messages},
             **{"anthropic-version": "2023-06-01"})
    if stream:
        events = parse_sse(r.text).json_payloads()
        start = next(e for e in events if e["type"] == "message_start")["message"]
        text = "".join(e["delta"].get("text", "") for e in events
                       if e["type"] == "content_block_delta")
        return r, start["model"], text
    body = r.json()
    return r, body["model"], "".join(b["text"] for b in body["content"] if b["type"] == "text")


def route_of(r: httpx.Response) -> dict[str, Any]:
    return Thread.objects.get(pk=r.headers["x-gaia-thread-id"]).route


def test_models_lists_auto_only_when_an_agent_can_be_routed_to(gaia_server, make_key, agents):
    _, key = make_key()
    r = httpx.get(gaia_server.v1 + "/models", headers={"Authorization": f"Bearer {key}"})
    ids = [m["id"] for m in r.json()["data"]]
    assert "auto" in ids
    detail = httpx.get(gaia_server.v1 + "/models/auto",
                       headers={"Authorization": f"Bearer {key}"})
    assert detail.status_code == 200
    assert detail.json()["id"] == "auto"
    for a in agents.values():
        a.enabled = False
        a.save()
    r = httpx.get(gaia_server.v1 + "/models", headers={"Authorization": f"Bearer {key}"})
    assert "auto" not in [m["id"] for m in r.json()["data"]]
    missing = httpx.get(gaia_server.v1 + "/models/auto",
                        headers={"Authorization": f"Bearer {key}"})
    assert missing.status_code == 404
    assert missing.json()["error"]["code"] == "model_not_found"
    chat = post(gaia_server, key, "/chat/completions",
                {"model": "auto", "messages": [{"role": "user", "content": "hi"}]})
    assert chat.status_code == 404
    assert chat.json()["error"]["code"] == "model_not_found"


@pytest.mark.parametrize("dialect", ["chat", "responses", "messages"])
@pytest.mark.parametrize("stream", [False, True])
def test_the_ranker_picks_the_agent_whose_description_fits(gaia_server, api_key, agents,
                                                           dialect, stream):
    r, model, text = ask(gaia_server, api_key, dialect, BREAD, stream=stream)
    assert r.status_code == 200, r.text
    assert model == "cooking"
    assert text == "chef here"
    assert r.headers["x-gaia-routed-to"] == "cooking"
    route = route_of(r)
    assert route["model"] == "auto"
    assert route["agent"] == "cooking"
    assert route["method"] == "ranker"
    assert "BM25" in route["reason"]
    r, model, text = ask(gaia_server, api_key, dialect, "Will it rain tomorrow? forecast please",
                         stream=stream)
    assert (model, text) == ("weather", "forecaster here")


def test_an_unclear_request_goes_to_the_default_agent(gaia_server, api_key, agents):
    r, model, _ = ask(gaia_server, api_key, "chat", "xyzzy plugh")
    assert r.status_code == 200
    assert model == "general"
    route = route_of(r)
    assert route["method"] == "default"
    assert "no agent's description matches" in route["reason"]


def test_a_fake_router_decides_and_its_choice_is_constrained(gaia_server, api_key, agents,
                                                             make_agent):
    router = make_agent(slug="router", description="Routes.", provider__options={
        "tool_call": {"name": "route_to", "arguments": {"agent": "weather"}}})
    RoutingPolicy.objects.update(router=router)
    # The ranker would pick cooking; the router says weather, and weather answers.
    for dialect in ("chat", "responses", "messages"):
        r, model, text = ask(gaia_server, api_key, dialect, BREAD)
        assert (model, text) == ("weather", "forecaster here"), dialect
        route = route_of(r)
        assert route["method"] == "router"
        assert "router" in route["reason"]


@pytest.mark.parametrize(("options", "expected", "method", "why"), [
    ({"reply": "cooking"}, "cooking", "router", "chose it"),
    ({"reply": "I would say weather, probably."}, "weather", "router", "chose it"),
    ({"reply": "router"}, "general", "default", "named no single listed agent"),
    ({"reply": "cooking or weather"}, "general", "default", "named no single listed agent"),
    ({"fail": "before"}, "general", "default", "failed"),
])
def test_router_text_answers_and_failures(gaia_server, api_key, agents, make_agent,
                                          options, expected, method, why):
    router = make_agent(slug="router-text", description="Routes.", provider__options=options)
    RoutingPolicy.objects.update(router=router)
    r, model, _ = ask(gaia_server, api_key, "chat", "xyzzy")
    assert r.status_code == 200, r.text
    assert model == expected
    route = route_of(r)
    assert route["method"] == method
    assert why in route["reason"]


def test_a_slow_router_times_out_to_the_default(gaia_server, api_key, agents, make_agent):
    router = make_agent(slug="router-slow", provider__options={"fail": "timeout"})
    RoutingPolicy.objects.update(router=router, router_timeout_seconds=0.3)
    r, model, _ = ask(gaia_server, api_key, "chat", BREAD)
    assert model == "general"
    assert "did not answer within 0.3 s" in route_of(r)["reason"]


def test_a_conversation_stays_with_its_agent_until_the_subject_clearly_changes(
        gaia_server, api_key, agents):
    r1, model, text = ask(gaia_server, api_key, "chat", BREAD)
    assert model == "cooking"
    history = [{"role": "user", "content": BREAD}, {"role": "assistant", "content": text}]
    # A follow-up that names nothing of any description stays.
    r2, model, text2 = ask(gaia_server, api_key, "chat", "And after that, how long?",
                           history=history)
    assert model == "cooking"
    assert route_of(r2)["method"] == "sticky"
    assert r2.headers["x-gaia-thread-id"] == r1.headers["x-gaia-thread-id"]
    # A follow-up about the weather (and nothing about cooking) moves.
    history += [{"role": "user", "content": "And after that, how long?"},
                {"role": "assistant", "content": text2}]
    r3, model, _ = ask(gaia_server, api_key, "chat", "Is rain in the forecast tomorrow?",
                       history=history)
    assert model == "weather"
    assert "changed subject" in route_of(r3)["reason"]


def test_a_named_thread_keeps_its_agent(gaia_server, api_key, agents):
    r1, _, _ = ask(gaia_server, api_key, "chat", BREAD)
    tid = r1.headers["x-gaia-thread-id"]
    r2 = post(gaia_server, api_key, "/chat/completions", {
        "model": "auto", "messages": [{"role": "user", "content": "and the oven?"}]},
        **{"X-Gaia-Thread-Id": tid})
    assert r2.status_code == 200, r2.text
    assert r2.json()["model"] == "cooking"
    assert r2.headers["x-gaia-thread-id"] == tid


def test_bad_input_to_auto_gets_the_dialect_error(gaia_server, api_key, agents):
    r = post(gaia_server, api_key, "/chat/completions", {"model": "auto", "messages": "no"})
    assert r.status_code == 400
    assert r.json()["error"]["type"] == "invalid_request_error"
    r = post(gaia_server, api_key, "/messages", {"model": "auto", "messages": []},
             **{"anthropic-version": "2023-06-01"})
    assert r.status_code == 400
    assert r.json()["type"] == "error"
    r = httpx.post(gaia_server.v1 + "/chat/completions", json={"model": "auto", "messages": []})
    assert r.status_code == 401


def test_the_feed_shows_the_route(gaia_server, api_key, agents, feed_listener):
    r, _, _ = ask(gaia_server, api_key, "chat", BREAD)
    event = feed_listener.wait_for(lambda e: e["event"] == "route_chosen"
                                   and e["agent"] == "cooking")
    assert event["method"] == "ranker"
    assert event["response_id"] == r.json()["id"]
    assert event["elapsed_ms"] >= 0
    created = feed_listener.wait_for(
        lambda e: e["event"] == "thread_updated"
        and e["thread_id"] == r.headers["x-gaia-thread-id"] and e["status"] == "completed")
    assert created


def test_agents_yaml_carries_the_routing_policy(db, agents):
    from agents import services

    doc = services.agents_export()
    assert doc["routing"] == {"router": None, "default": "general",
                              "router_timeout_seconds": 10.0}
    report = services.agents_import(data={"routing": {"router": "weather", "default": None}})
    assert report.updated == ["routing"]
    policy = RoutingPolicy.objects.get()
    assert policy.router.slug == "weather"
    assert policy.default_agent is None
    from agents.kernel.exceptions import InvalidRequest

    with pytest.raises(InvalidRequest, match="unknown router"):
        services.agents_import(data={"routing": {"router": "nope"}})


def test_auto_routes_only_among_the_agents_a_key_may_use(gaia_server, make_key, agents):
    _, key = make_key(agents=[agents["weather"]])
    r, model, _ = ask(gaia_server, key, "chat", BREAD)
    assert r.status_code == 200, r.text
    assert model == "weather"
    route = route_of(r)
    assert route["method"] == "default"
    assert "the default agent 'general' is not available here" in route["reason"]


def test_the_router_agent_is_not_listed(gaia_server, api_key, agents, make_agent):
    router = make_agent(slug="router-hidden", provider__options={"reply": "weather"})
    RoutingPolicy.objects.update(router=router)
    r = httpx.get(gaia_server.v1 + "/models", headers={"Authorization": f"Bearer {api_key}"})
    ids = [m["id"] for m in r.json()["data"]]
    assert "router-hidden" not in ids
    assert {"cooking", "weather", "general", "auto"} <= set(ids)
