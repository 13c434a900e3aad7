"""The benchmark pages: templates that the script ``static/benchmarks/runs.js`` fills from
``/api/v1/benchmarks/`` and keeps live from the feed (the run page, its progress, the compare
charts); staff only, as every operator page (:func:`agents.views.staff_required`)."""

from __future__ import annotations

from django.http import HttpRequest, HttpResponse
from django.shortcuts import render

from agents.views import staff_required
from benchmarks import selectors
from benchmarks.services import ROLES


@staff_required
def run_list(request: HttpRequest) -> HttpResponse:
    return render(request, "benchmarks/runs.html", {"page": "runs"})


@staff_required
def run_new(request: HttpRequest) -> HttpResponse:
    return render(request, "benchmarks/run_new.html", {
        "page": "run_new", "agents": selectors.agent_slugs_enabled(), "roles": ROLES})


@staff_required
def run_detail(request: HttpRequest, run_id: int) -> HttpResponse:
    return render(request, "benchmarks/run.html", {"page": "run", "run_id": run_id})


@staff_required
def run_compare(request: HttpRequest) -> HttpResponse:
    return render(request, "benchmarks/compare.html", {
        "page": "compare", "runs": request.GET.get("runs", "")})
