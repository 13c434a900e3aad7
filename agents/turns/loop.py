"""The agent loop: an agent with tools of its own runs them for its model, as a turn goes.

Model -> tool calls -> Gaia runs the agent's own tools (several at once when the model asks for
several) -> their results back to the model -> ... until an answer, or a limit: the agent's
``max_steps`` rounds of tools, its ``tool_budget_seconds`` of tool time, its
``max_turn_seconds``. At a limit the model is asked once more, with no tool allowed, and the
reply says why (``Message.note``). A call of one of the *client's* tools ends the turn as it
always did: the call goes back to the client.

The loop stands between the turn and its provider: it reads the provider's events, keeps back
the calls of the agent's own tools, and yields everything else, then each tool's activity
(:class:`agents.kernel.llm.ToolActivity`, which each dialect shows its own way) and, at the end, the
usage of every model call together. Each round is stored in the thread as the agent's own work
(``internal`` messages: the call, then each result with its duration and error), and the feed
hears of each call (``tool_call``, ``tool_result``). A tool that fails, times out or answers
garbage is an error result for the model, never an error of the turn. An operator's kill
cancels the loop, and with it the running tools (an MCP request is cancelled).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
import uuid
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import Any

from django.db import DatabaseError

from agents import selectors, services
from agents.infra import metrics, tracing
from agents.infra.database import run_db
from agents.kernel import llm
from agents.kernel.exceptions import GaiaError
from agents.models import Message
from agents.outlet import events, realtime
from agents.tools import Delegate, Toolbox, ToolContext, ToolResult, ToolSpec, toolbox_for
from agents.turns.approvals import approval_wait
from agents.turns.budget import RequestBudget, over_round_limit, result_bounded, round_limit
from agents.turns.reply import storable

log = logging.getLogger("gaia.turns")

# How an agent's agent:<slug> tool runs the callee's turn: set by agents.turns.delegate when
# it is imported (it needs the Turn, which needs this module).
delegate_hook: Delegate | None = None
# How long a Responses client's approval request stays answerable (OpenAI sets no bound).
CLIENT_APPROVAL_SECONDS = 24 * 3600.0
# How long a stopped round waits for its cancelled tools to finish stopping (a delegated turn
# recording its end, an approval settled) before its turn is recorded anyway: a tool that
# ignores its cancellation holds the turn no longer (under agents.turns.ending.STOP_SECONDS).
TOOLS_STOP_SECONDS = 5.0


@dataclass
class _Call:
    id: str
    name: str
    arguments: list[str] = field(default_factory=list)
    refusal: str = ""  # why it is not run (a budget spent): its error result
    past_limit: bool = False  # past the round's limit: not run, not even announced

    @property
    def text(self) -> str:
        return "".join(self.arguments)


def memory_scope(agent: Any, *, api_key: Any, user: str | None) -> str | None:
    """Whose facts a turn of ``agent`` remembers: its key's, or its end user's as the key that
    named them (:func:`agents.selectors.memory_scope`; ``None``: no memory for this turn)."""
    return selectors.memory_scope(agent=agent, api_key=api_key, user=user)


class AgentLoop:
    """The loop of one turn (see the module docstring)."""

    def __init__(self, turn: Any, toolbox: Toolbox, ctx: ToolContext) -> None:
        self.turn = turn
        self.agent = turn.agent
        self.toolbox = toolbox
        self.ctx = ctx
        self.tool_seconds = 0.0
        self.deadline = time.monotonic() + float(getattr(self.agent, "max_turn_seconds", 900))
        self.note = ""
        self.answered: list[Any] = []  # the client's answers to its approval requests
        self.asked = False  # this round asked the client to approve a call: the turn ends

    @classmethod
    async def prepare(cls, turn: Any) -> AgentLoop | None:
        """The loop for ``turn`` if its agent has tools its provider can call (their
        definitions join the request's), else ``None``; the remembered facts that fit the
        conversation join the system prompt."""
        agent, spec = turn.agent, turn.spec
        user = spec.end_user if spec.depth else spec.user  # a callee works for the caller's
        scope = memory_scope(agent, api_key=spec.api_key, user=user)
        ctx = ToolContext(agent=agent, api_key=spec.api_key, user=user,
                          memory_scope=scope, depth=spec.depth,
                          extra={"run_id": spec.run_id,
                                 "budget": spec.budget or RequestBudget()})
        if scope is not None:
            await _add_memories(turn, scope)
        client = spec.request
        if not (agent.tools or scope or client.client_mcp or client.approval_answers) or (
                not turn.backend_accepts_tools):
            return None
        answered = [await run_db(services.approval_answer, request_id=a.request_id,
                                 approve=a.approve, reason=a.reason, api_key=spec.api_key,
                                 param=a.param) for a in client.approval_answers]
        box = await toolbox_for(agent, delegate=delegate_hook,
                                taken={t.name for t in turn.request.tools},
                                client_mcp=client.client_mcp, memory=scope is not None)
        if not box and not answered:
            return None
        turn.request = turn.request.replace(
            tools=[*turn.request.tools, *(t.as_llm() for t in box.tools.values())])
        if box.problems:
            turn.result.note = (turn.result.note + " Tools left out: "
                                + "; ".join(box.problems)).strip()
        made = cls(turn, box, ctx)
        made.answered = answered
        return made

    async def run(self, first: Callable[[llm.LLMRequest], AsyncIterator[llm.Event]]
                  ) -> AsyncIterator[llm.Event]:
        """The turn's events: ``first(request)`` is the provider's first answer."""
        try:
            async for event in self._run(first):
                yield event
        finally:
            await asyncio.shield(self.toolbox.close())

    async def _run(self, first: Callable[[llm.LLMRequest], AsyncIterator[llm.Event]]
                   ) -> AsyncIterator[llm.Event]:
        request = self.turn.request
        for server, tools in self.toolbox.listings.items():
            yield llm.ToolsListed(server, tuple(tools),
                                  self.toolbox.listing_errors.get(server, ""))
        if self.answered:  # the calls the client answered run before the model goes on
            calls, answers = self._answered_calls()
            async for activity in self._round(calls, "", answers):
                yield activity
            history = list(request.messages)
            if history and history[-1].role == "assistant" and not (
                    history[-1].text or history[-1].tool_calls):
                history.pop()  # the reply that asked: it said nothing
            request = request.replace(messages=[*history, *self.results])
        usage = [0, 0, False]
        stream: AsyncIterator[llm.Event] = first(request)
        steps = 0
        final = False  # the model must answer now: no tool of the agent runs any more
        while True:
            held: dict[int, _Call] = {}
            client: set[int] = set()
            text: list[str] = []
            finish: str = "stop"
            async with contextlib.aclosing(stream):
                async for event in stream:
                    if isinstance(event, llm.ToolCallDelta):
                        if event.index not in held and event.index not in client:
                            if event.name in self.toolbox.tools:
                                held[event.index] = _Call(event.id or f"call_{steps}_{event.index}",
                                                          event.name)
                            else:
                                client.add(event.index)
                        if event.index in held:
                            held[event.index].arguments.append(event.arguments)
                            continue
                    elif isinstance(event, llm.Usage):
                        usage[0] += event.input_tokens
                        usage[1] += event.output_tokens
                        usage[2] = usage[2] or event.estimated
                        continue
                    elif isinstance(event, llm.Finish):
                        finish = event.reason
                        continue
                    elif isinstance(event, llm.TextDelta):
                        text.append(event.text)
                    yield event
            calls = [held[i] for i in sorted(held)] if not final else []
            if not calls:
                if final and self.note and not text and not client:
                    yield llm.TextDelta(f"({self.note})")  # the model said nothing more
                yield llm.Usage(usage[0], usage[1], estimated=bool(usage[2]))
                yield llm.Finish(finish if client or finish != "tool_calls" else "stop")  # type: ignore[arg-type]
                if self.note:
                    self.turn.result.note = (self.turn.result.note + " " + self.note).strip()
                return
            async for activity in self._round(calls, "".join(text)):
                yield activity
            if self.asked:  # the client approves first: this response ends with its request
                yield llm.Usage(usage[0], usage[1], estimated=bool(usage[2]))
                yield llm.Finish("stop")
                return
            request = request.replace(
                messages=[*request.messages, *self.results], tool_choice=llm.ToolChoice())
            steps += 1
            final = self._limit_reached(steps) or bool(client)
            if client:
                # A client's tool in the same round: the call goes back to the client, with
                # what the agent's own tools answered stored in the thread.
                yield llm.Usage(usage[0], usage[1], estimated=bool(usage[2]))
                yield llm.Finish("tool_calls")
                return
            if final:
                request = request.replace(tool_choice=llm.ToolChoice("none"))
            stream = self.turn.provider_stream(request)

    def _limit_reached(self, steps: int) -> bool:
        agent = self.agent
        if steps >= int(getattr(agent, "max_steps", 8)):
            self.note = f"Stopped running tools after {steps} rounds (max_steps)."
        elif self.tool_seconds >= float(getattr(agent, "tool_budget_seconds", 300)):
            self.note = (f"Stopped running tools: their {self.tool_seconds:.1f} s used the "
                         "tool time budget (tool_budget_seconds).")
        elif time.monotonic() >= self.deadline:
            self.note = "Stopped running tools: the turn reached max_turn_seconds."
        else:
            return False
        return True

    def _answered_calls(self) -> tuple[list[_Call], dict[str, Any]]:
        """The calls the client answered (approved or not), as calls of a round."""
        calls, answers = [], {}
        for approval in self.answered:
            calls.append(_Call(approval.call_id, approval.tool, [approval.arguments]))
            answers[approval.call_id] = approval
            if approval.tool not in self.toolbox.tools:
                self.toolbox.add(_missing(approval))
        self.answered = []
        return calls, answers

    async def _round(self, calls: list[_Call], text: str, answers: dict[str, Any] | None = None
                     ) -> AsyncIterator[llm.Event]:
        """Run one round's calls at once, yielding their activity as it happens; leaves the
        messages the model gets back in ``self.results`` and stores the round. A call of a
        client's server that the client must approve is not run: its request ends the
        turn (``self.asked``); ``answers`` holds the client's answers, by call id."""
        start = await self.turn.started()
        self.ctx.thread_id = start.thread_id if start is not None else None
        slug = self.agent.slug
        answers = answers or {}
        limit = round_limit()
        for call in calls[limit:]:  # the model asked for more than a round runs
            call.refusal, call.past_limit = over_round_limit(call.name, limit), True
        if len(calls) > limit:
            self._say(f"{len(calls) - limit} of a round's {len(calls)} tool calls were not "
                      f"run (GAIA_MAX_TOOL_CALLS_PER_ROUND: {limit}).")
        specs = [self.toolbox.tools[c.name] for c in calls]
        call_message = services.InnerMessage(
            sender=slug, recipient=_names(_party(s) for s in specs), role="assistant",
            content=storable(text), tool_calls=[
                {"id": storable(c.id), "name": c.name, "arguments": storable(c.text)}
                for c in calls])
        rows = await self._store([call_message])
        self.ctx.extra["call_message_id"] = rows[0].pk if rows else None
        asking = [(s, c) for s, c in zip(specs, calls, strict=True)
                  if s.client_approval and c.id not in answers and not c.refusal]
        asked: set[int] = set()
        for spec, call in asking:
            request = await self._ask_client(spec, call, start)
            if request is not None:  # else the thread has too many pending (call.refusal)
                asked.add(id(call))
                yield request
        if asked:
            self.asked = True
            kept = [(s, c) for s, c in zip(specs, calls, strict=True) if id(c) not in asked]
            specs, calls = [s for s, _ in kept], [c for _, c in kept]
        queue: asyncio.Queue[llm.ToolActivity] = asyncio.Queue()
        # A call past the round's limit is answered at once, with no task and no activity on
        # the feed or to the client (the reply's note counts them): 500 calls cost the loop
        # what the limit's cost, and a row each.
        tasks = {id(call): asyncio.create_task(self._one(spec, call, queue, answers.get(call.id)))
                 for spec, call in zip(specs, calls, strict=True) if not call.past_limit}
        try:
            pending = len(tasks)
            while pending:
                activity = await queue.get()
                if activity.done:
                    pending -= 1
                yield activity
            ran = {key: task.result() for key, task in tasks.items()}
        finally:
            await _tools_stopped(tasks.values())
        results = [ran.get(id(c)) or (ToolResult(c.refusal, is_error=True), 0) for c in calls]
        self.results = [
            llm.Message(role="assistant", parts=(llm.TextPart(text),) if text else (),
                        tool_calls=tuple(llm.ToolCall(c.id, c.name, c.text) for c in calls)),
            *(llm.Message(role="tool", parts=(llm.TextPart(r.text),), tool_call_id=c.id,
                          is_error=r.is_error) for c, (r, _) in zip(calls, results, strict=True))]
        await self._store([services.InnerMessage(
            sender=_names([_party(s)]), recipient=slug, role="tool", content=r.text,
            tool_call_id=storable(c.id)[:_ID_CHARS], latency_ms=ms,
            error=r.text if r.is_error else "")
            for s, c, (r, ms) in zip(specs, calls, results, strict=True)])

    async def _store(self, messages: list[Any]) -> list[Any]:
        """Store a round's messages in the thread. The database refusing them does not end
        the turn (its model's answer is worth more than the record of a step): the reply's
        note says so, and the log has why."""
        try:
            return await run_db(services.inner_messages_store, start=self.turn.start,
                                messages=messages, dialect=self.turn.spec.dialect)
        except (DatabaseError, ValueError) as exc:
            log.exception("agent %s: a tool round could not be stored", self.agent.slug)
            self._say(f"A tool round could not be stored ({type(exc).__name__}).")
            return []

    def _say(self, note: str) -> None:
        """Add ``note`` to what the reply says Gaia did (``Message.note``), once."""
        held = self.turn.result.note
        if note not in held:
            self.turn.result.note = (held + " " + note).strip()

    async def _ask_client(self, spec: ToolSpec, call: _Call, start: Any
                          ) -> llm.ApprovalRequest | None:
        """Store the client's approval request of ``call`` (answered in a later request);
        ``None`` if the thread has too many waiting (``call.refusal`` says so)."""
        try:
            approval = await run_db(
                services.approval_request, approval_id=uuid.uuid4(), thread_id=start.thread_id,
                agent=self.agent, response_id=self.turn.spec.response_id,
                call_id=storable(call.id), tool=spec.name, server=spec.server,
                arguments=storable(call.text), timeout=CLIENT_APPROVAL_SECONDS, by_client=True)
        except GaiaError as exc:
            call.refusal = f"{spec.name} was not run: {exc.message}"
            return None
        return llm.ApprovalRequest(services.approval_client_request_id(approval), spec.server,
                                   spec.tool, storable(call.text))

    async def _one(self, spec: ToolSpec, call: _Call, queue: asyncio.Queue[llm.ToolActivity],
                   answer: Any = None) -> tuple[ToolResult, int]:
        """One call: announced, approved if it must be, run within its bounds."""
        asked = services.approval_client_request_id(answer) if answer is not None else None
        activity = llm.ToolActivity(call.id, spec.name, spec.server, spec.tool, call.text,
                                    "running", approval_request_id=asked)
        queue.put_nowait(activity)
        self._feed(events.tool_call, activity)
        t0 = time.monotonic()
        if call.refusal:
            result = ToolResult(call.refusal, is_error=True)
        elif answer is not None and answer.status != "approved":
            why = f": {answer.reason}" if answer.reason else ""
            result = ToolResult(f"{spec.name} was not run: the client denied it{why}.",
                                is_error=True)
        elif tracing.ENABLED:
            with tracing.tool_span(name=spec.name, call_id=call.id, server=spec.server) as span:
                result = await self._result(spec, call, queue, activity)
                if result.is_error:
                    tracing.tool_failed(span, result.text)
        else:
            result = await self._result(spec, call, queue, activity)
        result = result_bounded(result)
        seconds = time.monotonic() - t0
        ms = int(seconds * 1000)
        metrics.tool_done(self.agent.slug, spec.name, not result.is_error, seconds)
        done = llm.ToolActivity(call.id, spec.name, spec.server, spec.tool, call.text,
                                "failed" if result.is_error else "completed", result.text, ms,
                                approval_request_id=asked)
        self._feed(events.tool_result, done)
        queue.put_nowait(done)
        return result, ms

    async def _result(self, spec: ToolSpec, call: _Call, queue: asyncio.Queue[llm.ToolActivity],
                      activity: llm.ToolActivity) -> ToolResult:
        try:
            args = json.loads(call.text) if call.text.strip() else {}
        except (ValueError, RecursionError):
            args = None
        if not isinstance(args, dict):
            return ToolResult(f"{spec.name}: the arguments are not a JSON object: "
                              f"{call.text[:200]!r}", is_error=True)
        if spec.needs_approval:
            queue.put_nowait(llm.ToolActivity(call.id, spec.name, spec.server, spec.tool,
                                              call.text, "waiting"))
            refusal = await approval_wait(self.turn, spec, storable(call.id),
                                          storable(call.text))
            if refusal is not None:
                return ToolResult(refusal, is_error=True)
        left = min(float(getattr(self.agent, "tool_budget_seconds", 300)) - self.tool_seconds,
                   self.deadline - time.monotonic())
        if left <= 0:
            return ToolResult(f"{spec.name} was not run: no tool time is left for this turn",
                              is_error=True)
        t0 = time.monotonic()
        try:
            async with asyncio.timeout(min(spec.timeout, left)):
                return await spec.run(args, self.ctx)
        except TimeoutError:
            return ToolResult(f"{spec.name}: no answer within {min(spec.timeout, left):g} s",
                              is_error=True)
        except Exception as exc:  # noqa: BLE001 - a tool's bug is the model's error result
            return ToolResult(f"{spec.name} failed: {type(exc).__name__}: {exc}"[:2000],
                              is_error=True)
        finally:
            self.tool_seconds += time.monotonic() - t0

    def _feed(self, build: Any, activity: llm.ToolActivity) -> None:
        realtime.send_event(build(agent=self.agent.slug, thread_id=self.ctx.thread_id,
                                  response_id=self.turn.spec.response_id, activity=activity))


async def _tools_stopped(tasks: Any) -> None:
    """Cancel a round's tool tasks still running (its turn stops: a kill, a client gone, a
    tool's bug) and wait until they have stopped, at most :data:`TOOLS_STOP_SECONDS`: what a
    tool does as it stops lands before the turn's own record, never after it."""
    running = [task for task in tasks if not task.done()]
    for task in running:
        task.cancel()
    if running:
        _, late = await asyncio.wait(running, timeout=TOOLS_STOP_SECONDS)
        if late:
            log.warning("%d tool call(s) did not stop within %g s of their cancellation",
                        len(late), TOOLS_STOP_SECONDS)


def _missing(approval: Any) -> ToolSpec:
    """A call the client approved of a server its new request no longer offers."""

    async def run(args: dict[str, Any], ctx: ToolContext) -> ToolResult:
        return ToolResult(f"{approval.tool} was not run: the MCP server '{approval.server}' is "
                          "not among this request's tools", is_error=True)

    return ToolSpec(name=approval.tool, description="", parameters={}, server=approval.server,
                    tool=approval.tool.rsplit("__", 1)[-1], run=run)


def _party(spec: ToolSpec) -> str:
    """Who a call goes to, as a message's from/to names it: another agent by its slug."""
    return spec.tool if spec.server == "agents" else spec.name


_NAME_CHARS = Message._meta.get_field("recipient").max_length or 300
_ID_CHARS = Message._meta.get_field("tool_call_id").max_length or 200


def _names(parties: Any) -> str:
    """A message's from/to: each party once, in order, cut to fit the column (a round of
    twenty calls of one tool is sent to that tool)."""
    text = ", ".join(dict.fromkeys(storable(p) for p in parties))
    return text if len(text) <= _NAME_CHARS else text[:_NAME_CHARS - 1] + "…"


async def _add_memories(turn: Any, scope: str) -> None:
    users = [m.text for m in turn.request.messages if m.role == "user" and m.text.strip()]
    facts = await selectors.memory_search(agent_id=turn.agent.pk, scope=scope,
                                          query=" ".join(users[-2:]), limit=5)
    if facts:
        system = turn.request.system
        turn.request = turn.request.replace(system=(system + "\n\n" if system else "")
                                            + "What you remember from earlier conversations:\n"
                                            + "\n".join(f"- {f}" for f in facts))
