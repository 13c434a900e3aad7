"""The operator feed's WebSocket consumer (``/ws``; the wiring check is :mod:`agents.feed.ping`).

The feed (issue 11, reference 003 "WebSocket API") is a thin interface over
:mod:`agents.outlet.realtime` (where every event comes from), the selectors (the snapshot) and the
operator services (its commands). Protocol, in the order a client sees it:

1. Handshake (:mod:`agents.http.middleware`). A browser's ``Origin`` must be Gaia's own (on a host
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

A slow client never slows anyone else (:mod:`agents.feed.sending`): past
``GAIA_FEED_QUEUE_MAX`` queued events new ones are dropped and counted, and the client gets
``{"event": "lagged", "missed": N}`` where the gap is (it can resync over REST). The commands
are read in :mod:`agents.feed.commands`.
"""

from __future__ import annotations

import asyncio
import collections
from typing import Any
from urllib.parse import parse_qs

from channels.consumer import get_handler_name
from channels.generic.websocket import AsyncJsonWebsocketConsumer
from django.conf import settings
from django.utils import timezone

from agents import services
from agents.feed import fanout
from agents.feed.commands import CLOSE_UNAUTHENTICATED, COMMANDS, FeedCommands
from agents.feed.input import feed_snapshot, header_key
from agents.feed.sending import FeedSending
from agents.infra import metrics
from agents.infra.database import run_db
from agents.kernel.exceptions import AuthenticationFailed, PermissionDenied
from agents.models import ApiKey
from agents.outlet import realtime

# Application close codes (RFC 6455 section 7.4.2 leaves 4000-4999 to applications; the
# thousands digit mirrors the HTTP status). CLOSE_UNAUTHENTICATED is agents.feed.commands'.
CLOSE_FORBIDDEN = 4003
# RFC 6455 1013 "Try Again Later": the feed cannot reach its channel layer (Redis) now.
CLOSE_TRY_AGAIN = 1013
LAYER_DOWN = "the live feed's channel layer (Redis) cannot be reached; reconnect shortly"

__all__ = ["CLOSE_FORBIDDEN", "CLOSE_TRY_AGAIN", "CLOSE_UNAUTHENTICATED", "COMMANDS",
           "FeedConsumer"]


class FeedConsumer(FeedCommands, FeedSending, AsyncJsonWebsocketConsumer):
    """The operator feed at ``/ws`` (see the module docstring for the protocol): connection and
    authentication here, commands in :class:`FeedCommands`, sending in :class:`FeedSending`."""

    # No channel of its own: every event comes through this process's fan-out
    # (agents.feed.fanout), so a socket reads nothing from Redis itself (an unconfigured alias:
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
        if await self._key_checked(services.api_key_authenticate, raw=raw):
            await self._start()

    async def _key_checked(self, check: Any, **args: Any) -> bool:
        """Run a key ``check`` (a service) for the operator scope and keep the key it returns;
        a refusal closes the socket: 4001 for a key that is no good, 4003 for one without the
        scope. One rule for the handshake, the first message and every re-check."""
        try:
            self.api_key = await run_db(check, scope=ApiKey.Scope.OPERATOR, **args)
        except AuthenticationFailed as exc:
            await self._refuse(CLOSE_UNAUTHENTICATED, exc.message)
            return False
        except PermissionDenied:
            await self._refuse(CLOSE_FORBIDDEN, "the key lacks the 'operator' scope")
            return False
        return True

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
        metrics.FEED_SUBSCRIBERS.inc()
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
            self._joined = False
            metrics.FEED_SUBSCRIBERS.dec()
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
        if await self._key_checked(services.api_key_recheck, key=self.api_key):
            self._expiry_arm()
