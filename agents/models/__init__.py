"""Agents, the providers they run on, API keys, the threads clients hold with them, knowledge
bases: one module per entity, every model importable from ``agents.models``."""

from __future__ import annotations

from agents.models.agents import (
    SECRET_MASK,
    SLUG_VALIDATOR,
    Agent,
    AgentFallback,
    AgentTool,
    ConfigStamp,
    Provider,
    RoutingPolicy,
    Team,
    TeamMember,
    options_masked,
    options_unmasked,
)
from agents.models.keys import (
    ApiKey,
)
from agents.models.knowledge import (
    KnowledgeBase,
    KnowledgeChunk,
    KnowledgeDocument,
)
from agents.models.threads import (
    Message,
    Thread,
)

__all__ = [
    "Agent",
    "AgentFallback",
    "AgentTool",
    "ApiKey",
    "ConfigStamp",
    "KnowledgeBase",
    "KnowledgeChunk",
    "KnowledgeDocument",
    "Message",
    "Provider",
    "RoutingPolicy",
    "SECRET_MASK",
    "SLUG_VALIDATOR",
    "Team",
    "TeamMember",
    "Thread",
    "options_masked",
    "options_unmasked",
]
