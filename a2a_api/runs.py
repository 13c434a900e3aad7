"""The tasks this process runs: each a turn in an asyncio task of its own, so that it outlives
the request that started it (an A2A client may go away and ``GetTask`` or ``SubscribeToTask``
later, from any process), with the listeners of this process told of each change.

The row (:mod:`a2a_api.store`) is written when the state changes, not per token: other
processes follow a task by reading it (:func:`a2a_api.handler.Handler.on_subscribe_to_task`).
It is first written when someone other than this process's waiting request could ask for the
task: a client told its id before it ends (a stream, ``returnImmediately``, an input-required
answer), or its end. A task that ends before it is answered, the usual blocking
``SendMessage``, is one write, not two (the second was 5 % of a task's server CPU, py-spy,
scripts/perf/interop).
"""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from dataclasses import dataclass, field
from typing import Any

from django.utils import timezone

from a2a_api import store
from a2a_api.models import Task
from agents import turns
from agents.infra.database import run_db
from agents.kernel import llm
from agents.kernel.exceptions import GaiaError, TurnKilled

FIRST_WAIT = 1.0  # seconds for the turn's first event before its task is answered anyway
KEEPALIVE = 30.0


@dataclass
class Running:
    """A task this process runs, and who listens to it here. ``task`` is its row as stored,
    kept current in memory, and ``reply`` what the agent said so far: a client that waited
    for the end is answered from them, without reading the row back (a fifth of a task's
    server CPU was authorizing again and reading it back, py-spy, scripts/perf/interop)."""

    task: Task
    state: str = Task.State.WORKING
    reason: str = ""
    reply: list[str] = field(default_factory=list)
    listeners: set[asyncio.Queue[tuple[Any, ...]]] = field(default_factory=set)
    ended: asyncio.Event = field(default_factory=asyncio.Event)
    stored: bool = False
    storing: asyncio.Lock = field(default_factory=asyncio.Lock)

    async def persist(self) -> None:
        """Its row, written now if it was not yet (as it stands)."""
        async with self.storing:
            if not self.stored:
                await run_db(store.task_insert, self.task)
                self.stored = True

    @property
    def task_id(self) -> str:
        return str(self.task.pk)

    @property
    def context_id(self) -> str:
        return str(self.task.thread_id)

    def snapshot(self) -> store.Snapshot:
        return store.Snapshot(self.task, "".join(self.reply))

    def listen(self) -> asyncio.Queue[tuple[Any, ...]]:
        queue: asyncio.Queue[tuple[Any, ...]] = asyncio.Queue()
        if self.ended.is_set():
            queue.put_nowait(("end", self.state, self.reason))
        else:
            self.listeners.add(queue)
        return queue

    def _tell(self, *event: Any) -> None:
        for queue in self.listeners:
            queue.put_nowait(event)

    async def move(self, state: str) -> None:
        if state != self.state:
            self.state = self.task.state = state
            async with self.storing:
                if self.stored:
                    await run_db(store.task_state_set, task_id=self.task_id, state=state)
                else:
                    await run_db(store.task_insert, self.task)
                    self.stored = True
            self._tell("state", state, "")


_running: dict[str, Running] = {}


def running(task_id: str) -> Running | None:
    return _running.get(task_id)


async def start(*, agent: Any, api_key: Any, text: str, context_id: str | None,
                message_id: str, participant: str | None) -> Running:
    """Open ``agent``'s turn for the message and run it in the background. Raises
    :class:`GaiaError` as the turn's opening does (an unknown thread, a paused agent)."""
    request = llm.LLMRequest(model=agent.slug, system="",
                             messages=[llm.Message(role="user", parts=(llm.TextPart(text),))])
    turn = await turns.turn_open(target=agent, api_key=api_key, request=request,
                                 dialect="a2a", response_id=f"a2a_{uuid.uuid4().hex}",
                                 thread_id=context_id,
                                 sender=f"a2a:{participant}"[:100] if participant else "")
    failure: GaiaError | None = None
    try:
        first = await turn.first(wait=FIRST_WAIT)
    except GaiaError as exc:  # recorded by the turn; a task that failed, if it was stored
        if getattr(turn, "start", None) is None:
            raise
        failure, first = exc, None
    now = timezone.now()
    run = Running(Task(id=uuid.uuid4(), agent=agent, api_key=api_key, thread_id=turn.thread_id,
                       response_id=turn.spec.response_id, message_id=message_id[:200],
                       text=text, created_at=now, updated_at=now))
    _running[run.task_id] = run
    turns.background_keep(asyncio.create_task(_run(run, turn, first, failure)))
    return run


async def _run(run: Running, turn: Any, first: Any, failure: GaiaError | None) -> None:
    state, reason = Task.State.COMPLETED, ""
    try:
        if failure is not None:
            raise failure
        async for event in turn.events(first, keepalive=KEEPALIVE):
            if isinstance(event, llm.TextDelta) and event.text:
                run.reply.append(event.text)
                run._tell("text", event.text)
            elif isinstance(event, llm.ToolActivity):
                if event.status == "waiting":
                    await run.move(Task.State.INPUT_REQUIRED)
                elif run.state == Task.State.INPUT_REQUIRED:
                    await run.move(Task.State.WORKING)
        if turn.result.error:
            state, reason = Task.State.FAILED, turn.result.error
    except TurnKilled:
        state, reason = Task.State.CANCELED, "An operator stopped the task."
    except GaiaError as exc:
        state, reason = Task.State.FAILED, exc.message
    except asyncio.CancelledError:
        state, reason = Task.State.FAILED, "The server stopped before the task ended."
        raise
    except Exception as exc:  # noqa: BLE001 - recorded on the task, logged by the turn
        state, reason = Task.State.FAILED, f"The task failed: {exc}"
    finally:
        await asyncio.shield(_end(run, turn, state, reason))


async def _end(run: Running, turn: Any, state: str, reason: str) -> None:
    usage = None
    with contextlib.suppress(Exception):  # a turn that never reached its provider has none
        usage = (turn.usage.input_tokens, turn.usage.output_tokens)
    now = timezone.now()
    task = run.task
    async with run.storing:
        if run.stored:
            moved = await run_db(store.task_state_set, task_id=run.task_id, state=state,
                                 reason=reason, usage=usage, now=now)
            if not moved:  # it had ended already: a client's CancelTask came first
                state, reason = Task.State.CANCELED, "Canceled by the client (CancelTask)."
                if usage is not None:
                    await run_db(store.tokens_add, run.task_id, usage)
        task.state, task.reason, task.updated_at = state, reason, now
        if usage is not None:
            task.input_tokens, task.output_tokens = usage
        if not run.stored:  # nobody knew of it yet: its one write
            await run_db(store.task_insert, task)
            run.stored = True
    run.state, run.reason = state, reason
    run.ended.set()
    run._tell("end", state, reason)
    _running.pop(run.task_id, None)
