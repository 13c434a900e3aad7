"""Gaia served by daphne (``gaia api start --server daphne``, the CLI itself): the three
``/v1`` dialects, as JSON and as streams, through the official OpenAI and Anthropic SDKs, and
the operator feed (``/ws``): the ``connected`` snapshot, then a chat's ``message`` events."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable, Iterator
from typing import Any

import anthropic
import httpx
import openai
import pytest
import websockets

from agents.models import ApiKey
from tests.conftest import GaiaServer, start_gaia

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.timeout(120)]

REPLY = "served by daphne today"


@pytest.fixture(scope="module")
def daphne(django_db_setup: Any, tmp_path_factory: pytest.TempPathFactory
           ) -> Iterator[GaiaServer]:
    """One daphne-served Gaia for the module (starting one takes seconds)."""
    server = start_gaia(tmp_path_factory.mktemp("gaia-daphne"), {"GAIA_KEEPALIVE_SECONDS": "1"},
                        server="daphne")
    try:
        # the process that answers is daphne (the CLI exec'd it), not uvicorn
        assert httpx.get(server.url + "/health").headers.get("server") == "daphne"
        yield server
    finally:
        server.stop()


@pytest.fixture
def agent(make_agent: Callable[..., Any]) -> Any:
    return make_agent(slug="echo", provider__options={"reply": REPLY})


def test_the_three_dialects_answer_under_daphne(daphne, agent, api_key):
    client = openai.OpenAI(base_url=daphne.v1, api_key=api_key, max_retries=0, timeout=30)
    ask = [{"role": "user", "content": "hi"}]
    chat = client.chat.completions.create(model="echo", messages=ask)
    assert chat.choices[0].message.content == REPLY
    assert chat.choices[0].finish_reason == "stop"
    chunks = list(client.chat.completions.create(
        model="echo", messages=ask, stream=True, stream_options={"include_usage": True}))
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == REPLY
    assert chunks[-1].usage is not None
    assert chunks[-1].usage.completion_tokens > 0

    response = client.responses.create(model="echo", input="hi")
    assert response.status == "completed"
    assert response.output_text == REPLY
    events = list(client.responses.create(model="echo", input="hi", stream=True))
    assert events[-1].type == "response.completed"
    assert "".join(e.delta for e in events if e.type == "response.output_text.delta") == REPLY

    claude = anthropic.Anthropic(base_url=daphne.url, api_key=api_key, max_retries=0,
                                 timeout=30)
    message = claude.messages.create(model="echo", max_tokens=64, messages=ask)
    assert message.stop_reason == "end_turn"
    assert "".join(b.text for b in message.content if b.type == "text") == REPLY
    with claude.messages.stream(model="echo", max_tokens=64, messages=ask) as stream:
        text = "".join(stream.text_stream)
        final = stream.get_final_message()
    assert text == REPLY
    assert final.stop_reason == "end_turn"


def test_a_bad_request_gets_the_dialects_error_under_daphne(daphne, agent, api_key):
    claude = anthropic.Anthropic(base_url=daphne.url, api_key=api_key, max_retries=0)
    with pytest.raises(anthropic.BadRequestError) as err:
        claude.messages.create(model="echo", max_tokens=64, messages=[])
    assert err.value.body["type"] == "error"


@pytest.fixture
def keys(make_key: Callable[..., tuple[Any, str]]) -> tuple[str, str]:
    """(chat key, operator key)."""
    return make_key("client")[1], make_key("ops", scopes=[ApiKey.Scope.OPERATOR])[1]


async def test_the_feed_works_under_daphne(daphne, agent, keys):
    chat_key, ops_key = keys
    ws_url = daphne.url.replace("http://", "ws://") + "/ws"
    async with websockets.connect(
            ws_url, additional_headers={"Authorization": f"Bearer {ops_key}"}) as ws:
        hello = json.loads(await asyncio.wait_for(ws.recv(), 10))
        assert hello["event"] == "connected"
        assert "echo" in [a["slug"] for a in hello["agents"]]
        async with httpx.AsyncClient(timeout=30) as http:
            r = await http.post(daphne.v1 + "/chat/completions",
                                headers={"Authorization": f"Bearer {chat_key}"},
                                json={"model": "echo",
                                      "messages": [{"role": "user", "content": "hi"}]})
        assert r.status_code == 200
        thread_id = r.headers["x-gaia-thread-id"]
        seen: list[dict[str, Any]] = []
        async with asyncio.timeout(20):
            while not (seen and seen[-1]["event"] == "message"
                       and seen[-1]["message"]["role"] == "assistant"):
                seen.append(json.loads(await ws.recv()))
    messages = [e["message"] for e in seen if e["event"] == "message"]
    assert [m["role"] for m in messages] == ["user", "assistant"]
    assert {m["thread_id"] for m in messages} == {thread_id}
    assert messages[-1]["payload"]["content"] == REPLY
