"""The operator API under ``/api/v1`` (reference 003): queries and control, in DRF.

Each API class parses its input with a nested ``FilterSerializer`` or ``InputSerializer``,
calls one selector or service, and renders with its ``OutputSerializer`` (the shapes are the
selectors' ``thread_public``, ``message_public``, ``agent_list_public`` and ``organism_info``).

Auth: an API key with the ``operator`` scope (``Authorization: Bearer`` or ``X-API-Key``), or a
logged-in staff session (CSRF enforced on unsafe methods). No credentials: 401; a key without
the scope, or a non-staff user: 403. Every error, DRF's or Gaia's, leaves as
``{"detail": ..., "code": ..., "param": ...}`` (:mod:`agents.http.rest`, the edge shared with the
benchmarks API), never a traceback or a page.

DRF views are sync: under ASGI they run on Django's worker thread, so the ORM is fine here;
the one async call (:func:`agents.turns.turn_inject`) goes through ``async_to_sync``, which
runs it on the server's event loop, where the reply's background task must live.
"""

from __future__ import annotations

import logging
from typing import Any

from asgiref.sync import async_to_sync
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import extend_schema, extend_schema_serializer
from rest_framework import exceptions, serializers, status
from rest_framework.permissions import BasePermission
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from agents import selectors, services, turns
from agents.http.authentication import (
    OperatorKeyAuthentication,
    StaffSessionAuthentication,
    note,
)
from agents.http.rest import (
    GaiaApi,
    JsonOnly,
    PaginationFilter,
    StrictSerializer,
    paginated_schema,
    sort_field,
)
from agents.models import ApiKey, Message, Thread

log = logging.getLogger("gaia.api")


# ---------------------------------------------------------------------------------------------
# Who may call it (the rest of the edge is agents.http.rest)


class IsOperator(BasePermission):
    message = "This needs an API key with the 'operator' scope or a staff session."
    code = "operator_required"

    def has_permission(self, request: Request, view: Any) -> bool:
        if isinstance(request.auth, ApiKey):
            return True
        user = request.user
        return bool(user and user.is_authenticated and user.is_staff)


class OperatorApi(GaiaApi):
    authentication_classes = [OperatorKeyAuthentication, StaffSessionAuthentication]
    permission_classes = [IsOperator]


# ---------------------------------------------------------------------------------------------
# Output shapes (the selectors' dicts; a test checks each field list against them)


class OrganismOutput(serializers.Serializer):
    name = serializers.CharField()
    status = serializers.CharField(help_text="running, or stopped: no new turn (POST "
                                   "/organism/stop).")
    status_since = serializers.DateTimeField(allow_null=True)
    status_by = serializers.CharField()
    uptime_seconds = serializers.IntegerField()
    agent_count = serializers.IntegerField()
    active_threads = serializers.IntegerField()
    total_messages = serializers.IntegerField()
    mode = serializers.ChoiceField(choices=["redis", "single-process"])


class AgentOutput(serializers.Serializer):
    name = serializers.CharField()
    slug = serializers.CharField()
    display_name = serializers.CharField()
    description = serializers.CharField(allow_blank=True)
    enabled = serializers.BooleanField()
    paused = serializers.BooleanField()
    state = serializers.ChoiceField(choices=["idle", "processing", "waiting", "paused", "error"])
    current_thread = serializers.CharField(allow_null=True)
    queue_depth = serializers.IntegerField()
    last_activity = serializers.CharField(allow_null=True)
    peers = serializers.ListField(child=serializers.CharField())
    provider = serializers.CharField()
    model = serializers.CharField(allow_blank=True)


class ThreadOutput(serializers.Serializer):
    id = serializers.CharField()
    agent = serializers.CharField()
    title = serializers.CharField(allow_blank=True)
    status = serializers.ChoiceField(choices=Thread.Status.choices)
    participants = serializers.ListField(child=serializers.CharField())
    user = serializers.CharField(allow_null=True)
    message_count = serializers.IntegerField()
    input_tokens = serializers.IntegerField()
    output_tokens = serializers.IntegerField()
    usage_estimated = serializers.BooleanField()
    workspace_root = serializers.CharField(allow_null=True)
    forked_from = serializers.CharField(allow_null=True)
    created_at = serializers.CharField()
    last_activity = serializers.CharField()
    error = serializers.CharField(allow_null=True)
    route = serializers.DictField(allow_null=True, help_text="How `auto` or a team chose the "
                                  "agent, and why (null: the client named the agent).")
    run = serializers.IntegerField(allow_null=True, help_text="The benchmark run whose work "
                                   "this thread is (null: a client's or an operator's).")


class MessageOutput(serializers.Serializer):
    """Reference 003's message (``from`` is a Python keyword, hence :meth:`get_fields`)."""

    id = serializers.IntegerField()
    thread_id = serializers.CharField()
    seq = serializers.IntegerField()
    to = serializers.CharField()
    role = serializers.ChoiceField(choices=Message.Role.choices)
    payload_type = serializers.ChoiceField(choices=["text", "reply", "tool_calls",
                                                    "tool_result", "task"])
    payload = serializers.DictField()
    timestamp = serializers.CharField()
    input_tokens = serializers.IntegerField(allow_null=True)
    output_tokens = serializers.IntegerField(allow_null=True)
    usage_estimated = serializers.BooleanField()
    finish_reason = serializers.CharField(allow_null=True)
    ttft_ms = serializers.IntegerField(allow_null=True)
    latency_ms = serializers.IntegerField(allow_null=True)
    response_id = serializers.CharField(allow_null=True)
    dialect = serializers.CharField(allow_null=True)
    provider = serializers.CharField(allow_null=True, help_text="The provider that answered "
                                     "(a fallback provider when the agent's own failed).")
    internal = serializers.BooleanField(help_text="A team's inner work, not part of the "
                                        "conversation the client holds.")
    passages = serializers.ListField(child=serializers.DictField(), allow_null=True,
                                     help_text="Knowledge-base passages given to the model.")
    error = serializers.CharField(allow_null=True, help_text="Why this reply failed, if it "
                                  "did.")
    note = serializers.CharField(allow_null=True, help_text="What Gaia did to serve the turn "
                                 "(e.g. trimmed the oldest turns to fit the window).")
    dropped_tools = serializers.ListField(
        child=serializers.CharField(), allow_null=True,
        help_text="Hosted tools the client sent (web_search...) that no tool of the agent "
        "provides: left out of what reached the model (X-Gaia-Dropped-Tools).")

    def get_fields(self) -> dict[str, Any]:
        fields = super().get_fields()
        ordered = {k: fields.pop(k) for k in ("id", "thread_id", "seq")}
        ordered["from"] = serializers.CharField()
        ordered.update(fields)
        return ordered


class ThreadDetailOutput(ThreadOutput):
    messages = MessageOutput(many=True, help_text="The latest `limit` messages (before the "
                             "cursor `before`, if given), in conversation order.")
    messages_before = serializers.IntegerField(
        allow_null=True, help_text="The cursor to the messages before these: pass it as "
        "`before` (null: these are the first).")
    messages_older = serializers.CharField(
        allow_null=True, help_text="The URL of the page before this one (null: none).")


# ---------------------------------------------------------------------------------------------
# Queries


class OrganismApi(OperatorApi):
    @extend_schema(responses=OrganismOutput, summary="Organism info and stats")
    def get(self, request: Request) -> Response:
        return Response(OrganismOutput(selectors.organism_info()).data)


class OrganismConfigApi(OperatorApi):
    @extend_schema(responses=OpenApiTypes.OBJECT,
                   summary="Every provider and agent, sanitised (no secret, no header value)")
    def get(self, request: Request) -> Response:
        return Response(selectors.organism_config())


class AgentListApi(OperatorApi):
    class FilterSerializer(StrictSerializer):
        sort = sort_field(selectors.AGENT_ORDERING)

    @extend_schema(parameters=[FilterSerializer], responses=AgentOutput(many=True),
                   summary="Every agent with its live state", operation_id="agents_list")
    def get(self, request: Request) -> Response:
        f = self.filters(self.FilterSerializer)
        return Response(AgentOutput(selectors.agent_list_public(sort=f.get("sort")),
                                    many=True).data)


class AgentDetailApi(OperatorApi):
    @extend_schema(responses=AgentOutput, summary="One agent with its live state")
    def get(self, request: Request, slug: str) -> Response:
        note(request, agent=slug)
        return Response(AgentOutput(selectors.agent_public_get(slug=slug)).data)


class AgentConfigApi(OperatorApi):
    @extend_schema(responses=OpenApiTypes.OBJECT,
                   summary="The agent's configuration with its provider's, sanitised")
    def get(self, request: Request, slug: str) -> Response:
        note(request, agent=slug)
        return Response(selectors.agent_config(selectors.agent_get(slug=slug)))


class AgentSchemaApi(OperatorApi):
    @extend_schema(responses=OpenApiTypes.OBJECT,
                   summary="JSON Schema of what the agent accepts (chat, inject, its tool)")
    def get(self, request: Request, slug: str) -> Response:
        note(request, agent=slug)
        return Response(selectors.agent_schema(selectors.agent_get(slug=slug)))


class ThreadListApi(OperatorApi):
    class FilterSerializer(PaginationFilter):
        status = serializers.ChoiceField(choices=Thread.Status.choices, required=False)
        agent = serializers.CharField(required=False, max_length=100, trim_whitespace=False)
        since = serializers.DateTimeField(required=False, help_text="Active at or after.")
        until = serializers.DateTimeField(required=False, help_text="Begun at or before.")
        q = serializers.CharField(required=False, max_length=200, trim_whitespace=False)
        run = serializers.IntegerField(required=False, min_value=1, help_text="The threads "
                                       "of this benchmark run (left out otherwise).")
        sort = sort_field(selectors.THREAD_ORDERING)

    OutputSerializer = ThreadOutput

    @extend_schema(parameters=[FilterSerializer], summary="Threads, most recently active first",
                   operation_id="threads_list",
                   responses=paginated_schema("PaginatedThreads", ThreadOutput))
    def get(self, request: Request) -> Response:
        f = self.filters(self.FilterSerializer)
        filters = {k: f.get(k) for k in ("status", "agent", "since", "until", "q", "run")}
        return self.paginated(selectors.thread_list(**filters, sort=f.get("sort")),
                              selectors.thread_public_row,
                              self.OutputSerializer,
                              count=selectors.thread_list_count(**filters))


class ThreadDetailApi(OperatorApi):
    """A thread with a page of its messages: the latest ``limit`` (default 50, at most 200),
    and a cursor (``messages_before``, ``messages_older``) to the ones before them, page by
    page back to the first; ``…/messages`` lists them all in order."""

    class FilterSerializer(serializers.Serializer):
        limit = serializers.IntegerField(required=False, min_value=1, max_value=200)
        before = serializers.IntegerField(required=False, min_value=1, help_text="A cursor "
                                          "(`messages_before` of the page after).")

    OutputSerializer = ThreadDetailOutput

    @extend_schema(parameters=[FilterSerializer], responses=ThreadDetailOutput,
                   summary="A thread with its latest messages")
    def get(self, request: Request, thread_id: str) -> Response:
        f = self.filters(self.FilterSerializer)
        thread = selectors.thread_get(thread_id=thread_id)
        note(request, agent=thread.agent.slug, thread=str(thread.pk))
        limit = f.get("limit", 50)
        rows, older = selectors.thread_messages_page(thread_id=thread.pk,
                                                     before=f.get("before"), limit=limit)
        out = selectors.thread_public_row(thread)
        out["messages"] = [selectors.message_public_row(m) for m in rows]
        out["messages_before"] = older
        out["messages_older"] = None if older is None else request.build_absolute_uri(
            f"{request.path}?limit={limit}&before={older}")
        return Response(self.OutputSerializer(out).data)


class ThreadMessageListApi(OperatorApi):
    class FilterSerializer(PaginationFilter):
        pass

    OutputSerializer = MessageOutput

    @extend_schema(parameters=[FilterSerializer], summary="A thread's messages, in order",
                   operation_id="threads_messages_list",
                   responses=paginated_schema("PaginatedThreadMessages", MessageOutput))
    def get(self, request: Request, thread_id: str) -> Response:
        self.filters(self.FilterSerializer)
        thread = selectors.thread_get(thread_id=thread_id)
        note(request, agent=thread.agent.slug, thread=str(thread.pk))
        rows = selectors.message_list(thread_id=thread.pk, newest_first=False)
        return self.paginated(rows, selectors.message_public_row, self.OutputSerializer)


class MessageListApi(OperatorApi):
    class FilterSerializer(PaginationFilter):
        thread = serializers.UUIDField(required=False)
        agent = serializers.CharField(required=False, max_length=100, trim_whitespace=False)
        since = serializers.DateTimeField(required=False)
        role = serializers.ChoiceField(choices=Message.Role.choices, required=False)

    OutputSerializer = MessageOutput

    @extend_schema(parameters=[FilterSerializer], summary="Every stored message, newest first",
                   operation_id="messages_list",
                   responses=paginated_schema("PaginatedMessages", MessageOutput))
    def get(self, request: Request) -> Response:
        f = self.filters(self.FilterSerializer)
        rows = selectors.message_list(thread_id=f.get("thread"), agent=f.get("agent"),
                                      since=f.get("since"), role=f.get("role"))
        # Counted without counting where the list is all messages, or an agent's all.
        filters = {k for k in ("thread", "agent", "since", "role") if f.get(k) is not None}
        count = (selectors.message_total() if not filters else
                 selectors.message_count_of_agent(agent=f["agent"]) if filters == {"agent"}
                 else None)
        return self.paginated(rows, selectors.message_public_row, self.OutputSerializer,
                              count=count)


# ---------------------------------------------------------------------------------------------
# Control


class InjectApi(OperatorApi):
    """``{to, payload, thread_id?}`` -> 202 ``{thread_id, message_id}``: the message is stored
    before the answer; the agent's reply is produced in the background (on the feed, and in
    ``GET /threads/{id}`` once stored). The rules (:mod:`agents.turns.inject`, the same for the
    feed's ``inject`` command): ``payload`` a non-empty string or an object; 404 an unknown
    agent or thread; 403 an agent the key may not use; 400 a disabled agent or a thread of
    another agent; 503 a paused agent; 409 a thread busy with a turn. A ``thread_id``
    continues that thread as its own client's conversation."""

    schema_errors = (404, 409, 503)

    @extend_schema_serializer(component_name="Inject")
    class InputSerializer(StrictSerializer):
        to = serializers.CharField(max_length=100)
        payload = serializers.JSONField(help_text="A non-empty string, or an object (one with "
                                        "only a 'text' or 'content' string stands for it).")
        thread_id = serializers.UUIDField(required=False, allow_null=True)

    @extend_schema_serializer(component_name="InjectAccepted")
    class OutputSerializer(serializers.Serializer):
        thread_id = serializers.CharField()
        message_id = serializers.IntegerField()

    @extend_schema(request=InputSerializer, responses={202: OutputSerializer},
                   summary="Send a message to an agent; its reply follows in the background")
    def post(self, request: Request) -> Response:
        # One parser for the body, the feed's inject command's too (the serializer above is
        # the schema's description of it): the same input gets the same answer on both.
        data = turns.inject_parse(request.data)
        note(request, agent=data.to)
        thread_id = data.thread_id
        api_key = request.auth if isinstance(request.auth, ApiKey) else None
        prepared = turns.inject_prepare(
            to=data.to, payload=data.payload, thread_id=thread_id, api_key=api_key,
            operator=None if api_key is not None else request.user.get_username(),
            actor=services.audit_actor_of_request(request))
        injected = async_to_sync(turns.turn_inject)(prepared)
        note(request, thread=injected.thread_id, found="continued" if thread_id else "new")
        out = {"thread_id": injected.thread_id, "message_id": injected.message_id}
        return Response(self.OutputSerializer(out).data, status=status.HTTP_202_ACCEPTED)


class ThreadKillApi(OperatorApi):
    """Stop the thread's running turn wherever it runs (its partial reply is kept with
    finish reason ``killed``) and mark the thread ``killed``. Idempotent; 202: the stop
    reaches the serving process through the channel layer."""

    @extend_schema_serializer(component_name="KillAccepted")
    class OutputSerializer(serializers.Serializer):
        thread_id = serializers.CharField()
        status = serializers.CharField()
        was_running = serializers.BooleanField()

    @extend_schema(request=None, responses={202: OutputSerializer}, summary="Kill a thread")
    def post(self, request: Request, thread_id: str) -> Response:
        thread = selectors.thread_get(thread_id=thread_id)
        note(request, agent=thread.agent.slug, thread=str(thread.pk))
        running = services.thread_kill(
            thread=thread, api_key=request.auth if isinstance(request.auth, ApiKey) else None,
            actor=services.audit_actor_of_request(request))
        out = {"thread_id": str(thread.pk), "status": thread.status, "was_running": running}
        return Response(self.OutputSerializer(out).data, status=status.HTTP_202_ACCEPTED)


class AgentPauseApi(OperatorApi):
    """Pause (``paused=True``) or resume an agent: a paused agent answers ``/v1`` with 503,
    ``Retry-After`` and a message saying so; turns in flight finish. Idempotent."""

    paused = True
    OutputSerializer = AgentOutput

    @extend_schema(request=None, responses=AgentOutput)
    def post(self, request: Request, slug: str) -> Response:
        agent = selectors.agent_get(slug=slug)
        note(request, agent=agent.slug)
        services.agent_set_paused(
            agent=agent, paused=self.paused,
            api_key=request.auth if isinstance(request.auth, ApiKey) else None,
            actor=services.audit_actor_of_request(request))
        return Response(self.OutputSerializer(selectors.agent_public_get(slug=slug)).data)


class AgentResumeApi(AgentPauseApi):
    paused = False


class OrganismReloadApi(OperatorApi):
    """Every server process drops its cached agents and keys and reads them again."""

    @extend_schema_serializer(component_name="ReloadAccepted")
    class OutputSerializer(serializers.Serializer):
        status = serializers.CharField()

    @extend_schema(request=None, responses={202: OutputSerializer})
    def post(self, request: Request) -> Response:
        services.organism_reload(actor=services.audit_actor_of_request(request))
        return Response(self.OutputSerializer({"status": "reload_sent"}).data,
                        status=status.HTTP_202_ACCEPTED)


class ApiNotFoundApi(APIView):
    """Any other ``/api/...`` path: a JSON 404, whatever the method, before any auth."""

    authentication_classes: list[Any] = []
    permission_classes: list[Any] = []
    content_negotiation_class = JsonOnly

    @extend_schema(exclude=True)
    def get(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        raise exceptions.NotFound(f"Unknown route {request.method} {request.path}.",
                                  code="unknown_route")

    post = put = patch = delete = head = options = trace = get
