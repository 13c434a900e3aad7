"""The agent editor of the console (``ui/_agent_form.html``): the form that makes an agent on
the agents page and changes one on its page, sent to ``/api/v1/agents`` (the rule of
:func:`agents.services.agent_save`, its 400s shown next to their fields). What it offers is
what exists: providers by name (never their credentials), the tools an agent may run (the
built-ins, MCP servers, other agents, remote A2A agents) and knowledge bases."""

from __future__ import annotations

import json
from typing import Any

from agents import services
from agents.models import A2aAgent, Agent, KnowledgeBase, McpServer, Provider
from agents.models.agents import BUILTIN_TOOLS, HOSTED_POLICIES


def _defaults() -> dict[str, Any]:
    """A new agent's fields as the model's defaults have them."""
    blank = Agent()
    out = {k: getattr(blank, k) for k in services.AGENT_FIELDS}
    return {**out, "slug": "", "provider": "", "paused": False, "knowledge_bases": [],
            "fallback_providers": []}


def agent_editor_context(agent: Agent | None) -> dict[str, Any]:
    """The editor's context: ``editing`` (the agent's fields, or a new one's defaults) and
    the choices it offers."""
    values = services.agent_editable(agent) if agent is not None else _defaults()
    own = agent.slug if agent is not None else None
    catalogue = [(t, t, "built-in") for t in BUILTIN_TOOLS]
    catalogue += [(f"mcp:{n}", n, "MCP server") for n in
                  McpServer.objects.order_by("name").values_list("name", flat=True)]
    catalogue += [(f"agent:{s}", s, "agent (delegation)") for s in
                  Agent.objects.order_by("slug").values_list("slug", flat=True) if s != own]
    catalogue += [(f"a2a:{n}", n, "remote A2A agent") for n in
                  A2aAgent.objects.order_by("name").values_list("name", flat=True)]
    known = {ref for ref, _, _ in catalogue}
    catalogue += [(t, t, "no longer defined") for t in values["tools"] if t not in known]
    return {
        "editing": values,
        "editing_json": {k: json.dumps(values[k]) for k in ("require_approval", "provides")},
        "tool_choices": [{"ref": ref, "label": label, "kind": kind,
                          "checked": ref in values["tools"]} for ref, label, kind in catalogue],
        "base_choices": [{"slug": s, "name": n, "checked": s in values["knowledge_bases"]}
                         for s, n in KnowledgeBase.objects.order_by("slug").values_list(
                             "slug", "name")],
        "provider_choices": list(Provider.objects.order_by("name").values_list(
            "name", "kind", "default_model")),
        "memory_choices": Agent._meta.get_field("memory").choices,
        "overflow_choices": Agent._meta.get_field("context_overflow").choices,
        "hosted_choices": HOSTED_POLICIES,
    }
