"""The operator API under ``/api/v1`` (reference 003): queries and control, in DRF.

Each API class parses its input with a nested ``FilterSerializer`` or ``InputSerializer``,
calls one selector or service, and renders with its ``OutputSerializer`` (the shapes are the
selectors' ``thread_public``, ``message_public``, ``agent_list_public`` and ``organism_info``).

Auth: an API key with the ``operator`` scope (``Authorization: Bearer`` or ``X-API-Key``), or a
logged-in staff session (CSRF enforced on unsafe methods). No credentials: 401; a key without
the scope, or a non-staff user: 403. Every error, DRF's or Gaia's, leaves as
``{"detail": ..., "code": ...}`` (:func:`api_exception_handler`), never a traceback or a page.

DRF views are sync: under ASGI they run on Django's worker thread, so the ORM is fine here;
the one async call (:func:`agents.runtime.turn_inject`) goes through ``async_to_sync``, which
runs it on the server's event loop, where the reply's background task must live.
"""

from __future__ import annotations

import logging
from typing import Any

from asgiref.sync import async_to_sync
from django.conf import settings
from django.core.exceptions import PermissionDenied as DjangoPermissionDenied
from django.core.exceptions import RequestDataTooBig
from django.http import Http404
from drf_spectacular.authentication import SessionScheme
from drf_spectacular.extensions import OpenApiAuthenticationExtension
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import extend_schema, extend_schema_serializer, inline_serializer
from rest_framework import exceptions, serializers, status
from rest_framework.negotiation import BaseContentNegotiation, DefaultContentNegotiation
from rest_framework.pagination import LimitOffsetPagination
from rest_framework.permissions import BasePermission
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView
from rest_framework.views import exception_handler as drf_exception_handler

from agents import runtime, selectors, services
from agents.authentication import (
    BenchmarksKeyAuthentication,
    OperatorKeyAuthentication,
    StaffSessionAuthentication,
    note,
)
from agents.exceptions import (
    AgentPaused,
    GaiaError,
    InvalidRequest,
    PayloadTooLarge,
    PermissionDenied,
)
from agents.models import Agent, ApiKey, Message, Thread
from agents.schema import ApiAutoSchema

log = logging.getLogger("gaia.api")


# ---------------------------------------------------------------------------------------------
# Edge: authentication, permission, errors, pagination


class IsOperator(BasePermission):
    message = "This needs an API key with the 'operator' scope or a staff session."
    code = "operator_required"

    def has_permission(self, request: Request, view: Any) -> bool:
        if isinstance(request.auth, ApiKey):
            return True
        user = request.user
        return bool(user and user.is_authenticated and user.is_staff)


def api_exception_handler(exc: Exception, context: dict[str, Any]) -> Response:
    """Every error of the operator API as ``{"detail", "code"}`` (plus ``param`` and
    ``errors`` for a field's validation error); 500s are logged and say nothing more."""
    if isinstance(exc, RequestDataTooBig):
        exc = PayloadTooLarge(
            f"The request body is larger than {settings.GAIA_MAX_BODY_BYTES} bytes.")
    if isinstance(exc, GaiaError):
        body: dict[str, Any] = {"detail": exc.message, "code": exc.code or exc.kind}
        if exc.param:
            body["param"] = exc.param
        response = Response(body, status=exc.status)
        if exc.retry_after is not None:
            response["Retry-After"] = str(exc.retry_after)
        return response
    if isinstance(exc, Http404):
        exc = exceptions.NotFound()
    elif isinstance(exc, DjangoPermissionDenied):
        exc = exceptions.PermissionDenied()
    response = drf_exception_handler(exc, context)
    if response is None:
        request = context.get("request")
        log.error("unhandled error on %s %s", getattr(request, "method", "?"),
                  getattr(request, "path", "?"), exc_info=exc)
        return Response({"detail": "The server had an error while processing your request.",
                         "code": "internal_error"}, status=500)
    assert isinstance(exc, exceptions.APIException)
    if isinstance(exc, exceptions.ValidationError):
        errors = exc.detail if isinstance(exc.detail, dict) else {"non_field_errors": exc.detail}
        field, messages = next(iter(errors.items()))
        first = messages[0] if isinstance(messages, list) and messages else messages
        if isinstance(first, dict):  # a nested serializer's error
            inner, inner_messages = next(iter(first.items()))
            field = f"{field}.{inner}"
            first = inner_messages[0] if isinstance(inner_messages, list) else inner_messages
        response.data = {"detail": f"{field}: {first}", "code": "invalid", "param": field,
                         "errors": errors}
    else:
        code = getattr(exc.detail, "code", None) or exc.default_code
        response.data = {"detail": str(exc.detail), "code": code}
    return response


class JsonOnly(BaseContentNegotiation):
    """JSON whatever the client's ``Accept`` says (a browser's ``text/html`` included): the
    operator API has no other representation, and a 406 helps nobody."""

    def select_parser(self, request: Request, parsers: list[Any]) -> Any:
        return DefaultContentNegotiation().select_parser(request, parsers)

    def select_renderer(self, request: Request, renderers: list[Any],
                        format_suffix: str | None = None) -> tuple[Any, str]:
        return renderers[0], renderers[0].media_type


class Pagination(LimitOffsetPagination):
    default_limit = 50
    max_limit = 200


class PaginationFilter(serializers.Serializer):
    """``limit`` and ``offset`` checked (DRF's paginator silently ignores bad values)."""

    limit = serializers.IntegerField(required=False, min_value=1, max_value=Pagination.max_limit)
    offset = serializers.IntegerField(required=False, min_value=0)


class OperatorApi(APIView):
    schema = ApiAutoSchema()
    content_negotiation_class = JsonOnly
    authentication_classes = [OperatorKeyAuthentication, StaffSessionAuthentication]
    permission_classes = [IsOperator]

    def initial(self, request: Request, *args: Any, **kwargs: Any) -> None:
        # DRF reads a JSON body whole whatever Django's upload limit says; the ASGI guard
        # (openai_api.asgi.BodyLimit) answers first in production, this in every other case.
        try:
            length = int(request.META.get("CONTENT_LENGTH") or 0)
        except ValueError:
            length = 0
        if length > settings.GAIA_MAX_BODY_BYTES:
            raise PayloadTooLarge(
                f"The request body is larger than {settings.GAIA_MAX_BODY_BYTES} bytes.")
        super().initial(request, *args, **kwargs)

    def filters(self, serializer_class: type[serializers.Serializer]) -> dict[str, Any]:
        # A plain dict, not the QueryDict: DRF reads an empty form value as "absent", so
        # ``?limit=`` or ``?status=`` passed unchecked where the schema promises a value.
        serializer = serializer_class(data=self.request.query_params.dict())
        serializer.is_valid(raise_exception=True)
        return dict(serializer.validated_data)

    def paginated(self, rows: Any, render: Any, output: type[serializers.Serializer]
                  ) -> Response:
        paginator = Pagination()
        page = paginator.paginate_queryset(rows, self.request, view=self)
        data = output([render(r) for r in page or []], many=True).data
        return paginator.get_paginated_response(data)


# ---------------------------------------------------------------------------------------------
# Output shapes (the selectors' dicts; a test checks each field list against them)


class OrganismOutput(serializers.Serializer):
    name = serializers.CharField()
    status = serializers.CharField()
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

    def get_fields(self) -> dict[str, Any]:
        fields = super().get_fields()
        ordered = {k: fields.pop(k) for k in ("id", "thread_id", "seq")}
        ordered["from"] = serializers.CharField()
        ordered.update(fields)
        return ordered


class ThreadDetailOutput(ThreadOutput):
    messages = MessageOutput(many=True)


def _paginated(item: type[serializers.Serializer], name: str) -> Any:
    return inline_serializer(name=name, fields={
        "count": serializers.IntegerField(),
        "next": serializers.URLField(allow_null=True),
        "previous": serializers.URLField(allow_null=True),
        "results": item(many=True),
    })


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
    @extend_schema(responses=AgentOutput(many=True), summary="Every agent with its live state",
                   operation_id="agents_list")
    def get(self, request: Request) -> Response:
        return Response(AgentOutput(selectors.agent_list_public(), many=True).data)


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
        since = serializers.DateTimeField(required=False)
        q = serializers.CharField(required=False, max_length=200, trim_whitespace=False)

    OutputSerializer = ThreadOutput

    @extend_schema(parameters=[FilterSerializer], summary="Threads, most recently active first",
                   operation_id="threads_list",
                   responses=_paginated(ThreadOutput, "PaginatedThreads"))
    def get(self, request: Request) -> Response:
        f = self.filters(self.FilterSerializer)
        rows = selectors.thread_list(status=f.get("status"), agent=f.get("agent"),
                                     since=f.get("since"), q=f.get("q"))
        return self.paginated(rows, selectors.thread_public_row, self.OutputSerializer)


class ThreadDetailApi(OperatorApi):
    OutputSerializer = ThreadDetailOutput

    @extend_schema(responses=ThreadDetailOutput, summary="A thread with its messages")
    def get(self, request: Request, thread_id: str) -> Response:
        thread = selectors.thread_get(thread_id=thread_id)
        note(request, agent=thread.agent.slug, thread=str(thread.pk))
        out = selectors.thread_public_row(thread)
        out["messages"] = [selectors.message_public_row(m)
                           for m in selectors.message_list(thread_id=thread.pk,
                                                           newest_first=False)]
        return Response(self.OutputSerializer(out).data)


class ThreadMessageListApi(OperatorApi):
    class FilterSerializer(PaginationFilter):
        pass

    OutputSerializer = MessageOutput

    @extend_schema(parameters=[FilterSerializer], summary="A thread's messages, in order",
                   operation_id="threads_messages_list",
                   responses=_paginated(MessageOutput, "PaginatedThreadMessages"))
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
                   responses=_paginated(MessageOutput, "PaginatedMessages"))
    def get(self, request: Request) -> Response:
        f = self.filters(self.FilterSerializer)
        rows = selectors.message_list(thread_id=f.get("thread"), agent=f.get("agent"),
                                      since=f.get("since"), role=f.get("role"))
        return self.paginated(rows, selectors.message_public_row, self.OutputSerializer)


# ---------------------------------------------------------------------------------------------
# Control


class InjectApi(OperatorApi):
    """``{to, payload, thread_id?}`` -> 202 ``{thread_id, message_id}``: the message is stored
    before the answer; the agent's reply is produced in the background (on the feed, and in
    ``GET /threads/{id}`` once stored). ``payload``: a string, or an object with ``text`` (or
    ``content``) holding one. A ``thread_id`` continues that thread (its agent must be
    ``to``); 409 if a turn is running on it. A key limited to some agents may only inject
    into those (403); 404 for an unknown agent or thread."""

    schema_errors = (404, 409, 503)

    @extend_schema_serializer(component_name="Inject")
    class InputSerializer(serializers.Serializer):
        to = serializers.CharField(max_length=100)
        payload = serializers.JSONField()
        thread_id = serializers.UUIDField(required=False, allow_null=True)

        def validate_payload(self, value: Any) -> str:
            if isinstance(value, dict):
                value = value.get("text", value.get("content"))
            if not isinstance(value, str) or not value.strip():
                raise serializers.ValidationError(
                    "Send a non-empty string, or an object with a 'text' (or 'content') string.",
                    code="invalid_payload")
            return value

    @extend_schema_serializer(component_name="InjectAccepted")
    class OutputSerializer(serializers.Serializer):
        thread_id = serializers.CharField()
        message_id = serializers.IntegerField()

    @extend_schema(request=InputSerializer, responses={202: OutputSerializer},
                   summary="Send a message to an agent; its reply follows in the background")
    def post(self, request: Request) -> Response:
        serializer = self.InputSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        data = serializer.validated_data
        agent = selectors.agent_get(slug=data["to"])
        note(request, agent=agent.slug)
        api_key = request.auth if isinstance(request.auth, ApiKey) else None
        allowed = getattr(api_key, "allowed_agent_ids", None)
        if allowed and agent.pk not in allowed:
            raise PermissionDenied(f"This API key may not talk to the agent '{agent.slug}'.",
                                   param="to", code="agent_not_allowed")
        user = None if api_key is not None else request.user.get_username()
        thread_id = data.get("thread_id")
        if thread_id is not None:
            thread = selectors.thread_get(thread_id=thread_id)
            if thread.agent_id != agent.pk:
                raise InvalidRequest(
                    f"Thread {thread.pk} belongs to the agent '{thread.agent.slug}', "
                    f"not '{agent.slug}'.", param="thread_id", code="thread_agent_mismatch")
            # The thread continues as its own client's conversation.
            api_key, user = thread.api_key, thread.user or None
        self.refuse_unavailable(agent)
        injected = async_to_sync(runtime.turn_inject)(
            agent=agent, api_key=api_key, text=data["payload"],
            thread_id=str(thread_id) if thread_id else None, user=user)
        note(request, thread=injected.thread_id, found="continued" if thread_id else "new")
        out = {"thread_id": injected.thread_id, "message_id": injected.message_id}
        return Response(self.OutputSerializer(out).data, status=status.HTTP_202_ACCEPTED)

    @staticmethod
    def refuse_unavailable(agent: Agent) -> None:
        if not agent.enabled:
            raise InvalidRequest(f"The agent '{agent.slug}' is disabled.", param="to",
                                 code="agent_disabled")
        if agent.paused:
            raise AgentPaused(f"The agent '{agent.slug}' is paused by an operator; resume it "
                              "first.", retry_after=services.AGENT_PAUSED_RETRY_AFTER)


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
        running = services.thread_kill(thread=thread)
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
        services.agent_set_paused(agent=agent, paused=self.paused)
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
        services.organism_reload()
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


class BenchmarksKeyScheme(OpenApiAuthenticationExtension):
    target_class = BenchmarksKeyAuthentication
    name = "benchmarksKey"

    def get_security_definition(self, auto_schema: Any) -> dict[str, Any]:
        return {"type": "http", "scheme": "bearer",
                "description": "An API key with the 'benchmarks' scope (also accepted as "
                               "X-API-Key)."}


class OperatorKeyScheme(OpenApiAuthenticationExtension):
    """The schema's security scheme for :class:`OperatorKeyAuthentication` (drf-spectacular
    finds extensions by subclassing)."""

    target_class = OperatorKeyAuthentication
    name = "operatorKey"

    def get_security_definition(self, auto_schema: Any) -> dict[str, Any]:
        return {"type": "http", "scheme": "bearer",
                "description": "An API key with the 'operator' scope (also accepted as "
                               "X-API-Key)."}


class StaffSessionScheme(SessionScheme):
    target_class = StaffSessionAuthentication
