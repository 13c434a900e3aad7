"""The official OpenAI Python SDK as a client of a live Gaia: models, chat, errors."""

from __future__ import annotations

import openai
import pytest

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def client(gaia_server, api_key):
    return openai.OpenAI(base_url=gaia_server.v1, api_key=api_key, max_retries=0, timeout=30)


def test_sdk_models_list_and_retrieve(client, make_agent):
    make_agent(slug="sdk-a", display_name="SDK A")
    ids = [m.id for m in client.models.list()]
    assert "sdk-a" in ids
    model = client.models.retrieve("sdk-a")
    assert model.id == "sdk-a"
    assert model.owned_by == "gaia"


def test_sdk_chat_create(client, echo_agent):
    completion = client.chat.completions.create(
        model="echo", messages=[{"role": "user", "content": "hello sdk"}], seed=1,
        temperature=0.2)
    assert completion.choices[0].message.content == "hello sdk"
    assert completion.choices[0].finish_reason == "stop"
    assert completion.usage.completion_tokens == 2


def test_sdk_chat_stream(client, echo_agent):
    stream = client.chat.completions.create(
        model="echo", messages=[{"role": "user", "content": "stream me now"}], stream=True,
        stream_options={"include_usage": True})
    text, usage, finish = "", None, None
    for chunk in stream:
        if chunk.usage:
            usage = chunk.usage
        for choice in chunk.choices:
            text += choice.delta.content or ""
            finish = choice.finish_reason or finish
    assert text == "stream me now"
    assert finish == "stop"
    assert usage.completion_tokens == 3


def test_sdk_stream_helper(client, echo_agent):
    with client.chat.completions.stream(
        model="echo", messages=[{"role": "user", "content": "helper works"}]
    ) as stream:
        deltas = [e.delta for e in stream if e.type == "content.delta"]
        final = stream.get_final_completion()
    assert "".join(deltas) == "helper works"
    assert final.choices[0].message.content == "helper works"


def test_sdk_error_classes(gaia_server, echo_agent):
    bad = openai.OpenAI(base_url=gaia_server.v1, api_key="gaia_00000000_wrong", max_retries=0)
    with pytest.raises(openai.AuthenticationError) as exc:
        bad.chat.completions.create(model="echo", messages=[{"role": "user", "content": "x"}])
    assert exc.value.code == "invalid_api_key"


def test_sdk_not_found_and_bad_request(client, echo_agent):
    with pytest.raises(openai.NotFoundError) as exc:
        client.chat.completions.create(model="missing", messages=[{"role": "user", "content": "x"}])
    assert exc.value.param == "model"
    with pytest.raises(openai.BadRequestError) as exc:
        client.chat.completions.create(model="echo", messages=[{"role": "system", "content": "x"}])
    assert exc.value.param == "messages"
