"""The Conversations API (``/v1/conversations``) with the official OpenAI SDK against a live
Gaia, its turns through ``/v1/responses`` with ``conversation``, and its bad input over
plain HTTP."""

from __future__ import annotations

from typing import Any

import httpx
import openai
import pytest
from openai.types.conversations import (
    Conversation,
    ConversationDeletedResource,
    ConversationItemList,
)

from agents.models import Conversation as ConversationRow
from agents.models import Message, Thread

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def client(gaia_server, api_key):
    return openai.OpenAI(base_url=gaia_server.v1, api_key=api_key, max_retries=0, timeout=30)


def _user(text: str) -> dict[str, Any]:
    return {"type": "message", "role": "user", "content": [{"type": "input_text", "text": text}]}


def test_conversation_create_retrieve_update_delete(client, echo_agent):
    conv = client.conversations.create(metadata={"topic": "demo"},
                                       items=[_user("hello there")])
    assert conv.id.startswith("conv_")
    assert conv.object == "conversation"
    assert conv.metadata == {"topic": "demo"}
    Conversation.model_validate(conv.model_dump())

    got = client.conversations.retrieve(conv.id)
    assert (got.id, got.created_at, got.metadata) == (conv.id, conv.created_at, conv.metadata)

    updated = client.conversations.update(conv.id, metadata={"topic": "changed", "x": "y"})
    assert updated.metadata == {"topic": "changed", "x": "y"}
    assert client.conversations.retrieve(conv.id).metadata == {"topic": "changed", "x": "y"}

    # a Gaia thread, seen by operators like any other
    thread = Thread.objects.get(conversation__id=conv.id)
    assert thread.agent.slug == "echo"
    assert thread.title == "hello there"
    assert [(m.role, m.content) for m in thread.messages.order_by("seq")] == [
        ("user", "hello there")]

    deleted = client.conversations.delete(conv.id)
    ConversationDeletedResource.model_validate(deleted.model_dump())
    assert (deleted.id, deleted.deleted, deleted.object) == (conv.id, True,
                                                             "conversation.deleted")
    with pytest.raises(openai.NotFoundError) as exc:
        client.conversations.retrieve(conv.id)
    assert exc.value.body["code"] == "conversation_not_found"
    assert Thread.objects.filter(pk=thread.pk).exists()  # the record stays


def test_conversation_items_create_list_retrieve_delete(client, echo_agent):
    conv = client.conversations.create()
    added = client.conversations.items.create(conv.id, items=[
        _user("first"),
        {"type": "message", "role": "assistant", "content": "an answer"},
        {"type": "message", "role": "developer", "content": "be brief"},
        {"type": "function_call", "call_id": "call_1", "name": "lookup",
         "arguments": "{\"q\": 1}"},
        {"type": "function_call_output", "call_id": "call_1", "output": "42"},
    ])
    ConversationItemList.model_validate(added.model_dump())
    kinds = [(i.type, getattr(i, "role", None)) for i in added.data]
    assert kinds == [("message", "user"), ("message", "assistant"), ("message", "system"),
                     ("function_call", None), ("function_call_output", None)]
    assert added.data[0].content[0].text == "first"
    assert added.data[3].name == "lookup"
    assert added.data[3].call_id == "call_1"
    assert added.data[4].output == "42"
    ids = [i.id for i in added.data]
    assert len(set(ids)) == 5
    assert ids[0].startswith("msg_")

    listed = client.conversations.items.list(conv.id, order="asc")
    assert [i.id for i in listed.data] == ids
    newest_first = client.conversations.items.list(conv.id)  # desc by default
    assert [i.id for i in newest_first.data] == ids[::-1]

    # paged: two at a time, asc and desc, every item once
    page = client.conversations.items.list(conv.id, order="asc", limit=2)
    assert [i.id for i in page.data] == ids[:2]
    assert page.has_more
    seen = [i.id for i in client.conversations.items.list(conv.id, order="asc", limit=2)]
    assert seen == ids  # the SDK follows ``after`` across pages
    seen = [i.id for i in client.conversations.items.list(conv.id, order="desc", limit=2)]
    assert seen == ids[::-1]
    after = client.conversations.items.list(conv.id, order="asc", after=ids[1], limit=2)
    assert [i.id for i in after.data] == ids[2:4]

    item = client.conversations.items.retrieve(ids[3], conversation_id=conv.id)
    assert item.type == "function_call"
    assert item.id == ids[3]

    back = client.conversations.items.delete(ids[0], conversation_id=conv.id)
    assert back.id == conv.id
    assert back.object == "conversation"
    assert [i.id for i in client.conversations.items.list(conv.id, order="asc")] == ids[1:]
    with pytest.raises(openai.NotFoundError):
        client.conversations.items.retrieve(ids[0], conversation_id=conv.id)


def test_responses_turn_in_a_conversation_uses_its_items(client, make_agent):
    make_agent(slug="talker", provider__options={})
    conv = client.conversations.create(items=[_user("my name is Ada")])
    first = client.responses.create(model="talker", input="what is my name",
                                    conversation=conv.id)
    assert first.output_text == "what is my name"
    assert first.conversation is not None
    assert first.conversation.id == conv.id
    # the stored items were the context: as many input tokens as the whole history sent
    stateless = client.responses.create(model="talker", input=[
        _user("my name is Ada"), _user("what is my name")])
    assert first.usage.input_tokens == stateless.usage.input_tokens

    second = client.responses.create(model="talker", input="and again",
                                     conversation={"id": conv.id})
    items = client.conversations.items.list(conv.id, order="asc").data
    texts = [(i.role, i.content[0].text) for i in items]
    assert texts == [("user", "my name is Ada"), ("user", "what is my name"),
                     ("assistant", "what is my name"), ("user", "and again"),
                     ("assistant", "and again")]
    # a reply's item keeps the id its response gave it
    assert items[2].id == first.output[0].id
    assert items[4].id == second.output[0].id
    thread = Thread.objects.get(conversation__id=conv.id)
    assert thread.agent.slug == "talker"  # moved to the agent of its first turn
    assert set(thread.messages.values_list("agent__slug", flat=True)) == {"talker"}
    assert Thread.objects.filter(conversation__id=conv.id).count() == 1


def test_responses_stream_in_a_conversation(client, echo_agent):
    conv = client.conversations.create()
    with client.responses.stream(model="echo", input="streamed words",
                                 conversation=conv.id) as stream:
        final = stream.get_final_response()
    assert final.output_text == "streamed words"
    items = client.conversations.items.list(conv.id, order="asc").data
    assert [i.role for i in items] == ["user", "assistant"]


def test_conversation_of_another_key_is_not_found(gaia_server, client, echo_agent, make_key):
    conv = client.conversations.create(metadata={"secret": "mine"})
    other = openai.OpenAI(base_url=gaia_server.v1, api_key=make_key("other")[1],
                          max_retries=0, timeout=30)
    with pytest.raises(openai.NotFoundError):
        other.conversations.retrieve(conv.id)
    with pytest.raises(openai.NotFoundError):
        other.conversations.update(conv.id, metadata={"x": "y"})
    with pytest.raises(openai.NotFoundError):
        other.conversations.items.list(conv.id)
    with pytest.raises(openai.NotFoundError):
        other.conversations.delete(conv.id)
    with pytest.raises(openai.NotFoundError) as exc:
        other.responses.create(model="echo", input="hi", conversation=conv.id)
    assert exc.value.body["param"] == "conversation"
    assert client.conversations.retrieve(conv.id).metadata == {"secret": "mine"}
    assert Message.objects.filter(thread__conversation__id=conv.id).count() == 0


def test_conversation_turn_keeps_the_keys_agent_rules(gaia_server, make_agent, make_key):
    allowed = make_agent(slug="allowed-one", provider__options={})
    make_agent(slug="other-one", provider__options={})
    _, raw = make_key("limited", agents=[allowed])
    client = openai.OpenAI(base_url=gaia_server.v1, api_key=raw, max_retries=0, timeout=30)
    conv = client.conversations.create()
    assert Thread.objects.get(conversation__id=conv.id).agent.slug == "allowed-one"
    with pytest.raises(openai.PermissionDeniedError):
        client.responses.create(model="other-one", input="hi", conversation=conv.id)
    allowed.paused = True
    allowed.save()
    with pytest.raises(openai.APIStatusError) as exc:
        client.responses.create(model="allowed-one", input="hi", conversation=conv.id)
    assert exc.value.status_code == 503


# -- bad input ----------------------------------------------------------------------------------

def _call(server: Any, key: str | None, method: str, path: str, **kwargs: Any
          ) -> httpx.Response:
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    headers.update(kwargs.pop("headers", {}))
    return httpx.request(method, server.v1 + path, headers=headers, timeout=30, **kwargs)


def _error(r: httpx.Response, status: int) -> dict[str, Any]:
    assert r.status_code == status, r.text
    body = r.json()["error"]
    assert set(body) == {"message", "type", "param", "code"}
    return body


def test_conversation_unknown_ids_are_404(gaia_server, api_key, echo_agent):
    for method, path in (("GET", "/conversations/conv_nope"),
                         ("POST", "/conversations/conv_nope"),
                         ("DELETE", "/conversations/conv_nope"),
                         ("GET", "/conversations/conv_nope/items"),
                         ("GET", "/conversations/" + "x" * 300)):
        body = _error(_call(gaia_server, api_key, method, path, json={"metadata": {}}), 404)
        assert body["code"] == "conversation_not_found"
    conv = _call(gaia_server, api_key, "POST", "/conversations", json={}).json()
    for item in ("msg_0000000000000001", "msg_nope", "fc_" + "a" * 32):
        body = _error(_call(gaia_server, api_key, "GET",
                            f"/conversations/{conv['id']}/items/{item}"), 404)
        assert (body["code"], body["param"]) == ("item_not_found", "item_id")
    body = _error(_call(gaia_server, api_key, "GET", f"/conversations/{conv['id']}/items",
                        params={"after": "msg_nope"}), 404)
    assert body["param"] == "after"
    body = _error(_call(gaia_server, api_key, "POST", "/responses", json={
        "model": "echo", "input": "hi", "conversation": "conv_nope"}), 404)
    assert (body["code"], body["param"]) == ("conversation_not_found", "conversation")


def test_conversation_bad_input_is_400_naming_the_param(gaia_server, api_key, echo_agent):
    conv = _call(gaia_server, api_key, "POST", "/conversations", json={}).json()
    items = f"/conversations/{conv['id']}/items"
    cases = [
        ("POST", "/conversations", {"content": b"{not json"}, None),
        ("POST", "/conversations", {"json": {"metadata": "x"}}, "metadata"),
        ("POST", "/conversations", {"json": {"metadata": {f"k{i}": "v" for i in range(17)}}},
         "metadata"),
        ("POST", "/conversations", {"json": {"metadata": {"k": "v" * 513}}}, "metadata.k"),
        ("POST", "/conversations", {"json": {"items": "hello"}}, "items"),
        ("POST", "/conversations", {"json": {"items": [_user("x")] * 21}}, "items"),
        ("POST", "/conversations", {"json": {"items": [{"type": "message", "role": "robot",
                                                        "content": "x"}]}}, "items[0].role"),
        ("POST", "/conversations", {"json": {"items": [{"type": "teleport"}]}},
         "items[0].type"),
        ("POST", f"/conversations/{conv['id']}", {"json": {}}, "metadata"),
        ("POST", items, {"json": {}}, "items"),
        ("POST", items, {"json": {"items": []}}, "items"),
        ("GET", items, {"params": {"limit": 0}}, "limit"),
        ("GET", items, {"params": {"limit": "many"}}, "limit"),
        ("GET", items, {"params": {"limit": 101}}, "limit"),
        ("GET", items, {"params": {"order": "sideways"}}, "order"),
        ("GET", items, {"params": {"include": "everything"}}, "include"),
        ("POST", "/responses", {"json": {"model": "echo", "input": "hi",
                                         "conversation": conv["id"],
                                         "previous_response_id": "resp_x"}}, "conversation"),
        ("POST", "/responses", {"json": {"model": "echo", "input": "hi",
                                         "conversation": {"name": "x"}}}, "conversation.id"),
        ("POST", "/responses", {"json": {"model": "echo", "input": "hi",
                                         "conversation": 7}}, "conversation"),
    ]
    for method, path, kwargs, param in cases:
        body = _error(_call(gaia_server, api_key, method, path, **kwargs), 400)
        assert body["param"] == param, (path, kwargs, body)
        assert body["type"] == "invalid_request_error"
    assert ConversationRow.objects.count() == 1
    assert Message.objects.filter(thread__conversation__id=conv["id"]).count() == 0


def test_conversation_oversized_and_unauthenticated(gaia_server, api_key, echo_agent):
    from django.conf import settings

    r = _call(gaia_server, None, "POST", "/conversations", json={})
    assert _error(r, 401)["type"] == "invalid_request_error"
    conv = _call(gaia_server, api_key, "POST", "/conversations", json={}).json()
    big = b"x" * (settings.GAIA_MAX_BODY_BYTES + 1)
    for path in ("/conversations", f"/conversations/{conv['id']}/items"):
        r = _call(gaia_server, api_key, "POST", path, content=big,
                  headers={"Content-Type": "application/json"})
        assert _error(r, 413)["type"] == "invalid_request_error"


def test_conversation_client_tool_round_trip(client, make_agent):
    make_agent(slug="tooler", provider__options={
        "tool_call": {"name": "weather", "arguments": {"city": "Lyon"}},
        "tool_result_reply": True})
    tools = [{"type": "function", "name": "weather", "parameters": {"type": "object"}}]
    conv = client.conversations.create()
    asked = client.responses.create(model="tooler", input="weather?", tools=tools,
                                    conversation=conv.id)
    [call] = [o for o in asked.output if o.type == "function_call"]
    answered = client.responses.create(model="tooler", tools=tools, conversation=conv.id,
                                       input=[{"type": "function_call_output",
                                               "call_id": call.call_id, "output": "sunny"}])
    assert answered.output_text == "Tool said: sunny"
    items = client.conversations.items.list(conv.id, order="asc").data
    assert [i.type for i in items] == ["message", "function_call", "function_call_output",
                                       "message"]
    assert items[1].id == call.id
    assert items[1].call_id == items[2].call_id == call.call_id


def test_conversation_items_wait_for_a_running_turn(gaia_server, client, api_key, echo_agent):
    from datetime import timedelta

    from django.utils import timezone

    conv = client.conversations.create()
    thread = Thread.objects.get(conversation__id=conv.id)
    Thread.objects.filter(pk=thread.pk).update(  # a turn holds the thread's lease
        lock_token="x", lock_expires_at=timezone.now() + timedelta(minutes=5))
    r = _call(gaia_server, api_key, "POST", f"/conversations/{conv.id}/items",
              json={"items": [_user("late")]})
    assert _error(r, 409)["code"] == "conversation_locked"
    assert Message.objects.filter(thread=thread).count() == 0


def test_conversation_needs_a_model_the_key_may_use(gaia_server, api_key):
    body = _error(_call(gaia_server, api_key, "POST", "/conversations", json={}), 403)
    assert body["code"] == "no_model_available"
