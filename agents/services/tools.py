"""Writes of what agents can do: MCP servers and remote A2A agents from a config document
(``mcp_servers:``, ``a2a_agents:``), and the check that an agent's ``tools`` name things that
exist."""

from __future__ import annotations

from typing import Any

from django.core.exceptions import ValidationError

from agents.kernel.exceptions import InvalidRequest
from agents.models import BUILTIN_TOOLS, A2aAgent, Agent, McpServer
from agents.selectors.urls import UrlRefused, url_parsed
from agents.services.entries import entry_fields_known, entry_name

MCP_FIELDS = ("command", "args", "env", "url", "headers", "headers_env", "allowed_tools",
              "require_approval", "enabled")
SECRET_FIELDS = ("env", "headers")  # values write-only: exported as [hidden], kept on import


def mcp_servers_import(entries: Any, *, create_only: bool) -> tuple[list[str], list[str],
                                                                    list[str]]:
    """Create or update MCP servers from ``mcp_servers:`` entries (``name`` and
    :data:`MCP_FIELDS`, ``timeout`` in seconds); ``(created, updated, unchanged)`` labels.
    A value ``[hidden]`` in ``env`` or ``headers`` keeps the stored one."""
    created: list[str] = []
    updated: list[str] = []
    unchanged: list[str] = []
    if not isinstance(entries, list):
        raise InvalidRequest("mcp_servers: a list of servers.")
    for i, entry in enumerate(entries):
        name = str(entry_name(entry, f"mcp_servers[{i}]", key="name"))
        entry_fields_known(entry, f"mcp_servers[{i}] ({name})", ("name", "timeout", *MCP_FIELDS))
        label = f"mcp_server:{name}"
        server = McpServer.objects.filter(name=name).first() or McpServer(name=name)
        if create_only and server.pk is not None:
            unchanged.append(label)
            continue
        values = {k: entry[k] for k in MCP_FIELDS if k in entry}
        if "timeout" in entry:
            values["timeout_seconds"] = entry["timeout"]
        for secret in SECRET_FIELDS:
            if isinstance(values.get(secret), dict):
                values[secret] = server.secrets_kept(secret, values[secret])
        changed = [k for k, v in values.items() if getattr(server, k) != v]
        for k in changed:
            setattr(server, k, values[k])
        if server.pk is not None and not changed:
            unchanged.append(label)
            continue
        try:
            server.full_clean()
        except ValidationError as exc:
            raise InvalidRequest(f"mcp_servers[{i}] ({name}): {exc.messages}") from exc
        try:
            if server.url:
                url_parsed(server.url)  # the rules every URL Gaia calls or compares follows
        except UrlRefused as exc:
            raise InvalidRequest(f"mcp_servers[{i}] ({name}): url: {exc}.") from None
        (created if server.pk is None else updated).append(label)
        server.save()
    return created, updated, unchanged


def mcp_servers_export() -> list[dict[str, Any]]:
    """Every MCP server as ``mcp_servers:`` entries, secrets shown as ``[hidden]``."""
    out = []
    for server in McpServer.objects.order_by("name"):
        entry: dict[str, Any] = {"name": server.name}
        for k in MCP_FIELDS:
            value = getattr(server, k)
            if k in SECRET_FIELDS:
                value = server.secrets_masked(k)
            if value not in ("", [], {}, None) or k == "enabled":
                entry[k] = value
        entry["timeout"] = server.timeout_seconds
        out.append(entry)
    return out


A2A_FIELDS = ("url", "headers_env", "description", "require_approval", "enabled")


def a2a_agents_import(entries: Any, *, create_only: bool) -> tuple[list[str], list[str],
                                                                  list[str]]:
    """Create or update remote A2A agents from ``a2a_agents:`` entries (``name``, ``url``,
    ``headers_env``, ``description``, ``require_approval``, ``enabled``, ``timeout`` in
    seconds); ``(created, updated, unchanged)`` labels."""
    created: list[str] = []
    updated: list[str] = []
    unchanged: list[str] = []
    if not isinstance(entries, list):
        raise InvalidRequest("a2a_agents: a list of remote agents.")
    for i, entry in enumerate(entries):
        name = str(entry_name(entry, f"a2a_agents[{i}]", key="name"))
        entry_fields_known(entry, f"a2a_agents[{i}] ({name})", ("name", "timeout", *A2A_FIELDS))
        label = f"a2a_agent:{name}"
        remote = A2aAgent.objects.filter(name=name).first() or A2aAgent(name=name)
        if create_only and remote.pk is not None:
            unchanged.append(label)
            continue
        values = {k: entry[k] for k in A2A_FIELDS if k in entry}
        if "timeout" in entry:
            values["timeout_seconds"] = entry["timeout"]
        if "url" in values:
            try:
                url_parsed(str(values["url"]))
            except UrlRefused as exc:
                raise InvalidRequest(f"a2a_agents[{i}] ({name}): url: {exc}") from None
        changed = [k for k, v in values.items() if getattr(remote, k) != v]
        for k in changed:
            setattr(remote, k, values[k])
        if remote.pk is not None and not changed:
            unchanged.append(label)
            continue
        try:
            remote.full_clean()
        except ValidationError as exc:
            raise InvalidRequest(f"a2a_agents[{i}] ({name}): {exc.messages[0]}") from None
        (updated if remote.pk is not None else created).append(label)
        remote.save()
    return created, updated, unchanged


def a2a_agents_export() -> list[dict[str, Any]]:
    """Every remote A2A agent as ``a2a_agents:`` entries (headers only name variables)."""
    out = []
    for remote in A2aAgent.objects.order_by("name"):
        entry: dict[str, Any] = {"name": remote.name}
        for k in A2A_FIELDS:
            value = getattr(remote, k)
            if value not in ("", [], {}, None) or k in ("enabled", "require_approval"):
                entry[k] = value
        entry["timeout"] = remote.timeout_seconds
        out.append(entry)
    return out


def agent_tools_check(agent: Agent, *, what: str) -> None:
    """:class:`InvalidRequest` unless every one of ``agent.tools`` names a built-in, an MCP
    server or an agent that exists."""
    for ref in agent.tools or []:
        if not isinstance(ref, str):
            raise InvalidRequest(f"{what}: tools must be names.")
        if ref in BUILTIN_TOOLS:
            continue
        if ref.startswith("mcp:") and McpServer.objects.filter(name=ref[4:]).exists():
            continue
        if ref.startswith("agent:") and ref[6:] != agent.slug and Agent.objects.filter(
                slug=ref[6:]).exists():
            continue
        if ref.startswith("a2a:") and A2aAgent.objects.filter(name=ref[4:]).exists():
            continue
        raise InvalidRequest(
            f"{what}: unknown tool {ref!r}: a built-in ({', '.join(BUILTIN_TOOLS)}), "
            "'mcp:<server>' of a defined MCP server, 'agent:<slug>' of another agent or "
            "'a2a:<name>' of a remote A2A agent.")
