"""How a turn ends, whichever way it stops: the rule is that a thread always ends. Every way a
turn can stop leaves its thread ``completed``, ``error`` (failed, or ``interrupted``) or
``killed``, never ``active`` or ``waiting``:

* it finishes, or its provider or a tool fails: recorded by :meth:`TurnEnding.close`;
* an operator kills it (:meth:`TurnEnding.kill`, from any process): ``killed``, and so is every
  turn it delegated to (an agent's ``agent:<slug>`` calls, :meth:`TurnEnding.follow`);
* its client goes away (the request's task is cancelled): ``client_disconnected``; a
  delegated turn whose caller stopped waiting for it: ``cancelled``;
* an approval it waits for expires: a denial, the turn goes on;
* its server stops (:meth:`TurnEnding.interrupt`): ``interrupted``; its process is killed: the
  next process records it as ``interrupted`` (``services.thread_leases_sweep``).

A turn stopped while it opens (storing it, reading its knowledge, connecting its tools) is
recorded too: :meth:`TurnEnding.opening` wraps :meth:`agents.turns.runtime.Turn.open`, and
the database write that stores the turn is never abandoned half-way (it runs on, shielded,
and the turn records its end on what it stored).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING, Any

from agents import services
from agents.infra import metrics, tracing
from agents.infra.database import run_db
from agents.kernel import llm
from agents.kernel.exceptions import GaiaError
from agents.models.threads import CALLER_GONE_ERROR
from agents.turns import registry, spend
from agents.turns.reply import Reply, outcome

log = logging.getLogger("gaia.turns")

KILLED = object()  # queued when an operator killed the turn
INTERRUPTED = object()  # queued when the server stops before the turn has finished
CALLER_GONE = CALLER_GONE_ERROR
# How long a stopping turn waits for its backend to wind down (a tool settling its approval,
# an MCP request being cancelled) before it cancels it again and records the turn anyway.
STOP_SECONDS = 10.0


class TurnEnding:
    """The ending half of :class:`agents.turns.runtime.Turn` (see the module docstring)."""

    spec: Any
    agent: Any
    result: services.TurnResult
    start: services.TurnStart | None
    request: llm.LLMRequest | None
    reply: Reply
    span: Any
    closed: bool
    killed: bool
    _interrupted: bool
    _registered: str | None
    _passages: list[dict[str, Any]] | None
    _pump_task: asyncio.Task[None] | None
    _events: asyncio.Queue[Any]
    _begin_later: Any
    reservation: Any  # its budgets' holds (agents.turns.spend.Reservation), settled at its end

    def ending_init(self) -> None:
        self.parent: TurnEnding | None = None  # the turn that delegated this one to its agent
        self.children: set[TurnEnding] = set()  # the turns this one delegated, while they run
        self.admitted: Any = None  # a client turn's place in this process (turns.admission)
        # How it failed, for the request's log line: the error's kind and the status it is
        # (the client of a stream that failed mid-reply got a 200 and the error in-band).
        self.error_kind: str | None = None
        self.error_status: int | None = None

    if TYPE_CHECKING:  # the runtime's Turn has them
        def _set_waiting(self, waiting: bool) -> None: ...

        def _unregister(self) -> None: ...

        def _publish_delta(self) -> None: ...

        async def started(self) -> services.TurnStart | None: ...

    # -- stopping ----------------------------------------------------------------------------

    def kill(self) -> None:
        """Stop the turn (an operator's kill): the provider call is cancelled, the partial
        reply is stored with finish reason ``killed`` and the client is told in its dialect.
        The turns it delegated to are killed with it."""
        if self.killed or self.closed:
            return
        self.killed = True
        for child in list(self.children):
            child.kill()
        if self._pump_task is not None:
            self._pump_task.cancel()
        self._events.put_nowait(KILLED)

    def interrupt(self) -> None:
        """Stop the turn because its server is stopping: recorded as ``interrupted``."""
        if self.killed or self.closed:
            return
        self._interrupted = True
        for child in list(self.children):
            child.interrupt()
        if self._pump_task is not None:
            self._pump_task.cancel()
        self._events.put_nowait(INTERRUPTED)

    def follow(self, thread_id: Any) -> None:
        """This turn works for a turn running on ``thread_id`` in this process (an agent's
        call of another): killed or interrupted with it."""
        for parent in registry.inflight_turns().get(str(thread_id), ()):
            if isinstance(parent, TurnEnding) and not parent.closed:
                self.parent = parent
                parent.children.add(self)
                if parent.killed:
                    self.kill()
                elif parent._interrupted:
                    self.interrupt()
                return

    @asynccontextmanager
    async def opening(self) -> AsyncIterator[None]:
        """Around opening the turn: if it stops there (an error of the request, a cancelled
        request, a caller that went away) whatever was stored of it is recorded as ended and
        its lease released; nothing is stored that was not already."""
        try:
            yield
        except BaseException as exc:
            self._begin_later = None  # a derived session's turn is not stored just to end it
            await self._shielded_close(exc)
            raise

    async def _stop_pump(self) -> None:
        """Stop the backend (the upstream request is closed) and wait until it has, with what
        it does as it stops (a tool that waited for an approval settles it): cancelled once,
        a second cancellation would cut that short."""
        task = self._pump_task
        if task is None or task.done():
            return
        if not task.cancelling():
            task.cancel()
        await asyncio.wait({task}, timeout=STOP_SECONDS)
        if not task.done():
            log.warning("turn %s: its backend did not stop within %g s",
                        self.spec.response_id, STOP_SECONDS)
            task.cancel()
            await asyncio.wait({task}, timeout=STOP_SECONDS)

    # -- recording ---------------------------------------------------------------------------

    async def _shielded_close(self, error: BaseException | None) -> None:
        task = asyncio.ensure_future(self.close(error=error))
        registry.background_keep(task)
        try:
            await asyncio.shield(task)
        except asyncio.CancelledError:
            pass  # the close task runs on; the cancellation itself is re-raised by events()

    async def close(self, *, error: BaseException | None = None) -> None:
        """Persist the outcome and release the lease; idempotent."""
        if self.closed:
            return
        self.closed = True
        self._set_waiting(False)
        if error is not None:
            self.error_kind, self.error_status = error_facts(error)
        try:
            await self._stop_pump()
            await self._record(error)
        finally:
            await self._settle()
            if self.span is not None:
                self._end_span()
            self._unregister()
            if self.parent is not None:
                self.parent.children.discard(self)
            if self.admitted is not None:
                self.admitted.release()

    async def _settle(self) -> None:
        """Budgets and the key's tokens a minute get what the turn used (the stored reply
        settled its holds already, unless it could not be stored or never began)."""
        r, key = self.result, self.spec.api_key
        holds = self.reservation.holds if self.reservation is not None else None
        try:
            if holds is not None and not holds.settled:
                await asyncio.shield(run_db(
                    services.budget_settle, holds=holds, input_tokens=r.input_tokens,
                    output_tokens=r.output_tokens, cost_nanos=r.cost_nanos))
            if key is not None and key.tokens_per_minute:
                await asyncio.shield(run_db(spend.tpm_add, key_id=key.pk,
                                            tokens=r.input_tokens + r.output_tokens))
        except Exception:  # the reply is stored; a hold left stays until the period ends
            log.exception("turn %s: could not settle its budgets", self.spec.response_id)

    def _end_span(self) -> None:
        try:
            self._record_span()
        except Exception:  # a trace must never fail a turn
            log.warning("could not record the turn's span", exc_info=True)

    def _record_span(self) -> None:
        if self.request is not None:
            self.span.set_attribute("gen_ai.request.model", self.request.model)
        if self.start is not None:
            tracing.turn_thread(self.span, self.start.thread_id)
        failed = (self.error_kind, self.error_status or 500) if self.error_kind else None
        messages = [{"role": m.role, "parts": [{"type": "text", "content": m.text}]}
                    for m in self.spec.request.messages] if tracing.CAPTURE_CONTENT else None
        tracing.turn_end(self.span, result=self.result, error=failed, input_messages=messages)

    def _outcome(self, error: BaseException | None, r: services.TurnResult) -> tuple[str, str]:
        reason, message = outcome(error, r, killed=self.killed, interrupted=self._interrupted)
        if reason == "client_disconnected" and self.spec.depth:
            return "cancelled", CALLER_GONE  # its client is the calling agent's turn
        return reason, message

    async def _record(self, error: BaseException | None) -> None:
        if self.start is None:
            try:
                if await self.started() is None:
                    return
            except Exception:  # the turn was never stored: nothing to record it on
                return
        assert self.start is not None
        r = self.result
        r.route, r.dropped_tools = self.spec.route, list(self.spec.hosted.dropped)
        r.passages = self._passages
        r.model = r.model or getattr(self.request, "model", "") or ""
        self.reply.fill(r, self.request)
        if self._registered is not None and self.reply.unsent_text():
            self._publish_delta()  # the feed sees the whole reply grow before it is stored
        r.finish_reason, r.error = self._outcome(error, r)
        metrics.turn_done(self.agent.slug, r.model, r.finish_reason, r.input_tokens,
                          r.output_tokens, r.ttft_ms)
        try:
            await run_db(services.thread_turn_finish, start=self.start, result=r,
                         dialect=self.spec.dialect,
                         busy_with=registry.agent_busy_elsewhere(self, self._registered),
                         price_provider=self.agent.provider.name,
                         holds=self.reservation.holds if self.reservation is not None else None,
                         user=(self.spec.end_user or self.spec.user or "")
                         if self.spec.api_key is not None else "")
            if r.cost_nanos:  # set by storing it
                metrics.spent(self.agent.slug, r.model, r.cost_nanos)
        except Exception as exc:
            # The database refused the reply: record that instead, which releases the lease,
            # with the reply's text if the database takes that (the client has it: so does the
            # thread), else without.
            log.exception("could not store the reply on thread %s", self.start.thread_id)
            failed = services.TurnResult(
                response_id=r.response_id, finish_reason="error", text=r.text,
                error=f"The reply could not be stored ({type(exc).__name__}).",
                latency_ms=r.latency_ms, ttft_ms=r.ttft_ms)
            try:
                await run_db(services.thread_turn_finish, start=self.start, result=failed,
                             dialect=self.spec.dialect)
            except Exception:
                log.exception("could not store the reply's text on thread %s",
                              self.start.thread_id)
                failed.text = ""
                await run_db(services.thread_turn_finish, start=self.start, result=failed,
                             dialect=self.spec.dialect)


def error_facts(exc: BaseException) -> tuple[str, int]:
    """What a turn's error was, for logs and metrics: its kind and HTTP status (499, as
    nginx says, for a client that went away)."""
    if isinstance(exc, GaiaError):
        return exc.kind, exc.status
    if isinstance(exc, asyncio.CancelledError):
        return "client_disconnected", 499
    return "internal", 500


def as_gaia_error(exc: BaseException) -> GaiaError:
    if isinstance(exc, GaiaError):
        return exc
    log.error("unexpected error during a turn", exc_info=exc)
    return GaiaError("Internal error while generating the reply.", code="internal_error")
