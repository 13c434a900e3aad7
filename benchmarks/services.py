"""Writes for benchmark suites and runs: create, claim, heartbeat, record, finish, cancel,
recover. Every change an operator can see is announced through ``agents.realtime`` after its
transaction commits.

A run's life: :func:`benchmark_run_create` (``queued``, dispatched on commit to Celery or the
embedded worker) -> :func:`benchmark_run_claim` (one conditional update: a redelivered message
claims nothing) -> :func:`benchmark_run_heartbeat` every second while it runs (it also says
whether the run was cancelled) -> :func:`benchmark_result_record` per question ->
:func:`benchmark_run_finish`. A worker that dies leaves a stale heartbeat, which
:func:`benchmark_run_recover_stale` (run periodically by every worker and every web process,
:mod:`benchmarks.worker`) turns into a re-queue
(resuming after the last recorded question) or, past ``max_attempts``, ``failed`` with why.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from django.conf import settings
from django.core.files.base import ContentFile
from django.core.files.storage import default_storage
from django.db import IntegrityError, transaction
from django.db.models import F, Q, Value
from django.db.models.functions import Coalesce, Concat, Now
from django.utils import timezone

from agents import realtime
from agents.background import background_dispatch
from agents.exceptions import Conflict, InvalidRequest
from agents.models import Agent, ApiKey
from agents.services.audit import Actor, audit_record
from benchmarks import events
from benchmarks.models import (
    DETERMINISTIC,
    BenchmarkResult,
    BenchmarkRun,
    BenchmarkSuite,
    RunPart,
)

log = logging.getLogger("gaia.benchmarks")

ROLES = ("search", "extract", "triple", "reason")
MAX_SUITE_QUESTIONS = 2000
MAX_SUITE_BYTES = 10 * 1024 * 1024
MAX_QUESTION_PARAGRAPHS = 200
RUN_STATUS = BenchmarkRun.Status
RUN_TASK = "benchmarks.benchmark_run_execute"  # benchmarks.tasks
RUN_QUEUE = "benchmarks"  # its embedded worker: benchmarks.worker (configured by apps.ready)


def _setting(name: str, default: float) -> float:
    return float(getattr(settings, name, default))


# ---------------------------------------------------------------------------------------------
# Suites


@transaction.atomic
def suite_create(*, name: str, questions: Any, description: str = "", source: str = "",
                 licence: str = "", created_by: ApiKey | None = None,
                 builtin: bool = False) -> BenchmarkSuite:
    """Validate ``questions`` (HotpotQA shape, size limits) and store a suite.

    Raises :class:`InvalidRequest` naming the bad field; a taken name gets a new version."""
    from mesh.suite import parse_suite

    size = len(json.dumps(questions))
    if size > MAX_SUITE_BYTES:
        raise InvalidRequest(f"questions: {size} bytes is over the {MAX_SUITE_BYTES} limit.",
                             param="questions", code="too_large")
    if isinstance(questions, list) and len(questions) > MAX_SUITE_QUESTIONS:
        raise InvalidRequest(f"questions: at most {MAX_SUITE_QUESTIONS} per suite.",
                             param="questions", code="too_large")
    try:
        parsed = parse_suite(questions)
    except ValueError as exc:
        raise InvalidRequest(f"questions: {exc}", param="questions", code="invalid") from exc
    for q in parsed:
        if len(q.paragraphs) > MAX_QUESTION_PARAGRAPHS:
            raise InvalidRequest(
                f"questions: item {q.index} has over {MAX_QUESTION_PARAGRAPHS} paragraphs.",
                param="questions", code="too_large")
        if not q.question.strip() or not q.paragraphs:
            raise InvalidRequest(f"questions: item {q.index} needs a question and a context.",
                                 param="questions", code="invalid")
    # A name that exists gets its next version: runs keep naming the version they used.
    latest = BenchmarkSuite.objects.filter(name=name).order_by("-version").first()
    suite = BenchmarkSuite(name=name, version=latest.version + 1 if latest else 1,
                           description=description, source=source, licence=licence,
                           questions=questions, question_count=len(parsed), builtin=builtin,
                           created_by=created_by)
    suite.full_clean()
    suite.save()
    return suite


# ---------------------------------------------------------------------------------------------
# Runs: submission


def _resolve_indexes(suite: BenchmarkSuite, limit: int | None,
                     indexes: list[int] | None) -> tuple[dict[str, Any], list[int]]:
    count = suite.question_count
    if limit is not None and indexes is not None:
        raise InvalidRequest("Give limit or indexes, not both.", param="indexes")
    if indexes is not None:
        if not indexes:
            raise InvalidRequest("indexes: give at least one.", param="indexes")
        bad = [i for i in indexes if not 0 <= i < count]
        if bad:
            raise InvalidRequest(f"indexes: {bad} outside 0..{count - 1}.", param="indexes")
        if len(set(indexes)) != len(indexes):
            raise InvalidRequest("indexes: repeated index.", param="indexes")
        return {"mode": "indexes", "indexes": list(indexes)}, list(indexes)
    if limit is not None:
        if not 1 <= limit <= count:
            raise InvalidRequest(f"limit: between 1 and {count}.", param="limit")
        return {"mode": "first", "limit": limit}, list(range(limit))
    return {"mode": "all"}, list(range(count))


def _resolve_tools(tools: dict[str, str] | str | None) -> dict[str, str]:
    """Every role -> ``"deterministic"`` or the slug of an enabled agent.

    ``"agents"`` is shorthand for the default ``mesh-<role>`` agents on every role."""
    if tools is None or tools == DETERMINISTIC:
        return dict.fromkeys(ROLES, DETERMINISTIC)
    if tools == "agents":
        tools = {role: f"mesh-{role}" for role in ROLES}
    if not isinstance(tools, dict):
        raise InvalidRequest("tools: 'deterministic', 'agents' or {role: backend}.",
                             param="tools")
    unknown = sorted(set(tools) - set(ROLES))
    if unknown:
        raise InvalidRequest(f"tools: unknown role(s) {unknown}; roles are {list(ROLES)}.",
                             param="tools")
    resolved = dict.fromkeys(ROLES, DETERMINISTIC)
    for role, backend in tools.items():
        if not isinstance(backend, str) or not backend:
            raise InvalidRequest(f"tools.{role}: a backend name.", param=f"tools.{role}")
        if backend != DETERMINISTIC and not Agent.objects.filter(slug=backend,
                                                                 enabled=True).exists():
            raise InvalidRequest(f"tools.{role}: no enabled agent {backend!r}.",
                                 param=f"tools.{role}", code="agent_not_found")
        resolved[role] = backend
    return resolved


@transaction.atomic
def benchmark_run_create(
    *, suite: BenchmarkSuite, protocol: str = "json", limit: int | None = None,
    indexes: list[int] | None = None, tools: dict[str, str] | str | None = None,
    question_timeout_s: float = 60.0, time_limit_s: float = 3600.0,
    submitted_by: ApiKey | None = None, submitted_by_user: Any = None,
) -> BenchmarkRun:
    """Queue a run; it is dispatched (Celery, or the embedded worker) once this commits.

    Raises :class:`InvalidRequest` naming the bad field."""
    from mesh.protocols import get_adapter, needs_signing_seed

    try:
        get_adapter(protocol, signing_seed=bytes(32) if needs_signing_seed(protocol) else None)
    except ValueError as exc:
        raise InvalidRequest(f"protocol: {exc}", param="protocol") from exc
    selection, chosen = _resolve_indexes(suite, limit, indexes)
    run = BenchmarkRun(
        suite=suite, selection=selection, question_indexes=chosen, protocol=protocol,
        tools=_resolve_tools(tools), question_timeout_s=question_timeout_s,
        time_limit_s=time_limit_s, submitted_by=submitted_by,
        submitted_by_user=submitted_by_user if getattr(submitted_by_user, "pk", None) else None,
        questions_total=len(chosen),
    )
    try:
        run.full_clean()
    except Exception as exc:  # ValidationError: name the first bad field
        field = next(iter(getattr(exc, "message_dict", {}) or {"run": None}))
        raise InvalidRequest(f"{field}: {exc}", param=field) from exc
    run.save()
    _announce_run("run_created", run.pk)
    transaction.on_commit(lambda: benchmark_run_dispatch(run_id=run.pk))
    return run


def benchmark_run_dispatch(*, run_id: int) -> None:
    """Hand a queued run to whoever executes runs here (:mod:`agents.background`): Celery
    workers with ``REDIS_URL``, else the server's embedded worker (never the request, never
    the event loop)."""
    limit = BenchmarkRun.objects.filter(pk=run_id).values_list("time_limit_s", flat=True)
    hard = (limit[0] if limit else 3600.0) + 120.0
    # A replay's parts are shared by workers: one message per part waiting (each claims one).
    parts = max(1, RunPart.objects.filter(run_id=run_id, status=RunPart.Status.QUEUED).count())
    try:
        for _ in range(parts):
            task_id = background_dispatch(RUN_TASK, run_id, queue=RUN_QUEUE, time_limit=hard)
    except Exception:  # the broker is away: the stale-run check sends it again later
        log.warning("benchmark run %s: could not reach the broker; it stays queued and "
                    "is dispatched again by the next stale-run check", run_id, exc_info=True)
        return
    if task_id:
        BenchmarkRun.objects.filter(pk=run_id, status=RUN_STATUS.QUEUED).update(
            celery_task_id=task_id)


@transaction.atomic
def benchmark_run_rerun(*, run: BenchmarkRun, submitted_by: ApiKey | None = None,
                        submitted_by_user: Any = None) -> BenchmarkRun:
    """A new queued run with ``run``'s settings (admin action)."""
    sel = run.selection or {}
    return benchmark_run_create(
        suite=run.suite, protocol=run.protocol, tools=dict(run.tools),
        limit=sel.get("limit") if sel.get("mode") == "first" else None,
        indexes=sel.get("indexes") if sel.get("mode") == "indexes" else None,
        question_timeout_s=run.question_timeout_s, time_limit_s=run.time_limit_s,
        submitted_by=submitted_by, submitted_by_user=submitted_by_user)


def _announce_run(event_name: str, run_id: int) -> None:
    realtime.send_event_on_commit(lambda: events.run_changed(event_name, run_id))


@transaction.atomic
def benchmark_run_cancel(*, run: BenchmarkRun, reason: str = "cancelled",
                         actor: Actor | None = None) -> BenchmarkRun:
    """Cancel a queued or running run. A queued run never starts; a running one is stopped by
    its worker at its next heartbeat (within about a second), which ends its agent processes.

    Idempotent on a cancelled run; :class:`Conflict` on one that already finished."""
    now = timezone.now()
    changed = BenchmarkRun.objects.filter(
        pk=run.pk, status__in=[RUN_STATUS.QUEUED, RUN_STATUS.RUNNING]).update(
        status=RUN_STATUS.CANCELLED, finished_at=now, error=reason)
    run.refresh_from_db()
    if changed:
        _announce_run("run_finished", run.pk)
        audit_record(actor=actor, action="run_cancel", target=f"run:{run.pk}")
    elif run.status != RUN_STATUS.CANCELLED:
        raise Conflict(f"Run {run.pk} already {run.status}.", code="run_finished")
    return run


# ---------------------------------------------------------------------------------------------
# Runs: execution (called by the worker, see benchmarks.executor)


@transaction.atomic
def benchmark_run_claim(*, run_id: int, worker: str, task_id: str = "") -> BenchmarkRun | None:
    """Claim a queued run for this worker: ``None`` if it is not queued (already taken,
    cancelled, finished, or unknown), so a message delivered twice runs once."""
    fields: dict[str, Any] = {
        "status": RUN_STATUS.RUNNING, "worker": worker, "heartbeat_at": Now(),
        "attempts": F("attempts") + 1, "started_at": Coalesce(F("started_at"), Now()),
    }
    if task_id:
        fields["celery_task_id"] = task_id
    if BenchmarkRun.objects.filter(pk=run_id, status=RUN_STATUS.QUEUED).update(**fields) != 1:
        return None
    _announce_run("run_started", run_id)
    return BenchmarkRun.objects.select_related("suite").get(pk=run_id)


@dataclass
class Progress:
    packets: int = 0
    bytes: int = 0
    announced: tuple[int, int, int] | None = None


def benchmark_run_heartbeat(*, run_id: int, worker: str, progress: Progress) -> bool:
    """Renew the run's heartbeat and progress; ``False`` if the run is no longer this worker's
    to run (cancelled, or recovered by another worker): the caller stops.

    Publishes ``run_progress`` when something changed (so at most once per heartbeat)."""
    with transaction.atomic():
        ok = BenchmarkRun.objects.filter(
            pk=run_id, status=RUN_STATUS.RUNNING, worker=worker).update(
            heartbeat_at=Now(), packets=progress.packets, bytes=progress.bytes) == 1
        if not ok:
            return False
        done, total = BenchmarkRun.objects.filter(pk=run_id).values_list(
            "questions_done", "questions_total").get()
        state = (done, progress.packets, progress.bytes)
        if state != progress.announced:
            progress.announced = state
            realtime.send_event_on_commit(events.run_progress(
                run_id=run_id, status=RUN_STATUS.RUNNING, questions_done=done,
                questions_total=total, packets=progress.packets, bytes=progress.bytes))
    return True


def _store(path: str, data: bytes) -> str:
    if default_storage.exists(path):
        default_storage.delete(path)
    return default_storage.save(path, ContentFile(data))


def artifact_path(run_id: int, name: str) -> str:
    return f"benchmarks/runs/{run_id}/{name}"


def benchmark_result_record(*, run_id: int, worker: str, metrics: dict[str, Any],
                            tokens_by_agent: dict[str, int], metrics_json: bytes,
                            archive: bytes) -> BenchmarkResult | None:
    """Store one finished question (its row and its ``metrics.json`` and workspace archive)
    and count it in the run's progress. ``None`` if the run is no longer this worker's."""
    index = int(metrics["question_index"])
    _store(artifact_path(run_id, f"q{index}/metrics.json"), metrics_json)
    _store(artifact_path(run_id, f"q{index}/run_artifacts.tar.gz"), archive)
    with transaction.atomic():
        run = BenchmarkRun.objects.select_for_update().filter(
            pk=run_id, status=RUN_STATUS.RUNNING, worker=worker).first()
        if run is None:
            return None
        completed = metrics.get("status") == "completed"
        try:
            with transaction.atomic():
                result = BenchmarkResult.objects.create(
                    run=run, question_index=index, question_id=str(metrics.get("question_id")
                                                                   or ""),
                    question=str(metrics.get("question") or ""),
                    status=str(metrics.get("status")),
                    error="" if completed else str(metrics.get("reason") or ""),
                    prediction=metrics.get("answer"), gold=str(metrics.get("gold_answer") or ""),
                    exact_match=metrics.get("exact_match"), f1=metrics.get("f1"),
                    rouge_l=metrics.get("rouge_l"), bytes_tx=int(metrics.get("bytes_tx", 0)),
                    bytes_rx=int(metrics.get("bytes_rx", 0)),
                    packets=int(metrics.get("pkt_cnt", 0)),
                    header_overhead=int(metrics.get("header_overhead", 0)),
                    tokens=int(metrics.get("token_sum", 0)), tokens_by_agent=tokens_by_agent,
                    elapsed_ms=float(metrics.get("elapsed_ms", 0.0)), metrics=metrics)
        except IntegrityError:  # recorded by an earlier attempt
            result = BenchmarkResult.objects.get(run=run, question_index=index)
        BenchmarkRun.objects.filter(pk=run_id).update(
            questions_done=run.results.count(), heartbeat_at=Now())
        realtime.send_event_on_commit(lambda: events.question_finished(result))
    return result


def benchmark_run_finish(*, run_id: int, worker: str, status: str, error: str = "",
                         summary: dict[str, Any] | None = None,
                         summary_json: bytes | None = None,
                         archive: bytes | None = None,
                         progress: Progress | None = None) -> bool:
    """End a running run (``succeeded`` or ``failed``) with its summary and artifacts.
    ``False`` (nothing written) if the run is no longer this worker's (it was cancelled)."""
    if summary_json is not None:
        _store(artifact_path(run_id, "summary.json"), summary_json)
    if archive is not None:
        _store(artifact_path(run_id, "run_artifacts.tar.gz"), archive)
    with transaction.atomic():
        done = BenchmarkRun.objects.filter(
            pk=run_id, status=RUN_STATUS.RUNNING, worker=worker).update(
            status=status, error=error, summary=summary, finished_at=timezone.now(),
            heartbeat_at=Now(),
            **({"packets": progress.packets, "bytes": progress.bytes} if progress else {}))
        if done:
            if progress is not None:  # the final counts, whatever the heartbeat last said
                run_done, total = BenchmarkRun.objects.filter(pk=run_id).values_list(
                    "questions_done", "questions_total").get()
                realtime.send_event_on_commit(events.run_progress(
                    run_id=run_id, status=status, questions_done=run_done,
                    questions_total=total, packets=progress.packets, bytes=progress.bytes))
            _announce_run("run_finished", run_id)
    return bool(done)


def benchmark_run_finalize_cancelled(*, run_id: int, summary: dict[str, Any] | None,
                                     summary_json: bytes | None) -> None:
    """Keep the partial summary of a run cancelled mid-way (its status stays cancelled)."""
    if summary_json is not None:
        _store(artifact_path(run_id, "summary.json"), summary_json)
    BenchmarkRun.objects.filter(pk=run_id, status=RUN_STATUS.CANCELLED).update(summary=summary)


NO_WORKER = "no worker alive"


def lost_note(*, worker: str, beat: Any) -> tuple[str, bool]:
    """How a lost worker is named in a run's notes and errors, and whether any other worker
    is alive now (:func:`benchmarks.selectors.queue_state`). Not the lost one: its own beat
    may still look fresh for a moment after its run's heartbeat went stale (they are written
    by two threads), and the note then left out that no worker was left."""
    from benchmarks.selectors import queue_state

    seen = beat.isoformat() if beat else "never"
    return (f"worker {worker} lost (last heartbeat {seen})",
            queue_state(besides=worker)["alive"])


def benchmark_run_recover_stale(*, stale_after_s: float | None = None,
                                max_attempts: int | None = None) -> list[int]:
    """Re-queue (resuming) or fail every running run whose heartbeat is older than
    ``stale_after_s`` (its worker died). Run by every worker and every web process, so it
    happens when no worker is left too: a re-queued run then waits, saying so, until a worker
    starts (the run pages say that no worker is alive). Safe to run from everywhere at once:
    each change is a conditional update that re-checks staleness. Announces ``run_requeued``
    or ``run_finished``. Returns the ids it changed."""
    from benchmarks.selectors import stale_cutoff

    max_attempts = max_attempts if max_attempts is not None else int(_setting(
        "GAIA_BENCH_MAX_ATTEMPTS", 2))
    cutoff = stale_cutoff(stale_after_s)
    # A replay's parts are recovered one by one (benchmarks.replay.runs).
    is_stale = Q(status=RUN_STATUS.RUNNING, kind=BenchmarkRun.Kind.MESH) & (
        Q(heartbeat_at__lt=cutoff) | Q(heartbeat_at__isnull=True))
    changed = []
    stale = BenchmarkRun.objects.filter(is_stale).values_list("pk", "attempts", "heartbeat_at",
                                                              "worker")
    for run_id, attempts, beat, worker in stale:
        lost, alive = lost_note(worker=worker, beat=beat)
        with transaction.atomic():
            # Still stale, same worker, same attempt: a conditional update, so two processes
            # checking at once change it once.
            match = BenchmarkRun.objects.filter(is_stale, pk=run_id, worker=worker,
                                                attempts=attempts)
            if attempts < max_attempts:
                note = f"{lost}; re-queued after attempt {attempts}" + (
                    "" if alive else f"; {NO_WORKER}: it waits until one starts")
                ok = match.update(status=RUN_STATUS.QUEUED, worker="", celery_task_id="",
                                  notes=Concat(F("notes"), Value(note + "\n"))) == 1
                if ok:
                    _announce_run("run_requeued", run_id)
                    transaction.on_commit(lambda rid=run_id: benchmark_run_dispatch(run_id=rid))
            else:
                ok = match.update(
                    status=RUN_STATUS.FAILED, finished_at=timezone.now(),
                    error=f"{lost} on attempt {attempts} of {max_attempts}; not retried"
                          + ("" if alive else f"; {NO_WORKER}")) == 1
                if ok:
                    _announce_run("run_finished", run_id)
        if ok:
            log.warning("benchmark run %s: stale heartbeat from %s recovered", run_id, worker)
            changed.append(run_id)
    if settings.REDIS_URL:
        # Queued runs whose message never reached the broker (it was away at submit time):
        # send them again. A duplicate message is harmless (the claim is conditional).
        unsent = BenchmarkRun.objects.filter(
            status=RUN_STATUS.QUEUED, celery_task_id="",
            queued_at__lt=timezone.now() - timedelta(seconds=5)).values_list("pk", flat=True)
        for run_id in unsent:
            benchmark_run_dispatch(run_id=run_id)
            changed.append(run_id)
    return changed
