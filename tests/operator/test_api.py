"""The operator API (/api/v1) in-process: every route, filter, auth case and error."""

from __future__ import annotations

import json
from datetime import timedelta

import jsonschema
import pytest
from django.test import override_settings
from django.utils import timezone
from rest_framework.test import APIClient

from agents import selectors
from agents.models import Agent, ConfigStamp, Message, Provider, Thread
from agents.outlet import realtime

pytestmark = pytest.mark.django_db

API = "/api/v1"


@pytest.fixture
def events(monkeypatch):
    """Feed events as they leave (after commit)."""
    sent: list[dict] = []
    monkeypatch.setattr(realtime, "send_event", sent.append)
    return sent


@pytest.fixture
def staff_client(django_user_model):
    user = django_user_model.objects.create_user("boss", password="pw-12345678", is_staff=True)
    client = APIClient(enforce_csrf_checks=True)
    client.force_login(user)
    return client


def assert_error(response, status, code, param=None):
    assert response.status_code == status, response.content
    assert response["Content-Type"].startswith("application/json")
    body = response.json()
    assert body["code"] == code, body
    assert isinstance(body["detail"], str)
    assert body["detail"]
    if param is not None:
        assert body["param"] == param
    return body


# ---------------------------------------------------------------------------------------------
# Auth


def test_no_credentials_is_401_with_a_challenge():
    r = APIClient().get(f"{API}/agents")
    assert_error(r, 401, "not_authenticated")
    assert r["WWW-Authenticate"].startswith("Bearer")


def test_wrong_key_is_401(echo_agent):
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION="Bearer gaia_deadbeef_nope")
    assert_error(client.get(f"{API}/agents"), 401, "invalid_api_key")


def test_chat_only_key_is_403(chat_secret):
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {chat_secret}")
    assert_error(client.get(f"{API}/agents"), 403, "insufficient_scope")
    assert_error(client.post(f"{API}/organism/reload"), 403, "insufficient_scope")


def test_operator_key_in_either_header(operator_secret, echo_agent):
    bearer = APIClient()
    bearer.credentials(HTTP_AUTHORIZATION=f"Bearer {operator_secret}")
    assert bearer.get(f"{API}/agents").status_code == 200
    header = APIClient()
    header.credentials(HTTP_X_API_KEY=operator_secret)
    assert [a["slug"] for a in header.get(f"{API}/agents").json()] == ["echo"]


def test_staff_session_reads_and_non_staff_session_is_403(staff_client, django_user_model,
                                                         echo_agent):
    assert staff_client.get(f"{API}/agents/echo").json()["slug"] == "echo"
    user = django_user_model.objects.create_user("pleb", password="pw-12345678")
    client = APIClient()
    client.force_login(user)
    assert_error(client.get(f"{API}/agents"), 403, "operator_required")


def test_session_post_needs_csrf(staff_client, echo_agent):
    r = staff_client.post(f"{API}/agents/echo/pause")
    body = assert_error(r, 403, "permission_denied")
    assert "CSRF" in body["detail"]
    assert not Agent.objects.get(slug="echo").paused
    token = "a" * 32
    staff_client.cookies["csrftoken"] = token
    r = staff_client.post(f"{API}/agents/echo/pause", HTTP_X_CSRFTOKEN=token)
    assert r.status_code == 200, r.content
    assert Agent.objects.get(slug="echo").paused


# ---------------------------------------------------------------------------------------------
# Organism and agents


def test_organism_counts(ops, echo_agent, make_agent, make_thread):
    make_agent(slug="off", enabled=False)
    make_thread(echo_agent, "one")
    make_thread(echo_agent, "two", reply=None)  # still running: active
    body = ops.get(f"{API}/organism").json()
    assert body["agent_count"] == 1
    assert body["active_threads"] == 1
    assert body["total_messages"] == 3
    assert body["status"] == "running"
    assert body["mode"] in ("redis", "single-process")
    assert set(body) == set(selectors.organism_info())


SECRET = "sk-live-this-must-never-leak-123"


@pytest.fixture
def secret_provider(make_provider, make_agent):
    provider = make_provider(name="vault", kind=Provider.Kind.OPENAI,
                             base_url=f"https://bot:{SECRET}-url@llm.example:8443/v1",
                             api_key_secret=SECRET,
                             options={"extra_headers": {"X-Org-Token": SECRET + "-hdr"},
                                      "api_token": SECRET + "-opt", "n_ctx": 4096})
    make_agent(slug="guarded", provider=provider)
    return provider


def test_organism_config_lists_everything_and_no_secret(ops, secret_provider, echo_agent):
    r = ops.get(f"{API}/organism/config")
    assert r.status_code == 200
    assert SECRET not in r.content.decode()
    body = r.json()
    vault = next(p for p in body["providers"] if p["name"] == "vault")
    assert vault["has_credentials"] is True
    assert vault["base_url"] == "https://bot:[redacted]@llm.example:8443/v1"
    assert "api_key_secret" not in vault
    assert vault["options"] == {"extra_headers": {"X-Org-Token": "[redacted]"},
                                "api_token": "[redacted]", "n_ctx": 4096}
    assert {a["slug"] for a in body["agents"]} == {"guarded", "echo"}
    assert next(a for a in body["agents"] if a["slug"] == "guarded")["provider"] == "vault"


def test_agent_config_has_its_provider_sanitised(ops, secret_provider):
    r = ops.get(f"{API}/agents/guarded/config")
    assert r.status_code == 200
    assert SECRET not in r.content.decode()
    body = r.json()
    assert body["slug"] == "guarded"
    assert body["provider_config"]["has_credentials"] is True
    assert body["provider_config"]["options"]["extra_headers"] == {"X-Org-Token": "[redacted]"}
    assert_error(ops.get(f"{API}/agents/nobody/config"), 404, "agent_not_found")


def test_agent_states(ops, make_agent, make_thread):
    idle, busy, broken, paused = (make_agent(slug=s) for s in ("idle", "busy", "broken", "zz"))
    Agent.objects.filter(pk=paused.pk).update(paused=True)
    running = make_thread(busy, "working", reply=None)
    make_thread(broken, "fails", reply="", error="provider down")
    make_thread(idle, "fine")
    agents = {a["slug"]: a for a in ops.get(f"{API}/agents").json()}
    assert agents["idle"]["state"] == "idle"
    assert agents["idle"]["last_activity"] is not None
    assert agents["busy"]["state"] == "processing"
    assert agents["busy"]["current_thread"] == running
    assert agents["broken"]["state"] == "error"
    assert agents["zz"]["state"] == "paused"
    assert set(agents["idle"]) == set(selectors.agent_list_public(slug="idle")[0])
    one = ops.get(f"{API}/agents/busy").json()
    assert one["current_thread"] == running


def test_unknown_agent_is_404(ops):
    assert_error(ops.get(f"{API}/agents/nobody"), 404, "agent_not_found")
    assert_error(ops.get(f"{API}/agents/nobody/schema"), 404, "agent_not_found")
    assert_error(ops.post(f"{API}/agents/nobody/pause"), 404, "agent_not_found")


def test_agent_slugs_with_slashes_route(ops, make_agent):
    make_agent(slug="team/alpha")
    assert ops.get(f"{API}/agents/team/alpha").json()["slug"] == "team/alpha"
    assert ops.get(f"{API}/agents/team/alpha/config").json()["slug"] == "team/alpha"


def test_agent_schema_is_a_json_schema_of_its_inputs(ops, echo_agent, make_agent):
    schema = ops.get(f"{API}/agents/echo/schema").json()
    jsonschema.Draft202012Validator.check_schema(schema)
    validator = jsonschema.Draft202012Validator(schema)
    assert "chat" in schema["description"]
    assert "tool" not in schema["$defs"]
    assert validator.is_valid({"model": "echo", "messages": [{"role": "user",
                                                              "content": "hi"}]})
    assert validator.is_valid("inject me")
    assert validator.is_valid({"text": "inject me"})
    assert validator.is_valid({"name": "Dan"})  # any object is an inject payload (its JSON)
    chat = jsonschema.Draft202012Validator({**schema["$defs"]["chat"], "$defs": schema["$defs"]})
    assert not chat.is_valid({"model": "echo", "messages": []})
    assert not chat.is_valid({"model": "other", "messages": [{"role": "user"}]})
    assert not validator.is_valid(42)
    assert not validator.is_valid("   ")
    assert not validator.is_valid({})
    assert schema["x-gaia-tools"] == []

    make_agent(slug="helper", tools=["calculator", "current_time"])
    tools = ops.get(f"{API}/agents/helper/schema").json()
    jsonschema.Draft202012Validator.check_schema(tools)
    assert tools["x-gaia-tools"] == ["calculator", "current_time"]


# ---------------------------------------------------------------------------------------------
# Threads and messages


def test_threads_paginate_newest_first(ops, echo_agent, make_thread):
    ids = [make_thread(echo_agent, f"t{i}") for i in range(5)]
    page = ops.get(f"{API}/threads", {"limit": 2}).json()
    assert page["count"] == 5
    assert [t["id"] for t in page["results"]] == ids[::-1][:2]
    assert "cursor=" in page["next"]
    assert "offset" not in page["next"]
    assert page["previous"] is None
    assert [t["id"] for t in ops.get(page["next"]).json()["results"]] == ids[::-1][2:4]
    page2 = ops.get(f"{API}/threads", {"limit": 2, "offset": 4}).json()
    assert [t["id"] for t in page2["results"]] == [ids[0]]
    assert page2["next"] is None
    first = page["results"][0]
    assert set(first) == set(selectors.thread_public_row(Thread.objects.get(pk=first["id"])))
    assert first["participants"] == ["alice", "echo"]
    assert first["message_count"] == 2


def test_thread_filters(ops, echo_agent, make_agent, make_thread):
    other = make_agent(slug="other")
    done = make_thread(echo_agent, "the quick brown fox", reply="jumps")
    running = make_thread(echo_agent, "slow one", reply=None)
    elsewhere = make_thread(other, "hello there", reply="the secret word is zebra")
    failed = make_thread(other, "boom", reply="", error="bad")
    old = timezone.now() - timedelta(days=3)
    Thread.objects.filter(pk=done).update(updated_at=old)

    def ids(**params):
        r = ops.get(f"{API}/threads", params)
        assert r.status_code == 200, r.content
        return {t["id"] for t in r.json()["results"]}

    assert ids(status="active") == {running}
    assert ids(status="completed") == {done, elsewhere}
    assert ids(status="error") == {failed}
    assert ids(agent="other") == {elsewhere, failed}
    assert ids(agent="nobody") == set()
    since = (timezone.now() - timedelta(days=1)).isoformat()
    assert ids(since=since) == {running, elsewhere, failed}
    assert ids(q="QUICK") == {done}  # the title
    assert ids(q="zebra") == {elsewhere}  # a message's content, case-insensitive
    assert ids(q="zebra", agent="echo") == set()


@pytest.mark.parametrize(("params", "param"), [
    ({"status": "sleeping"}, "status"),
    ({"since": "yesterday"}, "since"),
    ({"limit": 0}, "limit"),
    ({"limit": 1000}, "limit"),
    ({"limit": "ten"}, "limit"),
    ({"offset": -1}, "offset"),
])
def test_bad_thread_filters_are_400_naming_the_field(ops, params, param):
    body = assert_error(ops.get(f"{API}/threads", params), 400, "invalid", param)
    assert body["detail"].startswith(f"{param}: ")


def test_thread_detail_has_its_messages(ops, echo_agent, make_thread):
    tid = make_thread(echo_agent, "question", reply="answer")
    body = ops.get(f"{API}/threads/{tid}").json()
    assert body["id"] == tid
    assert body["status"] == "completed"
    msgs = body["messages"]
    assert [(m["from"], m["to"], m["payload_type"], m["payload"]["content"]) for m in msgs] == [
        ("alice", "echo", "text", "question"), ("echo", "alice", "reply", "answer")]
    assert msgs[1]["finish_reason"] == "stop"
    assert msgs[1]["ttft_ms"] == 5
    row = Message.objects.select_related("thread__agent", "thread__api_key").get(pk=msgs[0]["id"])
    assert msgs[0] == selectors.message_public_row(row)
    assert list(msgs[0])[:4] == ["id", "thread_id", "seq", "from"]


def test_unknown_thread_is_404(ops):
    for path in ("threads/7f1d1f0e-0000-4000-8000-000000000000", "threads/not-a-uuid",
                 "threads/7f1d1f0e-0000-4000-8000-000000000000/messages"):
        assert_error(ops.get(f"{API}/{path}"), 404, "thread_not_found")
    assert_error(ops.post(f"{API}/threads/7f1d1f0e-0000-4000-8000-000000000000/kill"), 404,
                 "thread_not_found")


def test_thread_messages_paginate_in_order(ops, echo_agent, make_thread):
    tid = make_thread(echo_agent, "one", session="conv")
    start = selectors.thread_get(thread_id=tid)
    assert start.message_count == 2
    page = ops.get(f"{API}/threads/{tid}/messages", {"limit": 1, "offset": 1}).json()
    assert page["count"] == 2
    assert [m["seq"] for m in page["results"]] == [1]
    assert page["results"][0]["role"] == "assistant"
    assert_error(ops.get(f"{API}/threads/{tid}/messages", {"limit": -5}), 400, "invalid",
                 "limit")


def test_global_messages_filters(ops, echo_agent, make_agent, make_thread):
    other = make_agent(slug="other")
    t1 = make_thread(echo_agent, "alpha", reply="a1")
    t2 = make_thread(other, "beta", reply="b1")
    Message.objects.filter(thread_id=t1).update(created_at=timezone.now() - timedelta(days=2))

    def texts(**params):
        r = ops.get(f"{API}/messages", params)
        assert r.status_code == 200, r.content
        return [m["payload"]["content"] for m in r.json()["results"]]

    assert texts() == ["b1", "beta", "a1", "alpha"]  # newest first
    assert texts(thread=t1) == ["a1", "alpha"]
    assert texts(agent="other") == ["b1", "beta"]
    assert texts(role="user") == ["beta", "alpha"]
    assert texts(since=(timezone.now() - timedelta(days=1)).isoformat()) == ["b1", "beta"]
    assert ops.get(f"{API}/messages", {"limit": 1}).json()["count"] == 4
    assert texts(thread=t2, role="assistant") == ["b1"]
    assert_error(ops.get(f"{API}/messages", {"role": "god"}), 400, "invalid", "role")
    assert_error(ops.get(f"{API}/messages", {"thread": "nope"}), 400, "invalid", "thread")


# ---------------------------------------------------------------------------------------------
# Control


def test_kill_an_idle_thread(ops, echo_agent, make_thread, events,
                             django_capture_on_commit_callbacks):
    tid = make_thread(echo_agent, "done already")
    with django_capture_on_commit_callbacks(execute=True):
        r = ops.post(f"{API}/threads/{tid}/kill")
    assert r.status_code == 202
    assert r.json() == {"thread_id": tid, "status": "killed", "was_running": False}
    assert Thread.objects.get(pk=tid).status == "killed"
    assert any(e["event"] == "thread_updated" and e["status"] == "killed" for e in events)
    assert ops.post(f"{API}/threads/{tid}/kill").status_code == 202  # idempotent


def test_kill_reports_a_running_turn(ops, echo_agent, make_thread):
    tid = make_thread(echo_agent, "busy", reply=None)
    assert ops.post(f"{API}/threads/{tid}/kill").json()["was_running"] is True


def test_pause_and_resume(ops, echo_agent, events, django_capture_on_commit_callbacks):
    stamp = ConfigStamp.objects.filter(pk=1).values_list("version", flat=True).first()
    with django_capture_on_commit_callbacks(execute=True):
        r = ops.post(f"{API}/agents/echo/pause")
    assert r.status_code == 200
    assert r.json()["state"] == "paused"
    assert r.json()["paused"] is True
    assert Agent.objects.get(slug="echo").paused
    assert ConfigStamp.objects.get(pk=1).version != stamp
    assert {"event": "agent_changed", "agent": "echo", "change": "paused"}.items() <= {
        **next(e for e in events if e["event"] == "agent_changed")}.items()
    assert next(e for e in events if e["event"] == "agent_state")["state"] == "paused"
    r = ops.post(f"{API}/agents/echo/resume")
    assert r.json()["state"] == "idle"
    assert not Agent.objects.get(slug="echo").paused


def test_reload_renews_the_config_stamp(ops, echo_agent):
    before = ConfigStamp.objects.get(pk=1).version
    r = ops.post(f"{API}/organism/reload")
    assert r.status_code == 202
    assert r.json() == {"status": "reload_sent"}
    assert ConfigStamp.objects.get(pk=1).version != before


@pytest.mark.parametrize(("body", "code", "param"), [
    ({"payload": "hi"}, "invalid", "to"),
    ({"to": "echo"}, "invalid", "payload"),
    ({"to": "echo", "payload": 42}, "invalid_payload", "payload"),
    ({"to": "echo", "payload": {}}, "invalid_payload", "payload"),
    ({"to": "echo", "payload": ["a list"]}, "invalid_payload", "payload"),
    ({"to": "echo", "payload": {"text": "  "}}, "invalid_payload", "payload"),
    ({"to": "echo", "payload": "   "}, "invalid_payload", "payload"),
    ({"to": "echo", "payload": "hi", "thread_id": "nope"}, "invalid", "thread_id"),
    ({"to": "echo", "payload": "hi", "thred_id": "a typo"}, "invalid", "thred_id"),
])
def test_inject_rejects_bad_input_naming_the_field(ops, echo_agent, body, code, param):
    assert_error(ops.post(f"{API}/inject", body, format="json"), 400, code, param)
    assert Message.objects.count() == 0


def test_inject_respects_the_keys_agent_list(echo_agent, make_agent, make_key):
    make_agent(slug="allowed")
    _, secret = make_key("narrow", scopes=["operator"], agents=[Agent.objects.get(slug="allowed")])
    client = APIClient()
    client.credentials(HTTP_X_API_KEY=secret)
    r = client.post(f"{API}/inject", {"to": "echo", "payload": "x"}, format="json")
    assert_error(r, 403, "agent_not_allowed", "to")
    assert Message.objects.count() == 0


def test_inject_refusals(ops, echo_agent, make_agent, make_thread):
    assert_error(ops.post(f"{API}/inject", {"to": "nobody", "payload": "x"}, format="json"),
                 404, "agent_not_found")
    assert_error(ops.post(f"{API}/inject", {"to": "echo", "payload": "x",
                                            "thread_id": "7f1d1f0e-0000-4000-8000-000000000000"},
                          format="json"), 404, "thread_not_found")
    other = make_agent(slug="other")
    tid = make_thread(other, "theirs")
    assert_error(ops.post(f"{API}/inject", {"to": "echo", "payload": "x", "thread_id": tid},
                          format="json"), 400, "thread_agent_mismatch")
    Agent.objects.filter(slug="echo").update(paused=True)
    r = ops.post(f"{API}/inject", {"to": "echo", "payload": "x"}, format="json")
    assert_error(r, 503, "agent_paused")
    assert r["Retry-After"] == "30"
    assert Message.objects.filter(thread__agent__slug="echo").count() == 0


# ---------------------------------------------------------------------------------------------
# Errors: always JSON, always a code


def test_malformed_json_is_400(ops, echo_agent):
    r = ops.post(f"{API}/inject", "{not json", content_type="application/json")
    assert_error(r, 400, "parse_error")


def test_form_posts_are_415(ops, echo_agent):
    r = ops.post(f"{API}/inject", "to=echo&payload=hi",
                 content_type="application/x-www-form-urlencoded")
    assert_error(r, 415, "unsupported_media_type")


@override_settings(GAIA_MAX_BODY_BYTES=100)
def test_oversized_body_is_413(ops, echo_agent):
    r = ops.post(f"{API}/inject", json.dumps({"to": "echo", "payload": "x" * 500}),
                 content_type="application/json")
    assert_error(r, 413, "request_too_large")


def test_json_whatever_accept_says(ops, echo_agent):
    r = ops.get(f"{API}/agents", HTTP_ACCEPT="text/html")
    assert r.status_code == 200
    assert r["Content-Type"] == "application/json"
    assert_error(APIClient().get("/api/v1/nope", HTTP_ACCEPT="text/html"), 404, "unknown_route")


def test_an_unexpected_failure_is_a_json_500_without_details(ops, monkeypatch):
    def broken():
        raise RuntimeError("database exploded: password=hunter2")

    monkeypatch.setattr(selectors, "organism_info", broken)
    r = ops.get(f"{API}/organism")
    body = assert_error(r, 500, "internal_error")
    assert "hunter2" not in r.content.decode()
    assert "Traceback" not in body["detail"]


def test_wrong_method_is_405(ops):
    assert_error(ops.delete(f"{API}/agents"), 405, "method_not_allowed")
    assert_error(ops.get(f"{API}/inject"), 405, "method_not_allowed")


@pytest.mark.parametrize("path", ["/api/v1/nothing", "/api/v1/agents/", "/api/v2/agents",
                                  "/api", "/api/"])
def test_unknown_api_routes_are_json_404(path):
    for method in ("get", "post", "delete"):
        r = getattr(APIClient(), method)(path)
        assert_error(r, 404, "unknown_route")


def test_schema_lists_every_route(client):
    r = client.get("/api/schema", {"format": "json"})
    assert r.status_code == 200
    paths = set(r.json()["paths"])
    assert {"/api/v1/organism", "/api/v1/organism/config", "/api/v1/organism/reload",
            "/api/v1/agents", "/api/v1/agents/{slug}", "/api/v1/agents/{slug}/config",
            "/api/v1/agents/{slug}/schema", "/api/v1/agents/{slug}/pause",
            "/api/v1/agents/{slug}/resume", "/api/v1/threads", "/api/v1/threads/{thread_id}",
            "/api/v1/threads/{thread_id}/messages", "/api/v1/threads/{thread_id}/kill",
            "/api/v1/messages", "/api/v1/inject"} <= paths
    assert "operatorKey" in r.json()["components"]["securitySchemes"]


@pytest.mark.parametrize("path", ["/api/docs", "/api/redoc"])
def test_docs_use_our_static_files_only(client, path):
    html = client.get(path).content.decode()
    assert "/static/drf_spectacular_sidecar/" in html
    for cdn in ("cdn.", "unpkg", "jsdelivr", "googleapis", "http://", "https://"):
        assert cdn not in html, cdn


def test_lists_take_a_constant_number_of_queries(ops, echo_agent, make_thread, make_key,
                                                 django_assert_max_num_queries):
    key, _ = make_key("owner")
    for i in range(12):
        make_thread(echo_agent, f"t{i}", api_key=key if i % 2 else None)
    # auth (key, last use), count, page; no query per row
    with django_assert_max_num_queries(6):
        assert len(ops.get(f"{API}/threads").json()["results"]) == 12
    with django_assert_max_num_queries(6):
        assert len(ops.get(f"{API}/messages").json()["results"]) == 24
    tid = make_thread(echo_agent, "detail")
    with django_assert_max_num_queries(6):
        assert len(ops.get(f"{API}/threads/{tid}").json()["messages"]) == 2
