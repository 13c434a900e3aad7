"""Reference 003's config views complete (issue 36 item 5): ``/organism/config`` and
``/agents/{slug}/config`` show teams, ``auto`` routing, knowledge bases, MCP servers,
delegation, memory, fallback providers, ``listed``, ``context_overflow``, tools, hosted tools,
approvals and budgets, and never a secret (hidden as ``gaia agents export`` hides them)."""

from __future__ import annotations

import pytest

from agents import services
from agents.models import (
    AgentFallback,
    KnowledgeBase,
    McpServer,
    Provider,
    RoutingPolicy,
    Team,
    TeamMember,
)

pytestmark = pytest.mark.django_db

API = "/api/v1"
SECRETS = {
    "provider key": "sk-fallback-key-never-shown-7f3a",
    "provider header": "hdr-fallback-never-shown-91bc",
    "mcp env": "mcp-env-value-never-shown-44d2",
    "mcp header": "mcp-header-value-never-shown-0e1f",
    "mcp url password": "mcp-url-password-never-shown-5a6b",
    "headers_env value": "from-the-environment-never-shown-c3d4",
}


@pytest.fixture
def organism(make_provider, make_agent, monkeypatch):
    """One of each: a team, auto routing by a router agent, a knowledge base, two MCP servers
    (stdio with env secrets, HTTP with header secrets and a header from the environment), an
    agent delegating to another, memory, a fallback provider, an unlisted agent and
    context_overflow trim_oldest."""
    monkeypatch.setenv("SEARCH_TOKEN", SECRETS["headers_env value"])
    main = make_provider(name="main")
    spare = make_provider(name="spare", kind=Provider.Kind.OPENAI,
                          base_url="https://llm.example/v1",
                          api_key_secret=SECRETS["provider key"],
                          options={"extra_headers": {"X-Key": SECRETS["provider header"]}})
    McpServer.objects.create(name="files", command="mcp-files", args=["--root", "/srv"],
                             env={"FILES_TOKEN": SECRETS["mcp env"]}, timeout_seconds=12.0)
    McpServer.objects.create(
        name="search", url=f"https://bot:{SECRETS['mcp url password']}@mcp.example/mcp",
        headers={"Authorization": "Bearer " + SECRETS["mcp header"]},
        headers_env={"X-Search-Token": "SEARCH_TOKEN"}, allowed_tools=["search"],
        require_approval=["mcp__search__search"])
    helper = make_agent(slug="helper", provider=main, listed=False,
                        context_overflow="trim_oldest", description="Looks things up.")
    boss = make_agent(
        slug="boss", provider=main, memory="per_key", max_steps=5, tool_budget_seconds=30.0,
        max_turn_seconds=90.0, require_approval=["agent__helper"],
        approval_timeout_seconds=45.0, hosted_tools="refuse",
        tools=["calculator", "knowledge_search", "mcp:files", "mcp:search", "agent:helper"],
        provides={"web_search": "mcp__search__search"})
    router = make_agent(slug="router", provider=main)
    AgentFallback.objects.create(agent=boss, provider=spare, position=0)
    kb = KnowledgeBase.objects.create(slug="handbook", name="Handbook", top_k=3)
    boss.knowledge_bases.add(kb)
    team = Team.objects.create(slug="crew", display_name="Crew", leader=boss, mode="route",
                               max_total_tokens=9000, max_seconds=60.0)
    TeamMember.objects.create(team=team, agent=helper, position=0)
    RoutingPolicy.objects.create(router=router, default_agent=helper,
                                 router_timeout_seconds=4.0)


def assert_secret_free(text: str) -> None:
    for what, secret in SECRETS.items():
        assert secret not in text, f"the {what} leaks"


def test_organism_config_shows_every_part_and_no_secret(ops, organism):
    r = ops.get(f"{API}/organism/config")
    assert r.status_code == 200
    assert_secret_free(r.content.decode())
    body = r.json()
    agents = {a["slug"]: a for a in body["agents"]}
    boss, helper = agents["boss"], agents["helper"]
    assert boss["fallback_providers"] == ["spare"]
    assert boss["knowledge_bases"] == ["handbook"]
    assert boss["mcp_servers"] == ["files", "search"]
    assert boss["delegates_to"] == ["helper"]
    assert boss["peers"] == ["helper"]
    assert helper["peers"] == ["boss"]
    assert boss["teams"] == ["crew"]
    assert helper["teams"] == ["crew"]
    assert boss["memory"] == "per_key"
    assert (boss["max_steps"], boss["tool_budget_seconds"], boss["max_turn_seconds"]) == (
        5, 30.0, 90.0)
    assert boss["require_approval"] == ["agent__helper"]
    assert boss["approval_timeout_seconds"] == 45.0
    assert boss["hosted_tools"] == "refuse"
    assert boss["provides"] == {"web_search": "mcp__search__search"}
    assert (helper["listed"], helper["context_overflow"]) == (False, "trim_oldest")
    assert (boss["listed"], boss["context_overflow"]) == (True, "error")
    spare = next(p for p in body["providers"] if p["name"] == "spare")
    assert spare["has_credentials"] is True
    assert spare["options"]["extra_headers"] == {"X-Key": "[redacted]"}

    assert body["teams"] == [{
        "slug": "crew", "model": "team/crew", "display_name": "Crew", "description": "",
        "mode": "route", "leader": "boss", "members": ["helper"], "max_total_tokens": 9000,
        "max_seconds": 60.0, "member_timeout_seconds": 120.0, "enabled": True}]
    assert body["routing"] == {"router": "router", "ranker": "router agent",
                               "default_agent": "helper", "router_timeout_seconds": 4.0}
    assert [(kb["slug"], kb["top_k"], kb["documents"]) for kb in body["knowledge_bases"]] == [
        ("handbook", 3, 0)]
    servers = {s["name"]: s for s in body["mcp_servers"]}
    assert servers["files"]["transport"] == "stdio"
    assert servers["files"]["env"] == {"FILES_TOKEN": "[hidden]"}
    assert servers["files"]["args"] == ["--root", "/srv"]
    assert servers["search"]["headers"] == {"Authorization": "[hidden]"}
    assert servers["search"]["headers_env"] == {"X-Search-Token": "SEARCH_TOKEN"}
    assert servers["search"]["url"] == "https://bot:[redacted]@mcp.example/mcp"
    assert servers["search"]["require_approval"] == ["mcp__search__search"]
    # The same rule as `gaia agents export`: the secret fields read as the export's.
    exported = {s["name"]: s for s in services.agents_export()["mcp_servers"]}
    for name, server in servers.items():
        for field in services.SECRET_FIELDS:
            assert server[field] == exported[name].get(field, {})


def test_agent_config_shows_every_part_and_no_secret(ops, organism):
    r = ops.get(f"{API}/agents/boss/config")
    assert r.status_code == 200
    assert_secret_free(r.content.decode())
    boss = r.json()
    assert boss["tools"] == ["calculator", "knowledge_search", "mcp:files", "mcp:search",
                             "agent:helper"]
    assert boss["delegates_to"] == ["helper"]
    assert boss["peers"] == ["helper"]
    assert boss["teams"] == ["crew"]
    assert boss["knowledge_bases"] == ["handbook"]
    assert boss["memory"] == "per_key"
    assert boss["fallback_providers"] == ["spare"]
    (spare,) = boss["fallback_provider_configs"]
    assert spare["name"] == "spare"
    assert spare["has_credentials"] is True
    assert spare["options"]["extra_headers"] == {"X-Key": "[redacted]"}
    servers = {s["name"]: s for s in boss["mcp_server_configs"]}
    assert servers["files"]["env"] == {"FILES_TOKEN": "[hidden]"}
    assert servers["search"]["headers"] == {"Authorization": "[hidden]"}
    assert servers["search"]["headers_env"] == {"X-Search-Token": "SEARCH_TOKEN"}
    assert (boss["hosted_tools"], boss["provides"]) == (
        "refuse", {"web_search": "mcp__search__search"})
    assert (boss["require_approval"], boss["approval_timeout_seconds"]) == (
        ["agent__helper"], 45.0)
    assert (boss["max_steps"], boss["tool_budget_seconds"], boss["max_turn_seconds"]) == (
        5, 30.0, 90.0)

    r = ops.get(f"{API}/agents/helper/config")
    assert_secret_free(r.content.decode())
    helper = r.json()
    assert (helper["listed"], helper["context_overflow"]) == (False, "trim_oldest")
    assert helper["peers"] == ["boss"]
    assert helper["delegates_to"] == []
    assert helper["teams"] == ["crew"]
    assert helper["fallback_provider_configs"] == []
    assert helper["mcp_server_configs"] == []
