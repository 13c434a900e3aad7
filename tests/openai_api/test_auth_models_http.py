"""Auth, rate limits, CORS, /v1/models and /health over real HTTP."""

from __future__ import annotations

import time
from datetime import timedelta

import httpx
import pytest
from django.utils import timezone

from agents.services import api_key_revoke

pytestmark = pytest.mark.django_db(transaction=True)

BODY = {"model": "echo", "messages": [{"role": "user", "content": "hi"}]}


def post(server, headers, body=BODY):
    return httpx.post(server.v1 + "/chat/completions", json=body, headers=headers, timeout=30)


def test_bearer_and_x_api_key_both_authenticate(gaia_server, echo_agent, api_key):
    assert post(gaia_server, {"Authorization": f"Bearer {api_key}"}).status_code == 200
    assert post(gaia_server, {"x-api-key": api_key}).status_code == 200


def test_key_use_is_recorded(gaia_server, echo_agent, make_key):
    key, secret = make_key()
    post(gaia_server, {"x-api-key": secret})
    key.refresh_from_db()
    assert key.last_used_at is not None


@pytest.mark.parametrize("state", ["missing", "unknown", "malformed", "revoked", "expired"])
def test_bad_keys_are_401_invalid_api_key(gaia_server, echo_agent, make_key, state):
    key, secret = make_key()
    headers = {"Authorization": f"Bearer {secret}"}
    if state == "missing":
        headers = {}
    elif state == "unknown":
        headers = {"Authorization": f"Bearer {secret[:-4]}abcd"}
    elif state == "malformed":
        headers = {"Authorization": "Bearer sk-not-ours"}
    elif state == "revoked":
        api_key_revoke(key=key)
    elif state == "expired":
        key.expires_at = timezone.now() - timedelta(seconds=1)
        key.save(update_fields=["expires_at"])
    r = post(gaia_server, headers)
    assert r.status_code == 401
    assert r.json()["error"]["code"] == "invalid_api_key"
    assert r.json()["error"]["type"] == "invalid_request_error"
    # Auth comes before everything else, even a malformed body.
    r = httpx.post(gaia_server.v1 + "/chat/completions", content=b"{", headers=headers)
    assert r.status_code == 401


def test_changes_to_a_key_in_use_show_on_the_next_request(gaia_server, make_agent, make_key):
    # The server keeps keys and agents in memory once seen; each request reads the
    # configuration stamp (on the event loop) to know whether they are still current.
    from agents.models import Agent

    make_agent(slug="echo", provider__options={})
    make_agent(slug="spare", provider__options={})
    key, secret = make_key()
    headers = {"x-api-key": secret}
    assert [post(gaia_server, headers).status_code for _ in range(3)] == [200, 200, 200]
    echo = Agent.objects.get(slug="echo")
    echo.enabled = False
    echo.save()  # as the admin does: the save renews the stamp
    assert post(gaia_server, headers).status_code == 404
    assert post(gaia_server, headers, {**BODY, "model": "spare"}).status_code == 200
    api_key_revoke(key=key)
    r = post(gaia_server, headers, {**BODY, "model": "spare"})
    assert r.status_code == 401
    assert "revoked" in r.json()["error"]["message"]


def test_a_key_in_use_expires_on_time(gaia_server, echo_agent, make_key):
    key, secret = make_key(expires_at=timezone.now() + timedelta(seconds=2))
    assert post(gaia_server, {"x-api-key": secret}).status_code == 200
    assert post(gaia_server, {"x-api-key": secret}).status_code == 200  # from memory
    time.sleep(max(0.0, (key.expires_at - timezone.now()).total_seconds()) + 0.2)
    r = post(gaia_server, {"x-api-key": secret})
    assert r.status_code == 401
    assert "expired" in r.json()["error"]["message"]


def test_models_need_a_key_too(gaia_server, echo_agent):
    assert httpx.get(gaia_server.v1 + "/models").status_code == 401


def test_key_restricted_to_agents_gets_403_elsewhere(gaia_server, make_agent, make_key):
    allowed = make_agent(slug="allowed")
    make_agent(slug="other")
    _, secret = make_key(agents=[allowed])
    headers = {"x-api-key": secret}
    ok = post(gaia_server, headers, {**BODY, "model": "allowed"})
    assert ok.status_code == 200
    r = post(gaia_server, headers, {**BODY, "model": "other"})
    assert r.status_code == 403
    assert r.json()["error"]["param"] == "model"
    listed = httpx.get(gaia_server.v1 + "/models", headers=headers).json()["data"]
    assert [m["id"] for m in listed] == ["allowed", "auto"]  # auto routes among its agents


def test_key_without_chat_scope_is_403(gaia_server, echo_agent, make_key):
    _, secret = make_key(scopes=["operator"])
    r = post(gaia_server, {"x-api-key": secret})
    assert r.status_code == 403
    assert r.json()["error"]["code"] == "insufficient_scope"


def test_rate_limit_is_429_with_retry_after(gaia_server, echo_agent, make_key):
    from tests.conftest import within_one_rate_window

    _, secret = make_key(requests_per_minute=3)
    within_one_rate_window(15)
    codes = [post(gaia_server, {"x-api-key": secret}).status_code for _ in range(3)]
    assert codes == [200, 200, 200]
    r = post(gaia_server, {"x-api-key": secret})
    assert r.status_code == 429
    assert r.json()["error"]["code"] == "rate_limit_exceeded"
    assert 1 <= int(r.headers["retry-after"]) <= 60


def test_anonymous_switch(gaia_server_factory, echo_agent, api_key):
    server = gaia_server_factory(GAIA_ALLOW_ANONYMOUS="1")
    assert post(server, {}).status_code == 200
    # A key that is presented is still checked.
    assert post(server, {"x-api-key": "gaia_00000000_nope"}).status_code == 401


def test_cors_preflight_is_answered_before_auth(gaia_server_factory, echo_agent):
    server = gaia_server_factory(CORS_ALLOWED_ORIGINS="http://localhost:3000")
    r = httpx.options(server.v1 + "/chat/completions", headers={
        "Origin": "http://localhost:3000",
        "Access-Control-Request-Method": "POST",
        "Access-Control-Request-Headers": "authorization,content-type,x-session-id",
    })
    assert r.status_code == 200
    assert r.headers["access-control-allow-origin"] == "http://localhost:3000"
    assert "authorization" in r.headers["access-control-allow-headers"]
    assert r.headers.get("access-control-allow-credentials") is None
    evil = httpx.options(server.v1 + "/chat/completions", headers={
        "Origin": "http://evil.example", "Access-Control-Request-Method": "POST"})
    assert "access-control-allow-origin" not in evil.headers


def test_models_list_shape(gaia_server, make_agent, api_key):
    make_agent(slug="alpha", display_name="Alpha", description="First.",
               max_input_tokens=1000, max_output_tokens=200)
    make_agent(slug="hidden", enabled=False)
    r = httpx.get(gaia_server.v1 + "/models", headers={"x-api-key": api_key})
    assert r.status_code == 200
    body = r.json()
    assert body["object"] == "list"
    assert [m["id"] for m in body["data"]] == ["alpha", "auto"]
    entry = body["data"][0]
    assert entry == {
        "id": "alpha", "object": "model", "created": entry["created"], "owned_by": "gaia",
        "name": "Alpha", "description": "First.", "max_input_tokens": 1000,
        "max_output_tokens": 200, "gaia": {"tools": [], "provides": {}},
    }
    assert isinstance(entry["created"], int)
    again = httpx.get(gaia_server.v1 + "/models/alpha", headers={"x-api-key": api_key}).json()
    assert again == entry
    missing = httpx.get(gaia_server.v1 + "/models/nope", headers={"x-api-key": api_key})
    assert missing.status_code == 404
    assert missing.json()["error"]["param"] == "model"


def test_admin_edits_show_on_next_request(gaia_server, make_agent, api_key):
    agent = make_agent(slug="live", display_name="Before")
    url = gaia_server.v1 + "/models/live"
    created = httpx.get(url, headers={"x-api-key": api_key}).json()["created"]
    agent.display_name, agent.description = "After", "Edited"
    agent.save()  # as the admin does
    entry = httpx.get(url, headers={"x-api-key": api_key}).json()
    assert entry["name"] == "After"
    assert entry["description"] == "Edited"
    assert entry["created"] == created  # stable across edits
    make_agent(slug="new-one")
    ids = [m["id"] for m in httpx.get(gaia_server.v1 + "/models",
                                      headers={"x-api-key": api_key}).json()["data"]]
    assert "new-one" in ids


def test_models_in_anthropic_shape(gaia_server, make_agent, api_key):
    make_agent(slug="claude-ish", display_name="Claudish")
    r = httpx.get(gaia_server.v1 + "/models",
                  headers={"x-api-key": api_key, "anthropic-version": "2023-06-01"})
    body = r.json()
    assert body["has_more"] is False
    assert body["data"][0]["type"] == "model"
    assert body["data"][0]["display_name"] == "Claudish"
    bad = httpx.get(gaia_server.v1 + "/models", headers={"anthropic-version": "2023-06-01"})
    assert bad.status_code == 401
    assert bad.json()["type"] == "error"
    assert bad.json()["error"]["type"] == "authentication_error"


@pytest.fixture
def operator_key(make_key):
    return make_key(name="ops", scopes=["operator"])[1]


def test_health_reports_components_to_operators_only(gaia_server, operator_key, api_key):
    r = httpx.get(gaia_server.url + "/health")
    assert r.status_code == 200
    # nothing about hosts, ports or names; whether it takes turns (an operator's stop)
    assert r.json() == {"status": "ok", "organism": "running"}
    r = httpx.get(gaia_server.url + "/health", headers={"x-api-key": operator_key})
    assert r.status_code == 200
    body = r.json()
    assert body["status"] == "ok"
    assert set(body["checks"]) == {"database", "channel_layer", "broker"}
    assert all(c["status"] == "ok" for c in body["checks"].values())
    chat_only = httpx.get(gaia_server.url + "/health", headers={"x-api-key": api_key})
    assert chat_only.status_code == 403
    assert chat_only.json()["error"]["code"] == "insufficient_scope"
    wrong = httpx.get(gaia_server.url + "/health", headers={"x-api-key": "gaia_0000_x"})
    assert wrong.status_code == 401


def test_v1_refuses_hosts_it_does_not_serve(gaia_server, echo_agent, api_key):
    headers = {"Authorization": f"Bearer {api_key}"}
    r = post(gaia_server, {**headers, "Host": "attacker.example"})
    assert r.status_code == 400
    assert r.json()["error"]["code"] == "disallowed_host"
    r = httpx.get(gaia_server.v1 + "/models", headers={**headers, "Host": "evil.example:80"})
    assert r.status_code == 400
    assert post(gaia_server, {**headers, "Host": "localhost"}).status_code == 200


def test_health_is_503_when_redis_is_down(gaia_server_factory, operator_key):
    from tests.conftest import free_port

    server = gaia_server_factory(REDIS_URL=f"redis://127.0.0.1:{free_port()}/0")
    r = httpx.get(server.url + "/health", timeout=10)
    assert r.status_code == 503
    assert r.json() == {"status": "unavailable", "organism": "running"}
    r = httpx.get(server.url + "/health", timeout=10, headers={"x-api-key": operator_key})
    assert r.status_code == 503
    body = r.json()
    assert body["status"] == "unavailable"
    assert body["checks"]["database"]["status"] == "ok"
    assert body["checks"]["broker"]["status"] == "error"
    assert body["checks"]["channel_layer"]["status"] == "error"


def test_rate_limited_keys_are_served_while_redis_is_down(gaia_server_factory, echo_agent,
                                                          make_key):
    from tests.conftest import free_port, within_one_rate_window

    _, secret = make_key(requests_per_minute=3)
    server = gaia_server_factory(REDIS_URL=f"redis://127.0.0.1:{free_port()}/4")
    within_one_rate_window(15)
    codes = [post(server, {"x-api-key": secret}).status_code for _ in range(4)]
    assert codes == [200, 200, 200, 429]  # limited in the process while Redis is away
    assert "rate limits counted per process" in server.log()


def test_config_changes_show_on_the_next_request(gaia_server, make_agent, make_key, admin_client):
    """The server caches keys and agents; every kind of change must still show at once."""
    from django.urls import reverse

    agent = make_agent(slug="cached")
    other = make_agent(slug="cached-other")
    key, secret = make_key()
    headers = {"x-api-key": secret}
    assert post(gaia_server, headers, {**BODY, "model": "cached"}).status_code == 200
    # An admin bulk action (a queryset update, no save signals).
    admin_client.post(reverse("admin:agents_agent_changelist"),
                      {"action": "disable_agents", "_selected_action": [agent.pk]})
    assert post(gaia_server, headers, {**BODY, "model": "cached"}).status_code == 404
    # Restricting the key to another agent (a many-to-many change).
    key.agents.set([other])
    assert post(gaia_server, headers, {**BODY, "model": "cached-other"}).status_code == 200
    admin_client.post(reverse("admin:agents_agent_changelist"),
                      {"action": "enable_agents", "_selected_action": [agent.pk]})
    assert post(gaia_server, headers, {**BODY, "model": "cached"}).status_code == 403
    # Deleting the key.
    key.delete()
    assert post(gaia_server, headers, {**BODY, "model": "cached-other"}).status_code == 401
