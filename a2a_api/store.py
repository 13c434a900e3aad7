"""A2A tasks in the database (called on a database thread: ``agents.infra.database.run_db``).

Every write that ends a task is conditional on it not having ended already, so a
``CancelTask`` from one process and the turn's own end in another cannot both win: whichever
comes first stays.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import Any

from django.db.models import F
from django.utils import timezone

from a2a_api.models import Task
from agents.models import Message, Thread
from agents.services import thread_kill

MAX_PAGE = 100


@dataclass(frozen=True)
class Snapshot:
    """A task as the protocol shows it: its row and, once stored, its reply."""

    task: Task
    reply: str


def _uuid(value: str) -> uuid.UUID | None:
    try:
        return uuid.UUID(str(value))
    except ValueError:
        return None


def task_insert(task: Task) -> None:
    task.save(force_insert=True)


def task_state_set(*, task_id: Any, state: str, reason: str = "",
                   usage: tuple[int, int] | None = None, now: Any = None) -> bool:
    """Move a task that has not ended to ``state``; whether it moved."""
    changes: dict[str, Any] = {"state": state, "updated_at": now or timezone.now()}
    if reason:
        changes["reason"] = reason
    if usage is not None:
        changes["input_tokens"], changes["output_tokens"] = usage
    return bool(Task.objects.filter(pk=task_id).exclude(state__in=Task.TERMINAL)
                .update(**changes))


def task_get(*, task_id: str, api_key: Any) -> Snapshot | None:
    """The key's task ``task_id`` with its reply; ``None`` for no such task of this key (another
    key's task reads as none)."""
    pk = _uuid(task_id)
    if pk is None:
        return None
    task = (Task.objects.select_related("agent", "thread")
            .filter(pk=pk, api_key=api_key).first())
    if task is None:
        return None
    return _snapshot(task)


def _snapshot(task: Task) -> Snapshot:
    reply = (Message.objects.filter(thread_id=task.thread_id, response_id=task.response_id,
                                    role=Message.Role.ASSISTANT)
             .order_by("-seq").values_list("content", "finish_reason").first())
    if reply is not None and not task.done and reply[1] in ENDED_ELSEWHERE:
        # its turn was recorded as ended by someone else than its runner: an operator's kill
        # seen first, or the process that ran it stopped (its lease's recovery recorded it)
        state, why = ENDED_ELSEWHERE[reply[1]]
        task_state_set(task_id=task.pk, state=state, reason=why)
        # only these: a whole refresh forgets the agent read with it (a query per use after)
        task.refresh_from_db(fields=["state", "reason", "updated_at"])
    return Snapshot(task, reply[0] if reply else "")


ENDED_ELSEWHERE = {
    "killed": (Task.State.CANCELED, "An operator stopped the task."),
    "interrupted": (Task.State.FAILED, "The server running this task stopped before it ended."),
}


def task_list(*, api_key: Any, agent: Any, context_id: str = "", state: str = "",
              page_size: int = 50, after: str = "") -> tuple[list[Snapshot], str, int]:
    """The key's tasks of ``agent``, newest first: ``(page, next page token, total)``."""
    rows = Task.objects.select_related("agent", "thread").filter(api_key=api_key, agent=agent)
    if context_id:
        pk = _uuid(context_id)
        rows = rows.filter(thread_id=pk) if pk else rows.none()
    if state:
        rows = rows.filter(state=state)
    total = rows.count()
    if after:
        anchor = Task.objects.filter(pk=_uuid(after) or uuid.uuid4()).values(
            "created_at", "pk").first()
        if anchor is None:
            rows = rows.none()
        else:
            rows = rows.filter(created_at__lte=anchor["created_at"]).exclude(
                created_at=anchor["created_at"], pk__gte=anchor["pk"])
    size = max(1, min(page_size or 50, MAX_PAGE))
    page = list(rows.order_by("-created_at", "-pk")[:size + 1])
    following = str(page[size - 1].pk) if len(page) > size else ""
    return [_snapshot(t) for t in page[:size]], following, total


def task_cancel(*, task_id: str, api_key: Any) -> tuple[Snapshot | None, bool]:
    """``(task, cancelled now)``: a task still running is marked canceled and its thread's turn
    stopped wherever it runs (the operators' kill, :func:`agents.services.thread_kill`)."""
    found = task_get(task_id=task_id, api_key=api_key)
    if found is None or found.task.done:
        return found, False
    task = found.task
    moved = task_state_set(task_id=task.pk, state=Task.State.CANCELED,
                           reason="Canceled by the client (CancelTask).")
    if moved:
        thread_kill(thread=task.thread)
    return task_get(task_id=task_id, api_key=api_key), moved


def thread_of_key(*, thread_id: str, api_key: Any) -> bool:
    pk = _uuid(thread_id)
    return pk is not None and Thread.objects.filter(pk=pk, api_key=api_key).exists()


def tokens_add(task_id: Any, usage: tuple[int, int]) -> None:
    Task.objects.filter(pk=task_id).update(input_tokens=F("input_tokens") + usage[0],
                                           output_tokens=F("output_tokens") + usage[1])
