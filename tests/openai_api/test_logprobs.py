"""Log probabilities over real HTTP with the official OpenAI SDK: from the embedded model
(llama.cpp computes them) and from an OpenAI-compatible upstream that returns them, in Chat
Completions' shape (``logprobs.content``, JSON and streamed) and the Responses API's
(``output_text.logprobs`` with ``include``). The Messages API has no such field; a provider
that cannot give them is a 400 (tests/openai_api/test_clients_compat.py)."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import openai
import pytest
import yaml

from agents.services import agents_import
from tests.fakes import Reply
from tests.fakes.openai_upstream import FakeOpenAIUpstream, token_logprob

pytestmark = pytest.mark.django_db(transaction=True)

DEFAULTS = Path(__file__).resolve().parents[2] / "agents" / "defaults.yaml"
QUESTION = "What is the capital of France?"


@pytest.fixture
def default_agents(transactional_db: Any) -> None:
    agents_import(data=yaml.safe_load(DEFAULTS.read_text()))


def client(server: Any, key: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=server.v1, api_key=key, max_retries=0, timeout=180)


def check_tokens(tokens: list[Any], top: int) -> None:
    """Log probabilities are probabilities' logs; alternatives come best first."""
    assert tokens
    for t in tokens:
        assert t.logprob <= 0
        assert math.isfinite(t.logprob)
        assert bytes(t.bytes).decode("utf-8", "replace") == t.token
        assert len(t.top_logprobs) == top
        alternatives = [a.logprob for a in t.top_logprobs]
        assert alternatives == sorted(alternatives, reverse=True)
        if top:  # the best alternative is at least as likely as any token
            assert t.logprob <= alternatives[0] + 1e-6


def test_the_embedded_model_gives_logprobs_over_chat(gaia_server, default_agents, api_key):
    done = client(gaia_server, api_key).chat.completions.create(
        model="gaia", max_tokens=16, logprobs=True, top_logprobs=3,
        messages=[{"role": "user", "content": QUESTION}])
    choice = done.choices[0]
    tokens = choice.logprobs.content
    check_tokens(tokens, 3)
    assert "".join(t.token for t in tokens).strip() == choice.message.content.strip()


def test_the_embedded_model_streams_logprobs(gaia_server, default_agents, api_key):
    stream = client(gaia_server, api_key).chat.completions.create(
        model="gaia", max_tokens=16, logprobs=True, stream=True,
        messages=[{"role": "user", "content": QUESTION}])
    text, tokens = [], []
    for chunk in stream:
        for choice in chunk.choices:
            text.append(choice.delta.content or "")
            if choice.logprobs is not None:
                tokens.extend(choice.logprobs.content or [])
    check_tokens(tokens, 0)
    assert "".join(t.token for t in tokens).strip() == "".join(text).strip()


def test_the_embedded_model_gives_logprobs_over_responses(gaia_server, default_agents,
                                                          api_key):
    reply = client(gaia_server, api_key).responses.create(
        model="gaia", max_output_tokens=16, input=QUESTION, top_logprobs=2,
        include=["message.output_text.logprobs"])
    part = reply.output[-1].content[0]
    check_tokens(part.logprobs, 2)
    assert "".join(t.token for t in part.logprobs).strip() == part.text.strip()


def test_without_asking_there_are_none(gaia_server, default_agents, api_key):
    done = client(gaia_server, api_key).chat.completions.create(
        model="gaia", max_tokens=4, messages=[{"role": "user", "content": QUESTION}])
    assert done.choices[0].logprobs is None


def expected(text: str, top: int) -> list[dict[str, Any]]:
    """What the fake upstream says of its reply ``text`` (tests.fakes.openai_upstream)."""
    from tests.fakes import split_tokens

    return [token_logprob(i, t, {"top_logprobs": top}) for i, t in enumerate(split_tokens(text))]


@pytest.mark.parametrize("stream", [False, True], ids=["json", "sse"])
def test_an_upstreams_logprobs_come_back_over_chat(gaia_server, make_agent, api_key, stream):
    with FakeOpenAIUpstream() as up:
        up.script(Reply(text="Paris is the capital"))
        make_agent(slug="fwd", provider__kind="openai", provider__base_url=up.base_url,
                   provider__options={})
        done = client(gaia_server, api_key).chat.completions.create(
            model="fwd", logprobs=True, top_logprobs=2, stream=stream,
            messages=[{"role": "user", "content": QUESTION}])
        if stream:
            got = [t.model_dump() for chunk in done for c in chunk.choices
                   if c.logprobs is not None for t in c.logprobs.content or []]
        else:
            got = [t.model_dump() for t in done.choices[0].logprobs.content]
        sent = up.last.body
    assert (sent["logprobs"], sent["top_logprobs"]) == (True, 2)
    assert got == expected("Paris is the capital", 2)


@pytest.mark.parametrize("stream", [False, True], ids=["json", "sse"])
def test_an_upstreams_logprobs_come_back_over_responses(gaia_server, make_agent, api_key,
                                                        stream):
    with FakeOpenAIUpstream() as up:
        up.script(Reply(text="Paris is the capital"))
        make_agent(slug="fwd", provider__kind="openai", provider__base_url=up.base_url,
                   provider__options={})
        kwargs = {"model": "fwd", "input": QUESTION, "include": ["message.output_text.logprobs"]}
        api = client(gaia_server, api_key).responses
        if stream:
            deltas, done_text = [], None
            for event in api.create(stream=True, **kwargs):
                if event.type == "response.output_text.delta":
                    deltas.extend(t.model_dump() for t in event.logprobs)
                elif event.type == "response.completed":
                    done_text = event.response.output[-1].content[0]
            got = [{k: v for k, v in d.items() if v is not None} for d in deltas]
            final = done_text
        else:
            final = api.create(**kwargs).output[-1].content[0]
            got = None
        sent = up.last.body
    assert sent["logprobs"] is True
    assert "top_logprobs" not in sent
    want = expected("Paris is the capital", 0)
    assert [t.model_dump() for t in final.logprobs] == want
    if got is not None:
        assert [t["token"] for t in got] == [t["token"] for t in want]
        assert [t["logprob"] for t in got] == [t["logprob"] for t in want]
