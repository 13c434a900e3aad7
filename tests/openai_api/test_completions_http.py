"""``POST /v1/completions`` against a live Gaia with the official OpenAI SDK: plain, streamed
and fill-in-the-middle (``suffix``) completions on each way a provider answers them (the
``local`` kind's raw completion, an ``openai`` upstream's own ``/v1/completions``, a chat model
told to continue or fill in), keys, bad input, usage and the stored turn."""

from __future__ import annotations

from typing import Any

import httpx
import openai
import pytest

from agents.backends.completion import CURSOR, FILL_INSTRUCTIONS, Completion, fim_prompt
from agents.models import Message, Thread, UsageBucket
from tests.fakes import Reply, estimate_tokens
from tests.fakes.openai_upstream import FakeOpenAIUpstream

pytestmark = [pytest.mark.timeout(60)]
live = pytest.mark.django_db(transaction=True)

PREFIX = "def add(a, b):\n    return "
SUFFIX = "\n\nprint(add(1, 2))\n"


@pytest.fixture
def client(gaia_server: Any, api_key: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=gaia_server.v1, api_key=api_key, max_retries=0, timeout=30)


@pytest.fixture
def upstream(make_agent: Any) -> Any:
    """Two agents on one recording fake upstream: ``up-cmpl`` (its provider serves
    /v1/completions: ``options.completions``) and ``up-chat`` (a chat model only)."""
    with FakeOpenAIUpstream() as up:
        make_agent(slug="up-cmpl", provider__name="up-cmpl", provider__kind="openai",
                   provider__base_url=up.base_url, provider__default_model="coder",
                   provider__options={"completions": True})
        make_agent(slug="up-chat", provider__name="up-chat", provider__kind="openai",
                   provider__base_url=up.base_url, provider__default_model="chatter",
                   provider__options={})
        yield up


def stream_text(stream: Any) -> tuple[str, str | None, Any]:
    text, finish, usage = "", None, None
    for chunk in stream:
        assert chunk.object == "text_completion"
        usage = chunk.usage or usage
        for choice in chunk.choices:
            text += choice.text or ""
            finish = choice.finish_reason or finish
    return text, finish, usage


@live
def test_completion_forwarded_to_the_upstream_completions(client, upstream):
    upstream.script(Reply(text="a + b"))
    done = client.completions.create(model="up-cmpl", prompt=PREFIX, suffix=SUFFIX,
                                     max_tokens=20, temperature=0.1, stop=["\n\n"])
    assert done.object == "text_completion"
    assert done.id.startswith("cmpl-")
    assert done.model == "up-cmpl"
    assert done.choices[0].text == "a + b"
    assert done.choices[0].finish_reason == "stop"
    sent = upstream.last
    assert sent.path == "/v1/completions"
    assert sent.body["prompt"] == PREFIX
    assert sent.body["suffix"] == SUFFIX
    assert sent.body["model"] == "coder"
    assert sent.body["max_tokens"] == 20
    assert sent.body["stop"] == ["\n\n"]
    assert sent.body["stream"] is True
    assert done.usage.completion_tokens == 3  # the upstream's own count
    assert done.usage.prompt_tokens == estimate_tokens(PREFIX)


@live
def test_completion_stream_with_usage(client, upstream):
    upstream.script(Reply(text="x * y + 1"))
    stream = client.completions.create(model="up-cmpl", prompt="z = ", stream=True,
                                       stream_options={"include_usage": True})
    text, finish, usage = stream_text(stream)
    assert (text, finish) == ("x * y + 1", "stop")
    assert usage.completion_tokens == 5
    assert "suffix" not in upstream.last.body


@live
def test_completion_on_a_chat_model_fills_the_middle(client, upstream):
    upstream.script(Reply(text="a + b"))
    done = client.completions.create(model="up-chat", prompt=PREFIX, suffix=SUFFIX)
    assert done.choices[0].text == "a + b"
    sent = upstream.last
    assert sent.path == "/v1/chat/completions"
    assert "tools" not in sent.body
    assert sent.body["messages"] == [
        {"role": "system", "content": FILL_INSTRUCTIONS},
        {"role": "user", "content": PREFIX + CURSOR + SUFFIX}]
    assert sent.body["max_tokens"] == 16  # the Completions API's default


@live
def test_completion_is_a_stored_turn_with_usage(client, gaia_server, api_key, upstream):
    upstream.script(Reply(text="a + b"))
    r = httpx.post(f"{gaia_server.v1}/completions", timeout=30,
                   headers={"Authorization": f"Bearer {api_key}"},
                   json={"model": "up-cmpl", "prompt": PREFIX, "suffix": SUFFIX, "echo": True})
    assert r.status_code == 200, r.text
    assert r.json()["choices"][0]["text"] == PREFIX + "a + b"  # echo
    thread = Thread.objects.get(pk=r.headers["x-gaia-thread-id"])
    rows = list(Message.objects.filter(thread=thread).order_by("seq"))
    assert [(m.role, m.dialect) for m in rows] == [("user", "completions"),
                                                  ("assistant", "completions")]
    assert rows[0].content == PREFIX + CURSOR + SUFFIX
    assert rows[1].content == "a + b"
    bucket = UsageBucket.objects.get(span=60, shape=UsageBucket.Shape.FULL,
                                     agent_id=thread.agent_id, key_id=thread.api_key_id)
    assert bucket.requests == 1
    assert bucket.output_tokens == 3


@live
def test_completion_on_the_embedded_local_model(client, make_agent):
    """The local kind completes raw text (SmolLM2 has no FIM tokens: the prompt alone)."""
    make_agent(slug="local-cmpl", provider__name="local-cmpl", provider__kind="local",
               provider__options={"temperature": 0})
    stream = client.completions.create(model="local-cmpl", prompt="1, 2, 3, 4,", max_tokens=6,
                                       suffix="\n", stream=True,
                                       stream_options={"include_usage": True})
    text, finish, usage = stream_text(stream)
    assert text.strip()
    assert finish in ("stop", "length")
    assert usage.prompt_tokens < 20  # the raw prompt, no chat template or instructions
    assert 1 <= usage.completion_tokens <= 6


@live
def test_completion_key_may_not_use_the_agent(gaia_server, make_key, upstream, make_agent):
    other = make_agent(slug="other-agent")
    _, secret = make_key("narrow", agents=[other])
    narrow = openai.OpenAI(base_url=gaia_server.v1, api_key=secret, max_retries=0)
    with pytest.raises(openai.PermissionDeniedError):
        narrow.completions.create(model="up-cmpl", prompt="x")
    ops = openai.OpenAI(base_url=gaia_server.v1, api_key=make_key(
        "ops", scopes=["operator"])[1], max_retries=0)
    with pytest.raises(openai.PermissionDeniedError):
        ops.completions.create(model="up-cmpl", prompt="x")
    assert not upstream.requests


BAD = [
    ({"prompt": ["one", "two"]}, "prompt"),
    ({"prompt": [1, 2, 3]}, "prompt"),
    ({"prompt": [[1, 2]]}, "prompt"),
    ({"prompt": {"a": 1}}, "prompt"),
    ({}, "prompt"),
    ({"prompt": ""}, "prompt"),
    ({"prompt": "x", "n": 2}, "n"),
    ({"prompt": "x", "best_of": 3}, "best_of"),
    ({"prompt": "x", "logprobs": 2}, "logprobs"),
    ({"prompt": "x", "logit_bias": {"50256": -100}}, "logit_bias"),
    ({"prompt": "x", "stop": ["a", "b", "c", "d", "e"]}, "stop"),
    ({"prompt": "x", "max_tokens": 0}, "max_tokens"),
    ({"prompt": "x", "suffix": 5}, "suffix"),
]


@live
def test_completion_bad_input_is_a_400(gaia_server, api_key, echo_agent):
    """Each malformed or unsupported field: 400 in OpenAI's envelope, naming it (one test:
    each case is one request)."""
    with httpx.Client(base_url=gaia_server.v1, timeout=30,
                      headers={"Authorization": f"Bearer {api_key}"}) as http:
        for body, param in BAD:
            r = http.post("/completions", json={"model": "echo", **body})
            assert r.status_code == 400, (body, r.text)
            error = r.json()["error"]
            assert error["type"] == "invalid_request_error", body
            assert error["param"] == param, (body, error)
        for raw in (b"{not json", b"[1, 2]", b'{"model": "echo", "prompt": "a\\u0000b"}'):
            r = http.post("/completions", content=raw,
                          headers={"Content-Type": "application/json"})
            assert r.status_code == 400, (raw, r.text)
            assert r.json()["error"]["type"] == "invalid_request_error"
    assert not Thread.objects.exists()


def test_fim_prompt_uses_the_models_fim_tokens():
    """A model with fill-in-the-middle tokens gets prefix and suffix around them; one
    without (SmolLM2) the prefix alone."""
    completion = Completion("def f():\n    ", "\n")
    assert fim_prompt(completion, ("<fim_prefix>", "<fim_suffix>", "<fim_middle>")) == (
        "<fim_prefix>def f():\n    <fim_suffix>\n<fim_middle>")
    assert fim_prompt(completion, None) == "def f():\n    "
