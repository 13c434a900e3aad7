"""Reads of background responses (``/v1/responses`` with ``background: true``) and of the
events their streams produced: a Redis stream per response when ``REDIS_URL`` is set (every
web process reads what any worker wrote), the database's rows otherwise."""

from __future__ import annotations

import threading
from typing import Any

from django.conf import settings

from agents.models import ApiKey, BackgroundResponse, BackgroundResponseEvent

_lock = threading.Lock()
_clients: dict[str, Any] = {}


def background_redis() -> Any | None:
    """This process's Redis client for background events (``None`` without ``REDIS_URL``)."""
    url = settings.REDIS_URL
    if not url:
        return None
    with _lock:
        client = _clients.get(url)
        if client is None:
            import redis

            client = _clients[url] = redis.Redis.from_url(url, socket_timeout=10)
    return client


def background_events_key(response_id: str) -> str:
    return f"gaia:background:{response_id}:events"


def background_response_get(*, response_id: str, api_key: ApiKey | None
                            ) -> BackgroundResponse | None:
    """The background response ``response_id`` of ``api_key`` (another key's is none; an
    id no response can have, such as one holding a NUL that PostgreSQL refuses, is none)."""
    if "\x00" in response_id or len(response_id) > 100:
        return None
    rows = BackgroundResponse.objects.filter(pk=response_id)
    rows = rows.filter(api_key=api_key) if api_key is not None else rows.filter(
        api_key__isnull=True)
    return rows.first()


def background_events_after(*, response_id: str, after: int, limit: int = 500
                            ) -> list[tuple[int, str]]:
    """``(sequence_number, frame)`` of the stored events after ``after``, in order."""
    client = background_redis()
    if client is not None:
        entries = client.xrange(background_events_key(response_id), min=f"{after + 1}-1"
                                if after >= 0 else "-", max="+", count=limit)
        return [(int(fields[b"seq"]), fields[b"frame"].decode()) for _, fields in entries]
    return list(BackgroundResponseEvent.objects.filter(response_id=response_id, seq__gt=after)
                .order_by("seq").values_list("seq", "frame")[:limit])


def background_responses_stale(*, cutoff: Any) -> list[str]:
    """Ids of the responses in progress whose worker's beat is older than ``cutoff``."""
    return list(BackgroundResponse.objects.filter(
        status=BackgroundResponse.Status.IN_PROGRESS, heartbeat_at__lt=cutoff)
        .values_list("pk", flat=True)[:100])


def background_response_oldest_queued() -> str | None:
    return (BackgroundResponse.objects.filter(status=BackgroundResponse.Status.QUEUED)
            .order_by("created_at").values_list("pk", flat=True).first())


def background_response_status(*, response_id: str) -> str | None:
    return BackgroundResponse.objects.filter(pk=response_id).values_list(
        "status", flat=True).first()
