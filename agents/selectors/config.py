"""Reads of the configuration as operators see it, sanitised (never a credential), and the
JSON Schema of what an agent accepts."""

from __future__ import annotations

import re
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from django.conf import settings
from django.db.models import Count

from agents.models import Agent, KnowledgeBase, McpServer, Provider, RoutingPolicy, Team
from agents.selectors.agents import agent_peers
from agents.selectors.threads import iso

REDACTED = "[redacted]"
_SECRET_OPTION = re.compile(r"key|secret|token|password|authorization|credential", re.I)


def _options_sanitised(options: Any) -> Any:
    """A provider's options with every header value and every secret-looking value hidden
    (``extra_headers`` carry credentials more often than not)."""
    if not isinstance(options, dict):
        return {}
    out: dict[str, Any] = {}
    for name, value in options.items():
        if name == "extra_headers" and isinstance(value, dict):
            out[name] = dict.fromkeys(value, REDACTED)
        elif _SECRET_OPTION.search(str(name)):
            out[name] = REDACTED
        else:
            out[name] = value
    return out


def _url_sanitised(url: str) -> str | None:
    """``url`` without the password it may carry (``https://user:secret@host/v1``)."""
    if not url:
        return None
    parts = urlsplit(url)
    if parts.password is None:
        return url
    netloc = f"{parts.username}:{REDACTED}@{parts.hostname}" + (
        f":{parts.port}" if parts.port else "")
    return urlunsplit(parts._replace(netloc=netloc))


def provider_config(provider: Provider) -> dict[str, Any]:
    """A provider as operators see it: never its secret (``has_credentials`` says whether it
    has one, ``api_key_env`` names the variable, not its value)."""
    return {
        "name": provider.name,
        "kind": provider.kind,
        "base_url": _url_sanitised(provider.base_url),
        "api_key_env": provider.api_key_env or None,
        "has_credentials": provider.has_credentials,
        "default_model": provider.default_model,
        "timeout_seconds": provider.timeout_seconds,
        "max_concurrency": provider.max_concurrency,
        "options": _options_sanitised(provider.options),
    }


def mcp_server_config(server: McpServer) -> dict[str, Any]:
    """An MCP server as operators see it: ``env`` and ``headers`` values hidden as
    ``gaia agents export`` hides them, ``headers_env`` naming variables, not their values."""
    return {
        "name": server.name,
        "transport": server.transport,
        "command": server.command or None,
        "args": list(server.args or []),
        "env": server.secrets_masked("env"),
        "url": _url_sanitised(server.url),
        "headers": server.secrets_masked("headers"),
        "headers_env": dict(server.headers_env or {}),
        "allowed_tools": list(server.allowed_tools or []),
        "require_approval": server.require_approval,
        "timeout_seconds": server.timeout_seconds,
        "enabled": server.enabled,
    }


def _refs(agent: Agent, kind: str) -> list[str]:
    """The names of ``agent``'s ``<kind>:<name>`` tools (``agent:`` delegates, ``mcp:``
    servers)."""
    return [t[len(kind) + 1:] for t in agent.tools or [] if isinstance(t, str)
            and t.startswith(f"{kind}:")]


def _teams_of() -> dict[int, list[str]]:
    """Each agent's teams (as leader or member), by agent id."""
    out: dict[int, set[str]] = {}
    for team in Team.objects.prefetch_related("memberships"):
        for agent_id in {team.leader_id, *(m.agent_id for m in team.memberships.all())}:
            out.setdefault(agent_id, set()).add(team.slug)
    return {k: sorted(v) for k, v in out.items()}


def agent_config(agent: Agent, *, provider: bool = True,
                 peers: dict[str, set[str]] | None = None,
                 teams: dict[int, list[str]] | None = None) -> dict[str, Any]:
    """An agent's configuration (what ``gaia agents export`` writes, plus its state, its
    teams and peers); with its sanitised provider, fallback providers and MCP servers unless
    ``provider=False`` (the organism config lists those once)."""
    peers = agent_peers() if peers is None else peers
    teams = _teams_of() if teams is None else teams
    fallbacks = [f.provider for f in agent.fallbacks.all()]
    out: dict[str, Any] = {
        "slug": agent.slug,
        "display_name": agent.display_name,
        "description": agent.description,
        "instructions": agent.instructions,
        "provider": agent.provider.name,
        "fallback_providers": [p.name for p in fallbacks],
        "upstream_model": agent.upstream_model or None,
        "model": agent.model_name,
        "tools": list(agent.tools or []),
        "mcp_servers": _refs(agent, "mcp"),
        "delegates_to": _refs(agent, "agent"),
        "peers": sorted(peers.get(agent.slug, ())),
        "teams": teams.get(agent.pk, []),
        "knowledge_bases": sorted(kb.slug for kb in agent.knowledge_bases.all()),
        "memory": agent.memory,
        "max_steps": agent.max_steps,
        "tool_budget_seconds": agent.tool_budget_seconds,
        "max_turn_seconds": agent.max_turn_seconds,
        "require_approval": agent.require_approval,
        "approval_timeout_seconds": agent.approval_timeout_seconds,
        "hosted_tools": agent.hosted_tools,
        "provides": dict(agent.provides or {}),
        "temperature": agent.temperature,
        "top_p": agent.top_p,
        "max_input_tokens": agent.max_input_tokens,
        "max_output_tokens": agent.max_output_tokens,
        "context_overflow": agent.context_overflow,
        "enabled": agent.enabled,
        "listed": agent.listed,
        "paused": agent.paused,
        "created_at": iso(agent.created_at),
        "updated_at": iso(agent.updated_at),
    }
    if provider:
        out["provider_config"] = provider_config(agent.provider)
        out["fallback_provider_configs"] = [provider_config(p) for p in fallbacks]
        out["mcp_server_configs"] = [mcp_server_config(s) for s in McpServer.objects.filter(
            name__in=out["mcp_servers"]).order_by("name")]
    return out


def routing_config() -> dict[str, Any]:
    """How the model id ``auto`` picks an agent (the defaults when no policy is stored)."""
    policy = RoutingPolicy.objects.select_related("router", "default_agent").first()
    policy = policy or RoutingPolicy()
    return {
        "router": policy.router.slug if policy.router else None,
        "ranker": "router agent" if policy.router else "bm25",
        "default_agent": policy.default_agent.slug if policy.default_agent else None,
        "router_timeout_seconds": policy.router_timeout_seconds,
    }


def organism_config() -> dict[str, Any]:
    """Every provider, agent, team, knowledge base and MCP server and the ``auto`` routing,
    sanitised (reference 003's ``/organism/config``)."""
    peers, teams = agent_peers(), _teams_of()
    agents = (Agent.objects.select_related("provider").order_by("slug")
              .prefetch_related("fallbacks__provider", "knowledge_bases"))
    return {
        "name": settings.GAIA_ORGANISM_NAME,
        "mode": "redis" if settings.REDIS_URL else "single-process",
        "providers": [provider_config(p) for p in Provider.objects.order_by("name")],
        "agents": [agent_config(a, provider=False, peers=peers, teams=teams) for a in agents],
        "teams": [{
            "slug": t.slug, "model": f"team/{t.slug}", "display_name": t.display_name,
            "description": t.description, "mode": t.mode, "leader": t.leader.slug,
            "members": [m.agent.slug for m in t.memberships.all()],
            "max_total_tokens": t.max_total_tokens, "max_seconds": t.max_seconds,
            "member_timeout_seconds": t.member_timeout_seconds, "enabled": t.enabled,
        } for t in Team.objects.select_related("leader").order_by("slug")
            .prefetch_related("memberships__agent")],
        "routing": routing_config(),
        "knowledge_bases": [{
            "slug": kb.slug, "name": kb.name, "description": kb.description,
            "chunk_chars": kb.chunk_chars, "chunk_overlap": kb.chunk_overlap,
            "top_k": kb.top_k, "documents": kb.document_count,
        } for kb in KnowledgeBase.objects.annotate(document_count=Count("documents"))
            .order_by("slug")],
        "mcp_servers": [mcp_server_config(s) for s in McpServer.objects.order_by("name")],
    }


INJECT_PAYLOAD_SCHEMA: dict[str, Any] = {
    "description": "POST /api/v1/inject's payload (agents.turns.inject): a non-empty string, or "
                   "an object; one whose only field is a 'text' (or 'content') string stands "
                   "for that string, any other is sent as its JSON.",
    "anyOf": [{"type": "string", "minLength": 1, "pattern": "\\S"},
              {"type": "object", "minProperties": 1}],
}


def agent_schema(agent: Agent) -> dict[str, Any]:
    """The JSON Schema (2020-12) of what ``agent`` accepts: a chat request (the OpenAI Chat
    Completions body as Gaia reads it) and an operator inject payload; ``x-gaia-tools`` names
    the tools the agent runs itself."""
    text_part = {"type": "object", "properties": {"type": {"const": "text"},
                                                   "text": {"type": "string"}},
                 "required": ["type", "text"]}
    image_part = {"type": "object", "properties": {"type": {"const": "image_url"},
                                                    "image_url": {"type": "object"}},
                  "required": ["type", "image_url"]}
    chat = {
        "type": "object",
        "description": "POST /v1/chat/completions (the same conversation is accepted by "
                       "/v1/responses and /v1/messages in their own dialects). Unknown "
                       "fields are ignored. Output beyond max_output_tokens is cut.",
        "properties": {
            "model": {"const": agent.slug},
            "messages": {
                "type": "array", "minItems": 1,
                "items": {
                    "type": "object",
                    "properties": {
                        "role": {"enum": ["system", "developer", "user", "assistant", "tool"]},
                        "content": {"anyOf": [
                            {"type": "string"}, {"type": "null"},
                            {"type": "array", "items": {"anyOf": [text_part, image_part]}},
                        ]},
                        "tool_calls": {"type": "array"},
                        "tool_call_id": {"type": "string"},
                    },
                    "required": ["role"],
                },
            },
            "stream": {"type": "boolean"},
            "max_tokens": {"type": "integer", "minimum": 1},
            "max_completion_tokens": {"type": "integer", "minimum": 1},
            "temperature": {"type": "number", "minimum": 0, "maximum": 2},
            "top_p": {"type": "number", "minimum": 0, "maximum": 1},
            "tools": {"type": "array"},
            "user": {"type": "string"},
        },
        "required": ["model", "messages"],
        "x-gaia-limits": {"max_input_tokens": agent.max_input_tokens,
                          "max_output_tokens": agent.max_output_tokens},
    }
    defs: dict[str, Any] = {"chat": chat, "inject": INJECT_PAYLOAD_SCHEMA}
    choices = [{"$ref": "#/$defs/chat"}, {"$ref": "#/$defs/inject"}]
    described = "a chat request (#/$defs/chat) or an operator inject payload (#/$defs/inject)"
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "$id": f"urn:gaia:agent:{agent.slug}:input",
        "title": f"What the agent '{agent.slug}' accepts",
        "description": f"Gaia chose to describe {described}. The chat schema lists the fields "
                       "Gaia reads; the real contract is the OpenAI Chat Completions API.",
        "$defs": defs,
        "anyOf": choices,
        "x-gaia-tools": list(agent.tools or []),
    }
