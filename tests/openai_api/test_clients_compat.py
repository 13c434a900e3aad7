"""What real clients send, over real HTTP against a live Gaia (issue 15): mid-conversation
system messages, listed agents, streamed Anthropic usage, readable thread titles and
workspaces, ``HEAD /``, CORS and LibreChat's user header."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from agents.models import Message, Thread
from agents.turns.describe import extract_workspace_root, thread_title
from tests.sse import parse_sse

pytestmark = pytest.mark.django_db(transaction=True)

ANTHROPIC = {"anthropic-version": "2023-06-01",
             "anthropic-beta": "mid-conversation-system-2025-01-01"}


def post(server: Any, key: str, path: str, body: dict[str, Any], **headers: str
         ) -> httpx.Response:
    return httpx.post(server.v1 + path, json=body, timeout=30,
                      headers={"Authorization": f"Bearer {key}", **headers})


def user(text: str) -> dict[str, str]:
    return {"role": "user", "content": text}


# -- 1. a system message mid-conversation (Claude Code 2.x) ---------------------------------

@pytest.mark.parametrize("stream", [False, True], ids=["json", "sse"])
def test_messages_accepts_a_system_message_mid_conversation(gaia_server, echo_agent, api_key,
                                                            stream):
    body = {"model": "echo", "max_tokens": 50, "stream": stream, "messages": [
        user(f"first {stream}"), {"role": "assistant", "content": "ok"},
        {"role": "system", "content": [{"type": "text", "text": "Answer tersely."}]},
        user("second")]}
    r = post(gaia_server, api_key, "/messages", body, **ANTHROPIC)
    assert r.status_code == 200, r.text
    thread = Thread.objects.get(pk=r.headers["x-gaia-thread-id"])
    rows = list(thread.messages.order_by("seq").values_list("role", "content"))
    assert rows[:4] == [("user", f"first {stream}"), ("assistant", "ok"),
                        ("system", "Answer tersely."), ("user", "second")]
    assert rows[4][0] == "assistant"


def test_mid_conversation_system_reaches_an_openai_provider_in_order(
        gaia_server, make_agent, api_key):
    from tests.fakes.openai_upstream import FakeOpenAIUpstream

    with FakeOpenAIUpstream(tokens=3) as up:
        make_agent(slug="up", instructions="", provider__kind="openai",
                   provider__base_url=up.base_url, provider__options={})
        r = post(gaia_server, api_key, "/messages", {
            "model": "up", "max_tokens": 20, "messages": [
                user("a"), {"role": "assistant", "content": "b"},
                {"role": "system", "content": "be brief"}, user("c")]}, **ANTHROPIC)
        assert r.status_code == 200, r.text
        sent = [(m["role"], m["content"]) for m in up.last.body["messages"]]
    assert sent == [("user", "a"), ("assistant", "b"), ("system", "be brief"), ("user", "c")]


def test_messages_without_any_user_turn_is_400(gaia_server, echo_agent, api_key):
    r = post(gaia_server, api_key, "/messages", {
        "model": "echo", "max_tokens": 5, "messages": [{"role": "system", "content": "x"}]},
        **ANTHROPIC)
    assert r.status_code == 400
    assert r.json()["error"]["type"] == "invalid_request_error"


# -- 3. /v1/models lists listed agents only -----------------------------------------------

@pytest.mark.parametrize("headers", [{}, {"anthropic-version": "2023-06-01"}],
                         ids=["openai", "anthropic"])
def test_unlisted_agents_are_not_listed_but_answer(gaia_server, make_agent, api_key, headers):
    make_agent(slug="shown", provider__options={})
    make_agent(slug="hidden", listed=False, provider__options={})
    r = httpx.get(gaia_server.v1 + "/models", timeout=10,
                  headers={"Authorization": f"Bearer {api_key}", **headers})
    ids = [m["id"] for m in r.json()["data"]]
    assert "shown" in ids
    assert "hidden" not in ids
    r = httpx.get(gaia_server.v1 + "/models/hidden", timeout=10,
                  headers={"Authorization": f"Bearer {api_key}", **headers})
    assert r.status_code == 200
    assert r.json()["id"] == "hidden"
    r = post(gaia_server, api_key, "/chat/completions",
             {"model": "hidden", "messages": [user("still here")]})
    assert r.status_code == 200
    assert r.json()["choices"][0]["message"]["content"] == "still here"


def test_default_agents_list_gaia_and_gaia_tools(transactional_db):
    from pathlib import Path

    import yaml

    from agents import selectors
    from agents.services import agents_import

    defaults = Path(__file__).resolve().parents[2] / "agents" / "defaults.yaml"
    agents_import(data=yaml.safe_load(defaults.read_text()))
    # the chat agent and the same model with built-in tools; the mesh's agents stay unlisted
    assert [a.slug for a in selectors.model_list(api_key=None)] == ["gaia", "gaia-tools"]


def test_listed_round_trips_through_yaml(transactional_db):
    from agents.services import agents_export, agents_import

    agents_import(data={"providers": [{"name": "p", "kind": "fake"}],
                        "agents": [{"slug": "quiet", "provider": "p", "listed": False}]})
    exported = {a["slug"]: a for a in agents_export()["agents"]}
    assert exported["quiet"]["listed"] is False


# -- 4. streamed Anthropic usage is cumulative --------------------------------------------

def test_message_delta_carries_cumulative_usage(gaia_server, echo_agent, api_key):
    r = post(gaia_server, api_key, "/messages", {
        "model": "echo", "max_tokens": 50, "stream": True,
        "messages": [user("one two three")]}, **ANTHROPIC)
    frames = [f.json() for f in parse_sse(r.text).frames if f.data is not None]
    start = next(f for f in frames if f["type"] == "message_start")
    delta = next(f for f in frames if f["type"] == "message_delta")
    assert delta["usage"]["output_tokens"] == 3
    assert delta["usage"]["input_tokens"] == start["message"]["usage"]["input_tokens"] > 0
    assert delta["usage"]["cache_read_input_tokens"] == 0
    assert delta["usage"]["cache_creation_input_tokens"] == 0


# -- 5. titles and workspaces of coding clients -------------------------------------------

CODEX_ENV = ("<environment_context>\n  <cwd>/home/ada/proj</cwd>\n  <approval_policy>never"
             "</approval_policy>\n</environment_context>")
CLAUDE_REMINDER = ("<system-reminder>\nAs you answer the user's questions, you can use the "
                   "following context...\n</system-reminder>")


def test_codex_thread_is_titled_by_the_request_and_rooted_at_cwd(gaia_server, echo_agent,
                                                                  api_key):
    r = post(gaia_server, api_key, "/responses", {"model": "echo", "input": [
        {"type": "message", "role": "user",
         "content": [{"type": "input_text", "text": CODEX_ENV}]},
        {"type": "message", "role": "user",
         "content": [{"type": "input_text", "text": "Fix the failing test in utils.py"}]}]})
    assert r.status_code == 200, r.text
    thread = Thread.objects.get(pk=r.headers["x-gaia-thread-id"])
    assert thread.title == "Fix the failing test in utils.py"
    assert thread.workspace_root == "/home/ada/proj"


def test_claude_code_thread_is_titled_by_the_request_and_rooted_at_cwd(gaia_server,
                                                                        echo_agent, api_key):
    r = post(gaia_server, api_key, "/messages", {
        "model": "echo", "max_tokens": 50,
        "system": [{"type": "text", "text": "You are Claude Code."},
                   {"type": "text", "text": "<env>\nWorking directory: /srv/app\n"
                                            "Is directory a git repo: No\n</env>"}],
        "messages": [{"role": "user", "content": [
            {"type": "text", "text": CLAUDE_REMINDER},
            {"type": "text", "text": "Why does the build fail?"}]}]}, **ANTHROPIC)
    assert r.status_code == 200, r.text
    thread = Thread.objects.get(pk=r.headers["x-gaia-thread-id"])
    assert thread.title == "Why does the build fail?"
    assert thread.workspace_root == "/srv/app"


def test_chat_thread_title_skips_scaffolding(gaia_server, echo_agent, api_key):
    r = post(gaia_server, api_key, "/chat/completions", {"model": "echo", "messages": [
        user("<context>\nThe current date is today.\n</context>\n<userRequest>\nRename foo"
             "\n</userRequest>")]})
    assert r.status_code == 200
    assert Thread.objects.get(pk=r.headers["x-gaia-thread-id"]).title == "Rename foo"


def test_thread_title_units():
    from agents.kernel import llm

    def u(text: str) -> llm.Message:
        return llm.Message("user", (llm.TextPart(text),))

    assert thread_title([u(CODEX_ENV), u("  hello\n world ")]) == "hello world"
    assert thread_title([u(CODEX_ENV)]) == ""
    long = thread_title([u("word " * 40)])
    assert long.endswith("…")
    assert len(long) <= 81
    assert extract_workspace_root([u(CODEX_ENV)]) == "/home/ada/proj"
    assert extract_workspace_root([u("hi")], " - Primary working directory: /x/y\n") == "/x/y"
    assert extract_workspace_root([u("hi")], "no env here") is None


# -- 8. HEAD /, CORS, LibreChat's user ------------------------------------------------------

def test_head_root_is_200(gaia_server):
    r = httpx.head(gaia_server.url + "/", timeout=10)
    assert r.status_code == 200


def test_cors_allows_any_origin_without_credentials(gaia_server, echo_agent, api_key):
    r = httpx.options(gaia_server.v1 + "/chat/completions", timeout=10, headers={
        "Origin": "http://chat.example", "Access-Control-Request-Method": "POST",
        "Access-Control-Request-Headers": "authorization,content-type"})
    assert r.status_code in (200, 204)
    assert r.headers["access-control-allow-origin"] == "*"
    assert "access-control-allow-credentials" not in r.headers
    r = post(gaia_server, api_key, "/chat/completions",
             {"model": "echo", "messages": [user("x")]}, Origin="http://chat.example")
    assert r.headers["access-control-allow-origin"] == "*"


def test_cors_can_be_restricted(gaia_server_factory, echo_agent, api_key):
    server = gaia_server_factory(CORS_ALLOWED_ORIGINS="http://ok.example")
    r = post(server, api_key, "/chat/completions",
             {"model": "echo", "messages": [user("x")]}, Origin="http://other.example")
    assert "access-control-allow-origin" not in r.headers
    r = post(server, api_key, "/chat/completions",
             {"model": "echo", "messages": [user("x")]}, Origin="http://ok.example")
    assert r.headers["access-control-allow-origin"] == "http://ok.example"


@pytest.mark.parametrize(("path", "body"), [
    ("/chat/completions", {"messages": [user("librechat user")]}),
    ("/responses", {"input": "librechat user"}),
    ("/messages", {"max_tokens": 20, "messages": [user("librechat user")]}),
])
def test_librechat_user_header_names_the_threads_user(gaia_server, echo_agent, api_key, path,
                                                      body):
    r = post(gaia_server, api_key, path, {"model": "echo", **body},
             **{"X-LibreChat-User-Id": "u-42", "anthropic-version": "2023-06-01"})
    assert r.status_code == 200, r.text
    assert Thread.objects.get(pk=r.headers["x-gaia-thread-id"]).user == "u-42"
    # A user in the body wins over the header.
    named = {"/chat/completions": {"user": "body-user"},
             "/responses": {"user": "body-user"},
             "/messages": {"metadata": {"user_id": "body-user"}}}[path]
    r = post(gaia_server, api_key, path, {"model": "echo", **body, **named},
             **{"X-LibreChat-User-Id": "u-42", "anthropic-version": "2023-06-01"})
    assert Thread.objects.get(pk=r.headers["x-gaia-thread-id"]).user == "body-user"
    assert Message.objects.filter(thread__user="body-user").exists()


# -- 2. past the window: error naming the setting, or the oldest turns trimmed -------------

LONG_HISTORY = [user("one two three four five six"), {"role": "assistant", "content": "ok"},
                user("seven eight nine ten eleven twelve"), {"role": "assistant", "content": "ok"},
                user("latest question")]


@pytest.mark.parametrize(("path", "body", "error_key"), [
    ("/chat/completions", {"messages": LONG_HISTORY}, "error"),
    ("/responses", {"input": LONG_HISTORY}, "error"),
    ("/messages", {"max_tokens": 20, "messages": LONG_HISTORY}, "error"),
])
def test_overflow_error_names_the_setting(gaia_server, make_agent, api_key, path, body,
                                          error_key):
    make_agent(slug="tight", instructions="", max_input_tokens=12, provider__options={})
    r = post(gaia_server, api_key, path, {"model": "tight", **body},
             **{"anthropic-version": "2023-06-01"})
    assert r.status_code == 400, r.text
    assert "context_overflow" in r.json()[error_key]["message"]


@pytest.mark.parametrize("stream", [False, True], ids=["json", "sse"])
def test_overflow_trim_oldest_keeps_system_and_latest(gaia_server, make_agent, api_key,
                                                      stream):
    from tests.fakes.openai_upstream import FakeOpenAIUpstream

    with FakeOpenAIUpstream(tokens=3) as up:
        make_agent(slug="trim", instructions="Be brief.", max_input_tokens=20,
                   context_overflow="trim_oldest", provider__kind="openai",
                   provider__base_url=up.base_url, provider__options={})
        r = post(gaia_server, api_key, "/chat/completions", {
            "model": "trim", "stream": stream, "messages": LONG_HISTORY})
        assert r.status_code == 200, r.text
        sent = up.last.body["messages"]
    assert r.headers["x-gaia-context-trimmed"] == "4"
    assert sent[0] == {"role": "system", "content": "Be brief."}
    assert sent[1:] == [{"role": "user", "content": "latest question"}]
    thread = Thread.objects.get(pk=r.headers["x-gaia-thread-id"])
    assert thread.message_count == 6  # the thread keeps the whole conversation
    reply = thread.messages.get(role="assistant", seq=5)
    assert "Trimmed the 4 oldest messages" in reply.note


def test_overflow_that_trimming_cannot_fix_names_max_input_tokens(gaia_server, make_agent,
                                                                  api_key):
    make_agent(slug="tiny", instructions="", max_input_tokens=3,
               context_overflow="trim_oldest", provider__options={})
    r = post(gaia_server, api_key, "/chat/completions", {"model": "tiny", "messages": [
        user("a question far longer than three tokens")]})
    assert r.status_code == 400
    assert "max_input_tokens" in r.json()["error"]["message"]
    assert r.json()["error"]["code"] == "context_length_exceeded"


# -- 7. what a client sends reaches the provider or is refused ----------------------------

SCHEMA = {"type": "object", "properties": {"a": {"type": "string"}}}


@pytest.mark.parametrize(("path", "body"), [
    ("/chat/completions", {"messages": [user("x")], "seed": 7, "frequency_penalty": 0.5,
                           "presence_penalty": 0.25, "reasoning_effort": "low",
                           "service_tier": "flex", "top_p": 0.5,
                           "response_format": {"type": "json_schema", "json_schema": {
                               "name": "r", "schema": SCHEMA}}}),
    ("/responses", {"input": "x", "reasoning": {"effort": "low"}, "service_tier": "flex",
                    "text": {"format": {"type": "json_schema", "name": "r",
                                        "schema": SCHEMA}}}),
    ("/messages", {"max_tokens": 20, "messages": [user("x")], "top_k": 5}),
])
def test_extra_fields_reach_an_openai_provider(gaia_server, make_agent, api_key, path, body):
    from tests.fakes.openai_upstream import FakeOpenAIUpstream

    with FakeOpenAIUpstream(tokens=3) as up:
        make_agent(slug="fwd", provider__kind="openai", provider__base_url=up.base_url,
                   provider__options={})
        r = post(gaia_server, api_key, path, {"model": "fwd", **body},
                 **{"anthropic-version": "2023-06-01"})
        assert r.status_code == 200, r.text
        sent = up.last.body
    if path == "/messages":
        assert sent["top_k"] == 5
        return
    assert sent["response_format"] == {"type": "json_schema",
                                       "json_schema": {"name": "r", "schema": SCHEMA}}
    assert sent["reasoning_effort"] == "low"
    assert sent["service_tier"] == "flex"
    if path == "/chat/completions":
        assert (sent["seed"], sent["frequency_penalty"], sent["presence_penalty"]) == (
            7, 0.5, 0.25)


@pytest.mark.parametrize(("path", "body", "param"), [
    ("/chat/completions", {"messages": [user("x")], "logprobs": True}, "logprobs"),
    ("/chat/completions", {"messages": [user("x")], "seed": 3}, "seed"),
    ("/responses", {"input": "x", "text": {"format": {"type": "json_object"}}},
     "text.format"),
])
def test_fields_a_provider_cannot_honour_are_400(gaia_server, make_agent, api_key, path, body,
                                                 param):
    make_agent(slug="claude-up", provider__kind="anthropic",
               provider__base_url="http://127.0.0.1:9", provider__options={})
    r = post(gaia_server, api_key, path, {"model": "claude-up", **body})
    assert r.status_code == 400, r.text
    error = r.json()["error"]
    assert error["param"] == param
    assert error["code"] == "unsupported_parameter"
    assert param in error["message"]


def test_bad_response_format_is_400(gaia_server, echo_agent, api_key):
    r = post(gaia_server, api_key, "/chat/completions", {
        "model": "echo", "messages": [user("x")], "response_format": {"type": "xml"}})
    assert r.status_code == 400
    assert r.json()["error"]["param"] == "response_format.type"
