"""``/mcp``: every agent a key may use, as an MCP tool (issue 39).

The ``mcp`` SDK's low-level server answers the protocol (``initialize``, ``tools/list``,
``tools/call``, JSON-RPC errors) over Streamable HTTP without sessions: each POST is served on
its own, so any web process answers any request. Gaia adds only what is its own:

* **who asks**: ``Authorization: Bearer <key>`` with the ``chat`` scope, read before the SDK sees
  the request (:func:`mcp_application`); none or a bad one is a 401 with ``WWW-Authenticate:
  Bearer``. The key's allowed agents, a paused agent and the key's rate limit apply exactly as
  on ``/v1``: both ask :func:`agents.turns.authorize`;
* **the tools**: ``ask_<slug>`` for each agent ``/v1/models`` lists for the key (characters
  outside ``[A-Za-z0-9_.-]`` become ``_``), described by the agent's description, taking
  ``{"message", "thread_id"?}``;
* **a call**: one turn through :func:`agents.turns.turn_open`, on a new thread or on the key's
  own ``thread_id`` (another key's thread is an error result, as on ``/v1``), stored, fed to the
  operators' feed, killable, as any turn. Its reply is the text content; ``structuredContent``
  names the thread, the agent and the usage. What stops a turn (an unknown thread, a paused
  agent, a failing provider, a kill) is a result with ``isError: true`` and the reason, not a
  protocol error: the calling model reads it.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
import time
import uuid
from typing import Any

import mcp_types as types
from mcp.server.caching import CacheHint
from mcp.server.lowlevel.server import Server
from mcp.server.streamable_http_manager import StreamableHTTPSessionManager

from agents import turns
from agents.http.jsonrpc import counted, jsonrpc_refuse
from agents.kernel import llm
from agents.kernel.exceptions import AgentNotFound, GaiaError
from agents.models import Agent
from agents.outlet import realtime

TOOL_PREFIX = "ask_"
_OUTSIDE_NAME = re.compile(r"[^A-Za-z0-9_.-]")
PROGRESS_SECONDS = 1.0
_KEY_SCOPE = "gaia.raw_key"  # where mcp_application leaves the request's key for the handlers

INPUT_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "message": {"type": "string", "description": "What to ask the agent."},
        "thread_id": {"type": "string", "description": (
            "Continue this conversation (a thread_id a previous call returned); without it "
            "the agent starts a new one.")},
    },
    "required": ["message"],
}
OUTPUT_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "thread_id": {"type": "string"},
        "agent": {"type": "string"},
        "usage": {"type": "object", "properties": {
            "input_tokens": {"type": "integer"}, "output_tokens": {"type": "integer"}}},
    },
    "required": ["thread_id", "agent", "usage"],
}


def tool_name(slug: str) -> str:
    """The MCP tool that asks agent ``slug``."""
    return TOOL_PREFIX + _OUTSIDE_NAME.sub("_", slug)


def _raw_key(ctx: Any) -> str | None:
    request = getattr(ctx, "request", None)
    return None if request is None else request.scope.get(_KEY_SCOPE)


async def _agents(raw_key: str | None) -> list[Agent]:
    """The agents this key may ask, as ``/v1/models`` lists them (not ``auto`` or teams)."""
    key, _ = await turns.authorize(raw_key=raw_key, throttle=False)  # counted at the edge
    return [m for m in await turns.model_list(api_key=key) if isinstance(m, Agent)]


async def _agent_of(raw_key: str | None, name: str) -> tuple[Any, Agent | None]:
    """``(key, agent)`` for the tool ``name``, checked as ``/v1`` checks a model (allowed,
    paused: raised). The slug the name spells is tried first, from the per-process cache (a
    listing per call was a fifth of an MCP turn's server CPU, py-spy); a slug the name had to
    change (``team/writer`` is ``ask_team_writer``) is looked up among the key's agents."""
    if name.startswith(TOOL_PREFIX):
        try:
            key, found = await turns.authorize(raw_key=raw_key, model=name[len(TOOL_PREFIX):],
                                               throttle=False)
        except AgentNotFound:
            pass
        else:
            if isinstance(found, Agent):  # not auto or a team: the tools are agents
                return key, found
    slug = next((a.slug for a in await _agents(raw_key) if tool_name(a.slug) == name), None)
    if slug is None:
        return None, None
    return await turns.authorize(raw_key=raw_key, model=slug, throttle=False)


async def list_tools(ctx: Any, params: Any) -> types.ListToolsResult:
    tools, seen = [], set()
    for agent in await _agents(_raw_key(ctx)):
        name = tool_name(agent.slug)
        if name in seen:  # two slugs that read the same once sanitised: the first is served
            continue
        seen.add(name)
        tools.append(types.Tool(
            name=name, title=agent.display_name or agent.slug,
            description=agent.description or f"Ask the Gaia agent '{agent.slug}'.",
            input_schema=INPUT_SCHEMA, output_schema=OUTPUT_SCHEMA))
    return types.ListToolsResult(tools=tools)


def _error(text: str) -> types.CallToolResult:
    return types.CallToolResult(content=[types.TextContent(type="text", text=text)],
                                is_error=True)


async def call_tool(ctx: Any, params: Any) -> types.CallToolResult:
    raw = _raw_key(ctx)
    arguments = params.arguments or {}
    message, thread_id = arguments.get("message"), arguments.get("thread_id")
    if not isinstance(message, str) or not message.strip():
        return _error("'message' is required: a non-empty string.")
    if thread_id is not None and not isinstance(thread_id, str):
        return _error("'thread_id' must be a string.")
    try:
        key, agent = await _agent_of(raw, params.name)
        if agent is None:
            return _error(f"Unknown tool '{params.name}': tools/list names the agents this "
                          "key may ask.")
        slug = agent.slug
        request = llm.LLMRequest(model=slug, system="", messages=[
            llm.Message(role="user", parts=(llm.TextPart(message),))])
        turn = await turns.turn_open(target=agent, api_key=key, request=request,
                                     dialect="mcp", response_id=f"mcp_{uuid.uuid4().hex}",
                                     thread_id=thread_id or None, sender=_participant(ctx))
        token = _progress_token(ctx)
        work = (turn.collect(await turn.first(wait=3600)) if token is None
                else _collect_telling(ctx, turn, token))
        result = await _unless_cancelled(work, key, ctx)
        if result is None:
            return _error("Cancelled by the client (notifications/cancelled).")
    except GaiaError as exc:
        return _error(exc.message)
    usage = turn.usage
    structured = {"thread_id": str(turn.thread_id), "agent": turn.model,
                  "usage": {"input_tokens": usage.input_tokens,
                            "output_tokens": usage.output_tokens}}
    if result.error:
        return types.CallToolResult(
            content=[types.TextContent(type="text", text=result.error)],
            structured_content=structured, is_error=True)
    return types.CallToolResult(content=[types.TextContent(type="text", text=result.text)],
                                structured_content=structured)


# The calls this process serves, by (key, the client's request id): a 2025-11-25 client cancels
# one with `notifications/cancelled` in a POST of its own, which any process may receive
# (stateless: no session ties it to the call), so the cancel goes to every process. Two clients
# sharing a key and a request id at the same moment would both be cancelled; a 2026-07-28
# client cancels by closing the call's stream instead, which needs none of this.
_calls: dict[tuple[str, str], tuple[asyncio.AbstractEventLoop, asyncio.Future[None]]] = {}


def _call_key(key: Any, request_id: Any) -> tuple[str, str]:
    return (str(getattr(key, "pk", "")), json.dumps(request_id))


async def _unless_cancelled(work: Any, key: Any, ctx: Any) -> Any:
    """``work``'s result, or ``None`` if the client cancelled the call first (the turn is
    stopped as a client's that left: its partial reply kept)."""
    loop = asyncio.get_running_loop()
    cancelled: asyncio.Future[None] = loop.create_future()
    name = _call_key(key, getattr(ctx, "request_id", None))
    _calls[name] = (loop, cancelled)
    task = asyncio.ensure_future(work)
    try:
        await asyncio.wait([task, cancelled], return_when=asyncio.FIRST_COMPLETED)
    finally:
        if _calls.get(name, (None, None))[1] is cancelled:
            del _calls[name]
        if not task.done():
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
    return None if task.cancelled() else task.result()


@realtime.on_control("mcp_call_cancel")
def _cancel_local(message: dict[str, Any]) -> None:
    held = _calls.get((str(message.get("key")), str(message.get("request"))))
    if held is not None:
        loop, future = held
        loop.call_soon_threadsafe(lambda: future.done() or future.set_result(None))


def _participant(ctx: Any) -> str:
    """Who asks, as the thread shows it: the client's ``clientInfo.name`` where the protocol
    carries it on each request (2026-07-28's envelope), else its ``User-Agent``."""
    name = ""
    with contextlib.suppress(Exception):  # no session, or no client info: the header then
        name = ctx.session.client_params.client_info.name
    if not name:
        request = getattr(ctx, "request", None)
        name = request.headers.get("user-agent", "") if request is not None else ""
    return f"mcp:{name}"[:100] if name else ""


def _progress_token(ctx: Any) -> str | int | None:
    meta = getattr(ctx, "meta", None) or {}
    token = meta.get("progress_token", meta.get("progressToken"))
    return token if isinstance(token, str | int) and not isinstance(token, bool) else None


async def _collect_telling(ctx: Any, turn: Any, token: str | int) -> Any:
    """The turn to its end, a ``notifications/progress`` now and then while it runs: at most
    one every :data:`PROGRESS_SECONDS` as the reply streams, and one each time the provider has
    been silent that long (a client's proof that the call is alive)."""
    tokens, told = 0, 0.0
    async for event in turn.events(await turn.first(wait=PROGRESS_SECONDS),
                                   keepalive=PROGRESS_SECONDS):
        if isinstance(event, llm.TextDelta):
            tokens += 1
        now = time.monotonic()
        if now - told >= PROGRESS_SECONDS or event is turns.KEEPALIVE:
            told = now
            with contextlib.suppress(Exception):  # a client gone is the turn's to notice
                await ctx.session.send_progress_notification(
                    token, progress=tokens, message=f"{turn.model}: {tokens} tokens so far",
                    related_request_id=ctx.request_id)
    return turn.result


# A client may keep the tool list this long (private: per key); an agent added or allowed to
# the key shows up within the minute.
TOOLS_TTL_MS = 60_000

server: Server[Any] = Server("gaia", version="1", on_list_tools=list_tools,
                             on_call_tool=call_tool,
                             cache_hints={"tools/list": CacheHint(ttl_ms=TOOLS_TTL_MS)},
                             # every tool takes the same arguments: without this the SDK
                             # listed the tools to find a called tool's schema (13 % of an
                             # MCP turn's server CPU, py-spy, scripts/perf/interop)
                             get_tool_input_schema=lambda name: INPUT_SCHEMA,
                             instructions="Each tool asks one Gaia agent; pass the thread_id "
                                          "a call returned to continue its conversation.")


class _Manager:
    """The SDK's session manager of this process's event loop, started on first use (its
    task group lives as long as the loop: uvicorn's lifespan and daphne's lack of one alike)."""

    def __init__(self) -> None:
        self._ready: dict[asyncio.AbstractEventLoop, asyncio.Future[Any]] = {}
        self._tasks: set[asyncio.Task[None]] = set()

    async def get(self) -> StreamableHTTPSessionManager:
        loop = asyncio.get_running_loop()
        ready = self._ready.get(loop)
        if ready is None:
            ready = self._ready[loop] = loop.create_future()
            task = loop.create_task(self._hold(ready))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)
        return await asyncio.shield(ready)

    @staticmethod
    async def _hold(ready: asyncio.Future[Any]) -> None:
        manager = StreamableHTTPSessionManager(app=server, stateless=True)
        async with manager.run():
            ready.set_result(manager)
            await asyncio.Event().wait()  # until the loop ends


_manager = _Manager()


async def _cancels_taken(key: Any, receive: Any, send: Any) -> Any:
    """The request's body read (``BodyLimit`` bounded it); a ``notifications/cancelled`` is
    sent to every process (:func:`_cancel_local`) and answered 202 here, anything else goes
    on to the SDK: a ``receive`` that gives the body again. ``None``: answered."""
    chunks = []
    while True:
        message = await receive()
        if message["type"] != "http.request":
            return None  # the client left
        chunks.append(message.get("body", b""))
        if not message.get("more_body"):
            break
    body = b"".join(chunks)
    if b"notifications/cancelled" in body:  # cheap test first: most bodies are not
        with contextlib.suppress(ValueError, AttributeError, TypeError):
            note = json.loads(body)
            if note.get("method") == "notifications/cancelled" and "id" not in note:
                named = _call_key(key, (note.get("params") or {}).get("requestId"))
                realtime.send_control("mcp_call_cancel", key=named[0], request=named[1])
                await send({"type": "http.response.start", "status": 202, "headers": []})
                await send({"type": "http.response.body", "body": b""})
                return None
    replayed = False

    async def again() -> dict[str, Any]:
        nonlocal replayed
        if not replayed:
            replayed = True
            return {"type": "http.request", "body": body, "more_body": False}
        return await receive()

    return again


@counted("mcp")
async def mcp_application(scope: dict[str, Any], receive: Any, send: Any, raw: str | None
                          ) -> None:
    """ASGI for ``/mcp``: the key checked (401 before any protocol work), then the SDK. Each
    request is counted in ``gaia_requests_total{route="mcp"}`` and logged on ``gaia.access``
    (its turns are counted where every turn is, as it ends)."""
    try:
        key, _ = await turns.authorize(raw_key=raw)
    except GaiaError as exc:
        await jsonrpc_refuse(send, exc, code=-32001)
        return
    if scope.get("method") == "POST":
        receive = await _cancels_taken(key, receive, send)
        if receive is None:
            return
    manager = await _manager.get()
    await manager.handle_request({**scope, _KEY_SCOPE: raw}, receive, send)
