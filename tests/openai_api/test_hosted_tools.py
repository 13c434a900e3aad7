"""Hosted tools, by policy (issue 36, item 1), over real HTTP in every dialect: a hosted tool
the agent does not provide is left out of what reaches the model and the request succeeds,
saying so (``X-Gaia-Dropped-Tools``, the stored reply, the feed's ``message`` event, the thread
page); ``hosted_tools: refuse`` on the agent or the key gives a 400 naming it; a
``tool_choice`` that requires a dropped tool is a 400 naming it; an agent whose tool
``provides`` the hosted tool serves it (the model has that tool, Responses shows
``web_search_call`` items)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import httpx
import openai
import pytest
from django.contrib.auth import get_user_model
from django.test import Client

from agents.models import Message, Thread
from agents.outlet import events
from tests.fakes import Reply, ToolCallSpec
from tests.fakes.openai_upstream import FakeOpenAIUpstream

pytestmark = pytest.mark.django_db(transaction=True)

FUNCTION = {"name": "get_weather", "description": "The weather in a city.",
            "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}
# dialect -> (path, the request's body with a function tool and a hosted tool, what is dropped)
HOSTED: dict[str, tuple[str, dict[str, Any], str]] = {
    "chat": ("/v1/chat/completions", {
        "messages": [{"role": "user", "content": "Hi"}], "web_search_options": {},
        "tools": [{"type": "function", "function": FUNCTION}]}, "web_search"),
    "responses": ("/v1/responses", {
        "input": "Hi", "tools": [{"type": "function", **FUNCTION}, {"type": "web_search"}]},
        "web_search"),
    "messages": ("/v1/messages", {
        "max_tokens": 50, "messages": [{"role": "user", "content": "Hi"}],
        "tools": [{"name": "get_weather", "description": "The weather in a city.",
                   "input_schema": FUNCTION["parameters"]},
                  {"type": "web_search_20250305", "name": "web_search", "max_uses": 2}]},
        "web_search_20250305"),
}
DIALECTS = list(HOSTED)


def post(server: Any, key: str, dialect: str, model: str, **changes: Any) -> httpx.Response:
    path, body, _ = HOSTED[dialect]
    headers = {"Authorization": f"Bearer {key}"}
    if dialect == "messages":
        headers["anthropic-version"] = "2023-06-01"
    return httpx.post(server.url + path, json={**body, "model": model, **changes},
                      headers=headers, timeout=60)


def error_text(response: httpx.Response) -> str:
    return response.json()["error"]["message"]


@pytest.fixture
def upstream(make_agent: Any) -> Iterator[FakeOpenAIUpstream]:
    """An agent (``up``) on an OpenAI-compatible upstream that records what it is sent."""
    with FakeOpenAIUpstream(tokens=3) as up:
        make_agent(slug="up", provider__kind="openai", provider__base_url=up.base_url,
                   provider__name="fake-upstream-hosted")
        yield up


# -- dropped ------------------------------------------------------------------------------------


@pytest.mark.parametrize("stream", [False, True], ids=["json", "sse"])
@pytest.mark.parametrize("dialect", DIALECTS)
def test_a_hosted_tool_nothing_provides_is_dropped_and_the_request_succeeds(
        gaia_server, api_key, upstream, dialect, stream):
    dropped = HOSTED[dialect][2]
    response = post(gaia_server, api_key, dialect, "up", stream=stream)
    assert response.status_code == 200, response.text
    assert response.headers["x-gaia-dropped-tools"] == dropped
    if stream:  # the stream ends as a complete reply does
        assert {"chat": "data: [DONE]", "responses": "event: response.completed",
                "messages": "event: message_stop"}[dialect] in response.text
    # The model was offered the client's function, nothing of the hosted tool.
    sent = upstream.requests[-1].body
    assert [t["function"]["name"] for t in sent["tools"]] == ["get_weather"]
    assert "web_search_options" not in sent
    assert "web_search" not in json.dumps(sent)
    # The stored reply says so, and so does the feed's message event built from it.
    thread = Thread.objects.get(pk=response.headers["x-gaia-thread-id"])
    reply = thread.messages.get(role="assistant")
    assert reply.dropped_tools == [dropped]
    event = events.message(reply, agent="up", client="test")
    assert event["message"]["dropped_tools"] == [dropped]


def test_the_thread_page_names_the_dropped_tools(gaia_server, api_key, upstream):
    response = post(gaia_server, api_key, "responses", "up")
    assert response.status_code == 200, response.text
    staff = get_user_model().objects.create_user("op", password="pw-op-123", is_staff=True)
    page = Client()
    page.force_login(staff)
    html = page.get(f"/threads/{response.headers['x-gaia-thread-id']}/").content.decode()
    assert 'data-meta="dropped-tools"' in html
    assert "hosted tools left out: web_search" in html


def test_the_feed_hears_of_the_dropped_tools(gaia_server, api_key, upstream, feed_listener):
    response = post(gaia_server, api_key, "messages", "up")
    assert response.status_code == 200, response.text
    tid = response.headers["x-gaia-thread-id"]
    event = feed_listener.wait_for(
        lambda e: e["event"] == "message" and e["message"]["thread_id"] == tid
        and e["message"]["role"] == "assistant")
    assert event["message"]["dropped_tools"] == ["web_search_20250305"]


@pytest.mark.parametrize("tool", [
    {"type": "web_search_preview"}, {"type": "file_search", "vector_store_ids": ["vs_1"]},
    {"type": "code_interpreter", "container": {"type": "auto"}}, {"type": "image_generation"},
    {"type": "computer_use_preview", "display_width": 1024, "display_height": 768,
     "environment": "linux"},
    {"type": "local_shell"}, {"type": "apply_patch"}], ids=lambda t: t["type"])
def test_each_responses_hosted_tool_is_dropped_by_the_official_sdk(gaia_server, api_key,
                                                                   echo_agent, tool):
    client = openai.OpenAI(base_url=gaia_server.v1, api_key=api_key, max_retries=0)
    raw = client.responses.with_raw_response.create(model="echo", input="Say this", tools=[
        {"type": "function", "name": "f", "parameters": {"type": "object"}}, tool])
    assert raw.headers["x-gaia-dropped-tools"] == tool["type"]
    assert raw.parse().output_text == "Say this"


def test_a_request_without_hosted_tools_has_no_dropped_header(gaia_server, api_key, upstream):
    response = post(gaia_server, api_key, "responses", "up",
                    tools=[{"type": "function", **FUNCTION}])
    assert response.status_code == 200, response.text
    assert "x-gaia-dropped-tools" not in response.headers
    reply = Message.objects.get(thread_id=response.headers["x-gaia-thread-id"],
                                role="assistant")
    assert reply.dropped_tools is None


# -- refused ------------------------------------------------------------------------------------


def _refused(response: httpx.Response, dialect: str, param: str) -> None:
    assert response.status_code == 400, response.text
    body = response.json()
    if dialect == "messages":
        assert body["type"] == "error"
        assert body["error"]["type"] == "invalid_request_error"
    else:
        assert body["error"]["code"] == "unsupported_tool"
        assert body["error"]["param"] == param
    assert f"'{HOSTED[dialect][2]}'" in error_text(response)
    assert Thread.objects.count() == 0  # refused before anything is stored


HOSTED_PARAM = {"chat": "web_search_options", "responses": "tools[1].type",
                "messages": "tools[1].type"}


@pytest.mark.parametrize("dialect", DIALECTS)
def test_an_agent_that_refuses_hosted_tools_answers_400_naming_the_tool(
        gaia_server, api_key, make_agent, dialect):
    make_agent(slug="strict", hosted_tools="refuse", provider__options={"reply": "x"})
    response = post(gaia_server, api_key, dialect, "strict")
    _refused(response, dialect, HOSTED_PARAM[dialect])
    assert "hosted_tools: refuse" in error_text(response)


@pytest.mark.parametrize("dialect", DIALECTS)
def test_a_key_that_refuses_hosted_tools_answers_400_naming_the_tool(
        gaia_server, make_key, echo_agent, dialect):
    _, strict_key = make_key(name="strict", hosted_tools="refuse")
    _refused(post(gaia_server, strict_key, dialect, "echo"), dialect, HOSTED_PARAM[dialect])


# -- tool_choice --------------------------------------------------------------------------------


@pytest.mark.parametrize(("dialect", "choice", "named"), [
    ("responses", {"type": "web_search"}, "web_search"),
    ("responses", {"type": "file_search"}, "file_search"),
    ("messages", {"type": "tool", "name": "web_search"}, "web_search_20250305"),
])
def test_a_tool_choice_that_requires_a_dropped_tool_is_400_naming_it(
        gaia_server, api_key, echo_agent, dialect, choice, named):
    response = post(gaia_server, api_key, dialect, "echo", tool_choice=choice)
    assert response.status_code == 400, response.text
    message = error_text(response)
    assert f"'{named}'" in message
    assert "tool_choice" in message
    if dialect != "messages":
        assert response.json()["error"]["param"] == "tool_choice"
        assert response.json()["error"]["code"] == "unsupported_tool"


def test_chat_required_with_only_a_dropped_hosted_tool_is_400(gaia_server, api_key,
                                                             echo_agent):
    response = post(gaia_server, api_key, "chat", "echo", tools=None, tool_choice="required")
    assert response.status_code == 400, response.text
    assert response.json()["error"]["param"] == "tool_choice"
    assert "web_search" in error_text(response)


# -- provided -----------------------------------------------------------------------------------

SEARCH_SCRIPT = [{"tool_calls": [{"name": "calculator", "arguments": {"expression": "6 * 7"}}]},
                 {"reply": "Found {results}."}]


@pytest.fixture
def searcher(make_agent: Any) -> Any:
    """An agent whose built-in tool provides web_search (a stand-in for an MCP search tool:
    the rule is the same), and whose model calls it, then answers with its result."""
    return make_agent(slug="searcher", tools=["calculator"],
                      provides={"web_search": "calculator"},
                      provider__options={"script": SEARCH_SCRIPT})


def test_a_provided_web_search_is_a_web_search_call_in_responses(gaia_server, api_key,
                                                                  searcher):
    client = openai.OpenAI(base_url=gaia_server.v1, api_key=api_key, max_retries=0)
    raw = client.responses.with_raw_response.create(
        model="searcher", input="Search for six times seven", tools=[{"type": "web_search"}])
    assert "x-gaia-dropped-tools" not in raw.headers
    reply = raw.parse()
    kinds = [item.type for item in reply.output]
    assert kinds == ["web_search_call", "reasoning", "message"] or kinds == [
        "web_search_call", "message"], kinds
    search = reply.output[0]
    assert search.status == "completed"
    assert search.action.type == "search"
    assert search.action.query == "6 * 7"
    assert reply.output_text == "Found 42."  # the model saw the tool's result
    stored = Message.objects.get(thread_id=raw.headers["x-gaia-thread-id"], role="assistant",
                                 internal=False)
    assert stored.dropped_tools is None


def test_a_provided_web_search_streams_its_own_events(gaia_server, api_key, searcher):
    client = openai.OpenAI(base_url=gaia_server.v1, api_key=api_key, max_retries=0)
    with client.responses.stream(model="searcher", input="Search for six times seven",
                                 tools=[{"type": "web_search_preview"}]) as stream:
        kinds = [event.type for event in stream]  # each event parsed by the SDK's models
        final = stream.get_final_response()
    searched = [k for k in kinds if k.startswith("response.web_search_call.")]
    assert searched == ["response.web_search_call.in_progress",
                        "response.web_search_call.searching",
                        "response.web_search_call.completed"]
    assert not any(k.startswith("response.mcp_call") for k in kinds)
    assert final.output[0].type == "web_search_call"
    assert final.output_text == "Found 42."


@pytest.mark.parametrize("dialect", ["chat", "messages"])
def test_a_provided_hosted_tool_runs_in_the_other_dialects(gaia_server, api_key, searcher,
                                                           dialect):
    # Chat: its web_search_options alone; Messages: Anthropic's web search alone.
    only = {"chat": None, "messages": [HOSTED["messages"][1]["tools"][1]]}[dialect]
    response = post(gaia_server, api_key, dialect, "searcher", tools=only)
    assert response.status_code == 200, response.text
    assert "x-gaia-dropped-tools" not in response.headers
    assert "Found 42." in response.text
    thread = Thread.objects.get(pk=response.headers["x-gaia-thread-id"])
    assert thread.messages.filter(role="tool", internal=True, content="42").exists()


def test_a_tool_choice_of_a_provided_tool_requires_the_tool_that_serves_it(
        gaia_server, api_key, make_agent):
    with FakeOpenAIUpstream(tokens=3) as up:
        up.script(Reply(tool_calls=[ToolCallSpec("calculator", '{"expression": "6 * 7"}')]),
                  Reply(text="It is 42."))
        make_agent(slug="up-search", provider__kind="openai", provider__base_url=up.base_url,
                   provider__name="fake-upstream-search", tools=["calculator"],
                   provides={"web_search": "calculator"})
        response = post(gaia_server, api_key, "responses", "up-search",
                        tool_choice={"type": "web_search"})
        assert response.status_code == 200, response.text
        first = up.requests[0].body
    # The model had the agent's tool, and the choice of web search required it.
    assert [t["function"]["name"] for t in first["tools"]] == ["get_weather", "calculator"]
    assert first["tool_choice"] == {"type": "function", "function": {"name": "calculator"}}
    assert "It is 42." in response.text
