"""Agents, the providers they run on, what they call (MCP servers, remote A2A agents), API
keys, the threads clients hold with them, knowledge bases, memories: one module per entity,
every model importable from ``agents.models``."""

from __future__ import annotations

from agents.models.agents import (
    APPROVAL_HELP,
    BUILTIN_TOOLS,
    HOSTED_KINDS,
    SECRET_MASK,
    SLUG_VALIDATOR,
    Agent,
    AgentFallback,
    ConfigStamp,
    Provider,
    RoutingPolicy,
    Team,
    TeamMember,
    approval_rule_valid,
    options_masked,
    options_unmasked,
    tool_offered,
)
from agents.models.audit import (
    AuditEvent,
)
from agents.models.background import (
    BackgroundResponse,
    BackgroundResponseEvent,
)
from agents.models.conversations import (
    Conversation,
)
from agents.models.keys import (
    ApiKey,
)
from agents.models.knowledge import (
    KnowledgeBase,
    KnowledgeChunk,
    KnowledgeDocument,
)
from agents.models.memory import (
    Memory,
)
from agents.models.schedules import (
    Schedule,
)
from agents.models.spend import (
    Budget,
    ModelPrice,
)
from agents.models.threads import (
    AgentMessageTally,
    Approval,
    Message,
    MessageTally,
    Thread,
    ThreadTally,
)
from agents.models.tools import (
    A2aAgent,
    McpServer,
)
from agents.models.usage import (
    UsageBucket,
    UserUsage,
)
from agents.models.webhooks import (
    WEBHOOK_EVENT_TYPES,
    WEBHOOK_RESPONSE_CHARS,
    WebhookAttempt,
    WebhookDelivery,
    WebhookEndpoint,
)

__all__ = [
    "APPROVAL_HELP",
    "Agent",
    "AgentFallback",
    "ApiKey",
    "AuditEvent",
    "BackgroundResponse",
    "BackgroundResponseEvent",
    "Budget",
    "ModelPrice",
    "Schedule",
    "Approval",
    "BUILTIN_TOOLS",
    "ConfigStamp",
    "Conversation",
    "HOSTED_KINDS",
    "KnowledgeBase",
    "KnowledgeChunk",
    "KnowledgeDocument",
    "A2aAgent",
    "McpServer",
    "Memory",
    "Message",
    "MessageTally",
    "AgentMessageTally",
    "ThreadTally",
    "Provider",
    "RoutingPolicy",
    "SECRET_MASK",
    "SLUG_VALIDATOR",
    "Team",
    "TeamMember",
    "Thread",
    "UsageBucket",
    "UserUsage",
    "WEBHOOK_EVENT_TYPES",
    "WEBHOOK_RESPONSE_CHARS",
    "WebhookAttempt",
    "WebhookDelivery",
    "WebhookEndpoint",
    "approval_rule_valid",
    "options_masked",
    "options_unmasked",
    "tool_offered",
]
