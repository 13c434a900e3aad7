"""A replay run's cases side by side (reference against each candidate, word-level diff, scores,
cost and latency, largest regression first)."""

from __future__ import annotations

from drf_spectacular.utils import extend_schema
from rest_framework import exceptions, serializers
from rest_framework.request import Request
from rest_framework.response import Response

from agents.http.rest import paginated_schema
from agents.kernel.exceptions import NotFound
from benchmarks.apis.base import BenchmarksApi, run_or_404
from benchmarks.models import BenchmarkRun
from benchmarks.replay import reads


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
                   responses=paginated_schema("PaginatedBenchmarkReplayCases",
                                              serializers.DictField))
    def get(self, request: Request, run_id: int) -> Response:
        f = self.filters(self.FilterSerializer)
        run = run_or_404(run_id)
        if run.kind != BenchmarkRun.Kind.REPLAY:
            raise NotFound(f"Run {run.pk} is a mesh run: it has questions, not cases (compare "
                           "mesh runs with /compare).", code="not_a_replay")
        against = None
        if f.get("against"):
            against = run_or_404(f["against"])
            if against.suite.name != run.suite.name or against.kind != run.kind:
                raise exceptions.ValidationError({"against": ["A replay of the same suite."]})
        baseline = f.get("baseline")
        if baseline and baseline not in run.agents:
            raise exceptions.ValidationError({"baseline": [f"Not a target of run {run.pk}."]})
        cases = reads.replay_cases(run=run, against=against, baseline=baseline)
        return self.paginated(cases, lambda c: c)
