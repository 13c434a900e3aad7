"""The ``openai`` provider kind against a fake OpenAI-compatible server on loopback."""

from __future__ import annotations

import asyncio
import json

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

SECRET = "sk-test-upstream-secret-1234"


@pytest.fixture
def provider(new_provider, openai_upstream):
    return new_provider(
        "openai", base_url=openai_upstream.base_url, api_key_secret=SECRET,
        default_model="gpt-fake", options={"extra_headers": {"X-Team": "gaia"}},
    )


async def test_streams_text_usage_and_finish(provider, openai_upstream):
    openai_upstream.script(Reply(text="Paris is the capital.", usage=(11, 5)))
    events = await collect(backend_stream(provider, ask("Capital of France?", system="Be brief.",
                                                        max_output_tokens=50,
                                                        temperature=0.2)))
    texts = [e.text for e in events if isinstance(e, TextDelta)]
    # streamed piece by piece; a piece's end that could begin the provider's key ("s" of
    # "sk-...") waits for the next piece (agents.backends.upstream.Redactor)
    assert "".join(texts) == "Paris is the capital."
    assert len(texts) == 4
    assert events[-2:] == [Usage(11, 5, estimated=False), Finish("stop")]

    sent = openai_upstream.last
    assert sent.headers["authorization"] == f"Bearer {SECRET}"
    assert sent.headers["x-team"] == "gaia"
    body = sent.body
    assert body["model"] == "gpt-fake"
    assert body["stream"] is True
    assert body["stream_options"] == {"include_usage": True}
    assert body["messages"] == [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "Capital of France?"},
    ]
    assert body["max_tokens"] == 50
    assert body["temperature"] == 0.2
    assert "tools" not in body
    assert await openai_upstream.await_settled(sent)
    assert sent.completed
    assert not sent.disconnected


async def test_request_model_overrides_default_and_length_finish(provider, openai_upstream):
    events = await collect(backend_stream(provider, ask(model="other-model",
                                                        max_output_tokens=3)))
    assert openai_upstream.last.body["model"] == "other-model"
    assert len([e for e in events if isinstance(e, TextDelta)]) == 3
    assert events[-1] == Finish("length")
    assert events[-2] == Usage(1, 3)  # "Hello": 1 prompt token by the fake's count


async def test_upstream_reasoning_channel(provider, openai_upstream):
    openai_upstream.script(Reply(text="Yes.", reasoning="Thinking it over."))
    events = await collect(backend_stream(provider, ask()))
    assert events[0] == ReasoningDelta("Thinking it over.")
    assert events[1] == TextDelta("Yes.")


async def test_tools_passed_through_and_tool_call_deltas(provider, openai_upstream):
    weather = Tool("get_weather", "Weather for a city",
                   {"type": "object", "properties": {"city": {"type": "string"}}})
    clock = Tool("get_time", "", {"type": "object", "properties": {}})
    openai_upstream.script(Reply(tool_calls=[
        ToolCallSpec("get_weather", '{"city": "Paris"}', id="call_a", chunks=3),
        ToolCallSpec("get_time", "{}", id="call_b"),
    ]))
    request = ask("Weather and time?", tools=[weather, clock],
                  tool_choice=ToolChoice("tool", "get_weather"))
    events = await collect(backend_stream(provider, request))

    body = openai_upstream.last.body
    assert body["tools"] == [
        {"type": "function", "function": {"name": "get_weather",
                                          "description": "Weather for a city",
                                          "parameters": weather.parameters}},
        {"type": "function", "function": {"name": "get_time", "description": "",
                                          "parameters": clock.parameters}},
    ]
    assert body["tool_choice"] == {"type": "function", "function": {"name": "get_weather"}}

    deltas = [e for e in events if isinstance(e, ToolCallDelta)]
    assert deltas[0] == ToolCallDelta(index=0, id="call_a", name="get_weather", arguments="")
    assert len([d for d in deltas if d.index == 0]) == 4  # header + 3 argument fragments
    assert "".join(d.arguments for d in deltas if d.index == 0) == '{"city": "Paris"}'
    assert [d for d in deltas if d.index == 1][0].id == "call_b"
    assert "".join(d.arguments for d in deltas if d.index == 1) == "{}"
    assert events[-1] == Finish("tool_calls")
    assert isinstance(events[-2], Usage)


@pytest.mark.parametrize(("mode", "expected"), [
    ("auto", "auto"), ("none", "none"), ("required", "required")])
async def test_tool_choice_modes(provider, openai_upstream, mode, expected):
    request = ask(tools=[Tool("f")], tool_choice=ToolChoice(mode))
    await collect(backend_stream(provider, request))
    assert openai_upstream.last.body["tool_choice"] == expected


async def test_history_with_tool_results_and_images(provider, openai_upstream):
    request = ask()
    request.messages = [
        Message("user", (TextPart("What is this?"),
                         ImagePart(data="iVBORw0KGgo=", media_type="image/png"),
                         ImagePart(url="https://example.com/cat.jpg"))),
        Message("assistant", (), (ToolCall("call_1", "lookup", '{"q": "cat"}'),)),
        Message("tool", (TextPart("a cat"),), tool_call_id="call_1"),
        Message("assistant", (TextPart("A cat."),)),
        Message("user", (TextPart("Thanks"),)),
    ]
    request.tools = [Tool("lookup")]
    await collect(backend_stream(provider, request))
    assert openai_upstream.last.body["messages"] == [
        {"role": "user", "content": [
            {"type": "text", "text": "What is this?"},
            {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBORw0KGgo="}},
            {"type": "image_url", "image_url": {"url": "https://example.com/cat.jpg"}},
        ]},
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "call_1", "type": "function",
             "function": {"name": "lookup", "arguments": '{"q": "cat"}'}}]},
        {"role": "tool", "tool_call_id": "call_1", "content": "a cat"},
        {"role": "assistant", "content": "A cat."},
        {"role": "user", "content": "Thanks"},
    ]


async def test_credential_from_environment(new_provider, openai_upstream, monkeypatch):
    monkeypatch.setenv("GAIA_TEST_UPSTREAM_KEY", SECRET)
    provider = new_provider("openai", base_url=openai_upstream.base_url,
                             api_key_env="GAIA_TEST_UPSTREAM_KEY", default_model="m")
    events = await collect(backend_stream(provider, ask()))
    assert events[-1] == Finish("stop")
    assert openai_upstream.last.headers["authorization"] == f"Bearer {SECRET}"


# -- the connection ------------------------------------------------------------------------


async def test_consecutive_replies_reuse_one_connection(provider, openai_upstream):
    """A reply read to its end hands its connection back: no TCP handshake per request."""
    for _ in range(3):
        events = await collect(backend_stream(provider, ask()))
        assert events[-1] == Finish("stop")
    clients = {r.client for r in openai_upstream.requests}
    assert len(openai_upstream.requests) == 3
    assert len(clients) == 1, clients


async def test_on_sent_is_called_once_the_request_is_on_the_wire(provider, openai_upstream):
    openai_upstream.script(Reply(text="Hello there", ttft_ms=300))
    seen: list[str] = []
    stream = backend_stream(provider, ask(), on_sent=lambda: seen.append("sent"))
    async for event in stream:
        seen.append(type(event).__name__)
    # Once, before the upstream's first token (which it sends 300 ms after the request).
    assert seen == ["sent", "TextDelta", "TextDelta", "Usage", "Finish"]


async def test_on_sent_is_not_called_when_the_upstream_is_unreachable(new_provider):
    port = free_port()  # nothing listens there
    provider = new_provider("openai", base_url=f"http://127.0.0.1:{port}/v1",
                            default_model="m", options={"max_retries": 1})
    sent: list[bool] = []
    with pytest.raises(BackendError) as caught:
        await collect(backend_stream(provider, ask(), on_sent=lambda: sent.append(True)))
    assert caught.value.status == 502
    assert sent == []


async def test_max_retries_retries_a_refused_connection(new_provider):
    """An upstream that is restarting (connection refused) is tried again, with backoff."""
    from tests.fakes.openai_upstream import FakeOpenAIUpstream

    port = free_port()  # nothing listens there
    provider = new_provider("openai", base_url=f"http://127.0.0.1:{port}/v1",
                            default_model="m", options={"max_retries": 4})
    task = asyncio.create_task(collect(backend_stream(provider, ask())))
    await asyncio.sleep(0.1)  # the first attempt has been refused by now
    assert not task.done()
    with FakeOpenAIUpstream(tokens=3, port=port) as up:
        events = await task
    assert events[-1] == Finish("stop")
    assert len(up.requests) == 1


async def test_a_reply_that_is_not_an_event_stream_is_a_clear_error(new_provider,
                                                                    openai_upstream):
    """A server that ignores ``stream: true`` answers one JSON object, not SSE."""
    openai_upstream.routes[("POST", "/plain/chat/completions")] = (
        openai_upstream.routes[("GET", "/v1/models")])  # any JSON answer
    provider = new_provider("openai", base_url=openai_upstream.url + "/plain",
                            api_key_secret=SECRET, default_model="m")
    with pytest.raises(BackendError) as caught:
        await collect(backend_stream(provider, ask()))
    assert caught.value.status == 502
    assert "application/json instead of an event stream" in caught.value.message


# -- upstream failures -------------------------------------------------------------------


@pytest.mark.parametrize("status", [401, 403])
async def test_rejected_credentials_are_a_502_without_the_key(new_provider, openai_upstream,
                                                              status):
    wrong = "sk-wrong-key-which-must-not-leak"
    provider = new_provider("openai", base_url=openai_upstream.base_url,
                             api_key_secret=wrong, default_model="m")
    if status == 403:
        openai_upstream.api_key = None
        openai_upstream.script(Fail(403, f"Key {wrong} may not use this model"))
    with pytest.raises(BackendError) as caught:
        await collect(backend_stream(provider, ask()))
    error = caught.value
    assert type(error) is BackendError
    assert error.status == 502
    assert "credentials" in error.message
    assert provider.name in error.message
    assert wrong not in error.message
    assert "sk-wrong" not in error.message


async def test_rate_limit_passes_retry_after(provider, openai_upstream):
    openai_upstream.script(Fail(429, "Slow down", headers={"Retry-After": "7"}))
    with pytest.raises(BackendRateLimited) as caught:
        await collect(backend_stream(provider, ask()))
    assert caught.value.status == 429
    assert caught.value.retry_after == 7
    assert len(openai_upstream.requests) == 1  # no silent retries


@pytest.mark.parametrize("status", [500, 503])
async def test_server_error_is_a_502(provider, openai_upstream, status):
    openai_upstream.script(Fail(status, "upstream exploded"))
    with pytest.raises(BackendError) as caught:
        await collect(backend_stream(provider, ask()))
    assert type(caught.value) is BackendError
    assert caught.value.status == 502
    assert str(status) in caught.value.message


async def test_unreachable_upstream_is_a_502(new_provider):
    port = free_port()  # nothing listens there
    provider = new_provider("openai", base_url=f"http://127.0.0.1:{port}/v1",
                             default_model="m")
    with pytest.raises(BackendError) as caught:
        await collect(backend_stream(provider, ask()))
    assert type(caught.value) is BackendError
    assert caught.value.status == 502
    assert "unreachable" in caught.value.message


async def test_timeout_before_first_token_is_a_504_and_closes_upstream(
        new_provider, openai_upstream):
    provider = new_provider("openai", base_url=openai_upstream.base_url,
                             api_key_secret=SECRET, default_model="m", timeout_seconds=0.5)
    openai_upstream.script(Hang(30))
    with pytest.raises(BackendTimeout) as caught:
        await collect(backend_stream(provider, ask()))
    assert caught.value.status == 504
    assert await openai_upstream.await_disconnects(1)


async def test_stall_mid_stream_raises_timeout_from_the_iterator(new_provider,
                                                                 openai_upstream):
    provider = new_provider("openai", base_url=openai_upstream.base_url,
                             api_key_secret=SECRET, default_model="m", timeout_seconds=0.5)
    openai_upstream.script(Hang(30, after_tokens=2))
    seen = []
    with pytest.raises(BackendTimeout):
        await drain(backend_stream(provider, ask()), seen)
    assert [e.text for e in seen if isinstance(e, TextDelta)] == ["lorem", " ipsum"]
    assert await openai_upstream.await_disconnects(1)


async def test_error_event_mid_stream_is_raised_from_the_iterator(provider, openai_upstream):
    openai_upstream.script(Fail(500, "model crashed", after_tokens=2))
    seen = []
    with pytest.raises(BackendError) as caught:
        await drain(backend_stream(provider, ask()), seen)
    assert len([e for e in seen if isinstance(e, TextDelta)]) == 2
    assert "model crashed" in caught.value.message


async def test_connection_cut_mid_stream_is_a_backend_error(provider, openai_upstream):
    openai_upstream.script(Drop(after_tokens=3))
    seen = []
    with pytest.raises(BackendError) as caught:
        await drain(backend_stream(provider, ask()), seen)
    assert type(caught.value) is BackendError
    assert len([e for e in seen if isinstance(e, TextDelta)]) == 3


# -- cancellation reaches the upstream ---------------------------------------------------


async def test_closing_the_iterator_closes_the_upstream_connection(provider, openai_upstream):
    openai_upstream.script(Reply(tokens=200, token_delay_ms=20))
    stream = backend_stream(provider, ask())
    first = await anext(stream)
    second = await anext(stream)
    assert isinstance(first, TextDelta)
    assert isinstance(second, TextDelta)
    await stream.aclose()
    assert await openai_upstream.await_disconnects(1)
    record = openai_upstream.last
    assert record.disconnected
    assert not record.completed


async def test_cancelling_the_task_closes_the_upstream_connection(provider, openai_upstream):
    openai_upstream.script(Reply(tokens=200, token_delay_ms=20))
    got = asyncio.Event()

    async def consume():
        async for _ in backend_stream(provider, ask()):
            got.set()

    task = asyncio.create_task(consume())
    await asyncio.wait_for(got.wait(), 5)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert await openai_upstream.await_disconnects(1)
    assert not openai_upstream.last.completed


async def test_concurrent_streams_share_the_backend(provider, openai_upstream):
    openai_upstream.script(*[Reply(text=f"answer {i}", token_delay_ms=5) for i in range(4)])
    results = await asyncio.gather(*[collect(backend_stream(provider, ask(f"q{i}")))
                                     for i in range(4)])
    texts = sorted("".join(e.text for e in r if isinstance(e, TextDelta)) for r in results)
    assert texts == [f"answer {i}" for i in range(4)]
    assert json.dumps(openai_upstream.requests[0].body)  # recorded as JSON
