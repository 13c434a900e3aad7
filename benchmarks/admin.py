"""Admin for suites and runs: metrics read-only; actions cancel and re-run (via services)."""

from __future__ import annotations

from typing import Any

from django.contrib import admin, messages
from django.db.models import QuerySet
from django.http import HttpRequest

from agents.kernel.exceptions import GaiaError
from agents.services.audit import audit_actor_of_request
from benchmarks import selectors, services
from benchmarks.models import BenchmarkResult, BenchmarkRun, BenchmarkSuite, SuiteCase
from benchmarks.registry import kind_get


class SuiteCaseInline(admin.TabularInline):
    model = SuiteCase
    extra = 0
    can_delete = False
    fields = ["index", "input", "ideal", "source_thread", "source_agent"]
    readonly_fields = fields
    max_num = 0


@admin.register(BenchmarkSuite)
class BenchmarkSuiteAdmin(admin.ModelAdmin):
    """Suites are read here: a version never changes once made (runs name it); a new version
    comes from the API, the CLI or the pages (same name)."""

    list_display = ["name", "version", "kind", "question_count", "builtin", "created_by",
                    "created_at"]
    list_filter = ["kind", "builtin"]
    search_fields = ["name", "description"]
    inlines = [SuiteCaseInline]

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


class BenchmarkResultInline(admin.TabularInline):
    model = BenchmarkResult
    extra = 0
    can_delete = False
    fields = ["question_index", "agent", "status", "prediction", "gold", "exact_match", "f1",
              "rouge_l", "similarity", "judge_score", "judge_error", "bytes_tx", "bytes_rx",
              "packets", "tokens", "elapsed_ms", "error"]
    readonly_fields = fields

    def has_add_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


@admin.register(BenchmarkRun)
class BenchmarkRunAdmin(admin.ModelAdmin):
    list_display = ["id", "kind", "suite", "status", "protocol", "tool_backend", "progress",
                    "mean_em", "attempts", "queued_at", "finished_at"]
    list_filter = ["kind", "status", "protocol", "suite"]
    actions = ["cancel_runs", "rerun_runs"]
    inlines = [BenchmarkResultInline]
    readonly_fields = [f.name for f in BenchmarkRun._meta.fields] + ["quality_label"]

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False  # submitted over the API or the CLI (validated there)

    @admin.display(description="tools / targets")
    def tool_backend(self, run: BenchmarkRun) -> str:
        if run.kind == BenchmarkRun.Kind.REPLAY:
            return ", ".join(run.agents) + (f" (judge {run.judge})" if run.judge else "")
        return "deterministic (baseline)" if run.baseline and len(set(run.tools.values())) == 1 \
            else ", ".join(f"{k}={v}" for k, v in run.tools.items())

    @admin.display(description="done")
    def progress(self, run: BenchmarkRun) -> str:
        return f"{run.questions_done}/{run.questions_total}"

    @admin.display(description="EM")
    def mean_em(self, run: BenchmarkRun) -> str:
        em = (run.summary or {}).get("mean_exact_match")
        return "" if em is None else f"{em:.3f}" + (" (baseline)" if run.baseline else "")

    @admin.display(description="quality label")
    def quality_label(self, run: BenchmarkRun) -> str:
        return selectors.quality_label(run)

    @admin.action(description="Cancel the selected runs")
    def cancel_runs(self, request: HttpRequest, queryset: QuerySet[BenchmarkRun]) -> None:
        done = 0
        for run in queryset:
            try:
                services.benchmark_run_cancel(
                    run=run, reason=f"cancelled by {request.user}",
                    actor=audit_actor_of_request(request, channel="admin"))
                done += 1
            except GaiaError as exc:
                self.message_user(request, f"Run {run.pk}: {exc.message}", messages.WARNING)
        self.message_user(request, f"Cancelled {done} run(s).")

    @admin.action(description="Re-run the selected runs (new runs, same settings)")
    def rerun_runs(self, request: HttpRequest, queryset: QuerySet[BenchmarkRun]) -> None:
        new = [kind_get(run.kind).again(run, submitted_by_user=request.user).pk
               for run in queryset]
        self.message_user(request, f"Queued run(s) {', '.join(map(str, new))}.")

