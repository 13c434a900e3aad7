"""Writes of background responses (``POST /v1/responses`` with ``background: true``).

A response is created ``queued`` and handed to whoever runs background work
(:func:`agents.infra.background.background_dispatch`: a Celery worker with ``REDIS_URL``, the
web process's embedded worker without). The worker claims it with a conditional update (a
second delivery does nothing), beats while its turn runs, records the thread the turn used,
the events its stream produced (when the client streams) and how it ended. A cancel ends it
at once: a queued one never runs, a running one's turn is killed through the operator's kill
path (a control message every process hears; its worker also sees the status on its next
beat). A response whose worker stops beating is queued again (or failed after its last
attempt) by the periodic check every worker and web process runs.
"""

from __future__ import annotations

import logging
from datetime import timedelta
from typing import Any

from django.conf import settings
from django.db import transaction
from django.db.models import F
from django.db.models.functions import Now
from django.utils import timezone

from agents import selectors
from agents.infra.background import background_dispatch
from agents.kernel.exceptions import InvalidRequest, NotFound
from agents.models import ApiKey, BackgroundResponse, BackgroundResponseEvent
from agents.outlet import realtime
from agents.services.webhooks import webhook_event_send

log = logging.getLogger("gaia.background")

BACKGROUND_TASK = "openai_api.background_response_run"
BACKGROUND_QUEUE = "background"
Status = BackgroundResponse.Status


def _ended(response_id: str, status: str) -> None:
    """The webhooks' ``response.<status>`` for a response that has just ended (ids and its
    status, read once the ending is committed; no request, no reply text)."""
    if status not in BackgroundResponse.FINISHED:
        return

    def data() -> dict[str, Any]:
        row = BackgroundResponse.objects.filter(pk=response_id).values(
            "model", "thread_id", "error", "api_key__prefix").first() or {}
        return {"response_id": response_id, "status": status, "model": row.get("model"),
                "thread_id": str(row["thread_id"]) if row.get("thread_id") else None,
                "key": row.get("api_key__prefix"), "error": row.get("error") or None}

    webhook_event_send(type=f"response.{status}", data=data)


def _setting(name: str, default: float) -> float:
    return float(getattr(settings, name, default))


def _dispatch(response_id: str) -> None:
    try:
        background_dispatch(BACKGROUND_TASK, response_id, queue=BACKGROUND_QUEUE)
    except Exception:  # the broker is away: the periodic check sends it again
        log.warning("could not dispatch background response %s", response_id, exc_info=True)


@transaction.atomic
def background_response_create(*, response_id: str, api_key: ApiKey | None, model: str,
                               request: dict[str, Any], stream: bool) -> BackgroundResponse:
    """A new ``queued`` response, sent to a worker once it is committed."""
    row = BackgroundResponse(id=response_id, api_key=api_key, model=model[:200],
                             request=request, stream=stream)
    row.save(force_insert=True)
    transaction.on_commit(lambda: _dispatch(response_id))
    return row


def background_response_claim(*, response_id: str, worker: str) -> BackgroundResponse | None:
    """Take ``response_id`` to run it (``queued → in_progress``); ``None`` if it is not
    queued (taken, cancelled, finished or unknown)."""
    claimed = BackgroundResponse.objects.filter(pk=response_id, status=Status.QUEUED).update(
        status=Status.IN_PROGRESS, worker=worker[:200], attempts=F("attempts") + 1,
        started_at=Now(), heartbeat_at=Now())
    if not claimed:
        return None
    return BackgroundResponse.objects.select_related("api_key").get(pk=response_id)


def background_response_beat(*, response_id: str, thread_id: Any = None) -> str:
    """Its worker is alive (and, once known, the thread its turn uses); returns the status
    as stored now (``cancelled``: the client cancelled it)."""
    fields: dict[str, Any] = {"heartbeat_at": Now()}
    if thread_id is not None:
        fields["thread_id"] = thread_id
    BackgroundResponse.objects.filter(pk=response_id, status=Status.IN_PROGRESS).update(
        **fields)
    if thread_id is not None:  # cancelled meanwhile: the thread is still worth knowing
        BackgroundResponse.objects.filter(pk=response_id, thread_id__isnull=True).update(
            thread_id=thread_id)
    return BackgroundResponse.objects.filter(pk=response_id).values_list(
        "status", flat=True).first() or Status.CANCELLED


def background_response_finish(*, response_id: str, status: str, response: dict[str, Any],
                               error: str = "") -> str:
    """Record how the turn ended (``response``: the response object). A response cancelled
    meanwhile stays ``cancelled``, with what its turn had answered. Returns the status."""
    done = BackgroundResponse.objects.filter(pk=response_id, status=Status.IN_PROGRESS).update(
        status=status, response=response, error=error[:10_000], finished_at=Now())
    if done:
        _ended(response_id, status)
        return status
    BackgroundResponse.objects.filter(pk=response_id, status=Status.CANCELLED,
                                      response__isnull=True).update(
        response={**response, "status": Status.CANCELLED, "error": None})
    return Status.CANCELLED


@transaction.atomic
def background_response_cancel(*, response_id: str, api_key: ApiKey | None
                               ) -> BackgroundResponse:
    """Cancel ``response_id`` of ``api_key``: 404 if there is none, 400 if it has finished
    (a cancelled one is returned as it is). A running turn is killed wherever it runs."""
    found = selectors.background_response_get(response_id=response_id, api_key=api_key)
    if found is None:
        raise NotFound(f"No response found with id '{response_id}'.", param="response_id",
                       code="response_not_found")
    row = BackgroundResponse.objects.select_for_update().get(pk=found.pk)
    if row.status == Status.CANCELLED:
        return row
    if row.finished:
        raise InvalidRequest(f"Cannot cancel a response that is {row.status}: only a queued "
                             "or in-progress background response can be cancelled.",
                             param="response_id", code="response_already_finished")
    was = row.status
    row.status, row.finished_at = Status.CANCELLED, timezone.now()
    row.save(update_fields=["status", "finished_at"])
    _ended(row.pk, Status.CANCELLED)
    if was == Status.IN_PROGRESS and row.thread_id is not None:
        realtime.send_control_on_commit("turn_kill", thread_id=str(row.thread_id))
    return row


def background_events_append(*, response_id: str, frames: list[tuple[int, str]]) -> None:
    """Keep a streaming response's events (``(sequence_number, frame)``) for readers in any
    process: a Redis stream with ``REDIS_URL`` (expiring a day after its last event), the
    database otherwise; at most ``GAIA_BACKGROUND_MAX_EVENTS`` per response (the later ones
    are dropped but the last, which ends the stream)."""
    if not frames:
        return
    cap = int(_setting("GAIA_BACKGROUND_MAX_EVENTS", 20_000))
    kept = [f for f in frames if f[0] < cap - 1] or []
    if frames[-1][0] >= cap - 1:  # the end is always kept, as the last allowed number
        kept.append(frames[-1])
    client = selectors.background_redis()
    if client is not None:
        key = selectors.background_events_key(response_id)
        pipe = client.pipeline(transaction=False)
        for seq, frame in kept:
            pipe.xadd(key, {"seq": seq, "frame": frame}, id=f"{seq}-1")
        pipe.expire(key, int(_setting("GAIA_BACKGROUND_EVENTS_TTL", 86_400)))
        pipe.execute(raise_on_error=False)  # a repeated number (a retried attempt) is refused
        return
    existing = set(BackgroundResponseEvent.objects.filter(
        response_id=response_id, seq__in=[s for s, _ in kept]).values_list("seq", flat=True))
    BackgroundResponseEvent.objects.bulk_create(
        [BackgroundResponseEvent(response_id=response_id, seq=s, frame=f)
         for s, f in kept if s not in existing], ignore_conflicts=True)


def background_responses_recover_stale(*, stale_after_s: float | None = None,
                                       max_attempts: int | None = None) -> list[str]:
    """Queue again the responses whose worker stopped beating (it died), and send them to a
    worker; past ``GAIA_BACKGROUND_MAX_ATTEMPTS`` fail them instead. Safe from every
    process at once (conditional updates). Returns the ids queued again."""
    stale_after = stale_after_s if stale_after_s is not None else _setting(
        "GAIA_BACKGROUND_STALE_SECONDS", 30.0)
    attempts = max_attempts if max_attempts is not None else int(
        _setting("GAIA_BACKGROUND_MAX_ATTEMPTS", 2))
    cutoff = timezone.now() - timedelta(seconds=stale_after)
    requeued = []
    for response_id in selectors.background_responses_stale(cutoff=cutoff):
        stale = BackgroundResponse.objects.filter(pk=response_id, status=Status.IN_PROGRESS,
                                                  heartbeat_at__lt=cutoff)
        if stale.filter(attempts__lt=attempts).update(status=Status.QUEUED, worker=""):
            log.warning("background response %s: its worker stopped; queued again",
                        response_id)
            requeued.append(response_id)
            _dispatch(response_id)
        elif stale.update(status=Status.FAILED, finished_at=Now(),
                          error="Its worker stopped (attempts exhausted)."):
            log.warning("background response %s failed: its workers stopped", response_id)
            _ended(response_id, Status.FAILED)
    return requeued
