"""Server-sent events: a turn's events as one dialect's event stream.

A dialect describes its stream with :class:`Frames` (how it opens, renders each canonical
event, fills silences, finishes, fails after the first byte and ends); :func:`sse_stream`
drives a turn through them. The response is built before the provider's first token arrives
(setting up its headers is most of a response's cost) and its body attached once the turn's
first event is known (:func:`sse_response`, :func:`sse_stream`). Under ASGI the body is an
async generator: a sync iterator would be buffered whole (STYLE.md, "Async").
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from django.http import StreamingHttpResponse

from agents import turns
from agents.kernel.exceptions import GaiaError

SSE_HEADERS = {"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}


def sse_data(payload: Any) -> bytes:
    return b"data: " + json.dumps(payload, ensure_ascii=False, separators=(",", ":")).encode() + (
        b"\n\n"
    )


def sse_event(name: str, payload: Any) -> bytes:
    body = json.dumps(payload, ensure_ascii=False, separators=(",", ":"))
    return f"event: {name}\ndata: {body}\n\n".encode()


SSE_DONE = b"data: [DONE]\n\n"
SSE_KEEPALIVE = b": keepalive\n\n"


@dataclass
class Frames:
    """One dialect's stream of one reply."""

    start: bytes  # opens the stream (sent with the first frame)
    render: Callable[[Any], bytes]  # a canonical event as frames, or b""
    finish: Callable[[], bytes]  # closes a complete reply
    fail: Callable[[GaiaError], bytes]  # an error after the first byte, in-band
    keepalive: bytes = SSE_KEEPALIVE  # fills the backend's silences
    done: bytes = b""  # the very last bytes (``data: [DONE]``), whatever happened


def sse_response() -> StreamingHttpResponse:
    """An event-stream response without its body yet: built while the provider works on
    the first token rather than after it, and discarded if the turn fails before any
    output."""
    return StreamingHttpResponse((), content_type="text/event-stream", headers=SSE_HEADERS)


def sse_stream(response: StreamingHttpResponse, turn: turns.TurnLike, first: Any,
               keepalive: float, frames: Frames) -> StreamingHttpResponse:
    """``response`` with ``turn``'s events (``first`` and the rest) as its body, and the
    turn's reply headers."""
    response.streaming_content = _body(turn, first, keepalive, frames)
    for name, value in turn_headers(turn).items():
        response[name] = value
    return response


def turn_headers(turn: turns.TurnLike) -> dict[str, str]:
    """A reply's headers: the turn's own (thread, provider...) and the hosted tools it left
    out (``X-Gaia-Dropped-Tools``: agents.tools.hosted)."""
    return {**turn.reply_headers(), **turn.spec.hosted.headers()}


async def _body(turn: turns.TurnLike, first: Any, keepalive: float, frames: Frames) -> Any:
    """The stream's bytes. After the first byte an error becomes ``frames.fail``'s in-band
    frame. A client that goes away cancels the turn (``turn.events`` records it) and gets
    nothing more."""
    head = frames.start  # sent with the first frame: one write less before the first token
    try:
        async with contextlib.aclosing(turn.events(first, keepalive)) as events:
            async for event in events:
                frame = frames.keepalive if event is turns.KEEPALIVE else frames.render(event)
                if frame:
                    yield head + frame
                    head = b""
        tail = frames.finish()
    except asyncio.CancelledError:
        raise
    except Exception as exc:  # after the first byte errors go in-band
        tail = frames.fail(turns.as_gaia_error(exc))
    if head + tail + frames.done:
        yield head + tail + frames.done
