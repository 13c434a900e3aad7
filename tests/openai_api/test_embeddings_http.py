"""``POST /v1/embeddings`` against a live Gaia with the official OpenAI SDK: the embedded
default (the ``local`` kind's package-shipped model, offline), pass-through to an ``openai``
upstream's embedding model, keys, bad input, usage and the feed."""

from __future__ import annotations

import math
from typing import Any

import httpx
import openai
import pytest

from agents.models import UsageBucket
from tests.fakes import Fail
from tests.fakes.openai_upstream import FakeOpenAIUpstream

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.timeout(60)]


@pytest.fixture
def client(gaia_server: Any, api_key: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=gaia_server.v1, api_key=api_key, max_retries=0, timeout=30)


@pytest.fixture
def local_agent(make_agent: Any) -> Any:
    return make_agent(slug="emb-local", provider__name="emb-local", provider__kind="local",
                      provider__options={})


@pytest.fixture
def upstream(make_agent: Any) -> Any:
    """``emb-up``: an openai provider with an embedding model; ``chat-up``: one without."""
    with FakeOpenAIUpstream() as up:
        make_agent(slug="emb-up", provider__name="emb-up", provider__kind="openai",
                   provider__base_url=up.base_url,
                   provider__options={"embedding_model": "text-embedding-3-small"})
        make_agent(slug="chat-up", provider__name="chat-up", provider__kind="openai",
                   provider__base_url=up.base_url, provider__options={})
        yield up


def cosine(a: list[float], b: list[float]) -> float:
    return sum(x * y for x, y in zip(a, b, strict=True)) / (
        math.sqrt(sum(x * x for x in a)) * math.sqrt(sum(y * y for y in b)))


def test_embedded_default_embeds_offline(client, local_agent):
    texts = ["The cat sat on the mat.", "A cat was sitting on a mat.",
             "Quarterly revenue grew by four percent."]
    # the SDK asks for base64 by default and decodes it
    result = client.embeddings.create(model="emb-local", input=texts)
    vectors = [d.embedding for d in result.data]
    assert [d.index for d in result.data] == [0, 1, 2]
    assert all(len(v) == 256 for v in vectors)
    assert abs(math.sqrt(sum(x * x for x in vectors[0])) - 1) < 1e-4
    assert cosine(vectors[0], vectors[1]) > cosine(vectors[0], vectors[2])
    assert result.model == "emb-local"
    assert 10 <= result.usage.prompt_tokens == result.usage.total_tokens
    floats = client.embeddings.create(model="emb-local", input=texts[0],
                                      encoding_format="float", dimensions=64)
    short = floats.data[0].embedding
    assert len(short) == 64
    assert cosine(short, vectors[0][:64]) > 0.9999


def test_embeddings_counted_in_usage_and_on_the_feed(gaia_server, make_key, local_agent,
                                                     request):
    key, secret = make_key("emb")
    r = httpx.post(f"{gaia_server.v1}/embeddings", timeout=30,
                   headers={"Authorization": f"Bearer {secret}"},
                   json={"model": "emb-local", "input": ["one two three", "four"]})
    assert r.status_code == 200, r.text
    tokens = r.json()["usage"]["prompt_tokens"]
    bucket = UsageBucket.objects.get(span=60, shape=UsageBucket.Shape.FULL,
                                     agent_id=local_agent.pk, key_id=key.pk)
    assert (bucket.requests, bucket.input_tokens, bucket.output_tokens) == (1, tokens, 0)
    assert bucket.model == "wordllama-l2-supercat"


def test_the_feed_hears_of_embeddings(gaia_server, api_key, local_agent, feed_listener):
    r = httpx.post(f"{gaia_server.v1}/embeddings", timeout=30,
                   headers={"Authorization": f"Bearer {api_key}"},
                   json={"model": "emb-local", "input": "hello feed"})
    assert r.status_code == 200, r.text
    event = feed_listener.wait_for(lambda e: e["event"] == "embeddings"
                                   and e["agent"] == "emb-local")
    assert event["inputs"] == 1
    assert event["error"] == ""
    assert event["input_tokens"] == r.json()["usage"]["prompt_tokens"]


def test_embeddings_pass_through_to_the_upstream(client, upstream):
    result = client.embeddings.create(model="emb-up", input=["abc", "defgh"], dimensions=4,
                                      encoding_format="float")
    assert [d.embedding for d in result.data] == [[3.0, 0.0, 0.5, 0.0], [5.0, 1.0, 0.5, 0.0]]
    assert result.usage.prompt_tokens == 2
    sent = upstream.last
    assert sent.path == "/v1/embeddings"
    assert sent.body == {"model": "text-embedding-3-small", "input": ["abc", "defgh"],
                         "encoding_format": "float", "dimensions": 4}
    # base64, decoded by the SDK
    again = client.embeddings.create(model="emb-up", input="abc")
    assert again.data[0].embedding == [3.0, 0.0, 0.5]


def test_upstream_embedding_error_is_the_providers(client, upstream):
    upstream.script(Fail(503, "upstream down"))
    with pytest.raises(openai.APIStatusError) as caught:
        client.embeddings.create(model="emb-up", input="x")
    assert caught.value.status_code == 502


def test_embeddings_key_denied(gaia_server, make_key, make_agent, local_agent):
    _, secret = make_key("narrow", agents=[make_agent(slug="elsewhere")])
    with pytest.raises(openai.PermissionDeniedError):
        openai.OpenAI(base_url=gaia_server.v1, api_key=secret, max_retries=0
                      ).embeddings.create(model="emb-local", input="x")
    with pytest.raises(openai.AuthenticationError):
        openai.OpenAI(base_url=gaia_server.v1, api_key="gaia-wrong", max_retries=0
                      ).embeddings.create(model="emb-local", input="x")


BAD = [
    ({}, "input"),
    ({"input": ""}, "input"),
    ({"input": ["a", ""]}, "input[1]"),
    ({"input": [1, 2, 3]}, "input"),
    ({"input": [[1, 2]]}, "input"),
    ({"input": {"text": "a"}}, "input"),
    ({"input": "a" * 40000}, "input"),
    ({"input": ["a"] * 3000}, "input"),
    ({"input": "a", "encoding_format": "int8"}, "encoding_format"),
    ({"input": "a", "dimensions": 0}, "dimensions"),
    ({"input": "a", "dimensions": "64"}, "dimensions"),
    ({"input": "a", "dimensions": 512}, "dimensions"),
]


def test_embeddings_bad_input_is_a_400(gaia_server, api_key, local_agent):
    """Each malformed, oversized or unsupported field: 400 in OpenAI's envelope, naming it,
    before any work (one test: each case is one request)."""
    with httpx.Client(base_url=gaia_server.v1, timeout=30,
                      headers={"Authorization": f"Bearer {api_key}"}) as http:
        for body, param in BAD:
            r = http.post("/embeddings", json={"model": "emb-local", **body})
            assert r.status_code == 400, (body, r.text)
            error = r.json()["error"]
            assert error["type"] == "invalid_request_error", body
            assert error["param"] == param, (body, error)
        for raw in (b"{not json", b"[1, 2]", b'{"model": "emb-local", "input": "a\\u0000b"}'):
            r = http.post("/embeddings", content=raw,
                          headers={"Content-Type": "application/json"})
            assert r.status_code == 400, (raw, r.text)
            assert r.json()["error"]["type"] == "invalid_request_error"
    assert not UsageBucket.objects.exists()


def test_models_say_which_embed_and_others_answer_400(client, local_agent, upstream):
    listed = {m.id: m for m in client.models.list()}
    assert listed["emb-local"].gaia["embeddings"] == "wordllama-l2-supercat"
    assert listed["emb-up"].gaia["embeddings"] == "text-embedding-3-small"
    assert "embeddings" not in listed["chat-up"].gaia
    with pytest.raises(openai.BadRequestError) as caught:
        client.embeddings.create(model="chat-up", input="x")
    assert caught.value.body["code"] == "embeddings_not_supported"
    with pytest.raises(openai.BadRequestError):
        client.embeddings.create(model="auto", input="x")
    assert not upstream.requests
