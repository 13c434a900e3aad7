"""The benchmark pages: templates that the scripts in ``static/benchmarks/`` fill from
``/api/v1/benchmarks/`` and keep live from the feed (a run's page and its progress, a replay's
cases side by side, the compare charts, a suite's trend); what needs no script (the suites,
a suite's cases and runs) is rendered here from the selectors the API uses. Staff only, as
every operator page (:func:`agents.http.pages.staff_required`)."""

from __future__ import annotations

from django.core.paginator import Paginator
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import render

from agents.http.pages import page_sort, staff_required
from benchmarks import selectors
from benchmarks.kinds.mesh import ROLES
from benchmarks.models import BenchmarkRun, BenchmarkSuite
from benchmarks.registry import kind_get

CASES_PER_PAGE = 20
SUITE_RUNS_SHOWN = 50


@staff_required
def run_list(request: HttpRequest) -> HttpResponse:
    # the filters go to the API as they are (runs.js): it checks them and names a bad one
    filters = {k: request.GET.get(k, "") for k in ("status", "kind", "suite", "agent", "since")}
    return render(request, "benchmarks/runs.html", {
        "page": "runs", "filters": filters, "statuses": BenchmarkRun.Status.choices,
        "kinds": BenchmarkRun.Kind.choices})


@staff_required
def run_new(request: HttpRequest) -> HttpResponse:
    kinds = BenchmarkSuite.Kind
    return render(request, "benchmarks/run_new.html", {
        "page": "run_new", "agents": selectors.agent_slugs_enabled(), "roles": ROLES,
        "targets": selectors.replay_targets(),
        "mesh_suites": selectors.suite_list(kind=kinds.HOTPOTQA, latest=True),
        "conversation_suites": selectors.suite_list(kind=kinds.CONVERSATIONS),
        "chosen": request.GET.get("suite", "")})


@staff_required
def run_detail(request: HttpRequest, run_id: int) -> HttpResponse:
    run = selectors.run_get(run_id=run_id)
    if run is None:  # a page, not a skeleton waiting forever for a run that is not there
        raise Http404(f"No benchmark run {run_id}.")
    # whether a worker will run it: the page says so when none is alive (live: queue_changed)
    queue = selectors.queue_state()
    template, page = kind_get(run.kind).page
    return render(request, template, {
        "page": page, "run_id": run_id, "run": {**selectors.run_public(run), "queue": queue},
        "queue": queue, "run_status": run.status})


@staff_required
def run_compare(request: HttpRequest) -> HttpResponse:
    return render(request, "benchmarks/compare.html", {
        "page": "compare", "runs": request.GET.get("runs", "")})


@staff_required
def suite_list(request: HttpRequest) -> HttpResponse:
    return render(request, "benchmarks/suites.html", {
        "page": "suites", "ordering": selectors.SUITE_ORDERING,
        "suites": [selectors.suite_public(s) for s in selectors.suite_list(
            sort=page_sort(request, selectors.SUITE_ORDERING))]})


@staff_required
def suite_detail(request: HttpRequest, suite_id: int) -> HttpResponse:
    suite = selectors.suite_get(ref=suite_id)
    if suite is None:
        raise Http404(f"No suite {suite_id}.")
    cases = Paginator(selectors.suite_cases(suite=suite), CASES_PER_PAGE).get_page(
        request.GET.get("page"))
    runs = selectors.run_list(suite=suite.name)[:SUITE_RUNS_SHOWN]
    return render(request, "benchmarks/suite.html", {
        "page": "suite", "suite": selectors.suite_public(suite),
        "versions": [selectors.suite_public(s) for s in selectors.suite_list(name=suite.name)],
        "cases": [{**selectors.case_public(c), "question": selectors.last_user_message(c.input)}
                  for c in cases.object_list],
        "cases_page": cases, "runs": [selectors.run_public(r) for r in runs]})
