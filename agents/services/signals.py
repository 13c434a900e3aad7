"""Every change to agents, providers, keys, budgets or webhook endpoints renews the
configuration stamp."""

from __future__ import annotations

from typing import Any

from django.db.models.signals import m2m_changed, post_delete, post_save

from agents.models import (
    A2aAgent,
    Agent,
    AgentFallback,
    ApiKey,
    Budget,
    McpServer,
    ModelPrice,
    Provider,
    RoutingPolicy,
    Team,
    TeamMember,
    WebhookEndpoint,
)


def _changed(sender: Any, **kwargs: Any) -> None:
    from agents.services import config_changed

    if kwargs.get("raw"):  # loaddata: the stamp is renewed by the fixtures' own writes
        return
    config_changed()


def connect() -> None:
    for model in (A2aAgent, Agent, AgentFallback, ApiKey, Budget, McpServer, ModelPrice, Provider,
                  RoutingPolicy, Team, TeamMember, WebhookEndpoint):
        post_save.connect(_changed, sender=model, dispatch_uid=f"config-{model.__name__}-save")
        post_delete.connect(_changed, sender=model, dispatch_uid=f"config-{model.__name__}-del")
    m2m_changed.connect(_changed, sender=ApiKey.agents.through, dispatch_uid="config-key-agents")
    m2m_changed.connect(_changed, sender=Agent.knowledge_bases.through,
                        dispatch_uid="config-agent-knowledge")
