"""Rules the dialects share, one function each: adjacent text parts reach the backend as one
text (``common.text_parts_merged``) whichever dialect's blocks they came in, and a Responses
``function_call`` or ``custom_tool_call`` joins the assistant turn before it and needs a
``call_id`` and a ``name``."""

from __future__ import annotations

from typing import Any

import pytest

from agents.kernel import llm
from agents.kernel.exceptions import InvalidRequest
from openai_api.dialects import chat, messages, responses
from openai_api.dialects.common import text_parts_merged

IMAGE = llm.ImagePart(data="AAAA", media_type="image/png")


def test_text_parts_merged_joins_each_run_of_text() -> None:
    parts = [llm.TextPart("a"), llm.TextPart("b"), IMAGE, llm.TextPart("c")]
    assert text_parts_merged(parts) == (llm.TextPart("a\nb"), IMAGE, llm.TextPart("c"))
    assert text_parts_merged([]) == ()


@pytest.mark.parametrize(("dialect", "body"), [
    (chat, {"model": "m", "messages": [{"role": "user", "content": [
        {"type": "text", "text": "a"}, {"type": "text", "text": "b"}]}]}),
    (messages, {"model": "m", "max_tokens": 5, "messages": [{"role": "user", "content": [
        {"type": "text", "text": "a"}, {"type": "text", "text": "b"}]}]}),
    (responses, {"model": "m", "input": [{"role": "user", "content": [
        {"type": "input_text", "text": "a"}, {"type": "input_text", "text": "b"}]}]}),
], ids=["chat", "messages", "responses"])
def test_every_dialect_sends_adjacent_text_as_one(dialect: Any, body: dict[str, Any]) -> None:
    canonical = dialect.parse_request(body)[1]
    assert canonical.messages == [llm.Message("user", (llm.TextPart("a\nb"),))]


def test_a_messages_tool_result_merges_its_text_blocks() -> None:
    canonical = messages.parse_request({"model": "m", "max_tokens": 5, "messages": [
        {"role": "user", "content": "go"},
        {"role": "assistant", "content": [
            {"type": "tool_use", "id": "toolu_1", "name": "f", "input": {}}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_1",
                                      "content": [{"type": "text", "text": "a"},
                                                  {"type": "text", "text": "b"}]}]}]})[1]
    assert canonical.messages[-1].parts == (llm.TextPart("a\nb"),)


def test_responses_calls_join_the_assistant_turn_before_them() -> None:
    canonical = responses.parse_request({"model": "m", "input": [
        {"role": "user", "content": "go"},
        {"type": "function_call", "call_id": "c1", "name": "f", "arguments": "{}"},
        {"type": "custom_tool_call", "call_id": "c2", "name": "g", "input": "x"},
        {"type": "function_call_output", "call_id": "c1", "output": "ok"},
        {"type": "custom_tool_call_output", "call_id": "c2", "output": "ok"},
        {"role": "assistant", "content": [{"type": "output_text", "text": "then"}]},
        {"type": "function_call", "call_id": "c3", "name": "f", "arguments": "{}"}]})[1]
    turns = [(m.role, [c.id for c in m.tool_calls]) for m in canonical.messages]
    assert turns == [("user", []), ("assistant", ["c1", "c2"]), ("tool", []), ("tool", []),
                     ("assistant", ["c3"])]
    assert canonical.messages[-1].parts == (llm.TextPart("then"),)


@pytest.mark.parametrize("kind", ["function_call", "custom_tool_call"])
@pytest.mark.parametrize("item", [{"name": "f"}, {"call_id": "c1"}, {"call_id": "", "name": "f"},
                                  {"call_id": "c1", "name": 3}])
def test_responses_calls_need_a_call_id_and_a_name(kind: str, item: dict[str, Any]) -> None:
    with pytest.raises(InvalidRequest) as caught:
        responses.parse_request({"model": "m", "input": [
            {"role": "user", "content": "go"}, {"type": kind, **item}]})
    assert caught.value.message == f"{kind} items need 'call_id' and 'name'."
    assert caught.value.param == "input[1].call_id"
