"""One conversational turn, dialect-neutral: the thread lease, the backend stream with
keepalives and timeouts, persistence of whatever happened (reply, partial reply, error), and
what operators see of it (feed events, a kill from any process).

Opened by :func:`agents.turns.turn_open` (the one door), then :meth:`Turn.open` (errors here
are the interface's), :meth:`Turn.first` (a provider failing before any output is an error of
the request) and :meth:`Turn.events`. It is in this process's registry while it runs
(:mod:`agents.turns.registry`): a kill or a snapshot request reaches it from any process."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

from django.conf import settings

from agents import selectors, services
from agents.backends import backend_for, fallback_stream
from agents.backends.completion import COMPLETION
from agents.infra import metrics, tracing
from agents.infra.database import run_db
from agents.kernel import llm
from agents.kernel.exceptions import Conflict, TurnInterrupted, TurnKilled
from agents.outlet import events, realtime
from agents.turns import checkpoint, registry, requests, spend
from agents.turns.ending import INTERRUPTED, KILLED, TurnEnding
from agents.turns.loop import AgentLoop
from agents.turns.reply import KILLED_ERROR, Reply
from agents.turns.spec import TurnSpec, events_to_end

log = logging.getLogger("gaia.turns")
prompt_log = logging.getLogger("gaia.prompts")

KEEPALIVE = object()  # yielded by Turn.events when the backend has been silent for a while
_END = object()  # queued after the backend's last event
_BUSY = object()  # queued when a named session's thread turned out to be busy


@dataclass
class _Failed:
    error: Exception


class Turn(TurnEnding):
    """One agent's turn (:class:`agents.turns.TurnLike`); how it ends is
    :class:`agents.turns.ending.TurnEnding`'s."""

    def __init__(self, spec: TurnSpec) -> None:
        self.spec = spec
        self.agent = spec.agent
        self.result = services.TurnResult(response_id=spec.response_id)
        self._begin_later: Any = None  # the begin of a turn with client-held history
        self._begin_task: asyncio.Future[services.TurnStart | None] | None = None
        self.request: llm.LLMRequest | None = None
        self.input_tokens: int | None = None  # counted by open() when the agent has a limit
        self.trimmed = 0  # the oldest messages left out to fit the window (context_overflow)
        self.start: services.TurnStart | None = None  # the stored turn, once it is
        self.reservation: spend.Reservation | None = None  # its tokens and budgets' holds
        self._events: asyncio.Queue[Any] = asyncio.Queue()  # filled by _pump
        self._pump_task: asyncio.Task[None] | None = None
        self.reply = Reply()
        self.checkpoint = checkpoint.Checkpoint()  # the reply so far, kept on its thread
        self.closed = False
        self.killed = False
        self._interrupted = False
        self._waiting = False
        self._registered: str | None = None  # the thread id this turn is registered under
        self.lease_token = ""  # the lease it holds there (renewed by the registry)
        self._passages: list[dict[str, Any]] | None = None  # knowledge the model was given
        self.agent_loop: Any = None  # the agent loop, when the agent runs tools of its own
        self.backend_accepts_tools = False
        self.upstream_seconds = 0.0  # how long its provider streams were open (metrics)
        self.loop = asyncio.get_running_loop()
        # Its invoke_agent span (tracing on): a child of the client's traceparent, or of the
        # calling agent's tool call.
        self.span = tracing.turn_span(agent=self.agent, model=spec.request.model,
                                      provider=getattr(self.agent.provider, "kind", ""),
                                      delegated=spec.depth > 0) if tracing.ENABLED else None
        self.ending_init()
        realtime.bind()

    # -- opening ---------------------------------------------------------------------------

    async def open(self) -> None:
        """Check the request, take the thread's lease and build the backend request.

        An explicit thread (``X-Gaia-Thread-Id``) may continue its stored conversation, so
        its history is read, under the thread's lease, before anything is sent. Otherwise the
        history the provider sees is the client's own, so the turn is stored while the
        provider works on its first token instead of before: from the moment the request is
        on its way (the database write would otherwise compete with sending it), and
        :meth:`first` joins the two. A derived session never waits for a lease. A named
        session (a session header) whose thread turns out to be busy with another turn stops
        the request it sent, waits for the thread and sends it again (:meth:`first`).

        Raises :class:`GaiaError` subclasses (400 context or images, 404 thread) before any
        output exists; 409 (thread busy) comes from :meth:`first`. Whatever stops it here
        (an error, a cancellation) leaves a stored turn recorded as ended.
        """
        async with self.opening():
            await self._open()

    async def _open(self) -> None:
        spec = self.spec
        client = spec.request
        backend = backend_for(spec.agent.provider)
        requests.request_check(spec.agent, backend, client)
        # Checked and held before anything is stored; then the turn is stored in the same
        # database hop, before its request is sent (not while the provider works).
        self.reservation = await spend.reservation(spec)
        if spec.thread_id or spec.store_first or self.reservation is not None:
            self.start = await self._begin(exclusive=bool(
                spec.thread_id or spec.store_first or spec.session_key))
            self.request = self.build_request(self.start.history)
        else:
            self.request = self.build_request(client.messages)
            exclusive = bool(spec.session_key)
            self._begin_later = lambda: self._begin_once(exclusive=exclusive)
        # A text completion (/v1/completions) continues the client's text: no knowledge,
        # memory or tools of the agent's (agents.backends.completion).
        completing = COMPLETION in client.extra
        if getattr(spec.agent, "knowledge_base_ids", None) and not completing:
            await self._add_knowledge()
        fitted = await requests.request_fit(self.agent, backend, self.request)
        self.request, self.input_tokens = fitted.request, fitted.input_tokens
        self.backend_accepts_tools = backend.accepts_tools
        self.agent_loop = await AgentLoop.prepare(self) if not completing and (
            spec.agent.tools or spec.agent.memory != "off" or client.client_mcp
            or client.approval_answers) else None
        self.trimmed, self.result.note = fitted.trimmed, fitted.note
        if settings.GAIA_SHOW_PROMPTS:
            prompt_log.debug("prompt to %s: %r", spec.agent.provider.name, self.request)

    def build_request(self, history: list[llm.Message]) -> llm.LLMRequest:
        """The client's request to this turn's agent over ``history`` (agents.turns.requests)."""
        client = self.spec.request
        return requests.agent_request(self.agent, messages=history, system=client.system,
                                      base=client, workspace=self.spec.workspace_root)

    async def _add_knowledge(self) -> None:
        """Give the model the best passages of the agent's knowledge bases for the
        conversation (the last user message, and the one before), with their sources; the
        reply records which (``Message.passages``, ``X-Gaia-Passages``, the feed)."""
        assert self.request is not None
        users = [m.text for m in self.request.messages if m.role == "user" and m.text.strip()]
        self.request, passages = await requests.with_knowledge(
            self.agent, self.request, " ".join(users[-2:]))
        if passages:
            self._passages = passages
            realtime.send_event(events.knowledge_used(
                agent=self.agent.slug, thread_id=self._registered,
                response_id=self.spec.response_id, passages=passages))

    async def _begin_once(self, *, exclusive: bool) -> services.TurnStart | None:
        """Store the turn under its thread's lease; ``None`` if another turn holds it (only
        when ``exclusive``: a derived session that finds its thread busy gets a new one).
        A turn with a reservation makes it in the same hop (its first time)."""
        spec = self.spec
        session_key = spec.session_key or services.session_key_fallback(
            model=spec.agent.slug, user=spec.user, messages=spec.request.messages
        )
        reserved = self.reservation
        call: Any = services.thread_turn_begin
        if reserved is not None and not reserved.done:  # not on a second try at the lease
            call = functools.partial(spend.reserved_begin, reserved)
        return await run_db(
            call,
            agent=spec.agent, api_key=spec.api_key, session_key=session_key,
            thread_id=spec.thread_id, user=spec.user, incoming=spec.request.messages,
            workspace_root=spec.workspace_root, dialect=spec.dialect,
            lease_seconds=settings.GAIA_THREAD_LOCK_SECONDS, exclusive=exclusive,
            title=spec.title, run_id=spec.run_id, parent_message_id=spec.parent_message_id,
            sender=spec.sender, append=spec.append,
        )

    async def _begin(self, *, exclusive: bool = True) -> services.TurnStart:
        """Wait for the thread's lease (at most ``GAIA_THREAD_WAIT_SECONDS``, else 409) and
        store the turn (``exclusive=False``: a derived session, never waiting)."""
        wait = self.spec.lease_wait
        deadline = time.monotonic() + (settings.GAIA_THREAD_WAIT_SECONDS if wait is None
                                       else wait)
        delay = 0.02
        try:
            while True:
                # Shielded: a turn stopped meanwhile records its end on what this stores.
                self._begin_task = asyncio.ensure_future(
                    self._begin_once(exclusive=exclusive))
                start = await asyncio.shield(self._begin_task)
                if start is not None:
                    self._register(start)
                    return start
                self._set_waiting(True)
                if time.monotonic() > deadline:
                    raise Conflict("Another request is still running on this thread.",
                                   code="thread_busy")
                await asyncio.sleep(delay)
                delay = min(delay * 2, 0.25)
        finally:
            self._set_waiting(False)

    def _set_waiting(self, waiting: bool) -> None:
        if waiting != self._waiting:
            self._waiting = waiting
            selectors.turn_waiting(agent_id=self.agent.pk, change=1 if waiting else -1)

    def _register(self, start: services.TurnStart) -> None:
        self.lease_token = start.lock_token
        key = str(start.thread_id)
        if self._registered != key:
            self._unregister()
            registry.register(self, key)
            self._registered = key
            metrics.turn_started(self.agent.slug)

    def _unregister(self) -> None:
        if self._registered is not None:
            registry.unregister(self, self._registered)
            self._registered = None
            metrics.turn_ended(self.agent.slug)

    def _begin_now(self) -> None:
        """Start storing a derived session's turn (once; the backend calls this when its
        request is sent, and :meth:`_started` if it never got that far)."""
        if self._begin_later is not None:
            self._begin_task = asyncio.ensure_future(self._begin_later())
            self._begin_task.add_done_callback(self._begun)
            self._begin_later = None

    def _begun(self, task: asyncio.Future[services.TurnStart | None]) -> None:
        if task.cancelled() or task.exception() is not None:
            return
        start = task.result()
        if start is None:
            # The thread is busy: stop the request now, not after its first token.
            if self._pump_task is not None:
                self._pump_task.cancel()
            self._events.put_nowait(_BUSY)
        else:
            self._register(start)

    async def started(self) -> services.TurnStart | None:
        """The turn's thread record once stored (raises why storing it failed)."""
        self._begin_now()
        if self.start is None and self._begin_task is not None:
            self.start = await asyncio.shield(self._begin_task)
        return self.start

    # -- what the interface reads -------------------------------------------------------------

    @property
    def model(self) -> str:
        """The model id the reply names: the agent that answered."""
        return self.agent.slug

    @property
    def thread_id(self) -> Any:
        assert self.start is not None, "the turn's thread is known once first() returned"
        return self.start.thread_id

    async def input_token_count(self) -> int:
        """The provider request's input tokens (counted by :meth:`open` when the agent has
        a limit, else now)."""
        assert self.request is not None
        if self.input_tokens is None:
            return await requests.count_tokens(backend_for(self.agent.provider), self.request)
        return self.input_tokens

    def log_facts(self) -> dict[str, Any]:
        """What a request's log line says of its turn: agent, thread, how the thread was
        found (``new|forked|continued|stateful`` / the session's source), TTFT, tokens."""
        start, spec, result = self.start, self.spec, self.result
        source = ("thread-id" if spec.thread_id else
                  spec.session_key.split(":", 1)[0] if spec.session_key else "hash")
        return {
            "agent": self.agent.slug,
            "thread_id": str(start.thread_id) if start is not None else None,
            "thread_found": f"{start.found}/{source}" if start is not None else None,
            "ttft_ms": result.ttft_ms,
            "input_tokens": result.input_tokens if self.closed else None,
            "output_tokens": result.output_tokens if self.closed else None,
            "finish_reason": result.finish_reason if self.closed else None,
            "error_kind": self.error_kind,
            "effective_status": self.error_status,
        }

    def reply_headers(self) -> dict[str, str]:
        headers = {"X-Gaia-Thread-Id": str(self.thread_id)}
        if self.spec.route is not None:
            headers["X-Gaia-Routed-To"] = self.agent.slug
        if self.result.provider:
            headers["X-Gaia-Provider"] = self.result.provider
        if self._passages:
            headers["X-Gaia-Passages"] = ",".join(str(p["chunk_id"]) for p in self._passages)
        if self.trimmed:
            headers["X-Gaia-Context-Trimmed"] = str(self.trimmed)
        return headers

    # -- streaming -------------------------------------------------------------------------

    async def first(self, wait: float) -> Any:
        """The first event, waiting at most ``wait`` seconds; ``KEEPALIVE`` if none came yet.
        Returns once the turn's messages are stored too (so ``thread_id`` is known). A backend
        error here propagates (and is recorded): nothing was sent to the client yet."""
        assert self.request is not None
        self._set_waiting(True)
        self._send(on_sent=self._on_sent)
        try:
            event = await self._next(wait)
            if event is _BUSY or await self.started() is None:
                event = await self._resend_when_free(wait)
            return event
        except BaseException as exc:
            await self._shielded_close(exc)
            raise

    def _on_sent(self) -> None:
        """The backend's request is on the wire: the turn no longer waits for its provider,
        and a derived session's turn is stored meanwhile."""
        self._set_waiting(False)
        self._begin_now()

    def _send(self, *, on_sent: Any = None) -> None:
        assert self.request is not None
        sent = on_sent or (lambda: self._set_waiting(False))
        if self.agent_loop is not None:
            stream = self.agent_loop.run(lambda r: self.provider_stream(r, on_sent=sent))
        else:
            stream = self.provider_stream(self.request, on_sent=sent)
        self._pump_task = asyncio.create_task(self._pump(stream))

    def provider_stream(self, request: llm.LLMRequest, *, on_sent: Any = None) -> Any:
        """The agent's providers answering ``request`` (its fallbacks after it)."""
        chain = getattr(self.agent, "provider_chain", None) or [self.agent.provider]
        return fallback_stream(chain, request, on_sent=on_sent, on_answer=self._answered_by,
                               on_fallback=self._fell_back, on_done=self._upstream_done)

    def _upstream_done(self, seconds: float) -> None:
        self.upstream_seconds += seconds

    def waiting_for_approval(self, waiting: bool) -> None:
        self._set_waiting(waiting)

    def _answered_by(self, provider: Any) -> None:
        self.result.provider = provider.name

    def _fell_back(self, failed: Any, following: Any, error: Exception) -> None:
        """A provider failed before its first token: the feed hears of the hand-over."""
        log.warning("agent %s: provider %s failed (%s); trying %s", self.agent.slug,
                    failed.name, error, following.name)
        realtime.send_event(events.provider_fallback(
            agent=self.agent.slug, thread_id=self._registered,
            response_id=self.spec.response_id, failed_provider=failed.name,
            next_provider=following.name, error=str(getattr(error, "message", error))))

    async def _resend_when_free(self, wait: float) -> Any:
        """A named session's thread was busy with another turn: the request was sent in the
        expectation that it was not (the usual case, and the provider's work then overlaps
        with storing the turn). Stop it before any of its output is used, wait for the
        thread (409 after ``GAIA_THREAD_WAIT_SECONDS``) and send it again."""
        await self._stop_pump()
        self._events = asyncio.Queue()
        self.result = services.TurnResult(response_id=self.spec.response_id)
        self.reply = Reply()
        self.start = await self._begin()
        self._set_waiting(True)
        self._send()
        return await self._next(wait)

    async def _pump(self, stream: Any) -> None:
        """Move the backend's events to the queue as they come, then ``_END`` or the error.

        One task reads the backend for the whole turn, so that waiting for an event with a
        keepalive deadline costs a queue read, not a new task per event."""
        # The turn's span is current for the backend's work (its chat and tool spans'
        # parent); with tracing off, nothing is attached.
        token = tracing.attach(self.span) if self.span is not None else None
        try:
            async with contextlib.aclosing(stream):
                async for event in stream:
                    self._events.put_nowait(event)
        except Exception as exc:  # noqa: BLE001 - re-raised by _next, in the turn's task
            self._events.put_nowait(_Failed(exc))
        else:
            self._events.put_nowait(_END)
        finally:
            if token is not None:
                tracing.detach(token)

    async def _next(self, wait: float) -> Any:
        """The next event, ``None`` at the end, or ``KEEPALIVE`` after ``wait`` seconds."""
        try:
            # Usually there already (a read from the provider brings several): no timer then.
            event = self._events.get_nowait()
        except asyncio.QueueEmpty:
            try:
                async with asyncio.timeout(wait):
                    event = await self._events.get()
            except TimeoutError:
                return KEEPALIVE
        if event is _END:
            return None
        if event is _BUSY:
            return event
        if event is KILLED:
            raise TurnKilled(KILLED_ERROR)
        if event is INTERRUPTED:
            raise TurnInterrupted(services.INTERRUPTED_ERROR)
        if isinstance(event, _Failed):
            if self.killed:
                raise TurnKilled(KILLED_ERROR)
            if self._interrupted:
                raise TurnInterrupted(services.INTERRUPTED_ERROR)
            raise event.error
        self.reply.absorb(event)
        if self._registered is not None and self.reply.delta_due():
            self._publish_delta()
        self.checkpoint.offer(self, event)
        return event

    def publish_snapshot(self) -> None:
        """The reply so far, whole, for a page that subscribed late (deltas continue it)."""
        if self._registered is not None and not self.closed:
            self._publish_delta()  # what is due first: the snapshot is no older than it
            realtime.send_event(events.message_snapshot(
                thread_id=self._registered, agent=self.agent.slug,
                response_id=self.spec.response_id, text="".join(self.reply.text),
                reasoning="".join(self.reply.reasoning)))

    def _publish_delta(self) -> None:
        """Tell the feed what the reply gained since the last time (coalesced: at most one
        event per ``reply.DELTA_INTERVAL`` per turn, however fast the tokens come)."""
        delta = self.reply.delta()
        if delta is not None:
            realtime.send_event(events.message_delta(
                thread_id=self._registered, agent=self.agent.slug,
                response_id=self.spec.response_id, **delta))

    def events(self, first: Any, keepalive: float) -> AsyncIterator[Any]:
        """``first`` then every later event (and ``KEEPALIVE`` markers) to the end; the
        outcome is recorded whatever happens."""
        return events_to_end(first, self._next, keepalive, self._shielded_close)

    async def collect(self, first: Any) -> services.TurnResult:
        """Run the turn to its end without streaming (JSON replies)."""
        async for _ in self.events(first, keepalive=3600):
            pass
        return self.result

    # -- closing ---------------------------------------------------------------------------

    @property
    def usage(self) -> llm.Usage:
        assert self.request is not None
        return self.reply.usage_for(self.request)
