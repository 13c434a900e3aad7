"""What an agent can do, as configuration: the README's YAML imports as it says, export gives
it back without secrets, and a tools list that names nothing real is refused."""

from __future__ import annotations

import re

import pytest
import yaml

from agents.kernel.exceptions import InvalidRequest
from agents.models import A2aAgent, Agent, McpServer
from agents.services import agents_export, agents_import
from tests import manual

pytestmark = pytest.mark.django_db

def test_the_readme_agent_with_an_mcp_server(make_provider) -> None:
    make_provider(name="local", kind="fake")
    block = manual.block("yaml:mcp")
    assert len(block.strip().splitlines()) == 5  # "in five lines of YAML"
    agents_import(data=yaml.safe_load(block))
    server = McpServer.objects.get(name="files")
    assert (server.command, server.args, server.transport) == (
        "mcp-server-git", ["--repository", "/srv/repo"], "stdio")
    helper = Agent.objects.get(slug="helper")
    assert helper.tools == ["calculator", "current_time", "mcp:files"]
    assert (helper.memory, helper.max_steps) == ("per_key", 8)


def test_export_hides_secrets_and_import_keeps_them(make_provider) -> None:
    make_provider(name="p", kind="fake")
    agents_import(data={
        "mcp_servers": [{"name": "docs", "url": "http://127.0.0.1:9000/mcp",
                         "headers": {"Authorization": "Bearer s3cret"},
                         "headers_env": {"X-Team": "DOCS_TEAM"}, "require_approval": ["write"],
                         "allowed_tools": ["read", "write"], "timeout": 20},
                        {"name": "shell", "command": "mcp-server-git", "env": {"TOKEN": "t0k"}}],
        "agents": [{"slug": "a", "provider": "p", "tools": ["mcp:docs", "agent:b"],
                    "require_approval": "always", "approval_timeout_seconds": 60},
                   {"slug": "b", "provider": "p", "tools": ["mcp:shell"], "memory": "per_user"}]})
    doc = agents_export()
    text = yaml.safe_dump(doc)
    assert "s3cret" not in text
    assert "t0k" not in text
    servers = {s["name"]: s for s in doc["mcp_servers"]}
    assert servers["docs"]["headers"] == {"Authorization": "[hidden]"}
    assert servers["docs"]["headers_env"] == {"X-Team": "DOCS_TEAM"}
    assert (servers["docs"]["require_approval"], servers["docs"]["timeout"]) == (["write"], 20)
    agents = {a["slug"]: a for a in doc["agents"]}
    assert agents["a"]["tools"] == ["mcp:docs", "agent:b"]
    assert agents["b"]["memory"] == "per_user"
    # the export imported again changes nothing and keeps the secrets
    agents_import(data=doc)
    assert McpServer.objects.get(name="docs").headers == {"Authorization": "Bearer s3cret"}
    assert McpServer.objects.get(name="shell").env == {"TOKEN": "t0k"}


@pytest.mark.parametrize(("tools", "says"), [
    (["frobnicate"], "unknown tool 'frobnicate'"),
    (["mcp:nowhere"], "unknown tool 'mcp:nowhere'"),
    (["agent:ghost"], "unknown tool 'agent:ghost'"),
    (["agent:self"], "unknown tool 'agent:self'"),  # an agent does not call itself
    (["a2a:nobody"], "unknown tool 'a2a:nobody'"),
])
def test_tools_that_name_nothing_are_refused(make_provider, tools, says) -> None:
    make_provider(name="p", kind="fake")
    with pytest.raises(InvalidRequest, match=re.escape(says)):
        agents_import(data={"agents": [{"slug": "self", "provider": "p", "tools": tools}]})


def test_the_old_tool_field_is_refused_with_what_replaced_it(make_provider) -> None:
    make_provider(name="p", kind="fake")
    with pytest.raises(InvalidRequest, match="'tool' is gone"):
        agents_import(data={"agents": [{"slug": "x", "provider": "p", "tool": "retriever"}]})
    agents_import(data={"agents": [{"slug": "x", "provider": "p", "tool": ""}]})  # empty: fine
    assert Agent.objects.filter(slug="x").exists()


def test_remote_a2a_agents_import_and_export_as_the_manual_says(make_provider) -> None:
    make_provider(name="local", kind="fake")
    doc = {"a2a_agents": [{"name": "research", "url": "https://peer.example.com/a2a/researcher",
                           "headers_env": {"Authorization": "PEER_AUTH"}, "timeout": 120}],
           "agents": [{"slug": "helper", "provider": "local", "tools": ["a2a:research"]}]}
    report = agents_import(data=doc)
    assert "a2a_agent:research" in report.created
    remote = A2aAgent.objects.get(name="research")
    assert (remote.url, remote.headers_env, remote.timeout_seconds, remote.enabled) == (
        "https://peer.example.com/a2a/researcher", {"Authorization": "PEER_AUTH"}, 120, True)
    exported = agents_export()
    assert exported["a2a_agents"] == [{
        "name": "research", "url": "https://peer.example.com/a2a/researcher",
        "headers_env": {"Authorization": "PEER_AUTH"}, "require_approval": False,
        "enabled": True, "timeout": 120.0}]
    assert "a2a_agent:research" in agents_import(data=exported).unchanged
    with pytest.raises(InvalidRequest, match=r"a2a_agents\[0\] \(bad\): url"):
        agents_import(data={"a2a_agents": [{"name": "bad", "url": "http://user:pw@h/a2a"}]})

