"""``/mcp``: Gaia's agents as MCP tools, through the official ``mcp`` client over Streamable HTTP
against a live server (issue 39)."""

from __future__ import annotations

import asyncio
from typing import Any

import httpx
import pytest

pytestmark = pytest.mark.django_db(transaction=True)


async def _session(url: str, key: str | None, work: Any) -> Any:
    import httpx2
    from mcp import Client
    from mcp.client.streamable_http import streamable_http_client

    headers = {"Authorization": f"Bearer {key}"} if key else {}
    async with httpx2.AsyncClient(headers=headers, timeout=60) as http, \
            Client(streamable_http_client(f"{url}/mcp", http_client=http)) as client:
        return await work(client)


def session(server: Any, key: str | None, work: Any) -> Any:
    return asyncio.run(_session(server.url, key, work))


def text(result: Any) -> str:
    return "".join(c.text for c in result.content)


def test_a_client_lists_the_agents_its_key_may_ask(gaia_server: Any, make_agent: Any,
                                                   make_key: Any) -> None:
    helper = make_agent(slug="helper", description="Answers questions about Gaia.")
    other = make_agent(slug="team.writer/v2")
    make_agent(slug="hidden", listed=False)
    _, everyone = make_key("all")
    _, narrow = make_key("narrow", agents=[helper])

    async def names(client: Any) -> dict[str, Any]:
        return {t.name: t for t in (await client.list_tools()).tools}

    tools = session(gaia_server, everyone, names)
    assert {"ask_helper", "ask_team.writer_v2"} <= set(tools)
    assert "ask_hidden" not in tools
    helper_tool = tools["ask_helper"]
    assert helper_tool.description == "Answers questions about Gaia."
    assert helper_tool.input_schema["required"] == ["message"]
    assert set(helper_tool.input_schema["properties"]) == {"message", "thread_id"}
    assert set(session(gaia_server, narrow, names)) == {"ask_helper"}

    async def ask_writer(client: Any) -> Any:  # a name that had to change still finds it
        return await client.call_tool("ask_team.writer_v2", {"message": "Hi"})

    called = session(gaia_server, everyone, ask_writer)
    assert (called.is_error, called.structured_content["agent"]) == (False, other.slug)


def test_a_call_is_a_turn_and_a_thread_continues(gaia_server: Any, make_agent: Any,
                                                 api_key: str) -> None:
    make_agent(slug="echoer", provider__options={})

    async def two_calls(client: Any) -> tuple[Any, Any]:
        first = await client.call_tool("ask_echoer", {"message": "Hello there"})
        second = await client.call_tool("ask_echoer", {
            "message": "Again", "thread_id": first.structured_content["thread_id"]})
        return first, second

    first, second = session(gaia_server, api_key, two_calls)
    assert not first.is_error, text(first)
    assert "Hello there" in text(first)  # the fake provider echoes the conversation
    assert first.structured_content["agent"] == "echoer"
    assert first.structured_content["usage"]["output_tokens"] > 0
    assert second.structured_content["thread_id"] == first.structured_content["thread_id"]
    assert not second.is_error, text(second)

    from agents.models import Message, Thread

    thread = Thread.objects.get(pk=first.structured_content["thread_id"])
    assert thread.agent.slug == "echoer"
    asked = Message.objects.filter(thread=thread, role="user")
    assert list(asked.values_list("dialect", flat=True)) == ["mcp", "mcp"]
    # who asked: the client's name (clientInfo), as the console shows it
    senders = set(asked.values_list("sender", flat=True))
    assert len(senders) == 1
    assert next(iter(senders)).startswith("mcp:"), senders
    assert len(next(iter(senders))) > len("mcp:")


def test_another_keys_thread_is_an_error_result_not_a_leak(gaia_server: Any, make_agent: Any,
                                                           make_key: Any) -> None:
    make_agent(slug="keeper", provider__options={"reply": "Secret plans."})
    _, mine = make_key("mine")
    _, theirs = make_key("theirs")

    async def ask(client: Any, **args: Any) -> Any:
        return await client.call_tool("ask_keeper", {"message": "Hi", **args})

    made = session(gaia_server, mine, ask)
    thread_id = made.structured_content["thread_id"]
    stolen = session(gaia_server, theirs, lambda c: ask(c, thread_id=thread_id))
    assert stolen.is_error
    assert text(stolen) == f"No thread '{thread_id}' for this API key."  # as if none existed


def test_what_stops_a_turn_is_an_error_result(gaia_server: Any, make_agent: Any,
                                              api_key: str) -> None:
    from agents.services import agent_set_paused

    paused = make_agent(slug="napper", provider__options={"reply": "Zzz."})
    agent_set_paused(agent=paused, paused=True)
    make_agent(slug="broken", provider__options={"fail": "before",
                                                 "fail_message": "upstream exploded"})

    async def calls(client: Any) -> list[Any]:
        return [await client.call_tool("ask_napper", {"message": "Hi"}),
                await client.call_tool("ask_broken", {"message": "Hi"}),
                await client.call_tool("ask_nobody", {"message": "Hi"}),
                await client.call_tool("ask_napper", {"message": ""})]

    napper, broken, nobody, empty = session(gaia_server, api_key, calls)
    assert (napper.is_error, text(napper)) == (
        True, "The model 'napper' is paused by an operator; try again later.")
    assert broken.is_error, text(broken)
    assert "upstream exploded" in text(broken), text(broken)
    assert nobody.is_error
    assert "Unknown tool 'ask_nobody'" in text(nobody)
    assert empty.is_error
    assert "'message' is required" in text(empty)


def test_no_key_or_a_bad_one_is_refused_before_the_protocol(gaia_server: Any) -> None:
    initialize = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": {},
        "clientInfo": {"name": "probe", "version": "1"}}}
    headers = {"Accept": "application/json, text/event-stream"}
    for auth in ({}, {"Authorization": "Bearer gaia_nope_nope"}):
        response = httpx.post(f"{gaia_server.url}/mcp", json=initialize,
                              headers={**headers, **auth}, timeout=10)
        assert response.status_code == 401, response.text
        assert response.headers["www-authenticate"] == "Bearer"
        assert response.json()["error"]["message"]
    with pytest.raises(Exception):  # noqa: B017, PT011 - the SDK's own error for a 401
        session(gaia_server, None, lambda c: c.list_tools())


def test_a_client_that_asks_for_progress_hears_it_while_the_turn_runs(
        gaia_server: Any, make_agent: Any, api_key: str) -> None:
    # ten words, 0.3 s apart: the turn runs about 3 s, a notification at most every second
    make_agent(slug="slowpoke", provider__options={
        "reply": "one two three four five six seven eight nine ten", "delay_ms": 300})
    heard: list[tuple[float, str | None]] = []

    async def progress(done: float, total: float | None, message: str | None) -> None:
        heard.append((done, message))

    async def call(client: Any) -> Any:
        return await client.call_tool("ask_slowpoke", {"message": "Count."},
                                      progress_callback=progress)

    result = session(gaia_server, api_key, call)
    assert not result.is_error, text(result)
    assert text(result).startswith("one two three")
    assert len(heard) >= 2, heard
    assert [p for p, _ in heard] == sorted(p for p, _ in heard)  # it only grows
    assert all(m and m.startswith("slowpoke: ") for _, m in heard), heard


def test_a_cancelled_call_stops_its_turn_and_keeps_what_it_said(
        gaia_server: Any, make_agent: Any, api_key: str) -> None:
    """The client gives up: the SDK closes the call's stream (over stateless Streamable HTTP a
    ``notifications/cancelled`` would come in a request of its own, which no process can tie
    to the call; the closed stream is what says it), the turn stops, its partial reply stored
    as a client's that left."""
    import time

    from agents.models import Message, Thread

    words = " ".join(f"w{i}" for i in range(200))
    make_agent(slug="rambler", provider__options={"reply": words, "delay_ms": 50})

    async def give_up(client: Any) -> None:
        with pytest.raises(TimeoutError):
            async with asyncio.timeout(2):
                await client.call_tool("ask_rambler", {"message": "Talk."})
        await asyncio.sleep(0.5)  # the notification goes out before the session closes

    session(gaia_server, api_key, give_up)
    deadline = time.monotonic() + 15
    reply = None
    while reply is None and time.monotonic() < deadline:
        thread = Thread.objects.filter(agent__slug="rambler").first()
        reply = thread and Message.objects.filter(thread=thread, role="assistant").first()
        time.sleep(0.1)
    assert reply is not None, "the cancelled turn left no reply"
    assert reply.finish_reason == "client_disconnected", reply.finish_reason
    said = len(reply.content.split())
    assert 0 < said < 200
    time.sleep(1)
    reply.refresh_from_db()
    assert len(reply.content.split()) == said  # nothing kept generating


def test_bad_input_gets_json_rpc_errors_and_changes_nothing(gaia_server: Any, api_key: str
                                                           ) -> None:
    from django.conf import settings

    from agents.models import Thread

    headers = {"Authorization": f"Bearer {api_key}", "Content-Type": "application/json",
               "Accept": "application/json, text/event-stream"}

    def post(body: bytes) -> httpx.Response:
        return httpx.post(f"{gaia_server.url}/mcp", content=body, headers=headers, timeout=30)

    r = post(b"{not json")
    assert (r.status_code, r.json()["error"]["code"]) == (400, -32700)
    r = post(b"[1, 2]")
    assert (r.status_code, r.json()["error"]["code"]) == (400, -32602)
    r = post(b'{"jsonrpc": "2.0", "id": 3, "method": "nope/nope", "params": {}}')
    assert r.status_code == 200  # an answer on the call's stream
    assert '"code":-32601' in r.text
    r = post(b'{"jsonrpc": "2.0", "id": 4, "method": "tools/call", "params": {"name": "x"}}')
    assert '"isError":true' in r.text
    r = post(b'{"a": "' + b"x" * settings.GAIA_MAX_BODY_BYTES + b'"}')
    assert (r.status_code, r.json()["error"]["code"]) == (413, -32600)
    assert not Thread.objects.exists()


def test_a_tool_that_needs_approval_waits_for_an_operator_inside_the_call(
        gaia_server: Any, make_agent: Any, make_key: Any, api_key: str) -> None:
    """The agent's own tool needs an operator's approval: the MCP call waits (the thread
    ``waiting``, the approval listed), and resumes with the tool's result once approved."""
    import threading
    import time

    from agents.models import Thread

    make_agent(slug="careful", tools=["calculator"], require_approval="always",
               approval_timeout_seconds=120, provider__options={"script": [
                   {"tool_calls": [{"name": "calculator",
                                    "arguments": {"expression": "6 * 7"}}]},
                   {"reply": "Results: {results}"}]})
    _, secret = make_key("night-shift", scopes=["operator"])
    operator = {"Authorization": f"Bearer {secret}"}
    out: dict[str, Any] = {}

    def call() -> None:
        async def ask(client: Any) -> Any:
            return await client.call_tool("ask_careful", {"message": "Six times seven?"})

        out["result"] = session(gaia_server, api_key, ask)

    worker = threading.Thread(target=call, daemon=True)
    worker.start()
    deadline, approval = time.monotonic() + 60, None
    while approval is None and time.monotonic() < deadline:
        listed = httpx.get(f"{gaia_server.url}/api/v1/approvals", headers=operator, timeout=10)
        approval = (listed.json()["results"] or [None])[0]
        time.sleep(0.05)
    assert approval is not None, "no approval was requested"
    assert (approval["agent"], approval["tool"]) == ("careful", "calculator")
    assert Thread.objects.get(pk=approval["thread_id"]).status == "waiting"
    assert "result" not in out  # the call is still waiting
    decided = httpx.post(f"{gaia_server.url}/api/v1/approvals/{approval['id']}",
                         headers=operator, json={"decision": "approve"}, timeout=10)
    assert decided.status_code == 200, decided.text
    worker.join(60)
    result = out["result"]
    assert (result.is_error, text(result)) == (False, "Results: 42")
    assert result.structured_content["thread_id"] == approval["thread_id"]


def test_mcp_requests_are_counted_and_logged(gaia_server: Any, make_agent: Any, make_key: Any,
                                             api_key: str) -> None:
    make_agent(slug="counted", provider__options={"reply": "One."})
    _, reader = make_key("prometheus", scopes=["metrics"])

    def mcp_requests(status: str) -> float:
        text = httpx.get(f"{gaia_server.url}/metrics", timeout=10,
                         headers={"Authorization": f"Bearer {reader}"}).text
        return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
                   if line.startswith("gaia_requests_total{")
                   and 'route="mcp"' in line and f'status="{status}"' in line)

    ok_before, refused_before = mcp_requests("200"), mcp_requests("401")
    session(gaia_server, api_key, lambda c: c.call_tool("ask_counted", {"message": "Hi"}))
    assert httpx.post(f"{gaia_server.url}/mcp", json={}, timeout=10).status_code == 401
    assert mcp_requests("200") > ok_before
    assert mcp_requests("401") == refused_before + 1
    assert "POST /mcp 401 key_prefix=-" in gaia_server.log()


def test_notifications_cancelled_in_a_request_of_its_own_stops_the_call(
        gaia_server: Any, make_agent: Any, api_key: str) -> None:
    """A 2025-11-25 client cancels with ``notifications/cancelled`` in a POST of its own
    (stateless: whichever process gets it), naming the call's request id: the call's turn
    stops at once, its partial reply kept, and the call answers that it was cancelled."""
    import threading
    import time

    from agents.models import Message

    words = " ".join(f"w{i}" for i in range(400))
    make_agent(slug="droner", provider__options={"reply": words, "delay_ms": 50})
    headers = {"Authorization": f"Bearer {api_key}", "MCP-Protocol-Version": "2025-11-25",
               "Accept": "application/json, text/event-stream"}
    out: dict[str, Any] = {}

    def call() -> None:
        out["response"] = httpx.post(f"{gaia_server.url}/mcp", headers=headers, timeout=60,
                                     json={"jsonrpc": "2.0", "id": 41, "method": "tools/call",
                                           "params": {"name": "ask_droner",
                                                      "arguments": {"message": "Drone on."}}})

    caller = threading.Thread(target=call, daemon=True)
    caller.start()
    deadline = time.monotonic() + 15
    while not Message.objects.filter(thread__agent__slug="droner").exists():
        assert time.monotonic() < deadline, "the call never started its turn"
        time.sleep(0.05)
    time.sleep(1.0)
    other = httpx.post(f"{gaia_server.url}/mcp", headers=headers, timeout=10, json={
        "jsonrpc": "2.0", "method": "notifications/cancelled",
        "params": {"requestId": 99, "reason": "not this one"}})
    assert other.status_code == 202
    time.sleep(0.5)
    assert "response" not in out  # another request id cancels nothing
    cancel = httpx.post(f"{gaia_server.url}/mcp", headers=headers, timeout=10, json={
        "jsonrpc": "2.0", "method": "notifications/cancelled",
        "params": {"requestId": 41, "reason": "the user gave up"}})
    assert cancel.status_code == 202
    caller.join(30)
    assert "Cancelled by the client" in out["response"].text, out["response"].text
    reply = None
    while reply is None and time.monotonic() < deadline + 15:
        reply = Message.objects.filter(thread__agent__slug="droner", role="assistant").first()
        time.sleep(0.1)
    assert reply is not None
    assert reply.finish_reason == "client_disconnected", reply.finish_reason
    assert 0 < len(reply.content.split()) < 400
