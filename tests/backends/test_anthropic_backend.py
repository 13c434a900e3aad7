"""The ``anthropic`` provider kind against a fake Messages API server on loopback."""

from __future__ import annotations

import asyncio

import pytest

from agents.backends import backend_stream
from agents.kernel.exceptions import BackendError, BackendRateLimited, BackendTimeout
from agents.kernel.llm import (
    Finish,
    ImagePart,
    Message,
    ReasoningDelta,
    TextDelta,
    TextPart,
    Tool,
    ToolCall,
    ToolCallDelta,
    ToolChoice,
    Usage,
)
from tests.conftest import free_port
from tests.fakes import Drop, Fail, Hang, Reply, ToolCallSpec

from .conftest import ask, collect, drain

SECRET = "sk-ant-test-upstream-secret-1234"


@pytest.fixture
def provider(new_provider, anthropic_upstream):
    return new_provider(
        "anthropic", base_url=anthropic_upstream.base_url, api_key_secret=SECRET,
        default_model="claude-fake", options={"extra_headers": {"anthropic-beta": "x-test"}},
    )


async def test_streams_text_with_usage_from_start_and_delta(provider, anthropic_upstream):
    anthropic_upstream.script(Reply(text="Paris is the capital.", usage=(21, 4)))
    events = await collect(backend_stream(provider, ask("Capital of France?", system="Be brief.",
                                                        max_output_tokens=64, temperature=0.3,
                                                        stop=["\n\n"])))
    texts = [e.text for e in events if isinstance(e, TextDelta)]
    # streamed piece by piece; a piece's end that could begin the provider's key ("s" of
    # "sk-...") waits for the next piece (agents.backends.upstream.Redactor)
    assert "".join(texts) == "Paris is the capital."
    assert len(texts) == 4
    assert events[-2:] == [Usage(21, 4), Finish("stop")]
    sent = anthropic_upstream.last
    assert sent.path == "/v1/messages"
    assert SECRET in (sent.headers.get("x-api-key"), sent.headers.get("authorization", "")[7:])
    assert sent.headers["anthropic-beta"] == "x-test"
    assert "anthropic-version" in sent.headers
    assert sent.body["model"] == "claude-fake"
    assert sent.body["system"] == "Be brief."
    assert sent.body["messages"] == [{"role": "user", "content": "Capital of France?"}]
    assert sent.body["max_tokens"] == 64
    assert sent.body["temperature"] == 0.3
    assert sent.body["stop_sequences"] == ["\n\n"]
    assert sent.body["stream"] is True
    assert await anthropic_upstream.await_settled(sent)
    assert sent.completed


async def test_default_max_tokens_and_length_stop(provider, anthropic_upstream):
    events = await collect(backend_stream(provider, ask()))
    assert anthropic_upstream.last.body["max_tokens"] == 4096
    assert events[-1] == Finish("stop")
    events = await collect(backend_stream(provider, ask(max_output_tokens=2)))
    assert len([e for e in events if isinstance(e, TextDelta)]) == 2
    assert events[-1] == Finish("length")
    assert events[-2] == Usage(1, 2)


@pytest.mark.parametrize(("upstream", "ours"), [
    ("end_turn", "stop"), ("stop_sequence", "stop"), ("max_tokens", "length"),
    ("refusal", "content_filter")])
async def test_stop_reasons(provider, anthropic_upstream, upstream, ours):
    anthropic_upstream.script(Reply(text="ok", finish_reason=upstream))
    events = await collect(backend_stream(provider, ask()))
    assert events[-1] == Finish(ours)


async def test_thinking_goes_to_the_reasoning_channel(provider, anthropic_upstream):
    anthropic_upstream.script(Reply(text="42", reasoning="Let me think."))
    events = await collect(backend_stream(provider, ask()))
    assert events[0] == ReasoningDelta("Let me think.")
    assert events[1] == TextDelta("42")


async def test_tools_and_tool_use_blocks(provider, anthropic_upstream):
    weather = Tool("get_weather", "Weather for a city",
                   {"type": "object", "properties": {"city": {"type": "string"}}})
    anthropic_upstream.script(Reply(text="Checking.", tool_calls=[
        ToolCallSpec("get_weather", '{"city": "Paris"}', id="toolu_a", chunks=3),
        ToolCallSpec("get_weather", '{"city": "Rome"}', id="toolu_b")]))
    request = ask("Weather?", tools=[weather], tool_choice=ToolChoice("required"))
    events = await collect(backend_stream(provider, request))

    body = anthropic_upstream.last.body
    assert body["tools"] == [{"name": "get_weather", "description": "Weather for a city",
                              "input_schema": weather.parameters}]
    assert body["tool_choice"] == {"type": "any"}
    assert events[0] == TextDelta("Checking.")
    deltas = [e for e in events if isinstance(e, ToolCallDelta)]
    assert deltas[0] == ToolCallDelta(index=0, id="toolu_a", name="get_weather")
    assert "".join(d.arguments for d in deltas if d.index == 0) == '{"city": "Paris"}'
    assert [d for d in deltas if d.index == 1][0].id == "toolu_b"
    assert "".join(d.arguments for d in deltas if d.index == 1) == '{"city": "Rome"}'
    assert events[-1] == Finish("tool_calls")


@pytest.mark.parametrize(("choice", "expected"), [
    (ToolChoice("auto"), {"type": "auto"}), (ToolChoice("none"), {"type": "none"}),
    (ToolChoice("tool", "f"), {"type": "tool", "name": "f"})])
async def test_tool_choice_mapping(provider, anthropic_upstream, choice, expected):
    await collect(backend_stream(provider, ask(tools=[Tool("f")], tool_choice=choice)))
    assert anthropic_upstream.last.body["tool_choice"] == expected


async def test_history_tool_results_and_images(provider, anthropic_upstream):
    request = ask(tools=[Tool("lookup")])
    request.messages = [
        Message("user", (TextPart("What is this?"),
                         ImagePart(data="iVBORw0KGgo=", media_type="image/png"),
                         ImagePart(url="https://example.com/cat.jpg"))),
        Message("assistant", (TextPart("Let me look."),),
                (ToolCall("toolu_1", "lookup", '{"q": "cat"}'),
                 ToolCall("toolu_2", "lookup", '{"q": "dog"}'))),
        Message("tool", (TextPart("a cat"),), tool_call_id="toolu_1"),
        Message("tool", (TextPart("not found"),), tool_call_id="toolu_2", is_error=True),
        Message("user", (TextPart("So?"),)),
    ]
    await collect(backend_stream(provider, request))
    assert anthropic_upstream.last.body["messages"] == [
        {"role": "user", "content": [
            {"type": "text", "text": "What is this?"},
            {"type": "image", "source": {"type": "base64", "media_type": "image/png",
                                         "data": "iVBORw0KGgo="}},
            {"type": "image", "source": {"type": "url", "url": "https://example.com/cat.jpg"}},
        ]},
        {"role": "assistant", "content": [
            {"type": "text", "text": "Let me look."},
            {"type": "tool_use", "id": "toolu_1", "name": "lookup", "input": {"q": "cat"}},
            {"type": "tool_use", "id": "toolu_2", "name": "lookup", "input": {"q": "dog"}},
        ]},
        {"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": "toolu_1", "content": "a cat"},
            {"type": "tool_result", "tool_use_id": "toolu_2", "content": "not found",
             "is_error": True},
            {"type": "text", "text": "So?"},
        ]},
    ]


# -- upstream failures -------------------------------------------------------------------


async def test_rejected_key_is_a_502_naming_credentials_not_the_key(new_provider,
                                                                    anthropic_upstream):
    wrong = "sk-ant-wrong-key-must-not-leak"
    provider = new_provider("anthropic", base_url=anthropic_upstream.base_url,
                             api_key_secret=wrong, default_model="m")
    with pytest.raises(BackendError) as caught:
        await collect(backend_stream(provider, ask()))
    assert type(caught.value) is BackendError
    assert caught.value.status == 502
    assert "credentials" in caught.value.message
    assert wrong not in caught.value.message


async def test_rate_limit_keeps_retry_after(provider, anthropic_upstream):
    anthropic_upstream.script(Fail(429, "Number of requests exceeded",
                                   headers={"retry-after": "12"}))
    with pytest.raises(BackendRateLimited) as caught:
        await collect(backend_stream(provider, ask()))
    assert caught.value.status == 429
    assert caught.value.retry_after == 12


@pytest.mark.parametrize("status", [500, 529])
async def test_server_errors_are_502(provider, anthropic_upstream, status):
    anthropic_upstream.script(Fail(status, "Overloaded"))
    with pytest.raises(BackendError) as caught:
        await collect(backend_stream(provider, ask()))
    assert type(caught.value) is BackendError
    assert caught.value.status == 502


async def test_unreachable_is_502(new_provider):
    port = free_port()  # nothing listens there
    provider = new_provider("anthropic", base_url=f"http://127.0.0.1:{port}",
                             api_key_secret=SECRET, default_model="m")
    with pytest.raises(BackendError) as caught:
        await collect(backend_stream(provider, ask()))
    assert type(caught.value) is BackendError
    assert caught.value.status == 502


async def test_hang_is_a_504_and_the_upstream_sees_the_close(new_provider,
                                                             anthropic_upstream):
    provider = new_provider("anthropic", base_url=anthropic_upstream.base_url,
                             api_key_secret=SECRET, default_model="m", timeout_seconds=0.5)
    anthropic_upstream.script(Hang(30))
    with pytest.raises(BackendTimeout) as caught:
        await collect(backend_stream(provider, ask()))
    assert caught.value.status == 504
    assert await anthropic_upstream.await_disconnects(1)


async def test_error_event_mid_stream(provider, anthropic_upstream):
    anthropic_upstream.script(Fail(529, "Overloaded", after_tokens=2))
    seen = []
    with pytest.raises(BackendError) as caught:
        await drain(backend_stream(provider, ask()), seen)
    assert type(caught.value) is BackendError
    assert len([e for e in seen if isinstance(e, TextDelta)]) == 2
    assert "Overloaded" in caught.value.message


async def test_connection_cut_mid_stream(provider, anthropic_upstream):
    anthropic_upstream.script(Drop(after_tokens=1))
    seen = []
    with pytest.raises(BackendError):
        await drain(backend_stream(provider, ask()), seen)
    assert [e for e in seen if isinstance(e, TextDelta)] == [TextDelta("lorem")]


# -- cancellation ------------------------------------------------------------------------


async def test_closing_the_iterator_closes_the_upstream(provider, anthropic_upstream):
    anthropic_upstream.script(Reply(tokens=200, token_delay_ms=20))
    stream = backend_stream(provider, ask())
    assert isinstance(await anext(stream), TextDelta)
    await stream.aclose()
    assert await anthropic_upstream.await_disconnects(1)
    assert not anthropic_upstream.last.completed


async def test_cancelling_the_task_closes_the_upstream(provider, anthropic_upstream):
    anthropic_upstream.script(Reply(tokens=200, token_delay_ms=20))
    got = asyncio.Event()

    async def consume():
        async for _ in backend_stream(provider, ask()):
            got.set()

    task = asyncio.create_task(consume())
    await asyncio.wait_for(got.wait(), 5)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert await anthropic_upstream.await_disconnects(1)
