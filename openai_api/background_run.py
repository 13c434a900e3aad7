"""Running a background response (``POST /v1/responses`` with ``background: true``): what
the Celery task (:mod:`openai_api.tasks`) or, without ``REDIS_URL``, the web process's
embedded worker calls with a response's id.

It claims the response (:func:`agents.services.background_response_claim`: a second delivery
does nothing), opens the turn through the one door as the HTTP path does
(:func:`agents.turns.turn_open`), renders it with the Responses dialect's own stream
(:meth:`openai_api.dialects.responses.Responses.frames`), keeps its events when the client
streams, beats while it runs (a cancel seen on a beat kills the turn), and records the response
object it ended with. In a web process it runs on the server's event loop (where the feed, a
kill and the in-memory channel layer see it as any other turn), as a benchmark turn does.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import socket
import time
from typing import Any

from django.conf import settings

from agents import services, turns
from agents.infra.background import embedded_worker
from agents.infra.database import run_db
from agents.kernel.exceptions import GaiaError
from agents.models import BackgroundResponse
from agents.outlet import realtime
from openai_api.dialects import responses
from openai_api.dialects.responses_output import ResponseEventStream

log = logging.getLogger("gaia.background")

HINTS = "_gaia"  # the request's own hints, kept beside its body: thread, session, user
TERMINAL = {"response.completed": "completed", "response.failed": "failed",
            "response.incomplete": "incomplete"}
FLUSH_SECONDS = 0.1


def split_frames(data: bytes) -> list[tuple[int, str, dict[str, Any]]]:
    """``(sequence_number, frame, payload)`` of each named SSE event in ``data`` (the
    Responses stream's frames: ``event: …\\ndata: {json}``, one JSON line each)."""
    out = []
    for frame in data.decode().split("\n\n"):
        line = next((x for x in frame.split("\n") if x.startswith("data: ")), None)
        if line is None:
            continue
        payload = json.loads(line[6:])
        out.append((int(payload["sequence_number"]), frame, payload))
    return out


class _Recorder:
    """The stream's events as they come: the last one (the response object it ends with),
    and, when the client streams, every one kept in batches (:data:`FLUSH_SECONDS`)."""

    def __init__(self, response_id: str, *, keep: bool) -> None:
        self.response_id = response_id
        self.keep = keep
        self.pending: list[tuple[int, str]] = []
        self.last: dict[str, Any] | None = None
        self.flushed = time.monotonic()

    async def add(self, data: bytes, *, cancelled: bool = False) -> None:
        for seq, frame, payload in split_frames(data):
            if cancelled and payload.get("type") in TERMINAL:
                payload["response"] = {**payload["response"], "status": "cancelled",
                                       "error": None}
                frame = f"event: {payload['type']}\ndata: " + json.dumps(
                    payload, ensure_ascii=False, separators=(",", ":"))
            self.last = payload
            if self.keep:
                self.pending.append((seq, frame))
        if self.pending and time.monotonic() - self.flushed >= FLUSH_SECONDS:
            await self.flush()

    async def flush(self) -> None:
        pending, self.pending = self.pending, []
        self.flushed = time.monotonic()
        if pending:
            await run_db(services.background_events_append, response_id=self.response_id,
                         frames=pending)


async def _beat(row: BackgroundResponse, turn: Any, state: dict[str, Any]) -> None:
    """Beat for the response while its turn runs; a cancel seen here kills the turn (the
    cancel's control message may have come before the turn was known on its thread)."""
    every = float(getattr(settings, "GAIA_BACKGROUND_HEARTBEAT_SECONDS", 1.0))
    while True:
        await asyncio.sleep(every)
        try:
            status = await run_db(services.background_response_beat, response_id=row.id,
                                  thread_id=state.get("thread"))
        except Exception:
            log.warning("background response %s: beat failed", row.id, exc_info=True)
            continue
        if status == BackgroundResponse.Status.CANCELLED and not state.get("cancelled"):
            state["cancelled"] = True
            getattr(turn, "leader", turn).kill()


async def background_response_run(row: BackgroundResponse) -> str:
    """Run the claimed response ``row`` to its end; returns the status it ended with."""
    dialect = responses.DIALECT
    data = dict(row.request)
    hints = data.pop(HINTS, None) or {}
    parsed = dialect.parse(data)
    parsed.request.user = parsed.request.user or hints.get("user")
    recorder = _Recorder(row.id, keep=row.stream)
    state: dict[str, Any] = {}
    try:
        key, target = await turns.authorize_stored(api_key=row.api_key, model=row.model)
        turn = await turns.turn_open(
            target=target, api_key=key, request=parsed.request, dialect=dialect.name,
            response_id=row.id, thread_id=hints.get("thread_id"),
            session_key=hints.get("session_key"),
            previous_response_id=parsed.previous_response_id,
            conversation_id=parsed.conversation_id)
    except GaiaError as exc:  # refused before any turn: failed, saying why
        stream = ResponseEventStream(response_id=row.id, model=row.model,
                                     echo=parsed.extra["echo"])
        await recorder.add(stream.failed(exc, None))
        return await _finish(row, recorder, error=exc.message)
    beat = asyncio.create_task(_beat(row, turn, state))
    try:
        frames = await dialect.frames(parsed, turn)
        await recorder.add(frames.start)
        try:
            first = await turn.first(wait=3600)
            state["thread"] = turn.thread_id
            async with contextlib.aclosing(turn.events(first, 3600)) as events:
                async for event in events:
                    if event is not turns.KEEPALIVE:
                        await recorder.add(frames.render(event))
            tail = frames.finish()
        except Exception as exc:
            with contextlib.suppress(Exception):
                state.setdefault("thread", turn.thread_id)
            tail = frames.fail(turns.as_gaia_error(exc))
            state["error"] = turns.as_gaia_error(exc).message
    finally:
        beat.cancel()
    # the last word: cancelled meanwhile (killed by the cancel's control message, or seen on
    # a beat), the stream ends with the response as cancelled
    status = await run_db(services.background_response_beat, response_id=row.id,
                          thread_id=state.get("thread"))
    await recorder.add(tail, cancelled=status == BackgroundResponse.Status.CANCELLED)
    return await _finish(row, recorder, error=state.get("error", ""))


async def _finish(row: BackgroundResponse, recorder: _Recorder, *, error: str) -> str:
    await recorder.flush()
    last = recorder.last or {}
    response = last.get("response") or {}
    status = TERMINAL.get(str(last.get("type")), "failed")
    return await run_db(services.background_response_finish, response_id=row.id,
                        status=status, response=response, error=error)


def worker_name() -> str:
    return f"{socket.gethostname()}:{os.getpid()}"


def background_response_execute(*, response_id: str, worker: str) -> str | None:
    """Claim and run ``response_id`` (from a worker's thread); ``None`` if it was not queued.
    In a web process the turn runs on the server's loop; elsewhere on a loop of its own."""
    row = services.background_response_claim(response_id=response_id, worker=worker)
    if row is None:
        log.info("background response %s not queued; nothing to do", response_id)
        return None
    coro = _guarded(row)
    serving = realtime.serving_loop()
    if serving is not None:
        return asyncio.run_coroutine_threadsafe(coro, serving).result()
    return realtime.run_and_flush(coro)


async def _guarded(row: BackgroundResponse) -> str:
    try:
        return await background_response_run(row)
    except Exception as exc:  # a bug: the response fails, saying so
        log.exception("background response %s failed", row.id)
        return await run_db(services.background_response_finish, response_id=row.id,
                            status=BackgroundResponse.Status.FAILED, response={},
                            error=f"worker error: {exc!r}")


# -- the embedded worker (no REDIS_URL) ----------------------------------------------------


def _poll() -> None:
    """Between jobs: responses whose worker died queued again, then the oldest queued (one
    made while no worker ran: the server restarted)."""
    from agents import selectors

    try:
        services.background_responses_recover_stale()
    except Exception:
        log.warning("background responses: stale check failed", exc_info=True)
    response_id = selectors.background_response_oldest_queued()
    if response_id is not None:
        background_response_execute(response_id=response_id,
                                    worker=worker_name() + ":embedded")


def embedded_start() -> None:
    """Start this web process's background-response worker when it has no Celery
    (no ``REDIS_URL``; ``GAIA_BACKGROUND_EMBEDDED=0`` switches it off)."""
    worker = embedded_worker(
        services.BACKGROUND_QUEUE, poll=_poll,
        poll_seconds=float(getattr(settings, "GAIA_BACKGROUND_POLL_SECONDS", 2.0)),
        enabled=lambda: not settings.REDIS_URL and bool(
            getattr(settings, "GAIA_BACKGROUND_EMBEDDED", True)))
    worker.wake()
