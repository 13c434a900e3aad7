"""One conversational turn, dialect-neutral: the thread lease, the backend stream with
keepalives and timeouts, persistence of whatever happened (reply, partial reply, error), and
what operators see of it (feed events, a kill from any process).

Every interface that starts a turn (the /v1 dialects, operator inject, teams, benchmark runs)
builds a :class:`TurnSpec`, calls :meth:`Turn.open` (errors here become the interface's
errors), :meth:`Turn.first` (the first backend event, so a provider failing before any output
is still an error of the request) and then iterates :meth:`Turn.events`.

Every turn of this process is in a registry while it runs, so an operator's kill (a control
message through the channel layer, :func:`thread_kill_local`) stops it whichever process
received the kill.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
import uuid
from dataclasses import dataclass, field
from typing import Any

from django.conf import settings

from agents import events, llm, realtime, selectors, services
from agents.backends import backend_for, fallback_stream
from agents.database import run_db
from agents.exceptions import (
    Conflict,
    ContextTooLong,
    GaiaError,
    InvalidRequest,
    TurnInterrupted,
    TurnKilled,
)
from agents.models import Agent, ApiKey

log = logging.getLogger("gaia.turns")
prompt_log = logging.getLogger("gaia.prompts")

KEEPALIVE = object()  # yielded by Turn.events when the backend has been silent for a while
_END = object()  # queued after the backend's last event
_BUSY = object()  # queued when a named session's thread turned out to be busy
_KILLED = object()  # queued when an operator killed the turn
_INTERRUPTED = object()  # queued when the server stops before the turn has finished

# A streaming reply's progress reaches the feed at most this often per turn.
DELTA_INTERVAL = 0.1
MAX_CHARS_PER_TOKEN = llm.MAX_CHARS_PER_TOKEN
COUNT_ON_LOOP_TOKENS = llm.COUNT_ON_LOOP_TOKENS


async def count_tokens(backend: Any, request: llm.LLMRequest, *, rough: int | None = None
                       ) -> int:
    """The backend's count of ``request``'s input tokens, off the event loop when large."""
    if rough is None:
        rough = llm.estimate_request_tokens(request)
    if rough <= COUNT_ON_LOOP_TOKENS:
        return backend.count_tokens(request)[0]
    return (await asyncio.to_thread(backend.count_tokens, request))[0]


@dataclass
class _Failed:
    error: Exception


_background: set[asyncio.Task[Any]] = set()

# The turns running in this process, by thread id (known once the turn is stored).
_inflight: dict[str, set[Turn]] = {}


def inflight_turns() -> dict[str, set[Turn]]:
    """The turns running in this process, by thread id (read-only use)."""
    return _inflight


# -- leases ---------------------------------------------------------------------------------
# A turn's lease on its thread is short (``GAIA_THREAD_LOCK_SECONDS``) and renewed while the
# turn runs, by one task per process for all its turns (one write per renewal period, none
# per turn): a process that dies stops renewing, and its threads are free a lease later.

_keeper: asyncio.Task[None] | None = None
_draining = False  # set when the server has been told to stop (gaia_site.lifespan)


def lease_renew_interval() -> float:
    return max(0.05, settings.GAIA_THREAD_LOCK_SECONDS / 3)


def _lease_tokens() -> list[str]:
    return [turn._lease_token for turns in _inflight.values() for turn in turns
            if turn._lease_token and not turn._closed]


def _keeper_ensure() -> None:
    """Start this process's lease keeper on the running loop unless it runs already."""
    global _keeper
    if _keeper is None or _keeper.done() or _keeper.get_loop() is not asyncio.get_running_loop():
        _keeper = asyncio.get_running_loop().create_task(_keep_leases(), name="gaia-leases")


async def _keep_leases() -> None:
    """Renew the leases of every turn of this process until none is left."""
    while True:
        await asyncio.sleep(lease_renew_interval())
        tokens = _lease_tokens()
        if not tokens:
            return
        try:
            await run_db(services.thread_leases_renew, tokens=tokens,
                         lease_seconds=settings.GAIA_THREAD_LOCK_SECONDS)
        except Exception:  # a database hiccup: try again next period, the leases still hold
            log.exception("could not renew %d thread leases", len(tokens))


def drain_begin() -> None:
    """The server is stopping: turns that have not finished when it cancels them are recorded
    as ``interrupted`` (not as a client that went away)."""
    global _draining
    _draining = True


async def drain_wait(within: float) -> None:
    """Wait (at most ``within`` seconds) until every turn of this process is recorded and
    its lease released; turns still running are stopped and recorded as interrupted."""
    drain_begin()
    for turns in list(_inflight.values()):
        for turn in list(turns):
            turn.interrupt()
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        pending = [t for t in _background if not t.done()]
        if not pending and not _inflight:
            return
        if pending:
            await asyncio.wait(pending, timeout=max(0.0, deadline - time.monotonic()))
        else:
            await asyncio.sleep(0.02)  # an interrupted turn is on its way to closing


@realtime.on_control("reload")
def reload_local(message: dict[str, Any]) -> None:
    """Drop this process's cached keys and agents (``organism/reload``). Provider clients are
    kept: they are keyed by their provider's last edit already, and dropping the local
    model's would load it again for nothing."""
    selectors.access_cache_drop()


@realtime.on_control("turn_kill")
def thread_kill_local(message: dict[str, Any]) -> None:
    """Stop every turn of this process running on ``message["thread_id"]``."""
    for turn in list(_inflight.get(str(message.get("thread_id")), ())):
        turn.kill()


@dataclass
class TurnSpec:
    agent: Agent
    api_key: ApiKey | None
    request: llm.LLMRequest  # messages: the client's history; system: the client's system text
    dialect: str
    response_id: str
    thread_id: str | None = None
    session_key: str | None = None
    user: str | None = None
    thread_history: list[llm.Message] | None = None  # set when continuing a stored thread
    workspace_root: str | None = None  # a coding client's workspace (openai_api.sessions)
    title: str | None = None  # a new thread's title (default: its first user text)
    # Store the turn before the provider is asked (operator inject: the caller needs the
    # message id at once), waiting at most ``lease_wait`` seconds for a busy thread.
    store_first: bool = False
    lease_wait: float | None = None
    # How a virtual model (``auto``) reached this agent: stored on the thread, and the reply
    # says so (``X-Gaia-Routed-To``).
    route: dict[str, Any] | None = None


@dataclass
class ToolCallAcc:
    id: str = ""
    name: str = ""
    arguments: list[str] = field(default_factory=list)


class Turn:
    def __init__(self, spec: TurnSpec) -> None:
        self.spec = spec
        self.agent = spec.agent
        self.result = services.TurnResult(response_id=spec.response_id)
        self._begin_later: Any = None  # the begin of a turn with client-held history
        self._begin_task: asyncio.Future[services.TurnStart | None] | None = None
        self._workspace: str | None = None
        self.request: llm.LLMRequest | None = None
        self.input_tokens: int | None = None  # counted by open() when the agent has a limit
        self.trimmed = 0  # the oldest messages left out to fit the window (context_overflow)
        self._start: services.TurnStart | None = None
        self._events: asyncio.Queue[Any] = asyncio.Queue()  # filled by _pump
        self._pump_task: asyncio.Task[None] | None = None
        self._t0 = time.monotonic()
        self._first_at: float | None = None
        self._tools: dict[int, ToolCallAcc] = {}
        self._text: list[str] = []
        self._reasoning: list[str] = []
        self._usage: llm.Usage | None = None
        self._closed = False
        self._killed = False
        self._interrupted = False
        self._waiting = False
        self._registered: str | None = None  # the thread id this turn is registered under
        self._lease_token = ""  # the lease it holds there (renewed by the lease keeper)
        self._delta_at = 0.0  # when the feed last heard of this reply's progress
        self._delta_sent = (0, 0, 0)  # text, reasoning and tool-call parts already published
        self._passages: list[dict[str, Any]] | None = None  # knowledge the model was given
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
        output exists; 409 (thread busy) comes from :meth:`first`.
        """
        spec = self.spec
        client = spec.request
        backend = backend_for(spec.agent.provider)
        if not backend.accepts_images and any(m.has_images for m in client.messages):
            raise InvalidRequest(
                f"The model '{spec.agent.slug}' cannot read images (its provider "
                f"'{spec.agent.provider.name}' is text-only). Remove the images or pick "
                "another model.",
                param="messages", code="images_not_supported",
            )
        honours = getattr(backend, "honours", None)
        for name in llm.ANSWER_FIELDS:
            if honours is not None and name in client.extra and name not in honours:
                raise InvalidRequest(
                    f"The model '{spec.agent.slug}' (a '{spec.agent.provider.kind}' provider) "
                    f"cannot honour '{name}'. Remove it, or pick another model.",
                    param=name, code="unsupported_parameter")
        if client.tools and not backend.accepts_tools:
            raise InvalidRequest(
                f"The model '{spec.agent.slug}' cannot call client tools.",
                param="tools", code="tools_not_supported",
            )
        workspace = self._workspace = spec.workspace_root
        if spec.thread_id or spec.store_first:
            self._start = await self._begin(workspace)
            self.request = self.build_request(self._start.history, workspace)
        else:
            self.request = self.build_request(client.messages, workspace)
            exclusive = bool(spec.session_key)
            self._begin_later = lambda: self._begin_once(workspace, exclusive=exclusive)
        if getattr(spec.agent, "knowledge_base_ids", None):
            await self._add_knowledge()
        try:
            await self._fit_window(backend)
        except ContextTooLong as error:
            self._begin_later = None  # nothing of it is stored (unless it holds a lease)
            await self.close(error=error)
            raise
        if settings.GAIA_SHOW_PROMPTS:
            prompt_log.debug("prompt to %s: %r", spec.agent.provider.name, self.request)

    async def _add_knowledge(self) -> None:
        """Give the model the best passages of the agent's knowledge bases for the
        conversation (the last user message, and the one before), with their sources; the
        reply records which (``Message.passages``, ``X-Gaia-Passages``, the feed)."""
        assert self.request is not None
        users = [m.text for m in self.request.messages if m.role == "user" and m.text.strip()]
        query = " ".join(users[-2:])
        if not query:
            return
        passages = await run_db(selectors.knowledge_retrieve,
                                knowledge_base_ids=self.agent.knowledge_base_ids, query=query)
        if not passages:
            return
        system = self.request.system
        self.request = self.request.replace(system=(system + "\n\n" if system else "")
                                            + selectors.passages_prompt(passages))
        self._passages = [{k: v for k, v in p.items() if k != "text"} for p in passages]
        realtime.send_event(events.knowledge_used(
            agent=self.agent.slug, thread_id=self._registered,
            response_id=self.spec.response_id, passages=self._passages))

    async def _fit_window(self, backend: Any) -> None:
        """Keep the provider's input within the agent's ``max_input_tokens`` and the model's
        own window (a backend that knows it has ``input_window()``). Past it, the agent's
        ``context_overflow`` decides: ``error`` (400 naming the setting) or ``trim_oldest``:
        the oldest turns are dropped (the system prompt and the latest message are kept) and
        the reply says so (``X-Gaia-Context-Trimmed``, and a note on the stored reply).

        Input with more characters than even the longest tokens could fit is refused without
        counting (counting 18 MB takes seconds); large counts run off the event loop.
        Raises :class:`ContextTooLong` when the request cannot be served."""
        assert self.request is not None
        agent = self.agent
        limit = agent.max_input_tokens or None
        window_of = getattr(backend, "input_window", None)
        window = window_of() if window_of is not None else None
        if window:
            room = window - (self.request.max_output_tokens or 0)
            limit = min(limit, room) if limit else room
        if not limit:
            return
        trim = agent.context_overflow == "trim_oldest"
        bound = limit * MAX_CHARS_PER_TOKEN // 4  # no text this rough could fit in the limit
        rough = llm.estimate_request_tokens(self.request)  # about a token per 4 characters
        while trim and rough > bound and self._trim_oldest_turn():
            rough = llm.estimate_request_tokens(self.request)
        if rough > bound:
            # Refused without counting: counting 18 MB would take seconds.
            raise ContextTooLong(
                f"This conversation has at least {rough * 4 // MAX_CHARS_PER_TOKEN} input "
                f"tokens; the model '{agent.slug}' accepts {limit}.", param="messages")
        used = self.input_tokens = await count_tokens(backend, self.request, rough=rough)
        if used > limit and not trim:
            raise ContextTooLong(
                f"This conversation has about {used} input tokens; the model '{agent.slug}' "
                f"accepts {limit}. Set the agent's context_overflow to trim_oldest to drop the "
                "oldest turns, or raise its max_input_tokens (and its model's window).",
                param="messages")
        while used > limit and self._trim_oldest_turn():
            used = self.input_tokens = await count_tokens(backend, self.request)
        if used > limit:
            raise ContextTooLong(
                f"Even with its oldest turns trimmed, this request needs about {used} input "
                f"tokens (the system prompt, the tools and the latest message); the model "
                f"'{agent.slug}' accepts {limit}. Raise the agent's max_input_tokens (and its "
                "model's window), or send a shorter system prompt.", param="messages")
        if self.trimmed:
            self.result.note = (
                f"Trimmed the {self.trimmed} oldest messages to fit the model's window "
                f"({limit} input tokens; context_overflow=trim_oldest).")

    def _trim_oldest_turn(self) -> bool:
        """Drop the oldest whole turn of the request: up to the next user message, else up to
        the call the latest tool results answer (a result never loses its call). ``False``
        when only the latest message is left."""
        assert self.request is not None
        messages = self.request.messages
        starts = [i for i, m in enumerate(messages) if i and m.role == "user"]
        calls = [i for i, m in enumerate(messages) if m.role == "assistant"]
        cut = starts[0] if starts else (calls[-1] if messages and messages[-1].role == "tool"
                                        and calls else len(messages) - 1)
        if cut <= 0:
            return False
        self.trimmed += cut
        self.request = self.request.replace(messages=list(messages[cut:]))
        return True

    async def _begin_once(self, workspace: str | None, *, exclusive: bool
                          ) -> services.TurnStart | None:
        """Store the turn under its thread's lease; ``None`` if another turn holds it (only
        when ``exclusive``: a derived session that finds its thread busy gets a new one)."""
        spec = self.spec
        session_key = spec.session_key or services.session_key_fallback(
            model=spec.agent.slug, user=spec.user, messages=spec.request.messages
        )
        return await run_db(
            services.thread_turn_begin,
            agent=spec.agent, api_key=spec.api_key, session_key=session_key,
            thread_id=spec.thread_id, user=spec.user, incoming=spec.request.messages,
            workspace_root=workspace, dialect=spec.dialect,
            lease_seconds=settings.GAIA_THREAD_LOCK_SECONDS, exclusive=exclusive,
            title=spec.title,
        )

    async def _begin(self, workspace: str | None) -> services.TurnStart:
        """Wait for the thread's lease (at most ``GAIA_THREAD_WAIT_SECONDS``, else 409) and
        store the turn."""
        wait = self.spec.lease_wait
        deadline = time.monotonic() + (settings.GAIA_THREAD_WAIT_SECONDS if wait is None
                                       else wait)
        delay = 0.02
        try:
            while True:
                start = await self._begin_once(workspace, exclusive=True)
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
        self._lease_token = start.lock_token
        key = str(start.thread_id)
        if self._registered != key:
            self._unregister()
            _inflight.setdefault(key, set()).add(self)
            self._registered = key
            _keeper_ensure()

    def _unregister(self) -> None:
        if self._registered is not None:
            turns = _inflight.get(self._registered)
            if turns is not None:
                turns.discard(self)
                if not turns:
                    del _inflight[self._registered]
            self._registered = None

    def kill(self) -> None:
        """Stop the turn (an operator's kill): the provider call is cancelled, the partial
        reply is stored with finish reason ``killed`` and the client is told in its dialect."""
        if self._killed or self._closed:
            return
        self._killed = True
        if self._pump_task is not None:
            self._pump_task.cancel()
        self._events.put_nowait(_KILLED)

    def interrupt(self) -> None:
        """Stop the turn because its server is stopping: recorded as ``interrupted``."""
        if self._killed or self._closed:
            return
        self._interrupted = True
        if self._pump_task is not None:
            self._pump_task.cancel()
        self._events.put_nowait(_INTERRUPTED)

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

    async def _started(self) -> services.TurnStart | None:
        """The turn's thread record once stored (raises why storing it failed)."""
        self._begin_now()
        if self._start is None and self._begin_task is not None:
            self._start = await asyncio.shield(self._begin_task)
        return self._start

    @property
    def model(self) -> str:
        """The model id the reply names: the agent that answered."""
        return self.agent.slug

    @property
    def thread_id(self) -> Any:
        assert self._start is not None, "the turn's thread is known once first() returned"
        return self._start.thread_id

    def log_facts(self) -> dict[str, Any]:
        """What a request's log line says of its turn: agent, thread, how the thread was
        found (``new|forked|continued|stateful`` / the session's source), TTFT, tokens."""
        start, spec, result = self._start, self.spec, self.result
        source = ("thread-id" if spec.thread_id else
                  spec.session_key.split(":", 1)[0] if spec.session_key else "hash")
        return {
            "agent": self.agent.slug,
            "thread_id": str(start.thread_id) if start is not None else None,
            "thread_found": f"{start.found}/{source}" if start is not None else None,
            "ttft_ms": result.ttft_ms,
            "input_tokens": result.input_tokens if self._closed else None,
            "output_tokens": result.output_tokens if self._closed else None,
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

    def build_request(self, history: list[llm.Message], workspace: str | None) -> llm.LLMRequest:
        agent, client = self.agent, self.spec.request
        system = [agent.instructions.strip()] if agent.instructions.strip() else []
        if client.system.strip():
            system.append(client.system.strip())
        if workspace:
            system.append(f"The user's workspace root is {workspace}.")
        limit = agent.max_output_tokens or None
        wanted = client.max_output_tokens
        max_out = min(x for x in (limit, wanted) if x) if (limit or wanted) else None
        return client.replace(
            model=agent.model_name,
            system="\n\n".join(system),
            messages=history,
            max_output_tokens=max_out,
            temperature=client.temperature if client.temperature is not None
            else agent.temperature,
            top_p=client.top_p if client.top_p is not None else agent.top_p,
        )

    # -- streaming -------------------------------------------------------------------------

    async def first(self, wait: float) -> Any:
        """The first event, waiting at most ``wait`` seconds; ``KEEPALIVE`` if none came yet.

        Returns once the turn's messages are stored too (so ``thread_id`` is known). A backend
        error here propagates (and is recorded): nothing was sent to the client yet.
        """
        assert self.request is not None
        self._set_waiting(True)
        self._send(on_sent=self._on_sent)
        try:
            event = await self._next(wait)
            if event is _BUSY or await self._started() is None:
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
        chain = getattr(self.agent, "provider_chain", None) or [self.agent.provider]
        self._pump_task = asyncio.create_task(self._pump(fallback_stream(
            chain, self.request, on_sent=on_sent or (lambda: self._set_waiting(False)),
            on_answer=self._answered_by, on_fallback=self._fell_back)))

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
        self._first_at, self._usage = None, None
        self._text.clear()
        self._reasoning.clear()
        self._tools.clear()
        self._start = await self._begin(self._workspace)
        self._set_waiting(True)
        self._send()
        return await self._next(wait)

    async def _stop_pump(self) -> None:
        """Stop the backend (the upstream request is closed) and wait until it has."""
        if self._pump_task is not None:
            self._pump_task.cancel()
            await asyncio.gather(self._pump_task, return_exceptions=True)

    async def _pump(self, stream: Any) -> None:
        """Move the backend's events to the queue as they come, then ``_END`` or the error.

        One task reads the backend for the whole turn, so that waiting for an event with a
        keepalive deadline costs a queue read, not a new task per event."""
        try:
            async with contextlib.aclosing(stream):
                async for event in stream:
                    self._events.put_nowait(event)
        except Exception as exc:  # noqa: BLE001 - re-raised by _next, in the turn's task
            self._events.put_nowait(_Failed(exc))
        else:
            self._events.put_nowait(_END)

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
        if event is _KILLED:
            raise TurnKilled("An operator stopped this turn.")
        if event is _INTERRUPTED:
            raise TurnInterrupted(services.INTERRUPTED_ERROR)
        if isinstance(event, _Failed):
            if self._killed:
                raise TurnKilled("An operator stopped this turn.")
            if self._interrupted:
                raise TurnInterrupted(services.INTERRUPTED_ERROR)
            raise event.error
        self._absorb(event)
        if self._registered is not None and time.monotonic() - self._delta_at >= DELTA_INTERVAL:
            self._publish_delta()
        return event

    def _publish_delta(self) -> None:
        """Tell the feed what the reply gained since the last time (coalesced: at most one
        event per ``DELTA_INTERVAL`` per turn, however fast the tokens come)."""
        self._delta_at = time.monotonic()
        sent_text, sent_reasoning, _ = self._delta_sent
        text = "".join(self._text[sent_text:])
        reasoning = "".join(self._reasoning[sent_reasoning:])
        calls = len(self._tools)
        if not text and not reasoning and calls == self._delta_sent[2]:
            return
        self._delta_sent = (len(self._text), len(self._reasoning), calls)
        realtime.send_event(events.message_delta(
            thread_id=self._registered, agent=self.agent.slug,
            response_id=self.spec.response_id, text=text, reasoning=reasoning,
            tool_calls=[{"name": t.name} for _, t in sorted(self._tools.items())],
            output_chars=sum(len(t) for t in self._text),
        ))

    async def events(self, first: Any, keepalive: float) -> Any:
        """Yield ``first`` then every later event (and ``KEEPALIVE`` markers) to the end.

        Records the outcome whatever happens: normal end, backend error (re-raised for the
        dialect to render in-band), or cancellation (client gone; re-raised).
        """
        error: BaseException | None = None
        try:
            event = first
            while event is not None:
                yield event
                event = await self._next(keepalive)
        except BaseException as exc:
            error = exc
            raise
        finally:
            await self._shielded_close(error)

    def _absorb(self, event: Any) -> None:
        if self._first_at is None and not isinstance(event, llm.Usage | llm.Finish):
            self._first_at = time.monotonic()
        if isinstance(event, llm.TextDelta):
            self._text.append(event.text)
        elif isinstance(event, llm.ReasoningDelta):
            self._reasoning.append(event.text)
        elif isinstance(event, llm.ToolCallDelta):
            acc = self._tools.setdefault(event.index, ToolCallAcc())
            acc.id = event.id or acc.id
            acc.name = event.name or acc.name
            acc.arguments.append(event.arguments)
        elif isinstance(event, llm.Usage):
            self._usage = event
        elif isinstance(event, llm.Finish):
            self.result.finish_reason = event.reason

    async def collect(self, first: Any) -> services.TurnResult:
        """Run the turn to its end without streaming (JSON replies)."""
        async for _ in self.events(first, keepalive=3600):
            pass
        return self.result

    # -- closing ---------------------------------------------------------------------------

    @property
    def usage(self) -> llm.Usage:
        if self._usage is not None:
            return self._usage
        assert self.request is not None
        out = llm.estimate_tokens("".join(self._text)) + sum(
            llm.estimate_tokens("".join(t.arguments)) for t in self._tools.values()
        )
        return llm.Usage(llm.estimate_request_tokens(self.request), out, estimated=True)

    @property
    def tool_calls(self) -> list[llm.ToolCall]:
        return [
            llm.ToolCall(acc.id or f"call_{i}", acc.name, "".join(acc.arguments))
            for i, acc in sorted(self._tools.items())
        ]

    async def _shielded_close(self, error: BaseException | None) -> None:
        task = asyncio.ensure_future(self.close(error=error))
        _background.add(task)
        task.add_done_callback(_background.discard)
        try:
            await asyncio.shield(task)
        except asyncio.CancelledError:
            pass  # the close task runs on; the cancellation itself is re-raised by events()

    async def close(self, *, error: BaseException | None = None) -> None:
        """Persist the outcome and release the lease; idempotent."""
        if self._closed:
            return
        self._closed = True
        self._set_waiting(False)
        await self._stop_pump()
        try:
            await self._record(error)
        finally:
            self._unregister()

    def _agent_busy_elsewhere(self) -> str | None:
        """Another thread this process's turns of the same agent hold, if any: the agent is
        still at work there, and the end of this turn need not ask the database so (under
        load there nearly always is one)."""
        for thread_id, turns in _inflight.items():
            if thread_id != self._registered and any(
                    t.agent.pk == self.agent.pk and not t._closed for t in turns):
                return thread_id
        return None

    async def _record(self, error: BaseException | None) -> None:
        if self._start is None:
            try:
                if await self._started() is None:
                    return
            except Exception:  # the turn was never stored: nothing to record it on
                return
        r = self.result
        r.route = self.spec.route
        r.passages = self._passages
        r.text = _storable("".join(self._text))
        r.reasoning = _storable("".join(self._reasoning))
        r.tool_calls = [llm.ToolCall(_storable(c.id), _storable(c.name),
                                     _storable(c.arguments)) for c in self.tool_calls]
        if self.request is not None:
            usage = self.usage
            r.input_tokens, r.output_tokens = usage.input_tokens, usage.output_tokens
            r.usage_estimated = usage.estimated
        r.latency_ms = int((time.monotonic() - self._t0) * 1000)
        if self._first_at is not None:
            r.ttft_ms = int((self._first_at - self._t0) * 1000)
        if self._registered is not None and self._text[self._delta_sent[0]:]:
            self._publish_delta()  # the feed sees the whole reply grow before it is stored
        if isinstance(error, TurnKilled) or (self._killed and error is not None):
            r.finish_reason = "killed"
            r.error = "An operator stopped this turn."
        elif isinstance(error, TurnInterrupted) or (self._interrupted and error is not None) or (
                _draining and isinstance(error, asyncio.CancelledError | GeneratorExit)):
            r.finish_reason = "interrupted"
            r.error = services.INTERRUPTED_ERROR
        elif isinstance(error, asyncio.CancelledError | GeneratorExit):
            r.finish_reason = "client_disconnected"
            r.error = "The client disconnected before the reply was complete."
        elif isinstance(error, GaiaError):
            r.finish_reason = "error"
            r.error = error.message
        elif error is not None:
            r.finish_reason = "error"
            r.error = f"Internal error: {type(error).__name__}"
        try:
            await run_db(services.thread_turn_finish, start=self._start, result=r,
                         dialect=self.spec.dialect, busy_with=self._agent_busy_elsewhere())
        except Exception as exc:
            # The database refused the reply: record that instead, which releases the lease.
            log.exception("could not store the reply on thread %s", self._start.thread_id)
            failed = services.TurnResult(
                response_id=r.response_id, finish_reason="error",
                error=f"The reply could not be stored ({type(exc).__name__}).",
                latency_ms=r.latency_ms, ttft_ms=r.ttft_ms)
            await run_db(services.thread_turn_finish, start=self._start, result=failed,
                         dialect=self.spec.dialect)


def _storable(text: str) -> str:
    """``text`` without what no database text column takes: NUL characters (PostgreSQL
    refuses them) and lone surrogates (they cannot be encoded)."""
    if "\x00" in text:
        text = text.replace("\x00", "")
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        text = text.encode("utf-8", "replace").decode("utf-8")
    return text


@dataclass
class Injected:
    thread_id: str
    message_id: int
    task: asyncio.Task[None]


async def turn_inject(*, agent: Agent, api_key: ApiKey | None, text: str,
                      thread_id: str | None = None, user: str | None = None) -> Injected:
    """An operator's message to ``agent``: stored at once (in a new thread, or continuing
    ``thread_id``), the reply produced in the background on this event loop and seen on the
    feed like any other turn.

    Raises before anything is stored: 404 for an unknown thread, 409 if the thread is busy
    (no waiting: an operator gets an answer now), 400 for a conversation over the agent's
    input limit. The background task records its own outcome (reply, error or kill)."""
    request = llm.LLMRequest(
        model=agent.slug, system="", user=user,
        messages=[llm.Message(role="user", parts=(llm.TextPart(text),))],
    )
    turn = Turn(TurnSpec(
        agent=agent, api_key=api_key, request=request, dialect="operator",
        response_id=f"inject-{uuid.uuid4().hex[:24]}", thread_id=thread_id,
        session_key=None if thread_id else f"inject:{uuid.uuid4().hex}", user=user,
        store_first=True, lease_wait=0,
    ))
    await turn.open()
    assert turn._start is not None
    start = turn._start

    async def reply() -> None:
        try:
            await turn.collect(await turn.first(wait=3600))
        except GaiaError:
            pass  # recorded on the thread by the turn itself, and sent to the feed
        except Exception:
            log.exception("injected turn failed on thread %s", start.thread_id)

    task = asyncio.create_task(reply(), name=f"inject-{start.thread_id}")
    _background.add(task)
    task.add_done_callback(_background.discard)
    return Injected(str(start.thread_id), start.message_ids[-1], task)


def as_gaia_error(exc: BaseException) -> GaiaError:
    if isinstance(exc, GaiaError):
        return exc
    log.error("unexpected error during a turn", exc_info=exc)
    return GaiaError("Internal error while generating the reply.", code="internal_error")
