"""Schedules as staff read them (the schedules API, the admin)."""

from __future__ import annotations

from typing import Any

from django.db.models import QuerySet

from agents.kernel.exceptions import NotFound
from agents.models import Schedule
from agents.selectors.ordering import Ordering

SCHEDULE_ORDERING = Ordering(columns={"name": "name", "created_at": "created_at",
                                      "last_run_at": "last_run_at"}, default="name")


def schedule_list(*, enabled: bool | None = None, sort: str | None = None
                  ) -> QuerySet[Schedule]:
    rows = Schedule.objects.select_related("agent")
    if enabled is not None:
        rows = rows.filter(enabled=enabled)
    return SCHEDULE_ORDERING.apply(rows, sort)


def schedule_get(*, schedule_id: Any) -> Schedule:
    """The schedule ``schedule_id``; :class:`NotFound` (404) for any other id."""
    found = (Schedule.objects.select_related("agent", "periodic_task")
             .filter(pk=int(schedule_id)).first()
             if str(schedule_id).isdecimal() and len(str(schedule_id)) < 19 else None)
    if found is None:
        raise NotFound(f"No schedule {schedule_id}.", code="schedule_not_found")
    return found


def _iso(value: Any) -> str | None:
    return value.isoformat() if value is not None else None


def schedule_public(s: Schedule) -> dict[str, Any]:
    """A schedule as the API shows it."""
    return {"id": s.pk, "name": s.name, "enabled": s.enabled, "cron": s.cron,
            "timezone": s.timezone, "kind": s.kind,
            "agent": s.agent.slug if s.agent else None, "prompt": s.prompt,
            "thread": s.thread_mode, "suite": s.suite or None, "targets": list(s.targets or []),
            "thread_id": str(s.thread_id) if s.thread_id else None,
            "last_run_id": s.last_run_id, "last_status": s.last_status,
            "last_error": s.last_error, "last_run_at": _iso(s.last_run_at),
            "last_fired_for": _iso(s.last_fired_for), "run_count": s.run_count,
            "created_at": _iso(s.created_at), "updated_at": _iso(s.updated_at)}
