"""Reads of the organism as a whole: its figures and the health of its components."""

from __future__ import annotations

import asyncio
import functools
import time
import uuid
import weakref
from typing import Any

from django.conf import settings
from django.db import connection
from django.db.models import Sum

from agents.infra.database import run_db
from agents.models import Agent, MessageTally, Thread
from agents.selectors.access import organism_state

_PROCESS_STARTED = time.monotonic()


def message_total() -> int:
    """How many messages are stored. Kept by triggers (MessageTally): one small read however
    many there are (COUNT(*) of a million took 13 ms on SQLite, 24 on PostgreSQL)."""
    return MessageTally.objects.aggregate(n=Sum("n"))["n"] or 0


def organism_info() -> dict[str, Any]:
    """Name, status (``running``/``stopped``, since when, by whom: ``POST
    /api/v1/organism/stop``), uptime (of this process), agent count, active threads, total
    messages."""
    state = organism_state().public()
    return {
        "name": settings.GAIA_ORGANISM_NAME,
        "status": state["state"],
        "status_since": state["since"],
        "status_by": state["by"],
        "uptime_seconds": int(time.monotonic() - _PROCESS_STARTED),
        "agent_count": Agent.objects.filter(enabled=True).count(),
        "active_threads": Thread.objects.filter(status__in=Thread.RUNNING).count(),
        "total_messages": message_total(),
        "mode": "redis" if settings.REDIS_URL else "single-process",
    }


def _database_check() -> dict[str, Any]:
    with connection.cursor() as cursor:
        cursor.execute("SELECT 1")
        cursor.fetchone()
    return {"organism": organism_state().public()}


async def _timed(check: Any) -> dict[str, Any]:
    t0 = time.perf_counter()
    try:
        async with asyncio.timeout(3):
            detail = await check()
    except Exception as exc:  # a failing component is reported, not raised
        return {"status": "error", "error": f"{type(exc).__name__}: {exc}"[:300]}
    out = {"status": "ok", "latency_ms": round((time.perf_counter() - t0) * 1000, 2)}
    if detail:
        out.update(detail)
    return out


async def _channel_layer_check() -> dict[str, Any]:
    from channels.layers import get_channel_layer

    layer = get_channel_layer()
    channel = await layer.new_channel()
    token = uuid.uuid4().hex
    await layer.send(channel, {"type": "health.ping", "token": token})
    message = await layer.receive(channel)
    if message.get("token") != token:
        raise RuntimeError("channel layer returned a different message")
    return {"backend": type(layer).__name__}


# One broker client per event loop, kept: a client made for every check looked up redis-py's
# version in the installed packages' metadata and connected anew, 35-60 ms of the event loop
# on a busy 2-core machine (py-spy, the stall tests' bystander polls of /health).
_brokers: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, Any] = (
    weakref.WeakKeyDictionary())


async def _broker_check() -> dict[str, Any]:
    if not settings.REDIS_URL:
        return {"mode": "eager (no broker: tasks run in-process)"}
    import redis.asyncio as aioredis

    loop, url = asyncio.get_running_loop(), settings.REDIS_URL
    kept = _brokers.get(loop)
    if kept is None or kept[0] != url:
        kept = _brokers[loop] = (url, aioredis.from_url(url))
    await kept[1].ping()
    return {"mode": "redis"}


async def health_report() -> dict[str, Any]:
    """Per-component checks; ``status`` is ``ok`` only when every required component is."""
    database, layer, broker = await asyncio.gather(
        _timed(functools.partial(run_db, _database_check)),
        _timed(_channel_layer_check),
        _timed(_broker_check),
    )
    checks = {"database": database, "channel_layer": layer, "broker": broker}
    ok = all(c["status"] == "ok" for c in checks.values())
    # Stopped by an operator the server is healthy (200), only not taking turns.
    organism = database.pop("organism", {"state": "unknown"})
    return {
        "status": "ok" if ok else "unavailable",
        "organism": organism,
        "checks": checks,
        "mode": "redis" if settings.REDIS_URL else "single-process",
    }
