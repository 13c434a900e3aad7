"""The Celery tasks of schedules: the beat's firing (``agents.schedule_fire``: claim the tick,
hand the run on) and the run (``agents.schedule_run``: the turn or the replay, recorded).
Interfaces: they take ids and call the door. (The agents app's other tasks live with its
services: :mod:`agents.services.tasks`; these start turns, which services may not.)"""

from __future__ import annotations

import logging
from datetime import datetime

from celery import shared_task
from django.utils import timezone as dj_timezone

from agents import services, turns
from agents.infra.background import background_dispatch
from agents.models import Schedule

RUN_TIME_LIMIT = 3600 + 120  # a turn waits at most an hour for its first event
log = logging.getLogger("gaia.schedules")


@shared_task(name="agents.schedule_fire", ignore_result=True, acks_late=False)
def schedule_fire_task(schedule_id: int, tick: str | None = None) -> bool:
    """Fired by a beat for the schedule's tick (``tick``: its time, ISO 8601; default the
    newest the cron names at or before now). Claims the tick (another beat's firing of it
    does nothing) and queues its run. True: this firing runs it."""
    row = Schedule.objects.filter(pk=schedule_id).values("cron", "timezone").first()
    if row is None:
        return False
    at = (datetime.fromisoformat(tick) if tick
          else services.schedule_tick(cron=row["cron"], timezone=row["timezone"],
                                      now=dj_timezone.now()))
    claimed = at is not None and services.schedule_tick_claim(schedule_id=schedule_id, tick=at)
    log.info("schedule %s tick %s: %s", schedule_id, at.isoformat() if at else None,
             "claimed" if claimed else "claimed already (or disabled)")
    if not claimed:
        return False
    try:
        background_dispatch("agents.schedule_run", schedule_id, queue="schedules",
                            time_limit=RUN_TIME_LIMIT)
    except Exception as exc:  # the broker is away: the tick is claimed, say it did not run
        services.schedule_run_finish(schedule_id=schedule_id,
                                     error=f"Could not queue the run: {exc}")
    return True


@shared_task(name="agents.schedule_run", ignore_result=True, acks_late=False,
             time_limit=RUN_TIME_LIMIT)
def schedule_run_task(schedule_id: int) -> str:
    """Run a claimed tick of the schedule (its turn or replay) and record it."""
    return turns.schedule_run(schedule_id=schedule_id)
