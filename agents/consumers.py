"""The operator feed's WebSocket consumer (``/ws``; the wiring check is :mod:`agents.ping`).

The feed (issue 11, reference 003 "WebSocket API") is a thin interface over
:mod:`agents.realtime` (where every event comes from), the selectors (the snapshot) and the
operator services (its commands). Protocol, in the order a client sees it:

1. Handshake (:mod:`agents.middleware`). A browser's ``Origin`` must be Gaia's own (on a host
   in ``ALLOWED_HOSTS``) or one of ``GAIA_OPERATOR_ALLOWED_ORIGINS`` (else HTTP 403, no
   socket); a client that sends no ``Origin`` (not a browser: no cross-site risk) is let
   through to authenticate like anyone else.
2. Authentication, before anything is sent: an operator-scope API key in the handshake
   (``Authorization: Bearer KEY`` or ``X-API-Key: KEY``), a logged-in staff session, or, for
   browsers that have neither, a first message ``{"cmd": "auth", "api_key": KEY}`` within
   ``GAIA_FEED_AUTH_SECONDS``. Failure closes the socket with :data:`CLOSE_UNAUTHENTICATED`
   (4001: no credentials, a bad key, too slow) or :data:`CLOSE_FORBIDDEN` (4003: a key
   without the ``operator`` scope, a session that is not staff).
3. ``connected`` with the snapshot (organism, agents, active threads), then every feed event
   that matches the socket's subscription. Every message the server sends carries
   ``timestamp`` and ``seq`` (1, 2, 3... per socket).
4. Commands (``subscribe``, ``inject``, ``kill``, ``pause``, ``resume``, ``approve`` and
   ``deny`` with an ``approval_id`` and an optional ``reason``), each answered by
   ``{"event": "ack", "id": ..., "cmd": ...}`` or ``{"event": "error", "id": ..., "code": ...,
   "error": ..., "status": ...}`` (what the REST API answers for the same refusal: one rule
   in the core for both). Bad JSON and unknown commands get an ``error``; the socket stays
   open. Subscribing to a thread asks for its streaming reply whole (``message_snapshot``).

With ``?batch=1`` every message is a JSON array of events (each with its own ``seq``), at most
one per ``fanout.feed_batch_interval`` (0.1 s, longer when a process serves more such
sockets than ``GAIA_FEED_BATCH_RATE`` allows) besides replies to commands: the events of that
interval less those a later one in it supersedes (``fanout._coalesced``; a socket with a
subscription filter gets every event that matches), formatted once per process for every such
socket.

A slow client never slows anyone else: the channel-layer handler only filters and appends to
this socket's bounded queue, and a sender task writes to the socket. Past
``GAIA_FEED_QUEUE_MAX`` queued events new ones are dropped and counted: the client gets
``{"event": "lagged", "missed": N}`` where the gap is (it can resync over REST).
"""

from __future__ import annotations

import asyncio
import collections
import logging
from typing import Any
from urllib.parse import parse_qs

from channels.consumer import get_handler_name
from channels.generic.websocket import AsyncJsonWebsocketConsumer
from django.conf import settings
from django.utils import timezone

from agents import fanout, realtime, services, turns
from agents.database import run_db
from agents.exceptions import (
    AuthenticationFailed,
    GaiaError,
    InvalidRequest,
    PermissionDenied,
)
from agents.feed_input import (
    agent_get,
    command_thread_id,
    event_agents,
    event_thread,
    feed_snapshot,
    header_key,
    required_str,
    str_list,
    thread_get,
)
from agents.jsonbody import json_parse
from agents.models import ApiKey

log = logging.getLogger("gaia.feed")

# Application close codes (RFC 6455 section 7.4.2 leaves 4000-4999 to applications; the
# thousands digit mirrors the HTTP status).
CLOSE_UNAUTHENTICATED = 4001
CLOSE_FORBIDDEN = 4003
# RFC 6455 1013 "Try Again Later": the feed cannot reach its channel layer (Redis) now.
CLOSE_TRY_AGAIN = 1013
LAYER_DOWN = "the live feed's channel layer (Redis) cannot be reached; reconnect shortly"

COMMANDS = ("auth", "subscribe", "inject", "kill", "pause", "resume", "approve", "deny")

_WITH_SEQ = '{},"seq":{}}}'.format  # an open JSON text (fanout.open_text) and its seq


class FeedConsumer(AsyncJsonWebsocketConsumer):
    """The operator feed at ``/ws`` (see the module docstring for the protocol)."""

    # No channel of its own: every event comes through this process's fan-out
    # (agents.fanout), so a socket reads nothing from Redis itself (an unconfigured alias:
    # Channels then opens no channel).
    channel_layer_alias = "gaia-feed-has-no-channel"
    queue_max: int | None = None  # None: settings.GAIA_FEED_QUEUE_MAX
    auth_seconds: float | None = None  # None: settings.GAIA_FEED_AUTH_SECONDS

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.api_key: ApiKey | None = None
        self.user_label: str | None = None
        self.authenticated = False
        self.closed = False
        self.threads: frozenset[str] = frozenset()
        self.agents: frozenset[str] = frozenset()
        self.events: frozenset[str] = frozenset()
        # What the client is sent next: open JSON texts (fanout.open_text), each closed
        # with this socket's "seq" as it leaves, and (batch mode) whole FeedChunks.
        self._out: collections.deque[str | fanout.FeedChunk] = collections.deque()
        self._queued = 0  # events in _out
        self._wake = asyncio.Event()
        self._missed = 0
        self._seq = 0
        self._joined = False
        self._sender: asyncio.Task[None] | None = None
        self._auth_timer: asyncio.Task[None] | None = None
        self._expiry: asyncio.TimerHandle | None = None
        self._rechecks: set[asyncio.Task[None]] = set()
        self.batch = False  # /ws?batch=1: every message is a JSON array of events
        self._max = 0  # queued events at most (set on connect)

    async def dispatch(self, message: dict[str, Any]) -> None:
        """Channels' dispatch without its ``close_old_connections`` thread hop per message:
        this consumer never touches the ORM on its own thread (``run_db`` does), and the hop
        per frame and per socket was most of what subscribers cost /v1."""
        handler = getattr(self, get_handler_name(message), None)
        if handler is None:
            raise ValueError(f"No handler for message type {message['type']}")
        await handler(message)

    # -- connection --------------------------------------------------------------------------

    async def connect(self) -> None:
        realtime.bind()
        self._max = self.queue_max if self.queue_max is not None else (
            settings.GAIA_FEED_QUEUE_MAX)
        query = parse_qs(self.scope.get("query_string", b"").decode("latin1"))
        self.batch = query.get("batch", [""])[-1] in ("1", "true")
        await self.accept()
        raw = header_key(self.scope)
        if raw is not None:
            await self._authenticate_key(raw)
            return
        user = self.scope.get("user")
        if user is not None and user.is_authenticated:
            if not user.is_staff:
                await self._refuse(CLOSE_FORBIDDEN, "staff session required")
                return
            self.user_label = user.get_username()
            await self._start()
            return
        wait = self.auth_seconds if self.auth_seconds is not None else (
            settings.GAIA_FEED_AUTH_SECONDS)
        self._auth_timer = asyncio.create_task(self._auth_deadline(wait))

    async def _auth_deadline(self, wait: float) -> None:
        await asyncio.sleep(wait)
        if not self.authenticated:
            await self._refuse(CLOSE_UNAUTHENTICATED, "no credentials in time")

    async def _authenticate_key(self, raw: str) -> None:
        try:
            self.api_key = await run_db(services.api_key_authenticate, raw=raw,
                                        scope=ApiKey.Scope.OPERATOR)
        except AuthenticationFailed as exc:
            await self._refuse(CLOSE_UNAUTHENTICATED, exc.message)
            return
        except PermissionDenied:
            await self._refuse(CLOSE_FORBIDDEN, "the key lacks the 'operator' scope")
            return
        await self._start()

    async def _refuse(self, code: int, reason: str) -> None:
        if not self.closed:
            self.closed = True
            await self.close(code=code, reason=reason[:120])

    async def _start(self) -> None:
        """Join the feed, then send the snapshot: an event committed meanwhile is then both in
        the snapshot and sent after it, never lost between them."""
        self.authenticated = True
        if self._auth_timer is not None:
            self._auth_timer.cancel()
        try:
            async with asyncio.timeout(settings.GAIA_FEED_JOIN_SECONDS):
                await fanout.feed_join(self._feed_batch, paced=self.batch)
        except TimeoutError:  # the listener cannot join its group: Redis is away
            fanout.feed_leave(self._feed_batch)
            await self._refuse(CLOSE_TRY_AGAIN, LAYER_DOWN)
            return
        self._joined = True
        realtime.on_layer_lost(realtime.FEED_GROUP, self._layer_lost)
        if self.api_key is not None:
            fanout.feed_on_config_changed(self._key_recheck_soon)
            self._expiry_arm()
        snapshot = await run_db(feed_snapshot)
        self._out.appendleft(fanout.open_text({"event": "connected",
                                                 "timestamp": realtime.now_iso(), **snapshot}))
        self._queued += 1
        self._sender = asyncio.create_task(self._send_loop(), name="gaia-feed-sender")
        self._wake.set()

    async def disconnect(self, code: int) -> None:
        self.closed = True
        for task in (self._auth_timer, self._sender, *self._rechecks):
            if task is not None:
                task.cancel()
        if self._expiry is not None:
            self._expiry.cancel()
        if self._joined:
            fanout.feed_leave(self._feed_batch)
            fanout.feed_off_config_changed(self._key_recheck_soon)
            realtime.off_layer_lost(realtime.FEED_GROUP, self._layer_lost)

    def _layer_lost(self) -> None:
        """Redis went away under an open socket: its events stopped. Close it (1013) so the
        client reconnects, and resyncs, once the feed is back."""
        if not self.closed:
            task = asyncio.get_running_loop().create_task(
                self._refuse(CLOSE_TRY_AGAIN, LAYER_DOWN))
            self._rechecks.add(task)
            task.add_done_callback(self._rechecks.discard)

    # -- the key stays valid while the socket is open ---------------------------------------

    def _expiry_arm(self) -> None:
        """Close the socket when the key expires (4001), as a new request would be refused."""
        if self._expiry is not None:
            self._expiry.cancel()
            self._expiry = None
        expires_at = self.api_key.expires_at if self.api_key is not None else None
        if expires_at is not None:
            wait = max(0.0, (expires_at - timezone.now()).total_seconds())
            self._expiry = asyncio.get_running_loop().call_later(
                wait, lambda: self._key_recheck_soon())

    def _key_recheck_soon(self) -> None:
        """The configuration changed (a key revoked, its scopes or agents edited): read the
        key again, off the loop."""
        if self.closed or self.api_key is None:
            return
        task = asyncio.get_running_loop().create_task(self._key_recheck())
        self._rechecks.add(task)
        task.add_done_callback(self._rechecks.discard)

    async def _key_recheck(self) -> None:
        assert self.api_key is not None
        try:
            self.api_key = await run_db(services.api_key_recheck, key=self.api_key,
                                        scope=ApiKey.Scope.OPERATOR)
        except AuthenticationFailed as exc:
            await self._refuse(CLOSE_UNAUTHENTICATED, exc.message)
            return
        except PermissionDenied:
            await self._refuse(CLOSE_FORBIDDEN, "the key lacks the 'operator' scope")
            return
        self._expiry_arm()

    # -- outgoing ----------------------------------------------------------------------------

    def _lagged(self) -> None:
        self._out.append(fanout.open_text({"event": "lagged", "timestamp": realtime.now_iso(),
                                             "missed": self._missed}))
        self._queued += 1
        self._missed = 0

    def _queue(self, item: dict[str, Any], text: str | None = None, *,
               always: bool = False) -> None:
        """Queue ``item`` (with its open JSON ``text`` if already made) for the client; a feed
        event is dropped (and counted) when the queue is full. Replies to the client's
        commands (``always``) are never dropped."""
        if not always and self._queued >= self._max:
            self._missed += 1
            return
        if self._missed:
            self._lagged()  # where the gap is
        self._out.append(text if text is not None else fanout.open_text(item))
        self._queued += 1
        self._wake.set()

    def _take_one(self) -> str:
        """The next queued event (one event per message), closed with its ``seq``."""
        text = self._out.popleft()
        assert isinstance(text, str)  # chunks go to batch sockets only
        self._queued -= 1
        self._seq += 1
        return _WITH_SEQ(text, self._seq)

    def _take_array(self) -> str:
        """What is queued, up to ``FEED_BATCH_MAX`` events (at least one item), as one JSON
        array, each event with its ``seq``."""
        out = self._out
        head = out[0]
        if isinstance(head, fanout.FeedChunk) and len(out) == 1:  # the usual case
            out.popleft()
            message = head.array(self._seq + 1)
            self._seq += len(head.texts)
            self._queued = 0
            return message
        parts: list[str] = []
        taken = 0
        while out:
            item = out[0]
            n = len(item.texts) if isinstance(item, fanout.FeedChunk) else 1
            if taken and taken + n > fanout.FEED_BATCH_MAX:
                break
            out.popleft()
            first = self._seq + 1
            self._seq += n
            taken += n
            parts.append(item.items(first) if isinstance(item, fanout.FeedChunk)
                         else _WITH_SEQ(item, first))
        self._queued -= taken
        return f"[{','.join(parts)}]"

    async def _send_loop(self) -> None:
        take = self._take_array if self.batch else self._take_one
        try:
            while True:
                if not self._out:
                    if self._missed:
                        self._lagged()
                        continue
                    self._wake.clear()
                    await self._wake.wait()
                    continue
                # Batch mode needs no pacing here: realtime hands this socket one chunk per
                # FEED_BATCH_INTERVAL, and what queues while a send waits joins the next one.
                await self.send(text_data=take())
        except asyncio.CancelledError:
            raise
        except Exception:  # the socket is gone; websocket_disconnect cleans up
            log.debug("feed sender stopped", exc_info=True)

    def _reply(self, content: dict[str, Any], **fields: Any) -> None:
        self._queue({"event": "ack", "timestamp": realtime.now_iso(), "id": content.get("id"),
                     "cmd": content.get("cmd"), **fields}, always=True)

    def _error(self, cmd_id: Any, error: GaiaError) -> None:
        """A command's refusal: the code, field and HTTP status the REST API would answer
        (``retry_after`` too when it would send ``Retry-After``)."""
        answer = {"event": "error", "timestamp": realtime.now_iso(), "id": cmd_id,
                  "code": error.code or "error", "param": error.param, "error": error.message,
                  "status": error.status}
        if error.retry_after is not None:
            answer["retry_after"] = error.retry_after
        self._queue(answer, always=True)

    def _feed_batch(self, batch: fanout.FeedBatch) -> None:
        """A batch of feed events (agents.fanout.feed_join)."""
        if self.closed:
            return
        n = len(batch.texts)
        filtered = bool(self.events or self.threads or self.agents)
        if not filtered and not self._missed and self._queued + n <= self._max:
            # The common case, without a call per event.
            if isinstance(batch, fanout.FeedChunk):
                self._out.append(batch)
            else:
                self._out.extend(batch.texts)
            self._queued += n
            self._wake.set()
            return
        if filtered and isinstance(batch, fanout.FeedChunk):
            if batch.whole is None:  # a later chunk of an interval: the first had them all
                return
            batch = batch.whole
        for event, text in zip(batch.events, batch.texts, strict=True):
            if self._wants(event):
                self._queue(event, text)

    def _wants(self, event: dict[str, Any]) -> bool:
        """The subscription: each non-empty list must match. An event about no thread
        (``agent_state``, ``config_changed``...) is not filtered by ``threads``, one about no
        agent not by ``agents``; ``events`` filters every type."""
        if self.events and event["event"] not in self.events:
            return False
        if self.threads:
            thread = event_thread(event)
            if thread is not None and thread not in self.threads:
                return False
        if self.agents:
            agents = event_agents(event)
            if agents and not self.agents.intersection(agents):
                return False
        return True

    # -- incoming ----------------------------------------------------------------------------

    async def receive(self, text_data: str | None = None, bytes_data: bytes | None = None,
                      **kwargs: Any) -> None:
        if self.closed:
            return
        # The rule every JSON input follows (agents.jsonbody), before anything reads it: too
        # deep, a NUL or a lone surrogate is refused here, authenticated or not.
        problem: InvalidRequest | None = None
        try:
            content = (json_parse(text_data, what="the command") if text_data is not None
                       else None)  # commands are text frames
        except InvalidRequest as exc:
            content, problem = None, exc
        if not isinstance(content, dict):
            if not self.authenticated:
                await self._refuse(CLOSE_UNAUTHENTICATED, "first message must be auth")
                return
            self._error(None, problem or InvalidRequest(
                "Commands are JSON objects with a 'cmd'.", code="invalid_json"))
            return
        await self.receive_json(content)

    async def receive_json(self, content: Any, **kwargs: Any) -> None:
        cmd = content.get("cmd")
        if not self.authenticated:
            if cmd == "auth" and isinstance(content.get("api_key"), str):
                await self._authenticate_key(content["api_key"])
            else:
                await self._refuse(CLOSE_UNAUTHENTICATED, "first message must be auth")
            return
        cmd_id = content.get("id")
        if cmd not in COMMANDS:
            self._error(cmd_id, InvalidRequest(
                f"Unknown command {cmd!r}; one of {', '.join(COMMANDS)}.", param="cmd",
                code="unknown_command"))
            return
        try:
            if self.api_key is not None and self.api_key.requests_per_minute:
                # a command counts against the key's budget as a REST request does
                await run_db(services.api_key_throttle, key=self.api_key)
            result = await getattr(self, f"cmd_{cmd}")(content)
        except GaiaError as exc:
            self._error(cmd_id, exc)
            return
        except Exception:
            log.exception("feed command %r failed", cmd)
            self._error(cmd_id, GaiaError("Internal error.", code="internal_error"))
            return
        self._reply(content, **result)

    def actor(self) -> services.Actor:  # who this socket's commands are from (audit trail)
        return services.audit_actor(user=self.scope.get("user"), api_key=self.api_key,
                                    channel="ws", ip=(self.scope.get("client") or (None,))[0])

    async def cmd_auth(self, content: dict[str, Any]) -> dict[str, Any]:
        return {}  # already authenticated

    async def cmd_subscribe(self, content: dict[str, Any]) -> dict[str, Any]:
        threads = str_list(content, "threads")
        agents = str_list(content, "agents")
        events = str_list(content, "events")
        unknown = sorted(events - set(realtime.EVENT_FIELDS))
        if unknown:
            raise InvalidRequest(f"Unknown event types: {', '.join(unknown)}.", param="events",
                                 code="unknown_event")
        self.threads, self.agents, self.events = threads, agents, events
        turns.snapshots_request(thread_ids=threads)
        return {"threads": sorted(threads), "agents": sorted(agents), "events": sorted(events)}

    async def cmd_inject(self, content: dict[str, Any]) -> dict[str, Any]:
        injected = await turns.inject(
            to=required_str(content, "to"), payload=content.get("payload"),
            thread_id=command_thread_id(content, required=False), api_key=self.api_key,
            operator=self.user_label, actor=self.actor())
        return {"thread_id": injected.thread_id, "message_id": injected.message_id}

    async def cmd_kill(self, content: dict[str, Any]) -> dict[str, Any]:
        thread = await run_db(thread_get, command_thread_id(content, required=True))
        running = await run_db(services.thread_kill, thread=thread,
                               api_key=self.api_key, actor=self.actor())
        return {"thread_id": str(thread.pk), "running": running}

    async def _set_paused(self, content: dict[str, Any], paused: bool) -> dict[str, Any]:
        agent = await run_db(agent_get, required_str(content, "agent"))
        await run_db(services.agent_set_paused, agent=agent, paused=paused,
                     api_key=self.api_key, actor=self.actor())
        return {"agent": agent.slug, "paused": paused}

    async def cmd_pause(self, content: dict[str, Any]) -> dict[str, Any]:
        return await self._set_paused(content, True)

    async def cmd_resume(self, content: dict[str, Any]) -> dict[str, Any]:
        return await self._set_paused(content, False)

    async def _decide(self, content: dict[str, Any], decision: str) -> dict[str, Any]:
        reason = content.get("reason") or ""
        if not isinstance(reason, str):
            raise InvalidRequest("'reason' is a string.", param="reason")
        approval = await run_db(
            services.approval_decide, approval_id=required_str(content, "approval_id"),
            decision=decision, reason=reason, api_key=self.api_key,
            decided_by=services.approval_decider(api_key=self.api_key, username=self.user_label),
            actor=self.actor())
        return {"approval_id": str(approval.pk), "status": approval.status}

    async def cmd_approve(self, content: dict[str, Any]) -> dict[str, Any]:
        return await self._decide(content, "approve")

    async def cmd_deny(self, content: dict[str, Any]) -> dict[str, Any]:
        return await self._decide(content, "deny")
