"""Issue 35 item 8 and its class: one call's failure is that call's error result, never the end
of the stdio connection every turn shares. A real server (``server-everything`` over stdio,
once behind :mod:`tests.fakes.mcp_filter`, which makes it answer bytes that are not UTF-8 or a
lone surrogate), a slow call in flight on the shared connection while the other call fails."""

from __future__ import annotations

import asyncio
import sys
import threading
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import openai
import pytest

from agents.models import McpServer, Message, Thread
from agents.tools.mcp import McpConfig, McpConnection, arguments_refused
from tests.fakes import Reply, ToolCallSpec
from tests.fakes.openai_upstream import FakeOpenAIUpstream

FILTER = Path(__file__).resolve().parents[1] / "fakes" / "mcp_filter.py"
SLOW = ("trigger-long-running-operation", {"duration": 2, "steps": 2})


@pytest.fixture
async def everything(everything_bin: Path) -> AsyncIterator[McpConnection]:
    connection = McpConnection(McpConfig(name="ev", command=sys.executable,
                                         args=(str(FILTER), str(everything_bin), "stdio")))
    yield connection
    await connection.close()


async def _beside_a_slow_call(connection: McpConnection, tool: str, arguments: dict[str, Any],
                              within: float = 30) -> tuple[Any, Any]:
    """``tool`` called while a slow call is in flight on the same connection: both results."""
    await connection.tools()  # open, listed: the slow call goes out at once
    slow = asyncio.create_task(connection.call(*SLOW, within=60))
    await asyncio.sleep(0.3)  # the slow call is written before the other (order, not timing)
    other = await connection.call(tool, arguments, within=within)
    return await slow, other


def _slow_call_succeeded(result: Any) -> None:
    assert not result.is_error, result.text
    assert "Long running operation completed" in result.text


@pytest.mark.parametrize("arguments", [{"message": "\ud800"}, {"message": "ok", "\udfff": 1},
                                       {"message": ["a", {"b": "x\udbff"}]}])
async def test_a_lone_surrogate_fails_its_own_call_only(everything: McpConnection,
                                                        arguments: dict[str, Any]) -> None:
    slow, bad = await _beside_a_slow_call(everything, "echo", arguments)
    assert bad.is_error
    assert bad.text == "echo was not called: its arguments hold text that is not valid " \
        "Unicode (a lone surrogate)"
    _slow_call_succeeded(slow)
    assert (await everything.call("echo", {"message": "still here"}, within=30)).text == \
        "Echo: still here"
    assert everything.opened == 1  # the shared connection was never closed


async def test_bytes_that_are_not_utf8_in_a_result_are_replaced(everything: McpConnection
                                                                 ) -> None:
    slow, odd = await _beside_a_slow_call(everything, "echo", {"message": "a@@FF@@b"})
    assert (odd.is_error, odd.text) == (False, "Echo: a\ufffdb")
    _slow_call_succeeded(slow)
    assert everything.opened == 1


async def test_a_result_the_sdk_cannot_read_fails_that_call_only(everything: McpConnection
                                                                  ) -> None:
    slow, lost = await _beside_a_slow_call(everything, "echo", {"message": "@@D800@@"},
                                           within=3)
    assert lost.is_error
    assert lost.text == "echo: no answer within 3 s"
    _slow_call_succeeded(slow)
    assert everything.opened == 1


async def test_a_servers_error_answer_leaves_the_connection_open(everything: McpConnection
                                                                  ) -> None:
    slow, failed = await _beside_a_slow_call(everything, "echo", {"message": "@@ERROR@@"})
    assert (failed.is_error, failed.text) == (True, "echo failed: MCPError: the server failed")
    _slow_call_succeeded(slow)
    assert everything.opened == 1


def test_arguments_refused_names_what_cannot_be_sent() -> None:
    assert arguments_refused({"text": "ok \U0001f600 \u2028 \x00"}) is None
    assert "lone surrogate" in arguments_refused({"text": "\ud83d"})
    assert "not JSON" in arguments_refused({"x": float("nan")})


# -- end to end: two keys' turns share a live Gaia's stdio connection ------------------------


@pytest.mark.django_db(transaction=True)
def test_another_keys_call_in_flight_survives_a_lone_surrogate(
        gaia_server: Any, make_key: Any, make_agent: Any, everything_bin: Path) -> None:
    """Key A's slow call is running on the shared ``server-everything`` connection when key
    B's model (a real OpenAI-compatible upstream: JSON may spell a lone surrogate) calls
    ``echo`` with ``"\\ud800"``: B's call is an error result for B's model, A's call ends well,
    and the server process was started once."""
    # the server is the session's: only what it logs from here on is this test's
    log_start = len(gaia_server.log())
    McpServer.objects.create(name="ev", command=str(everything_bin), args=["stdio"])
    make_agent(slug="slowpoke", tools=["mcp:ev"], provider__options={"script": [
        {"tool_calls": [{"name": "mcp__ev__trigger-long-running-operation",
                         "arguments": {"duration": 3, "steps": 3}}]},
        {"reply": "After the long run: {results}"}]})
    _, key_a = make_key("a")
    _, key_b = make_key("b")
    with FakeOpenAIUpstream(tokens=3) as up:
        up.script(Reply(tool_calls=[ToolCallSpec(name="mcp__ev__echo",
                                                 arguments='{"message": "\\ud800"}')]),
                  Reply(text="the call failed, as told"))
        make_agent(slug="surrogate", tools=["mcp:ev"], provider__name="upstream",
                   provider__kind="openai", provider__base_url=up.base_url)
        out: dict[str, Any] = {}
        slow = threading.Thread(target=lambda: out.update(a=openai.OpenAI(
            base_url=gaia_server.v1, api_key=key_a, max_retries=0).chat.completions.create(
            model="slowpoke", messages=[{"role": "user", "content": "go"}])), daemon=True)
        slow.start()
        deadline = time.monotonic() + 60
        while not Thread.objects.filter(agent__slug="slowpoke", messages__role="assistant",
                                        messages__internal=True).exists():
            assert time.monotonic() < deadline, "the slow call never started"
            time.sleep(0.05)
        b = openai.OpenAI(base_url=gaia_server.v1, api_key=key_b, max_retries=0
                          ).chat.completions.create(
            model="surrogate", messages=[{"role": "user", "content": "go"}])
        slow.join(60)
        told = [m for m in up.requests[1].body["messages"] if m["role"] == "tool"]
    assert b.choices[0].message.content == "the call failed, as told"
    assert [m["content"] for m in told] == [
        "echo was not called: its arguments hold text that is not valid Unicode (a lone "
        "surrogate)"]
    assert out["a"].choices[0].message.content.startswith(
        "After the long run: Long running operation completed")
    result = Message.objects.get(thread__agent__slug="slowpoke", role="tool")
    assert not result.error
    assert "Connection closed" not in gaia_server.log()[log_start:]
