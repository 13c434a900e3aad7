"""The operator API of schedules (``/schedules``): an agent asked a prompt, or a replay suite
run against agents, on a cron expression in a time zone (Celery beat's database scheduler
fires them: :mod:`agents.services.schedules`). Staff sessions and ``admin`` keys only
(:class:`StaffApi`); every change is audited."""

from __future__ import annotations

from drf_spectacular.utils import extend_schema
from rest_framework import serializers, status
from rest_framework.request import Request
from rest_framework.response import Response

from agents import selectors, services
from agents.apis.console import StaffApi
from agents.http.rest import PaginationFilter, StrictSerializer, paginated_schema, sort_field
from agents.models import Schedule


class ScheduleOutput(serializers.Serializer):
    id = serializers.IntegerField()
    name = serializers.CharField()
    enabled = serializers.BooleanField()
    cron = serializers.CharField(help_text="Five fields: minute hour day-of-month month "
                                 "day-of-week.")
    timezone = serializers.CharField(help_text="The IANA time zone the cron is read in.")
    kind = serializers.ChoiceField(choices=Schedule.Kind.choices)
    agent = serializers.CharField(allow_null=True)
    prompt = serializers.CharField(allow_blank=True)
    thread = serializers.ChoiceField(choices=Schedule.ThreadMode.choices,
                                     help_text="new: a thread per run; continue: the "
                                     "schedule's one thread gets a new turn each run.")
    suite = serializers.CharField(allow_null=True, help_text="kind replay: the conversation "
                                  "suite (its newest version at each run).")
    targets = serializers.ListField(child=serializers.CharField(),
                                    help_text="kind replay: the agents replayed against.")
    thread_id = serializers.CharField(allow_null=True, help_text="The schedule's thread "
                                      "(continue) or the newest run's.")
    last_run_id = serializers.IntegerField(allow_null=True, help_text="The newest replay run.")
    last_status = serializers.ChoiceField(choices=Schedule.Status.choices)
    last_error = serializers.CharField(allow_blank=True)
    last_run_at = serializers.CharField(allow_null=True)
    last_fired_for = serializers.CharField(allow_null=True, help_text="The newest tick run.")
    run_count = serializers.IntegerField()
    created_at = serializers.CharField()
    updated_at = serializers.CharField()


class ScheduleInput(StrictSerializer):
    name = serializers.CharField(max_length=100)
    enabled = serializers.BooleanField(required=False)
    cron = serializers.CharField(max_length=200)
    timezone = serializers.CharField(max_length=64, required=False,
                                     help_text="An IANA time zone (default UTC).")
    agent = serializers.CharField(max_length=100, required=False, allow_null=True,
                                  help_text="An agent's slug (with prompt).")
    prompt = serializers.CharField(max_length=100_000, required=False, allow_blank=True)
    thread = serializers.ChoiceField(choices=Schedule.ThreadMode.choices, required=False)
    suite = serializers.CharField(max_length=100, required=False, allow_null=True,
                                  allow_blank=True, help_text="A conversation suite's name "
                                  "(with targets): a replay each tick.")
    targets = serializers.ListField(child=serializers.CharField(max_length=100),
                                    required=False, max_length=8)


class ScheduleUpdateInput(ScheduleInput):
    name = serializers.CharField(max_length=100, required=False)
    cron = serializers.CharField(max_length=200, required=False)


def _fields(data: dict) -> dict:
    """The service's fields; the kind is what the body names: a suite (a replay) or an agent
    (unnamed: unchanged, or an agent's for a new schedule)."""
    fields = dict(data)
    if "suite" in fields:
        fields["kind"] = Schedule.Kind.REPLAY if fields["suite"] else Schedule.Kind.AGENT
    elif fields.get("agent"):
        fields["kind"] = Schedule.Kind.AGENT
    return fields


def _body(schedule: Schedule) -> dict:
    return ScheduleOutput(selectors.schedule_public(
        selectors.schedule_get(schedule_id=schedule.pk))).data


class ScheduleListApi(StaffApi):
    class FilterSerializer(PaginationFilter):
        enabled = serializers.BooleanField(required=False, allow_null=True, default=None)
        sort = sort_field(selectors.SCHEDULE_ORDERING)

    @extend_schema(parameters=[FilterSerializer], operation_id="schedules_list",
                   summary="Schedules, with how each last ran",
                   responses=paginated_schema("PaginatedSchedules", ScheduleOutput))
    def get(self, request: Request) -> Response:
        f = self.filters(self.FilterSerializer)
        return self.paginated(selectors.schedule_list(enabled=f.get("enabled"),
                                                      sort=f.get("sort")),
                              selectors.schedule_public, ScheduleOutput)

    @extend_schema(request=ScheduleInput, responses={201: ScheduleOutput},
                   operation_id="schedules_create", summary="Make a schedule")
    def post(self, request: Request) -> Response:
        serializer = ScheduleInput(data=request.data)
        serializer.is_valid(raise_exception=True)
        schedule = services.schedule_save(schedule=None,
                                          fields=_fields(serializer.validated_data),
                                          actor=services.audit_actor_of_request(request))
        return Response(_body(schedule), status=status.HTTP_201_CREATED)


class ScheduleDetailApi(StaffApi):
    schema_errors = (404,)

    @extend_schema(responses=ScheduleOutput, operation_id="schedules_get", summary="A schedule")
    def get(self, request: Request, schedule_id: str) -> Response:
        return Response(_body(selectors.schedule_get(schedule_id=schedule_id)))

    @extend_schema(request=ScheduleUpdateInput, responses=ScheduleOutput,
                   operation_id="schedules_update", summary="Change a schedule")
    def patch(self, request: Request, schedule_id: str) -> Response:
        schedule = selectors.schedule_get(schedule_id=schedule_id)
        serializer = ScheduleUpdateInput(data=request.data)
        serializer.is_valid(raise_exception=True)
        services.schedule_save(schedule=schedule, fields=_fields(serializer.validated_data),
                               actor=services.audit_actor_of_request(request))
        return Response(_body(schedule))

    @extend_schema(request=None, responses={204: None}, operation_id="schedules_delete",
                   summary="Delete a schedule (the beat stops firing it)")
    def delete(self, request: Request, schedule_id: str) -> Response:
        services.schedule_delete(schedule=selectors.schedule_get(schedule_id=schedule_id),
                                 actor=services.audit_actor_of_request(request))
        return Response(status=status.HTTP_204_NO_CONTENT)
