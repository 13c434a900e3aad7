"""Property-based tests of every /v1 request parser (hypothesis): whatever JSON a client sends,
the parser returns a request or raises a GaiaError, and over HTTP (a real server process) the
answer is never a 5xx and every error is in its dialect's envelope.

Example counts are bounded (``max_examples``) so that the suite stays fast; hypothesis keeps
the failing examples it finds in its database and tries them first next time.
"""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agents.kernel.exceptions import GaiaError
from openai_api.dialects import chat, messages, responses
from openai_api.dialects.common import parse_json

PARSER_EXAMPLES = 500
HTTP_EXAMPLES = 60

# -- strategies ---------------------------------------------------------------------------------
# Valid requests of each dialect (odd but legal values), the same with exactly one thing wrong
# (a value replaced by another JSON value or by text no database stores), and arbitrary
# objects: so that generated requests reach every field's parsing, not only the first.

text = st.text(st.characters(exclude_categories=("Cs", "Cc")), max_size=30)
NASTY = st.sampled_from(["", "\x00", "a\ud800b", "\udfff", "x" * 300, "data:image/png;base64,!!",
                         "https://", "data:text/plain;base64,aGk="])
json_values = st.recursive(
    st.none() | st.booleans() | st.integers(min_value=-(2**70), max_value=2**70)
    | st.floats(allow_nan=False, allow_infinity=False) | text,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(text, inner, max_size=3),
    max_leaves=6,
)
USER = {"role": "user", "content": "hi"}
IMAGE_URLS = st.sampled_from(["https://x.example/a.png", "data:image/png;base64,iVBORw0KGgo="])
call_ids = st.text("abcdef0123456789_", min_size=1, max_size=12)
names = st.text("abcdefghij_", min_size=1, max_size=10)
arguments = st.sampled_from(["{}", '{"a": 1}', "not json", ""])
schema = st.just({"type": "object", "properties": {"a": {"type": "integer"}}})


def paths(value: Any, at: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    out = [at]
    if isinstance(value, dict):
        for k, v in value.items():
            out += paths(v, (*at, k))
    elif isinstance(value, list):
        for i, v in enumerate(value):
            out += paths(v, (*at, i))
    return out


def mutate(value: Any, changes: list[tuple[int, Any]]) -> Any:
    """``value`` (a copy) with, for each ``(pick, replacement)``, its ``pick``-th sub-value
    replaced (or, now and then, its key dropped)."""
    value = json.loads(json.dumps(value))
    for pick, shared in changes:
        replacement = json.loads(json.dumps(shared))  # never the strategy's own object
        where = paths(value)[1:]
        if not where:
            return replacement
        path = where[pick % len(where)]
        parent = value
        for step in path[:-1]:
            parent = parent[step]
        if isinstance(parent, dict) and pick % 7 == 0:
            del parent[path[-1]]
        else:
            parent[path[-1]] = replacement
    return value


def set_path(value: Any, path: tuple[Any, ...], replacement: Any) -> Any:
    """``value`` (a copy) with ``path`` set to ``replacement``, making dicts on the way."""
    value = json.loads(json.dumps(value))
    replacement = json.loads(json.dumps(replacement))  # never the strategy's own object
    parent = value
    for step in path[:-1]:
        if isinstance(parent, list):
            if not parent:
                return value
            step %= len(parent)
        elif step not in parent or not isinstance(parent[step], dict | list):
            parent[step] = {}
        parent = parent[step]
    if isinstance(parent, list):
        if parent:
            parent[path[-1] % len(parent)] = replacement
    else:
        parent[path[-1]] = replacement
    return value


WRONG = st.one_of(st.sampled_from(["f", 0, -1, 1.5, None, True, [], {}, ["f"], {"f": 1}]),
                  NASTY, json_values)


def requests_of(valid: st.SearchStrategy[Any], focus: list[tuple[Any, ...]]
                ) -> st.SearchStrategy[Any]:
    """``valid`` requests; the same with one to three sub-values anywhere made wrong; with
    one of the ``focus`` paths (where structure is parsed by hand) made wrong; any object."""
    broken = st.builds(mutate, valid, st.lists(
        st.tuples(st.integers(min_value=0, max_value=10**6), WRONG), min_size=1, max_size=3))
    focused = st.builds(set_path, valid, st.sampled_from(focus), WRONG)
    any_object = st.dictionaries(text, json_values, max_size=4)
    return st.one_of(valid, broken, focused, any_object)


def with_a_user(messages: st.SearchStrategy[list[Any]]) -> st.SearchStrategy[list[Any]]:
    return st.one_of(messages.map(lambda ms: [USER, *ms]), messages.map(lambda ms: [*ms, USER]))


numbers = {"temperature": st.floats(min_value=0, max_value=1),
           "top_p": st.floats(min_value=0, max_value=1),
           "stream": st.booleans(), "user": text}

# Chat Completions
chat_parts = st.one_of(
    st.fixed_dictionaries({"type": st.just("text"), "text": text}),
    st.fixed_dictionaries({"type": st.just("image_url"),
                           "image_url": st.fixed_dictionaries({"url": IMAGE_URLS})}))
chat_content = st.one_of(text, st.lists(chat_parts, min_size=1, max_size=2))
chat_calls = st.lists(st.fixed_dictionaries({
    "id": call_ids, "type": st.just("function"),
    "function": st.fixed_dictionaries({"name": names, "arguments": arguments})}),
    min_size=1, max_size=2)
chat_message = st.one_of(
    st.fixed_dictionaries({"role": st.sampled_from(["user", "system", "developer"]),
                           "content": chat_content}),
    st.fixed_dictionaries({"role": st.just("assistant"), "content": text | st.none()},
                          optional={"tool_calls": chat_calls}),
    st.fixed_dictionaries({"role": st.just("tool"), "tool_call_id": call_ids,
                           "content": text}))
chat_tools = st.lists(st.fixed_dictionaries({"type": st.just("function"), "function":
                                             st.fixed_dictionaries({"name": names,
                                                                    "parameters": schema})}),
                      max_size=2)
chat_bodies = requests_of(st.fixed_dictionaries(
    {"model": st.just("echo"), "messages": with_a_user(st.lists(chat_message, max_size=3))},
    optional={**numbers, "max_tokens": st.integers(1, 64), "n": st.just(1),
              "max_completion_tokens": st.integers(1, 64),
              "stop": text | st.lists(text, max_size=2), "tools": chat_tools,
              "tool_choice": st.one_of(
                  st.sampled_from(["auto", "none", "required"]),
                  st.fixed_dictionaries({"type": st.just("function"),
                                         "function": st.fixed_dictionaries({"name": names})})),
              "stream_options": st.fixed_dictionaries({"include_usage": st.booleans()})}),
    [("tool_choice",), ("tool_choice", "function"), ("tool_choice", "function", "name"),
     ("tools", 0, "function"), ("messages", 0, "content"), ("messages", 0, "content", 0),
     ("messages", 0, "content", 0, "image_url"), ("messages", 1, "tool_calls", 0),
     ("messages", 1, "tool_calls", 0, "function"), ("messages", 0, "tool_call_id"),
     ("stream_options",), ("stop",)])

# Responses
input_message = st.fixed_dictionaries({
    "role": st.sampled_from(["user", "assistant", "system", "developer"]),
    "content": st.one_of(text, st.lists(st.one_of(
        st.fixed_dictionaries({"type": st.sampled_from(["input_text", "output_text"]),
                               "text": text}),
        st.fixed_dictionaries({"type": st.just("input_image"), "image_url": IMAGE_URLS})),
        min_size=1, max_size=2))},
    optional={"type": st.just("message")})
input_items = st.one_of(
    input_message,
    st.fixed_dictionaries({"type": st.just("function_call"), "call_id": call_ids,
                           "name": names, "arguments": arguments}),
    st.fixed_dictionaries({"type": st.just("function_call_output"), "call_id": call_ids,
                           "output": text}),
    st.fixed_dictionaries({"type": st.just("reasoning"), "summary": st.just([])}))
responses_tools = st.lists(st.fixed_dictionaries(
    {"type": st.just("function"), "name": names, "parameters": schema}), max_size=2)
responses_bodies = requests_of(st.fixed_dictionaries(
    {"model": st.just("echo"),
     "input": text | with_a_user(st.lists(input_items, max_size=3))},
    optional={**numbers, "instructions": text, "max_output_tokens": st.integers(1, 64),
              "tools": responses_tools,
              "tool_choice": st.one_of(
                  st.sampled_from(["auto", "none", "required"]),
                  st.fixed_dictionaries({"type": st.just("function"), "name": names})),
              "reasoning": st.fixed_dictionaries({"effort": st.sampled_from(["low", "high"])}),
              "parallel_tool_calls": st.booleans(), "store": st.booleans()}),
    [("tool_choice",), ("tool_choice", "function"), ("tool_choice", "name"), ("tools", 0),
     ("tools", 0, "parameters"), ("input", 0), ("input", 0, "content"),
     ("input", 0, "content", 0), ("input", 1, "call_id"), ("input", 1, "arguments"),
     ("input", 1, "output"), ("reasoning",), ("previous_response_id",)])

# Anthropic Messages
blocks = st.one_of(
    st.fixed_dictionaries({"type": st.just("text"), "text": text}),
    st.fixed_dictionaries({"type": st.just("image"), "source": st.fixed_dictionaries(
        {"type": st.just("base64"), "media_type": st.just("image/png"),
         "data": st.just("iVBORw0KGgo=")})}),
    st.fixed_dictionaries({"type": st.just("tool_use"), "id": call_ids, "name": names,
                           "input": st.just({"a": 1})}),
    st.fixed_dictionaries({"type": st.just("tool_result"), "tool_use_id": call_ids,
                           "content": text}))
anthropic_message = st.fixed_dictionaries({
    "role": st.sampled_from(["user", "assistant"]),
    "content": text | st.lists(blocks, min_size=1, max_size=2)})
anthropic_tools = st.lists(st.fixed_dictionaries({"name": names, "input_schema": schema}),
                           max_size=2)
messages_bodies = requests_of(st.fixed_dictionaries(
    {"model": st.just("echo"), "max_tokens": st.integers(1, 64),
     "messages": with_a_user(st.lists(anthropic_message, max_size=3))},
    optional={**numbers, "system": text | st.lists(
        st.fixed_dictionaries({"type": st.just("text"), "text": text}), max_size=2),
        "stop_sequences": st.lists(text, max_size=2), "top_k": st.integers(0, 50),
        "tools": anthropic_tools,
        "tool_choice": st.one_of(
            st.fixed_dictionaries({"type": st.sampled_from(["auto", "any", "none"])}),
            st.fixed_dictionaries({"type": st.just("tool"), "name": names})),
        "metadata": st.fixed_dictionaries({"user_id": text})}),
    [("tool_choice",), ("tool_choice", "name"), ("tools", 0), ("tools", 0, "input_schema"),
     ("system",), ("system", 0), ("messages", 0, "content"), ("messages", 0, "content", 0),
     ("messages", 0, "content", 0, "source"), ("messages", 0, "content", 0, "input"),
     ("messages", 0, "content", 0, "content"), ("metadata",), ("metadata", "user_id"),
     ("thinking",)])

# -- the parsers alone --------------------------------------------------------------------------

PARSERS = {
    "chat": (chat.parse_request, chat_bodies),
    "responses": (responses.parse_request, responses_bodies),
    "messages": (messages.parse_request, messages_bodies),
}


@pytest.mark.parametrize("dialect", PARSERS)
def test_parsers_return_a_request_or_a_gaia_error(dialect):
    parse, bodies = PARSERS[dialect]

    @settings(max_examples=PARSER_EXAMPLES, deadline=None)
    @given(bodies)
    def check(data: Any) -> None:
        raw = json.dumps(data).encode()  # as it arrives: lone surrogates and NULs escaped
        error = None
        try:
            parse(parse_json(raw))
        except GaiaError as exc:  # anything else fails the test
            error = exc
        if error is not None:
            assert 400 <= error.status < 500
            assert error.message

    check()


@settings(max_examples=PARSER_EXAMPLES, deadline=None)
@given(st.binary(max_size=64) | st.text(max_size=64).map(str.encode)
       | json_values.map(lambda v: json.dumps(v).encode())
       | st.integers(1, 3000).map(lambda n: b'{"a":' + b"[" * n + b"]" * n + b"}"))
def test_parse_json_accepts_objects_and_refuses_anything_else_with_a_400(raw):
    try:
        parsed: Any = parse_json(raw)
    except GaiaError as exc:
        parsed = exc
    assert isinstance(parsed, dict) or parsed.status == 400


# -- over HTTP, against a real server process ---------------------------------------------------

pytestmark_http = pytest.mark.django_db(transaction=True)
ROUTES = {
    "chat": ("/chat/completions", chat_bodies, "openai"),
    "responses": ("/responses", responses_bodies, "openai"),
    "messages": ("/messages", messages_bodies, "anthropic"),
    "count_tokens": ("/messages/count_tokens", messages_bodies, "anthropic"),
}


def assert_envelope(response: httpx.Response, dialect: str) -> None:
    assert response.status_code < 500, response.text
    if response.status_code < 300:
        return
    body = response.json()
    if dialect == "anthropic":
        assert body["type"] == "error"
        assert set(body["error"]) == {"type", "message"}
    else:
        assert set(body["error"]) == {"message", "type", "param", "code"}


@pytestmark_http
@pytest.mark.parametrize("route", ROUTES)
def test_no_body_is_answered_with_a_5xx_or_outside_its_envelope(gaia_server, echo_agent,
                                                                 api_key, route):
    path, bodies, dialect = ROUTES[route]
    client = httpx.Client(base_url=gaia_server.v1, timeout=30, headers={
        "Authorization": f"Bearer {api_key}", "anthropic-version": "2023-06-01"})

    @settings(max_examples=HTTP_EXAMPLES, deadline=None,
              suppress_health_check=[HealthCheck.function_scoped_fixture,
                                     HealthCheck.too_slow])
    @given(bodies)
    def check(data: Any) -> None:
        response = client.post(path, content=json.dumps(data).encode(),
                               headers={"Content-Type": "application/json"})
        assert_envelope(response, dialect)

    with client:
        check()
