"""The operator API of what agents do besides answering: the tool calls that wait for an
operator (``/approvals``) and what agents remember (``/agents/{slug}/memories``).

The same edge as :mod:`agents.apis` (auth, error body, pagination); each class calls one
selector or service: the rules live there, shared with the feed's ``approve``/``deny``
commands and the thread page's buttons.
"""

from __future__ import annotations

from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, extend_schema, extend_schema_serializer
from rest_framework import serializers, status
from rest_framework.request import Request
from rest_framework.response import Response

from agents import selectors, services
from agents.apis import OperatorApi
from agents.http.authentication import note
from agents.http.rest import PaginationFilter, StrictSerializer, paginated_schema
from agents.models import ApiKey, Approval


def _key(request: Request) -> ApiKey | None:
    """The request's operator key (``None``: a staff session)."""
    return request.auth if isinstance(request.auth, ApiKey) else None


class ApprovalOutput(serializers.Serializer):
    id = serializers.CharField()
    status = serializers.ChoiceField(choices=Approval.Status.choices)
    agent = serializers.CharField()
    thread_id = serializers.CharField()
    tool = serializers.CharField(help_text="The tool as the model sees it "
                                 "(mcp__<server>__<tool>, agent__<slug>, a built-in's name).")
    server = serializers.CharField(allow_null=True)
    arguments = serializers.CharField(allow_blank=True, help_text="The call's JSON arguments.")
    call_id = serializers.CharField(allow_null=True)
    created_at = serializers.CharField()
    expires_at = serializers.CharField(help_text="Undecided then, it is denied (expired).")
    decided_at = serializers.CharField(allow_null=True)
    decided_by = serializers.CharField(allow_null=True, help_text="key:<name>, user:<name> "
                                       "or timeout.")
    reason = serializers.CharField(allow_null=True)


class ApprovalListApi(OperatorApi):
    class FilterSerializer(PaginationFilter):
        status = serializers.ChoiceField(choices=[*Approval.Status.values, "any"],
                                         required=False, help_text="pending unless given.")
        agent = serializers.CharField(required=False, max_length=100, trim_whitespace=False)
        thread = serializers.UUIDField(required=False)

    OutputSerializer = ApprovalOutput

    @extend_schema(parameters=[FilterSerializer], operation_id="approvals_list",
                   summary="Tool calls waiting for an operator's decision, newest first",
                   responses=paginated_schema("PaginatedApprovals", ApprovalOutput))
    def get(self, request: Request) -> Response:
        f = self.filters(self.FilterSerializer)
        wanted = f.get("status", Approval.Status.PENDING)
        rows = selectors.approval_list(status=None if wanted == "any" else wanted,
                                       agent=f.get("agent"), thread_id=f.get("thread"))
        return self.paginated(rows, selectors.approval_public, self.OutputSerializer)


class ApprovalDecideApi(OperatorApi):
    """Approve or deny a waiting tool call: the turn that waits for it (in any process) runs
    the tool or tells the model it was denied. 404 an unknown approval, 409 one decided
    already (or expired), 403 one of an agent the key may not use."""

    schema_errors = (404, 409)

    @extend_schema_serializer(component_name="ApprovalDecision")
    class InputSerializer(StrictSerializer):
        decision = serializers.ChoiceField(choices=["approve", "deny"])
        reason = serializers.CharField(required=False, allow_blank=True, max_length=2000)

    OutputSerializer = ApprovalOutput

    @extend_schema(operation_id="approvals_get", responses=ApprovalOutput,
                   summary="One approval")
    def get(self, request: Request, approval_id: str) -> Response:
        approval = selectors.approval_get(approval_id=approval_id)
        note(request, agent=approval.agent.slug, thread=str(approval.thread_id))
        return Response(self.OutputSerializer(selectors.approval_public(approval)).data)

    @extend_schema(request=InputSerializer, responses=ApprovalOutput,
                   summary="Decide a waiting tool call")
    def post(self, request: Request, approval_id: str) -> Response:
        serializer = self.InputSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        data = serializer.validated_data
        api_key = request.auth if isinstance(request.auth, ApiKey) else None
        approval = services.approval_decide(
            approval_id=approval_id, decision=data["decision"], reason=data.get("reason", ""),
            api_key=api_key, decided_by=services.approval_decider(
                api_key=api_key, username=request.user.get_username()),
            actor=services.audit_actor_of_request(request))
        note(request, agent=approval.agent.slug, thread=str(approval.thread_id))
        return Response(self.OutputSerializer(selectors.approval_public(approval)).data)


class MemoryOutput(serializers.Serializer):
    id = serializers.IntegerField()
    scope = serializers.CharField(help_text="Whose fact: key:<id>, key:<id>/user:<name> (a "
                                  "user as that key named them), user:<name> (named by a key "
                                  "trusted across keys) or anonymous/user:<name>.")
    text = serializers.CharField()
    thread_id = serializers.CharField(allow_null=True, help_text="Where it was learnt.")
    created_at = serializers.CharField()


class AgentMemoryListApi(OperatorApi):
    class FilterSerializer(PaginationFilter):
        scope = serializers.CharField(required=False, max_length=340, trim_whitespace=False)

    OutputSerializer = MemoryOutput

    @extend_schema(parameters=[FilterSerializer], operation_id="agents_memories_list",
                   summary="What the agent remembers, newest first",
                   responses=paginated_schema("PaginatedMemories", MemoryOutput))
    def get(self, request: Request, slug: str) -> Response:
        f = self.filters(self.FilterSerializer)
        agent = selectors.agent_get(slug=slug)
        note(request, agent=agent.slug)
        # what one key's users told an agent is read only by a key that may act for it
        selectors.api_key_agent_check(api_key=_key(request), agent=agent, param="slug")
        rows = selectors.memory_list(agent_id=agent.pk, scope=f.get("scope"))
        return self.paginated(rows, selectors.memory_public, self.OutputSerializer)


class AgentMemoryDetailApi(OperatorApi):
    schema_errors = (404,)

    @extend_schema(request=None, responses={204: None}, operation_id="agents_memories_destroy",
                   summary="Make the agent forget one fact",
                   parameters=[OpenApiParameter("memory_id", OpenApiTypes.INT,
                                                OpenApiParameter.PATH)])
    def delete(self, request: Request, slug: str, memory_id: str) -> Response:
        agent = selectors.agent_get(slug=slug)
        note(request, agent=agent.slug)
        selectors.api_key_agent_check(api_key=_key(request), agent=agent, param="slug")
        services.memory_delete(agent=agent, memory_id=memory_id)
        return Response(status=status.HTTP_204_NO_CONTENT)
