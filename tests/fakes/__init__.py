"""Fake LLM upstream servers that speak real protocols over real HTTP on loopback.

Two servers share this core: :class:`tests.fakes.openai_upstream.FakeOpenAIUpstream` (Chat
Completions, ``/v1/chat/completions``) and
:class:`tests.fakes.anthropic_upstream.FakeAnthropicUpstream` (Messages, ``/v1/messages``).
Each is a raw ASGI app served by uvicorn in a background thread, bound to port 0::

    with FakeOpenAIUpstream(tokens=8) as up:          # or up.start() / up.stop()
        up.script(Reply(text="Hello there"), Fail(429, headers={"Retry-After": "7"}))
        ...  # point a client at up.base_url
        assert up.requests[0].body["stream_options"] == {"include_usage": True}
        up.wait_disconnects(1)                          # the client closed mid-stream

Every request pops the next scripted action; with none left it gets the default reply
(``tokens`` lorem words, ``ttft_ms`` before the first token, ``token_delay_ms`` between
tokens). Actions:

* :class:`Reply`: a completion (``text`` and/or ``tool_calls``), JSON or SSE as asked.
* :class:`Fail`: an HTTP error before any output, or (``after_tokens=n``) an in-stream
  error event after ``n`` tokens.
* :class:`Hang`: no answer for ``seconds`` (before the headers, or after ``after_tokens``).
* :class:`Drop`: the connection is cut after ``after_tokens`` tokens (no final chunk).
* :class:`Raw`: an event stream of exactly the given bytes (OpenAI routes only).

Each request is recorded in :attr:`FakeUpstream.requests` (method, path, headers, JSON body,
and whether it ``completed`` or the client ``disconnected`` first); :attr:`disconnects` counts
the requests whose client closed the connection before the reply was complete.

Both modules also run as scripts (``python tests/fakes/openai_upstream.py --port 9100
--tokens 32 --token-delay-ms 5 --ttft-ms 0``) for manual and performance runs.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import json
import re
import socket
import threading
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import Any

__all__ = [
    "Drop",
    "Fail",
    "FakeUpstream",
    "Hang",
    "Raw",
    "RecordedRequest",
    "Reply",
    "ToolCallSpec",
    "split_tokens",
]

WORDS = (
    "lorem ipsum dolor sit amet consectetur adipiscing elit sed do eiusmod tempor "
    "incididunt ut labore et dolore magna aliqua ut enim ad minim veniam quis"
).split()

_TOKEN = re.compile(r"\s*\S+|\s+")
_dumps = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False).encode


def split_tokens(text: str) -> list[str]:
    """The fake tokenizer: whitespace-delimited words, each keeping its leading space."""
    return _TOKEN.findall(text)


def lorem(n: int) -> str:
    return "".join(WORDS[i % len(WORDS)] if i == 0 else " " + WORDS[i % len(WORDS)]
                   for i in range(n))


def estimate_tokens(text: str) -> int:
    return max(1, len(text) // 4) if text else 0


# -- scripted actions -----------------------------------------------------------------------


@dataclass
class ToolCallSpec:
    """A tool call the fake model makes; ``arguments`` is JSON text, streamed in ``chunks``."""

    name: str
    arguments: str = "{}"
    id: str | None = None
    chunks: int = 2


@dataclass
class Reply:
    """A completion. ``text=None`` and no tool calls: ``tokens`` (default: the server's) lorem
    words. ``finish_reason`` defaults to the protocol's natural one (stop/end_turn, or the
    tool-call reason when ``tool_calls`` are set; length when ``max_tokens`` cuts it short).
    ``usage=(input, output)`` overrides the counted usage; ``usage=False`` omits it."""

    text: str | None = None
    tokens: int | None = None
    tool_calls: list[ToolCallSpec] = field(default_factory=list)
    finish_reason: str | None = None
    usage: tuple[int, int] | bool | None = None
    ttft_ms: float | None = None
    token_delay_ms: float | None = None
    reasoning: str | None = None


@dataclass
class Fail:
    """An upstream error: HTTP ``status`` before any output (with ``headers``, e.g.
    ``{"Retry-After": "7"}``), or with ``after_tokens`` set, that many tokens then an in-stream
    error event (SSE only; a JSON request gets the HTTP error)."""

    status: int = 500
    message: str = "The fake upstream failed as scripted."
    headers: dict[str, str] = field(default_factory=dict)
    after_tokens: int | None = None
    error_type: str | None = None


@dataclass
class Hang:
    """No answer for ``seconds``: before the response headers, or after ``after_tokens``."""

    seconds: float = 3600.0
    after_tokens: int | None = None


@dataclass
class Drop:
    """Cut the connection after ``after_tokens`` streamed tokens, without a final chunk."""

    after_tokens: int = 1


@dataclass
class Raw:
    """A 200 event stream of exactly these bytes (malformed chunks, huge lines...)."""

    body: bytes = b""


Action = Reply | Fail | Hang | Drop | Raw


@dataclass
class RecordedRequest:
    method: str
    path: str
    headers: dict[str, str]
    body: Any
    started_at: float = field(default_factory=time.monotonic)
    completed: bool = False
    disconnected: bool = False
    action: Any = None
    client: tuple[str, int] | None = None  # the client's address: one per TCP connection

    @property
    def stream(self) -> bool:
        return isinstance(self.body, dict) and bool(self.body.get("stream"))


class _DropConnection(Exception):  # noqa: N818 - raised to make uvicorn cut the connection
    pass


@dataclass
class Exchange:
    """What a protocol handler gets: the request, its action and helpers to answer."""

    upstream: FakeUpstream
    record: RecordedRequest
    action: Any
    send: Callable[[dict[str, Any]], Any]

    async def json(self, status: int, payload: Any, headers: dict[str, str] | None = None
                   ) -> None:
        body = _dumps(payload).encode()
        hdrs = [(b"content-type", b"application/json"),
                (b"content-length", str(len(body)).encode())]
        hdrs += [(k.lower().encode(), str(v).encode()) for k, v in (headers or {}).items()]
        await self.send({"type": "http.response.start", "status": status, "headers": hdrs})
        await self.send({"type": "http.response.body", "body": body})

    async def sse(self, frames: AsyncIterator[bytes]) -> None:
        await self.send({
            "type": "http.response.start", "status": 200,
            "headers": [(b"content-type", b"text/event-stream"), (b"cache-control", b"no-cache")],
        })
        async for frame in frames:
            await self.send({"type": "http.response.body", "body": frame, "more_body": True})
        await self.send({"type": "http.response.body", "body": b""})


class FakeUpstream:
    """The server core: lifecycle, routing, recording, scripting. Subclasses add routes."""

    #: path prefix clients put in their base URL (OpenAI SDKs take ``.../v1``)
    base_path = ""

    def __init__(
        self,
        *,
        tokens: int = 16,
        token_delay_ms: float = 0.0,
        ttft_ms: float = 0.0,
        api_key: str | None = None,
        model: str = "fake-model",
        host: str = "127.0.0.1",
        port: int = 0,
        log_level: str = "critical",
    ) -> None:
        self.tokens = tokens
        self.token_delay_ms = token_delay_ms
        self.ttft_ms = ttft_ms
        self.api_key = api_key
        self.model = model
        self.host = host
        self.log_level = log_level
        self.requests: list[RecordedRequest] = []
        self._script: collections.deque[Action] = collections.deque()
        self._lock = threading.Condition()
        self._sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._sock.bind((host, port))
        self.port: int = self._sock.getsockname()[1]
        self._server: Any = None
        self._thread: threading.Thread | None = None
        self.routes: dict[tuple[str, str], Callable[[Exchange], Any]] = {}

    # -- lifecycle --------------------------------------------------------------------------

    @property
    def url(self) -> str:
        """``http://host:port`` (no path)."""
        return f"http://{self.host}:{self.port}"

    @property
    def base_url(self) -> str:
        """What a client SDK takes as its base URL."""
        return self.url + self.base_path

    def start(self) -> FakeUpstream:
        import uvicorn

        config = uvicorn.Config(
            self, log_level=self.log_level, lifespan="off", access_log=False,
            timeout_graceful_shutdown=1,
        )
        self._server = uvicorn.Server(config)
        self._thread = threading.Thread(
            target=self._server.run, kwargs={"sockets": [self._sock]}, daemon=True,
            name=f"{type(self).__name__}:{self.port}",
        )
        self._thread.start()
        deadline = time.monotonic() + 10
        while not self._server.started:
            if time.monotonic() > deadline or not self._thread.is_alive():
                raise RuntimeError("the fake upstream did not start")
            time.sleep(0.005)
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.should_exit = True
            self._server.force_exit = True
        if self._thread is not None:
            self._thread.join(timeout=5)
        self._sock.close()

    def __enter__(self) -> FakeUpstream:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def serve_forever(self) -> None:
        """Run in the foreground (script mode) until interrupted."""
        import uvicorn

        config = uvicorn.Config(self, log_level=self.log_level, lifespan="off",
                                access_log=False)
        uvicorn.Server(config).run(sockets=[self._sock])

    # -- scripting and inspection -----------------------------------------------------------

    def script(self, *actions: Action) -> FakeUpstream:
        """Queue actions for the next requests, one per request, in order."""
        with self._lock:
            self._script.extend(actions)
        return self

    def reset(self) -> None:
        with self._lock:
            self._script.clear()
            self.requests.clear()

    @property
    def disconnects(self) -> int:
        """Requests whose client closed the connection before the reply was complete."""
        return sum(1 for r in self.requests if r.disconnected)

    @property
    def last(self) -> RecordedRequest:
        return self.requests[-1]

    def wait_for(self, predicate: Callable[[], bool], timeout: float = 5.0) -> bool:
        """Block until ``predicate()`` holds (checked on every request event) or timeout."""
        with self._lock:
            return self._lock.wait_for(predicate, timeout=timeout)

    def wait_disconnects(self, n: int = 1, timeout: float = 5.0) -> bool:
        return self.wait_for(lambda: self.disconnects >= n, timeout)

    async def await_disconnects(self, n: int = 1, timeout: float = 5.0) -> bool:
        """:meth:`wait_disconnects` for async tests (does not block the event loop)."""
        return await asyncio.to_thread(self.wait_disconnects, n, timeout)

    async def await_settled(self, record: RecordedRequest, timeout: float = 5.0) -> bool:
        """Wait until the server has recorded how ``record`` ended: its handler finishes
        after the client may already have read the last byte of the reply."""
        return await asyncio.to_thread(
            self.wait_for, lambda: record.completed or record.disconnected, timeout)

    def _notify(self) -> None:
        with self._lock:
            self._lock.notify_all()

    def _next_action(self) -> Action:
        with self._lock:
            return self._script.popleft() if self._script else Reply()

    # -- helpers for protocol handlers ------------------------------------------------------

    def plan_text(self, reply: Reply, body: dict[str, Any]) -> tuple[list[str], bool]:
        """The reply's tokens, cut at the request's max tokens: ``(tokens, truncated)``."""
        text = reply.text if reply.text is not None else (
            "" if reply.tool_calls else lorem(reply.tokens or self.tokens))
        tokens = split_tokens(text)
        limit = body.get("max_completion_tokens", body.get("max_tokens"))
        if isinstance(limit, int) and not isinstance(limit, bool) and 0 < limit < len(tokens):
            return tokens[:limit], True
        return tokens, False

    def delays(self, action: Any) -> tuple[float, float]:
        ttft = getattr(action, "ttft_ms", None)
        gap = getattr(action, "token_delay_ms", None)
        return ((self.ttft_ms if ttft is None else ttft) / 1000,
                (self.token_delay_ms if gap is None else gap) / 1000)

    async def pace(self, i: int, action: Any) -> None:
        """Sleep before token ``i`` per the timing model (ttft before 0, delay between)."""
        ttft, gap = self.delays(action)
        wait = ttft if i == 0 else gap
        if wait > 0:
            await asyncio.sleep(wait)

    def check_auth(self, headers: dict[str, str]) -> bool:
        return True

    async def unauthorized(self, ex: Exchange) -> None:
        raise NotImplementedError

    # -- ASGI -------------------------------------------------------------------------------

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return
        chunks = []
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                return
            chunks.append(message.get("body", b""))
            if not message.get("more_body"):
                break
        raw = b"".join(chunks)
        try:
            body = json.loads(raw) if raw else None
        except ValueError:
            body = raw.decode("utf-8", "replace")
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope["headers"]}
        record = RecordedRequest(scope["method"], scope["path"], headers, body,
                                 client=tuple(scope["client"]) if scope.get("client") else None)
        handler = self.routes.get((scope["method"], scope["path"]))
        takes_action = handler is not None and getattr(handler, "scripted", False)
        action = self._next_action() if takes_action else None
        record.action = action
        with self._lock:
            self.requests.append(record)
            self._lock.notify_all()
        ex = Exchange(self, record, action, send)

        async def run() -> None:
            if handler is None:
                await ex.json(404, {"error": {"message": f"no route {scope['path']}",
                                              "type": "not_found"}})
            elif takes_action and not self.check_auth(headers):
                await self.unauthorized(ex)
            else:
                await handler(ex)

        async def watch() -> None:
            while (await receive())["type"] != "http.disconnect":
                pass

        worker = asyncio.create_task(run())
        watcher = asyncio.create_task(watch())
        try:
            done, _ = await asyncio.wait({worker, watcher}, return_when=asyncio.FIRST_COMPLETED)
            if worker in done:
                worker.result()  # re-raise _DropConnection so uvicorn cuts the connection
                record.completed = True
            else:
                record.disconnected = True
                worker.cancel()
                await asyncio.gather(worker, return_exceptions=True)
        finally:
            watcher.cancel()
            self._notify()


def scripted(handler: Callable[..., Any]) -> Callable[..., Any]:
    """Mark a route handler as one that consumes scripted actions (and checks auth)."""
    handler.scripted = True  # type: ignore[attr-defined]
    return handler


def drop_connection() -> None:
    raise _DropConnection("scripted connection drop")


def script_arguments(description: str) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--tokens", type=int, default=32)
    parser.add_argument("--token-delay-ms", type=float, default=0.0)
    parser.add_argument("--ttft-ms", type=float, default=0.0)
    parser.add_argument("--api-key", default=None)
    parser.add_argument("--model", default="fake-model")
    parser.add_argument("--log-level", default="warning")
    return parser
