"""Bad input is a 400 (or 404) in the dialect's envelope, never a 500, and is refused before
anything is stored or any provider is asked (issue 17, items 2, 4, 5 and 13)."""

from __future__ import annotations

import json

import pytest
from django.test import AsyncClient

from agents.models import Message, Thread

pytestmark = pytest.mark.django_db(transaction=True)

CHAT = "/v1/chat/completions"
HI = '[{"role":"user","content":"hi"}]'


async def post(path, body, key=None, **headers):
    if key:
        headers["Authorization"] = f"Bearer {key}"
    data = body if isinstance(body, (str, bytes)) else json.dumps(body)
    return await AsyncClient().post(path, data=data, content_type="application/json",
                                    headers=headers)


def openai_error(response, status):
    assert response.status_code == status, response.content
    error = json.loads(response.content)["error"]
    assert set(error) == {"message", "type", "param", "code"}
    return error


def anthropic_error(response, status):
    assert response.status_code == status, response.content
    body = json.loads(response.content)
    assert body["type"] == "error"
    assert set(body["error"]) == {"type", "message"}
    return body["error"]


async def nothing_stored():
    return not await Thread.objects.aexists() and not await Message.objects.aexists()


@pytest.mark.parametrize("raw", [
    '{"model":"m","x":' + "[" * 990 + "]" * 990 + "}",
    '{"model":"m","x":' + "[" * 100_000 + "]" * 100_000 + "}",
    '{"model":"m","x":' + "1" * 5000 + "}",
])
async def test_pathological_json_is_400_even_without_a_key(raw, echo_agent):
    for path in (CHAT, "/v1/responses"):
        assert openai_error(await post(path, raw), 401)["code"] == "invalid_api_key"


@pytest.mark.parametrize("raw", [
    '{"model":"echo","x":' + "[" * 990 + "]" * 990 + ',"messages":' + HI + "}",
    '{"model":"echo","x":' + "1" * 5000 + ',"messages":' + HI + "}",
])
async def test_pathological_json_is_400_with_a_key(raw, echo_agent, api_key):
    assert openai_error(await post(CHAT, raw, api_key), 400)["code"] == "invalid_json"
    error = anthropic_error(await post("/v1/messages", raw, api_key,
                                       **{"anthropic-version": "2023-06-01"}), 400)
    assert error["type"] == "invalid_request_error"


@pytest.mark.parametrize("text", ["a\\ud800b", "a\\u0000b", "\\udfff"])
async def test_unstorable_characters_are_400_before_anything_is_stored(text, echo_agent,
                                                                       api_key):
    raw = '{"model":"echo","messages":[{"role":"user","content":"' + text + '"}]}'
    assert openai_error(await post(CHAT, raw, api_key), 400)["param"] == "messages[0].content"
    raw = '{"model":"echo","input":"' + text + '"}'
    assert openai_error(await post("/v1/responses", raw, api_key), 400)["param"] == "input"
    raw = ('{"model":"echo","max_tokens":5,"messages":[{"role":"user","content":"' + text
           + '"}]}')
    anthropic_error(await post("/v1/messages", raw, api_key), 400)
    assert await nothing_stored()


async def test_a_paired_surrogate_escape_is_fine(echo_agent, api_key):
    raw = '{"model":"echo","messages":[{"role":"user","content":"\\ud83d\\ude00"}]}'
    response = await post(CHAT, raw, api_key)
    assert response.status_code == 200
    assert json.loads(response.content)["choices"][0]["message"]["content"] == "\U0001f600"


async def test_tool_choice_function_as_a_string_is_400(echo_agent, api_key):
    body = {"model": "echo", "messages": [{"role": "user", "content": "x"}],
            "tool_choice": {"type": "function", "function": "f"}}
    assert openai_error(await post(CHAT, body, api_key), 400)["param"] == "tool_choice"


async def test_an_overlong_tool_call_id_is_400(echo_agent, api_key):
    body = {"model": "echo", "messages": [
        {"role": "user", "content": "x"},
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "c" * 300, "type": "function", "function": {"name": "f", "arguments": "{}"}}]},
        {"role": "tool", "tool_call_id": "c" * 300, "content": "r"}]}
    error = openai_error(await post(CHAT, body, api_key), 400)
    assert error["param"] == "messages[2].tool_call_id"
    assert await nothing_stored()


async def test_a_nul_in_a_model_id_is_404(echo_agent, api_key):
    response = await AsyncClient().get("/v1/models/a%00b",
                                       headers={"Authorization": f"Bearer {api_key}"})
    assert openai_error(response, 404)["code"] == "model_not_found"
    response = await AsyncClient().get("/v1/responses/a%00b",
                                       headers={"Authorization": f"Bearer {api_key}"})
    assert openai_error(response, 404)["code"] == "response_not_found"


async def test_too_many_messages_are_refused_before_any_is_stored(echo_agent, api_key,
                                                                  settings):
    settings.GAIA_MAX_MESSAGES = 50
    many = [{"role": "user", "content": f"m{i}"} for i in range(51)]
    error = openai_error(await post(CHAT, {"model": "echo", "messages": many}, api_key), 400)
    assert error["code"] == "too_many_messages"
    error = openai_error(await post("/v1/responses", {"model": "echo", "input": many},
                                    api_key), 400)
    assert error["code"] == "too_many_messages"
    anthropic_error(await post("/v1/messages", {"model": "echo", "max_tokens": 5,
                                                "messages": many}, api_key), 400)
    assert await nothing_stored()
    ok = await post(CHAT, {"model": "echo", "messages": many[:50]}, api_key)
    assert ok.status_code == 200


@pytest.fixture
def small_agent(make_agent):
    return make_agent(slug="small", provider__options={}, max_input_tokens=100)


async def test_input_far_over_the_context_is_refused_without_counting_it(
        small_agent, api_key, monkeypatch):
    from agents.backends.fake import FakeBackend


    def never(self, request):
        raise AssertionError("counted")

    monkeypatch.setattr(FakeBackend, "count_tokens", never)
    body = {"model": "small", "messages": [{"role": "user", "content": "word " * 200_000}]}
    error = openai_error(await post(CHAT, body, api_key), 400)
    assert error["code"] == "context_length_exceeded"
    assert await nothing_stored()


async def test_get_v1_without_a_slash_is_a_json_404():
    response = await AsyncClient().get("/v1")
    assert openai_error(response, 404)["code"] == "unknown_route"


def test_an_oversized_messages_body_is_413_in_anthropics_envelope(gaia_server, api_key):
    import httpx
    from django.conf import settings

    r = httpx.post(gaia_server.v1 + "/messages", timeout=60,
                   content=b"x" * (settings.GAIA_MAX_BODY_BYTES + 1),
                   headers={"x-api-key": api_key, "Content-Type": "application/json"})
    assert r.status_code == 413
    assert r.json()["type"] == "error"
    assert r.json()["error"]["type"] == "request_too_large"


async def test_an_overlong_workspace_root_is_not_taken_for_one(echo_agent, api_key):
    text = ("<workspace_info>I am working in a workspace with the following folders:\n- /"
            + "d" * 2000 + "\n</workspace_info>\nhello")
    response = await post(CHAT, {"model": "echo", "messages": [
        {"role": "user", "content": text}]}, api_key)
    assert response.status_code == 200, response.content
    thread = await Thread.objects.aget()
    assert thread.workspace_root == ""


@pytest.mark.parametrize("constant", ["NaN", "Infinity", "-Infinity"])
async def test_nan_and_infinity_are_not_json(constant, echo_agent, api_key):
    raw = ('{"model":"echo","tools":[{"type":"function","function":{"name":"f","parameters":'
           '{"x":' + constant + '}}}],"messages":' + HI + "}")
    assert openai_error(await post(CHAT, raw, api_key), 400)["code"] == "invalid_json"


@pytest.fixture
def upstream_agent(make_agent):
    from tests.fakes.openai_upstream import FakeOpenAIUpstream

    with FakeOpenAIUpstream(tokens=2) as up:
        make_agent(slug="up", provider__kind="openai", provider__base_url=up.base_url,
                   provider__name="never-asked")
        yield up


@pytest.mark.parametrize("message", [
    {"role": "user", "content": "a\u0000b"},
    {"role": "user", "content": "a\ud800b"},
    {"role": "tool", "tool_call_id": "c" * 300, "content": "r"},
])
async def test_bad_input_never_reaches_the_provider(upstream_agent, api_key, message):
    raw = json.dumps({"model": "up", "messages": [{"role": "user", "content": "x"}, message]})
    assert openai_error(await post(CHAT, raw, api_key), 400)["code"] == "invalid_value"
    assert upstream_agent.requests == []
    assert await nothing_stored()


CESU = b"\xed\xa0\x80"  # U+D800 written as UTF-8 bytes: CESU-8, no valid UTF-8
DEEP_ARGS = "[" * 50_000 + "]" * 50_000


def _dialect_bodies(content: bytes | None = None, arguments: str | None = None
                    ) -> list[tuple[str, bytes, dict[str, str]]]:
    """The same conversation in the three dialects: a user's ``content`` (raw bytes), or an
    earlier tool call whose ``arguments`` text is given."""
    text = content if content is not None else b"hi"
    if arguments is None:
        chat = b'{"model":"up","messages":[{"role":"user","content":"' + text + b'"}]}'
        responses = b'{"model":"up","input":"' + text + b'"}'
        messages = (b'{"model":"up","max_tokens":5,"messages":[{"role":"user","content":"'
                    + text + b'"}]}')
    else:
        call = {"id": "c1", "type": "function", "function": {"name": "f", "arguments": arguments}}
        chat = json.dumps({"model": "up", "messages": [
            {"role": "user", "content": "x"},
            {"role": "assistant", "content": None, "tool_calls": [call]},
            {"role": "tool", "tool_call_id": "c1", "content": "r"},
            {"role": "user", "content": "y"}]}).encode()
        responses = json.dumps({"model": "up", "input": [
            {"role": "user", "content": "x"},
            {"type": "function_call", "call_id": "c1", "name": "f", "arguments": arguments},
            {"type": "function_call_output", "call_id": "c1", "output": "r"},
            {"role": "user", "content": "y"}]}).encode()
        tool_input = json.loads(arguments) if len(arguments) < 1000 else {"deep": 1}
        messages = json.dumps({"model": "up", "max_tokens": 5, "messages": [
            {"role": "user", "content": "x"},
            {"role": "assistant", "content": [
                {"type": "tool_use", "id": "c1", "name": "f", "input": tool_input}]},
            {"role": "user", "content": [
                {"type": "tool_result", "tool_use_id": "c1", "content": "r"}]}]}).encode()
        if len(arguments) >= 1000:  # the same depth as an input object
            messages = messages.replace(b'{"deep": 1}', DEEP_ARGS.encode())
    return [(CHAT, chat, {}), ("/v1/responses", responses, {}),
            ("/v1/messages", messages, {"anthropic-version": "2023-06-01"})]


@pytest.mark.parametrize("case", ["cesu8_content", "lone_surrogate_in_arguments",
                                  "arguments_nested_50000_deep"])
async def test_what_failed_after_the_upstream_answered_is_refused_before_asking_it(
        upstream_agent, api_key, case):
    """Issue 26 item 4: each was a 500 after the provider was asked (and paid)."""
    if case == "cesu8_content":
        bodies = _dialect_bodies(content=b"a" + CESU + b"b")
    elif case == "lone_surrogate_in_arguments":
        bodies = _dialect_bodies(arguments='{"a": "\\ud800"}')
    else:
        bodies = _dialect_bodies(arguments=DEEP_ARGS)
    for path, raw, headers in bodies:
        response = await post(path, raw, api_key, **headers)
        if path == "/v1/messages":
            anthropic_error(response, 400)
        else:
            error = openai_error(response, 400)
            assert error["code"] in ("invalid_value", "invalid_json"), error
    assert upstream_agent.requests == []
    assert await nothing_stored()


def test_a_models_odd_tool_arguments_are_stored_not_a_500() -> None:
    """What a provider's model says cannot be refused: arguments nested 50,000 deep or with
    a lone surrogate still hash (thread reconciliation) and canonicalise."""
    from agents.kernel import llm
    from agents.services import digest_chain

    for arguments in (DEEP_ARGS, '{"a": "\\ud800"}', "not json"):
        message = llm.Message("assistant", (), (llm.ToolCall("c", "f", arguments),))
        assert len(digest_chain([message])) == 2
        llm.canonical_json(arguments)
