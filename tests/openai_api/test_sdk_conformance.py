"""The official ``openai`` and ``anthropic`` SDKs against a live Gaia.

Every reply and stream event the SDKs hand back is validated again, strictly, with its own
typed model: the SDKs build their objects leniently (``construct``), which would hide a missing
or mistyped field.
"""

from __future__ import annotations

from typing import Any

import anthropic
import openai
import pytest
from pydantic import BaseModel

pytestmark = pytest.mark.django_db(transaction=True)

TOOL_OPENAI = {"type": "function", "function": {
    "name": "get_weather", "description": "Weather for a city.",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}}
TOOL_RESPONSES = {"type": "function", "name": "get_weather", "description": "Weather for a city.",
                  "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}
TOOL_ANTHROPIC = {"name": "get_weather", "description": "Weather for a city.",
                  "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}}}


def strict(obj: BaseModel) -> BaseModel:
    """``obj`` re-validated by its own class from exactly the fields the server sent."""
    data = obj.model_dump(mode="json", by_alias=True, exclude_unset=True)
    return type(obj).model_validate(data)


@pytest.fixture
def oai(gaia_server, api_key) -> openai.OpenAI:
    return openai.OpenAI(base_url=gaia_server.v1, api_key=api_key, max_retries=0, timeout=30)


@pytest.fixture
def ant(gaia_server, api_key) -> anthropic.Anthropic:
    return anthropic.Anthropic(base_url=gaia_server.url, api_key=api_key, max_retries=0,
                               timeout=30)


@pytest.fixture
def thinker(make_agent) -> Any:
    return make_agent(slug="thinker", provider__options={
        "reasoning": "Looking it up.", "reply": "Sunny in Paris.",
        "tool_call": {"name": "get_weather", "arguments": {"city": "Paris"}}})


# -- openai: chat completions ---------------------------------------------------------------


def test_openai_chat_create_and_stream(oai, echo_agent):
    reply = strict(oai.chat.completions.create(
        model="echo", messages=[{"role": "user", "content": "a b c"}]))
    assert reply.choices[0].message.content == "a b c"
    chunks = [strict(c) for c in oai.chat.completions.create(
        model="echo", messages=[{"role": "user", "content": "a b c"}], stream=True,
        stream_options={"include_usage": True})]
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == "a b c"
    assert chunks[-1].usage.completion_tokens == 3


def test_openai_chat_stream_helper_with_tools(oai, thinker):
    with oai.chat.completions.stream(
        model="thinker", messages=[{"role": "user", "content": "weather?"}], tools=[TOOL_OPENAI],
    ) as stream:
        for event in stream:
            if event.type == "chunk":  # the other events are the helper's own accumulations
                strict(event.chunk)
        final = stream.get_final_completion()
    choice = final.choices[0]
    assert choice.finish_reason == "tool_calls"
    call = choice.message.tool_calls[0]
    assert call.function.name == "get_weather"
    assert call.function.arguments == '{"city": "Paris"}'


# -- openai: responses ------------------------------------------------------------------------


def test_openai_responses_create(oai, echo_agent):
    response = strict(oai.responses.create(model="echo", input="hello there",
                                           instructions="Be nice.", metadata={"k": "v"}))
    assert response.status == "completed"
    assert response.output_text == "hello there"
    assert response.metadata == {"k": "v"}
    assert response.usage.output_tokens == 2
    again = strict(oai.responses.retrieve(response.id))
    assert again.output_text == "hello there"
    assert again.id == response.id


def test_openai_responses_create_stream(oai, echo_agent):
    events = [strict(e) for e in oai.responses.create(model="echo", input="x y", stream=True)]
    assert events[0].type == "response.created"
    assert events[-1].type == "response.completed"
    assert [e.sequence_number for e in events] == list(range(len(events)))
    assert events[-1].response.output_text == "x y"


def test_openai_responses_stream_helper_reasoning_and_tools(oai, thinker):
    with oai.responses.stream(model="thinker", input="weather?", tools=[TOOL_RESPONSES]) as s:
        kinds = [strict(e).type for e in s]
        final = s.get_final_response()
    assert "response.reasoning_summary_text.delta" in kinds
    assert "response.function_call_arguments.delta" in kinds
    assert [o.type for o in final.output] == ["reasoning", "function_call"]
    assert final.output[0].summary[0].text == "Looking it up."
    call = final.output[1]
    assert call.name == "get_weather"
    assert call.arguments == '{"city": "Paris"}'
    follow = strict(oai.responses.create(
        model="thinker", previous_response_id=final.id, tools=[TOOL_RESPONSES],
        input=[{"type": "function_call_output", "call_id": call.call_id, "output": "sunny"}]))
    assert follow.output_text == "Sunny in Paris."


def test_openai_responses_errors_raise_typed_exceptions(oai, echo_agent):
    with pytest.raises(openai.NotFoundError) as info:
        oai.responses.create(model="echo", input="x", previous_response_id="resp_nope")
    assert info.value.body["param"] == "previous_response_id"
    with pytest.raises(openai.BadRequestError):
        oai.responses.create(model="echo", input=[{"type": "mystery"}])


# -- anthropic: messages ---------------------------------------------------------------------


def test_anthropic_messages_create(ant, echo_agent):
    message = strict(ant.messages.create(
        model="echo", max_tokens=100, system="Be nice.",
        messages=[{"role": "user", "content": "hello there"}]))
    assert message.content[0].text == "hello there"
    assert message.stop_reason == "end_turn"
    assert message.usage.output_tokens == 2
    assert message.usage.input_tokens > 0


def test_anthropic_messages_create_stream(ant, echo_agent):
    events = [strict(e) for e in ant.messages.create(
        model="echo", max_tokens=100, stream=True,
        messages=[{"role": "user", "content": "a b c"}])]
    kinds = [e.type for e in events]
    assert kinds[0] == "message_start"
    assert kinds[-2:] == ["message_delta", "message_stop"]
    assert "".join(e.delta.text for e in events if e.type == "content_block_delta") == "a b c"


def test_anthropic_messages_stream_helper_thinking_and_tools(ant, thinker):
    with ant.messages.stream(model="thinker", max_tokens=100, tools=[TOOL_ANTHROPIC],
                             messages=[{"role": "user", "content": "weather?"}]) as stream:
        kinds = [strict(e).type for e in stream]
        final = strict(stream.get_final_message())
    assert "thinking" in kinds
    assert "input_json" in kinds
    assert [b.type for b in final.content] == ["thinking", "tool_use"]
    assert final.content[0].thinking == "Looking it up."
    assert final.content[1].input == {"city": "Paris"}
    assert final.stop_reason == "tool_use"


def test_anthropic_count_tokens_matches_message_start(ant, make_agent):
    make_agent(slug="counter", instructions="", provider__options={"reply": "ok"})
    body = {"model": "counter", "system": "one two",
            "messages": [{"role": "user", "content": "three four five"}]}
    count = strict(ant.messages.count_tokens(**body))
    assert count.input_tokens == 5
    with ant.messages.stream(max_tokens=10, **body) as stream:
        start = next(iter(stream))
    assert start.type == "message_start"
    assert start.message.usage.input_tokens == 5


def test_anthropic_errors_raise_typed_exceptions(ant, echo_agent):
    with pytest.raises(anthropic.BadRequestError) as info:
        ant.messages.create(model="echo", max_tokens=10,
                            messages=[{"role": "user", "content": [{"type": "mystery"}]}])
    assert info.value.body["type"] == "error"
    assert info.value.body["error"]["type"] == "invalid_request_error"
    with pytest.raises(anthropic.NotFoundError):
        ant.messages.create(model="nope", max_tokens=10,
                            messages=[{"role": "user", "content": "x"}])
