"""Reads of the configuration as operators see it, sanitised (never a credential), and the
JSON Schema of what an agent accepts."""

from __future__ import annotations

import re
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from django.conf import settings

from agents.models import Agent, Provider
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


def agent_config(agent: Agent, *, provider: bool = True) -> dict[str, Any]:
    """An agent's configuration (what ``gaia agents export`` writes, plus its state fields);
    with its sanitised provider unless ``provider=False`` (the organism config lists
    providers once)."""
    out: dict[str, Any] = {
        "slug": agent.slug,
        "display_name": agent.display_name,
        "description": agent.description,
        "instructions": agent.instructions,
        "provider": agent.provider.name,
        "upstream_model": agent.upstream_model or None,
        "model": agent.model_name,
        "tools": list(agent.tools or []),
        "memory": agent.memory,
        "max_steps": agent.max_steps,
        "tool_budget_seconds": agent.tool_budget_seconds,
        "max_turn_seconds": agent.max_turn_seconds,
        "require_approval": agent.require_approval,
        "approval_timeout_seconds": agent.approval_timeout_seconds,
        "temperature": agent.temperature,
        "top_p": agent.top_p,
        "max_input_tokens": agent.max_input_tokens,
        "max_output_tokens": agent.max_output_tokens,
        "enabled": agent.enabled,
        "paused": agent.paused,
        "created_at": iso(agent.created_at),
        "updated_at": iso(agent.updated_at),
    }
    if provider:
        out["provider_config"] = provider_config(agent.provider)
    return out


def organism_config() -> dict[str, Any]:
    """Every provider and agent, sanitised (reference 003's ``/organism/config``)."""
    return {
        "name": settings.GAIA_ORGANISM_NAME,
        "mode": "redis" if settings.REDIS_URL else "single-process",
        "providers": [provider_config(p) for p in Provider.objects.order_by("name")],
        "agents": [agent_config(a, provider=False)
                   for a in Agent.objects.select_related("provider").order_by("slug")],
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
