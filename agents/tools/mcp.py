"""MCP servers' tools, through the official ``mcp`` SDK's ``Client``: over stdio (a command
Gaia starts) or streamable HTTP (a URL).

A server's connection is a resource with an owner, as Channels' and Celery's long-lived
resources are: one per server and event loop, opened on first use and shared by every turn,
opened again when it dies (a stdio server that crashed, an HTTP session that was lost), closed
when its configuration changes and when the process stops (:func:`mcp_close_all`, from the
server's lifespan). Its tool list is read once per connection. A stdio server's stderr goes to
the log (``gaia.mcp``), a line at a time.

The SDK's ``Client`` is entered and left by one task (its task group must be), the
connection's owner; turns call it from their own tasks.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import shutil
import sys
import threading
from dataclasses import dataclass, field
from typing import Any

from agents.backends.upstream import Redactor
from agents.infra import tracing
from agents.selectors.urls import UrlRefused, url_parsed
from agents.tools.base import ToolResult, text_of

log = logging.getLogger("gaia.mcp")

CONNECT_SECONDS = 30.0  # starting a stdio server (npx may fetch nothing, but starts node)
# A connection unused this long is pinged before a call (a server that died meanwhile is
# opened again first, instead of failing the call): one round trip, about 1 ms over stdio.
IDLE_PING_SECONDS = 30.0


@dataclass(frozen=True)
class McpConfig:
    """What a connection needs of an MCP server (secrets resolved), and the version of its
    configuration (a change opens a new connection)."""

    name: str
    command: str = ""
    args: tuple[str, ...] = ()
    env: tuple[tuple[str, str], ...] = ()
    url: str = ""
    headers: tuple[tuple[str, str], ...] = ()
    timeout: float = 60.0
    version: str = ""
    extra: dict[str, Any] = field(default_factory=dict, compare=False, hash=False)


def resolve_command(command: str) -> str:
    """``command`` as a path: on ``PATH``, else beside Gaia's own Python (a server installed
    in Gaia's virtualenv is found whether or not the venv is on ``PATH``)."""
    if os.sep in command:
        return command
    found = shutil.which(command)
    if found:
        return found
    beside = os.path.join(os.path.dirname(sys.executable), command)
    return beside if os.path.exists(beside) else command


class McpError(Exception):
    """A server could not be reached or listed (the message says why)."""


class McpConnection:
    def __init__(self, config: McpConfig) -> None:
        self.config = config
        self._client: Any = None
        self._owner: asyncio.Task[None] | None = None
        self._stop = asyncio.Event()
        self._lock = asyncio.Lock()
        self._tools: list[Any] | None = None
        self._used = 0.0  # when a call last succeeded (loop time)
        self.opened = 0  # how many times it was opened (a restart opens it again)
        # What the server says loses every configured env and header value (its secrets).
        self.redactor = Redactor([v for _, v in (*config.env, *config.headers)])

    @property
    def alive(self) -> bool:
        return self._client is not None and self._owner is not None and not self._owner.done()

    async def _drop(self) -> None:
        """The connection failed under a call: close it; the next use opens it again."""
        owner, self._client = self._owner, None
        self._stop.set()
        if owner is not None and not owner.done():
            owner.cancel()
            await asyncio.gather(owner, return_exceptions=True)

    async def _live_client(self) -> Any:
        """The client, checked with a ping if it has been idle (then reopened if dead)."""
        client = await self.client()
        loop = asyncio.get_running_loop()
        if loop.time() - self._used > IDLE_PING_SECONDS and self.opened and self._used:
            try:
                async with asyncio.timeout(5):
                    await client.send_ping()
            except Exception:  # noqa: BLE001 - it died while idle: open it again
                log.info("MCP server %s did not answer a ping; opening it again",
                         self.config.name)
                await self._drop()
                client = await self.client()
        return client

    async def client(self) -> Any:
        """The open SDK client, opening the connection first if it is not (or died)."""
        if self.alive:
            return self._client
        async with self._lock:
            if self.alive:
                return self._client
            if not self.config.command:
                try:
                    url_parsed(self.config.url)
                except UrlRefused as exc:
                    raise McpError(f"the MCP server '{self.config.name}' has a URL Gaia does "
                                   f"not call: {exc}") from None
            self._stop = asyncio.Event()
            ready: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
            self._owner = asyncio.create_task(self._own(ready), name=f"mcp-{self.config.name}")
            try:
                async with asyncio.timeout(CONNECT_SECONDS):
                    self._client = await asyncio.shield(ready)
            except TimeoutError:
                self._stop.set()
                raise McpError(f"the MCP server '{self.config.name}' did not start within "
                               f"{CONNECT_SECONDS:g} s") from None
            except Exception as exc:
                raise McpError(self.redactor.text(
                    f"the MCP server '{self.config.name}' could not be reached: "
                    f"{_reason(exc)}")) from exc
            self._tools = None
            self.opened += 1
            return self._client

    async def _own(self, ready: asyncio.Future[Any]) -> None:
        from mcp import Client

        errlog = None
        try:
            if self.config.command:
                from mcp import StdioServerParameters
                from mcp.client.stdio import stdio_client

                errlog = _LogPipe(self.config.name)
                # "replace": bytes a server writes that are not UTF-8 become U+FFFD in that
                # message, instead of an error that ends the connection every turn shares.
                params = StdioServerParameters(
                    command=resolve_command(self.config.command), args=list(self.config.args),
                    env=dict(self.config.env) or None, encoding_error_handler="replace")
                client = Client(stdio_client(params, errlog=errlog.writer))
            else:
                import httpx2
                from mcp.client.streamable_http import streamable_http_client

                http = httpx2.AsyncClient(headers=dict(self.config.headers),
                                          timeout=httpx2.Timeout(self.config.timeout + 5))
                # What is reached is what was compared (agents.selectors.urls).
                url = url_parsed(self.config.url).text
                client = Client(streamable_http_client(url, http_client=http))
            async with client:
                if not ready.done():
                    ready.set_result(client)
                await self._stop.wait()
        except BaseException as exc:  # noqa: BLE001 - told to the waiting caller, logged
            if not ready.done():
                ready.set_exception(exc if isinstance(exc, Exception) else McpError(str(exc)))
            elif not self._stop.is_set():
                log.warning("MCP server %s went away: %s", self.config.name, _reason(exc))
            if isinstance(exc, asyncio.CancelledError):
                raise
        finally:
            self._client = None
            if errlog is not None:
                errlog.close()

    async def tools(self) -> list[Any]:
        """The server's tools (the SDK's ``Tool`` objects), read once per connection."""
        client = await self.client()
        if self._tools is None:
            try:
                async with asyncio.timeout(self.config.timeout):
                    listed = await client.list_tools()
            except Exception as exc:
                raise McpError(self.redactor.text(
                    f"the MCP server '{self.config.name}' did not list its tools: "
                    f"{_reason(exc)}")) from exc
            self._tools = list(listed.tools)
        return self._tools

    async def call(self, tool: str, arguments: dict[str, Any], *, within: float) -> ToolResult:
        """Call ``tool``; its failure, a timeout or a server that died is an error result.
        Cancelling the caller cancels the call. The result never quotes the server's
        configured secrets (:class:`~agents.backends.upstream.Redactor`)."""
        result = await self._call(tool, arguments, within=within)
        if self.redactor:
            result = ToolResult(self.redactor.text(result.text), is_error=result.is_error)
        return result

    async def _call(self, tool: str, arguments: dict[str, Any], *, within: float
                    ) -> ToolResult:
        refused = arguments_refused(arguments)
        if refused:
            return ToolResult(f"{tool} was not called: {refused}", is_error=True)
        try:
            client = await self._live_client()
            async with asyncio.timeout(within):
                with tracing.mcp_span(server=self.config.name, tool=tool) as meta:
                    if meta is None:
                        result = await client.call_tool(tool, arguments,
                                                        read_timeout_seconds=within)
                    else:  # MCP carries the trace context in params._meta
                        result = await client.call_tool(tool, arguments,
                                                        read_timeout_seconds=within, meta=meta)
        except TimeoutError:
            return ToolResult(f"{tool}: no answer within {within:g} s", is_error=True)
        except McpError as exc:
            return ToolResult(str(exc), is_error=True)
        except Exception as exc:  # noqa: BLE001 - the model is told, the turn goes on
            log.warning("MCP call %s.%s failed: %s", self.config.name, tool, _reason(exc))
            if self._broken(exc):
                # The connection broke under the call (a server that crashed, an HTTP session
                # the server ended): not retried (the call may have had effects); the next
                # call opens the server again.
                await self._drop()
            return ToolResult(f"{tool} failed: {_reason(exc)}", is_error=True)
        self._used = asyncio.get_running_loop().time()
        return ToolResult(_result_text(result), is_error=bool(result.is_error))

    def _broken(self, exc: BaseException) -> bool:
        """Whether ``exc`` says the connection itself is gone (then it is dropped for every
        turn), rather than that this one call failed: the server's error answer, a result
        the SDK could not read or validate, a per-call timeout leave it open for the others."""
        if not self.alive:
            return True
        while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
            exc = exc.exceptions[0]
        from mcp.shared.exceptions import MCPError
        from mcp_types import CONNECTION_CLOSED

        if isinstance(exc, MCPError):
            # CONNECTION_CLOSED: the transport ended; "Session terminated": an HTTP server
            # forgot the session (its 404), so every later call on it would fail too.
            return exc.code == CONNECTION_CLOSED or exc.message == "Session terminated"
        import anyio

        return isinstance(exc, anyio.ClosedResourceError | anyio.BrokenResourceError
                          | anyio.EndOfStream | ConnectionError | EOFError)

    async def close(self) -> None:
        self._stop.set()
        if self._owner is not None:
            with contextlib.suppress(BaseException):
                await asyncio.wait_for(asyncio.shield(self._owner), 5)
            if not self._owner.done():
                self._owner.cancel()


def arguments_refused(arguments: Any) -> str | None:
    """Why ``arguments`` cannot be sent to an MCP server (``None``: they can): a text that is
    not Unicode a server can read (a lone surrogate such as ``"\\ud800"``, which JSON may
    spell but UTF-8 cannot carry). Checked before the call is sent: the SDK encodes it on
    the connection's writer task, where the error would close the connection every turn
    shares."""
    try:
        json.dumps(arguments, ensure_ascii=False, allow_nan=False).encode("utf-8")
    except UnicodeEncodeError:
        return "its arguments hold text that is not valid Unicode (a lone surrogate)"
    except (TypeError, ValueError) as exc:
        return f"its arguments are not JSON ({exc})"
    return None


def _result_text(result: Any) -> str:
    parts = []
    for item in result.content or []:
        text = getattr(item, "text", None)
        parts.append(text if text is not None else f"[{getattr(item, 'type', 'content')}]")
    if not parts and getattr(result, "structured_content", None) is not None:
        parts.append(json.dumps(result.structured_content, ensure_ascii=False))
    return text_of("\n".join(parts))


def _reason(exc: BaseException) -> str:
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    return f"{type(exc).__name__}: {exc}"[:500]


class _LogPipe:
    """A pipe whose write end is a server's stderr; a thread logs what arrives, a line at a
    time, until the server closes it."""

    def __init__(self, name: str) -> None:
        read, write = os.pipe()
        self.writer = os.fdopen(write, "w")
        reader = os.fdopen(read, "r", errors="replace")

        def pump() -> None:
            with reader:
                for line in reader:
                    if line.strip():
                        log.info("mcp %s: %s", name, line.rstrip()[:2000])

        threading.Thread(target=pump, name=f"mcp-stderr-{name}", daemon=True).start()

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self.writer.close()


_connections: dict[tuple[asyncio.AbstractEventLoop, str], McpConnection] = {}


async def mcp_connection(config: McpConfig) -> McpConnection:
    """This loop's connection to the server ``config`` names (a new one when its
    configuration changed: the old one is closed)."""
    loop = asyncio.get_running_loop()
    for key in [k for k in _connections if k[0].is_closed()]:
        _connections.pop(key, None)
    held = _connections.get((loop, config.name))
    if held is not None and held.config == config:
        return held
    if held is not None:
        await held.close()
    held = _connections[(loop, config.name)] = McpConnection(config)
    return held


async def mcp_close_all() -> None:
    """Close this loop's MCP connections (stdio servers end): the server is stopping."""
    loop = asyncio.get_running_loop()
    mine = [k for k in _connections if k[0] is loop]
    await asyncio.gather(*(_connections.pop(k).close() for k in mine), return_exceptions=True)
