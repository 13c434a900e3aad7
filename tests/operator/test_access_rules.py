"""Every access rule, on every channel (README "Security": the access-rule table, one test per
cell): ``/v1``, the operator REST API, the feed's WebSocket and the pages, against a live
server. A rule is one function in the core (``agents.services.api_keys``,
``agents.selectors.api_key_agent_check``, ``agents.selectors.audit_read_check``,
``agents.turns.inject``) that every channel calls; these tests check that each channel answers
what the rule says."""

from __future__ import annotations

import json
import time
from datetime import timedelta
from typing import Any

import httpx
import pytest
from django.contrib.auth import get_user_model
from django.utils import timezone
from websockets.exceptions import ConnectionClosed
from websockets.sync.client import connect

from agents import services
from agents.models import Agent, ApiKey, Memory, Thread
from tests.conftest import within_one_rate_window

pytestmark = pytest.mark.django_db(transaction=True)

CHAT, OPERATOR = ApiKey.Scope.CHAT, ApiKey.Scope.OPERATOR


def v1(server: Any, key: str, model: str = "echo") -> httpx.Response:
    return httpx.post(f"{server.v1}/chat/completions", timeout=30,
                      headers={"Authorization": f"Bearer {key}"},
                      json={"model": model, "messages": [{"role": "user", "content": "hi"}]})


def rest(server: Any, key: str, method: str, path: str, body: Any = None) -> httpx.Response:
    return httpx.request(method, f"{server.url}/api/v1{path}", json=body, timeout=30,
                         headers={"Authorization": f"Bearer {key}"})


MCP_HEADERS = {"Accept": "application/json, text/event-stream"}


def mcp_raw(server: Any, key: str | None, **headers: str) -> httpx.Response:
    """``/mcp``'s HTTP answer to a ``tools/list`` (refusals come before the protocol)."""
    auth = {"Authorization": f"Bearer {key}"} if key else {}
    return httpx.post(f"{server.url}/mcp", timeout=30, headers={**MCP_HEADERS, **auth, **headers},
                      json={"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {}})


def mcp(server: Any, key: str, work: Any) -> Any:
    """``work(client)`` with the official MCP client, connected with ``key``."""
    import asyncio

    import httpx2
    from mcp import Client
    from mcp.client.streamable_http import streamable_http_client

    async def run() -> Any:
        async with httpx2.AsyncClient(headers={"Authorization": f"Bearer {key}"},
                                      timeout=60) as http, \
                Client(streamable_http_client(f"{server.url}/mcp", http_client=http)) as client:
            return await work(client)

    return asyncio.run(run())


def mcp_tools(server: Any, key: str) -> set[str]:
    async def names(client: Any) -> set[str]:
        return {t.name for t in (await client.list_tools()).tools}

    return mcp(server, key, names)


def mcp_call(server: Any, key: str, agent: str = "echo", **arguments: str) -> Any:
    """The result of asking ``agent`` over MCP: ``(is_error, text)``."""
    async def call(client: Any) -> Any:
        result = await client.call_tool(f"ask_{agent}", {"message": "hi", **arguments})
        return result.is_error, "".join(c.text for c in result.content)

    return mcp(server, key, call)


def a2a(server: Any, key: str | None, method: str = "GetTask", params: Any = None,
        agent: str = "echo", **headers: str) -> httpx.Response:
    """``/a2a/<agent>``'s HTTP answer to a JSON-RPC call (refusals come before the protocol)."""
    auth = {"Authorization": f"Bearer {key}"} if key else {}
    return httpx.post(f"{server.url}/a2a/{agent}", timeout=60,
                      headers={"A2A-Version": "1.0", **auth, **headers},
                      json={"jsonrpc": "2.0", "id": 1, "method": method,
                            "params": {"id": "no-such-task"} if params is None else params})


def a2a_send(server: Any, key: str, agent: str = "echo", **message: str) -> httpx.Response:
    return a2a(server, key, "SendMessage", {"message": {
        "messageId": "m1", "role": "ROLE_USER", "parts": [{"text": "Hi"}], **message}},
        agent=agent)


def a2a_error(response: httpx.Response) -> tuple[int, int, str]:
    error = response.json()["error"]
    return response.status_code, error["code"], error["message"]


def ws_url(server: Any) -> str:
    return server.url.replace("http://", "ws://") + "/ws"


def ws_refusal(server: Any, headers: dict[str, str]) -> tuple[int, str]:
    """The close code and reason a handshake with ``headers`` gets (it must be refused)."""
    with connect(ws_url(server), additional_headers=headers, open_timeout=10) as sock:
        with pytest.raises(ConnectionClosed) as closed:
            sock.recv(timeout=10)
    assert closed.value.rcvd is not None
    return closed.value.rcvd.code, closed.value.rcvd.reason


def ws_command(server: Any, key: str, command: dict[str, Any]) -> dict[str, Any]:
    """The feed's answer (ack or error) to one command."""
    with connect(ws_url(server), additional_headers={"Authorization": f"Bearer {key}"},
                 open_timeout=10) as sock:
        assert json.loads(sock.recv(timeout=10))["event"] == "connected"
        sock.send(json.dumps({"id": "c", **command}))
        while True:
            event = json.loads(sock.recv(timeout=10))
            if event.get("id") == "c":
                return event


def closed_within(sock: Any, seconds: float) -> Any:
    """The close frame the server sends within ``seconds`` (events before it are skipped)."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        try:
            sock.recv(timeout=max(0.01, deadline - time.monotonic()))
        except ConnectionClosed as exc:
            return exc.rcvd  # None: no close frame (the caller's assertions then fail)
        except TimeoutError:
            break
    raise AssertionError(f"the socket was still open after {seconds} s")


@pytest.fixture
def agents(make_agent: Any) -> dict[str, Agent]:
    return {"echo": make_agent(slug="echo", provider__options={}),
            "other": make_agent(slug="other", provider__name="other", provider__options={})}


# -- credentials: none, revoked, expired --------------------------------------------------------


def test_no_credentials_is_refused_on_every_channel(gaia_server: Any, agents: Any) -> None:
    assert httpx.post(f"{gaia_server.v1}/chat/completions", json={}, timeout=30
                      ).status_code == 401
    assert httpx.get(f"{gaia_server.url}/api/v1/threads", timeout=30).status_code == 401
    with connect(ws_url(gaia_server), open_timeout=10) as sock:
        sock.send(json.dumps({"cmd": "subscribe"}))
        with pytest.raises(ConnectionClosed) as closed:
            sock.recv(timeout=10)
    assert closed.value.rcvd is not None
    assert closed.value.rcvd.code == 4001
    page = httpx.get(f"{gaia_server.url}/threads/", timeout=30)
    assert page.status_code == 302
    assert page.headers["location"].startswith("/login/")
    r = mcp_raw(gaia_server, None)
    assert (r.status_code, r.headers["www-authenticate"]) == (401, "Bearer")
    assert r.json()["error"]["message"].startswith("You didn't provide an API key")
    r = a2a(gaia_server, None)
    assert (r.status_code, r.headers["www-authenticate"]) == (401, "Bearer")
    assert r.json()["error"]["message"].startswith("You didn't provide an API key")
    assert httpx.get(f"{gaia_server.url}/a2a/echo/.well-known/agent-card.json",
                     timeout=30).status_code == 401


@pytest.mark.parametrize("how", ["revoked", "expired"])
def test_a_revoked_or_expired_key_is_refused_on_every_channel(
        gaia_server: Any, agents: Any, make_key: Any, how: str) -> None:
    key, secret = make_key("gone", scopes=[CHAT, OPERATOR])
    if how == "revoked":
        services.api_key_revoke(key=key)
    else:
        ApiKey.objects.filter(pk=key.pk).update(expires_at=timezone.now() - timedelta(1))
        services.config_changed()
    r = v1(gaia_server, secret)
    assert (r.status_code, r.json()["error"]["code"]) == (401, "invalid_api_key")
    assert how in r.json()["error"]["message"]
    r = rest(gaia_server, secret, "GET", "/threads")
    assert r.status_code == 401
    assert how in r.json()["detail"]
    code, reason = ws_refusal(gaia_server, {"Authorization": f"Bearer {secret}"})
    assert code == 4001
    assert how in reason
    r = mcp_raw(gaia_server, secret)
    assert (r.status_code, r.headers["www-authenticate"]) == (401, "Bearer")
    assert how in r.json()["error"]["message"]
    r = a2a(gaia_server, secret)
    assert (r.status_code, r.headers["www-authenticate"]) == (401, "Bearer")
    assert how in r.json()["error"]["message"]


@pytest.mark.parametrize("how", ["revoked", "expired"])
def test_an_open_feed_socket_closes_when_its_key_is_revoked_or_expires(
        gaia_server: Any, agents: Any, make_key: Any, how: str) -> None:
    expires = timezone.now() + timedelta(seconds=3) if how == "expired" else None
    key, secret = make_key("soon-gone", scopes=[OPERATOR], expires_at=expires)
    with connect(ws_url(gaia_server), additional_headers={"Authorization": f"Bearer {secret}"},
                 open_timeout=10) as sock:
        assert json.loads(sock.recv(timeout=10))["event"] == "connected"
        if how == "revoked":
            services.api_key_revoke(key=key)
        closed = closed_within(sock, 20)  # generous: "within seconds"
    assert closed.code == 4001
    assert how in closed.reason


# -- scopes and staff --------------------------------------------------------------------------


def test_each_channel_needs_its_scope(gaia_server: Any, agents: Any, make_key: Any) -> None:
    _, chat = make_key("chat", scopes=[CHAT])
    _, ops = make_key("ops", scopes=[OPERATOR])
    r = v1(gaia_server, ops)
    assert (r.status_code, r.json()["error"]["code"]) == (403, "insufficient_scope")
    assert r.json()["error"]["message"] == "This API key does not have the 'chat' scope."
    r = rest(gaia_server, chat, "GET", "/threads")
    assert (r.status_code, r.json()["code"]) == (403, "insufficient_scope")
    assert r.json()["detail"] == "This API key does not have the 'operator' scope."
    assert ws_refusal(gaia_server, {"Authorization": f"Bearer {chat}"})[0] == 4003
    r = mcp_raw(gaia_server, ops)
    assert r.status_code == 403
    assert r.json()["error"]["message"] == "This API key does not have the 'chat' scope."
    assert v1(gaia_server, chat).status_code == 200
    assert rest(gaia_server, ops, "GET", "/threads").status_code == 200
    assert mcp_tools(gaia_server, chat) == {"ask_echo", "ask_other"}
    r = a2a(gaia_server, ops)
    assert r.status_code == 403
    assert r.json()["error"]["message"] == "This API key does not have the 'chat' scope."
    assert a2a_error(a2a(gaia_server, chat))[1] == -32001  # through: no such task


def test_a_session_must_be_staff_on_every_channel(gaia_server: Any, agents: Any) -> None:
    users = get_user_model()
    users.objects.create_user("plain", password="pw-plain-123")
    users.objects.create_user("boss", password="pw-boss-123", is_staff=True)

    def session(name: str, password: str) -> httpx.Client:
        client = httpx.Client(base_url=gaia_server.url, timeout=30)
        client.get("/login/")
        client.post("/login/", data={"username": name, "password": password,
                                     "csrfmiddlewaretoken": client.cookies["csrftoken"]},
                    headers={"Referer": f"{gaia_server.url}/login/"})
        return client

    plain, boss = session("plain", "pw-plain-123"), session("boss", "pw-boss-123")
    # the login form refuses a non-staff account: it never gets a session
    assert "sessionid" not in plain.cookies
    assert plain.get("/threads/").status_code == 302
    assert plain.get("/api/v1/threads").status_code in (401, 403)
    assert boss.get("/threads/").status_code == 200
    assert boss.get("/api/v1/threads").status_code == 200
    cookie = {"Cookie": f"sessionid={boss.cookies['sessionid']}"}
    with connect(ws_url(gaia_server), additional_headers=cookie, open_timeout=10) as sock:
        assert json.loads(sock.recv(timeout=10))["event"] == "connected"
    assert mcp_raw(gaia_server, None, **cookie).status_code == 401  # MCP takes keys only
    assert a2a(gaia_server, None, **cookie).status_code == 401  # and A2A
    # a session of a user who is no longer staff is refused by each
    users.objects.filter(username="boss").update(is_staff=False)
    assert boss.get("/threads/").status_code == 302
    assert boss.get("/api/v1/threads").status_code == 403
    assert ws_refusal(gaia_server, cookie)[0] == 4003


# -- allowed agents ------------------------------------------------------------------------------


def test_a_key_limited_to_some_agents_acts_only_for_them_on_every_channel(
        gaia_server: Any, agents: Any, make_key: Any, make_thread: Any) -> None:
    _, narrow = make_key("narrow", scopes=[CHAT, OPERATOR], agents=[agents["other"]])
    thread_id = make_thread(agents["echo"], "hello")
    r = v1(gaia_server, narrow, "echo")
    assert (r.status_code, r.json()["error"]["param"]) == (403, "model")
    assert mcp_tools(gaia_server, narrow) == {"ask_other"}
    assert mcp_call(gaia_server, narrow, "echo") == (
        True, "This API key may not use the model 'echo'.")  # /v1's words
    assert a2a_error(a2a_send(gaia_server, narrow)) == (
        403, -32600, "This API key may not use the model 'echo'.")
    assert httpx.get(f"{gaia_server.url}/a2a/echo/.well-known/agent-card.json", timeout=30,
                     headers={"Authorization": f"Bearer {narrow}"}).status_code == 404
    listed = httpx.get(f"{gaia_server.url}/a2a/", timeout=30,
                       headers={"Authorization": f"Bearer {narrow}"}).json()["agents"]
    assert [c["supportedInterfaces"][0]["url"].rsplit("/", 1)[1] for c in listed] == ["other"]
    refusals = [
        (("POST", "/inject", {"to": "echo", "payload": "x"}),
         {"cmd": "inject", "to": "echo", "payload": "x"}),
        (("POST", f"/threads/{thread_id}/kill", None), {"cmd": "kill", "thread_id": thread_id}),
        (("POST", "/agents/echo/pause", None), {"cmd": "pause", "agent": "echo"}),
        (("POST", "/agents/echo/resume", None), {"cmd": "resume", "agent": "echo"}),
    ]
    for (method, path, body), command in refusals:
        r = rest(gaia_server, narrow, method, path, body)
        assert (r.status_code, r.json()["code"]) == (403, "agent_not_allowed"), path
        answer = ws_command(gaia_server, narrow, command)
        assert (answer["event"], answer["status"], answer["code"]) == (
            "error", 403, "agent_not_allowed"), command
        assert answer["error"] == r.json()["detail"]
    assert Thread.objects.get(pk=thread_id).status != Thread.Status.KILLED
    assert not Agent.objects.get(slug="echo").paused
    # the agent it may use: every channel lets it act
    assert v1(gaia_server, narrow, "other").status_code == 200
    assert mcp_call(gaia_server, narrow, "other")[0] is False
    sent = a2a_send(gaia_server, narrow, "other")
    assert sent.json()["result"]["task"]["status"]["state"] == "TASK_STATE_COMPLETED", sent.text
    assert rest(gaia_server, narrow, "POST", "/agents/other/pause").status_code == 200
    assert ws_command(gaia_server, narrow, {"cmd": "resume", "agent": "other"})["event"] == "ack"


def test_a_key_limited_to_some_agents_reads_and_forgets_only_their_memories(
        gaia_server: Any, agents: Any, make_key: Any, django_user_model: Any) -> None:
    """What one key's users told an agent is not read (nor deleted) by a key limited to
    other agents: the same rule as inject and kill (``api_key_agent_check``)."""
    _, narrow = make_key("narrow", scopes=[OPERATOR], agents=[agents["other"]])
    _, full = make_key("full", scopes=[OPERATOR])
    secret = Memory.objects.create(agent=agents["echo"], scope="key:1/user:alice",
                                   user="alice", text="alice's door code is 4711")
    own = Memory.objects.create(agent=agents["other"], scope="key:2", text="likes tea")
    for method, path in (("GET", "/agents/echo/memories"),
                         ("GET", "/agents/echo/memories?scope=key:1/user:alice"),
                         ("DELETE", f"/agents/echo/memories/{secret.pk}")):
        r = rest(gaia_server, narrow, method, path)
        assert (r.status_code, r.json()["code"]) == (403, "agent_not_allowed"), path
        assert "4711" not in r.text
    assert Memory.objects.filter(pk=secret.pk).exists()
    # its own agent's memories: read and forgotten
    r = rest(gaia_server, narrow, "GET", "/agents/other/memories")
    assert [m["text"] for m in r.json()["results"]] == ["likes tea"]
    assert rest(gaia_server, narrow, "DELETE",
                f"/agents/other/memories/{own.pk}").status_code == 204
    # a full key and staff: every agent's, unchanged
    r = rest(gaia_server, full, "GET", "/agents/echo/memories")
    assert [m["text"] for m in r.json()["results"]] == ["alice's door code is 4711"]
    django_user_model.objects.create_user("boss", password="pw-boss-123", is_staff=True)
    with httpx.Client(base_url=gaia_server.url, timeout=30) as boss:
        boss.get("/login/")
        boss.post("/login/", data={"username": "boss", "password": "pw-boss-123",
                                   "csrfmiddlewaretoken": boss.cookies["csrftoken"]},
                  headers={"Referer": f"{gaia_server.url}/login/"})
        assert boss.get("/api/v1/agents/echo/memories").json()["count"] == 1
        assert boss.delete(f"/api/v1/agents/echo/memories/{secret.pk}", headers={
            "X-CSRFToken": boss.cookies["csrftoken"],
            "Referer": f"{gaia_server.url}/"}).status_code == 204
    assert not Memory.objects.filter(pk=secret.pk).exists()


# -- the audit trail: full operator access --------------------------------------------------------


def test_the_audit_trail_is_read_by_staff_and_full_operator_keys_only(
        gaia_server: Any, agents: Any, make_key: Any, django_user_model: Any) -> None:
    _, narrow = make_key("narrow", scopes=[OPERATOR], agents=[agents["other"]])
    _, full = make_key("full", scopes=[OPERATOR])
    _, chat = make_key("chat", scopes=[CHAT])
    assert rest(gaia_server, full, "POST", "/agents/echo/pause").status_code == 200
    assert rest(gaia_server, narrow, "POST", "/agents/other/pause").status_code == 200
    # a key limited to some agents: refused the whole trail, its own agents' entries too
    for path in ("/audit", "/audit?target=agent:other", "/audit?action=explode"):
        r = rest(gaia_server, narrow, "GET", path)
        assert (r.status_code, r.json()["code"]) == (403, "full_access_required"), path
        assert "key:full" not in r.text
    assert rest(gaia_server, chat, "GET", "/audit").status_code == 403
    r = rest(gaia_server, full, "GET", "/audit")
    assert r.status_code == 200
    assert {e["actor"].split(" ")[0] for e in r.json()["results"]} == {"key:full",
                                                                      "key:narrow"}
    # staff: the REST API and the page
    django_user_model.objects.create_user("boss", password="pw-boss-123", is_staff=True)
    with httpx.Client(base_url=gaia_server.url, timeout=30) as boss:
        boss.get("/login/")
        boss.post("/login/", data={"username": "boss", "password": "pw-boss-123",
                                   "csrfmiddlewaretoken": boss.cookies["csrftoken"]},
                  headers={"Referer": f"{gaia_server.url}/login/"})
        assert boss.get("/api/v1/audit").json()["count"] == 2
        page = boss.get("/audit/")
        assert page.status_code == 200
        assert "key:narrow" in page.text


# -- the agent's state: enabled, paused; the thread's agent --------------------------------------


def test_a_disabled_agent_is_refused_on_every_channel(gaia_server: Any, agents: Any,
                                                      make_key: Any) -> None:
    _, key = make_key("k", scopes=[CHAT, OPERATOR])
    Agent.objects.filter(slug="echo").update(enabled=False)
    services.config_changed()
    r = v1(gaia_server, key)
    assert (r.status_code, r.json()["error"]["code"]) == (404, "model_not_found")
    assert "ask_echo" not in mcp_tools(gaia_server, key)
    assert mcp_call(gaia_server, key)[0] is True
    assert a2a_error(a2a_send(gaia_server, key))[:2] == (404, -32600)
    r = rest(gaia_server, key, "POST", "/inject", {"to": "echo", "payload": "x"})
    assert (r.status_code, r.json()["code"]) == (400, "agent_disabled")
    answer = ws_command(gaia_server, key, {"cmd": "inject", "to": "echo", "payload": "x"})
    assert (answer["status"], answer["code"]) == (400, "agent_disabled")


def test_a_paused_agent_is_refused_on_every_channel(gaia_server: Any, agents: Any,
                                                    make_key: Any) -> None:
    _, key = make_key("k", scopes=[CHAT, OPERATOR])
    r = rest(gaia_server, key, "POST", "/agents/echo/pause")
    assert r.status_code == 200
    r = v1(gaia_server, key)
    assert (r.status_code, r.headers["retry-after"]) == (503, "30")
    assert mcp_call(gaia_server, key) == (
        True, "The model 'echo' is paused by an operator; try again later.")
    assert a2a_error(a2a_send(gaia_server, key)) == (
        200, -32004, "The model 'echo' is paused by an operator; try again later.")
    assert a2a_error(a2a(gaia_server, key))[1] == -32001  # its tasks are still read
    r = rest(gaia_server, key, "POST", "/inject", {"to": "echo", "payload": "x"})
    assert (r.status_code, r.json()["code"]) == (503, "agent_paused")
    answer = ws_command(gaia_server, key, {"cmd": "inject", "to": "echo", "payload": "x"})
    assert (answer["status"], answer["code"]) == (503, "agent_paused")


def test_a_thread_is_continued_only_by_its_own_agent_on_every_channel(
        gaia_server: Any, agents: Any, make_key: Any, make_thread: Any) -> None:
    _, key = make_key("k", scopes=[OPERATOR, CHAT])
    thread_id = make_thread(agents["echo"], "hello")
    refused, said = mcp_call(gaia_server, key, "other", thread_id=thread_id)
    assert (refused, said) == (True, f"No thread '{thread_id}' for this API key.")
    assert a2a_error(a2a_send(gaia_server, key, "other", contextId=thread_id)) == (
        200, -32602, f"No context '{thread_id}' for this key.")
    body = {"to": "other", "payload": "x", "thread_id": thread_id}
    r = rest(gaia_server, key, "POST", "/inject", body)
    assert (r.status_code, r.json()["code"]) == (400, "thread_agent_mismatch")
    answer = ws_command(gaia_server, key, {"cmd": "inject", **body})
    assert (answer["status"], answer["code"]) == (400, "thread_agent_mismatch")


# -- rate limits ------------------------------------------------------------------------------


def test_a_keys_rate_limit_counts_on_every_channel(gaia_server: Any, agents: Any,
                                                   make_key: Any) -> None:
    _, key = make_key("slow", scopes=[CHAT, OPERATOR], requests_per_minute=5)
    within_one_rate_window(15)  # all ten requests in one window
    assert v1(gaia_server, key).status_code == 200
    assert rest(gaia_server, key, "GET", "/agents").status_code == 200
    assert mcp_raw(gaia_server, key).status_code == 200
    assert a2a(gaia_server, key).status_code == 200
    answer = ws_command(gaia_server, key, {"cmd": "pause", "agent": "echo"})
    assert answer["event"] == "ack"  # the fifth request of the minute
    answer = ws_command(gaia_server, key, {"cmd": "resume", "agent": "echo"})
    assert (answer["event"], answer["status"], answer["code"]) == (
        "error", 429, "rate_limit_exceeded")
    assert rest(gaia_server, key, "GET", "/agents").status_code == 429
    assert v1(gaia_server, key).status_code == 429
    r = mcp_raw(gaia_server, key)
    assert (r.status_code, "retry-after" in r.headers) == (429, True)
    r = a2a(gaia_server, key)
    assert (r.status_code, "retry-after" in r.headers) == (429, True)
