"""A replay run's cases side by side (reference against each candidate, word-level diff, scores,
cost and latency, largest regression first), and resuming a cancelled or failed run."""

from __future__ import annotations

from drf_spectacular.utils import extend_schema, inline_serializer
from rest_framework import exceptions, serializers
from rest_framework.request import Request
from rest_framework.response import Response

from agents.exceptions import NotFound
from agents.services.audit import audit_actor_of_request
from benchmarks import selectors
from benchmarks.apis import BenchmarksApi, RunOutput, _run_or_404
from benchmarks.models import BenchmarkRun
from benchmarks.replay import reads
from benchmarks.replay.runs import benchmark_run_resume


class RunCasesApi(BenchmarksApi):
    class FilterSerializer(serializers.Serializer):
        against = serializers.IntegerField(required=False, min_value=1, help_text="Another "
                                           "run of the suite: each target's delta against "
                                           "the same target there.")
        baseline = serializers.CharField(required=False, max_length=100, help_text="A target "
                                         "of this run the others are compared with (default: "
                                         "the first).")
        limit = serializers.IntegerField(required=False, min_value=1, max_value=500)
        offset = serializers.IntegerField(required=False, min_value=0)

    @extend_schema(parameters=[FilterSerializer], operation_id="benchmarks_runs_cases",
                   summary="A replay's cases side by side, largest regression first",
                   responses=inline_serializer(name="PaginatedBenchmarkReplayCases", fields={
                       "count": serializers.IntegerField(),
                       "next": serializers.URLField(allow_null=True),
                       "previous": serializers.URLField(allow_null=True),
                       "results": serializers.ListField(child=serializers.DictField())}))
    def get(self, request: Request, run_id: int) -> Response:
        f = self.filters(self.FilterSerializer)
        run = _run_or_404(run_id)
        if run.kind != BenchmarkRun.Kind.REPLAY:
            raise NotFound(f"Run {run.pk} is a mesh run: it has questions, not cases (compare "
                           "mesh runs with /compare).", code="not_a_replay")
        against = None
        if f.get("against"):
            against = _run_or_404(f["against"])
            if against.suite.name != run.suite.name or against.kind != run.kind:
                raise exceptions.ValidationError({"against": ["A replay of the same suite."]})
        baseline = f.get("baseline")
        if baseline and baseline not in run.agents:
            raise exceptions.ValidationError({"baseline": [f"Not a target of run {run.pk}."]})
        cases = reads.replay_cases(run=run, against=against, baseline=baseline)
        return self.paginated(cases, lambda c: c)


class RunResumeApi(BenchmarksApi):
    schema_errors = (409,)

    @extend_schema(request=None, responses=RunOutput, operation_id="benchmarks_runs_resume",
                   summary="Queue a cancelled or failed run again: what it recorded stays, "
                           "the rest runs (409 for any other run)")
    def post(self, request: Request, run_id: int) -> Response:
        run = _run_or_404(run_id)
        who = self._key(request) or self._user(request)
        benchmark_run_resume(run=run, by=str(who), actor=audit_actor_of_request(request))
        return Response(selectors.run_public(_run_or_404(run_id)))
