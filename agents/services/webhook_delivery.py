"""How a webhook delivery is sent: claimed by a conditional update (a redelivered task
message does nothing), signed by the Standard Webhooks library (``standardwebhooks``: the
``webhook-id``, ``webhook-timestamp`` and ``webhook-signature`` headers), POSTed within
``GAIA_WEBHOOK_TIMEOUT_SECONDS`` for the whole exchange, logged attempt by attempt, and
retried after each of ``GAIA_WEBHOOK_RETRY_SECONDS`` until one succeeds (a 2xx answer).

A Celery worker sends them when ``REDIS_URL`` is set (a retry is the task sent again with a
countdown); without, this process's embedded worker (``webhooks`` queue; a retry waits on a
timer, and as deliveries are scheduled the worker also looks, at most every
``GAIA_WEBHOOK_POLL_SECONDS``, for any left due by a process that stopped)."""

from __future__ import annotations

import asyncio
import json
import logging
import threading
import time
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

import httpx
from django.conf import settings
from django.db import transaction
from django.db.models import F, Q
from django.utils import timezone
from standardwebhooks import Webhook

from agents.infra.background import background_dispatch, embedded_worker
from agents.models import WEBHOOK_RESPONSE_CHARS, WebhookAttempt, WebhookDelivery
from agents.selectors.urls import url_parsed
from agents.selectors.webhooks import webhook_url_refusal

log = logging.getLogger("gaia.webhooks")

DELIVERY_TASK = "agents.webhook_delivery_attempt"  # agents.services.tasks
DELIVERY_QUEUE = "webhooks"
USER_AGENT = "Gaia-Webhooks/1"
_READ_BYTES = 4 * WEBHOOK_RESPONSE_CHARS
State = WebhookDelivery.State
_swept = float("-inf")  # when this process last looked for deliveries due (embedded worker)


def webhook_retry_delays() -> list[float]:
    """Seconds between a failed attempt and the next (``GAIA_WEBHOOK_RETRY_SECONDS``): a
    delivery has ``len(...) + 1`` attempts in all."""
    return [max(0.0, float(s)) for s in settings.GAIA_WEBHOOK_RETRY_SECONDS]


def webhook_delivery_schedule(*, delivery_id: int, delay: float) -> None:
    """Have ``delivery_id`` attempted in ``delay`` seconds, by a Celery worker (Redis) or
    this process's embedded worker. A broker that cannot be reached leaves the delivery
    pending (logged; a redelivery sends it)."""
    timeout = settings.GAIA_WEBHOOK_TIMEOUT_SECONDS
    if settings.REDIS_URL:
        try:
            background_dispatch(DELIVERY_TASK, delivery_id, countdown=max(0.0, delay),
                                time_limit=int(timeout) + 60)
        except Exception:
            log.exception("webhooks: delivery %s could not be queued", delivery_id)
        return
    global _swept
    if time.monotonic() - _swept >= settings.GAIA_WEBHOOK_POLL_SECONDS:
        # Deliveries left due: looked for as webhooks are sent, never by an idle process.
        _swept = time.monotonic()
        embedded_worker(DELIVERY_QUEUE).submit(webhook_deliveries_due_send)
    if delay <= 0:
        background_dispatch(DELIVERY_TASK, delivery_id, queue=DELIVERY_QUEUE)
        return
    timer = threading.Timer(delay, background_dispatch, (DELIVERY_TASK, delivery_id),
                            {"queue": DELIVERY_QUEUE})
    timer.daemon = True
    timer.start()


def webhook_deliveries_due_send() -> None:
    """Attempt every delivery whose time has come (a timer lost with a process that stopped,
    an attempt whose process died while sending): the embedded worker's sweep."""
    now = timezone.now()
    due = WebhookDelivery.objects.filter(
        Q(state=State.PENDING, next_attempt_at__lte=now)
        | Q(state=State.SENDING, claimed_at__lt=now - _lease())).values_list(
        "pk", flat=True).order_by("next_attempt_at")[:100]
    for pk in list(due):
        webhook_delivery_attempt(delivery_id=pk, early=False)


def _lease() -> timedelta:
    """How long an attempt may hold its delivery before another may take it over."""
    return timedelta(seconds=settings.GAIA_WEBHOOK_TIMEOUT_SECONDS + 60)


@dataclass
class Outcome:
    status_code: int | None = None
    latency_ms: int = 0
    response: str = ""
    error: str = ""

    @property
    def ok(self) -> bool:
        return not self.error and self.status_code is not None and \
            200 <= self.status_code < 300


def webhook_delivery_attempt(*, delivery_id: int, early: bool = True) -> str | None:
    """Attempt one delivery, if it is due and nobody else is sending it (a conditional
    update claims it); log the attempt; schedule the next one or end the delivery. Returns
    the delivery's state after, ``None`` if it was not claimed. Called before its time
    (``early``: a task that came early), it is scheduled again for then."""
    now = timezone.now()
    claimed = WebhookDelivery.objects.filter(
        Q(state=State.PENDING, next_attempt_at__lte=now)
        | Q(state=State.SENDING, claimed_at__lt=now - _lease()), pk=delivery_id,
    ).update(state=State.SENDING, attempts=F("attempts") + 1, claimed_at=now)
    if not claimed:
        due = WebhookDelivery.objects.filter(pk=delivery_id, state=State.PENDING).values_list(
            "next_attempt_at", flat=True).first()
        if early and due is not None and due > now:
            webhook_delivery_schedule(delivery_id=delivery_id,
                                      delay=(due - now).total_seconds())
        return None
    delivery = WebhookDelivery.objects.select_related("endpoint").get(pk=delivery_id)
    endpoint = delivery.endpoint
    if endpoint.enabled:
        outcome = _send(url=endpoint.url, secret=endpoint.secret, message_id=delivery.event_id,
                        payload=delivery.payload)
    else:
        outcome = Outcome(error="the endpoint is disabled: not sent")
    return _record(delivery, outcome, started=now, final=not endpoint.enabled)


def _record(delivery: WebhookDelivery, outcome: Outcome, *, started: datetime,
            final: bool) -> str:
    delays = webhook_retry_delays()
    failures = delivery.attempts  # automatic attempts so far, this one included
    if outcome.ok:
        state, delay = State.SUCCEEDED, None
    elif delivery.retrying and not final and failures <= len(delays):
        state, delay = State.PENDING, delays[failures - 1]
    else:
        state, delay = State.FAILED, None
    next_at = timezone.now() + timedelta(seconds=delay) if delay is not None else None
    with transaction.atomic():
        if not WebhookDelivery.objects.filter(pk=delivery.pk).exists():
            return "deleted"  # its endpoint was deleted meanwhile
        WebhookAttempt.objects.create(
            delivery=delivery, number=delivery.attempts, manual=not delivery.retrying,
            started_at=started, status_code=outcome.status_code,
            latency_ms=outcome.latency_ms, response=outcome.response, error=outcome.error)
        WebhookDelivery.objects.filter(pk=delivery.pk, state=State.SENDING).update(
            state=state, status_code=outcome.status_code, latency_ms=outcome.latency_ms,
            response=outcome.response, error=outcome.error, next_attempt_at=next_at,
            claimed_at=None, updated_at=timezone.now())
        if delay is not None:
            pk = delivery.pk
            transaction.on_commit(lambda: webhook_delivery_schedule(delivery_id=pk, delay=delay))
    if not outcome.ok:
        log.info("webhooks: delivery %s (%s) attempt %s failed: %s", delivery.pk,
                 delivery.event_id, delivery.attempts, outcome.error)
    return state


def webhook_body(payload: dict) -> str:
    """The bytes sent (as text): the stored payload as compact JSON, keys sorted."""
    return json.dumps(payload, sort_keys=True, separators=(",", ":"))


def _send(*, url: str, secret: str, message_id: str, payload: dict) -> Outcome:
    timeout = settings.GAIA_WEBHOOK_TIMEOUT_SECONDS
    body = webhook_body(payload)
    at = datetime.now(UTC)
    headers = {
        "content-type": "application/json",
        "user-agent": USER_AGENT,
        "webhook-id": message_id,
        "webhook-timestamp": str(int(at.timestamp())),
        "webhook-signature": Webhook(secret).sign(msg_id=message_id, timestamp=at, data=body),
    }
    out = Outcome()
    start = time.monotonic()
    try:
        out.status_code, out.response = asyncio.run(_post(url, headers, body, timeout))
        if not out.ok:
            out.error = f"the receiver answered {out.status_code}"
    except TimeoutError:
        out.error = (f"no answer within {timeout:g} s (GAIA_WEBHOOK_TIMEOUT_SECONDS): the "
                     "attempt timed out")
    except _Refused as exc:
        out.error = str(exc)
    except httpx.HTTPError as exc:
        out.error = f"{type(exc).__name__}: {exc}"[:500] if str(exc) else type(exc).__name__
    except Exception as exc:  # noqa: BLE001 - recorded on the attempt, never raised
        out.error = f"{type(exc).__name__}: {exc}"[:500]
    out.latency_ms = int((time.monotonic() - start) * 1000)
    return out


class _Refused(Exception):
    pass


async def _post(url: str, headers: dict[str, str], body: str,
                seconds: float) -> tuple[int, str]:
    """POST within ``seconds`` for everything (resolving the host, connecting,
    sending, the answer's first bytes): a receiver that hangs cannot hold the worker."""
    async with asyncio.timeout(seconds):
        parsed = url_parsed(url)
        addresses: list[str] = []
        host = parsed.host.strip("[]")
        try:
            infos = await asyncio.get_running_loop().getaddrinfo(host, parsed.port)
            addresses = [str(info[4][0]) for info in infos]
        except OSError as exc:
            raise _Refused(f"the host {parsed.host} could not be resolved: {exc}") from None
        why = webhook_url_refusal(parsed, addresses=addresses)
        if why is not None:
            raise _Refused(why)
        async with httpx.AsyncClient(timeout=seconds, follow_redirects=False,
                                     trust_env=False) as client, \
                client.stream("POST", url, content=body.encode(), headers=headers) as answer:
            read = b""
            async for chunk in answer.aiter_bytes():
                read += chunk
                if len(read) >= _READ_BYTES:
                    break
            return answer.status_code, read.decode("utf-8", "replace")[:WEBHOOK_RESPONSE_CHARS]
