"""The runs of ``/api/v1/benchmarks/``, whatever their kind: list and submit (the kind is the
registry's to decide: :func:`benchmarks.registry.kind_for`), one run, its results, cancel,
resume, its artifacts, runs side by side, and whether any worker is alive to run them. A 400
names the bad field in ``param``."""

from __future__ import annotations

from typing import Any

from django.http import FileResponse
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import (
    OpenApiParameter,
    extend_schema,
    extend_schema_serializer,
)
from rest_framework import exceptions, serializers
from rest_framework.request import Request
from rest_framework.response import Response

from agents.http.rest import Pagination, StrictSerializer, paginated_schema, sort_field
from agents.kernel.exceptions import NotFound
from agents.services.audit import audit_actor_of_request
from benchmarks import selectors, services
from benchmarks.apis.base import BenchmarksApi, run_or_404
from benchmarks.apis.shapes import (
    CompareOutput,
    QueueOutput,
    RunDetailOutput,
    RunOutput,
    RunResultsOutput,
)
from benchmarks.models import BenchmarkRun
from benchmarks.registry import kind_for

BUILTIN_SUITE = "hotpotqa-dev-30"


class SuiteRefField(serializers.JSONField):
    """A suite: its id, its name (the newest version) or ``name@version``."""

    def to_internal_value(self, data: Any) -> Any:
        value = super().to_internal_value(data)
        if isinstance(value, bool) or not isinstance(value, int | str) or (
                isinstance(value, str) and not 0 < len(value) <= 120):
            raise serializers.ValidationError("A suite's id, name or name@version.")
        return value


class ToolsField(serializers.JSONField):
    def to_internal_value(self, data: Any) -> Any:
        value = super().to_internal_value(data)
        if not isinstance(value, (str, dict)):
            raise serializers.ValidationError(
                "'deterministic', 'agents' or {role: 'deterministic' | agent slug}.")
        return value


class RunListCreateApi(BenchmarksApi):
    class FilterSerializer(serializers.Serializer):
        status = serializers.ChoiceField(choices=BenchmarkRun.Status.choices, required=False)
        kind = serializers.ChoiceField(choices=BenchmarkRun.Kind.choices, required=False)
        suite = serializers.CharField(required=False, max_length=100, trim_whitespace=False)
        protocol = serializers.CharField(required=False, max_length=100, trim_whitespace=False)
        agent = serializers.CharField(required=False, max_length=100, trim_whitespace=False)
        since = serializers.DateTimeField(required=False)
        sort = sort_field(selectors.RUN_ORDERING)
        limit = serializers.IntegerField(required=False, min_value=1, max_value=500)
        offset = serializers.IntegerField(required=False, min_value=0)
        cursor = serializers.CharField(required=False, max_length=500)

    @extend_schema_serializer(component_name="BenchmarkRunSubmit")
    class InputSerializer(StrictSerializer):
        suite = SuiteRefField(default=BUILTIN_SUITE)
        kind = serializers.CharField(max_length=20, required=False, help_text="The kind of "
                                     "run (default: 'replay' for a conversation suite or "
                                     "with agents, else 'mesh').")
        agents = serializers.ListField(
            child=serializers.CharField(max_length=100), min_length=1, max_length=8,
            required=False, help_text="Replay a conversation suite against these targets "
            "(agent slugs, 'auto', 'team/<slug>').")
        judge = serializers.CharField(max_length=100, required=False, allow_blank=True,
                                      help_text="A replay's judge: an agent's slug.")
        parallel = serializers.IntegerField(min_value=1, max_value=32, default=1,
                                            help_text="How many workers may share a replay.")
        concurrency = serializers.IntegerField(min_value=1, max_value=64, default=4,
                                               help_text="A replay's cases in flight per "
                                               "worker.")
        protocol = serializers.CharField(max_length=100, default="json")
        limit = serializers.IntegerField(min_value=1, required=False)
        indexes = serializers.ListField(child=serializers.IntegerField(min_value=0),
                                        min_length=1, max_length=10000, required=False)
        tools = ToolsField(required=False)
        question_timeout_s = serializers.FloatField(min_value=0.5, max_value=3600,
                                                    default=60.0)
        time_limit_s = serializers.FloatField(min_value=1, max_value=86400, default=3600.0)

    class page_class(Pagination):  # noqa: N801 - GaiaApi's attribute
        max_limit = 500

    @extend_schema(parameters=[FilterSerializer], operation_id="benchmarks_runs_list",
                   summary="Benchmark runs, newest first",
                   responses=paginated_schema("PaginatedBenchmarkRuns", RunOutput))
    def get(self, request: Request) -> Response:
        data = self.filters(self.FilterSerializer)
        for paging in ("limit", "offset", "cursor"):
            data.pop(paging, None)
        return self.paginated(selectors.run_list(**data), selectors.run_public)

    @extend_schema(request=InputSerializer, responses={201: RunOutput},
                   operation_id="benchmarks_runs_create", summary="Queue a benchmark run")
    def post(self, request: Request) -> Response:
        if not isinstance(request.data, dict):
            raise exceptions.ValidationError({"non_field_errors": ["Expected a JSON object."]})
        body = self.InputSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        data = body.validated_data
        suite = selectors.suite_get(ref=data["suite"])
        if suite is None:
            raise exceptions.ValidationError({"suite": [f"No suite {data['suite']!r}."]})
        run = kind_for(suite, data).create(suite=suite, data=data,
                                           submitted_by=self._key(request),
                                           submitted_by_user=self._user(request))
        run = run_or_404(run.pk)
        return Response(selectors.run_public(run), status=201,
                        headers={"Location": f"/api/v1/benchmarks/runs/{run.pk}"})


class RunDetailApi(BenchmarksApi):
    @extend_schema(responses=RunDetailOutput, operation_id="benchmarks_runs_retrieve",
                   summary="A run with its progress and artifact names")
    def get(self, request: Request, run_id: int) -> Response:
        run = run_or_404(run_id)
        return Response({**selectors.run_public(run),
                         "artifacts": selectors.run_artifacts(run=run),
                         "queue": selectors.queue_state()})


class QueueApi(BenchmarksApi):
    @extend_schema(responses=QueueOutput, operation_id="benchmarks_queue",
                   summary="Whether any worker is alive to execute runs")
    def get(self, request: Request) -> Response:
        return Response(selectors.queue_state())


class RunResultsApi(BenchmarksApi):
    @extend_schema(responses=RunResultsOutput, operation_id="benchmarks_runs_results",
                   summary="A run's per-question results and summary")
    def get(self, request: Request, run_id: int) -> Response:
        run = run_or_404(run_id)
        return Response({"run_id": run.pk, "status": run.status, "suite": run.suite.name,
                         "tools": run.tools, "baseline": run.baseline,
                         "quality_label": selectors.quality_label(run),
                         "summary": run.summary, "results": selectors.run_results(run=run)})


class RunCancelApi(BenchmarksApi):
    schema_errors = (409,)

    @extend_schema(request=None, responses=RunOutput, operation_id="benchmarks_runs_cancel",
                   summary="Cancel a queued or running run (409 once it finished)")
    def post(self, request: Request, run_id: int) -> Response:
        run = run_or_404(run_id)
        who = self._key(request) or self._user(request)
        run = services.benchmark_run_cancel(run=run, reason=f"cancelled by {who}",
                                            actor=audit_actor_of_request(request))
        return Response(selectors.run_public(run_or_404(run.pk)))


class RunResumeApi(BenchmarksApi):
    schema_errors = (409,)

    @extend_schema(request=None, responses=RunOutput, operation_id="benchmarks_runs_resume",
                   summary="Queue a cancelled or failed run again: what it recorded stays, "
                           "the rest runs (409 for any other run)")
    def post(self, request: Request, run_id: int) -> Response:
        run = run_or_404(run_id)
        who = self._key(request) or self._user(request)
        services.benchmark_run_resume(run=run, by=str(who), actor=audit_actor_of_request(request))
        return Response(selectors.run_public(run_or_404(run_id)))


class RunArtifactApi(BenchmarksApi):
    @extend_schema(operation_id="benchmarks_runs_artifact",
                   summary="Download one artifact (summary.json, run_artifacts.tar.gz, "
                           "q<index>/metrics.json, q<index>/run_artifacts.tar.gz)",
                   responses={(200, "application/json"): OpenApiTypes.OBJECT,
                              (200, "application/gzip"): OpenApiTypes.BINARY})
    def get(self, request: Request, run_id: int, name: str) -> Any:
        run = run_or_404(run_id)
        handle = selectors.artifact_open(run=run, name=name)
        if handle is None:
            raise NotFound(f"Run {run_id} has no artifact {name!r}.", code="artifact_not_found")
        content_type = "application/json" if name.endswith(".json") else "application/gzip"
        return FileResponse(handle, as_attachment=True, filename=name.replace("/", "-"),
                            content_type=content_type)


class CompareApi(BenchmarksApi):
    schema_errors = (404,)

    @extend_schema(parameters=[OpenApiParameter(
                       "runs", {"type": "array", "items": {"type": "integer"}, "minItems": 2,
                                "maxItems": 20, "uniqueItems": True},
                       required=True, style="form", explode=False,
                       description="2 to 20 distinct run ids separated by commas")],
                   responses=CompareOutput, operation_id="benchmarks_compare",
                   summary="Runs' metrics and answers side by side")
    def get(self, request: Request) -> Response:
        raw = request.query_params.get("runs", "")
        try:
            ids = [int(x) for x in raw.split(",") if x.strip()]
        except ValueError:
            raise exceptions.ValidationError({"runs": ["Run ids separated by commas."]}) from None
        if not 2 <= len(ids) <= 20 or len(set(ids)) != len(ids):
            raise exceptions.ValidationError({"runs": ["Between 2 and 20 distinct run ids."]})
        runs = [run_or_404(i) for i in ids]
        return Response(selectors.runs_compare(runs=runs))
