"""Team models (``team/<slug>``): several agents work on one request.

A :class:`TeamTurn` is a ``TurnLike`` as :class:`agents.turns.runtime.Turn` is (``open``,
``first``, ``events``, ``collect``, ``usage``, ``result``, ``reply_headers``), so every dialect
serves teams unchanged. Underneath, the *leader's* turn stores the thread (the client's messages, at
once) and, at the end, writes the answer; in between the team's inner work runs:

* ``coordinate``: the leader splits the request (a JSON object of member → task; a reply that
  is not one gives every member the whole request), the members answer concurrently, the
  leader writes the answer from their work;
* ``collaborate``: every member answers the whole conversation concurrently, the leader
  synthesises;
* ``route``: the leader picks one member (a tool call whose argument is an enum of the
  members, or a member's id in its text; else the member whose description fits best) and
  that member's reply, streamed, is the answer.

Every inner step is stored in the thread as a message with ``sender``/``recipient``
(``internal``: never part of the history a client holds), streamed on the dialect's
reasoning channel (never mixed into the answer), published on the feed as it happens
(``team_step``, then ``message``) and counted in the reply's usage. A member that fails or
times out is reported (stored, streamed, told to the leader) and the team answers from the
others. ``Team.max_total_tokens`` bounds every call's tokens together (each member's output
gets a share, the leader's answer what is left); ``Team.max_seconds`` bounds the wall time
(an answer still running then ends with an in-band timeout error).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import re
import time
from collections.abc import AsyncIterator
from typing import Any

from agents import services
from agents.backends import backend_for
from agents.infra.database import run_db
from agents.kernel import bm25, llm
from agents.kernel.exceptions import BackendTimeout, TurnKilled
from agents.models import Agent, Team
from agents.outlet import events, realtime
from agents.turns.auto import parse_choice
from agents.turns.catalogue import LoadedTeam
from agents.turns.requests import Call, agent_call, agent_request, with_knowledge
from agents.turns.runtime import KEEPALIVE, KILLED_ERROR, Turn, TurnSpec
from agents.turns.spec import events_to_end

ROUTE_TOOL = "hand_to"
_END = object()
_TICK = 0.25  # how often the members' phase looks for an operator's kill


@dataclasses.dataclass
class _Failed:
    error: BaseException


def _inner(call: Call, *, recipient: str) -> services.InnerMessage:
    """A call's outcome as the inner message that records it."""
    return services.InnerMessage(
        sender=call.agent.slug, recipient=recipient, role="assistant",
        content=call.text if not call.error else call.text or f"(failed: {call.error})",
        reasoning=call.reasoning, finish_reason="error" if call.error else call.finish_reason,
        input_tokens=call.usage.input_tokens, output_tokens=call.usage.output_tokens,
        usage_estimated=call.usage.estimated, latency_ms=call.latency_ms,
        ttft_ms=call.ttft_ms, provider=call.provider)


def _roster(members: list[Agent]) -> str:
    return "\n".join(f"- {m.slug}: {m.description or m.display_name}" for m in members)


def parse_plan(text: str, members: list[Agent]) -> dict[str, str] | None:
    """``{member slug: task}`` from the leader's plan: the first JSON object in its text
    whose keys name members (others are ignored); ``None`` if there is none."""
    for match in re.finditer(r"\{", text):
        try:
            value, _ = json.JSONDecoder().raw_decode(text[match.start():])
        except ValueError:
            continue
        if isinstance(value, dict):
            slugs = {m.slug for m in members}
            plan = {k: str(v) for k, v in value.items() if k in slugs and str(v).strip()}
            if plan:
                return plan
    return None



class TeamTurn:
    """A team's answer to one request, a ``TurnLike`` as one agent's turn is."""

    def __init__(self, spec: TurnSpec, loaded: LoadedTeam) -> None:
        self.loaded = loaded
        self.team = loaded.team
        self.spec = spec
        self.model = loaded.model_id
        session_key = spec.session_key
        if session_key is None and not spec.thread_id:
            session_key = services.session_key_fallback(
                model=self.model, user=spec.user, messages=spec.request.messages)
        self.leader = Turn(dataclasses.replace(
            spec, agent=loaded.leader, store_first=True, session_key=session_key,
            route={"model": self.model, "team": self.team.slug, "mode": self.team.mode,
                   "leader": loaded.leader.slug, "members": [m.slug for m in loaded.members]}))
        self._queue: asyncio.Queue[Any] = asyncio.Queue()
        self._task: asyncio.Task[None] | None = None
        self._inner_usage: list[llm.Usage] = []
        self._t0 = time.monotonic()
        self._deadline = self._t0 + self.team.max_seconds
        self._closed = False
        self._said: list[str] = []  # the inner work as streamed on the reasoning channel
        self._passages: dict[str, list[dict[str, Any]]] = {}  # members' knowledge, by slug

    # -- the Turn interface ------------------------------------------------------------------

    @property
    def request(self) -> llm.LLMRequest | None:
        return self.leader.request

    @property
    def result(self) -> services.TurnResult:
        return self.leader.result

    @property
    def thread_id(self) -> Any:
        return self.leader.thread_id

    @property
    def input_tokens(self) -> int | None:
        return self.leader.input_tokens

    @property
    def agent(self) -> Agent:
        return self.leader.agent

    @property
    def usage(self) -> llm.Usage:
        """Every call's tokens: the inner calls' and the answer's."""
        calls = [*self._inner_usage]
        if self.leader.request is not None:
            calls.append(self.leader.usage)
        return llm.Usage(sum(u.input_tokens for u in calls), sum(u.output_tokens for u in calls),
                         estimated=any(u.estimated for u in calls))

    def reply_headers(self) -> dict[str, str]:
        return {**self.leader.reply_headers(), "X-Gaia-Team": self.model}

    async def input_token_count(self) -> int:
        return await self.leader.input_token_count()


    def log_facts(self) -> dict[str, Any]:
        """The leader turn's log facts, naming the team as the agent and counting every
        member's tokens."""
        facts = self.leader.log_facts()
        facts["agent"] = self.model
        if self._closed:
            usage = self.usage
            facts["input_tokens"], facts["output_tokens"] = usage.input_tokens, usage.output_tokens
        return facts

    async def open(self) -> None:
        """Store the client's messages in the team's thread (leader's lease held)."""
        await self.leader.open()

    async def first(self, wait: float) -> Any:
        self._task = asyncio.create_task(self._run(), name=f"team-{self.team.slug}")
        try:
            return await self._next(wait)
        except BaseException as exc:
            await self._finish(exc)
            raise

    def events(self, first: Any, keepalive: float) -> AsyncIterator[Any]:
        return events_to_end(first, self._next, keepalive, self._finish)

    async def collect(self, first: Any) -> services.TurnResult:
        """The answer without streaming; its ``reasoning`` holds the team's inner work (what
        a stream carries on its reasoning channel) before the answerer's own."""
        async for _ in self.events(first, keepalive=3600):
            pass
        return dataclasses.replace(self.result,
                                   reasoning="".join(self._said) + self.result.reasoning)

    async def _next(self, wait: float) -> Any:
        try:
            async with asyncio.timeout(wait):
                item = await self._queue.get()
        except TimeoutError:
            return KEEPALIVE
        if item is _END:
            return None
        if isinstance(item, _Failed):
            raise item.error
        return item

    async def _finish(self, error: BaseException | None) -> None:
        """Stop the inner work (a client gone, an error) and make sure the leader's turn is
        recorded and its lease released."""
        if self._closed:
            return
        self._closed = True
        if self._task is not None and not self._task.done():
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
        with contextlib.suppress(Exception):
            await asyncio.shield(self.leader.close(error=error))

    # -- the inner work ------------------------------------------------------------------------

    async def _run(self) -> None:
        try:
            await self._work()
        except BaseException as exc:
            self._queue.put_nowait(_Failed(exc))
            if isinstance(exc, asyncio.CancelledError):
                raise
        else:
            self._queue.put_nowait(_END)

    def _say(self, text: str) -> None:
        """Stream a line of the team's inner work on the reasoning channel."""
        self._said.append(text)
        self._queue.put_nowait(llm.ReasoningDelta(text))

    def _step(self, step: str, sender: str, recipient: str, text: str) -> None:
        realtime.send_event(events.team_step(
            team=self.model, thread_id=self.leader.thread_id, response_id=self.spec.response_id,
            step=step, sender=sender, recipient=recipient, text=text))

    async def _store(self, *messages: services.InnerMessage) -> None:
        assert self.leader.start is not None
        await run_db(services.inner_messages_store, start=self.leader.start,
                     messages=list(messages))

    def _remaining(self) -> float:
        return max(0.0, self._deadline - time.monotonic())

    def _budget_left(self) -> int | None:
        limit = self.team.max_total_tokens
        if not limit:
            return None
        used = sum(u.input_tokens + u.output_tokens for u in self._inner_usage)
        return limit - used

    def _history(self) -> list[llm.Message]:
        assert self.leader.start is not None
        return list(self.leader.start.history)

    def _task_text(self) -> str:
        return next((m.text for m in reversed(self._history()) if m.role == "user"), "")

    def _member_cap(self, agent: Agent, count: int) -> int:
        cap = agent.max_output_tokens or 1024
        limit = self.team.max_total_tokens
        if limit:
            cap = min(cap, max(1, limit // (count + 2) // 2))
        return cap

    async def _work(self) -> None:
        mode = self.team.mode
        leader = self.loaded.leader
        if mode == Team.Mode.ROUTE:
            member = await self._choose_member()
            await self._answer(member, final_by_member=True)
            return
        if mode == Team.Mode.COORDINATE:
            tasks = await self._plan()
        else:
            tasks = {m.slug: None for m in self.loaded.members}
        calls = await self._members(tasks)
        await self._answer(leader, calls=calls)

    async def _plan(self) -> dict[str, str | None]:
        """The leader's split of the request: ``{member: task}`` (``None``: the whole
        conversation)."""
        leader, members = self.loaded.leader, self.loaded.members
        request = agent_request(leader, messages=self._history(), system=(
            f"You lead the team '{self.team.display_name}'. Its members:\n{_roster(members)}\n\n"
            "Split the user's request into one task per member who can help. Answer with only "
            'a JSON object mapping member ids to their tasks, e.g. {"member-id": "task"}.'),
            max_output_tokens=self._member_cap(leader, len(members)))
        call = await agent_call(leader, request, within=min(self.team.member_timeout_seconds,
                                                             self._remaining() or 0.01))
        self._inner_usage.append(call.usage)
        plan = parse_plan(call.text, members) if not call.error else None
        note = (f"plan: {json.dumps(plan, ensure_ascii=False)}" if plan else
                f"no usable plan ({call.error or 'not a JSON object of member tasks'}); "
                "every member gets the whole request")
        self._say(f"[{leader.slug}] {note}\n")
        self._step("plan", leader.slug, self.model, note)
        await self._store(_inner(call, recipient=self.model))
        if plan is None:
            return {m.slug: None for m in members}
        return {m.slug: plan[m.slug] for m in members if m.slug in plan}

    async def _members(self, tasks: dict[str, str | None]) -> list[tuple[Agent, str, Call]]:
        """Every member with a task answers, concurrently, within the member timeout and the
        team's wall time; stops early (and raises) if an operator kills the turn."""
        leader = self.loaded.leader
        members = [m for m in self.loaded.members if m.slug in tasks]
        whole = self._task_text()
        dispatched = []
        for m in members:
            task = tasks[m.slug] or whole
            self._say(f"[{leader.slug} → {m.slug}] {task}\n")
            self._step("task", leader.slug, m.slug, task)
            dispatched.append(services.InnerMessage(sender=leader.slug, recipient=m.slug,
                                                    role="user", content=task))
        await self._store(*dispatched)
        timeout = min(self.team.member_timeout_seconds, self._remaining() or 0.01)
        requests = {m.slug: await self._with_knowledge(
            m, self._member_request(m, tasks[m.slug], len(members)), tasks[m.slug] or whole)
            for m in members}
        running = {
            asyncio.create_task(agent_call(m, requests[m.slug], within=timeout)):
                (m, tasks[m.slug] or whole)
            for m in members}
        done: list[tuple[Agent, str, Call]] = []
        pending = set(running)
        try:
            while pending:
                if self.leader.killed:
                    raise TurnKilled(KILLED_ERROR)
                finished, pending = await asyncio.wait(pending, timeout=_TICK,
                                                       return_when=asyncio.FIRST_COMPLETED)
                for task in finished:
                    member, text = running[task]
                    call = task.result()
                    self._inner_usage.append(call.usage)
                    if call.error:
                        self._say(f"[{member.slug}] failed: {call.error}\n")
                        self._step("failed", member.slug, leader.slug, call.error)
                    else:
                        self._say(f"[{member.slug} → {leader.slug}] {call.text}\n")
                        self._step("reply", member.slug, leader.slug, call.text)
                    inner = _inner(call, recipient=leader.slug)
                    inner.passages = self._passages.get(member.slug)
                    await self._store(inner)
                    done.append((member, text, call))
        finally:
            for task in pending:
                task.cancel()
        order = {m.pk: i for i, m in enumerate(self.loaded.members)}
        done.sort(key=lambda d: order[d[0].pk])
        return done

    async def _with_knowledge(self, member: Agent, request: llm.LLMRequest, query: str
                              ) -> llm.LLMRequest:
        """A member with knowledge bases gets the best passages for its task, as a turn of
        its own would; its reply records which."""
        request, passages = await with_knowledge(member, request, query)
        if passages:
            self._passages[member.slug] = passages
        return request

    def _member_request(self, member: Agent, task: str | None, count: int) -> llm.LLMRequest:
        leader = self.loaded.leader
        messages = self._history() if task is None else [
            llm.Message(role="user", parts=(llm.TextPart(task),))]
        return agent_request(member, messages=messages, system=(
            f"You are {member.slug}, a member of the team '{self.team.display_name}' led by "
            f"{leader.slug}. Your answer goes to the leader, who writes the final reply."),
            max_output_tokens=self._member_cap(member, count))

    async def _choose_member(self) -> Agent:
        """Route mode: the leader picks the member to hand the request to."""
        leader, members = self.loaded.leader, self.loaded.members
        slugs = [m.slug for m in members]
        request = agent_request(
            leader, messages=self._history(), system=(
                f"You lead the team '{self.team.display_name}'. Hand the user's request to "
                f"exactly one member:\n{_roster(members)}\n\nCall {ROUTE_TOOL} with the "
                "member's id, or answer with the id alone."),
            tools=[llm.Tool(ROUTE_TOOL, "Hand the request to one member.", {
                "type": "object", "properties": {"member": {"type": "string", "enum": slugs}},
                "required": ["member"]})],
            tool_choice=llm.ToolChoice("tool", ROUTE_TOOL), max_output_tokens=64)
        if not backend_for(leader.provider).accepts_tools:
            request = request.replace(tools=[], tool_choice=llm.ToolChoice())
        call = await agent_call(leader, request, within=min(self.team.member_timeout_seconds,
                                                             self._remaining() or 0.01))
        self._inner_usage.append(call.usage)
        args = call.tool_args.replace('"member"', '"agent"')
        choice = None if call.error else parse_choice(call.text, args, slugs)
        if choice is not None:
            member = members[slugs.index(choice)]
            why = f"{leader.slug} chose {member.slug}"
        else:
            index = bm25.Index([f"{m.slug} {m.display_name} {m.description}" for m in members])
            top = index.top(self._task_text(), 1)
            member = members[top[0][0]] if top else members[0]
            why = (f"{leader.slug} named no member ({call.error or call.text[:80]!r}); "
                   f"{member.slug} fits best" if top else
                   f"{leader.slug} named no member; {member.slug} (the first) answers")
        self._say(f"[{leader.slug} → {member.slug}] {why}\n")
        self._step("route", leader.slug, member.slug, why)
        handover = _inner(call, recipient=member.slug)
        handover.content = handover.content or why
        await self._store(handover)
        return member

    async def _answer(self, agent: Agent, *, calls: list[tuple[Agent, str, Call]] = (),
                      final_by_member: bool = False) -> None:
        """The answer: the leader from its members' work, or (route) the chosen member;
        streamed as the reply of the leader's turn."""
        turn = self.leader
        assert turn.start is not None
        assert turn.request is not None
        if final_by_member:
            turn.agent = agent
            turn.result.sender = agent.slug
            turn.request = turn.build_request(turn.start.history)
        else:
            work = "\n\n".join(
                f"[{m.slug}] (task: {task})\n" + (f"FAILED: {c.error}" if c.error else c.text)
                for m, task, c in calls) or "(no member answered)"
            turn.request = turn.request.replace(system=(turn.request.system + "\n\n" if
                                                        turn.request.system else "") + (
                f"You lead the team '{self.team.display_name}'. Your members' work:\n\n{work}"
                "\n\nWrite the reply to the user from it. Members that failed are marked."))
        left = self._budget_left()
        if left is not None:
            used, _ = backend_for(agent.provider).count_tokens(turn.request)
            cap = max(1, left - used)
            turn.request = turn.request.replace(max_output_tokens=min(
                turn.request.max_output_tokens or cap, cap))
        self._step("answer", agent.slug, turn.start.client, "writing the reply")
        first = await turn.first(wait=max(self._remaining(), 0.01))
        events = turn.events(first, keepalive=_TICK)
        async with contextlib.aclosing(events):
            async for event in events:
                if event is KEEPALIVE:
                    if time.monotonic() > self._deadline:
                        await events.athrow(BackendTimeout(
                            f"The team '{self.model}' did not finish within "
                            f"{self.team.max_seconds:g} s."))
                    continue
                self._queue.put_nowait(event)
