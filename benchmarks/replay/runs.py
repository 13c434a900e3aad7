"""Writes of replay runs: a conversation suite's cases replayed against agents.

A replay run is a benchmark run (``kind = replay``): the same queue, workers, statuses, feed
events, cancel, resume and time limit. Its work is items (case x target agent), split into
``parallel`` parts (:class:`RunPart`: the items at positions ``index``, ``index + parts``...)
that workers claim, heartbeat and finish one by one, so a replay of 10,000 conversations is
shared by as many workers as run. The run's life: :func:`replay_run_create` (``queued``, its
parts ``queued``, one task per part dispatched on commit) -> :func:`replay_part_claim` (the
first claim makes the run ``running``) -> :func:`replay_part_heartbeat` while the part runs ->
:func:`replay_result_record` per item -> :func:`replay_part_finish` (the last part to finish
writes the summary and ends the run). A part whose worker died is re-queued by
:func:`replay_parts_recover_stale` (the same check, and limit on attempts, as runs).
"""

from __future__ import annotations

import logging
from typing import Any

from django.db import IntegrityError, transaction
from django.db.models import Exists, F, OuterRef, Q, Value
from django.db.models.functions import Concat, Now
from django.utils import timezone

from agents import realtime
from agents.exceptions import Conflict, InvalidRequest
from agents.models import Agent, ApiKey, Team
from agents.services.audit import Actor, audit_record
from benchmarks import events
from benchmarks.models import BenchmarkResult, BenchmarkRun, BenchmarkSuite, RunPart
from benchmarks.services import (
    NO_WORKER,
    _announce_run,
    _resolve_indexes,
    _setting,
    benchmark_run_dispatch,
    lost_note,
)

log = logging.getLogger("gaia.benchmarks")

RUN_STATUS = BenchmarkRun.Status
MAX_AGENTS = 8
MAX_ITEMS = 100_000


def _target_check(target: Any, param: str) -> str:
    if not isinstance(target, str) or not target:
        raise InvalidRequest(f"{param}: an agent's slug, 'auto' or 'team/<slug>'.", param=param)
    if target == "auto":
        return target
    if target.startswith("team/"):
        if not Team.objects.filter(slug=target[5:]).exists():
            raise InvalidRequest(f"{param}: no team {target[5:]!r}.", param=param,
                                 code="team_not_found")
        return target
    if not Agent.objects.filter(slug=target, enabled=True).exists():
        raise InvalidRequest(f"{param}: no enabled agent {target!r}.", param=param,
                             code="agent_not_found")
    return target


@transaction.atomic
def replay_run_create(
    *, suite: BenchmarkSuite, agents: list[str], judge: str | None = None,
    limit: int | None = None, indexes: list[int] | None = None, parallel: int = 1,
    concurrency: int = 4, question_timeout_s: float = 120.0, time_limit_s: float = 3600.0,
    submitted_by: ApiKey | None = None, submitted_by_user: Any = None,
) -> BenchmarkRun:
    """Queue a replay of ``suite`` (a conversation suite) against ``agents``; raises
    :class:`InvalidRequest` naming the bad field."""
    if suite.kind != BenchmarkSuite.Kind.CONVERSATIONS:
        raise InvalidRequest(f"Suite {suite.label} holds HotpotQA questions: replay a "
                             "conversation suite, or run the mesh on this one.", param="suite")
    if not isinstance(agents, list) or not agents:
        raise InvalidRequest("agents: one or more agents to replay against.", param="agents")
    if len(agents) > MAX_AGENTS:
        raise InvalidRequest(f"agents: at most {MAX_AGENTS}.", param="agents")
    targets = [_target_check(a, f"agents[{i}]") for i, a in enumerate(agents)]
    if len(set(targets)) != len(targets):
        raise InvalidRequest("agents: a target named twice.", param="agents")
    if judge:
        _target_check(judge, "judge")
        if judge in ("auto",) or judge.startswith("team/"):
            raise InvalidRequest("judge: an agent's slug.", param="judge")
    selection, chosen = _resolve_indexes(suite, limit, indexes)
    if len(chosen) * len(targets) > MAX_ITEMS:
        raise InvalidRequest(f"At most {MAX_ITEMS} replayed turns a run.", param="agents")
    run = BenchmarkRun(
        kind=BenchmarkRun.Kind.REPLAY, suite=suite, selection=selection,
        question_indexes=chosen, protocol="replay", tools={}, agents=targets,
        judge=judge or "", parallel=parallel, concurrency=concurrency,
        question_timeout_s=question_timeout_s, time_limit_s=time_limit_s,
        submitted_by=submitted_by,
        submitted_by_user=submitted_by_user if getattr(submitted_by_user, "pk", None) else None,
        questions_total=len(chosen) * len(targets))
    try:
        run.full_clean(exclude=["tools"])  # a replay has targets, not mesh roles
    except Exception as exc:  # ValidationError: name the first bad field
        field = next(iter(getattr(exc, "message_dict", {}) or {"run": None}))
        raise InvalidRequest(f"{field}: {exc}", param=field) from exc
    run.save()
    RunPart.objects.bulk_create([RunPart(run=run, index=i)
                                 for i in range(min(parallel, max(1, run.questions_total)))])
    _announce_run("run_created", run.pk)
    transaction.on_commit(lambda: benchmark_run_dispatch(run_id=run.pk))
    return run


def items(run: BenchmarkRun) -> list[tuple[int, str]]:
    """The run's items in order: each chosen case for each target."""
    return [(index, agent) for index in run.question_indexes for agent in run.agents]


def part_items(run: BenchmarkRun, part: int) -> list[tuple[int, str]]:
    parts = run.parts.count() or 1
    return items(run)[part::parts]


@transaction.atomic
def replay_part_claim(*, run_id: int, worker: str
                      ) -> tuple[BenchmarkRun, RunPart] | None:
    """Claim a queued part of a queued or running replay: ``None`` when there is none (all
    taken or done, or the run was cancelled or ended). The first claim starts the run."""
    run = (BenchmarkRun.objects.select_for_update().select_related("suite")
           .filter(pk=run_id, kind=BenchmarkRun.Kind.REPLAY,
                   status__in=[RUN_STATUS.QUEUED, RUN_STATUS.RUNNING]).first())
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
        _announce_run("run_started", run.pk)
    run.refresh_from_db()
    part.refresh_from_db()
    return run, part


def replay_part_heartbeat(*, run_id: int, part_id: int, worker: str,
                          announced: list[int]) -> bool:
    """Renew the part's and the run's heartbeat; ``False`` when the part is no longer this
    worker's to run (the run was cancelled or ended, the part recovered by another worker).
    Publishes ``run_progress`` when the count moved (``announced`` holds the last one)."""
    with transaction.atomic():
        if not RunPart.objects.filter(pk=part_id, status=RunPart.Status.RUNNING,
                                      worker=worker).update(heartbeat_at=Now()):
            return False
        if not BenchmarkRun.objects.filter(pk=run_id, status=RUN_STATUS.RUNNING).update(
                heartbeat_at=Now()):
            return False
        done, total = BenchmarkRun.objects.filter(pk=run_id).values_list(
            "questions_done", "questions_total").get()
        if announced[0] != done:
            announced[0] = done
            realtime.send_event_on_commit(events.run_progress(
                run_id=run_id, status=RUN_STATUS.RUNNING, questions_done=done,
                questions_total=total, packets=0, bytes=0))
    return True


def replay_result_record(*, run_id: int, part_id: int, worker: str,
                         fields: dict[str, Any]) -> BenchmarkResult | None:
    """Store one replayed item and count it; ``None`` when the part is no longer this
    worker's (nothing stored)."""
    with transaction.atomic():
        if not RunPart.objects.filter(pk=part_id, status=RunPart.Status.RUNNING,
                                      worker=worker, run__status=RUN_STATUS.RUNNING).exists():
            return None
        try:
            with transaction.atomic():
                result = BenchmarkResult.objects.create(run_id=run_id, **fields)
        except IntegrityError:  # recorded by an earlier attempt of this part
            result = BenchmarkResult.objects.get(run_id=run_id,
                                                 question_index=fields["question_index"],
                                                 agent=fields["agent"])
        BenchmarkRun.objects.filter(pk=run_id).update(
            questions_done=BenchmarkResult.objects.filter(run_id=run_id).count())
        realtime.send_event_on_commit(lambda: events.question_finished(result))
    return result


def replay_part_finish(*, run_id: int, part_id: int, worker: str,
                       summarize: Any) -> str | None:
    """Mark the part done; the last part of the run writes ``summarize()``'s summary and ends
    it ``succeeded``. Returns the run's status if this call ended it, else ``None``."""
    with transaction.atomic():
        run = BenchmarkRun.objects.select_for_update().get(pk=run_id)
        if not RunPart.objects.filter(pk=part_id, status=RunPart.Status.RUNNING,
                                      worker=worker).update(status=RunPart.Status.DONE,
                                                            heartbeat_at=Now()):
            return None
        if run.status != RUN_STATUS.RUNNING or run.parts.exclude(
                status=RunPart.Status.DONE).exists():
            return None
        summary = summarize()
        BenchmarkRun.objects.filter(pk=run_id).update(
            status=RUN_STATUS.SUCCEEDED, summary=summary, finished_at=timezone.now(),
            heartbeat_at=Now())
        done, total = BenchmarkRun.objects.filter(pk=run_id).values_list(
            "questions_done", "questions_total").get()
        realtime.send_event_on_commit(events.run_progress(
            run_id=run_id, status=RUN_STATUS.SUCCEEDED, questions_done=done,
            questions_total=total, packets=0, bytes=0))
        _announce_run("run_finished", run_id)
    return RUN_STATUS.SUCCEEDED


def replay_run_fail(*, run_id: int, error: str, summary: dict[str, Any] | None) -> bool:
    """End a running replay ``failed`` (its time limit passed), keeping the partial summary."""
    with transaction.atomic():
        done = BenchmarkRun.objects.filter(pk=run_id, status=RUN_STATUS.RUNNING).update(
            status=RUN_STATUS.FAILED, error=error, summary=summary,
            finished_at=timezone.now())
        if done:
            _announce_run("run_finished", run_id)
    return bool(done)


def replay_summary_keep(*, run_id: int, summary: dict[str, Any]) -> None:
    """Keep the partial summary of a replay that was cancelled (its status stays)."""
    BenchmarkRun.objects.filter(pk=run_id, status=RUN_STATUS.CANCELLED).update(summary=summary)


@transaction.atomic
def benchmark_run_resume(*, run: BenchmarkRun, by: str,
                         actor: Actor | None = None) -> BenchmarkRun:
    """Queue a cancelled or failed run again: what it recorded stays, the rest runs (a
    replay's unfinished parts, a mesh run's unrecorded questions). :class:`Conflict` for a
    run that is queued, running or succeeded."""
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
    _announce_run("run_created", run.pk)
    transaction.on_commit(lambda: benchmark_run_dispatch(run_id=run.pk))
    audit_record(actor=actor, action="run_resume", target=f"run:{run.pk}")
    run.refresh_from_db()
    return run


def replay_parts_recover_stale(*, stale_after_s: float | None = None,
                               max_attempts: int | None = None) -> list[int]:
    """Re-queue (or, past ``max_attempts``, fail the run of) every running part whose
    heartbeat is older than ``stale_after_s``: its worker died. A run left with no part
    running goes back to ``queued`` (it waits for a worker, as a new run does). Conditional
    updates, so every worker and web process may check at once. Announces ``run_requeued``
    or ``run_finished``; returns the runs it changed."""
    from benchmarks.selectors import stale_cutoff

    max_attempts = max_attempts if max_attempts is not None else int(_setting(
        "GAIA_BENCH_MAX_ATTEMPTS", 2))
    cutoff = stale_cutoff(stale_after_s)
    is_stale = Q(status=RunPart.Status.RUNNING) & (Q(heartbeat_at__lt=cutoff)
                                                   | Q(heartbeat_at__isnull=True))
    changed = []
    for part_id, run_id, attempts, worker, beat in RunPart.objects.filter(
            is_stale, run__status=RUN_STATUS.RUNNING).values_list(
            "pk", "run_id", "attempts", "worker", "heartbeat_at"):
        lost, alive = lost_note(worker=worker, beat=beat)
        with transaction.atomic():
            match = RunPart.objects.filter(is_stale, pk=part_id, worker=worker,
                                           attempts=attempts)
            if attempts < max_attempts:
                ok = match.update(status=RunPart.Status.QUEUED, worker="") == 1
                if ok:
                    note = f"part {lost}; re-queued after attempt {attempts}" + (
                        "" if alive else f"; {NO_WORKER}: it waits until one starts")
                    BenchmarkRun.objects.filter(pk=run_id).update(
                        notes=Concat(F("notes"), Value(note + "\n")))
                    running = RunPart.objects.filter(run_id=OuterRef("pk"),
                                                     status=RunPart.Status.RUNNING)
                    BenchmarkRun.objects.filter(~Exists(running), pk=run_id,
                                                status=RUN_STATUS.RUNNING).update(
                        status=RUN_STATUS.QUEUED, worker="")
                    _announce_run("run_requeued", run_id)
                    transaction.on_commit(lambda rid=run_id: benchmark_run_dispatch(
                        run_id=rid))
            else:
                ok = match.update(status=RunPart.Status.DONE) == 1 and bool(
                    BenchmarkRun.objects.filter(pk=run_id, status=RUN_STATUS.RUNNING).update(
                        status=RUN_STATUS.FAILED, finished_at=timezone.now(),
                        error=f"{lost} on attempt {attempts} of {max_attempts}; not "
                              "retried" + ("" if alive else f"; {NO_WORKER}")))
                if ok:
                    _announce_run("run_finished", run_id)
        if ok:
            log.warning("replay run %s: part %s of worker %s recovered", run_id, part_id, worker)
            changed.append(run_id)
    return changed
