"""Tool calls and structured output on the ``local`` provider (the real SmolLM2-135M GGUF):
the tools' JSON Schemas become a llama.cpp grammar, so a reply is plain text or one
well-formed call of an offered tool; ``response_format`` constrains a reply the same way."""

from __future__ import annotations

import json

import jsonschema
import pytest

from agents.backends import backend_stream
from agents.backends.local import request_grammar, tools_prompt
from agents.kernel.exceptions import InvalidRequest
from agents.kernel.llm import Finish, TextDelta, Tool, ToolCallDelta, ToolChoice

from .conftest import ask, collect

WEATHER = Tool("get_weather", "The weather in a city.\nMore detail nobody needs.", {
    "type": "object", "properties": {"city": {"type": "string"},
                                     "unit": {"enum": ["c", "f"]}},
    "required": ["city", "unit"], "additionalProperties": False})
BASH = Tool("Bash", "Run a shell command.", {
    "type": "object", "properties": {"command": {"type": "string"}}, "required": ["command"]})


@pytest.fixture
def provider(new_provider):
    return new_provider("local", default_model="smollm2", timeout_seconds=120,
                        max_concurrency=1, options={"n_ctx": 4096,
                                                        "max_string_length": 80})


def calls(events):
    return [e for e in events if isinstance(e, ToolCallDelta)]


@pytest.mark.parametrize("choice", [ToolChoice("required"), ToolChoice("tool", "get_weather")])
async def test_required_tool_call_is_well_formed(provider, choice):
    request = ask("What is the weather in Paris?", tools=[BASH, WEATHER], tool_choice=choice,
                  temperature=0.0, max_output_tokens=64)
    events = await collect(backend_stream(provider, request))
    [call] = calls(events)
    assert events[-1] == Finish("tool_calls")
    assert not [e for e in events if isinstance(e, TextDelta)]
    tool = {"Bash": BASH, "get_weather": WEATHER}[call.name]
    if choice.mode == "tool":
        assert call.name == "get_weather"
    jsonschema.validate(json.loads(call.arguments), tool.parameters)
    assert call.id.startswith("call_")


async def test_auto_gives_text_or_a_well_formed_call(provider):
    request = ask("Say hello to me.", tools=[WEATHER], temperature=0.0,
                  max_output_tokens=48)
    events = await collect(backend_stream(provider, request))
    found = calls(events)
    if found:
        jsonschema.validate(json.loads(found[0].arguments), WEATHER.parameters)
        assert events[-1] == Finish("tool_calls")
    else:
        text = "".join(e.text for e in events if isinstance(e, TextDelta))
        assert text
        assert not text.lstrip().startswith("{")


def test_cap_strings_bounds_unbounded_strings_only():
    from agents.backends.local_prompt import cap_strings

    capped = cap_strings({"type": "object", "properties": {
        "a": {"type": "string"}, "b": {"type": "string", "maxLength": 5},
        "c": {"type": "array", "items": {"type": "string"}},
        "d": {"enum": ["x"]}}}, 9)
    props = capped["properties"]
    assert props["a"]["maxLength"] == 9
    assert props["b"]["maxLength"] == 5
    assert props["c"]["items"]["maxLength"] == 9
    assert "maxLength" not in props["d"]


def test_tools_prompt_is_compact_and_grammar_offers_only_allowed_tools():
    request = ask("x", tools=[BASH, WEATHER], tool_choice=ToolChoice("tool", "Bash"))
    prompt = tools_prompt(request)
    assert "- Bash(command): Run a shell command." in prompt
    assert "get_weather" not in prompt
    grammar, is_call = request_grammar(request)
    assert is_call
    assert '"\\"Bash\\""' in grammar or "Bash" in grammar
    assert "get_weather" not in grammar
    assert request_grammar(ask("x", tools=[BASH], tool_choice=ToolChoice("none"))) == (None,
                                                                                        False)
    auto, _ = request_grammar(ask("x", tools=[WEATHER]))
    assert auto.startswith("root ::= call | text")
    assert "More detail" not in tools_prompt(ask("x", tools=[WEATHER]))


async def test_response_format_json_schema_is_enforced(provider):
    schema = {"type": "object", "properties": {"capital": {"type": "string"}},
              "required": ["capital"], "additionalProperties": False}
    request = ask("What is the capital of France? Answer in JSON.", temperature=0.0,
                  max_output_tokens=48,
                  extra={"response_format": {"type": "json_schema", "json_schema": {
                      "name": "answer", "schema": schema}}})
    events = await collect(backend_stream(provider, request))
    text = "".join(e.text for e in events if isinstance(e, TextDelta))
    jsonschema.validate(json.loads(text), schema)


async def test_response_format_json_object(provider):
    request = ask("List two colours as JSON.", temperature=0.0, max_output_tokens=48,
                  extra={"response_format": {"type": "json_object"}})
    events = await collect(backend_stream(provider, request))
    text = "".join(e.text for e in events if isinstance(e, TextDelta))
    assert isinstance(json.loads(text), dict)


def test_unexpressible_response_schema_is_refused():
    bad = {"type": "json_schema", "json_schema": {"name": "x", "schema": {"type": "wat"}}}
    with pytest.raises(InvalidRequest) as err:
        request_grammar(ask("x", extra={"response_format": bad}))
    assert err.value.param == "response_format"
