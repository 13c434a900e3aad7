"""A thread always ends: every way a turn can stop leaves its thread ``completed``, ``error``
(failed or interrupted) or ``killed``, never ``active`` or ``waiting`` (agents/turns/ending.py).
Against live servers, with the official OpenAI SDK or a raw stream as the client: a client
gone mid-stream, an operator's kill or a client gone while a tool waits for an approval, a
parent turn killed or abandoned while the agent it delegated to opens or answers, a server
killed while a turn waits for an approval."""

from __future__ import annotations

import signal
import sys
import time
import uuid
from typing import Any

import httpx
import pytest

from agents.models import Approval, AuditEvent, McpServer, Message, Thread
from tests.agents.test_approvals import ASK, CALC, ask_in_background, pending

pytestmark = pytest.mark.django_db(transaction=True)

ENDED = ("completed", "error", "killed")


@pytest.fixture
def operator(make_key: Any) -> dict[str, str]:
    return {"Authorization": f"Bearer {make_key('ops', scopes=['operator'])[1]}"}


def ended(thread_id: Any, timeout: float = 40) -> Thread:
    """The thread once its turn is recorded (its lease released) and no approval of it is
    left pending: what stays of it."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        thread = Thread.objects.get(pk=thread_id)
        if thread.lock_token == "" and not Approval.objects.filter(
                thread_id=thread_id, status=Approval.Status.PENDING).exists():
            time.sleep(0.3)  # anything still on its way to the database lands meanwhile
            thread.refresh_from_db()
            return thread
        time.sleep(0.05)
    thread = Thread.objects.get(pk=thread_id)
    raise AssertionError(f"thread {thread_id} never ended: {thread.status}, lease "
                         f"{thread.lock_expires_at}")


def last_reply(thread_id: Any) -> Message:
    return Message.objects.filter(thread_id=thread_id, role="assistant").latest("seq")


def stream(server: Any, key: str, model: str) -> Any:
    return httpx.stream("POST", f"{server.v1}/chat/completions", timeout=60,
                        headers={"Authorization": f"Bearer {key}"},
                        json={"model": model, "messages": ASK, "stream": True})


def test_a_client_gone_mid_stream_ends_its_thread(gaia_server: Any, api_key: str,
                                                 make_agent: Any) -> None:
    make_agent(slug="slow", provider__options={"reply": " ".join(["word"] * 300),
                                               "delay_ms": 50})
    with stream(gaia_server, api_key, "slow") as r:
        thread_id = r.headers["x-gaia-thread-id"]
        for line in r.iter_lines():
            if '"content"' in line:
                break  # the reply has begun: go away
    thread = ended(thread_id)
    assert thread.status == "error"
    assert last_reply(thread_id).finish_reason == "client_disconnected"


@pytest.mark.parametrize("how", ["kill", "client_gone"])
def test_a_turn_stopped_while_a_tool_waits_for_approval_ends(
        gaia_server: Any, api_key: str, operator: dict[str, str], make_agent: Any,
        how: str) -> None:
    """Three times over (on PostgreSQL the approval's settling raced the turn's record and
    left the thread ``active``)."""
    make_agent(slug="careful", tools=["calculator"], require_approval="always",
               approval_timeout_seconds=120, provider__options={"script": CALC})
    for _ in range(3):
        if how == "kill":
            worker, out = ask_in_background(gaia_server, api_key, "careful", stream=True)
            approval = pending(gaia_server, operator)
            r = httpx.post(f"{gaia_server.url}/api/v1/threads/{approval['thread_id']}/kill",
                           headers=operator, timeout=10)
            assert r.status_code == 202, r.text
            worker.join(60)
        else:
            with stream(gaia_server, api_key, "careful"):
                approval = pending(gaia_server, operator)
        thread = ended(approval["thread_id"])
        expected = ("killed", "killed") if how == "kill" else ("error", "client_disconnected")
        assert (thread.status, last_reply(thread.pk).finish_reason) == expected
        assert Approval.objects.get(pk=approval["id"]).status == "expired"


@pytest.fixture
def hang_server() -> str:
    """An MCP server that never answers ``initialize``: an agent using it waits while its turn
    opens (up to agents.tools.mcp.CONNECT_SECONDS). A name of its own per test: the server
    process keeps its connections by name."""
    name = f"hang{uuid.uuid4().hex[:8]}"
    McpServer.objects.create(name=name, command=sys.executable,
                             args=["-c", "import time; time.sleep(120)"])
    return name


@pytest.mark.parametrize(("how", "child_is"), [
    ("kill", "opening"), ("kill", "answering"), ("client_gone", "answering"),
    ("client_gone", "opening")])
def test_a_parent_stopped_ends_the_turn_it_delegated_to(
        gaia_server: Any, api_key: str, operator: dict[str, str], make_agent: Any,
        hang_server: str, how: str, child_is: str) -> None:
    if child_is == "opening":
        make_agent(slug="worker", tools=[f"mcp:{hang_server}"],
                   provider__options={"reply": "done"})
    else:
        make_agent(slug="worker", provider__options={"fail": "timeout"})
    make_agent(slug="boss", tools=["agent:worker"], provider__name="boss", provider__options={
        "script": [{"tool_calls": [{"name": "agent__worker", "arguments": {"task": "work"}}]},
                   {"reply": "Boss: {results}"}]})

    def child() -> Thread | None:
        return Thread.objects.filter(agent__slug="worker").first()

    def wait_child() -> Thread:
        deadline = time.monotonic() + 30
        while child() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        found = child()
        assert found is not None, "the boss never delegated"
        time.sleep(0.5)  # the child is well into opening (its MCP server) or answering
        return found

    if how == "kill":
        worker, _ = ask_in_background(gaia_server, api_key, "boss", stream=True)
        little = wait_child()
        parent = Thread.objects.get(agent__slug="boss")
        r = httpx.post(f"{gaia_server.url}/api/v1/threads/{parent.pk}/kill", headers=operator,
                       timeout=10)
        assert r.status_code == 202, r.text
        worker.join(60)
    else:
        with stream(gaia_server, api_key, "boss"):
            little = wait_child()
        parent = Thread.objects.get(agent__slug="boss")
    parent, little = ended(parent.pk), ended(little.pk)
    if how == "kill":
        assert (parent.status, little.status) == ("killed", "killed")
        assert last_reply(little.pk).finish_reason == "killed"
    else:
        assert (parent.status, little.status) == ("error", "error")
        assert last_reply(parent.pk).finish_reason == "client_disconnected"
        assert last_reply(little.pk).finish_reason == "cancelled"


def test_a_turn_is_recorded_after_its_stopped_tools_have_stopped(
        gaia_server: Any, api_key: str, operator: dict[str, str], make_agent: Any) -> None:
    """A parent's client goes away while the agent it delegated to waits for an approval.
    The delegation is a tool of the parent's round, and stopping takes it a while (the child
    stops its own round, settles its approval, records its end): the parent's turn waits for
    its tools to stop before it records its own end, so nothing of the tree lands after the
    parent's record (a round's cancelled tools used to run on after it)."""
    make_agent(slug="worker", tools=["calculator"], require_approval="always",
               approval_timeout_seconds=120, provider__options={"script": CALC})
    make_agent(slug="boss", tools=["agent:worker"], provider__name="boss", provider__options={
        "script": [{"tool_calls": [{"name": "agent__worker", "arguments": {"task": "6 * 7"}}]},
                   {"reply": "Boss: {results}"}]})
    with stream(gaia_server, api_key, "boss") as r:
        parent_id = r.headers["x-gaia-thread-id"]
        approval = pending(gaia_server, operator)  # the child waits: the client goes away
    parent, little = ended(parent_id), ended(approval["thread_id"])
    assert little.pk != parent.pk
    assert (parent.status, little.status) == ("error", "error")
    parent_end, child_end = last_reply(parent.pk), last_reply(little.pk)
    assert (parent_end.finish_reason, child_end.finish_reason) == (
        "client_disconnected", "cancelled")
    settled = Approval.objects.get(pk=approval["id"])
    assert settled.status == "expired"
    assert child_end.pk < parent_end.pk  # the child's end was stored first
    assert settled.decided_at <= child_end.created_at <= parent_end.created_at


def test_a_server_killed_while_a_tool_waits_for_approval_ends_its_thread_on_restart(
        gaia_server_factory: Any, api_key: str, operator: dict[str, str],
        make_agent: Any) -> None:
    settings = {"GAIA_THREAD_LOCK_SECONDS": "1.5"}
    make_agent(slug="careful", tools=["calculator"], require_approval="always",
               approval_timeout_seconds=120, provider__options={"script": CALC})
    first = gaia_server_factory(**settings)
    worker, _ = ask_in_background(first, api_key, "careful", stream=True)
    approval = pending(first, operator)
    assert Thread.objects.get(pk=approval["thread_id"]).status == "waiting"
    first.process.send_signal(signal.SIGKILL)
    first.process.wait(10)
    worker.join(30)
    second = gaia_server_factory(**settings)  # its start sweeps what the dead process left
    deadline = time.monotonic() + 30
    while Thread.objects.get(pk=approval["thread_id"]).lock_token and (
            time.monotonic() < deadline):
        time.sleep(0.1)
    thread = Thread.objects.get(pk=approval["thread_id"])
    assert thread.status == "error"
    assert last_reply(thread.pk).finish_reason == "interrupted"
    # Its approval ended with it: no one is left to act on a decision, so no operator is
    # offered one (the inbox is empty, deciding it is a conflict), and the trail says so.
    row = Approval.objects.get(pk=approval["id"])
    assert (row.status, row.decided_by) == ("expired", "system")
    assert httpx.get(f"{second.url}/api/v1/approvals", headers=operator,
                     timeout=10).json()["results"] == []
    r = httpx.post(f"{second.url}/api/v1/approvals/{approval['id']}", headers=operator,
                   json={"decision": "approve"}, timeout=10)
    assert r.status_code == 409, r.text
    trail = AuditEvent.objects.filter(target=f"approval:{approval['id']}")
    assert list(trail.values_list("actor", "action")) == [("system", "expire")]
