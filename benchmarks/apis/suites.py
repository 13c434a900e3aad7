"""The suites of ``/api/v1/benchmarks/``: list and make (HotpotQA questions, conversations from
stored threads, JSONL in the OpenAI Evals sample shape), one suite, its cases, its JSONL
export, and its trend over the runs that replayed it. A name that exists gets a new version."""

from __future__ import annotations

from typing import Any

from django.http import HttpResponse
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import (
    OpenApiParameter,
    extend_schema,
    extend_schema_serializer,
    inline_serializer,
)
from rest_framework import exceptions, serializers
from rest_framework.parsers import BaseParser
from rest_framework.request import Request
from rest_framework.response import Response

from agents.http.parsers import JsonParser
from agents.http.rest import SlugName, StrictSerializer, paginated_schema, sort_field
from agents.kernel.exceptions import NotFound
from agents.models import Thread
from benchmarks import selectors, services
from benchmarks.apis.base import BenchmarksApi
from benchmarks.models import BenchmarkSuite
from benchmarks.replay import reads
from benchmarks.replay.suites import suite_export_jsonl, suite_from_jsonl, suite_from_threads


@extend_schema_serializer(component_name="BenchmarkSuite")
class SuiteOutput(serializers.Serializer):
    id = serializers.IntegerField()
    name = serializers.CharField()
    version = serializers.IntegerField()
    kind = serializers.ChoiceField(choices=BenchmarkSuite.Kind.choices)
    origin = serializers.DictField(allow_null=True, help_text="How a conversation suite "
                                   "was made (the thread filter, or a JSONL upload).")
    created_by = serializers.CharField(allow_null=True)
    description = serializers.CharField(allow_blank=True)
    source = serializers.CharField(allow_blank=True)
    licence = serializers.CharField(allow_blank=True)
    question_count = serializers.IntegerField()
    builtin = serializers.BooleanField()
    created_at = serializers.CharField()


class JsonlParser(BaseParser):
    """A JSONL upload (one JSON object a line): the body's bytes, parsed by the service."""

    media_type = "application/jsonl"

    def parse(self, stream: Any, media_type: str | None = None,
              parser_context: Any = None) -> bytes:
        return stream.read() if stream is not None else b""


class NdjsonParser(JsonlParser):
    media_type = "application/x-ndjson"


class SuiteListCreateApi(BenchmarksApi):
    parser_classes = [JsonParser, JsonlParser, NdjsonParser]
    schema_errors = (404,)

    class FilterSerializer(serializers.Serializer):
        name = serializers.CharField(required=False, max_length=100, trim_whitespace=False)
        kind = serializers.ChoiceField(choices=BenchmarkSuite.Kind.choices, required=False)
        latest = serializers.BooleanField(required=False, default=False,
                                          help_text="Each name's newest version only.")
        sort = sort_field(selectors.SUITE_ORDERING)

    @extend_schema_serializer(component_name="BenchmarkSuiteFromThreads")
    class FromThreadsSerializer(StrictSerializer):
        ids = serializers.ListField(child=serializers.UUIDField(), min_length=1,
                                    max_length=10000, required=False)
        agent = serializers.CharField(required=False, max_length=100)
        since = serializers.DateTimeField(required=False)
        until = serializers.DateTimeField(required=False)
        status = serializers.ChoiceField(choices=Thread.Status.choices, required=False)
        q = serializers.CharField(required=False, max_length=200)
        turns = serializers.ChoiceField(choices=["last", "all"], default="last",
                                        help_text="A case per thread (its last answered "
                                        "user message) or per answered user message.")

        def validate(self, attrs: dict[str, Any]) -> dict[str, Any]:
            attrs = super().validate(attrs)
            if "ids" in attrs and set(attrs) - {"ids", "turns"}:
                raise serializers.ValidationError("Give ids, or filters, not both.")
            return attrs

    @extend_schema_serializer(component_name="BenchmarkSuiteCreate")
    class InputSerializer(StrictSerializer):
        name = SlugName(max_length=100)
        description = serializers.CharField(required=False, allow_blank=True, max_length=5000)
        source = serializers.CharField(required=False, allow_blank=True, max_length=500)
        licence = serializers.CharField(required=False, allow_blank=True, max_length=200)
        questions = serializers.JSONField(required=False, help_text="HotpotQA questions.")

        def get_fields(self) -> dict[str, Any]:
            fields = super().get_fields()
            fields["from_threads"] = SuiteListCreateApi.FromThreadsSerializer(
                required=False, help_text="Make a conversation suite from stored threads.")
            return fields

        def validate(self, attrs: dict[str, Any]) -> dict[str, Any]:
            attrs = super().validate(attrs)
            if ("questions" in attrs) == ("from_threads" in attrs):
                raise serializers.ValidationError(
                    "Give 'questions' (a HotpotQA suite) or 'from_threads' (a conversation "
                    "suite); or POST JSONL (Content-Type: application/jsonl, ?name=).")
            return attrs

    @extend_schema(parameters=[FilterSerializer], operation_id="benchmarks_suites_list",
                   summary="Every suite version, by name, newest version first",
                   responses=inline_serializer(name="BenchmarkSuiteList", fields={
                       "results": SuiteOutput(many=True)}))
    def get(self, request: Request) -> Response:
        f = self.filters(self.FilterSerializer)
        return Response({"results": [selectors.suite_public(s) for s in selectors.suite_list(
            name=f.get("name"), kind=f.get("kind"), latest=f.get("latest", False),
            sort=f.get("sort"))]})

    @extend_schema(request={"application/json": InputSerializer,
                            "application/jsonl": OpenApiTypes.STR},
                   parameters=[OpenApiParameter("name", str, description="A JSONL upload's "
                                                "suite name.")],
                   responses={201: SuiteOutput}, operation_id="benchmarks_suites_create",
                   summary="Make a suite: HotpotQA questions, conversations from stored threads, "
                           "or JSONL (OpenAI Evals samples). A name that exists gets a new "
                           "version.")
    def post(self, request: Request) -> Response:
        who = {"created_by": self._key(request), "created_by_user": self._user(request)}
        if isinstance(request.data, bytes):
            name = SlugName(max_length=100)
            try:
                slug = name.run_validation(request.query_params.get("name", ""))
            except serializers.ValidationError as exc:
                raise exceptions.ValidationError({"name": exc.detail}) from None
            suite = suite_from_jsonl(name=slug, body=request.data, **who)
            return Response(selectors.suite_public(suite), status=201)
        if not isinstance(request.data, dict):
            raise exceptions.ValidationError({"non_field_errors": ["Expected a JSON object."]})
        body = self.InputSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        data = dict(body.validated_data)
        if "from_threads" in data:
            suite = suite_from_threads(name=data["name"], spec=dict(data["from_threads"]),
                                       description=data.get("description", ""), **who)
        else:
            suite = services.suite_create(created_by=who["created_by"], **data)
        return Response(selectors.suite_public(suite), status=201)


def _suite_or_404(suite_id: int) -> BenchmarkSuite:
    suite = selectors.suite_get(ref=suite_id)
    if suite is None:
        raise NotFound(f"No suite {suite_id}.", code="suite_not_found")
    return suite


@extend_schema_serializer(component_name="BenchmarkSuiteCase")
class CaseOutput(serializers.Serializer):
    index = serializers.IntegerField()
    input = serializers.ListField(child=serializers.DictField(),
                                  help_text="The conversation up to the user message.")
    ideal = serializers.CharField(allow_blank=True, help_text="The reply it had: the reference.")
    source_thread = serializers.CharField(allow_null=True)
    source_message = serializers.IntegerField(allow_null=True)
    source_agent = serializers.CharField(allow_null=True)


class SuiteDetailApi(BenchmarksApi):
    @extend_schema(responses=SuiteOutput, operation_id="benchmarks_suites_retrieve",
                   summary="One suite version")
    def get(self, request: Request, suite_id: int) -> Response:
        return Response(selectors.suite_public(_suite_or_404(suite_id)))


class SuiteCasesApi(BenchmarksApi):
    @extend_schema(operation_id="benchmarks_suites_cases",
                   summary="A conversation suite's cases, in order",
                   responses=paginated_schema("PaginatedBenchmarkSuiteCases", CaseOutput))
    def get(self, request: Request, suite_id: int) -> Response:
        suite = _suite_or_404(suite_id)
        return self.paginated(selectors.suite_cases(suite=suite), selectors.case_public)


class SuiteExportApi(BenchmarksApi):
    @extend_schema(operation_id="benchmarks_suites_export",
                   summary="A conversation suite as JSONL (OpenAI Evals samples)",
                   responses={(200, "application/jsonl"): OpenApiTypes.STR})
    def get(self, request: Request, suite_id: int) -> HttpResponse:
        suite = _suite_or_404(suite_id)
        if suite.kind != BenchmarkSuite.Kind.CONVERSATIONS:
            raise exceptions.ValidationError({"suite": ["Only a conversation suite exports as "
                                                        "JSONL."]})
        response = HttpResponse(suite_export_jsonl(suite), content_type="application/jsonl")
        response["Content-Disposition"] = (f'attachment; filename="{suite.name}-v'
                                           f'{suite.version}.jsonl"')
        return response


class SuiteTrendApi(BenchmarksApi):
    @extend_schema(operation_id="benchmarks_suites_trend",
                   summary="The suite's finished replays over time (every version of its "
                           "name), each target's mean scores",
                   responses=inline_serializer(name="BenchmarkSuiteTrend", fields={
                       "suite": serializers.CharField(),
                       "points": serializers.ListField(child=serializers.DictField())}))
    def get(self, request: Request, suite_id: int) -> Response:
        suite = _suite_or_404(suite_id)
        return Response({"suite": suite.name, "points": reads.suite_trend(name=suite.name)})
