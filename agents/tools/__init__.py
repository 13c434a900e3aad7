"""The tools agents run themselves (``Agent.tools``), as one :class:`Toolbox` per turn:

* built-ins by name (:mod:`agents.tools.builtins`);
* ``mcp:<server>``: that MCP server's tools (:mod:`agents.tools.mcp`), as
  ``mcp__<server>__<tool>`` (Claude Code's convention), limited to its ``allowed_tools``;
* ``agent:<slug>``: another agent, as ``agent__<slug>``, run by the caller's ``delegate``
  (the turn runtime: a child turn of its own);
* ``a2a:<name>``: a remote A2A agent, as ``a2a__<name>`` (:mod:`agents.tools.a2a`).

An agent whose ``memory`` is on has ``remember`` whatever its list says.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Awaitable, Callable
from typing import Any

from agents.infra.database import run_db
from agents.kernel import llm
from agents.models import Agent, McpServer
from agents.tools.a2a import A2aConfig, a2a_ask, a2a_configs_load
from agents.tools.base import (
    AGENTS,
    BUILTIN,
    Toolbox,
    ToolContext,
    ToolResult,
    ToolSpec,
    approval_needed,
)
from agents.tools.builtins import BUILTINS
from agents.tools.client import client_approval_needed, client_mcp_server, client_tool_allowed
from agents.tools.listing import agent_tool_description, tools_public
from agents.tools.mcp import McpConfig, McpConnection, McpError, mcp_close_all, mcp_connection

log = logging.getLogger("gaia.tools")

Delegate = Callable[[str, str, ToolContext], Awaitable[ToolResult]]

__all__ = ["AGENTS", "BUILTIN", "BUILTINS", "Delegate", "McpConfig", "ToolContext", "ToolResult",
           "ToolSpec", "Toolbox", "client_mcp_server", "mcp_close_all", "tool_names",
           "toolbox_for", "tools_public"]


def tool_names(agent: Agent, *, memory: bool = True) -> list[str]:
    """The agent's tool references, ``remember`` added when its memory is on (and, with
    ``memory``, the turn has someone to remember for)."""
    names = [str(t) for t in (agent.tools or [])]
    if memory and getattr(agent, "memory", "off") != "off" and "remember" not in names:
        names.append("remember")
    return names


def _secret(value: str) -> str:
    """A write-only value as given, or ``env:NAME``'s variable."""
    return os.environ.get(value[4:], "") if value.startswith("env:") else value


def mcp_configs_load(*, names: list[str]) -> dict[str, tuple[McpConfig, McpServer]]:
    """The enabled MCP servers ``names``, their secrets resolved (a database thread)."""
    out = {}
    for server in McpServer.objects.filter(name__in=names, enabled=True):
        headers = {k: _secret(v) for k, v in (server.headers or {}).items()}
        headers.update({k: os.environ.get(v, "") for k, v in (server.headers_env or {}).items()})
        out[server.name] = (McpConfig(
            name=server.name, command=server.command, args=tuple(server.args or ()),
            env=tuple(sorted((k, _secret(v)) for k, v in (server.env or {}).items())),
            url=server.url, headers=tuple(sorted(headers.items())),
            timeout=server.timeout_seconds, version=server.updated_at.isoformat()), server)
    return out


async def _mcp_configs(agent: Agent, names: list[str]) -> dict[str, tuple[McpConfig, McpServer]]:
    """Kept on the agent object, which the access cache renews when the configuration
    changes (an MCP server's edit renews the stamp)."""
    held = getattr(agent, "mcp_configs", None)
    if held is None or set(held) < set(names):
        held = agent.mcp_configs = await run_db(mcp_configs_load, names=names)
    return held


async def toolbox_for(agent: Agent, *, delegate: Delegate | None = None,
                      taken: set[str] | frozenset[str] = frozenset(),
                      client_mcp: tuple[llm.ClientMcp, ...] = (), memory: bool = True
                      ) -> Toolbox:
    """The tools one turn of ``agent`` offers its model. ``taken``: names the client's own
    tools use (a client's tool keeps its name; the agent's of that name is left out).
    ``client_mcp``: a Responses client's own MCP servers, for this turn only. ``memory``:
    whether the turn keeps memories (``remember`` is offered only then).
    A server that cannot be listed is left out (``problems`` says why); the turn goes on."""
    box = Toolbox()
    names = tool_names(agent, memory=memory)
    servers = [n[4:] for n in names if n.startswith("mcp:")]
    configs = await _mcp_configs(agent, servers) if servers else {}
    remotes = [n[4:] for n in names if n.startswith("a2a:")]
    peers = await _a2a_configs(agent, remotes) if remotes else {}
    rule = getattr(agent, "require_approval", "never")
    for ref in names:
        if ref in BUILTINS:
            spec = BUILTINS[ref]
            box.add(_with(spec, needs_approval=approval_needed(rule, spec.name)))
        elif ref.startswith("mcp:"):
            await _add_mcp(box, ref[4:], configs.get(ref[4:]), rule)
        elif ref.startswith("agent:") and delegate is not None:
            box.add(_agent_spec(ref[6:], delegate, rule))
        elif ref.startswith("a2a:") and ref[4:] in peers:
            box.add(_a2a_spec(peers[ref[4:]], rule))
        elif ref.startswith("a2a:"):
            box.problems.append(f"A2A agent {ref[4:]!r} does not exist or is disabled")
        else:
            box.problems.append(f"unknown tool {ref!r}")
    for name in taken & set(box.tools):
        box.tools.pop(name)
    for server in client_mcp:
        await _add_client_mcp(box, server)
    return box


async def _add_client_mcp(box: Toolbox, server: llm.ClientMcp) -> None:
    """A client's server: its own connection for this turn (its headers are the client's),
    its allowed tools as ``mcp__<label>__<tool>``, each approved by the client if its rule
    says so. Not listed: OpenAI's ``mcp_list_tools`` item with an ``error``."""
    config = McpConfig(name=server.label, url=server.url, headers=server.headers)
    connection = McpConnection(config)
    box.connections.append(connection)
    try:
        listed = await connection.tools()
    except McpError as exc:
        box.listings[server.label] = []
        box.listing_errors[server.label] = str(exc)
        return
    listing = []
    for tool in listed:
        visible = f"mcp__{server.label}__{tool.name}"
        if not client_tool_allowed(server, tool) or visible in box.tools:
            continue
        listing.append({"name": tool.name, "description": tool.description or "",
                        "input_schema": tool.input_schema or {"type": "object"}})

        async def run(args: dict[str, Any], ctx: ToolContext, tool: str = tool.name) -> ToolResult:
            return await connection.call(tool, args, within=config.timeout)

        box.add(ToolSpec(
            name=visible, description=tool.description or tool.name,
            parameters=tool.input_schema or {"type": "object", "properties": {}},
            server=server.label, tool=tool.name, run=run, timeout=config.timeout,
            client_approval=client_approval_needed(server, tool)))
    box.listings[server.label] = listing


def _with(spec: ToolSpec, **changes: Any) -> ToolSpec:
    from dataclasses import replace

    return replace(spec, **changes)


async def _add_mcp(box: Toolbox, name: str, found: tuple[McpConfig, McpServer] | None,
                   rule: Any) -> None:
    if found is None:
        box.problems.append(f"MCP server {name!r} does not exist or is disabled")
        return
    config, server = found
    try:
        connection = await mcp_connection(config)
        listed = await connection.tools()
    except McpError as exc:
        log.warning("%s", exc)
        box.problems.append(str(exc))
        return
    allowed = set(server.allowed_tools or ())
    listing = []
    for tool in listed:
        if allowed and tool.name not in allowed:
            continue
        listing.append({"name": tool.name, "description": tool.description or "",
                        "input_schema": tool.input_schema or {"type": "object"}})
        visible = f"mcp__{name}__{tool.name}"

        async def run(args: dict[str, Any], ctx: ToolContext, tool: str = tool.name,
                      within: float = config.timeout) -> ToolResult:
            return await (await mcp_connection(config)).call(tool, args, within=within)

        box.add(ToolSpec(
            name=visible, description=tool.description or tool.name,
            parameters=tool.input_schema or {"type": "object", "properties": {}},
            server=name, tool=tool.name, run=run, timeout=config.timeout,
            needs_approval=(approval_needed(server.require_approval, tool.name)
                            or approval_needed(rule, visible))))
    box.listings[name] = listing


async def _a2a_configs(agent: Agent, names: list[str]) -> dict[str, A2aConfig]:
    """Kept on the agent object as its MCP servers' are (an edit renews the stamp)."""
    held = getattr(agent, "a2a_configs", None)
    if held is None or set(held) < set(names):
        held = agent.a2a_configs = await run_db(a2a_configs_load, names=names)
    return held


def _a2a_spec(config: A2aConfig, rule: Any) -> ToolSpec:
    name = f"a2a__{config.name}"

    async def run(args: dict[str, Any], ctx: ToolContext) -> ToolResult:
        task = str(args.get("task") or "").strip()
        if not task:
            return ToolResult(f"{name}: give the task", is_error=True)
        return await a2a_ask(config, task)

    return ToolSpec(
        name=name, description=config.description or (
            f"Ask the remote agent '{config.name}' (over A2A) to do a task; it answers in text."),
        parameters={"type": "object", "properties": {"task": {
            "type": "string", "description": "What to ask, with everything it needs to know."}},
            "required": ["task"], "additionalProperties": False},
        server="a2a", tool=config.name, run=run, timeout=config.timeout,
        needs_approval=config.require_approval or approval_needed(rule, name))


def _agent_spec(slug: str, delegate: Delegate, rule: Any) -> ToolSpec:
    name = f"agent__{slug}"

    async def run(args: dict[str, Any], ctx: ToolContext) -> ToolResult:
        task = str(args.get("task") or "").strip()
        if not task:
            return ToolResult(f"{name}: give the task", is_error=True)
        return await delegate(slug, task, ctx)

    return ToolSpec(
        name=name, description=agent_tool_description(slug),
        parameters={"type": "object", "properties": {"task": {
            "type": "string", "description": "What to ask, with everything it needs to know."}},
            "required": ["task"], "additionalProperties": False},
        server=AGENTS, tool=slug, run=run, needs_approval=approval_needed(rule, name),
        timeout=3600.0)
