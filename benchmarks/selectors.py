"""Reads for benchmark suites and runs: the public shapes the API, the feed and the CLI show.

Quality always travels with the suite and tool backend it came from, and deterministic tools'
quality carries the baseline label (see ``BASELINE_LABEL``)."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.core.files.storage import default_storage
from django.db.models import (
    DateTimeField,
    DurationField,
    ExpressionWrapper,
    OuterRef,
    Q,
    QuerySet,
    Subquery,
    Value,
)
from django.db.models.functions import Now

from agents.models import Agent, Team
from agents.selectors import iso
from agents.selectors.ordering import Ordering
from benchmarks.models import (
    BenchmarkResult,
    BenchmarkRun,
    BenchmarkSuite,
    QueueWorker,
    SuiteCase,
)
from benchmarks.registry import kind_get

ARTIFACT_NAMES = ("summary.json", "run_artifacts.tar.gz")


def stale_cutoff(stale_after_s: float | None = None) -> ExpressionWrapper:
    """The database's now minus ``stale_after_s`` (default ``GAIA_BENCH_STALE_SECONDS``): a
    heartbeat or a worker's beat older than this is stale. The database's clock judges, so
    workers on machines with a skewed clock are judged fairly."""
    if stale_after_s is None:
        stale_after_s = float(getattr(settings, "GAIA_BENCH_STALE_SECONDS", 30.0))
    return ExpressionWrapper(Now() - Value(timedelta(seconds=stale_after_s),
                                           output_field=DurationField()),
                             output_field=DateTimeField())


def queue_state(*, besides: str = "") -> dict[str, Any]:
    """Whether anything executes runs now: ``{"workers": N, "alive": N > 0}``, counting the
    workers (Celery, or servers' embedded workers) whose beat is fresh
    (:mod:`benchmarks.queue`), other than ``besides``. One query on a table of a few rows."""
    workers = QueueWorker.objects.filter(lost_at__isnull=True,
                                         beat_at__gte=stale_cutoff()).exclude(name=besides
                                                                              ).count()
    return {"workers": workers, "alive": workers > 0}


def quality_label(run: BenchmarkRun) -> str:
    """What the run's quality figures mean, as its kind says."""
    return kind_get(run.kind).label(run)


def run_public(run: BenchmarkRun) -> dict[str, Any]:
    summary = run.summary or None
    return {
        "id": run.pk,
        "kind": run.kind,
        "suite": run.suite.name,
        "suite_id": run.suite_id,
        "suite_version": run.suite.version,
        "agents": run.agents,
        "judge": run.judge or None,
        "parallel": run.parallel,
        "status": run.status,
        "protocol": run.protocol,
        "selection": run.selection,
        "question_indexes": run.question_indexes,
        "tools": run.tools,
        "baseline": run.baseline,
        "quality_label": quality_label(run),
        "question_timeout_s": run.question_timeout_s,
        "time_limit_s": run.time_limit_s,
        "submitted_by": run.submitted_by.name if run.submitted_by_id else (
            run.submitted_by_user.get_username() if run.submitted_by_user_id else None),
        "celery_task_id": run.celery_task_id or None,
        "worker": run.worker or None,
        "attempts": run.attempts,
        "heartbeat_at": iso(run.heartbeat_at),
        "progress": {"questions_done": run.questions_done,
                     "questions_total": run.questions_total,
                     "packets": run.packets, "bytes": run.bytes},
        "summary": summary,
        "error": run.error or None,
        "notes": run.notes.splitlines(),
        "queued_at": iso(run.queued_at),
        "started_at": iso(run.started_at),
        "finished_at": iso(run.finished_at),
    }


def result_public(result: BenchmarkResult) -> dict[str, Any]:
    return {
        "question_index": result.question_index,
        "agent": result.agent or None,
        "question_id": result.question_id,
        "question": result.question,
        "status": result.status,
        "error": result.error or None,
        "prediction": result.prediction,
        "gold": result.gold,
        "exact_match": result.exact_match,
        "f1": result.f1,
        "rouge_l": result.rouge_l,
        "bytes_tx": result.bytes_tx,
        "bytes_rx": result.bytes_rx,
        "packets": result.packets,
        "header_overhead": result.header_overhead,
        "tokens": result.tokens,
        "tokens_by_agent": result.tokens_by_agent,
        "elapsed_ms": result.elapsed_ms,
        "similarity": result.similarity,
        "judge_score": result.judge_score,
        "judge_verdict": result.judge_verdict or None,
        "judge_reason": result.judge_reason or None,
        "judge_error": result.judge_error or None,
        "ttft_ms": result.ttft_ms,
        "tool_calls": result.tool_calls,
        "thread_id": str(result.thread_id) if result.thread_id else None,
        "artifacts": [] if result.agent else [f"q{result.question_index}/metrics.json",
                                              f"q{result.question_index}/run_artifacts.tar.gz"],
    }


def suite_public(suite: BenchmarkSuite) -> dict[str, Any]:
    return {
        "id": suite.pk,
        "name": suite.name,
        "version": suite.version,
        "kind": suite.kind,
        "origin": suite.origin or None,
        "created_by": suite.created_by.name if suite.created_by_id else (
            suite.created_by_user.get_username() if suite.created_by_user_id else None),
        "description": suite.description,
        "source": suite.source,
        "licence": suite.licence,
        "question_count": suite.question_count,
        "builtin": suite.builtin,
        "created_at": iso(suite.created_at),
    }


def last_user_message(messages: list[dict[str, Any]]) -> str:
    """What a case asks: its conversation's last user message."""
    return next((m.get("content") or "" for m in reversed(messages or [])
                 if m.get("role") == "user"), "")


def case_public(case: SuiteCase) -> dict[str, Any]:
    return {"index": case.index, "input": case.input, "ideal": case.ideal,
            "source_thread": str(case.source_thread) if case.source_thread else None,
            "source_message": case.source_message, "source_agent": case.source_agent or None}


def suite_cases(*, suite: BenchmarkSuite) -> QuerySet[SuiteCase]:
    """A conversation suite's cases, in order."""
    return suite.cases.order_by("index")


SUITE_ORDERING = Ordering(
    columns={"name": "name", "version": "version", "kind": "kind", "cases": "question_count",
             "created_at": "created_at"}, default="name", default_order=("name", "-version"))
RUN_ORDERING = Ordering(
    columns={"queued_at": "queued_at", "id": "pk", "status": "status", "kind": "kind",
             "protocol": "protocol"}, default="-queued_at", default_order=("-queued_at", "-id"))


def suite_list(*, name: str | None = None, kind: str | None = None,
               latest: bool = False, sort: str | None = None) -> QuerySet[BenchmarkSuite]:
    """Suites by name, newest version first (``latest``: each name's newest version only;
    ``sort``: a column of :data:`SUITE_ORDERING`)."""
    suites = BenchmarkSuite.objects.select_related("created_by", "created_by_user")
    if name:
        suites = suites.filter(name=name)
    if kind:
        suites = suites.filter(kind=kind)
    if latest:
        newest = BenchmarkSuite.objects.filter(name=OuterRef("name")).order_by("-version")
        suites = suites.filter(pk=Subquery(newest.values("pk")[:1]))
    return SUITE_ORDERING.apply(suites, sort)


def suite_get(*, ref: Any) -> BenchmarkSuite | None:
    """A suite by id, ``name`` (its newest version) or ``name@version``."""
    suites = BenchmarkSuite.objects.select_related("created_by", "created_by_user")
    if isinstance(ref, int) and not isinstance(ref, bool):
        return suites.filter(pk=ref).first()
    if not isinstance(ref, str) or not ref:
        return None
    name, _, version = ref.partition("@")
    if version:
        return suites.filter(name=name, version=int(version)).first() if version.isdecimal() \
            else None
    return suites.filter(name=name).order_by("-version").first()


def run_list(*, status: str | None = None, suite: str | None = None,
             protocol: str | None = None, agent: str | None = None,
             since: datetime | None = None, kind: str | None = None,
             sort: str | None = None) -> QuerySet[BenchmarkRun]:
    """Runs, newest first (``sort``: a column of :data:`RUN_ORDERING`)."""
    runs = BenchmarkRun.objects.select_related("suite", "submitted_by", "submitted_by_user")
    if status:
        runs = runs.filter(status=status)
    if kind:
        runs = runs.filter(kind=kind)
    if suite:
        runs = runs.filter(suite__name=suite.partition("@")[0])
        if "@" in suite and suite.partition("@")[2].isdecimal():
            runs = runs.filter(suite__version=int(suite.partition("@")[2]))
    if protocol:
        runs = runs.filter(protocol=protocol)
    if agent:
        # tools is a small JSON object {role: backend}: match the slug as one of its values
        # portably (SQLite and PostgreSQL) by its JSON text.
        runs = runs.filter(Q(tools__icontains=f'"{agent}"') | Q(agents__icontains=f'"{agent}"'))
    if since:
        runs = runs.filter(queued_at__gte=since)
    return RUN_ORDERING.apply(runs, sort)


def run_get(*, run_id: int) -> BenchmarkRun | None:
    return BenchmarkRun.objects.select_related("suite", "submitted_by",
                                               "submitted_by_user").filter(pk=run_id).first()


def run_results(*, run: BenchmarkRun) -> list[dict[str, Any]]:
    return [result_public(r) for r in run.results.order_by("question_index")]


def run_artifacts(*, run: BenchmarkRun) -> list[str]:
    """Names of the run's stored artifacts (``summary.json``, ``run_artifacts.tar.gz``,
    ``q<index>/metrics.json``, ``q<index>/run_artifacts.tar.gz``)."""
    names = [n for n in ARTIFACT_NAMES if default_storage.exists(
        f"benchmarks/runs/{run.pk}/{n}")]
    for index in run.results.order_by("question_index").values_list("question_index",
                                                                    flat=True):
        names += [f"q{index}/metrics.json", f"q{index}/run_artifacts.tar.gz"]
    return names


def artifact_open(*, run: BenchmarkRun, name: str) -> Any | None:
    """The stored artifact ``name`` of ``run`` opened for reading, or ``None``."""
    if name not in run_artifacts(run=run):
        return None
    path = f"benchmarks/runs/{run.pk}/{name}"
    return default_storage.open(path, "rb") if default_storage.exists(path) else None


def _column_summary(run: BenchmarkRun, agent: str | None) -> dict[str, Any] | None:
    if agent is None:
        return run.summary
    agents = (run.summary or {}).get("agents") or {}
    return agents.get(agent)


def runs_compare(*, runs: list[BenchmarkRun]) -> dict[str, Any]:
    """Metrics side by side and, per question index any run answered, each column's answer and
    scores (a column: a mesh run, or one target of a replay, keyed ``run`` or ``run:agent``);
    ``differences`` lists the questions where exact match or the answer differ. ``warnings``
    says what makes the columns not comparable (other suites or question sets, a failed run)."""
    per_column: dict[str, dict[int, BenchmarkResult]] = {}
    columns = []
    for run in runs:
        for key, agent in kind_get(run.kind).columns(run):
            per_column[key] = {res.question_index: res for res in run.results.all()
                               if (res.agent or None) == agent}
            columns.append({"key": key, "run": run.pk, "agent": agent,
                            "label": f"#{run.pk}" + (f" {agent}" if agent else
                                                     f" {run.protocol}"),
                            "summary": _column_summary(run, agent)})
    indexes = sorted({i for results in per_column.values() for i in results})
    questions = []
    for index in indexes:
        row: dict[str, Any] = {"question_index": index, "question": None, "gold": None,
                               "runs": {}}
        for column in columns:
            res = per_column[column["key"]].get(index)
            if res is None:
                row["runs"][column["key"]] = None
                continue
            row["question"], row["gold"] = res.question, res.gold
            row["runs"][column["key"]] = {
                "prediction": res.prediction, "status": res.status,
                "exact_match": res.exact_match, "f1": res.f1, "rouge_l": res.rouge_l,
                "similarity": res.similarity, "judge_score": res.judge_score,
                "bytes": res.bytes_tx + res.bytes_rx, "elapsed_ms": res.elapsed_ms}
        answers = [(v or {}).get("prediction") for v in row["runs"].values()]
        ems = [(v or {}).get("exact_match") for v in row["runs"].values()]
        row["differs"] = len(set(map(str, answers))) > 1 or len(set(map(str, ems))) > 1
        questions.append(row)
    warnings = []
    if len({r.suite_id for r in runs}) > 1:
        warnings.append("The runs are of different suites (or suite versions).")
    elif len({tuple(r.question_indexes) for r in runs}) > 1:
        warnings.append("The runs asked different questions of the suite.")
    for run in runs:
        if run.status != BenchmarkRun.Status.SUCCEEDED:
            warnings.append(f"Run #{run.pk} is {run.status}: its figures are partial.")
    return {
        "runs": [{"id": r.pk, "kind": r.kind, "suite": r.suite.name,
                  "suite_version": r.suite.version, "protocol": r.protocol, "tools": r.tools,
                  "agents": r.agents, "judge": r.judge or None, "status": r.status,
                  "baseline": r.baseline, "quality_label": quality_label(r),
                  "summary": r.summary} for r in runs],
        "columns": columns,
        "questions": questions,
        "differences": [q["question_index"] for q in questions if q["differs"]],
        "warnings": warnings,
    }


def agent_slugs_enabled() -> list[str]:
    """The agents a run's roles may use (the submit form's choices)."""
    return list(Agent.objects.filter(enabled=True).order_by("slug").values_list("slug", flat=True))


def replay_targets() -> list[str]:
    """What a replay may run against (the submit form's choices): ``auto``, every enabled
    agent, every team as ``team/<slug>``."""
    teams = Team.objects.order_by("slug").values_list("slug", flat=True)
    return ["auto", *agent_slugs_enabled(), *(f"team/{slug}" for slug in teams)]
