"""Agents made, changed and deleted over the operator API: ``POST /agents``, ``PATCH`` and
``DELETE /agents/{slug}``. Reading them stays an operator's (an ``operator`` key or a staff
session); writing them is staff's (a staff session or an ``admin`` key), as keys, providers
and budgets are. One rule with the console, the admin and the YAML import
(:func:`agents.services.agent_save`); every change is audited."""

from __future__ import annotations

from typing import Any

from drf_spectacular.utils import extend_schema
from rest_framework import serializers, status
from rest_framework.permissions import SAFE_METHODS
from rest_framework.request import Request
from rest_framework.response import Response

from agents import apis, selectors, services
from agents.apis.console import IsStaff
from agents.http.authentication import (
    AdminKeyAuthentication,
    StaffSessionAuthentication,
    note,
)
from agents.http.rest import StrictSerializer
from agents.models import Agent
from agents.models.agents import HOSTED_POLICIES

MEMORY_MODES = ["off", "per_key", "per_user"]
OVERFLOW = ["error", "trim_oldest"]


class AgentEditOutput(serializers.Serializer):
    """An agent as its editor holds it: the import document's entry, with ``paused``."""

    slug = serializers.CharField()
    provider = serializers.CharField(help_text="The provider's name (its credentials are "
                                     "never shown).")
    display_name = serializers.CharField()
    description = serializers.CharField(allow_blank=True)
    instructions = serializers.CharField(allow_blank=True)
    upstream_model = serializers.CharField(allow_blank=True, help_text="Blank: the "
                                           "provider's default model.")
    temperature = serializers.FloatField(allow_null=True)
    top_p = serializers.FloatField(allow_null=True)
    max_input_tokens = serializers.IntegerField()
    max_output_tokens = serializers.IntegerField()
    enabled = serializers.BooleanField()
    listed = serializers.BooleanField()
    paused = serializers.BooleanField()
    context_overflow = serializers.ChoiceField(choices=OVERFLOW)
    tools = serializers.ListField(child=serializers.CharField())
    memory = serializers.ChoiceField(choices=MEMORY_MODES)
    max_steps = serializers.IntegerField()
    tool_budget_seconds = serializers.FloatField()
    max_turn_seconds = serializers.FloatField()
    require_approval = serializers.JSONField()
    approval_timeout_seconds = serializers.FloatField()
    hosted_tools = serializers.ChoiceField(choices=[p for p, _ in HOSTED_POLICIES])
    provides = serializers.DictField()
    knowledge_bases = serializers.ListField(child=serializers.CharField())
    fallback_providers = serializers.ListField(child=serializers.CharField())


class AgentUpdateInput(StrictSerializer):
    """Every field optional: what is left out stays as it is."""

    slug = serializers.CharField(required=False, max_length=100, help_text="Only on create: "
                                 "the model id clients send (letters, digits, . _ : / -).")
    provider = serializers.CharField(required=False, max_length=100)
    display_name = serializers.CharField(required=False, max_length=200)
    description = serializers.CharField(required=False, allow_blank=True)
    instructions = serializers.CharField(required=False, allow_blank=True,
                                         trim_whitespace=False)
    upstream_model = serializers.CharField(required=False, allow_blank=True, max_length=200)
    temperature = serializers.FloatField(required=False, allow_null=True, min_value=0)
    top_p = serializers.FloatField(required=False, allow_null=True, min_value=0, max_value=1)
    max_input_tokens = serializers.IntegerField(required=False, min_value=1)
    max_output_tokens = serializers.IntegerField(required=False, min_value=1)
    enabled = serializers.BooleanField(required=False)
    listed = serializers.BooleanField(required=False)
    paused = serializers.BooleanField(required=False)
    context_overflow = serializers.ChoiceField(required=False, choices=OVERFLOW)
    tools = serializers.ListField(required=False, child=serializers.CharField(max_length=200),
                                  help_text="Built-ins, 'mcp:<server>', 'agent:<slug>', "
                                  "'a2a:<name>': each must exist.")
    memory = serializers.ChoiceField(required=False, choices=MEMORY_MODES)
    max_steps = serializers.IntegerField(required=False, min_value=0, max_value=32767)
    tool_budget_seconds = serializers.FloatField(required=False)
    max_turn_seconds = serializers.FloatField(required=False)
    require_approval = serializers.JSONField(required=False, help_text='"never", "always" '
                                             "or a list of tool names.")
    approval_timeout_seconds = serializers.FloatField(required=False)
    hosted_tools = serializers.ChoiceField(required=False,
                                           choices=[p for p, _ in HOSTED_POLICIES])
    provides = serializers.JSONField(required=False)
    knowledge_bases = serializers.ListField(required=False, child=serializers.CharField())
    fallback_providers = serializers.ListField(required=False,
                                               child=serializers.CharField())


class AgentInput(AgentUpdateInput):
    slug = serializers.CharField(max_length=100)
    provider = serializers.CharField(max_length=100)


class StaffWrites:
    """Reads as the operator API's (:class:`agents.apis.OperatorApi`); writes as staff's
    (:class:`agents.apis.console.StaffApi`)."""

    request: Any

    def initialize_request(self, request: Any, *args: Any, **kwargs: Any) -> Any:
        # A write this view takes (a method it has no handler for stays the operator API's
        # 405, not a staff check's 403)
        self._writes = (request.method not in SAFE_METHODS
                        and hasattr(self, request.method.lower()))
        return super().initialize_request(request, *args, **kwargs)  # type: ignore[misc]

    def get_authenticators(self) -> list[Any]:
        if getattr(self, "_writes", False):
            return [AdminKeyAuthentication(), StaffSessionAuthentication()]
        return super().get_authenticators()  # type: ignore[misc]

    def get_permissions(self) -> list[Any]:
        if getattr(self, "_writes", False):
            return [IsStaff()]
        return super().get_permissions()  # type: ignore[misc]

    def get_authenticate_header(self, request: Request) -> str:
        return 'Bearer realm="gaia"'


def _body(agent: Agent) -> dict:
    return AgentEditOutput(services.agent_editable(selectors.agent_get(slug=agent.slug))).data


class AgentListApi(StaffWrites, apis.AgentListApi):
    @extend_schema(request=AgentInput, responses={201: AgentEditOutput},
                   operation_id="agents_create", summary="Make an agent (staff)")
    def post(self, request: Request) -> Response:
        serializer = AgentInput(data=request.data)
        serializer.is_valid(raise_exception=True)
        agent = services.agent_save(agent=None, fields=dict(serializer.validated_data),
                                    actor=services.audit_actor_of_request(request))
        return Response(_body(agent), status=status.HTTP_201_CREATED)


class AgentDetailApi(StaffWrites, apis.AgentDetailApi):
    schema_errors = (404,)

    @extend_schema(request=AgentUpdateInput, responses=AgentEditOutput,
                   operation_id="agents_update", summary="Change an agent (staff)")
    def patch(self, request: Request, slug: str) -> Response:
        note(request, agent=slug)
        agent = selectors.agent_get(slug=slug)
        serializer = AgentUpdateInput(data=request.data)
        serializer.is_valid(raise_exception=True)
        services.agent_save(agent=agent, fields=dict(serializer.validated_data),
                            actor=services.audit_actor_of_request(request))
        return Response(_body(agent))

    @extend_schema(request=None, responses={204: None}, operation_id="agents_delete",
                   summary="Delete an agent and its threads (staff)")
    def delete(self, request: Request, slug: str) -> Response:
        note(request, agent=slug)
        services.agent_delete(agent=selectors.agent_get(slug=slug),
                              actor=services.audit_actor_of_request(request))
        return Response(status=status.HTTP_204_NO_CONTENT)

