"""The benchmarks REST API under ``/api/v1/benchmarks/`` (DRF).

Who may call it: API keys with the ``benchmarks`` scope (``Authorization: Bearer`` or
``X-API-Key``), or a staff session. Errors are the operator API's (:mod:`agents.rest`, the
shared edge): ``{"detail": "...", "code": "invalid", "param": "limit", "errors": {...}}``; a
400 names the bad field in ``param``.
"""

from __future__ import annotations

from typing import Any

from django.http import FileResponse
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import (
    OpenApiParameter,
    extend_schema,
    extend_schema_serializer,
    inline_serializer,
)
from rest_framework import exceptions, serializers
from rest_framework.permissions import BasePermission
from rest_framework.request import Request
from rest_framework.response import Response

from agents.authentication import BenchmarksKeyAuthentication, StaffSessionAuthentication
from agents.exceptions import NotFound
from agents.models import ApiKey
from agents.rest import GaiaApi, Pagination, StrictSerializer
from benchmarks import selectors, services
from benchmarks.models import BenchmarkRun, BenchmarkSuite

BUILTIN_SUITE = "hotpotqa-dev-30"


class BenchmarksAccess(BasePermission):
    """A ``benchmarks`` key, or a staff user's session."""

    def has_permission(self, request: Request, view: Any) -> bool:
        if isinstance(request.auth, ApiKey):
            return True
        user = request.user
        if user is not None and user.is_authenticated:
            if user.is_staff:
                return True
            raise exceptions.PermissionDenied("Staff only.", code="staff_required")
        raise exceptions.NotAuthenticated(
            "Send an API key with the 'benchmarks' scope (Authorization: Bearer KEY).",
            code="missing_api_key")


class BenchmarksApi(GaiaApi):
    authentication_classes = [BenchmarksKeyAuthentication, StaffSessionAuthentication]
    permission_classes = [BenchmarksAccess]

    def _key(self, request: Request) -> ApiKey | None:
        return request.auth if isinstance(request.auth, ApiKey) else None

    def _user(self, request: Request) -> Any:
        return request.user if request.user and request.user.is_authenticated else None


def _run_or_404(run_id: int) -> BenchmarkRun:
    run = selectors.run_get(run_id=run_id)
    if run is None:
        raise NotFound(f"No run {run_id}.", code="run_not_found")
    return run


# ---------------------------------------------------------------------------------------------
# Output shapes (the selectors' dicts; the schema fuzz test checks live bodies against them)


TOOLS_HELP = "Every role -> 'deterministic' or the slug of the agent that plays it."


@extend_schema_serializer(component_name="BenchmarkProgress")
class ProgressOutput(serializers.Serializer):
    questions_done = serializers.IntegerField()
    questions_total = serializers.IntegerField()
    packets = serializers.IntegerField()
    bytes = serializers.IntegerField()


@extend_schema_serializer(component_name="BenchmarkRun")
class RunOutput(serializers.Serializer):
    id = serializers.IntegerField()
    suite = serializers.CharField()
    status = serializers.ChoiceField(choices=BenchmarkRun.Status.choices)
    protocol = serializers.CharField()
    selection = serializers.DictField()
    question_indexes = serializers.ListField(child=serializers.IntegerField())
    tools = serializers.DictField(child=serializers.CharField(), help_text=TOOLS_HELP)
    baseline = serializers.BooleanField()
    quality_label = serializers.CharField()
    question_timeout_s = serializers.FloatField()
    time_limit_s = serializers.FloatField()
    submitted_by = serializers.CharField(allow_null=True)
    celery_task_id = serializers.CharField(allow_null=True)
    worker = serializers.CharField(allow_null=True)
    attempts = serializers.IntegerField()
    heartbeat_at = serializers.CharField(allow_null=True)
    progress = ProgressOutput()
    summary = serializers.DictField(allow_null=True)
    error = serializers.CharField(allow_null=True)
    notes = serializers.ListField(child=serializers.CharField())
    queued_at = serializers.CharField()
    started_at = serializers.CharField(allow_null=True)
    finished_at = serializers.CharField(allow_null=True)


@extend_schema_serializer(component_name="BenchmarkRunDetail")
class RunDetailOutput(RunOutput):
    artifacts = serializers.ListField(child=serializers.CharField(),
                                      help_text="Names for GET .../artifacts/{name}.")


@extend_schema_serializer(component_name="BenchmarkResult")
class ResultOutput(serializers.Serializer):
    question_index = serializers.IntegerField()
    question_id = serializers.CharField(allow_blank=True)
    question = serializers.CharField(allow_blank=True)
    status = serializers.CharField()
    error = serializers.CharField(allow_null=True)
    prediction = serializers.CharField(allow_null=True, allow_blank=True)
    gold = serializers.CharField(allow_blank=True)
    exact_match = serializers.FloatField(allow_null=True)
    f1 = serializers.FloatField(allow_null=True)
    rouge_l = serializers.FloatField(allow_null=True)
    bytes_tx = serializers.IntegerField()
    bytes_rx = serializers.IntegerField()
    packets = serializers.IntegerField()
    header_overhead = serializers.IntegerField()
    tokens = serializers.IntegerField()
    tokens_by_agent = serializers.DictField()
    elapsed_ms = serializers.FloatField()
    artifacts = serializers.ListField(child=serializers.CharField())


@extend_schema_serializer(component_name="BenchmarkRunResults")
class RunResultsOutput(serializers.Serializer):
    run_id = serializers.IntegerField()
    status = serializers.ChoiceField(choices=BenchmarkRun.Status.choices)
    suite = serializers.CharField()
    tools = serializers.DictField(child=serializers.CharField(), help_text=TOOLS_HELP)
    baseline = serializers.BooleanField()
    quality_label = serializers.CharField()
    summary = serializers.DictField(allow_null=True)
    results = ResultOutput(many=True)


@extend_schema_serializer(component_name="BenchmarkCompareRun")
class CompareRunOutput(serializers.Serializer):
    id = serializers.IntegerField()
    suite = serializers.CharField()
    protocol = serializers.CharField()
    tools = serializers.DictField(child=serializers.CharField(), help_text=TOOLS_HELP)
    status = serializers.ChoiceField(choices=BenchmarkRun.Status.choices)
    baseline = serializers.BooleanField()
    quality_label = serializers.CharField()
    summary = serializers.DictField(allow_null=True)


@extend_schema_serializer(component_name="BenchmarkCompareAnswer")
class CompareAnswerOutput(serializers.Serializer):
    prediction = serializers.CharField(allow_null=True, allow_blank=True)
    status = serializers.CharField()
    exact_match = serializers.FloatField(allow_null=True)
    f1 = serializers.FloatField(allow_null=True)
    rouge_l = serializers.FloatField(allow_null=True)
    bytes = serializers.IntegerField()
    elapsed_ms = serializers.FloatField()


@extend_schema_serializer(component_name="BenchmarkCompareQuestion")
class CompareQuestionOutput(serializers.Serializer):
    question_index = serializers.IntegerField()
    question = serializers.CharField(allow_null=True, allow_blank=True)
    gold = serializers.CharField(allow_null=True, allow_blank=True)
    runs = serializers.DictField(child=CompareAnswerOutput(allow_null=True),
                                 help_text="Run id -> its answer (null: not asked).")
    differs = serializers.BooleanField()


@extend_schema_serializer(component_name="BenchmarkCompare")
class CompareOutput(serializers.Serializer):
    runs = CompareRunOutput(many=True)
    questions = CompareQuestionOutput(many=True)
    differences = serializers.ListField(child=serializers.IntegerField())


@extend_schema_serializer(component_name="BenchmarkSuite")
class SuiteOutput(serializers.Serializer):
    name = serializers.CharField()
    description = serializers.CharField(allow_blank=True)
    source = serializers.CharField(allow_blank=True)
    licence = serializers.CharField(allow_blank=True)
    question_count = serializers.IntegerField()
    builtin = serializers.BooleanField()
    created_at = serializers.CharField()


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
        suite = serializers.CharField(required=False, max_length=100, trim_whitespace=False)
        protocol = serializers.CharField(required=False, max_length=100, trim_whitespace=False)
        agent = serializers.CharField(required=False, max_length=100, trim_whitespace=False)
        since = serializers.DateTimeField(required=False)
        limit = serializers.IntegerField(required=False, min_value=1, max_value=500)
        offset = serializers.IntegerField(required=False, min_value=0)

    @extend_schema_serializer(component_name="BenchmarkRunSubmit")
    class InputSerializer(StrictSerializer):
        suite = serializers.CharField(max_length=100, default=BUILTIN_SUITE)
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
                   responses=inline_serializer(name="PaginatedBenchmarkRuns", fields={
                       "count": serializers.IntegerField(),
                       "next": serializers.URLField(allow_null=True),
                       "previous": serializers.URLField(allow_null=True),
                       "results": RunOutput(many=True)}))
    def get(self, request: Request) -> Response:
        data = self.filters(self.FilterSerializer)
        data.pop("limit", None)
        data.pop("offset", None)
        return self.paginated(selectors.run_list(**data), selectors.run_public)

    @extend_schema(request=InputSerializer, responses={201: RunOutput},
                   operation_id="benchmarks_runs_create", summary="Queue a benchmark run")
    def post(self, request: Request) -> Response:
        if not isinstance(request.data, dict):
            raise exceptions.ValidationError({"non_field_errors": ["Expected a JSON object."]})
        body = self.InputSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        data = body.validated_data
        suite = BenchmarkSuite.objects.filter(name=data["suite"]).first()
        if suite is None:
            raise exceptions.ValidationError({"suite": [f"No suite {data['suite']!r}."]})
        run = services.benchmark_run_create(
            suite=suite, protocol=data["protocol"], limit=data.get("limit"),
            indexes=data.get("indexes"), tools=data.get("tools"),
            question_timeout_s=data["question_timeout_s"], time_limit_s=data["time_limit_s"],
            submitted_by=self._key(request), submitted_by_user=self._user(request))
        run = _run_or_404(run.pk)
        return Response(selectors.run_public(run), status=201,
                        headers={"Location": f"/api/v1/benchmarks/runs/{run.pk}"})


class RunDetailApi(BenchmarksApi):
    @extend_schema(responses=RunDetailOutput, operation_id="benchmarks_runs_retrieve",
                   summary="A run with its progress and artifact names")
    def get(self, request: Request, run_id: int) -> Response:
        run = _run_or_404(run_id)
        return Response({**selectors.run_public(run),
                         "artifacts": selectors.run_artifacts(run=run)})


class RunResultsApi(BenchmarksApi):
    @extend_schema(responses=RunResultsOutput, operation_id="benchmarks_runs_results",
                   summary="A run's per-question results and summary")
    def get(self, request: Request, run_id: int) -> Response:
        run = _run_or_404(run_id)
        return Response({"run_id": run.pk, "status": run.status, "suite": run.suite.name,
                         "tools": run.tools, "baseline": run.baseline,
                         "quality_label": selectors.quality_label(run),
                         "summary": run.summary, "results": selectors.run_results(run=run)})


class RunCancelApi(BenchmarksApi):
    schema_errors = (409,)

    @extend_schema(request=None, responses=RunOutput, operation_id="benchmarks_runs_cancel",
                   summary="Cancel a queued or running run (409 once it finished)")
    def post(self, request: Request, run_id: int) -> Response:
        run = _run_or_404(run_id)
        who = self._key(request) or self._user(request)
        run = services.benchmark_run_cancel(run=run, reason=f"cancelled by {who}")
        return Response(selectors.run_public(_run_or_404(run.pk)))


class RunArtifactApi(BenchmarksApi):
    @extend_schema(operation_id="benchmarks_runs_artifact",
                   summary="Download one artifact (summary.json, run_artifacts.tar.gz, "
                           "q<index>/metrics.json, q<index>/run_artifacts.tar.gz)",
                   responses={(200, "application/json"): OpenApiTypes.OBJECT,
                              (200, "application/gzip"): OpenApiTypes.BINARY})
    def get(self, request: Request, run_id: int, name: str) -> Any:
        run = _run_or_404(run_id)
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
        runs = [_run_or_404(i) for i in ids]
        return Response(selectors.runs_compare(runs=runs))


class SuiteListCreateApi(BenchmarksApi):
    schema_errors = (409,)

    @extend_schema_serializer(component_name="BenchmarkSuiteCreate")
    class InputSerializer(StrictSerializer):
        name = serializers.SlugField(max_length=100)
        description = serializers.CharField(required=False, allow_blank=True, max_length=5000)
        source = serializers.CharField(required=False, allow_blank=True, max_length=500)
        licence = serializers.CharField(required=False, allow_blank=True, max_length=200)
        questions = serializers.JSONField()

    @extend_schema(operation_id="benchmarks_suites_list", summary="Every question suite",
                   responses=inline_serializer(name="BenchmarkSuiteList", fields={
                       "results": SuiteOutput(many=True)}))
    def get(self, request: Request) -> Response:
        return Response({"results": [selectors.suite_public(s) for s in selectors.suite_list()]})

    @extend_schema(request=InputSerializer, responses={201: SuiteOutput},
                   operation_id="benchmarks_suites_create",
                   summary="Upload a question suite (HotpotQA shape)")
    def post(self, request: Request) -> Response:
        if not isinstance(request.data, dict):
            raise exceptions.ValidationError({"non_field_errors": ["Expected a JSON object."]})
        body = self.InputSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        suite = services.suite_create(created_by=self._key(request), **body.validated_data)
        return Response(selectors.suite_public(suite), status=201)


class UnknownRouteApi(BenchmarksApi):
    @extend_schema(exclude=True)
    def _missing(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        raise NotFound(f"No route {request.path}.", code="not_found")

    get = post = put = patch = delete = _missing
