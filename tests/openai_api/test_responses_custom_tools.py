"""Responses ``custom`` (free-form) and ``namespace`` tools end to end (issue 15, item 6):
definition, call and output, streaming and not, validated by the ``openai`` SDK's types.
Codex CLI offers ``apply_patch`` as a custom tool and its sub-agent tools in a namespace."""

from __future__ import annotations

from typing import Any

import openai
import pytest

from agents.models import Thread
from tests.openai_api.test_sdk_conformance import strict

pytestmark = pytest.mark.django_db(transaction=True)

PATCH = "*** Begin Patch\n*** Add File: hello.txt\n+hi\n*** End Patch"
APPLY_PATCH = {"type": "custom", "name": "apply_patch", "description": "Edit files.",
               "format": {"type": "grammar", "syntax": "lark",
                          "definition": 'start: "*** Begin Patch" /(.|\\n)*/'}}
AGENTS = {"type": "namespace", "name": "multi_agent_v1", "description": "Sub-agents.",
          "tools": [{"type": "function", "name": "close_agent", "parameters": {
              "type": "object", "properties": {"target": {"type": "string"}}}}]}


@pytest.fixture
def oai(gaia_server, api_key) -> openai.OpenAI:
    return openai.OpenAI(base_url=gaia_server.v1, api_key=api_key, max_retries=0, timeout=30)


@pytest.fixture
def patcher(make_agent) -> Any:
    return make_agent(slug="patcher", provider__options={
        "reply": "Patched.", "tool_call": {"name": "apply_patch", "arguments": {"input": PATCH}}})


@pytest.mark.parametrize("stream", [False, True], ids=["json", "sse"])
def test_custom_tool_call_and_output_round_trip(oai, patcher, stream):
    if stream:
        with oai.responses.stream(model="patcher", input="add hello.txt",
                                  tools=[APPLY_PATCH]) as s:
            kinds = [strict(e).type for e in s]
            first = s.get_final_response()
        assert "response.custom_tool_call_input.delta" in kinds
        assert "response.custom_tool_call_input.done" in kinds
        assert "response.function_call_arguments.delta" not in kinds
    else:
        first = strict(oai.responses.create(model="patcher", input="add hello.txt",
                                            tools=[APPLY_PATCH]))
    call = first.output[-1]
    assert call.type == "custom_tool_call"
    assert call.name == "apply_patch"
    assert call.input == PATCH
    assert first.tools[0].type == "custom"
    # The client runs the patch and sends the whole history back, as Codex does (store=false).
    follow = strict(oai.responses.create(model="patcher", tools=[APPLY_PATCH], input=[
        {"type": "message", "role": "user", "content": "add hello.txt"},
        {"type": "custom_tool_call", "call_id": call.call_id, "name": "apply_patch",
         "input": PATCH},
        {"type": "custom_tool_call_output", "call_id": call.call_id, "output": "Done!"}]))
    assert follow.output_text == "Patched."
    thread = Thread.objects.get(pk=Thread.objects.latest("updated_at").pk)
    rows = list(thread.messages.order_by("seq"))
    assert [r.role for r in rows] == ["user", "assistant", "tool", "assistant"]
    assert rows[2].content == "Done!"


def test_custom_tool_reaches_an_openai_provider_as_a_function(gaia_server, make_agent, api_key):
    from tests.fakes.openai_upstream import FakeOpenAIUpstream

    with FakeOpenAIUpstream(tokens=3) as up:
        make_agent(slug="up", provider__kind="openai", provider__base_url=up.base_url,
                   provider__options={})
        client = openai.OpenAI(base_url=gaia_server.v1, api_key=api_key, max_retries=0)
        client.responses.create(model="up", input="hi", tools=[APPLY_PATCH])
        tool = up.last.body["tools"][0]["function"]
    assert tool["name"] == "apply_patch"
    assert tool["parameters"]["required"] == ["input"]
    assert "lark" in tool["parameters"]["properties"]["input"]["description"]


@pytest.mark.parametrize("stream", [False, True], ids=["json", "sse"])
def test_namespace_tools_are_offered_and_called_by_namespace(oai, make_agent, stream):
    make_agent(slug="spaced", provider__options={
        "reply": "Closed.",
        "tool_call": {"name": "multi_agent_v1__close_agent", "arguments": {"target": "a1"}}})
    if stream:
        with oai.responses.stream(model="spaced", input="close a1", tools=[AGENTS]) as s:
            [strict(e) for e in s]
            first = s.get_final_response()
    else:
        first = strict(oai.responses.create(model="spaced", input="close a1", tools=[AGENTS]))
    call = first.output[-1]
    assert call.type == "function_call"
    assert (call.name, call.namespace) == ("close_agent", "multi_agent_v1")
    follow = strict(oai.responses.create(model="spaced", tools=[AGENTS], input=[
        {"type": "message", "role": "user", "content": "close a1"},
        {"type": "function_call", "call_id": call.call_id, "name": "close_agent",
         "namespace": "multi_agent_v1", "arguments": call.arguments},
        {"type": "function_call_output", "call_id": call.call_id, "output": "closed"}]))
    assert follow.output_text == "Closed."
    # Resent, the call matches the stored one: the thread continues instead of forking.
    assert Thread.objects.count() == 1


def test_custom_tool_without_a_name_is_400(oai, patcher):
    with pytest.raises(openai.BadRequestError) as err:
        oai.responses.create(model="patcher", input="x", tools=[{"type": "custom"}])
    assert err.value.body["param"] == "tools[0].name"
