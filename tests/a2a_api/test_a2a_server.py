"""``/a2a``: Gaia's agents as A2A agents, through the official ``a2a-sdk`` client against a
live server (issue 39)."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Awaitable, Callable
from typing import Any

import httpx
import pytest

pytestmark = pytest.mark.django_db(transaction=True)


async def _with_client(url: str, slug: str, key: str | None, work: Callable[..., Awaitable[Any]],
                       *, streaming: bool = True) -> Any:
    from a2a.client import A2ACardResolver, ClientConfig, ClientFactory

    headers = {"Authorization": f"Bearer {key}"} if key else {}
    async with httpx.AsyncClient(headers=headers, timeout=60) as http:
        card = await A2ACardResolver(http, f"{url}/a2a/{slug}").get_agent_card()
        client = ClientFactory(ClientConfig(httpx_client=http, streaming=streaming)).create(card)
        return await work(client)


def run(server: Any, slug: str, key: str | None, work: Callable[..., Awaitable[Any]],
        **kwargs: Any) -> Any:
    return asyncio.run(_with_client(server.url, slug, key, work, **kwargs))


def message(text: str, **kwargs: Any) -> Any:
    import uuid

    from a2a.types import a2a_pb2 as pb

    return pb.Message(message_id=uuid.uuid4().hex, role=pb.Role.ROLE_USER,
                      parts=[pb.Part(text=text)], **kwargs)


def send(text: str, **kwargs: Any) -> Any:
    from a2a.types import a2a_pb2 as pb

    configuration = kwargs.pop("configuration", None)
    return pb.SendMessageRequest(message=message(text, **kwargs), configuration=configuration)


async def events(client: Any, request: Any) -> list[Any]:
    return [r async for r in client.send_message(request)]


def state(name: str) -> int:
    from a2a.types import a2a_pb2 as pb

    return pb.TaskState.Value(name)


def reply_of(task: Any) -> str:
    return "".join(p.text for a in task.artifacts for p in a.parts)


def rpc(server: Any, slug: str, key: str | None, body: Any, version: str = "1.0"
        ) -> httpx.Response:
    headers = {**({"A2A-Version": version} if version else {}),
               **({"Authorization": f"Bearer {key}"} if key else {})}
    if isinstance(body, bytes):
        return httpx.post(f"{server.url}/a2a/{slug}", content=body, timeout=30,
                          headers={**headers, "Content-Type": "application/json"})
    return httpx.post(f"{server.url}/a2a/{slug}", json=body, headers=headers, timeout=30)


def test_a_card_says_who_the_agent_is_and_how_to_call_it(
        gaia_server: Any, make_agent: Any, make_key: Any, gaia_server_factory: Any) -> None:
    helper = make_agent(slug="helper", description="Answers questions about Gaia.",
                        tools=["calculator"])
    make_agent(slug="other")
    make_agent(slug="hidden", listed=False)
    _, everyone = make_key("all")
    _, narrow = make_key("narrow", agents=[helper])
    card_url = f"{gaia_server.url}/a2a/helper/.well-known/agent-card.json"

    refused = httpx.get(card_url, timeout=10)
    assert refused.status_code == 401
    assert refused.headers["www-authenticate"] == "Bearer"
    assert refused.json()["error"]["message"]

    card = httpx.get(card_url, headers={"Authorization": f"Bearer {narrow}"}, timeout=10).json()
    assert card["name"] == "Helper"  # its display name
    assert card["description"] == "Answers questions about Gaia."
    assert card["version"]
    (interface,) = card["supportedInterfaces"]
    assert interface == {"url": f"{gaia_server.url}/a2a/helper", "protocolBinding": "JSONRPC",
                         "protocolVersion": "1.0"}
    assert card["capabilities"]["streaming"] is True
    assert card["securitySchemes"]["bearer"]["httpAuthSecurityScheme"]["scheme"] == "bearer"
    assert {s["id"] for s in card["skills"]} == {"ask", "tool:calculator"}

    for slug, key, status in (("other", narrow, 404), ("hidden", everyone, 404),
                              ("nobody", everyone, 404), ("other", everyone, 200)):
        got = httpx.get(f"{gaia_server.url}/a2a/{slug}/.well-known/agent-card.json",
                        headers={"Authorization": f"Bearer {key}"}, timeout=10)
        assert got.status_code == status, (slug, got.text)

    listed = httpx.get(f"{gaia_server.url}/a2a/", timeout=10,
                       headers={"Authorization": f"Bearer {narrow}"}).json()
    assert [c["supportedInterfaces"][0]["url"] for c in listed["agents"]] == [
        f"{gaia_server.url}/a2a/helper"]
    assert httpx.get(f"{gaia_server.url}/a2a/", timeout=10).status_code == 401

    public = gaia_server_factory(GAIA_A2A_PUBLIC_CARDS="true")
    open_card = httpx.get(f"{public.url}/a2a/helper/.well-known/agent-card.json", timeout=10)
    assert (open_card.status_code, open_card.json()["name"]) == (200, "Helper")
    assert httpx.get(f"{public.url}/a2a/hidden/.well-known/agent-card.json",
                     timeout=10).status_code == 404
    # the card is public; the agent is not
    assert rpc(public, "helper", None, {"jsonrpc": "2.0", "id": 1, "method": "GetTask",
                                         "params": {"id": "x"}}).status_code == 401


def test_a_message_is_a_task_on_a_thread_and_its_context_continues(
        gaia_server: Any, make_agent: Any, api_key: str) -> None:
    from a2a.types import a2a_pb2 as pb

    make_agent(slug="echoer", provider__options={})

    async def two(client: Any) -> tuple[Any, Any, Any]:
        (first,) = await events(client, send("Hello there"))
        task = first.task
        (second,) = await events(client, send("Again", context_id=task.context_id))
        got = await client.get_task(pb.GetTaskRequest(id=task.id))
        return task, second.task, got

    first, second, got = run(gaia_server, "echoer", api_key, two, streaming=False)
    assert first.status.state == state("TASK_STATE_COMPLETED"), first
    assert "Hello there" in reply_of(first)  # the fake provider echoes the conversation
    assert first.metadata["agent"] == "echoer"
    assert first.metadata["usage"]["output_tokens"] > 0
    assert [m.role for m in first.history] == [pb.Role.ROLE_USER, pb.Role.ROLE_AGENT]
    assert second.context_id == first.context_id
    assert second.id != first.id
    assert (got.id, got.status.state, reply_of(got)) == (first.id, first.status.state,
                                                         reply_of(first))

    from agents.models import Message, Thread

    thread = Thread.objects.get(pk=first.context_id)
    assert thread.agent.slug == "echoer"
    asked = Message.objects.filter(thread=thread, role="user")
    assert list(asked.values_list("dialect", flat=True)) == ["a2a", "a2a"]
    assert all(s.startswith("a2a:python-httpx") for s in asked.values_list("sender", flat=True))


def test_a_streamed_task_sends_its_reply_as_it_comes(gaia_server: Any, make_agent: Any,
                                                      api_key: str) -> None:
    make_agent(slug="slowpoke", provider__options={
        "reply": "one two three four five six", "delay_ms": 100})

    got = run(gaia_server, "slowpoke", api_key, lambda c: events(c, send("Count.")))
    kinds = [r.WhichOneof("payload") for r in got]
    assert kinds[0] == "task"
    assert got[0].task.status.state == state("TASK_STATE_WORKING")
    chunks = [r.artifact_update for r in got if r.WhichOneof("payload") == "artifact_update"]
    assert len(chunks) >= 3, kinds
    before = reply_of(got[0].task)  # what it said before the stream began, if anything
    assert chunks[0].append == bool(before)  # the rest is appended to the same artifact
    assert all(c.append for c in chunks[1:])
    assert {c.artifact.artifact_id for c in chunks} == {f"{got[0].task.id}-reply"}
    streamed = before + "".join(p.text for c in chunks for p in c.artifact.parts)
    assert streamed.startswith("one two three four five six"), streamed
    assert kinds[-1] == "status_update"
    assert got[-1].status_update.status.state == state("TASK_STATE_COMPLETED")


def test_a_cancelled_task_stops_its_turn(gaia_server: Any, make_agent: Any,
                                         api_key: str) -> None:
    from a2a.types import a2a_pb2 as pb

    from agents.models import Message

    words = " ".join(f"w{i}" for i in range(300))
    make_agent(slug="rambler", provider__options={"reply": words, "delay_ms": 50})

    async def start_then_cancel(client: Any) -> tuple[Any, Any, Any]:
        config = pb.SendMessageConfiguration(return_immediately=True)
        (started,) = await events(client, send("Talk.", configuration=config))
        await asyncio.sleep(1.0)
        cancelled = await client.cancel_task(pb.CancelTaskRequest(id=started.task.id))
        await asyncio.sleep(1.0)
        return started.task, cancelled, await client.get_task(pb.GetTaskRequest(
            id=started.task.id))

    started, cancelled, later = run(gaia_server, "rambler", api_key, start_then_cancel,
                                    streaming=False)
    assert started.status.state == state("TASK_STATE_WORKING")
    assert cancelled.status.state == state("TASK_STATE_CANCELED")
    assert later.status.state == state("TASK_STATE_CANCELED")
    deadline = time.monotonic() + 15
    reply = None
    while reply is None and time.monotonic() < deadline:
        reply = Message.objects.filter(thread_id=started.context_id, role="assistant").first()
        time.sleep(0.1)
    assert reply is not None
    assert reply.finish_reason == "killed", reply.finish_reason
    assert 0 < len(reply.content.split()) < 300

    async def again(client: Any) -> Any:
        return await client.cancel_task(pb.CancelTaskRequest(id=started.id))

    from a2a.utils.errors import TaskNotCancelableError

    with pytest.raises(TaskNotCancelableError, match="has ended"):
        run(gaia_server, "rambler", api_key, again, streaming=False)


def test_an_operator_kill_cancels_the_task_and_a_failing_upstream_fails_it(
        gaia_server: Any, make_agent: Any, make_key: Any, api_key: str) -> None:
    from a2a.types import a2a_pb2 as pb

    make_agent(slug="broken", provider__options={"fail": "before",
                                                 "fail_message": "upstream exploded"})
    (failed,) = run(gaia_server, "broken", api_key, lambda c: events(c, send("Hi")),
                    streaming=False)
    assert failed.task.status.state == state("TASK_STATE_FAILED")
    assert "upstream exploded" in failed.task.status.message.parts[0].text

    make_agent(slug="talker", provider__options={"reply": " ".join(["la"] * 300),
                                                 "delay_ms": 50})
    _, operator = make_key("ops", scopes=["operator"])

    async def killed(client: Any) -> Any:
        config = pb.SendMessageConfiguration(return_immediately=True)
        (started,) = await events(client, send("Sing.", configuration=config))
        await asyncio.sleep(0.5)
        async with httpx.AsyncClient(timeout=10) as http:
            r = await http.post(
                f"{gaia_server.url}/api/v1/threads/{started.task.context_id}/kill",
                headers={"Authorization": f"Bearer {operator}"})
            assert r.status_code in (200, 202), r.text
        for _ in range(100):
            got = await client.get_task(pb.GetTaskRequest(id=started.task.id))
            if got.status.state != state("TASK_STATE_WORKING"):
                return got
            await asyncio.sleep(0.1)
        return got

    got = run(gaia_server, "talker", api_key, killed, streaming=False)
    assert got.status.state == state("TASK_STATE_CANCELED"), got


def test_an_approval_inside_a_task_is_input_required_until_an_operator_decides(
        gaia_server: Any, make_agent: Any, make_key: Any, api_key: str) -> None:
    from a2a.types import a2a_pb2 as pb

    make_agent(slug="careful", tools=["calculator"], require_approval="always",
               approval_timeout_seconds=120, provider__options={"script": [
                   {"tool_calls": [{"name": "calculator",
                                    "arguments": {"expression": "6 * 7"}}]},
                   {"reply": "Results: {results}"}]})
    _, secret = make_key("night-shift", scopes=["operator"])
    operator = {"Authorization": f"Bearer {secret}"}

    async def ask(client: Any) -> list[Any]:
        return await events(client, send("Six times seven?"))

    streamed = run(gaia_server, "careful", api_key, ask)
    last = streamed[-1].status_update
    assert last.status.state == state("TASK_STATE_INPUT_REQUIRED"), streamed
    task_id = last.task_id

    listed = httpx.get(f"{gaia_server.url}/api/v1/approvals", headers=operator, timeout=10)
    (approval,) = listed.json()["results"]
    assert (approval["agent"], approval["thread_id"]) == ("careful", last.context_id)

    out: dict[str, Any] = {}

    def follow() -> None:
        async def subscribe(client: Any) -> list[Any]:
            return [r async for r in client.subscribe(pb.SubscribeToTaskRequest(id=task_id))]

        out["events"] = run(gaia_server, "careful", api_key, subscribe)

    follower = threading.Thread(target=follow, daemon=True)
    follower.start()
    time.sleep(1.0)
    assert "events" not in out  # it follows the waiting task
    decided = httpx.post(f"{gaia_server.url}/api/v1/approvals/{approval['id']}",
                         headers=operator, json={"decision": "approve"}, timeout=10)
    assert decided.status_code == 200, decided.text
    follower.join(60)
    followed = out["events"]
    assert followed[0].task.status.state == state("TASK_STATE_INPUT_REQUIRED")
    assert followed[-1].status_update.status.state == state("TASK_STATE_COMPLETED"), followed

    async def get(client: Any) -> Any:
        return await client.get_task(pb.GetTaskRequest(id=task_id))

    done = run(gaia_server, "careful", api_key, get)
    assert (done.status.state, reply_of(done)) == (state("TASK_STATE_COMPLETED"), "Results: 42")


def test_bad_input_gets_the_protocols_errors_and_changes_nothing(
        gaia_server: Any, make_agent: Any, make_key: Any, api_key: str) -> None:
    from django.conf import settings

    from a2a_api.models import Task
    from agents.models import Thread

    make_agent(slug="keeper", provider__options={"reply": "Secret plans."})
    _, theirs = make_key("theirs")

    def call(method: str, params: dict[str, Any], key: str | None = api_key,
             slug: str = "keeper") -> httpx.Response:
        return rpc(gaia_server, slug, key, {"jsonrpc": "2.0", "id": 7, "method": method,
                                             "params": params})

    def code(response: httpx.Response) -> int:
        return response.json()["error"]["code"]

    say = {"message": {"messageId": "m1", "role": "ROLE_USER", "parts": [{"text": "Hi"}]}}
    made = call("SendMessage", say)
    assert made.status_code == 200, made.text
    task = made.json()["result"]["task"]
    assert task["status"]["state"] == "TASK_STATE_COMPLETED"
    threads, tasks = Thread.objects.count(), Task.objects.count()

    assert code(rpc(gaia_server, "keeper", api_key, b"{not json")) == -32700
    assert code(rpc(gaia_server, "keeper", api_key, b"[1, 2]")) == -32600
    assert code(call("tasks/explode", {})) == -32601
    assert code(call("GetTask", {"id": task["id"]}, key=theirs)) == -32001  # not a leak
    assert code(call("CancelTask", {"id": task["id"]}, key=theirs)) == -32001
    assert code(call("GetTask", {"id": "not-a-task"})) == -32001
    assert code(call("SendMessage", {**say, "message": {**say["message"],
                                                         "contextId": task["contextId"]}},
                     key=theirs)) == -32602
    assert code(call("SendMessage", {"message": {"messageId": "m2", "role": "ROLE_USER",
                                                 "parts": [{"url": "http://x/y.png"}]}})) \
        == -32005
    assert code(call("SendMessage", {"message": {"messageId": "m3", "role": "ROLE_USER",
                                                 "parts": []}})) == -32602
    assert code(call("CreateTaskPushNotificationConfig", {"taskId": task["id"],
                                                          "url": "http://x"})) == -32003
    big = rpc(gaia_server, "keeper", api_key,
              b'{"a": "' + b"x" * settings.GAIA_MAX_BODY_BYTES + b'"}')
    assert (big.status_code, code(big)) == (413, -32600)
    nobody = call("SendMessage", say, slug="nobody")
    assert (nobody.status_code, code(nobody)) == (404, -32600)
    anonymous = call("SendMessage", say, key=None)
    assert anonymous.status_code == 401
    assert anonymous.headers["www-authenticate"] == "Bearer"
    assert (Thread.objects.count(), Task.objects.count()) == (threads, tasks)


def test_a_v03_client_is_served_by_the_compatibility_layer(gaia_server: Any, make_agent: Any,
                                                           api_key: str) -> None:
    make_agent(slug="old", provider__options={"reply": "Still here."})
    r = rpc(gaia_server, "old", api_key, {"jsonrpc": "2.0", "id": 1, "method": "message/send",
                                          "params": {"message": {
                                              "kind": "message", "messageId": "m1",
                                              "role": "user",
                                              "parts": [{"kind": "text", "text": "Hi"}]}}},
            version="")
    assert r.status_code == 200, r.text
    result = r.json()["result"]
    assert result["status"]["state"] == "completed", result
    assert "Still here." in str(result["artifacts"])


def test_a2a_requests_are_counted_and_logged(gaia_server: Any, make_agent: Any, make_key: Any,
                                             api_key: str) -> None:
    make_agent(slug="counted", provider__options={"reply": "One."})
    _, reader = make_key("prometheus", scopes=["metrics"])

    def a2a_requests(status: str) -> float:
        text = httpx.get(f"{gaia_server.url}/metrics", timeout=10,
                         headers={"Authorization": f"Bearer {reader}"}).text
        return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
                   if line.startswith("gaia_requests_total{")
                   and 'route="a2a"' in line and f'status="{status}"' in line)

    ok_before, refused_before = a2a_requests("200"), a2a_requests("401")
    run(gaia_server, "counted", api_key, lambda c: events(c, send("Hi")), streaming=False)
    assert rpc(gaia_server, "counted", None, {}).status_code == 401
    assert a2a_requests("200") > ok_before
    assert a2a_requests("401") == refused_before + 1
    assert "POST /a2a/counted 401 key_prefix=-" in gaia_server.log()
