"""Keys, providers and the audit trail over ``/api/v1`` (agents/apis/console.py): staff make
and revoke keys (the secret shown once), change providers (credentials write-only) and test
their connection against a real upstream on loopback; every change lands in the audit trail
with who, what and from where. API keys, even an operator's, cannot manage keys."""

from __future__ import annotations

import json

import httpx
import pytest
from rest_framework.test import APIClient

from agents.models import ApiKey, AuditEvent, Provider

API = "/api/v1"
pytestmark = pytest.mark.django_db


def error(response, status, code, param=None):
    assert response.status_code == status, response.content
    body = response.json()
    assert body["code"] == code, body
    if param is not None:
        assert body["param"] == param, body
    return body


@pytest.mark.django_db(transaction=True)  # the server process reads what the test wrote
def test_a_key_made_shown_once_listed_without_secret_and_revoked(staff, make_agent,
                                                                 gaia_server):
    make_agent(slug="support")
    make_agent(slug="other")
    r = staff.post(f"{API}/keys", {"name": "webui", "scopes": ["chat"], "agents": ["support"],
                                   "requests_per_minute": 60}, format="json")
    assert r.status_code == 201, r.content
    made = r.json()
    assert r["Cache-Control"] == "no-store"
    secret = made["secret"]
    assert secret.startswith(made["prefix"] + "_")
    assert made["agents"] == ["support"]
    assert made["state"] == "active"
    assert made["owner"] == "ann"
    key = ApiKey.objects.get(pk=made["id"])
    assert secret not in key.hashed_secret  # only its hash is kept

    listed = staff.get(f"{API}/keys").json()["results"]
    assert [k["name"] for k in listed] == ["webui"]
    assert secret not in json.dumps(listed)
    assert secret not in staff.get(f"{API}/keys/{made['id']}").content.decode()

    # the key works over /v1 (a real server), for its agent only
    chat = {"Authorization": f"Bearer {secret}"}
    body = {"model": "support", "messages": [{"role": "user", "content": "hi"}]}
    assert httpx.post(f"{gaia_server.url}/v1/chat/completions", json=body, headers=chat,
                      timeout=10).status_code == 200
    assert httpx.post(f"{gaia_server.url}/v1/chat/completions", headers=chat, timeout=10,
                      json={**body, "model": "other"}).status_code == 403

    r = staff.patch(f"{API}/keys/{made['id']}", {"agents": [], "name": "webui-2"},
                    format="json")
    assert r.status_code == 200, r.content
    assert r.json()["agents"] == []
    assert httpx.post(f"{gaia_server.url}/v1/chat/completions", headers=chat, timeout=10,
                      json={**body, "model": "other"}).status_code == 200

    r = staff.post(f"{API}/keys/{made['id']}/revoke")
    assert r.json()["state"] == "revoked"
    assert httpx.post(f"{gaia_server.url}/v1/chat/completions", json=body, headers=chat,
                      timeout=10).status_code == 401
    error(staff.patch(f"{API}/keys/{made['id']}", {"name": "again"}, format="json"), 409,
          "key_revoked")
    assert staff.get(f"{API}/keys?state=revoked").json()["count"] == 1
    assert staff.get(f"{API}/keys?state=active").json()["count"] == 0

    trail = staff.get(f"{API}/audit?target=key:{made['prefix']}").json()["results"]
    assert [(e["action"], e["actor"], e["channel"]) for e in trail] == [
        ("key_revoke", "user:ann", "rest"), ("key_update", "user:ann", "rest"),
        ("key_create", "user:ann", "rest")]
    assert trail[1]["detail"] == {"fields": ["name", "agents"]}
    assert trail[0]["ip"] == "127.0.0.1"


def test_a_key_trusted_to_speak_for_users_across_keys(staff):
    r = staff.post(f"{API}/keys", {"name": "crm", "scopes": ["chat"]}, format="json")
    assert r.json()["users_across_keys"] is False  # the default: its users are its own
    r = staff.post(f"{API}/keys", {"name": "sso", "scopes": ["chat"],
                                   "users_across_keys": True}, format="json")
    assert r.status_code == 201, r.content
    made = r.json()
    assert made["users_across_keys"] is True
    assert ApiKey.objects.get(pk=made["id"]).users_across_keys
    r = staff.patch(f"{API}/keys/{made['id']}", {"users_across_keys": False}, format="json")
    assert r.json()["users_across_keys"] is False
    assert staff.get(f"{API}/keys/{made['id']}").json()["users_across_keys"] is False
    error(staff.patch(f"{API}/keys/{made['id']}", {"users_across_keys": "perhaps"},
                      format="json"), 400, "invalid", "users_across_keys")
    trail = staff.get(f"{API}/audit?target=key:{made['prefix']}").json()["results"]
    assert [(e["action"], e["detail"]) for e in trail] == [
        ("key_update", {"fields": ["users_across_keys"]}),
        ("key_create", {"name": "sso", "scopes": ["chat"], "users_across_keys": True})]


def test_bad_key_input_names_the_field(staff, make_agent):
    make_agent(slug="support")
    error(staff.post(f"{API}/keys", {"name": "x", "scopes": ["root"]}, format="json"), 400,
          "invalid", "scopes.0")
    error(staff.post(f"{API}/keys", {"name": "x", "scopes": []}, format="json"), 400,
          "invalid", "scopes")
    error(staff.post(f"{API}/keys", {"name": "x", "scopes": ["chat"], "agents": ["nobody"]},
                     format="json"), 400, "invalid", "agents")
    error(staff.post(f"{API}/keys", {"name": "x", "scopes": ["chat"], "expires_at": "soon"},
                     format="json"), 400, "invalid", "expires_at")
    error(staff.post(f"{API}/keys", {"name": "x", "scopes": ["chat"], "rpm": 3},
                     format="json"), 400, "invalid", "rpm")
    error(staff.get(f"{API}/keys/999"), 404, "key_not_found")
    error(staff.get(f"{API}/keys?state=lost"), 400, "invalid", "state")
    assert not ApiKey.objects.filter(name="x").exists()
    assert not AuditEvent.objects.exists()


def test_only_staff_manage_keys_and_providers(make_key, django_user_model):
    _, operator = make_key("ops", scopes=["operator"])
    bearer = APIClient()
    bearer.credentials(HTTP_AUTHORIZATION=f"Bearer {operator}")
    for method, path in [("get", "keys"), ("post", "keys"), ("get", "providers"),
                         ("post", "providers")]:
        r = getattr(bearer, method)(f"{API}/{path}", {}, format="json")
        error(r, 403, "staff_required")
    # an operator key reads the audit trail, as it may operate
    assert bearer.get(f"{API}/audit").status_code == 200
    nobody = APIClient()
    user = django_user_model.objects.create_user("eve", password="pw-12345678")
    nobody.force_login(user)
    error(nobody.get(f"{API}/keys"), 403, "staff_required")
    assert APIClient().get(f"{API}/audit").status_code == 401
    assert APIClient().get(f"{API}/keys").status_code == 401


def test_session_writes_need_csrf(django_user_model):
    user = django_user_model.objects.create_user("ann", password="pw-12345678", is_staff=True)
    client = APIClient(enforce_csrf_checks=True)
    client.force_login(user)
    r = client.post(f"{API}/keys", {"name": "x", "scopes": ["chat"]}, format="json")
    assert r.status_code == 403
    assert not ApiKey.objects.exists()


def test_provider_credentials_are_write_only_and_the_connection_test_reaches_it(staff):
    from tests.fakes.openai_upstream import FakeOpenAIUpstream

    with FakeOpenAIUpstream(tokens=3, api_key="sk-upstream-secret") as up:
        r = staff.post(f"{API}/providers", {
            "name": "corp", "kind": "openai", "base_url": up.base_url,
            "default_model": "gpt-test", "api_key": "sk-wrong",
            "options": {"extra_headers": {"api-key": "hdr-secret-1"}}}, format="json")
        assert r.status_code == 201, r.content
        shown = r.json()
        assert shown["has_credentials"] is True
        for text in (r.content.decode(), staff.get(f"{API}/providers").content.decode(),
                     staff.get(f"{API}/providers/corp").content.decode()):
            assert "sk-wrong" not in text
            assert "hdr-secret-1" not in text

        probe = staff.post(f"{API}/providers/corp/test").json()
        assert probe["ok"] is False
        assert probe["kind"] == "authentication" or "401" in probe["error"] or probe["error"]
        assert "sk-wrong" not in json.dumps(probe)

        # a new key, the header kept by its mask: the upstream answers
        r = staff.patch(f"{API}/providers/corp", {
            "api_key": "sk-upstream-secret",
            "options": {"extra_headers": {"api-key": "[hidden]"}}}, format="json")
        assert r.status_code == 200, r.content
        stored = Provider.objects.get(name="corp")
        assert stored.api_key_secret == "sk-upstream-secret"
        assert stored.options["extra_headers"]["api-key"] == "hdr-secret-1"
        probe = staff.post(f"{API}/providers/corp/test").json()
        assert probe["ok"] is True, probe
        assert probe["reply"]
        assert up.requests[-1].headers["api-key"] == "hdr-secret-1"
        assert up.requests[-1].body["model"] == "gpt-test"

        # an empty key keeps the stored one; clear removes it
        staff.patch(f"{API}/providers/corp", {"api_key": "", "default_model": "gpt-2"},
                    format="json")
        assert Provider.objects.get(name="corp").api_key_secret == "sk-upstream-secret"
        staff.patch(f"{API}/providers/corp", {"clear_api_key": True}, format="json")
        assert Provider.objects.get(name="corp").api_key_secret == ""

    error(staff.post(f"{API}/providers", {"name": "corp", "kind": "openai"}, format="json"),
          400, "invalid", "name")
    error(staff.post(f"{API}/providers", {"name": "x y", "kind": "openai"}, format="json"),
          400, "invalid", "name")
    error(staff.patch(f"{API}/providers/corp", {"timeout_seconds": 0}, format="json"), 400,
          "invalid", "timeout_seconds")
    error(staff.post(f"{API}/providers/none/test"), 404, "provider_not_found")

    actions = [e["action"] for e in staff.get(f"{API}/audit?target=provider:corp")
               .json()["results"]]
    assert actions == ["provider_update", "provider_update", "provider_test",
                       "provider_update", "provider_test", "provider_create"]
    assert "sk-" not in json.dumps(staff.get(f"{API}/audit").json())


def test_audit_filters(staff):
    staff.post(f"{API}/keys", {"name": "a", "scopes": ["chat"]}, format="json")
    staff.post(f"{API}/keys", {"name": "b", "scopes": ["operator"]}, format="json")
    assert staff.get(f"{API}/audit?action=key_create").json()["count"] == 2
    assert staff.get(f"{API}/audit?action=key_revoke").json()["count"] == 0
    assert staff.get(f"{API}/audit?actor=user:ann").json()["count"] == 2
    assert staff.get(f"{API}/audit?since=2999-01-01T00:00:00Z").json()["count"] == 0
    error(staff.get(f"{API}/audit?action=explode"), 400, "invalid", "action")


@pytest.mark.django_db(transaction=True)  # a live server writes the trail
def test_control_actions_over_rest_and_the_feed_are_in_the_trail(gaia_server, make_agent,
                                                                 make_key, django_user_model):
    from websockets.sync.client import connect

    from agents.models import Thread

    agent = make_agent(slug="echo")
    thread = Thread.objects.create(agent=agent)
    key, secret = make_key("ops-bot", scopes=["operator"])
    headers = {"Authorization": f"Bearer {secret}"}
    for path in ("agents/echo/pause", "agents/echo/resume", f"threads/{thread.pk}/kill",
                 "organism/reload"):
        assert httpx.post(f"{gaia_server.url}{API}/{path}", headers=headers,
                          timeout=10).status_code < 300, path
    url = gaia_server.url.replace("http://", "ws://") + "/ws"
    with connect(url, additional_headers=headers, open_timeout=10) as sock:
        assert json.loads(sock.recv(timeout=10))["event"] == "connected"
        for n, cmd in enumerate([{"cmd": "pause", "agent": "echo"},
                                 {"cmd": "resume", "agent": "echo"},
                                 {"cmd": "kill", "thread_id": str(thread.pk)}]):
            sock.send(json.dumps({**cmd, "id": str(n)}))
            while (event := json.loads(sock.recv(timeout=10))).get("id") != str(n):
                pass
            assert event["event"] == "ack", event

    got = [(e.channel, e.action, e.target, e.actor)
           for e in AuditEvent.objects.order_by("created_at", "pk")]
    who = f"key:ops-bot ({key.prefix})"
    assert got == [
        ("rest", "pause", "agent:echo", who), ("rest", "resume", "agent:echo", who),
        ("rest", "kill", f"thread:{thread.pk}", who), ("rest", "reload", "organism", who),
        ("ws", "pause", "agent:echo", who), ("ws", "resume", "agent:echo", who),
        ("ws", "kill", f"thread:{thread.pk}", who)]
    assert {e.ip for e in AuditEvent.objects.all()} == {"127.0.0.1"}
    assert all(e.api_key_id == key.pk for e in AuditEvent.objects.all())


@pytest.mark.django_db(transaction=True)
def test_an_injected_message_is_labelled_and_audited_with_its_operator(gaia_server, make_agent,
                                                                       make_key):
    import time

    from websockets.sync.client import connect

    from agents.models import Message

    make_agent(slug="echo")
    key, secret = make_key("ops-bot", scopes=["operator"])
    headers = {"Authorization": f"Bearer {secret}"}
    r = httpx.post(f"{gaia_server.url}{API}/inject", headers=headers, timeout=10,
                   json={"to": "echo", "payload": "from REST"})
    assert r.status_code == 202, r.text
    rest_thread = r.json()["thread_id"]
    url = gaia_server.url.replace("http://", "ws://") + "/ws"
    with connect(url, additional_headers=headers, open_timeout=10) as sock:
        assert json.loads(sock.recv(timeout=10))["event"] == "connected"
        sock.send(json.dumps({"cmd": "inject", "id": "i", "to": "echo", "payload": "from WS"}))
        while (event := json.loads(sock.recv(timeout=10))).get("id") != "i":
            pass
    assert event["event"] == "ack", event
    who = f"key:ops-bot ({key.prefix})"
    for text in ("from REST", "from WS"):
        message = Message.objects.get(content=text, role="user")
        assert message.sender == f"operator {who}"
    deadline = time.monotonic() + 10
    while AuditEvent.objects.filter(action="inject").count() < 2 and time.monotonic() < deadline:
        time.sleep(0.05)
    trail = list(AuditEvent.objects.filter(action="inject").order_by("pk"))
    assert [(e.channel, e.actor) for e in trail] == [("rest", who), ("ws", who)]
    assert trail[0].target == f"thread:{rest_thread}"
    # the thread as operators read it says who spoke
    shown = httpx.get(f"{gaia_server.url}{API}/threads/{rest_thread}", headers=headers,
                      timeout=10).json()
    first = shown["messages"][0] if isinstance(shown["messages"], list) else (
        shown["messages"]["results"][0])
    assert first["from"] == f"operator {who}"
