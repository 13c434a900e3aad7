"""Client tools in every dialect, streaming and not: the call, the client's tool result, the
final answer, on one thread; and ``tool_choice`` mapped onto the canonical model.

Each round trip runs against the ``fake`` provider (its ``tool_call`` option) and against a
real OpenAI-compatible upstream on loopback (``tests/fakes/openai_upstream.py``) that returns
tool calls, reached through the ``openai`` provider kind.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import httpx
import pytest

from agents.kernel import llm
from agents.models import Thread
from openai_api.dialects import chat, messages, responses
from tests.sse import parse_sse

pytestmark = pytest.mark.django_db(transaction=True)

PARAMS = {"type": "object", "properties": {"city": {"type": "string"}}}
ARGS = {"city": "Paris"}
QUESTION = "What is the weather in Paris?"


@dataclass
class Call:
    id: str
    name: str
    arguments: str


def _post(server: Any, key: str, path: str, body: dict[str, Any]) -> httpx.Response:
    r = httpx.post(server.v1 + path, json=body, timeout=30,
                   headers={"Authorization": f"Bearer {key}", "anthropic-version": "2023-06-01"})
    assert r.status_code == 200, r.text
    return r


def _events(r: httpx.Response) -> list[dict[str, Any]]:
    return [f.json() for f in parse_sse(r.text).frames if f.data and f.data != "[DONE]"]


# -- one client per dialect: ask (expecting a call), then answer the call -------------------


class ChatClient:
    path = "/chat/completions"
    tools = [{"type": "function", "function": {"name": "get_weather", "parameters": PARAMS}}]

    def __init__(self, server: Any, key: str, model: str, stream: bool) -> None:
        self.server, self.key, self.model, self.stream = server, key, model, stream
        self.history: list[dict[str, Any]] = [{"role": "user", "content": QUESTION}]

    def _send(self) -> tuple[str, list[Call], str, httpx.Response]:
        body = {"model": self.model, "messages": self.history, "tools": self.tools,
                "stream": self.stream}
        r = _post(self.server, self.key, self.path, body)
        if not self.stream:
            choice = r.json()["choices"][0]
            calls = [Call(c["id"], c["function"]["name"], c["function"]["arguments"])
                     for c in choice["message"].get("tool_calls") or []]
            return choice["message"]["content"] or "", calls, choice["finish_reason"], r
        text, acc, finish = "", {}, ""
        for chunk in _events(r):
            delta = chunk["choices"][0]["delta"]
            text += delta.get("content") or ""
            for frag in delta.get("tool_calls") or []:
                assert "index" in frag  # every fragment names its call
                c = acc.setdefault(frag["index"], Call("", "", ""))
                c.id = frag.get("id") or c.id
                c.name = frag["function"].get("name") or c.name
                c.arguments += frag["function"].get("arguments") or ""
            finish = chunk["choices"][0]["finish_reason"] or finish
        return text, [acc[i] for i in sorted(acc)], finish, r

    def ask(self) -> tuple[list[Call], str, httpx.Response]:
        text, calls, finish, r = self._send()
        self.history.append({"role": "assistant", "content": text or None, "tool_calls": [
            {"id": c.id, "type": "function",
             "function": {"name": c.name, "arguments": c.arguments}} for c in calls]})
        return calls, finish, r

    def answer(self, call: Call, output: str) -> tuple[str, str, httpx.Response]:
        self.history.append({"role": "tool", "tool_call_id": call.id, "content": output})
        text, calls, finish, r = self._send()
        assert not calls
        return text, finish, r


class ResponsesClient:
    path = "/responses"
    tools = [{"type": "function", "name": "get_weather", "parameters": PARAMS}]

    def __init__(self, server: Any, key: str, model: str, stream: bool) -> None:
        self.server, self.key, self.model, self.stream = server, key, model, stream
        self.previous: str | None = None

    def _send(self, input_: Any) -> tuple[dict[str, Any], httpx.Response]:
        body: dict[str, Any] = {"model": self.model, "input": input_, "tools": self.tools,
                                "stream": self.stream}
        if self.previous:
            body["previous_response_id"] = self.previous
        r = _post(self.server, self.key, self.path, body)
        if not self.stream:
            response = r.json()
        else:
            events = _events(r)
            response = events[-1]["response"]
            assert events[-1]["type"] == "response.completed"
            args = "".join(e["delta"] for e in events
                           if e["type"] == "response.function_call_arguments.delta")
            done = [e["arguments"] for e in events
                    if e["type"] == "response.function_call_arguments.done"]
            assert args == "".join(done)
        self.previous = response["id"]
        return response, r

    def ask(self) -> tuple[list[Call], str, httpx.Response]:
        response, r = self._send(QUESTION)
        calls = [Call(o["call_id"], o["name"], o["arguments"]) for o in response["output"]
                 if o["type"] == "function_call"]
        return calls, "tool_calls" if calls else "stop", r

    def answer(self, call: Call, output: str) -> tuple[str, str, httpx.Response]:
        response, r = self._send([{"type": "function_call_output", "call_id": call.id,
                                   "output": output}])
        assert all(o["type"] != "function_call" for o in response["output"])
        text = "".join(c["text"] for o in response["output"] if o["type"] == "message"
                       for c in o["content"])
        return text, response["status"], r


class MessagesClient:
    path = "/messages"
    tools = [{"name": "get_weather", "input_schema": PARAMS}]

    def __init__(self, server: Any, key: str, model: str, stream: bool) -> None:
        self.server, self.key, self.model, self.stream = server, key, model, stream
        self.history: list[dict[str, Any]] = [{"role": "user", "content": QUESTION}]

    def _send(self) -> tuple[list[dict[str, Any]], str, httpx.Response]:
        body = {"model": self.model, "messages": self.history, "tools": self.tools,
                "max_tokens": 200, "stream": self.stream}
        r = _post(self.server, self.key, self.path, body)
        if not self.stream:
            return r.json()["content"], r.json()["stop_reason"], r
        blocks: list[dict[str, Any]] = []
        partial: dict[int, str] = {}
        stop = ""
        for e in _events(r):
            if e["type"] == "content_block_start":
                blocks.append(dict(e["content_block"]))
            elif e["type"] == "content_block_delta":
                d = e["delta"]
                if d["type"] == "text_delta":
                    blocks[e["index"]]["text"] += d["text"]
                elif d["type"] == "input_json_delta":
                    partial[e["index"]] = partial.get(e["index"], "") + d["partial_json"]
            elif e["type"] == "message_delta":
                stop = e["delta"]["stop_reason"]
        for i, text in partial.items():
            blocks[i]["input"] = json.loads(text)
        return blocks, stop, r

    def ask(self) -> tuple[list[Call], str, httpx.Response]:
        blocks, stop, r = self._send()
        self.history.append({"role": "assistant", "content": blocks})
        calls = [Call(b["id"], b["name"], json.dumps(b["input"])) for b in blocks
                 if b["type"] == "tool_use"]
        return calls, stop, r

    def answer(self, call: Call, output: str) -> tuple[str, str, httpx.Response]:
        self.history.append({"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": call.id, "content": output}]})
        blocks, stop, r = self._send()
        assert all(b["type"] != "tool_use" for b in blocks)
        return "".join(b.get("text", "") for b in blocks), stop, r


CLIENTS = {"chat": ChatClient, "responses": ResponsesClient, "messages": MessagesClient}
CALL_REASON = {"chat": "tool_calls", "responses": "tool_calls", "messages": "tool_use"}
DONE_REASON = {"chat": "stop", "responses": "completed", "messages": "end_turn"}


@pytest.fixture(params=["fake", "upstream"])
def tool_agent(request, make_agent) -> Iterator[tuple[str, Any]]:
    """``(model slug, upstream or None)``: an agent whose model calls ``get_weather`` once,
    then answers 'Sunny in Paris.' once given the result."""
    if request.param == "fake":
        make_agent(slug="tools", provider__options={
            "reply": "Sunny in Paris.", "tool_call": {"name": "get_weather", "arguments": ARGS}})
        yield "tools", None
        return
    from tests.fakes import Reply, ToolCallSpec
    from tests.fakes import openai_upstream as upstream_mod

    with upstream_mod.FakeOpenAIUpstream(tokens=4) as up:
        up.script(Reply(tool_calls=[ToolCallSpec("get_weather", json.dumps(ARGS),
                                                 id="call_up_1", chunks=3)]),
                  Reply(text="Sunny in Paris."))
        make_agent(slug="tools-up", provider__kind="openai", provider__base_url=up.base_url,
                   provider__name="fake-openai-upstream")
        yield "tools-up", up


@pytest.mark.parametrize("stream", [False, True], ids=["json", "sse"])
@pytest.mark.parametrize("dialect", ["chat", "responses", "messages"])
def test_tool_call_round_trip(gaia_server, api_key, tool_agent, dialect, stream):
    model, upstream = tool_agent
    client = CLIENTS[dialect](gaia_server, api_key, model, stream)
    calls, reason, r1 = client.ask()
    assert reason == CALL_REASON[dialect]
    [call] = calls
    assert call.name == "get_weather"
    assert json.loads(call.arguments) == ARGS
    assert call.id
    text, reason, r2 = client.answer(call, "sunny, 24 C")
    assert text == "Sunny in Paris."
    assert reason == DONE_REASON[dialect]
    # One thread: the question, the call, the client's result, the answer.
    assert r1.headers["x-gaia-thread-id"] == r2.headers["x-gaia-thread-id"]
    thread = Thread.objects.get(pk=r2.headers["x-gaia-thread-id"])
    rows = list(thread.messages.order_by("seq"))
    assert [m.role for m in rows] == ["user", "assistant", "tool", "assistant"]
    assert rows[1].tool_calls[0]["name"] == "get_weather"
    assert rows[2].tool_call_id == call.id
    assert rows[2].content == "sunny, 24 C"
    if upstream is not None:  # the provider got the tool and, later, the result
        first, second = upstream.requests[-2].body, upstream.requests[-1].body
        assert first["tools"][0]["function"]["name"] == "get_weather"
        assert second["messages"][-1] == {"role": "tool", "tool_call_id": call.id,
                                          "content": "sunny, 24 C"}


# -- tool_choice ------------------------------------------------------------------------------


@pytest.mark.parametrize(("parse", "value", "expected"), [
    (chat.tool_choice_from, None, llm.ToolChoice("auto")),
    (chat.tool_choice_from, "none", llm.ToolChoice("none")),
    (chat.tool_choice_from, "required", llm.ToolChoice("required")),
    (chat.tool_choice_from, {"type": "function", "function": {"name": "f"}},
     llm.ToolChoice("tool", "f")),
    (responses.tool_choice_from, "auto", llm.ToolChoice("auto")),
    (responses.tool_choice_from, "none", llm.ToolChoice("none")),
    (responses.tool_choice_from, "required", llm.ToolChoice("required")),
    (responses.tool_choice_from, {"type": "function", "name": "f"}, llm.ToolChoice("tool", "f")),
    (responses.tool_choice_from, {"type": "allowed_tools", "mode": "required", "tools": []},
     llm.ToolChoice("required")),
    (responses.tool_choice_from, {"type": "web_search_preview"}, llm.ToolChoice("auto")),
    (messages.tool_choice_from, None, llm.ToolChoice("auto")),
    (messages.tool_choice_from, {"type": "auto"}, llm.ToolChoice("auto")),
    (messages.tool_choice_from, {"type": "any"}, llm.ToolChoice("required")),
    (messages.tool_choice_from, {"type": "tool", "name": "f"}, llm.ToolChoice("tool", "f")),
    (messages.tool_choice_from, {"type": "none"}, llm.ToolChoice("none")),
])
def test_tool_choice_maps_to_canonical(parse, value, expected):
    assert parse(value) == expected


@pytest.mark.parametrize(("dialect", "path", "body"), [
    ("chat", "/chat/completions", {"tool_choice": {"type": "function", "function": {}},
                                   "messages": [{"role": "user", "content": "q"}]}),
    ("responses", "/responses", {"tool_choice": {"type": "function"}, "input": "q"}),
    ("messages", "/messages", {"tool_choice": {"type": "sometimes"}, "max_tokens": 5,
                               "messages": [{"role": "user", "content": "q"}]}),
])
def test_invalid_tool_choice_is_400(gaia_server, echo_agent, api_key, dialect, path, body):
    r = httpx.post(gaia_server.v1 + path, json={"model": "echo", **body},
                   headers={"Authorization": f"Bearer {api_key}"}, timeout=30)
    assert r.status_code == 400, r.text
    if dialect == "messages":
        assert r.json()["error"]["type"] == "invalid_request_error"
    else:
        assert r.json()["error"]["param"] == "tool_choice"


@pytest.mark.parametrize(("dialect", "choice"), [
    ("chat", "none"), ("responses", "none"), ("messages", {"type": "none"}),
])
def test_tool_choice_none_gets_text(gaia_server, api_key, make_agent, dialect, choice):
    make_agent(slug="tools", provider__options={
        "reply": "No tools.", "tool_call": {"name": "get_weather", "arguments": ARGS}})
    body: dict[str, Any] = {"model": "tools", "tools": CLIENTS[dialect].tools,
                            "tool_choice": choice}
    if dialect == "responses":
        body["input"] = QUESTION
    else:
        body["messages"] = [{"role": "user", "content": QUESTION}]
        if dialect == "messages":
            body["max_tokens"] = 50
    reply = _post(gaia_server, api_key, CLIENTS[dialect].path, body).json()
    if dialect == "chat":
        assert reply["choices"][0]["message"]["content"] == "No tools."
        assert reply["choices"][0]["finish_reason"] == "stop"
    elif dialect == "responses":
        assert [o["type"] for o in reply["output"]] == ["message"]
        assert reply["output"][0]["content"][0]["text"] == "No tools."
    else:
        assert reply["content"] == [{"type": "text", "text": "No tools."}]
        assert reply["stop_reason"] == "end_turn"


@pytest.mark.parametrize(("dialect", "choice", "upstream_choice"), [
    ("chat", "required", "required"),
    ("responses", {"type": "function", "name": "get_weather"},
     {"type": "function", "function": {"name": "get_weather"}}),
    ("messages", {"type": "any"}, "required"),
    ("messages", {"type": "tool", "name": "get_weather"},
     {"type": "function", "function": {"name": "get_weather"}}),
])
def test_tool_choice_reaches_the_upstream(gaia_server, api_key, make_agent, dialect, choice,
                                          upstream_choice):
    from tests.fakes import openai_upstream as upstream_mod
    with upstream_mod.FakeOpenAIUpstream(tokens=2) as up:
        make_agent(slug="choice-up", provider__kind="openai", provider__base_url=up.base_url,
                   provider__name="choice-upstream")
        body: dict[str, Any] = {"model": "choice-up", "tools": CLIENTS[dialect].tools,
                                "tool_choice": choice}
        if dialect == "responses":
            body["input"] = QUESTION
        else:
            body["messages"] = [{"role": "user", "content": QUESTION}]
            if dialect == "messages":
                body["max_tokens"] = 50
        _post(gaia_server, api_key, CLIENTS[dialect].path, body)
        assert up.last.body["tool_choice"] == upstream_choice
