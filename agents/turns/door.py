"""The one door into a turn.

Every interface that makes an agent answer comes through here: the ``/v1`` dialects
(:func:`authorize`, then :func:`turn_open`), operator inject (:mod:`agents.turns.inject`) and
benchmark runs (:func:`turn_ask`). :func:`turn_open` resolves what the client named (an agent,
``auto`` or ``team/<slug>``), builds the :class:`TurnSpec` and opens the turn, so that a turn is
stored, leased, fed to the feed, killable and recorded the same way whoever asked for it.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from django.conf import settings

from agents import selectors, services
from agents.backends import backend_for
from agents.infra.database import ReadNotAvailable, run_db
from agents.kernel import llm
from agents.kernel.exceptions import OrganismStopped, PermissionDenied
from agents.models import Agent, ApiKey, Message
from agents.outlet import realtime
from agents.tools.hosted import hosted_plan
from agents.turns import admission, auto, catalogue, requests
from agents.turns.describe import extract_workspace_root, thread_title
from agents.turns.runtime import Turn
from agents.turns.spec import TurnLike, TurnSpec
from agents.turns.teams import TeamTurn


async def authorize(*, raw_key: str | None, model: str | None = None, throttle: bool = True
                    ) -> tuple[ApiKey | None, Agent | str | None]:
    """``(key, target)`` for a request with the API key ``raw_key`` naming ``model``: the agent,
    or the virtual model's id (``auto``, ``team/<slug>``: resolved by :func:`turn_open`, which
    needs the conversation), ``None`` without a model.

    Raises in the order clients see: 401 (key), 429 (its rate limit), then 404 (unknown model),
    403 (not allowed for this key), 503 (paused). On the event loop when what it needs is in
    memory and the configuration stamp says it is current (the usual case), else on a
    database thread; the stamp is read on every request, so a revoked key is refused at once.
    ``throttle=False``: the request was counted at its edge already (an MCP ``tools/call``,
    authorized again for the agent it names).
    """
    virtual = model is not None and catalogue.is_virtual(model)
    args: dict[str, Any] = {"raw_key": raw_key, "agent_slug": None if virtual else model,
                            "anonymous_allowed": settings.GAIA_ALLOW_ANONYMOUS,
                            "throttle": throttle}
    try:
        version = await selectors.config_version_nowait()
    except ReadNotAvailable:
        key, agent = await run_db(services.request_authorize, **args)
    else:
        try:
            key, agent = services.request_authorize(version=version, cached_only=True, **args)
        except services.NeedsDatabase:
            key, agent = await run_db(services.request_authorize, version=version, **args)
    return key, (model if virtual else agent)


async def authorize_stored(*, api_key: ApiKey | None, model: str
                           ) -> tuple[ApiKey | None, Agent | str]:
    """:func:`authorize` for a request a worker runs after it was answered (a background
    response): the key as stored now (revoked or expired since: 401), ``model`` resolved and
    allowed for it as then; not counted again against the key's rate limit."""
    def check() -> tuple[ApiKey | None, Agent | str]:
        key = services.api_key_recheck(key=api_key, scope=ApiKey.Scope.CHAT) \
            if api_key is not None else None
        if catalogue.is_virtual(model):
            return key, model
        _, agent = services.request_authorize(raw_key=None, anonymous_allowed=True,
                                              agent_slug=model, throttle=False)
        assert agent is not None
        if not selectors.api_key_may_use(api_key=key, agent=agent):
            raise PermissionDenied(f"This API key may not use the model '{model}'.",
                                   param="model")
        return key, agent

    return await run_db(check)


async def _resolve(target: Agent | str, api_key: ApiKey | None, messages: list[llm.Message], *,
                   thread_id: str | None, session_key: str | None, response_id: str
                   ) -> tuple[Agent, dict[str, Any] | None, catalogue.LoadedTeam | None]:
    """``(agent, route, team)``: ``auto`` is routed to an agent, ``team/<slug>`` is its team
    (and its leader); an agent is itself."""
    if target == catalogue.AUTO:
        route = await auto.route_choose(api_key=api_key, messages=messages, thread_id=thread_id,
                                        session_key=session_key, response_id=response_id)
        return route.agent, route.as_dict(), None
    if isinstance(target, str):
        team = await run_db(catalogue.team_get, api_key=api_key, model=target)
        return team.leader, None, team
    return target, None, None


async def turn_open(*, target: Agent | str, api_key: ApiKey | None, request: llm.LLMRequest,
                    dialect: str, response_id: str, thread_id: str | None = None,
                    session_key: str | None = None, previous_response_id: str | None = None,
                    observe: Callable[[TurnLike], None] | None = None, sender: str = "",
                    conversation_id: str | None = None) -> TurnLike:
    """:func:`_turn_open`, for a turn this process has room for: past
    ``GAIA_MAX_TURNS_IN_FLIGHT`` it raises :class:`ServerOverloaded` (503) at once, before any
    work (:mod:`agents.turns.admission`). The turn's slot is given back however it ends.
    A stopped organism (``POST /api/v1/organism/stop``) opens none: 503 ``organism_stopped``.
    ``sender``: who said the new message, when the client names itself (an MCP client's
    ``clientInfo.name``), shown on its thread. ``conversation_id``: the conversation
    (``/v1/conversations``) whose thread the turn continues, its input added to it."""
    await _organism_running_check()
    slot = admission.admit()
    try:
        return await _turn_open(
            target=target, api_key=api_key, request=request, dialect=dialect,
            response_id=response_id, thread_id=thread_id, session_key=session_key,
            previous_response_id=previous_response_id, observe=observe, slot=slot,
            sender=sender, conversation_id=conversation_id)
    except BaseException:
        slot.release()  # it never opened (its close gave it back already if it had begun)
        raise


async def _organism_running_check() -> None:
    """503 with ``Retry-After`` if an operator stopped the organism: the state read with the
    configuration stamp :func:`authorize` has just read (no query unless the stamp changed)."""
    state = selectors.organism_state_current()
    if state is None:
        state = await run_db(selectors.organism_state_cached)
    if state.stopped:
        raise OrganismStopped("Gaia is stopped by an operator and takes no new turns; try "
                              "again later.", retry_after=services.ORGANISM_STOPPED_RETRY_AFTER)


async def _turn_open(*, target: Agent | str, api_key: ApiKey | None, request: llm.LLMRequest,
                     dialect: str, response_id: str, thread_id: str | None,
                     session_key: str | None, previous_response_id: str | None,
                     observe: Callable[[TurnLike], None] | None,
                     slot: admission.Slot, sender: str = "",
                     conversation_id: str | None = None) -> TurnLike:
    """Open the turn that answers ``request`` (the client's conversation, in Gaia's canonical
    form) for ``target`` (from :func:`authorize`).

    ``thread_id``/``session_key`` say which conversation this is (a client's headers);
    ``previous_response_id`` continues from a stored reply (the Responses API): its thread
    continues, or, from an older reply, a new thread branches there. A new thread's title and
    a coding client's workspace root come from the conversation (:mod:`agents.turns.describe`).
    ``observe`` is given the turn before it opens (a request's log line names it even if
    opening fails).

    The client's hosted tools are served, dropped or refused by the agent's policy
    (:func:`agents.tools.hosted.hosted_plan`; the turn's ``spec.hosted`` says which).

    Raises :class:`GaiaError` subclasses before any output exists (404 unknown previous
    response or thread, 400 context, images or a hosted tool refused, 403/404/503 from a
    team or ``auto``)."""
    if previous_response_id:
        # Gaia is stateful: the stored thread continues, the input holds only new items.
        thread_id, session, history = await run_db(
            selectors.thread_branch_for_response, response_id=previous_response_id,
            api_key=api_key)
        if history is not None:  # an older reply: branch off there
            request.messages = history + request.messages
            thread_id, session_key = None, session
    agent, route, team = await _resolve(target, api_key, request.messages, thread_id=thread_id,
                                        session_key=session_key, response_id=response_id)
    if conversation_id is not None:  # its thread, moved to this agent if none answered yet
        thread_id = await run_db(services.conversation_turn_thread,
                                 conversation_id=conversation_id, api_key=api_key, agent=agent,
                                 title=thread_title(request.messages))
    hosted = hosted_plan(request=request, agent=agent, api_key=api_key,
                         tools_run=backend_for(agent.provider).accepts_tools)
    if hosted.choice is not None:  # a hosted tool required: the agent's tool that serves it
        request.tool_choice = hosted.choice
    spec = TurnSpec(agent=agent, api_key=api_key, request=request, dialect=dialect,
                    response_id=response_id, thread_id=thread_id, session_key=session_key,
                    user=request.user, route=route, title=thread_title(request.messages),
                    workspace_root=extract_workspace_root(request.messages, request.system),
                    hosted=hosted, sender=sender, append=conversation_id is not None)
    turn: TurnLike = TeamTurn(spec, team) if team is not None else Turn(spec)
    # Given back when the turn closes (a team's when its leader's turn does).
    (turn.leader if isinstance(turn, TeamTurn) else turn).admitted = slot
    if observe is not None:
        observe(turn)
    await turn.open()
    return turn


async def input_tokens_count(*, target: Agent | str, api_key: ApiKey | None,
                             request: llm.LLMRequest) -> int:
    """How many input tokens ``request`` would be for ``target``'s provider, the agent's
    instructions included (Anthropic's ``count_tokens``); nothing is stored."""
    agent, _, _ = await _resolve(target, api_key, request.messages, thread_id=None,
                                 session_key=None, response_id="")
    built = requests.agent_request(agent, messages=request.messages, system=request.system,
                                   base=request,
                                   workspace=extract_workspace_root(request.messages,
                                                                    request.system))
    return await requests.count_tokens(backend_for(agent.provider), built)


async def model_list(*, api_key: ApiKey | None) -> list[Any]:
    """The models this key may name: its agents, ``auto``, its teams."""
    return await run_db(catalogue.model_list, api_key=api_key)


async def model_get(*, raw_key: str | None, model: str) -> Any:
    """The model ``model`` as this key may see it (an agent or a virtual model); raises as
    :func:`authorize` does."""
    key, found = await authorize(raw_key=raw_key, model=model)
    if isinstance(found, str):
        return await run_db(catalogue.virtual_model_get, api_key=key, model=found)
    return found


async def stored_reply(*, response_id: str, api_key: ApiKey | None
                       ) -> tuple[Message, str] | None:
    """The stored reply ``response_id`` of a thread this key owns, with the model id it names
    (a team's, else the agent that answered); ``None`` if there is none."""
    def read() -> tuple[Message, str] | None:
        row = selectors.stored_reply_get(response_id=response_id, api_key=api_key)
        return (row, catalogue.reply_model(row)) if row is not None else None

    return await run_db(read)


# -- benchmark runs -------------------------------------------------------------------------


@dataclass
class Answer:
    """What an agent answered to :func:`turn_ask` or :func:`turn_replay`."""

    text: str
    usage: llm.Usage
    thread_id: str
    finish_reason: str
    agent: str = ""  # the agent that answered (auto routes, a team's leader answers)
    ttft_ms: int | None = None
    latency_ms: int | None = None
    tool_calls: int = 0  # calls of the agent's own tools in the turn
    error: str = ""


async def turn_ask(*, agent: str, prompt: str, system: str = "", run_id: int | None = None,
                   title: str | None = None, max_output_tokens: int | None = None) -> Answer:
    """Ask ``agent`` one question through the runtime, as a client's turn would: a thread of
    its own (marked with ``run_id``: hidden from the default thread list), the agent's
    instructions, knowledge, limits and fallback providers; the feed hears of it and shows
    the agent at work.

    Raises like a turn: :class:`AgentNotFound`, :class:`AgentPaused` (an operator paused the
    agent), :class:`TurnKilled` (an operator killed the thread), the provider's errors.

    The turn runs on the server's event loop when the caller runs on another one (a
    single-process server's embedded benchmark worker), so that a kill, the feed and the
    in-memory channel layer see it as any other turn of the process."""
    return await turn_replay(
        target=agent, messages=[llm.Message(role="user", parts=(llm.TextPart(prompt),))],
        system=system, run_id=run_id, title=title, max_output_tokens=max_output_tokens)


async def turn_replay(*, target: str, messages: list[llm.Message], system: str = "",
                      run_id: int | None = None, title: str | None = None,
                      max_output_tokens: int | None = None,
                      response_format: dict[str, Any] | None = None) -> Answer:
    """Have ``target`` (an agent's slug, ``auto`` or ``team/<slug>``) answer a conversation
    (``messages``, ending with a user message) as :func:`turn_ask` does: a thread of the run
    of its own, everything a client's turn goes through (tools, knowledge, fallbacks, a
    team's members), the feed told. ``response_format``: the canonical (Chat Completions)
    shape, as a client would ask for JSON."""
    serving = realtime.serving_loop()
    coro = _replay(target=target, messages=messages, system=system, run_id=run_id,
                   title=title, max_output_tokens=max_output_tokens,
                   response_format=response_format)
    if serving is not None and serving is not asyncio.get_running_loop():
        return await asyncio.wrap_future(asyncio.run_coroutine_threadsafe(coro, serving))
    return await coro


async def _replay(*, target: str, messages: list[llm.Message], system: str,
                  run_id: int | None, title: str | None, max_output_tokens: int | None,
                  response_format: dict[str, Any] | None) -> Answer:
    virtual = catalogue.is_virtual(target)
    _, found = await run_db(services.request_authorize, raw_key=None, anonymous_allowed=True,
                            agent_slug=None if virtual else target)
    request = llm.LLMRequest(model=target, system=system, max_output_tokens=max_output_tokens,
                             messages=list(messages),
                             extra={"response_format": response_format} if response_format
                             else {})
    tag = uuid.uuid4().hex
    response_id = f"bench-{tag[:24]}"
    session_key = f"run:{run_id}:{tag}"
    agent, route, team = await _resolve(target if virtual else found, None, request.messages,
                                        thread_id=None, session_key=session_key,
                                        response_id=response_id)
    spec = TurnSpec(agent=agent, api_key=None, request=request, dialect="benchmark",
                    response_id=response_id, session_key=session_key,
                    user=f"run {run_id}" if run_id is not None else None,
                    title=title or thread_title(request.messages), store_first=True,
                    lease_wait=0, run_id=run_id, route=route)
    turn: TurnLike = TeamTurn(spec, team) if team is not None else Turn(spec)
    await turn.open()
    result = await turn.collect(await turn.first(wait=3600))
    return Answer(result.text, turn.usage, str(turn.thread_id), result.finish_reason,
                  agent=turn.model, ttft_ms=result.ttft_ms, latency_ms=result.latency_ms,
                  tool_calls=len(result.tool_steps), error=result.error)


# -- schedules ------------------------------------------------------------------------------


async def turn_scheduled(*, agent: str, prompt: str, schedule: str, session_key: str,
                         thread_id: str | None = None) -> Answer:
    """Have ``agent`` answer ``prompt`` for the schedule named ``schedule``, as a client's
    turn would (its thread, the feed, kill, budgets), with no request: in thread
    ``thread_id`` (a new turn of the schedule's one thread) or a new thread of
    ``session_key``; its messages' channel (dialect) is ``schedule``.

    Raises like a turn: :class:`OrganismStopped`, :class:`AgentNotFound`,
    :class:`AgentPaused`, a busy thread's or the provider's errors. Runs on the server's loop
    when there is one (a single-process server's embedded worker), as :func:`turn_replay`."""
    serving = realtime.serving_loop()
    coro = _scheduled(agent=agent, prompt=prompt, schedule=schedule, session_key=session_key,
                      thread_id=thread_id)
    if serving is not None and serving is not asyncio.get_running_loop():
        return await asyncio.wrap_future(asyncio.run_coroutine_threadsafe(coro, serving))
    return await coro


async def _scheduled(*, agent: str, prompt: str, schedule: str, session_key: str,
                     thread_id: str | None) -> Answer:
    await _organism_running_check()
    _, found = await run_db(services.request_authorize, raw_key=None, anonymous_allowed=True,
                            agent_slug=agent)
    request = llm.LLMRequest(model=agent, system="", messages=[
        llm.Message(role="user", parts=(llm.TextPart(prompt),))])
    spec = TurnSpec(agent=found, api_key=None, request=request, dialect="schedule",
                    response_id=f"sched-{uuid.uuid4().hex[:24]}", thread_id=thread_id,
                    session_key=None if thread_id else session_key, user=f"schedule {schedule}",
                    title=f"{schedule}: {thread_title(request.messages)}"[:200],
                    store_first=True, lease_wait=0, sender=f"schedule {schedule}")
    turn = Turn(spec)
    await turn.open()
    result = await turn.collect(await turn.first(wait=3600))
    return Answer(result.text, turn.usage, str(turn.thread_id), result.finish_reason,
                  agent=turn.model, ttft_ms=result.ttft_ms, latency_ms=result.latency_ms,
                  tool_calls=len(result.tool_steps), error=result.error)
