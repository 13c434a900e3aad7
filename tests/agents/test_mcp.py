"""Agents with MCP servers no one here wrote: the reference servers ``mcp-server-time`` and
``mcp-server-git`` (PyPI, stdio) and ``@modelcontextprotocol/server-everything`` (npm, stdio and
streamable HTTP), installed by the project's own files (pyproject.toml, tests/clients/install.py),
run by a live Gaia for agents on the fake provider scripted to call them; clients are the
official OpenAI and Anthropic SDKs over all three dialects, JSON and stream. Also: a kill during
a slow tool, a server that crashes mid-call, and a Responses client's own MCP server with
OpenAI's approval protocol."""

from __future__ import annotations

import os
import signal
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anthropic
import httpx
import openai
import pytest

from agents.models import McpServer, Message, Thread
from tests.conftest import free_port

pytestmark = pytest.mark.django_db(transaction=True)

ASK = [{"role": "user", "content": "Use your tools."}]


def oai(server: Any, key: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=server.v1, api_key=key, max_retries=0)


def ant(server: Any, key: str) -> anthropic.Anthropic:
    return anthropic.Anthropic(base_url=server.url, api_key=key, max_retries=0)


def script(*calls: tuple[str, dict[str, Any]], reply: str = "Results: {results}") -> list[Any]:
    return [{"tool_calls": [{"name": n, "arguments": a} for n, a in calls]}, {"reply": reply}]


@pytest.fixture
def everything_http(everything_bin: Path, tmp_path: Path) -> Iterator[str]:
    """server-everything over streamable HTTP on a free port; its URL."""
    port = free_port()
    log = (tmp_path / "everything.log").open("wb")
    proc = subprocess.Popen([str(everything_bin), "streamableHttp"], stdout=log,
                            stderr=subprocess.STDOUT, env={**os.environ, "PORT": str(port)})
    url = f"http://127.0.0.1:{port}/mcp"
    deadline = time.monotonic() + 30
    while True:
        try:
            httpx.get(url, timeout=1)
            break
        except httpx.HTTPError:
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError((tmp_path / "everything.log").read_text()) from None
            time.sleep(0.1)
    yield url
    proc.terminate()
    proc.wait(10)
    log.close()


@pytest.fixture
def time_agent(make_agent: Any) -> Any:
    McpServer.objects.create(name="time", command="mcp-server-time")
    return make_agent(slug="clock", tools=["mcp:time"], provider__options={"script": script(
        ("mcp__time__get_current_time", {"timezone": "Europe/Paris"}))})


@pytest.mark.parametrize("stream", [False, True])
def test_time_server_over_responses(gaia_server: Any, api_key: str, time_agent: Any,
                                    stream: bool) -> None:
    client = oai(gaia_server, api_key)
    if not stream:
        response = client.responses.create(model="clock", input=ASK)
    else:
        with client.responses.stream(model="clock", input=ASK) as events:
            kinds = [e.type for e in events]
            response = events.get_final_response()
        assert "response.mcp_list_tools.completed" in kinds
        assert kinds.index("response.mcp_call.completed") < kinds.index(
            "response.output_text.delta")
    listed = next(i for i in response.output if i.type == "mcp_list_tools")
    assert listed.server_label == "time"
    assert {t.name for t in listed.tools} == {"get_current_time", "convert_time"}
    call = next(i for i in response.output if i.type == "mcp_call")
    assert (call.server_label, call.name, call.error) == ("time", "get_current_time", None)
    assert '"timezone": "Europe/Paris"' in call.output
    assert response.output_text.startswith("Results: {")
    assert '"datetime": "' in response.output_text


@pytest.mark.parametrize("stream", [False, True])
def test_time_server_over_chat_completions(gaia_server: Any, api_key: str, time_agent: Any,
                                           stream: bool) -> None:
    client = oai(gaia_server, api_key)
    if not stream:
        message = client.chat.completions.create(model="clock", messages=ASK).choices[0].message
        content, reasoning = message.content, message.model_extra["reasoning_content"]
    else:
        chunks = list(client.chat.completions.create(model="clock", messages=ASK, stream=True))
        content = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
        reasoning = "".join((c.choices[0].delta.model_extra or {}).get("reasoning_content")
                            or "" for c in chunks if c.choices)
        # nothing a client did not ask for: no tool_calls delta reaches it
        assert not any(c.choices[0].delta.tool_calls for c in chunks if c.choices)
    assert "[mcp__time__get_current_time done" in reasoning
    assert '"timezone": "Europe/Paris"' in content


@pytest.mark.parametrize("stream", [False, True])
def test_time_server_over_messages(gaia_server: Any, api_key: str, time_agent: Any,
                                   stream: bool) -> None:
    client = ant(gaia_server, api_key)
    if not stream:
        message = client.messages.create(model="clock", max_tokens=300, messages=ASK)
    else:
        with client.messages.stream(model="clock", max_tokens=300, messages=ASK) as events:
            message = events.get_final_message()
    assert [b.type for b in message.content] == ["thinking", "text"]
    assert "[mcp__time__get_current_time done" in message.content[0].thinking
    assert '"timezone": "Europe/Paris"' in message.content[1].text
    assert message.stop_reason == "end_turn"


def test_git_server_reads_a_repository(gaia_server: Any, api_key: str, make_agent: Any,
                                       tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    repo.mkdir()
    git = ["git", "-C", str(repo), "-c", "user.name=T", "-c", "user.email=t@example.com"]
    subprocess.run(["git", "init", "-q", str(repo)], check=True)
    (repo / "notes.txt").write_text("hello\n")
    subprocess.run([*git, "add", "notes.txt"], check=True)
    subprocess.run([*git, "commit", "-q", "-m", "First light"], check=True)
    (repo / "notes.txt").write_text("hello again\n")
    McpServer.objects.create(name="files", command="mcp-server-git",
                             args=["--repository", str(repo)], require_approval="never")
    make_agent(slug="gitter", tools=["mcp:files"], provider__options={"script": script(
        ("mcp__files__git_log", {"repo_path": str(repo), "max_count": 1}),
        ("mcp__files__git_diff_unstaged", {"repo_path": str(repo)}))})
    raw = oai(gaia_server, api_key).chat.completions.with_raw_response.create(
        model="gitter", messages=ASK)
    content = raw.parse().choices[0].message.content
    assert "First light" in content  # the log
    assert "+hello again" in content  # the diff
    # both calls of the round ran, each stored with its duration
    results = Message.objects.filter(thread_id=raw.headers["x-gaia-thread-id"], role="tool")
    assert sorted(r.sender for r in results) == ["mcp__files__git_diff_unstaged",
                                                  "mcp__files__git_log"]
    assert all(r.latency_ms is not None and not r.error for r in results)


def test_everything_over_stdio_with_allowed_tools(gaia_server: Any, api_key: str,
                                                   make_agent: Any, everything_bin: Path) -> None:
    McpServer.objects.create(name="ev", command=str(everything_bin), args=["stdio"],
                             allowed_tools=["echo", "get-sum"])
    make_agent(slug="everything", tools=["mcp:ev"], provider__options={"script": script(
        ("mcp__ev__echo", {"message": "hi there"}), ("mcp__ev__get-sum", {"a": 2, "b": 3}),
        ("mcp__ev__get-env", {}))})  # not allowed: never offered, so never called
    response = oai(gaia_server, api_key).responses.create(model="everything", input=ASK)
    listed = next(i for i in response.output if i.type == "mcp_list_tools")
    assert sorted(t.name for t in listed.tools) == ["echo", "get-sum"]
    calls = [i for i in response.output if i.type == "mcp_call"]
    assert [(c.name, c.output) for c in calls] == [("echo", "Echo: hi there"),
                                                  ("get-sum", "The sum of 2 and 3 is 5.")]
    assert response.output_text == "Results: Echo: hi there; The sum of 2 and 3 is 5."


def test_everything_over_streamable_http(gaia_server: Any, api_key: str, make_agent: Any,
                                         everything_http: str) -> None:
    McpServer.objects.create(name="evh", url=everything_http)
    make_agent(slug="remote", tools=["mcp:evh"], provider__options={"script": script(
        ("mcp__evh__echo", {"message": "over http"}))})
    with ant(gaia_server, api_key).messages.stream(model="remote", max_tokens=200,
                                                   messages=ASK) as events:
        message = events.get_final_message()
    assert message.content[-1].text == "Results: Echo: over http"


def _children(pid: int, needle: str) -> list[int]:
    """Processes whose parent is ``pid`` and whose command line holds ``needle``."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode()
        except OSError:
            continue
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        if ppid == pid and needle in cmdline:
            found.append(int(entry.name))
    return found


def _wait_for(predicate: Any, what: str, timeout: float = 60) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


@pytest.fixture
def slow_agent(make_agent: Any, everything_bin: Path) -> Any:
    McpServer.objects.create(name="slow", command=str(everything_bin), args=["stdio"])
    return make_agent(slug="slowpoke", tools=["mcp:slow"], provider__options={"script": script(
        ("mcp__slow__trigger-long-running-operation", {"duration": 120, "steps": 2}),
        reply="After the long run: {results}")})


def _in_background(fn: Any) -> tuple[threading.Thread, dict[str, Any]]:
    out: dict[str, Any] = {}

    def run() -> None:
        try:
            out["value"] = fn()
        except Exception as exc:  # noqa: BLE001 - the test reads it
            out["error"] = exc

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread, out


def _running_call(agent: str) -> Thread:
    """The agent's thread once its tool call is stored (the tool is running)."""
    return _wait_for(lambda: Thread.objects.filter(
        agent__slug=agent, messages__internal=True, messages__role="assistant").first(),
        "the tool call")


def test_kill_during_a_slow_tool_stops_it_and_the_turn(gaia_server: Any, api_key: str,
                                                       make_key: Any, slow_agent: Any) -> None:
    client = oai(gaia_server, api_key)
    worker, out = _in_background(lambda: list(client.chat.completions.create(
        model="slowpoke", messages=ASK, stream=True)))
    thread = _running_call("slowpoke")
    _, operator = make_key("ops", scopes=["operator"])
    r = httpx.post(f"{gaia_server.url}/api/v1/threads/{thread.pk}/kill",
                   headers={"Authorization": f"Bearer {operator}"}, timeout=10)
    assert r.status_code == 202
    worker.join(60)  # the tool would run 120 s: only a kill ends the turn before
    assert not worker.is_alive()
    assert "value" in out or isinstance(out.get("error"), openai.APIError), out
    thread.refresh_from_db()
    assert thread.status == "killed"
    reply = Message.objects.get(thread=thread, role="assistant", internal=False)
    assert reply.finish_reason == "killed"
    # the call never produced a result; the server it ran on is still there and answers
    assert not Message.objects.filter(thread=thread, role="tool").exists()
    assert _children(gaia_server.process.pid, "mcp-server-everything")


def test_a_server_that_crashes_mid_call_is_an_error_result_and_restarts(
        gaia_server: Any, api_key: str, slow_agent: Any, everything_bin: Path,
        make_agent: Any) -> None:
    client = oai(gaia_server, api_key)
    worker, out = _in_background(lambda: client.chat.completions.with_raw_response.create(
        model="slowpoke", messages=ASK))
    thread = _running_call("slowpoke")
    pids = _wait_for(lambda: _children(gaia_server.process.pid, "mcp-server-everything"),
                     "the stdio server")
    for pid in pids:
        os.kill(pid, signal.SIGKILL)
    worker.join(60)
    assert not worker.is_alive()
    raw = out["value"]
    content = raw.parse().choices[0].message.content
    assert content.startswith("After the long run: trigger-long-running-operation failed")
    result = Message.objects.get(thread=thread, role="tool")
    assert result.error.startswith("trigger-long-running-operation failed")
    assert Thread.objects.get(pk=thread.pk).status == "completed"
    # the next call starts the server again
    make_agent(slug="echoer", tools=["mcp:slow"], provider__options={"script": script(
        ("mcp__slow__echo", {"message": "back"}))})
    again = client.chat.completions.create(model="echoer", messages=ASK)
    assert again.choices[0].message.content == "Results: Echo: back"
    assert "MCP call slow.trigger-long-running-operation failed" in gaia_server.log()


# -- a Responses client's own MCP server ----------------------------------------------------


def test_a_clients_mcp_server_must_be_allowed(gaia_server: Any, api_key: str, make_agent: Any,
                                              everything_http: str) -> None:
    make_agent(slug="plain", provider__options={})
    with pytest.raises(openai.BadRequestError) as caught:
        oai(gaia_server, api_key).responses.create(model="plain", input="hi", tools=[
            {"type": "mcp", "server_label": "ev", "server_url": everything_http,
             "require_approval": "never"}])
    error = caught.value.body
    assert error["param"] == "tools[0].server_url"
    assert "GAIA_MCP_ALLOWED_URLS" in error["message"]
    assert error["code"] == "mcp_server_not_allowed"


@pytest.fixture
def allowing_server(gaia_server_factory: Any, everything_http: str) -> Any:
    prefix = everything_http.rsplit("/", 1)[0] + "/*"
    return gaia_server_factory(GAIA_MCP_ALLOWED_URLS=f"http://127.0.0.1:1/none,{prefix}")


@pytest.fixture
def client_tool(everything_http: str) -> Any:
    def tool(require_approval: Any) -> dict[str, Any]:
        return {"type": "mcp", "server_label": "ev", "server_url": everything_http,
                "require_approval": require_approval, "allowed_tools": ["echo", "get-sum"],
                "headers": {"X-Trace": "test"}}

    return tool


@pytest.fixture
def plain_agent(make_agent: Any) -> Any:
    return make_agent(slug="asker", provider__options={"script": script(
        ("mcp__ev__echo", {"message": "approved words"}))})


def test_a_clients_mcp_server_without_approval(allowing_server: Any, api_key: str,
                                               plain_agent: Any, client_tool: Any) -> None:
    response = oai(allowing_server, api_key).responses.create(
        model="asker", input="go", tools=[client_tool("never")])
    listed = next(i for i in response.output if i.type == "mcp_list_tools")
    assert (listed.server_label, sorted(t.name for t in listed.tools)) == ("ev", ["echo",
                                                                               "get-sum"])
    call = next(i for i in response.output if i.type == "mcp_call")
    assert (call.name, call.output, call.approval_request_id) == ("echo", "Echo: approved words",
                                                                  None)
    assert response.output_text == "Results: Echo: approved words"
    assert response.tools[0].type == "mcp"
    assert response.tools[0].headers is None  # the client's headers are not echoed


@pytest.mark.parametrize("approve", [True, False])
def test_a_clients_approval_ends_the_response_and_its_answer_continues_it(
        allowing_server: Any, api_key: str, plain_agent: Any, client_tool: Any,
        approve: bool) -> None:
    client = oai(allowing_server, api_key)
    with client.responses.stream(model="asker", input="go",
                                 tools=[client_tool("always")]) as events:
        kinds = [e.type for e in events]
        first = events.get_final_response()
    assert first.status == "completed"
    asked = [i for i in first.output if i.type == "mcp_approval_request"]
    assert len(asked) == 1
    assert (asked[0].server_label, asked[0].name) == ("ev", "echo")
    assert asked[0].arguments == '{"message": "approved words"}'
    assert not [i for i in first.output if i.type in ("mcp_call", "message")]
    assert "response.output_item.done" in kinds
    second = client.responses.create(
        model="asker", previous_response_id=first.id, tools=[client_tool("always")],
        input=[{"type": "mcp_approval_response", "approve": approve,
                "approval_request_id": asked[0].id, "reason": "looks fine" if approve else
                "not today"}])
    call = next(i for i in second.output if i.type == "mcp_call")
    assert call.approval_request_id == asked[0].id
    if approve:
        assert call.output == "Echo: approved words"
        assert second.output_text == "Results: Echo: approved words"
    else:
        assert call.output is None
        assert call.error is not None
        assert second.output_text == "Results: mcp__ev__echo was not run: the client denied " \
            "it: not today."
    # an answer counts once
    with pytest.raises(openai.BadRequestError) as caught:
        client.responses.create(
            model="asker", previous_response_id=second.id, tools=[client_tool("always")],
            input=[{"type": "mcp_approval_response", "approve": True,
                    "approval_request_id": asked[0].id}])
    assert caught.value.body["code"] == "approval_answered"


def test_stdio_servers_stop_with_the_server_process(gaia_server_factory: Any, api_key: str,
                                                    make_agent: Any, everything_bin: Path) -> None:
    server = gaia_server_factory()
    McpServer.objects.create(name="ev", command=str(everything_bin), args=["stdio"])
    make_agent(slug="echoer", tools=["mcp:ev"], provider__options={"script": script(
        ("mcp__ev__echo", {"message": "once"}))})
    assert oai(server, api_key).chat.completions.create(
        model="echoer", messages=ASK).choices[0].message.content == "Results: Echo: once"
    children = _children(server.process.pid, "mcp-server-everything")
    assert len(children) == 1  # started once, on first use
    server.stop()  # SIGTERM: the lifespan's shutdown closes the process's MCP connections
    _wait_for(lambda: not Path(f"/proc/{children[0]}").exists()
              or "Z" in Path(f"/proc/{children[0]}/stat").read_text().split(")")[1][:3],
              "the stdio server to stop", timeout=30)


def test_an_mcp_servers_env_and_header_values_never_leave_gaia(
        gaia_server: Any, api_key: str, make_agent: Any, make_key: Any,
        everything_bin: Path) -> None:
    """Issue 26 item 2: a server that prints its environment (``get-env``) is told its
    configured env values back as ``[redacted]``: not in the tool result, the reply, the
    stored messages or the API."""
    secret = "mcp-env-SECRET-cccc3333"
    McpServer.objects.create(name="ev", command=str(everything_bin), args=["stdio"],
                             env={"GAIA_TEST_TOKEN": secret}, allowed_tools=["get-env"])
    make_agent(slug="everything", tools=["mcp:ev"], provider__options={"script": script(
        ("mcp__ev__get-env", {}))})
    response = oai(gaia_server, api_key).responses.create(model="everything", input=ASK)
    call = next(i for i in response.output if i.type == "mcp_call")
    assert "GAIA_TEST_TOKEN" in call.output  # the server did print its environment
    assert "[redacted]" in call.output
    assert secret not in response.model_dump_json()
    assert not Message.objects.filter(content__contains=secret).exists()
    thread = Thread.objects.get()
    _, ops = make_key("ops", scopes=["operator"])
    shown = httpx.get(f"{gaia_server.url}/api/v1/threads/{thread.pk}", timeout=30,
                      headers={"Authorization": f"Bearer {ops}"})
    assert shown.status_code == 200
    assert secret not in shown.text
