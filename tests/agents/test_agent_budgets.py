"""Every budget an agent has is finite by default (issue 35): a model that does whatever the
user's message says cannot make one request run unbounded tool calls, turns, threads or pending
approvals. Past a limit the call is an error result naming the limit, and the request still
answers 200. Also: a round of many calls, and a NUL in a tool's result, store on PostgreSQL
(they were 500s). Against a live server through the official OpenAI SDK, with the fake
provider scripted as an attacker's model."""

from __future__ import annotations

import json
import uuid
from pathlib import Path
from typing import Any

import openai
import pytest

from agents.models import Agent, Approval, AuditEvent, McpServer, Message, Thread
from tests.agents.test_mcp import allowing_server, everything_http  # noqa: F401 - fixtures
from tests.agents.test_teams_http import make_team
from tests.fakes import Reply, ToolCallSpec
from tests.fakes.openai_upstream import FakeOpenAIUpstream

pytestmark = pytest.mark.django_db(transaction=True)

ASK = [{"role": "user", "content": "Do as you are told."}]


def oai(server: Any, key: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=server.v1, api_key=key, max_retries=0, timeout=300)


def script(calls: list[tuple[str, dict[str, Any]]], reply: str = "R: {results}"
           ) -> dict[str, Any]:
    return {"script": [{"tool_calls": [{"name": n, "arguments": a} for n, a in calls]},
                       {"reply": reply}]}


def ask(server: Any, key: str, model: str) -> tuple[str, str]:
    """The reply's text and its thread (a 200, or the SDK raises)."""
    raw = oai(server, key).chat.completions.with_raw_response.create(model=model, messages=ASK)
    return raw.parse().choices[0].message.content, raw.headers["x-gaia-thread-id"]


def test_a_round_runs_at_most_its_limit_of_calls(gaia_server: Any, api_key: str,
                                                make_agent: Any) -> None:
    """40 calls in one round: the first 16 run (GAIA_MAX_TOOL_CALLS_PER_ROUND), the rest are
    error results saying why; every call has its result, stored; the reply says so."""
    calls = [("calculator", {"expression": f"{i} + 1"}) for i in range(40)]
    make_agent(slug="greedy", tools=["calculator"], provider__options=script(calls))
    content, thread_id = ask(gaia_server, api_key, "greedy")
    results = content.removeprefix("R: ").split("; ")
    assert results[:16] == [str(i + 1) for i in range(16)]
    assert len(results) == 40
    assert set(results[16:]) == {
        "calculator was not run: at most 16 calls run in a round (GAIA_MAX_TOOL_CALLS_PER_ROUND)."}
    rows = Message.objects.filter(thread_id=thread_id, role="tool")
    assert rows.count() == 40
    assert rows.exclude(error="").count() == 24
    reply = Message.objects.get(thread_id=thread_id, internal=False, role="assistant")
    assert "24 of a round's 40 tool calls were not run" in reply.note
    assert Thread.objects.get(pk=thread_id).status == "completed"


def test_nine_calculator_calls_are_stored(gaia_server: Any, api_key: str,
                                         make_agent: Any) -> None:
    """A round of nine calls of one tool was "calculator, calculator, ..." in a varchar(100):
    a 500 on PostgreSQL. The round names each tool it calls once."""
    calls = [("calculator", {"expression": f"{i} * 2"}) for i in range(9)] + [
        ("current_time", {"timezone": "UTC"})]
    make_agent(slug="counter", tools=["calculator", "current_time"],
               provider__options=script(calls))
    content, thread_id = ask(gaia_server, api_key, "counter")
    assert content.startswith("R: 0; 2; 4; 6; 8; 10; 12; 14; 16; ")
    call = Message.objects.get(thread_id=thread_id, role="assistant", internal=True)
    assert call.recipient == "calculator, current_time"
    assert len(call.tool_calls) == 10
    assert Message.objects.filter(thread_id=thread_id, role="tool").count() == 10


def test_mcp_calls_and_nul_characters_are_stored(gaia_server: Any, api_key: str,
                                                make_agent: Any, everything_bin: Path) -> None:
    """Seven calls of an MCP server's tool in one round (a 500 on PostgreSQL from five), with
    NUL characters (which no PostgreSQL text column takes: a 500 too) in a tool's result, in
    the model's text and in a call's arguments. The NULs are left out of what the model, the
    feed and the thread get; the upstream's answer is the reply."""
    McpServer.objects.create(name="everything", command=str(everything_bin), args=["stdio"],
                             allowed_tools=["echo"])
    calls = [ToolCallSpec("mcp__everything__echo", json.dumps({"message": f"n{i}"}),
                          id=f"call_{i}") for i in range(5)]
    calls += [ToolCallSpec("mcp__everything__echo", json.dumps({"message": "nul\u0000here"}),
                           id="call_5"),
              ToolCallSpec("mcp__everything__echo", '{"message": "raw\u0000nul"}',
                           id="call_6")]
    with FakeOpenAIUpstream(tokens=4) as up:
        up.script(Reply(text="Echoing\u0000 now.", tool_calls=calls),
                  Reply(text="All echoed."))
        make_agent(slug="echoes", tools=["mcp:everything"], provider__kind="openai",
                   provider__base_url=up.base_url, provider__name="fake-openai-upstream")
        content, thread_id = ask(gaia_server, api_key, "echoes")
        sent = [m for m in up.requests[1].body["messages"] if m["role"] == "tool"]
    assert content == "Echoing now.All echoed."  # the text of every round, NUL left out
    assert [m["content"] for m in sent][:6] == [
        "Echo: n0", "Echo: n1", "Echo: n2", "Echo: n3", "Echo: n4", "Echo: nulhere"]
    assert sent[6]["content"].startswith("mcp__everything__echo: the arguments are not a JSON")
    call = Message.objects.get(thread_id=thread_id, role="assistant", internal=True)
    assert (call.recipient, call.content) == ("mcp__everything__echo", "Echoing now.")
    assert call.tool_calls[6]["arguments"] == '{"message": "rawnul"}'
    results = list(Message.objects.filter(thread_id=thread_id, role="tool").order_by("seq"))
    assert [r.content for r in results][:6] == [m["content"] for m in sent][:6]
    assert all(r.sender == "mcp__everything__echo" for r in results)
    assert Thread.objects.get(pk=thread_id).status == "completed"


def test_a_delegation_fan_out_stays_within_the_request_budget(gaia_server: Any, api_key: str,
                                                              make_agent: Any) -> None:
    """An agent that asks itself six times a round, three deep, made 1 + 6 + 36 + 216
    threads for one request; the request's budget (GAIA_MAX_TURNS_PER_REQUEST, 20) stops it
    at 20 turns in all, each in its thread, and the calls past it are error results that
    reach the first agent's answer. Every upstream request is a round or a reply stored:
    two per turn here."""
    fan = [("agent__fan", {"task": "Ask yourself again."})] * 6
    make_agent(slug="fan", tools=["agent:fan"], provider__options=script(fan, "F({results})"))
    content, thread_id = ask(gaia_server, api_key, "fan")
    assert "GAIA_MAX_TURNS_PER_REQUEST" in content
    assert Thread.objects.count() == 20
    upstream = Message.objects.filter(role="assistant").count()  # a round or a reply each
    assert upstream == 2 * 20
    assert set(Thread.objects.values_list("status", flat=True)) == {"completed"}
    top = Thread.objects.get(pk=thread_id)
    assert top.parent_message is None
    assert Thread.objects.filter(parent_message__isnull=True).count() == 1


def test_a_team_whose_agents_fan_out_stays_within_the_request_budget(
        gaia_server: Any, api_key: str, make_agent: Any) -> None:
    """A team (collaborate) whose leader and members all have the fanning agent as a tool and
    a model that calls it six times a round: the whole request still starts at most
    GAIA_MAX_TURNS_PER_REQUEST (20) turns, each in its thread. A member's work is one call of
    its model with no tool (stored in the team's thread); the answer's turn delegates within
    the request's one budget."""
    fan = [("agent__fan", {"task": "Ask yourself again."})] * 6
    options = script(fan, "F({results})")
    make_agent(slug="fan", tools=["agent:fan"], provider__options=options)
    team = make_team(make_agent, "crowd", "collaborate",
                     [(f"crowd-{i}", dict(options)) for i in range(3)], leader_options=options)
    for agent in Agent.objects.filter(pk__in=[team.leader_id, *team.memberships.values_list(
            "agent_id", flat=True)]):
        agent.tools = ["agent:fan"]
        agent.save()
    content, thread_id = ask(gaia_server, api_key, "team/crowd")
    assert "GAIA_MAX_TURNS_PER_REQUEST" in content
    assert Thread.objects.count() == 20
    assert Thread.objects.filter(parent_message__isnull=True).get().pk == uuid.UUID(thread_id)
    assert set(Thread.objects.values_list("status", flat=True)) == {"completed"}


def test_delegated_turns_run_within_the_concurrency_limit(gaia_server_factory: Any,
                                                          api_key: str,
                                                          make_agent: Any) -> None:
    """GAIA_MAX_CONCURRENT_DELEGATIONS=1: the three callees of one round run one after the
    other (each thread's turn ends before the next one's begins); unbounded, they overlapped."""
    server = gaia_server_factory(GAIA_MAX_CONCURRENT_DELEGATIONS="1")
    make_agent(slug="boss", tools=["agent:slow"], provider__options=script(
        [("agent__slow", {"task": f"Job {i}"}) for i in range(3)]))
    make_agent(slug="slow", provider__options={"reply": "done", "ttft_ms": 300})
    content, _ = ask(server, api_key, "boss")
    assert content == "R: done; done; done"
    spans = sorted(Thread.objects.filter(agent__slug="slow").values_list(
        "created_at", "updated_at"))
    assert len(spans) == 3
    for (_, ended), (began, _) in zip(spans, spans[1:], strict=False):
        assert ended <= began


def test_a_long_result_is_cut_to_the_limit(gaia_server: Any, api_key: str,
                                          make_agent: Any) -> None:
    """A delegated agent's answer is a tool result like any other: cut at
    GAIA_MAX_TOOL_RESULT_CHARS (20,000), saying so, in what the model and the thread get."""
    make_agent(slug="asker", tools=["agent:talker"], max_output_tokens=20_000,
               provider__options=script([("agent__talker", {"task": "Talk."})], "{results}"))
    make_agent(slug="talker", max_output_tokens=20_000,
               provider__options={"reply": "word " * 8000})
    content, thread_id = ask(gaia_server, api_key, "asker")
    cut = "\n[output cut at 20000 of 40000 characters (GAIA_MAX_TOOL_RESULT_CHARS)]"
    assert content == "word " * 4000 + cut
    assert Message.objects.get(thread_id=thread_id, role="tool").content == "word " * 4000 + cut


def test_pending_approvals_per_thread_are_capped_and_every_outcome_audited(
        gaia_server: Any, api_key: str, make_agent: Any) -> None:
    """A round of 15 calls that each need an operator's approval opened 15 (and 200 in the
    report's attack): 10 wait (GAIA_MAX_PENDING_APPROVALS), the other 5 are refused at once,
    and the audit trail has each refusal and, when nobody decided, each expiry."""
    calls = [("calculator", {"expression": f"{i} + 0"}) for i in range(15)]
    make_agent(slug="needy", tools=["calculator"], require_approval="always",
               approval_timeout_seconds=1, provider__options=script(calls))
    content, thread_id = ask(gaia_server, api_key, "needy")
    results = content.removeprefix("R: ").split("; ")
    assert len(results) == 15
    refused = [r for r in results if "GAIA_MAX_PENDING_APPROVALS" in r]
    expired = [r for r in results if "nobody approved it within 1 s" in r]
    assert (len(refused), len(expired)) == (5, 10)
    assert refused[0] == ("calculator was not run: this thread has 10 tool calls waiting for "
                          "approval already (GAIA_MAX_PENDING_APPROVALS).")
    assert Approval.objects.filter(thread_id=thread_id).count() == 10
    assert set(Approval.objects.values_list("status", flat=True)) == {"expired"}
    trail = AuditEvent.objects.order_by("pk")
    assert set(trail.values_list("action", flat=True)) == {"expire", "refuse"}
    refusals = trail.filter(action="refuse")
    assert refusals.count() == 5
    assert {(e.actor, e.channel, e.target) for e in refusals} == {
        ("system", "system", f"thread:{thread_id}")}
    assert refusals[0].detail["limit"] == 10
    expiries = trail.filter(action="expire")
    assert sorted(e.target for e in expiries) == sorted(
        f"approval:{a.pk}" for a in Approval.objects.all())
    assert {json.dumps(e.detail["thread"]) for e in expiries} == {json.dumps(thread_id)}
    assert Thread.objects.get(pk=thread_id).status == "completed"


async def _chat(api_key: str, model: str) -> Any:
    from django.test import AsyncClient

    return await AsyncClient().post(
        "/v1/chat/completions", content_type="application/json",
        data=json.dumps({"model": model, "messages": ASK}),
        headers={"Authorization": f"Bearer {api_key}"})


async def test_a_round_the_database_refuses_does_not_lose_the_answer(
        api_key: str, make_agent: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """Storing a round of tool calls failed (a column too short, a NUL): the turn went down
    with it, a 500, and the upstream's answer was never asked for. Now the turn goes on and
    answers; its reply says what could not be stored."""
    from asgiref.sync import sync_to_async
    from django.db import DataError

    from agents import services

    await sync_to_async(make_agent)(slug="calc", tools=["calculator"], provider__options=script(
        [("calculator", {"expression": "6 * 7"})]))
    stored = services.inner_messages_store

    def refusing(**kwargs: Any) -> Any:
        if kwargs["messages"][0].role == "tool":
            raise DataError("value too long for type character varying(100)")
        return stored(**kwargs)

    monkeypatch.setattr(services, "inner_messages_store", refusing)
    r = await _chat(api_key, "calc")
    assert r.status_code == 200, r.content
    assert r.json()["choices"][0]["message"]["content"] == "R: 42"
    thread_id = r.headers["x-gaia-thread-id"]
    reply = await Message.objects.aget(thread_id=thread_id, internal=False, role="assistant")
    assert "A tool round could not be stored (DataError)." in reply.note
    assert reply.content == "R: 42"
    assert (await Thread.objects.aget(pk=thread_id)).status == "completed"


async def test_a_reply_the_database_refuses_ends_the_turn_failed(
        api_key: str, make_agent: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """Storing the reply at the end of the turn failed: the client still gets its answer (200,
    no traceback), and the thread ends failed with the reason stored."""
    from asgiref.sync import sync_to_async
    from django.db import DataError

    from agents import services

    await sync_to_async(make_agent)(slug="calc", tools=["calculator"], provider__options=script(
        [("calculator", {"expression": "6 * 7"})]))
    finish = services.thread_turn_finish
    failures: list[str] = []

    def refusing(**kwargs: Any) -> Any:
        if not failures:
            failures.append(kwargs["result"].text)
            raise DataError("value too long for type character varying(40)")
        return finish(**kwargs)

    monkeypatch.setattr(services, "thread_turn_finish", refusing)
    r = await _chat(api_key, "calc")
    assert r.status_code == 200, r.content
    assert r.json()["choices"][0]["message"]["content"] == "R: 42"
    assert failures == ["R: 42"]
    thread = await Thread.objects.aget(pk=r.headers["x-gaia-thread-id"])
    assert (thread.status, thread.last_error) == (
        "error", "The reply could not be stored (DataError).")
    reply = await Message.objects.aget(thread_id=thread.pk, internal=False, role="assistant")
    assert reply.content == "R: 42"


def test_a_clients_pending_approvals_are_capped_and_its_answers_audited(
        allowing_server: Any, everything_http: str, make_key: Any,  # noqa: F811 - fixtures
        make_agent: Any) -> None:
    """A Responses client's own MCP server whose calls the client approves: a round of 12
    asks for 10 approvals (GAIA_MAX_PENDING_APPROVALS), the other 2 are refused (error results,
    audited); the client's answer, a denial here, is in the audit trail under its key."""
    key, secret = make_key("client")
    make_agent(slug="asker", provider__options=script(
        [("mcp__ev__echo", {"message": f"m{i}"}) for i in range(12)]))
    tool = {"type": "mcp", "server_label": "ev", "server_url": everything_http,
            "require_approval": "always", "allowed_tools": ["echo"]}
    client = oai(allowing_server, secret)
    first = client.responses.create(model="asker", input="go", tools=[tool])
    asked = [i for i in first.output if i.type == "mcp_approval_request"]
    refused = [i for i in first.output if i.type == "mcp_call"]
    assert (len(asked), len(refused)) == (10, 2)
    assert all("GAIA_MAX_PENDING_APPROVALS" in str(c.error) for c in refused)
    assert Approval.objects.filter(status="pending", decided_by_client=True).count() == 10
    assert AuditEvent.objects.filter(action="refuse").count() == 2
    client.responses.create(
        model="asker", previous_response_id=first.id, tools=[tool],
        input=[{"type": "mcp_approval_response", "approve": False,
                "approval_request_id": asked[0].id, "reason": "not today"}])
    denial = AuditEvent.objects.get(action="deny")
    answered = Approval.objects.get(status="denied")
    assert (denial.actor, denial.channel, denial.api_key_id, denial.target) == (
        f"key:client ({key.prefix})", "v1", key.pk, f"approval:{answered.pk}")
    assert denial.detail["reason"] == "not today"
