"""Background responses over HTTP: ``POST /v1/responses`` with ``background: true`` (answered
at once, ``queued``; a worker runs the turn: :mod:`openai_api.background_run`),
``GET /v1/responses/{id}`` (poll; ``?stream=true&starting_after=N`` resumes its stream from
any web process) and ``POST /v1/responses/{id}/cancel``. Every read and write is the key's
own: another key's response is not found."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator
from typing import Any

from django.conf import settings
from django.http import HttpRequest, HttpResponse, StreamingHttpResponse

from agents import selectors, services, turns
from agents.infra.database import run_db
from agents.kernel.exceptions import GaiaError, InvalidRequest, NotFound
from agents.models import ApiKey, BackgroundResponse
from openai_api.background_run import HINTS, TERMINAL, split_frames
from openai_api.dialects import responses
from openai_api.dialects.base import Parsed
from openai_api.sse import SSE_DONE, SSE_HEADERS, SSE_KEEPALIVE

FOLLOW_SECONDS = 0.1  # how often a follower looks for new events


def _json(payload: Any, headers: dict[str, str] | None = None) -> HttpResponse:
    return HttpResponse(json.dumps(payload, ensure_ascii=False, separators=(",", ":")),
                        content_type="application/json", headers=headers)


async def response_create(*, data: dict[str, Any], parsed: Parsed, key: ApiKey | None,
                          target: Any, hints: dict[str, Any]) -> HttpResponse:
    """Store the request as a ``queued`` response for a worker and answer with it (or, with
    ``stream: true``, with its stream as the worker produces it)."""
    if parsed.body.store is False:
        raise InvalidRequest("Background responses are stored: 'store' must not be false "
                             "with 'background': true.", param="store", code="invalid_value")
    response_id = responses.DIALECT.new_id()
    model = target if isinstance(target, str) else target.slug
    row = await run_db(services.background_response_create, response_id=response_id,
                       api_key=key, model=model, request={**data, HINTS: hints},
                       stream=parsed.stream)
    if parsed.stream:
        return _stream(response_id, after=-1)
    return _json(render(row, parsed))


def render(row: BackgroundResponse, parsed: Parsed | None = None) -> dict[str, Any]:
    """The response object of ``row`` as it stands: the one its turn ended with, else its
    request's settings with its status."""
    if row.response:
        return {**row.response, "status": row.status, "background": True}
    if parsed is None:
        data = {k: v for k, v in row.request.items() if k != HINTS}
        parsed = responses.DIALECT.parse(data)
    error = GaiaError(row.error, code="server_error") \
        if row.status == BackgroundResponse.Status.FAILED and row.error else None
    return responses.render_response(
        response_id=row.id, model=row.model, created_at=int(row.created_at.timestamp()),
        status=row.status, output=[], usage=None,
        echo={**parsed.extra["echo"], "background": True}, error=error)


def _headers(row: BackgroundResponse) -> dict[str, str]:
    return {"X-Gaia-Thread-Id": str(row.thread_id)} if row.thread_id else {}


async def response_retrieve(request: HttpRequest, *, response_id: str, key: ApiKey | None
                            ) -> HttpResponse | None:
    """``GET /v1/responses/{id}`` of a background response (``None``: it is not one)."""
    row = await run_db(selectors.background_response_get, response_id=response_id,
                       api_key=key)
    if row is None:
        return None
    if request.GET.get("stream") not in ("true", "1", "True"):
        return _json(render(row), _headers(row))
    if not row.stream:
        raise InvalidRequest("This response was not created with 'stream': true; its events "
                             "were not kept.", param="stream", code="invalid_value")
    return _stream(row.id, after=_starting_after(request))


def _starting_after(request: HttpRequest) -> int:
    raw = request.GET.get("starting_after")
    if raw in (None, ""):
        return -1
    try:
        value = int(raw)
    except ValueError:
        value = -2
    if value < -1:
        raise InvalidRequest("'starting_after' must be a sequence number (an integer, 0 or "
                             "more).", param="starting_after", code="invalid_value")
    return value


async def response_cancel(*, response_id: str, key: ApiKey | None) -> HttpResponse:
    """``POST /v1/responses/{id}/cancel``: 404 unknown (or another key's, or not a background
    response), 400 finished."""
    try:
        row = await run_db(services.background_response_cancel, response_id=response_id,
                           api_key=key)
    except NotFound:
        if await turns.stored_reply(response_id=response_id, api_key=key) is None:
            raise
        raise InvalidRequest("Only a response created with 'background': true can be "
                             "cancelled.", param="response_id", code="invalid_value") from None
    return _json(render(row), _headers(row))


def _stream(response_id: str, *, after: int) -> StreamingHttpResponse:
    return StreamingHttpResponse(_follow(response_id, after), content_type="text/event-stream",
                                 headers=SSE_HEADERS)


async def _follow(response_id: str, after: int) -> AsyncIterator[bytes]:
    """The stored events after ``after``, then each as it is stored, until the stream's last
    (or the response ended without one: cancelled while queued, its workers gone)."""
    keepalive = settings.GAIA_KEEPALIVE_SECONDS
    quiet_since = time.monotonic()
    ended = False
    while True:
        rows = await run_db(selectors.background_events_after, response_id=response_id,
                            after=after)
        if rows:
            quiet_since = time.monotonic()
            out = []
            for seq, frame in rows:
                after = seq
                out.append(frame.encode() + b"\n\n")
                if any(p.get("type") in TERMINAL for _, _, p in split_frames(frame.encode())):
                    yield b"".join(out) + SSE_DONE
                    return
            yield b"".join(out)
            continue
        if ended:  # one more read after the end was seen: nothing came
            yield SSE_DONE
            return
        status = await run_db(selectors.background_response_status, response_id=response_id)
        ended = status is None or status in BackgroundResponse.FINISHED
        if not ended:
            await asyncio.sleep(FOLLOW_SECONDS)
            if time.monotonic() - quiet_since >= keepalive:
                quiet_since = time.monotonic()
                yield SSE_KEEPALIVE
