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


def _named_import(entries: Any, *, section: str, kind: str, model: Any, fields: tuple[str, ...],
                  create_only: bool, listing: str, prepare: Any = None
                  ) -> tuple[list[str], list[str], list[str]]:
    """Create or update ``model`` rows from a config section's entries (``name``, ``fields``,
    ``timeout`` in seconds); ``(created, updated, unchanged)`` labels (``<kind>:<name>``).
    ``prepare(row, values)``: what a section does to the values first (secrets kept)."""
    created: list[str] = []
    updated: list[str] = []
    unchanged: list[str] = []
    if not isinstance(entries, list):
        raise InvalidRequest(f"{section}: a list of {listing}.")
    for i, entry in enumerate(entries):
        name = str(entry_name(entry, f"{section}[{i}]", key="name"))
        where = f"{section}[{i}] ({name})"
        entry_fields_known(entry, where, ("name", "timeout", *fields))
        label = f"{kind}:{name}"
        row = model.objects.filter(name=name).first() or model(name=name)
        if create_only and row.pk is not None:
            unchanged.append(label)
            continue
        values = {k: entry[k] for k in fields if k in entry}
        if "timeout" in entry:
            values["timeout_seconds"] = entry["timeout"]
        if prepare is not None:
            prepare(row, values)
        changed = [k for k, v in values.items() if getattr(row, k) != v]
        for k in changed:
            setattr(row, k, values[k])
        if row.pk is not None and not changed:
            unchanged.append(label)
            continue
        try:
            if row.url:
                url_parsed(str(row.url))  # the rules every URL Gaia calls or compares follows
        except UrlRefused as exc:
            raise InvalidRequest(f"{where}: url: {exc}.") from None
        try:
            row.full_clean()
        except ValidationError as exc:
            raise InvalidRequest(f"{where}: {exc.messages}") from exc
        (created if row.pk is None else updated).append(label)
        row.save()
    return created, updated, unchanged


def _named_export(model: Any, fields: tuple[str, ...], *, always: tuple[str, ...],
                  shown: Any = getattr) -> list[dict[str, Any]]:
    """Every ``model`` row as config entries: its non-empty ``fields`` (and ``always``),
    each as ``shown(row, field)`` gives it, and its timeout."""
    out = []
    for row in model.objects.order_by("name"):
        entry: dict[str, Any] = {"name": row.name}
        for k in fields:
            value = shown(row, k)
            if value not in ("", [], {}, None) or k in always:
                entry[k] = value
        entry["timeout"] = row.timeout_seconds
        out.append(entry)
    return out


def _secrets_kept(server: McpServer, values: dict[str, Any]) -> None:
    for secret in SECRET_FIELDS:
        if isinstance(values.get(secret), dict):
            values[secret] = server.secrets_kept(secret, values[secret])


def mcp_servers_import(entries: Any, *, create_only: bool) -> tuple[list[str], list[str],
                                                                    list[str]]:
    """Create or update MCP servers from ``mcp_servers:`` entries (``name`` and
    :data:`MCP_FIELDS`, ``timeout`` in seconds); ``(created, updated, unchanged)`` labels.
    A value ``[hidden]`` in ``env`` or ``headers`` keeps the stored one."""
    return _named_import(entries, section="mcp_servers", kind="mcp_server", model=McpServer,
                         fields=MCP_FIELDS, create_only=create_only, listing="servers",
                         prepare=_secrets_kept)


def mcp_servers_export() -> list[dict[str, Any]]:
    """Every MCP server as ``mcp_servers:`` entries, secrets shown as ``[hidden]``."""
    return _named_export(McpServer, MCP_FIELDS, always=("enabled",), shown=lambda row, k: (
        row.secrets_masked(k) if k in SECRET_FIELDS else getattr(row, k)))


A2A_FIELDS = ("url", "headers_env", "description", "require_approval", "enabled")


def a2a_agents_import(entries: Any, *, create_only: bool) -> tuple[list[str], list[str],
                                                                  list[str]]:
    """Create or update remote A2A agents from ``a2a_agents:`` entries (``name``, ``url``,
    ``headers_env``, ``description``, ``require_approval``, ``enabled``, ``timeout`` in
    seconds); ``(created, updated, unchanged)`` labels."""
    return _named_import(entries, section="a2a_agents", kind="a2a_agent", model=A2aAgent,
                         fields=A2A_FIELDS, create_only=create_only, listing="remote agents")


def a2a_agents_export() -> list[dict[str, Any]]:
    """Every remote A2A agent as ``a2a_agents:`` entries (headers only name variables)."""
    return _named_export(A2aAgent, A2A_FIELDS, always=("enabled", "require_approval"))


def agent_tools_check(agent: Agent, *, what: str) -> None:
    """:class:`InvalidRequest` unless every one of ``agent.tools`` names a built-in, an MCP
    server or an agent that exists."""
    for ref in agent.tools or []:
        if not isinstance(ref, str):
            raise InvalidRequest(f"{what}: tools must be names.", param="tools")
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
            "'a2a:<name>' of a remote A2A agent.", param="tools")
