"""One core under three dialects: a thread continues across dialects, images to a text-only
provider are refused in each dialect's envelope, and the agent's own steps stay on each
dialect's reasoning channel."""

from __future__ import annotations

import base64
import re
from typing import Any

import httpx
import pytest

from agents.models import Thread
from tests.sse import parse_sse

pytestmark = pytest.mark.django_db(transaction=True)

PNG = "data:image/png;base64," + base64.b64encode(b"\x89PNG\r\n\x1a\n" + b"\0" * 16).decode()


def post(server: Any, key: str, path: str, body: dict[str, Any], **headers: str
         ) -> httpx.Response:
    return httpx.post(server.v1 + path, json=body, timeout=30,
                      headers={"Authorization": f"Bearer {key}", **headers})


def test_thread_continues_from_chat_to_responses_to_messages(gaia_server, echo_agent, api_key):
    r1 = post(gaia_server, api_key, "/chat/completions", {
        "model": "echo", "messages": [{"role": "user", "content": "first"}]})
    assert r1.status_code == 200, r1.text
    chat_id = r1.json()["id"]
    # Responses continues the stored thread from the Chat Completions reply's id.
    r2 = post(gaia_server, api_key, "/responses", {
        "model": "echo", "previous_response_id": chat_id, "input": "second"})
    assert r2.status_code == 200, r2.text
    assert r2.headers["x-gaia-thread-id"] == r1.headers["x-gaia-thread-id"]
    # A Responses follow-up chains on the Responses id too.
    r3 = post(gaia_server, api_key, "/responses", {
        "model": "echo", "previous_response_id": r2.json()["id"],
        "input": [{"role": "user", "content": [{"type": "input_text", "text": "third"}]}]})
    assert r3.headers["x-gaia-thread-id"] == r1.headers["x-gaia-thread-id"]
    # Messages clients resend the whole history: it is recognised as the same thread.
    history = []
    for text in ("first", "second", "third"):
        history += [{"role": "user", "content": text},
                    {"role": "assistant", "content": [{"type": "text", "text": text}]}]
    r4 = post(gaia_server, api_key, "/messages", {
        "model": "echo", "max_tokens": 50,
        "messages": [*history, {"role": "user", "content": "fourth"}]},
        **{"anthropic-version": "2023-06-01"})
    assert r4.status_code == 200, r4.text
    assert r4.json()["content"][0]["text"] == "fourth"
    assert r4.headers["x-gaia-thread-id"] == r1.headers["x-gaia-thread-id"]
    assert Thread.objects.count() == 1
    thread = Thread.objects.get()
    rows = list(thread.messages.order_by("seq"))
    assert [(m.role, m.content) for m in rows] == [
        ("user", "first"), ("assistant", "first"), ("user", "second"), ("assistant", "second"),
        ("user", "third"), ("assistant", "third"), ("user", "fourth"), ("assistant", "fourth")]
    assert [m.dialect for m in rows] == ["chat"] * 2 + ["responses"] * 4 + ["messages"] * 2
    assert thread.message_count == 8


def test_messages_continue_a_thread_statefully_by_header(gaia_server, make_agent, api_key):
    make_agent(slug="sys", instructions="", provider__options={"reply": "ok"})
    r1 = post(gaia_server, api_key, "/responses", {"model": "sys", "input": "one"})
    thread_id = r1.headers["x-gaia-thread-id"]
    r2 = post(gaia_server, api_key, "/messages", {
        "model": "sys", "max_tokens": 5, "messages": [{"role": "user", "content": "two"}]},
        **{"x-gaia-thread-id": thread_id})
    assert r2.headers["x-gaia-thread-id"] == thread_id
    assert [m.content for m in Thread.objects.get(pk=thread_id).messages.order_by("seq")] == [
        "one", "ok", "two", "ok"]


def test_unknown_previous_response_id_is_404(gaia_server, echo_agent, api_key, make_key):
    r = post(gaia_server, api_key, "/responses",
             {"model": "echo", "previous_response_id": "resp_missing", "input": "x"})
    assert r.status_code == 404
    assert r.json()["error"]["param"] == "previous_response_id"
    assert r.json()["error"]["code"] == "previous_response_not_found"
    # Another key's response is not visible either.
    mine = post(gaia_server, api_key, "/responses", {"model": "echo", "input": "x"}).json()["id"]
    _, other = make_key(name="other")
    r = post(gaia_server, other, "/responses",
             {"model": "echo", "previous_response_id": mine, "input": "y"})
    assert r.status_code == 404
    assert httpx.get(gaia_server.v1 + f"/responses/{mine}",
                     headers={"Authorization": f"Bearer {other}"}).status_code == 404


# -- images to a text-only provider -----------------------------------------------------------


@pytest.mark.parametrize(("path", "body", "param"), [
    ("/chat/completions", {"messages": [{"role": "user", "content": [
        {"type": "text", "text": "what is this?"},
        {"type": "image_url", "image_url": {"url": PNG}}]}]}, "messages"),
    ("/responses", {"input": [{"role": "user", "content": [
        {"type": "input_text", "text": "what is this?"},
        {"type": "input_image", "image_url": "https://example.com/cat.png"}]}]}, "input"),
    ("/messages", {"max_tokens": 10, "messages": [{"role": "user", "content": [
        {"type": "text", "text": "what is this?"},
        {"type": "image", "source": {"type": "base64", "media_type": "image/png",
                                     "data": PNG.split(",")[1]}}]}]}, None),
])
@pytest.mark.parametrize("stream", [False, True])
def test_images_to_text_only_provider_are_400(gaia_server, make_agent, api_key, path, body,
                                              param, stream):
    make_agent(slug="textonly", provider__kind="openai", provider__name="text-only",
               provider__base_url="http://127.0.0.1:9/v1", provider__options={"images": False})
    r = post(gaia_server, api_key, path, {"model": "textonly", "stream": stream, **body})
    assert r.status_code == 400, r.text
    error = r.json()["error"]
    assert "image" in error["message"]
    if path == "/messages":
        assert r.json()["type"] == "error"
        assert error["type"] == "invalid_request_error"
    else:
        assert error["code"] == "images_not_supported"
        assert error["param"] == param


@pytest.mark.parametrize(("path", "body"), [
    ("/chat/completions", {"messages": [{"role": "user", "content": [
        {"type": "text", "text": "see"}, {"type": "image_url", "image_url": {"url": PNG}}]}]}),
    ("/responses", {"input": [{"role": "user", "content": [
        {"type": "input_text", "text": "see"}, {"type": "input_image", "image_url": PNG}]}]}),
    ("/messages", {"max_tokens": 10, "messages": [{"role": "user", "content": [
        {"type": "text", "text": "see"},
        {"type": "image", "source": {"type": "url", "url": "https://example.com/a.png"}}]}]}),
])
def test_images_reach_providers_that_accept_them(gaia_server, echo_agent, api_key, path, body):
    r = post(gaia_server, api_key, path, {"model": "echo", **body})
    assert r.status_code == 200, r.text
    thread = Thread.objects.get(pk=r.headers["x-gaia-thread-id"])
    assert thread.messages.get(role="user").parts  # stored with the message


# -- the agent's own steps on the reasoning channel -------------------------------------------


@pytest.fixture
def reasoner(make_agent) -> Any:
    return make_agent(slug="reasoner", provider__options={
        "reasoning": "Ran the search tool.", "reply": "The answer."})


def _ask(server: Any, key: str, path: str, stream: bool) -> httpx.Response:
    body: dict[str, Any] = {"model": "reasoner", "stream": stream}
    if path == "/responses":
        body["input"] = "question"
    else:
        body["messages"] = [{"role": "user", "content": "question"}]
    if path == "/messages":
        body["max_tokens"] = 50
    r = post(server, key, path, body)
    assert r.status_code == 200, r.text
    return r


def test_reasoning_channel_chat(gaia_server, reasoner, api_key):
    message = _ask(gaia_server, api_key, "/chat/completions", False).json()["choices"][0][
        "message"]
    assert message["content"] == "The answer."
    assert message["reasoning_content"] == "Ran the search tool."
    chunks = parse_sse(_ask(gaia_server, api_key, "/chat/completions", True).text)
    deltas = [c["choices"][0]["delta"] for c in chunks.json_payloads() if c["choices"]]
    assert "".join(d.get("content") or "" for d in deltas) == "The answer."
    assert "".join(d.get("reasoning_content") or "" for d in deltas) == "Ran the search tool."


def test_reasoning_channel_responses(gaia_server, reasoner, api_key):
    body = _ask(gaia_server, api_key, "/responses", False).json()
    assert [o["type"] for o in body["output"]] == ["reasoning", "message"]
    assert body["output"][0]["summary"] == [{"type": "summary_text",
                                             "text": "Ran the search tool."}]
    assert body["output"][1]["content"][0]["text"] == "The answer."
    events = parse_sse(_ask(gaia_server, api_key, "/responses", True).text).json_payloads()
    text = "".join(e["delta"] for e in events if e["type"] == "response.output_text.delta")
    steps = "".join(e["delta"] for e in events
                    if e["type"] == "response.reasoning_summary_text.delta")
    assert (text, steps) == ("The answer.", "Ran the search tool.")
    final = events[-1]["response"]
    assert [o["type"] for o in final["output"]] == ["reasoning", "message"]


def test_reasoning_channel_messages(gaia_server, reasoner, api_key):
    """Thinking blocks are signed, as Anthropic's are (a client such as pi sends an unsigned
    one back as text, which forked the thread); streamed, the signature comes last."""
    body = _ask(gaia_server, api_key, "/messages", False).json()
    signature = body["content"][0].get("signature", "")
    assert re.fullmatch("[0-9a-f]{64}", signature)  # an HMAC under the server's secret key
    assert body["content"] == [
        {"type": "thinking", "thinking": "Ran the search tool.", "signature": signature},
        {"type": "text", "text": "The answer."}]
    events = parse_sse(_ask(gaia_server, api_key, "/messages", True).text).json_payloads()
    starts = [e["content_block"]["type"] for e in events if e["type"] == "content_block_start"]
    assert starts == ["thinking", "text"]
    deltas = [e["delta"] for e in events if e["type"] == "content_block_delta"]
    assert "".join(d.get("thinking", "") for d in deltas) == "Ran the search tool."
    assert "".join(d.get("text", "") for d in deltas) == "The answer."
    signed = [d for d in deltas if d["type"] == "signature_delta"]
    assert signed == [{"type": "signature_delta", "signature": signature}]
    kinds = [d["type"] for d in deltas]  # the thinking block's last delta
    assert kinds.index("signature_delta") == kinds.index("text_delta") - 1
    assert "thinking_delta" not in kinds[kinds.index("signature_delta"):]


def test_reasoning_is_not_stored_as_the_assistants_words(gaia_server, reasoner, api_key):
    r = _ask(gaia_server, api_key, "/messages", False)
    reply = Thread.objects.get(pk=r.headers["x-gaia-thread-id"]).messages.get(role="assistant")
    assert reply.content == "The answer."
    assert reply.reasoning == "Ran the search tool."


def test_previous_response_id_of_an_older_reply_branches(gaia_server, echo_agent, api_key):
    first = post(gaia_server, api_key, "/responses", {"model": "echo", "input": "one"})
    r2 = post(gaia_server, api_key, "/responses", {"model": "echo", "input": "two",
                                     "previous_response_id": first.json()["id"]})
    # Again from the first reply (a retry, or a branch): not appended after "two".
    r3 = post(gaia_server, api_key, "/responses", {"model": "echo", "input": "deux",
                                     "previous_response_id": first.json()["id"]})
    assert r3.status_code == 200, r3.text
    main = Thread.objects.get(pk=first.headers["x-gaia-thread-id"])
    assert r2.headers["x-gaia-thread-id"] == str(main.pk)
    branch = Thread.objects.get(pk=r3.headers["x-gaia-thread-id"])
    assert branch.pk != main.pk
    assert branch.forked_from_id == main.pk
    assert [m.content for m in main.messages.order_by("seq")] == ["one", "one", "two", "two"]
    assert [m.content for m in branch.messages.order_by("seq")] == ["one", "one", "deux", "deux"]
