"""The benchmarks REST API under ``/api/v1/benchmarks/`` (DRF): runs and their comparison
here, suites in :mod:`.suites`, a replay's cases and resuming a run in :mod:`.replay`.

Who may call it: API keys with the ``benchmarks`` or the ``operator`` scope
(``Authorization: Bearer`` or ``X-API-Key``), or a staff session. Errors are the operator
API's (:mod:`agents.rest`, the shared edge): ``{"detail": "...", "code": "invalid", "param":
"limit", "errors": {...}}``; a 400 names the bad field in ``param``.
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
from agents.rest import GaiaApi, Pagination, StrictSerializer, sort_field
from agents.services.audit import audit_actor_of_request
from benchmarks import selectors, services
from benchmarks.models import BenchmarkRun, BenchmarkSuite
from benchmarks.replay.runs import replay_run_create

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
    kind = serializers.ChoiceField(choices=BenchmarkRun.Kind.choices)
    suite = serializers.CharField()
    suite_id = serializers.IntegerField()
    suite_version = serializers.IntegerField()
    agents = serializers.ListField(child=serializers.CharField(),
                                   help_text="A replay's targets (empty for a mesh run).")
    judge = serializers.CharField(allow_null=True)
    parallel = serializers.IntegerField(help_text="How many workers may share a replay.")
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


@extend_schema_serializer(component_name="BenchmarkQueue")
class QueueOutput(serializers.Serializer):
    workers = serializers.IntegerField(help_text="Workers (Celery, or servers' embedded "
                                                 "workers) whose beat is fresh.")
    alive = serializers.BooleanField(help_text="False: a queued run waits until one starts.")


@extend_schema_serializer(component_name="BenchmarkRunDetail")
class RunDetailOutput(RunOutput):
    artifacts = serializers.ListField(child=serializers.CharField(),
                                      help_text="Names for GET .../artifacts/{name}.")
    queue = QueueOutput(help_text="Whether any worker is alive to run it.")


@extend_schema_serializer(component_name="BenchmarkResult")
class ResultOutput(serializers.Serializer):
    question_index = serializers.IntegerField()
    agent = serializers.CharField(allow_null=True, help_text="A replay's target.")
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
    similarity = serializers.FloatField(allow_null=True)
    judge_score = serializers.FloatField(allow_null=True)
    judge_verdict = serializers.CharField(allow_null=True)
    judge_reason = serializers.CharField(allow_null=True)
    judge_error = serializers.CharField(allow_null=True)
    ttft_ms = serializers.IntegerField(allow_null=True)
    tool_calls = serializers.IntegerField()
    thread_id = serializers.CharField(allow_null=True)
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
    kind = serializers.ChoiceField(choices=BenchmarkRun.Kind.choices)
    suite = serializers.CharField()
    suite_version = serializers.IntegerField()
    agents = serializers.ListField(child=serializers.CharField())
    judge = serializers.CharField(allow_null=True)
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
    similarity = serializers.FloatField(allow_null=True)
    judge_score = serializers.FloatField(allow_null=True)
    bytes = serializers.IntegerField()
    elapsed_ms = serializers.FloatField()


@extend_schema_serializer(component_name="BenchmarkCompareQuestion")
class CompareQuestionOutput(serializers.Serializer):
    question_index = serializers.IntegerField()
    question = serializers.CharField(allow_null=True, allow_blank=True)
    gold = serializers.CharField(allow_null=True, allow_blank=True)
    runs = serializers.DictField(child=CompareAnswerOutput(allow_null=True),
                                 help_text="Column key (a run's id, or 'id:agent' for a "
                                 "replay's target) -> its answer (null: not asked).")
    differs = serializers.BooleanField()


@extend_schema_serializer(component_name="BenchmarkCompareColumn")
class CompareColumnOutput(serializers.Serializer):
    key = serializers.CharField()
    run = serializers.IntegerField()
    agent = serializers.CharField(allow_null=True)
    label = serializers.CharField()
    summary = serializers.DictField(allow_null=True)


@extend_schema_serializer(component_name="BenchmarkCompare")
class CompareOutput(serializers.Serializer):
    runs = CompareRunOutput(many=True)
    columns = CompareColumnOutput(many=True)
    questions = CompareQuestionOutput(many=True)
    differences = serializers.ListField(child=serializers.IntegerField())
    warnings = serializers.ListField(child=serializers.CharField())


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
                   responses=inline_serializer(name="PaginatedBenchmarkRuns", fields={
                       "count": serializers.IntegerField(),
                       "next": serializers.URLField(allow_null=True),
                       "previous": serializers.URLField(allow_null=True),
                       "results": RunOutput(many=True)}))
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
        if suite.kind == BenchmarkSuite.Kind.CONVERSATIONS or "agents" in data:
            run = replay_run_create(
                suite=suite, agents=data.get("agents") or [], judge=data.get("judge"),
                limit=data.get("limit"), indexes=data.get("indexes"),
                parallel=data["parallel"], concurrency=data["concurrency"],
                question_timeout_s=data["question_timeout_s"],
                time_limit_s=data["time_limit_s"], submitted_by=self._key(request),
                submitted_by_user=self._user(request))
            return Response(selectors.run_public(_run_or_404(run.pk)), status=201,
                            headers={"Location": f"/api/v1/benchmarks/runs/{run.pk}"})
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
        run = services.benchmark_run_cancel(run=run, reason=f"cancelled by {who}",
                                            actor=audit_actor_of_request(request))
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


class UnknownRouteApi(BenchmarksApi):
    @extend_schema(exclude=True)
    def _missing(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        raise NotFound(f"No route {request.path}.", code="not_found")

    get = post = put = patch = delete = _missing
