"""``POST /api/v1/organism/stop`` and ``/start`` (reference 003): the organism stops taking
new turns on every process (``/v1`` answers 503 ``organism_stopped`` with ``Retry-After``),
its running turns finish or are killed after a grace; start takes turns again. The same edge
as :mod:`agents.apis`; the rules live in :mod:`agents.services.organism`."""

from __future__ import annotations

from drf_spectacular.utils import extend_schema, extend_schema_serializer
from rest_framework import serializers
from rest_framework.request import Request
from rest_framework.response import Response

from agents import selectors, services
from agents.apis import OperatorApi
from agents.http.rest import StrictSerializer


@extend_schema_serializer(component_name="OrganismState")
class OrganismStateOutput(serializers.Serializer):
    state = serializers.CharField(help_text="running, or stopped (no new turn).")
    since = serializers.DateTimeField(allow_null=True, help_text="When it was stopped or "
                                      "started (null: never).")
    by = serializers.CharField(help_text="Who did: user:<name> or key:<name> (<prefix>).")


class OrganismStopApi(OperatorApi):
    """Stop taking new turns, on every process: each ``/v1`` dialect answers a new turn with
    503 ``organism_stopped`` and ``Retry-After`` in its own error body, an inject is refused
    the same way. Turns running finish; those still running after ``grace_seconds`` are
    killed (their partial reply kept, their thread ``killed``). The operator API, the feed
    and ``/health`` (200) keep answering. Idempotent: stopping a stopped organism changes
    nothing."""

    @extend_schema_serializer(component_name="OrganismStop")
    class InputSerializer(StrictSerializer):
        grace_seconds = serializers.FloatField(
            required=False, min_value=0, max_value=services.STOP_GRACE_MAX,
            default=services.STOP_GRACE_SECONDS,
            help_text="How long running turns may finish before they are killed.")

    @extend_schema(request=InputSerializer, responses=OrganismStateOutput,
                   summary="Stop taking new turns (running ones finish or are killed)")
    def post(self, request: Request) -> Response:
        # No body is {} (DRF gives an empty dict); a JSON null, [] or 0 is a 400, not "no body"
        serializer = self.InputSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        state = services.organism_set_stopped(
            stopped=True, grace_seconds=serializer.validated_data["grace_seconds"],
            actor=services.audit_actor_of_request(request))
        return Response(OrganismStateOutput(state.public()).data)


class OrganismStartApi(OperatorApi):
    """Take turns again after a stop. Idempotent."""

    @extend_schema(request=None, responses=OrganismStateOutput, summary="Take turns again")
    def post(self, request: Request) -> Response:
        services.organism_set_stopped(stopped=False,
                                      actor=services.audit_actor_of_request(request))
        return Response(OrganismStateOutput(selectors.organism_state().public()).data)
