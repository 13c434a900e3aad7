"""The one life of a benchmark run, whatever its kind (:mod:`benchmarks.registry`): every write
from submission to the end. Every change an operator can see is announced through
``agents.outlet.realtime`` after its transaction commits.

:func:`benchmark_run_save` (a kind's create made the run: ``queued``, its parts if any,
dispatched on commit to Celery or the embedded worker) -> :func:`benchmark_run_claim` (one
conditional update, so a redelivered message claims nothing; a run with parts is claimed part
by part, by as many workers as run, and the first claim starts the run) ->
:func:`benchmark_run_heartbeat` while the claim runs (it also says whether the run was
cancelled or taken over) -> :func:`benchmark_result_record` per item ->
:func:`benchmark_run_finish` (the last part to finish ends the run). :func:`benchmark_run_cancel`
and :func:`benchmark_run_resume` are the operator's; a claim whose worker died is recovered by
:mod:`.recovery`. What a kind adds is what it runs, what it records and how it sums up.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from django.conf import settings
from django.db import IntegrityError, transaction
from django.db.models import F, Value
from django.db.models.functions import Coalesce, Concat, Now
from django.utils import timezone

from agents.infra import metrics
from agents.infra.background import background_dispatch
from agents.kernel.exceptions import Conflict, InvalidRequest
from agents.models import ApiKey
from agents.outlet import realtime
from agents.services.audit import Actor, audit_record
from agents.services.webhooks import webhook_event_send
from benchmarks import events
from benchmarks.models import BenchmarkResult, BenchmarkRun, BenchmarkSuite, RunPart

log = logging.getLogger("gaia.benchmarks")

RUN_STATUS = BenchmarkRun.Status
RUN_TASK = "benchmarks.benchmark_run_execute"  # benchmarks.tasks
RUN_QUEUE = "benchmarks"  # its embedded worker: benchmarks.worker (configured by apps.ready)


def setting(name: str, default: float) -> float:
    return float(getattr(settings, name, default))


def announce_run(event_name: str, run_id: int) -> None:
    realtime.send_event_on_commit(lambda: events.run_changed(event_name, run_id))
    if event_name == "run_finished":
        webhook_event_send(type="run.finished", data=lambda: run_webhook_data(run_id))


def run_webhook_data(run_id: int) -> dict[str, Any]:
    """``run.finished``'s data: the run's ids and outcome (no questions, no answers)."""
    run = BenchmarkRun.objects.select_related("suite").get(pk=run_id)
    return {"run_id": run.pk, "kind": run.kind, "status": run.status,
            "suite": run.suite.name, "suite_id": run.suite_id,
            "error": run.error[:500] or None,
            "finished_at": run.finished_at.isoformat() if run.finished_at else None}


# ---------------------------------------------------------------------------------------------
# Submission


def run_selection(suite: BenchmarkSuite, limit: int | None,
                  indexes: list[int] | None) -> tuple[dict[str, Any], list[int]]:
    """The items of ``suite`` a run takes (all, the first ``limit``, or ``indexes``) as the
    run stores them: ``(selection, indexes)``; :class:`InvalidRequest` naming the bad field."""
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


def run_selection_again(run: BenchmarkRun) -> dict[str, Any]:
    """``run``'s selection as :func:`run_selection`'s arguments (``limit``, ``indexes``): what
    a new run with its settings takes."""
    sel = run.selection or {}
    return {"limit": sel.get("limit") if sel.get("mode") == "first" else None,
            "indexes": sel.get("indexes") if sel.get("mode") == "indexes" else None}


def benchmark_run_save(run: BenchmarkRun, *, submitted_by: ApiKey | None = None,
                       submitted_by_user: Any = None, parts: int = 0,
                       exclude: tuple[str, ...] = ()) -> BenchmarkRun:
    """Store the new queued ``run`` a kind's create built (inside its transaction): validated
    (:class:`InvalidRequest` naming the first bad field; ``exclude``: fields the kind does not
    use), with ``parts`` parts (0: the run is claimed whole), announced (``run_created``) and
    dispatched once the transaction commits. The kind itself was checked by the registry."""
    run.submitted_by = submitted_by
    run.submitted_by_user = submitted_by_user if getattr(submitted_by_user, "pk", None) else None
    try:
        run.full_clean(exclude=["kind", *exclude])
    except Exception as exc:  # ValidationError: name the first bad field
        name = next(iter(getattr(exc, "message_dict", {}) or {"run": None}))
        raise InvalidRequest(f"{name}: {exc}", param=name) from exc
    run.save()
    if parts:
        RunPart.objects.bulk_create([RunPart(run=run, index=i) for i in range(parts)])
    announce_run("run_created", run.pk)
    transaction.on_commit(lambda: benchmark_run_dispatch(run_id=run.pk))
    return run


def benchmark_run_dispatch(*, run_id: int) -> None:
    """Hand a queued run to whoever executes runs here (:mod:`agents.infra.background`): Celery
    workers with ``REDIS_URL``, else the server's embedded worker (never the request, never
    the event loop); one message per part waiting (each claims one)."""
    limit = BenchmarkRun.objects.filter(pk=run_id).values_list("time_limit_s", flat=True)
    hard = (limit[0] if limit else 3600.0) + 120.0
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


# ---------------------------------------------------------------------------------------------
# The operator's: cancel and resume


@transaction.atomic
def benchmark_run_cancel(*, run: BenchmarkRun, reason: str = "cancelled",
                         actor: Actor | None = None) -> BenchmarkRun:
    """Cancel a queued or running run. A queued run never starts; a running one is stopped by
    its workers at their next heartbeat (within about a second).

    Idempotent on a cancelled run; :class:`Conflict` on one that already finished."""
    changed = BenchmarkRun.objects.filter(
        pk=run.pk, status__in=[RUN_STATUS.QUEUED, RUN_STATUS.RUNNING]).update(
        status=RUN_STATUS.CANCELLED, finished_at=timezone.now(), error=reason)
    run.refresh_from_db()
    if changed:
        announce_run("run_finished", run.pk)
        audit_record(actor=actor, action="run_cancel", target=f"run:{run.pk}")
    elif run.status != RUN_STATUS.CANCELLED:
        raise Conflict(f"Run {run.pk} already {run.status}.", code="run_finished")
    return run


@transaction.atomic
def benchmark_run_resume(*, run: BenchmarkRun, by: str,
                         actor: Actor | None = None) -> BenchmarkRun:
    """Queue a cancelled or failed run again: what it recorded stays, the rest runs (its
    unfinished parts, or its unrecorded items). :class:`Conflict` for a run that is queued,
    running or succeeded."""
    resumable = [RUN_STATUS.CANCELLED, RUN_STATUS.FAILED]
    note = f"resumed by {by} at {timezone.now().isoformat()}\n"
    if not BenchmarkRun.objects.filter(pk=run.pk, status__in=resumable).update(
            status=RUN_STATUS.QUEUED, error="", finished_at=None, worker="",
            celery_task_id="", attempts=0, notes=Concat(F("notes"), Value(note))):
        run.refresh_from_db()
        raise Conflict(f"Run {run.pk} is {run.status}: only a cancelled or failed run "
                       "resumes.", code="run_not_resumable")
    RunPart.objects.filter(run=run).exclude(status=RunPart.Status.DONE).update(
        status=RunPart.Status.QUEUED, worker="", attempts=0)
    announce_run("run_created", run.pk)
    transaction.on_commit(lambda: benchmark_run_dispatch(run_id=run.pk))
    audit_record(actor=actor, action="run_resume", target=f"run:{run.pk}")
    run.refresh_from_db()
    return run


# ---------------------------------------------------------------------------------------------
# A worker's: claim, heartbeat, record, finish (benchmarks.executor and the kinds)


@dataclass
class Claim:
    """A worker's hold on a run: the whole run (``part`` is ``None``), or one of its parts."""

    run: BenchmarkRun
    worker: str
    part: RunPart | None = None


@dataclass
class Progress:
    packets: int = 0
    bytes: int = 0
    announced: tuple[int, int, int] | None = field(default=None)


@transaction.atomic
def benchmark_run_claim(*, run_id: int, worker: str, task_id: str = "") -> Claim | None:
    """Claim the run, or its next queued part, for this worker: ``None`` if there is nothing
    to claim (taken, cancelled, finished, or unknown), so a message delivered twice runs
    once. The first claim of a run starts it."""
    if RunPart.objects.filter(run_id=run_id).exists():
        return _part_claim(run_id=run_id, worker=worker)
    fields: dict[str, Any] = {
        "status": RUN_STATUS.RUNNING, "worker": worker, "heartbeat_at": Now(),
        "attempts": F("attempts") + 1, "started_at": Coalesce(F("started_at"), Now()),
    }
    if task_id:
        fields["celery_task_id"] = task_id
    if BenchmarkRun.objects.filter(pk=run_id, status=RUN_STATUS.QUEUED).update(**fields) != 1:
        return None
    announce_run("run_started", run_id)
    return Claim(run=BenchmarkRun.objects.select_related("suite").get(pk=run_id), worker=worker)


def _part_claim(*, run_id: int, worker: str) -> Claim | None:
    run = (BenchmarkRun.objects.select_for_update().select_related("suite")
           .filter(pk=run_id, status__in=[RUN_STATUS.QUEUED, RUN_STATUS.RUNNING]).first())
    if run is None:
        return None
    part = RunPart.objects.filter(run=run, status=RunPart.Status.QUEUED).order_by("index").first()
    if part is None:
        return None
    RunPart.objects.filter(pk=part.pk).update(status=RunPart.Status.RUNNING, worker=worker,
                                              heartbeat_at=Now(), attempts=F("attempts") + 1)
    if run.status == RUN_STATUS.QUEUED:
        BenchmarkRun.objects.filter(pk=run.pk).update(
            status=RUN_STATUS.RUNNING, worker=worker, heartbeat_at=Now(),
            attempts=F("attempts") + 1, started_at=run.started_at or timezone.now())
        announce_run("run_started", run.pk)
    part.refresh_from_db()
    return Claim(run=BenchmarkRun.objects.select_related("suite").get(pk=run.pk), worker=worker,
                 part=part)


def _whole(claim: Claim) -> Any:
    """The claimed whole run while it is still this worker's to run."""
    return BenchmarkRun.objects.filter(pk=claim.run.pk, status=RUN_STATUS.RUNNING,
                                       worker=claim.worker)


def _part(claim: Claim) -> Any:
    """The claimed part while it is still this worker's to run."""
    assert claim.part is not None
    return RunPart.objects.filter(pk=claim.part.pk, status=RunPart.Status.RUNNING,
                                  worker=claim.worker)


def benchmark_run_heartbeat(*, claim: Claim, progress: Progress) -> bool:
    """Renew the claim's heartbeat (and the whole run's packet and byte counts); ``False`` if
    it is no longer this worker's to run (the run was cancelled or ended, or the claim was
    recovered by another worker): the caller stops. Publishes ``run_progress`` when something
    changed (so at most once per heartbeat)."""
    run_id = claim.run.pk
    with transaction.atomic():
        if claim.part is None:
            ok = _whole(claim).update(heartbeat_at=Now(), packets=progress.packets,
                                      bytes=progress.bytes) == 1
        else:
            ok = bool(_part(claim).update(heartbeat_at=Now())) and bool(
                BenchmarkRun.objects.filter(pk=run_id, status=RUN_STATUS.RUNNING).update(
                    heartbeat_at=Now()))
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


def benchmark_result_record(*, claim: Claim, fields: dict[str, Any]) -> BenchmarkResult | None:
    """Store one finished item (a :class:`BenchmarkResult`'s ``fields``) and count it in the
    run's progress; ``None`` (nothing stored) if the claim is no longer this worker's. An item
    an earlier attempt recorded stays as it was."""
    run_id = claim.run.pk
    with transaction.atomic():
        if claim.part is None:
            if _whole(claim).select_for_update().first() is None:
                return None
        elif not _part(claim).filter(run__status=RUN_STATUS.RUNNING).exists():
            return None
        try:
            with transaction.atomic():
                result = BenchmarkResult.objects.create(run_id=run_id, **fields)
        except IntegrityError:  # recorded by an earlier attempt
            result = BenchmarkResult.objects.get(run_id=run_id,
                                                 question_index=fields["question_index"],
                                                 agent=fields.get("agent", ""))
        counted: dict[str, Any] = {
            "questions_done": BenchmarkResult.objects.filter(run_id=run_id).count()}
        if claim.part is None:
            counted["heartbeat_at"] = Now()
        BenchmarkRun.objects.filter(pk=run_id).update(**counted)
        realtime.send_event_on_commit(lambda: events.question_finished(result))
    metrics.BENCHMARK_CASES.labels(claim.run.kind, result.status).inc()
    return result


def benchmark_run_finish(*, claim: Claim, status: str, error: str = "",
                         summarize: Callable[[], dict[str, Any] | None] = lambda: None,
                         progress: Progress | None = None) -> bool:
    """End the claim: ``succeeded`` (a part: done, and the last part to be done ends the run)
    or ``failed`` (the run at once, saying why), with ``summarize()``'s summary. ``True`` if
    this call ended the run; ``False`` (nothing written) if the claim is no longer this
    worker's or other parts still run. With ``progress``, its final counts are published."""
    run_id = claim.run.pk
    with transaction.atomic():
        if claim.part is None:
            owned = _whole(claim)
        else:
            owned = BenchmarkRun.objects.filter(pk=run_id, status=RUN_STATUS.RUNNING)
            if status == RUN_STATUS.SUCCEEDED:
                run = BenchmarkRun.objects.select_for_update().get(pk=run_id)
                if not _part(claim).update(status=RunPart.Status.DONE, heartbeat_at=Now()):
                    return False
                if run.status != RUN_STATUS.RUNNING or run.parts.exclude(
                        status=RunPart.Status.DONE).exists():
                    return False
        counts = {"packets": progress.packets, "bytes": progress.bytes} if progress else {}
        done = owned.update(status=status, error=error, summary=summarize(),
                            finished_at=timezone.now(), heartbeat_at=Now(), **counts)
        if done:
            if progress is not None:  # the final counts, whatever the heartbeat last said
                run_done, total = BenchmarkRun.objects.filter(pk=run_id).values_list(
                    "questions_done", "questions_total").get()
                realtime.send_event_on_commit(events.run_progress(
                    run_id=run_id, status=status, questions_done=run_done,
                    questions_total=total, packets=progress.packets, bytes=progress.bytes))
            announce_run("run_finished", run_id)
    return bool(done)


def benchmark_run_summary_keep(*, run_id: int, summary: dict[str, Any] | None) -> None:
    """Keep the partial summary of a run cancelled mid-way (its status stays cancelled)."""
    BenchmarkRun.objects.filter(pk=run_id, status=RUN_STATUS.CANCELLED).update(summary=summary)


def benchmark_run_status(*, run_id: int) -> str:
    return BenchmarkRun.objects.filter(pk=run_id).values_list("status", flat=True).get()
