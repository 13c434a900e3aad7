"""Schedules as staff manage them, and as the beat fires them.

A schedule owns a ``django_celery_beat`` :class:`PeriodicTask` (with a crontab of its own)
that fires the task ``agents.schedule_fire`` with its id; :func:`schedule_save` and
:func:`schedule_delete` change both in one transaction, so a beat (its database scheduler)
sees the schedule as it is. Any number of beats may fire the same tick: the task claims it with
:func:`schedule_tick_claim` (a conditional update), so one run happens per tick.

What a run does is the turn runtime's (:mod:`agents.turns.scheduled`: services start no
turns) or, for a replay, the runner the benchmarks app registers
(:func:`schedule_target_register`: the core knows no benchmarks app). However it ends,
:func:`schedule_run_finish` records it; a failure is announced by :func:`schedule_failed_signal`
alone (the feed's ``schedule_failed``).
"""

from __future__ import annotations

import json
import zoneinfo
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from celery.schedules import crontab
from django.db import transaction
from django.db.models import F, Q
from django.utils import timezone as dj_timezone
from django_celery_beat.models import CrontabSchedule, PeriodicTask

from agents.kernel.exceptions import InvalidRequest, NotFound
from agents.models import Agent, Schedule
from agents.outlet import events, realtime
from agents.services.audit import Actor, audit_record
from agents.services.webhooks import webhook_event_send

FIRE_TASK = "agents.schedule_fire"
RUN_TASK = "agents.schedule_run"
SCHEDULE_FIELDS = ("name", "enabled", "cron", "timezone", "kind", "agent", "prompt",
                   "thread_mode", "suite", "targets")
MAX_LOOKBACK_DAYS = 366 * 8  # "29 February, a Monday" recurs within 28 years; rarer is refused


@dataclass(frozen=True)
class ScheduleTarget:
    """How a kind of schedule other than an agent's turn is checked and started (registered by
    the app that owns it): ``check(suite=, targets=)`` raises :class:`InvalidRequest`;
    ``start(schedule=)`` queues the work and returns its run's id."""

    check: Callable[..., None]
    start: Callable[..., int]


_targets: dict[str, ScheduleTarget] = {}


def schedule_target_register(kind: str, *, check: Callable[..., None],
                             start: Callable[..., int]) -> None:
    _targets[kind] = ScheduleTarget(check=check, start=start)


# ---------------------------------------------------------------------------------------------
# Cron and ticks


def cron_parse(expression: str) -> crontab:
    """``expression`` (five fields: minute hour day-of-month month day-of-week) as Celery's
    crontab; raises :class:`InvalidRequest` naming ``cron``."""
    fields = str(expression or "").split()
    if len(fields) != 5:
        raise InvalidRequest("cron: five fields (minute hour day-of-month month day-of-week), "
                             f"got {len(fields)}.", param="cron", code="invalid_cron")
    minute, hour, dom, month, dow = fields
    for name, value in zip(("minute", "hour", "day_of_month", "month_of_year", "day_of_week"),
                           fields, strict=True):
        if len(value) > CrontabSchedule._meta.get_field(name).max_length:
            raise InvalidRequest(f"cron: the {name.replace('_', ' ')} field is too long.",
                                 param="cron", code="invalid_cron")
    try:
        return crontab(minute=minute, hour=hour, day_of_month=dom, month_of_year=month,
                       day_of_week=dow)
    except Exception as exc:  # celery's parser raises ValueError or its ParseException
        raise InvalidRequest(f"cron: {expression!r} does not parse ({exc}).", param="cron",
                             code="invalid_cron") from None


def timezone_parse(name: str) -> zoneinfo.ZoneInfo:
    try:
        if not name or name.startswith(("/", ".")):
            raise ValueError(name)
        return zoneinfo.ZoneInfo(name)
    except (zoneinfo.ZoneInfoNotFoundError, ValueError, OSError):
        raise InvalidRequest(f"timezone: {name!r} is not an IANA time zone.",
                             param="timezone", code="invalid_timezone") from None


def schedule_tick(*, cron: str, timezone: str, now: datetime | None = None) -> datetime | None:
    """The newest time at or before ``now`` that ``cron`` names in ``timezone`` (UTC, to the
    minute): the tick a firing is for, whichever beat fired it and however late. Days match
    as Celery's crontab matches them (day of month and day of week both)."""
    spec, tz = cron_parse(cron), timezone_parse(timezone)
    local = (now or dj_timezone.now()).astimezone(tz).replace(second=0, microsecond=0)
    day = local.date()
    for back in range(MAX_LOOKBACK_DAYS):
        d = day - timedelta(days=back)
        if (d.month in spec.month_of_year and d.day in spec.day_of_month
                and (d.weekday() + 1) % 7 in spec.day_of_week):
            for hour in sorted(spec.hour, reverse=True):
                if back == 0 and hour > local.hour:
                    continue
                for minute in sorted(spec.minute, reverse=True):
                    if back == 0 and hour == local.hour and minute > local.minute:
                        continue
                    at = datetime(d.year, d.month, d.day, hour, minute, tzinfo=tz)
                    return at.astimezone(UTC)
    return None


# ---------------------------------------------------------------------------------------------
# Staff: save and delete


def _checked(s: Schedule) -> None:
    if not s.name:
        raise InvalidRequest("name: required.", param="name")
    cron_parse(s.cron)
    timezone_parse(s.timezone)
    if s.kind == Schedule.Kind.AGENT:
        if s.agent_id is None:
            raise InvalidRequest("agent: the agent a schedule asks.", param="agent")
        if not s.prompt.strip():
            raise InvalidRequest("prompt: what the agent is asked.", param="prompt")
        if s.suite or s.targets:
            raise InvalidRequest("An agent's schedule has no suite or targets.", param="suite")
    else:
        target = _targets.get(s.kind)
        if target is None:
            raise InvalidRequest(f"kind: {s.kind!r} is not served here.", param="kind")
        if s.agent_id is not None or s.prompt:
            raise InvalidRequest("A replay schedule has targets, not an agent and a prompt.",
                                 param="agent")
        target.check(suite=s.suite, targets=s.targets)
    if Schedule.objects.filter(name=s.name).exclude(pk=s.pk).exists():
        raise InvalidRequest(f"A schedule named '{s.name}' exists.", param="name",
                             code="schedule_exists")


def _beat_sync(s: Schedule) -> None:
    """The schedule's periodic task and crontab, made or changed to match it."""
    minute, hour, dom, month, dow = s.cron.split()
    task = s.periodic_task
    cron = task.crontab if task is not None and task.crontab_id else CrontabSchedule()
    cron.minute, cron.hour, cron.day_of_month = minute, hour, dom
    cron.month_of_year, cron.day_of_week, cron.timezone = month, dow, s.timezone
    cron.save()
    if task is None:
        task = PeriodicTask(name=f"gaia-schedule-{s.pk}", task=FIRE_TASK,
                            args=json.dumps([s.pk]))
    task.crontab, task.enabled = cron, s.enabled
    task.description = f"Gaia schedule {s.name!r} (agents.Schedule {s.pk})"
    task.save()
    if s.periodic_task_id != task.pk:
        s.periodic_task = task
        s.save(update_fields=["periodic_task"])


def schedule_save(*, schedule: Schedule | None, fields: dict[str, Any], actor: Actor | None,
                  commit: bool = True) -> Schedule:
    """Create (``schedule=None``) or change a schedule, with its periodic task, audited.
    ``fields``: the model's, ``agent`` a slug, ``thread`` for ``thread_mode``. Raises
    :class:`InvalidRequest` naming the field (``cron``, ``timezone``, ``agent``...)."""
    creating = schedule is None
    s = schedule or Schedule()
    before = {f: getattr(s, "agent_id" if f == "agent" else f) for f in SCHEDULE_FIELDS}
    if not creating and fields.get("kind", s.kind) != s.kind:
        # a schedule turned into the other kind leaves the old kind's target behind
        others = ({"agent": None, "prompt": ""} if fields["kind"] != Schedule.Kind.AGENT
                  else {"suite": "", "targets": []})
        fields = {**others, **fields}
    for name, value in fields.items():
        if name == "agent":
            s.agent = _agent_named(value) if value not in (None, "") else None
        elif name == "thread":
            s.thread_mode = value
        elif name in SCHEDULE_FIELDS:
            setattr(s, name, value if value is not None else
                    ([] if name == "targets" else ""))
    _checked(s)
    if not commit:
        return s
    with transaction.atomic():
        if not creating and s.thread_mode != before["thread_mode"]:
            s.thread = None  # a new mode starts from a new thread
        s.save()
        _beat_sync(s)
        after = {f: getattr(s, "agent_id" if f == "agent" else f) for f in SCHEDULE_FIELDS}
        changed = sorted(k for k, v in after.items() if creating or before.get(k) != v)
        audit_record(actor=actor, action="schedule_create" if creating else "schedule_update",
                     target=f"schedule:{s.name}", detail={"changed": changed})
    return s


def schedule_delete(*, schedule: Schedule, actor: Actor | None) -> None:
    """Delete the schedule and its periodic task and crontab (a beat stops firing it)."""
    with transaction.atomic():
        name, task = schedule.name, schedule.periodic_task
        schedule.delete()
        if task is not None:
            cron_id = task.crontab_id
            task.delete()
            CrontabSchedule.objects.filter(pk=cron_id, periodictask__isnull=True).delete()
        audit_record(actor=actor, action="schedule_delete", target=f"schedule:{name}")


def _agent_named(slug: str) -> Agent:
    found = Agent.objects.filter(slug=slug).first()
    if found is None:
        raise InvalidRequest(f"agent: no agent {slug!r}.", param="agent",
                             code="agent_not_found")
    return found


# ---------------------------------------------------------------------------------------------
# The beat's: claim a tick, record a run


def schedule_tick_claim(*, schedule_id: int, tick: datetime) -> bool:
    """Claim ``tick`` for the schedule: True for exactly one caller however many beats fired
    it (a conditional update moving ``last_fired_for`` forward); False if it was claimed,
    the schedule is disabled or gone."""
    got = Schedule.objects.filter(
        Q(last_fired_for__isnull=True) | Q(last_fired_for__lt=tick), pk=schedule_id,
        enabled=True,
    ).update(last_fired_for=tick, last_status=Schedule.Status.RUNNING,
             last_run_at=dj_timezone.now(), run_count=F("run_count") + 1,
             updated_at=dj_timezone.now())
    return got == 1


def schedule_run_finish(*, schedule_id: int, error: str = "", thread_id: Any = None,
                        run_id: int | None = None) -> None:
    """Record how a run ended: ``ok``, or ``failed`` with ``error`` (announced by
    :func:`schedule_failed_signal`); the thread or replay run it made, if any."""
    values: dict[str, Any] = {"last_status": Schedule.Status.FAILED if error
                              else Schedule.Status.OK, "last_error": error[:2000],
                              "updated_at": dj_timezone.now()}
    if thread_id is not None:
        values["thread_id"] = thread_id
    if run_id is not None:
        values["last_run_id"] = run_id
    with transaction.atomic():
        Schedule.objects.filter(pk=schedule_id).update(**values)
        if error:
            schedule = Schedule.objects.filter(pk=schedule_id).first()
            if schedule is not None:
                schedule_failed_signal(schedule=schedule, error=error)


def schedule_failed_signal(*, schedule: Schedule, error: str) -> None:
    """The one place a schedule's failure leaves Gaia: the feed's ``schedule_failed`` and
    the webhooks' ``schedule.failed`` (the same fields: ids, the tick and the error), after
    the transaction commits."""
    event = events.schedule_failed(schedule, error=error)
    realtime.send_event_on_commit(event)
    webhook_event_send(type="schedule.failed", data={
        k: v for k, v in event.items() if k not in ("event", "timestamp")})


def schedule_replay_start(*, schedule: Schedule) -> int:
    """Queue the replay run a replay schedule makes (its registered runner); its id."""
    target = _targets.get(schedule.kind)
    if target is None:
        raise NotFound(f"No runner for {schedule.kind!r} schedules here.", param="kind")
    return target.start(schedule=schedule)
