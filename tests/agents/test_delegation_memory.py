"""Agents calling agents (``agent:<slug>``: a child thread per call, linked to the call's
message, two agents deep) and agents remembering (a fact saved in one thread is given to the
model in another, for the same key or user only; operators list and delete memories), against
a live server through the official OpenAI SDK."""

from __future__ import annotations

from typing import Any

import httpx
import openai
import pytest

from agents.models import Memory, Message, Thread

pytestmark = pytest.mark.django_db(transaction=True)


def oai(server: Any, key: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=server.v1, api_key=key, max_retries=0)


def calls(tool: str, task: str, reply: str) -> dict[str, Any]:
    return {"script": [{"tool_calls": [{"name": tool, "arguments": {"task": task}}]},
                       {"reply": reply}]}


@pytest.fixture
def operator(make_key: Any) -> dict[str, str]:
    return {"Authorization": f"Bearer {make_key('ops', scopes=['operator'])[1]}"}


def test_delegation_two_agents_deep(gaia_server: Any, api_key: str, make_agent: Any,
                                    operator: dict[str, str]) -> None:
    make_agent(slug="manager", tools=["agent:lead"],
               provider__options=calls("agent__lead", "Get the worker's greeting", "M: {results}"))
    make_agent(slug="lead", tools=["agent:worker"],
               provider__options=calls("agent__worker", "Say hello", "L: {results}"))
    make_agent(slug="worker", provider__options={"reply": "hello from the worker"})
    raw = oai(gaia_server, api_key).chat.completions.with_raw_response.create(
        model="manager", messages=[{"role": "user", "content": "Ask down the line."}])
    assert raw.parse().choices[0].message.content == "M: L: hello from the worker"

    top = Thread.objects.get(pk=raw.headers["x-gaia-thread-id"])
    middle = Thread.objects.get(agent__slug="lead")
    bottom = Thread.objects.get(agent__slug="worker")
    # each child thread hangs off the message that called it
    assert middle.parent_message.thread_id == top.pk
    assert middle.parent_message.tool_calls[0]["name"] == "agent__lead"
    assert bottom.parent_message.thread_id == middle.pk
    assert bottom.parent_message.tool_calls[0]["name"] == "agent__worker"
    assert top.parent_message is None
    # messages name real senders and recipients between agents (reference 003)
    shown = httpx.get(f"{gaia_server.url}/api/v1/threads/{middle.pk}", headers=operator).json()
    assert [(m["from"], m["to"], m["payload_type"]) for m in shown["messages"]] == [
        ("manager", "lead", "text"), ("lead", "worker", "tool_calls"),
        ("worker", "lead", "tool_result"), ("lead", "manager", "reply")]
    assert shown["messages"][0]["payload"]["content"] == "Get the worker's greeting"
    assert shown["messages"][1]["payload"]["origin"] == "agent"
    top_shown = httpx.get(f"{gaia_server.url}/api/v1/threads/{top.pk}", headers=operator).json()
    result = next(m for m in top_shown["messages"] if m["payload_type"] == "tool_result")
    assert (result["from"], result["to"], result["payload"]["content"]) == (
        "lead", "manager", "L: hello from the worker")
    assert result["latency_ms"] is not None
    # peers: who calls whom
    agents = {a["slug"]: a["peers"] for a in httpx.get(
        f"{gaia_server.url}/api/v1/agents", headers=operator).json()}
    assert (agents["manager"], agents["lead"], agents["worker"]) == (
        ["lead"], ["manager", "worker"], ["lead"])


def test_delegation_stops_at_a_paused_callee(gaia_server: Any, api_key: str,
                                             make_agent: Any) -> None:
    make_agent(slug="boss", tools=["agent:sleeper"],
               provider__options=calls("agent__sleeper", "Wake up", "Boss: {results}"))
    make_agent(slug="sleeper", paused=True, provider__options={"reply": "zzz"})
    done = oai(gaia_server, api_key).chat.completions.create(
        model="boss", messages=[{"role": "user", "content": "Go."}])
    assert done.choices[0].message.content.startswith("Boss: agent__sleeper: ")
    assert "paused" in done.choices[0].message.content
    assert not Thread.objects.filter(agent__slug="sleeper").exists()


REMEMBER = {"script": [
    {"tool_calls": [{"name": "remember", "arguments": {"fact": "The user's cat is called Tom"}}]},
    {"reply": "SYSTEM<{system}>"}]}


def ask(server: Any, key: str, text: str, user: str | None = None) -> str:
    extra = {"user": user} if user else {}
    return oai(server, key).chat.completions.create(
        model="elephant", messages=[{"role": "user", "content": text}],
        **extra).choices[0].message.content


def test_memory_per_key(gaia_server: Any, make_key: Any, make_agent: Any,
                        operator: dict[str, str]) -> None:
    agent = make_agent(slug="elephant", memory="per_key", provider__options=REMEMBER)
    mine, my_key = make_key("mine")
    _, other_key = make_key("theirs")
    first = ask(gaia_server, my_key, "My cat is called Tom, remember it.")
    assert "called Tom" not in first  # learnt in this turn, not known before it
    stored = Memory.objects.get()
    assert (stored.agent_id, stored.scope, stored.text) == (
        agent.pk, f"key:{mine.pk}", "The user's cat is called Tom")
    # another conversation of the same key: the model is given the fact
    second = ask(gaia_server, my_key, "What is my cat called?")
    assert "What you remember from earlier conversations:\n- The user's cat is called Tom" \
        in second
    assert Thread.objects.count() == 2
    # another key's conversation is not (its model remembers it anew, for that key)
    assert "called Tom" not in ask(gaia_server, other_key, "What is my cat called?")
    # operators see and delete it
    url = f"{gaia_server.url}/api/v1/agents/elephant/memories"
    assert len(httpx.get(url, headers=operator).json()["results"]) == 2
    listed = httpx.get(url, headers=operator, params={"scope": f"key:{mine.pk}"}).json()
    assert [(m["scope"], m["text"]) for m in listed["results"]] == [
        (f"key:{mine.pk}", "The user's cat is called Tom")]
    assert listed["results"][0]["thread_id"] is not None
    gone = httpx.delete(f"{url}/{listed['results'][0]['id']}", headers=operator)
    assert gone.status_code == 204
    assert httpx.delete(f"{url}/{listed['results'][0]['id']}", headers=operator
                        ).status_code == 404
    assert "called Tom" not in ask(gaia_server, my_key, "What is my cat called?")


def test_memory_per_user(gaia_server: Any, make_key: Any, make_agent: Any) -> None:
    make_agent(slug="elephant", memory="per_user", provider__options=REMEMBER)
    key, api_key = make_key()
    ask(gaia_server, api_key, "Remember my cat.", user="ann")
    assert Memory.objects.get().scope == f"key:{key.pk}/user:ann"  # ann as this key names her
    assert "called Tom" in ask(gaia_server, api_key, "What is my cat called?", user="ann")
    assert "called Tom" not in ask(gaia_server, api_key, "What is my cat called?", user="bob")
    # no user named: no memory for the turn, so no remember tool is offered
    ask(gaia_server, api_key, "Remember my dog.")
    assert sorted(Memory.objects.values_list("scope", flat=True)) == [
        f"key:{key.pk}/user:ann", f"key:{key.pk}/user:bob"]
    assert not Message.objects.filter(thread__user="", role="tool").exists()
