"""Agents made, changed and deleted over ``/api/v1/agents`` (agents/apis/agent_admin.py): one
rule with the admin and the YAML import (:func:`agents.services.agent_save`), a 400 naming
the field for every bad input, 404 for an unknown agent, staff only (401/403 otherwise), and
every change in the audit trail."""

from __future__ import annotations

from typing import Any

import pytest
from rest_framework.test import APIClient

from agents.models import Agent, AuditEvent, KnowledgeBase, McpServer, Team, TeamMember

API = "/api/v1"
pytestmark = pytest.mark.django_db


def error(response: Any, status: int, param: str | None = None) -> dict:
    assert response.status_code == status, response.content
    body = response.json()
    assert set(body) >= {"detail", "code", "param"}, body
    assert body["param"] == param, body
    return body


@pytest.fixture
def fake(make_agent: Any) -> Any:
    """A provider (``fake``) and an agent on it."""
    return make_agent(slug="base", provider__name="fake1",
                      provider__options={"reply": "hello"}).provider


def test_an_agent_made_changed_paused_and_deleted_each_audited(staff: APIClient, fake: Any
                                                               ) -> None:
    McpServer.objects.create(name="files", command="true")
    KnowledgeBase.objects.create(slug="kb1", name="KB one")
    r = staff.post(f"{API}/agents", {"slug": "helper/v1", "provider": "fake1",
                                     "instructions": "Be brief.",
                                     "tools": ["calculator", "mcp:files", "agent:base"],
                                     "knowledge_bases": ["kb1"], "memory": "per_user",
                                     "max_output_tokens": 200}, format="json")
    assert r.status_code == 201, r.content
    made = r.json()
    assert made["display_name"] == "helper/v1"  # defaults to the slug
    assert made["tools"] == ["calculator", "mcp:files", "agent:base"]
    assert (made["knowledge_bases"], made["memory"], made["max_output_tokens"]) == (
        ["kb1"], "per_user", 200)
    assert "api_key" not in str(made)
    agent = Agent.objects.get(slug="helper/v1")
    assert agent.instructions == "Be brief."

    r = staff.patch(f"{API}/agents/helper/v1", {"instructions": "Be kind.", "tools": [],
                                               "temperature": 0.2}, format="json")
    assert r.status_code == 200, r.content
    assert (r.json()["instructions"], r.json()["tools"], r.json()["temperature"]) == (
        "Be kind.", [], 0.2)
    r = staff.patch(f"{API}/agents/helper/v1", {"paused": True}, format="json")
    assert r.json()["paused"] is True
    assert staff.get(f"{API}/agents/helper/v1").json()["state"] == "paused"
    assert staff.delete(f"{API}/agents/helper/v1").status_code == 204
    assert not Agent.objects.filter(slug="helper/v1").exists()

    trail = list(AuditEvent.objects.filter(target="agent:helper/v1").order_by("pk"))
    assert [(e.action, e.actor, e.channel) for e in trail] == [
        ("agent_create", "user:ann", "rest"), ("agent_update", "user:ann", "rest"),
        ("pause", "user:ann", "rest"), ("agent_delete", "user:ann", "rest")]
    assert trail[1].detail == {"changed": ["instructions", "temperature", "tools"]}


@pytest.mark.parametrize(("body", "param"), [
    ({"provider": "fake1"}, "slug"),
    ({"slug": "base", "provider": "fake1"}, "slug"),  # exists
    ({"slug": "bad slug", "provider": "fake1"}, "slug"),
    ({"slug": "x"}, "provider"),
    ({"slug": "x", "provider": "nope"}, "provider"),
    ({"slug": "x", "provider": "fake1", "tools": ["mcp:nowhere"]}, "tools"),
    ({"slug": "x", "provider": "fake1", "tools": ["agent:x"]}, "tools"),  # itself
    ({"slug": "x", "provider": "fake1", "tools": "calculator"}, "tools"),
    ({"slug": "x", "provider": "fake1", "memory": "forever"}, "memory"),
    ({"slug": "x", "provider": "fake1", "knowledge_bases": ["none"]}, "knowledge_bases"),
    ({"slug": "x", "provider": "fake1", "fallback_providers": ["fake1"]},
     "fallback_providers"),
    ({"slug": "x", "provider": "fake1", "require_approval": "sometimes"}, "require_approval"),
    ({"slug": "x", "provider": "fake1", "provides": {"web_search": "calculator"}},
     "provides"),
    ({"slug": "x", "provider": "fake1", "max_output_tokens": 0}, "max_output_tokens"),
    ({"slug": "x", "provider": "fake1", "tool_budget_seconds": 0}, "tool_budget_seconds"),
    ({"slug": "x", "provider": "fake1", "colour": "red"}, "colour"),
])
def test_a_bad_agent_is_refused_naming_its_field(staff: APIClient, fake: Any, body: dict,
                                                 param: str) -> None:
    error(staff.post(f"{API}/agents", body, format="json"), 400, param)
    assert list(Agent.objects.values_list("slug", flat=True)) == ["base"]
    assert not AuditEvent.objects.exists()


def test_a_change_that_breaks_a_rule_is_refused_and_nothing_changes(staff: APIClient,
                                                                     fake: Any) -> None:
    error(staff.patch(f"{API}/agents/base", {"slug": "renamed"}, format="json"), 400, "slug")
    error(staff.patch(f"{API}/agents/base", {"tools": ["web"], "instructions": "x"},
                      format="json"), 400, "tools")
    error(staff.patch(f"{API}/agents/base", {"display_name": ""}, format="json"), 400,
          "display_name")
    assert Agent.objects.get(slug="base").instructions == "Be brief."
    error(staff.patch(f"{API}/agents/nobody", {"instructions": "x"}, format="json"), 404,
          "slug")
    error(staff.delete(f"{API}/agents/nobody"), 404, "slug")
    assert not AuditEvent.objects.exists()


def test_an_agent_in_a_team_is_not_deleted(staff: APIClient, fake: Any, make_agent: Any
                                           ) -> None:
    other = make_agent(slug="other", provider=fake)
    team = Team.objects.create(slug="t", display_name="T", leader=other)
    TeamMember.objects.create(team=team, agent=Agent.objects.get(slug="base"))
    body = error(staff.delete(f"{API}/agents/base"), 409)
    assert body["code"] == "agent_in_use"
    assert Agent.objects.filter(slug="base").exists()


def test_only_staff_edit_agents(fake: Any, make_key: Any, django_user_model: Any) -> None:
    anonymous = APIClient()
    assert anonymous.post(f"{API}/agents", {"slug": "x", "provider": "fake1"},
                          format="json").status_code == 401
    assert anonymous.delete(f"{API}/agents/base").status_code == 401
    _, ops_secret = make_key("ops", scopes=["operator"])
    ops = APIClient()
    ops.credentials(HTTP_AUTHORIZATION=f"Bearer {ops_secret}")
    assert ops.get(f"{API}/agents/base").status_code == 200  # reading is an operator's
    for r in (ops.post(f"{API}/agents", {"slug": "x", "provider": "fake1"}, format="json"),
              ops.patch(f"{API}/agents/base", {"instructions": "x"}, format="json"),
              ops.delete(f"{API}/agents/base")):
        assert (r.status_code, r.json()["code"]) == (403, "staff_required")
    user = django_user_model.objects.create_user("bob", password="pw-12345678")
    plain = APIClient()
    plain.force_login(user)
    assert plain.patch(f"{API}/agents/base", {"instructions": "x"},
                       format="json").status_code == 403
    _, admin_secret = make_key("provisioner", scopes=["admin"])
    admin = APIClient()
    admin.credentials(HTTP_AUTHORIZATION=f"Bearer {admin_secret}")
    r = admin.post(f"{API}/agents", {"slug": "x", "provider": "fake1"}, format="json")
    assert r.status_code == 201, r.content
    assert AuditEvent.objects.get(action="agent_create").actor.startswith("key:provisioner")
    assert Agent.objects.get(slug="base").instructions == "Be brief."
