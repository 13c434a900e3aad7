"""A thread's turns and each turn's trace (``/threads/{id}/turns[/{n}]``): the turn as a tree
of its steps (model calls, tool calls with their arguments and results, approvals and their
waits, delegations to other agents with their child threads) on one time axis
(:mod:`agents.selectors.traces`). Operators, as every other thread route."""

from __future__ import annotations

from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, extend_schema, extend_schema_serializer
from rest_framework import serializers
from rest_framework.request import Request
from rest_framework.response import Response

from agents import selectors
from agents.apis import OperatorApi
from agents.http.authentication import note
from agents.kernel.exceptions import NotFound


class TurnListApi(OperatorApi):
    """The thread's turns in order (a turn: a client's or an operator's message and all that
    answered it), each its summary: times, status, usage. ``…/turns/{n}`` has its steps."""

    @extend_schema_serializer(component_name="TurnList")
    class OutputSerializer(serializers.Serializer):
        thread_id = serializers.CharField()
        parent = serializers.DictField(allow_null=True, help_text="The thread and message "
                                       "whose agent:<slug> call started this thread, if one "
                                       "did.")
        turns = serializers.ListField(child=serializers.DictField())

    @extend_schema(responses=OutputSerializer, summary="A thread's turns, with their timings",
                   operation_id="threads_turns_list")
    def get(self, request: Request, thread_id: str) -> Response:
        thread = selectors.thread_get(thread_id=thread_id)
        note(request, agent=thread.agent.slug, thread=str(thread.pk))
        out = {"thread_id": str(thread.pk), "parent": selectors.thread_parent(thread=thread),
               "turns": selectors.turn_list(thread=thread)}
        return Response(self.OutputSerializer(out).data)


class TurnTraceApi(OperatorApi):
    """Turn ``n`` (0-based) of the thread as a tree: the turn, and in ``children`` its steps
    in order, each with ``started_at``, ``ended_at`` and ``duration_ms`` (null where nothing
    stored says); the shape is in the operators' manual ("A turn's trace")."""

    @extend_schema(responses=OpenApiTypes.OBJECT, summary="A turn's trace: its steps as a tree "
                   "on one time axis", operation_id="threads_turns_retrieve",
                   parameters=[OpenApiParameter("n", OpenApiTypes.INT, OpenApiParameter.PATH,
                                                description="The turn, from 0.")])
    def get(self, request: Request, thread_id: str, n: str) -> Response:
        thread = selectors.thread_get(thread_id=thread_id)
        note(request, agent=thread.agent.slug, thread=str(thread.pk))
        if not n.isdecimal() or len(n) > 9:
            raise NotFound(f"No turn {n!r}: a turn is a number from 0.", code="turn_not_found",
                           param="n")
        trace = selectors.turn_trace(thread=thread, index=int(n))
        trace["parent"] = selectors.thread_parent(thread=thread)
        return Response(trace)
