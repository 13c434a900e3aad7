"""What a turn is asked to do (:class:`TurnSpec`), and what every kind of turn offers the
interfaces that serve it (:class:`TurnLike`: an agent's :class:`agents.turns.runtime.Turn`, a
team's :class:`agents.turns.teams.TeamTurn`)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from agents import services
from agents.kernel import llm
from agents.models import Agent, ApiKey
from agents.tools.hosted import HostedPlan


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
    workspace_root: str | None = None  # a coding client's workspace (openai_api.sessions)
    title: str | None = None  # a new thread's title (default: its first user text)
    # Store the turn before the provider is asked (operator inject: the caller needs the
    # message id at once), waiting at most ``lease_wait`` seconds for a busy thread.
    store_first: bool = False
    lease_wait: float | None = None
    # How a virtual model (``auto``) reached this agent: stored on the thread, and the reply
    # says so (``X-Gaia-Routed-To``).
    route: dict[str, Any] | None = None
    run_id: int | None = None  # the benchmark run this turn works for (a new thread's mark)
    # Another agent's call (its agent:<slug> tool): the call's message, and how deep.
    parent_message_id: int | None = None
    depth: int = 0
    budget: Any = None  # the request's (agents.turns.budget), shared down its delegations
    end_user: str | None = None  # the end user a call works for (``user``: the calling agent)
    sender: str = ""  # who said the new user message, when not the client (an operator)
    # The client's hosted tools: those dropped (the reply names them), those the agent's own
    # tools serve (agents.tools.hosted).
    hosted: HostedPlan = field(default_factory=HostedPlan)
    # A conversation's turn (/v1/conversations): the request's messages are all new, added
    # to its thread (``thread_id``) whatever they hold.
    append: bool = False


async def events_to_end(first: Any, following: Callable[[float], Awaitable[Any]],
                        keepalive: float, finish: Callable[[BaseException | None], Awaitable[None]]
                        ) -> AsyncIterator[Any]:
    """A turn's events: ``first``, then ``following(keepalive)`` until it gives ``None``;
    ``finish(error)`` records the outcome whatever happens (normal end, an error re-raised for
    the dialect to render in-band, a cancellation: the client is gone)."""
    error: BaseException | None = None
    try:
        event = first
        while event is not None:
            yield event
            event = await following(keepalive)
    except BaseException as exc:
        error = exc
        raise
    finally:
        await finish(error)


class TurnLike(Protocol):
    """A turn as an interface drives it: :meth:`open` (errors are the request's), :meth:`first`
    (the first event, or ``KEEPALIVE``), then :meth:`events` (streaming) or :meth:`collect`
    (JSON). Whatever happens is recorded by the turn itself."""

    spec: TurnSpec
    result: services.TurnResult  # the outcome, complete once events() or collect() returned
    request: llm.LLMRequest | None  # what the provider is asked, once open() returned
    input_tokens: int | None

    @property
    def model(self) -> str: ...  # the model id the reply names

    @property
    def thread_id(self) -> Any: ...  # known once first() returned

    @property
    def usage(self) -> llm.Usage: ...

    async def open(self) -> None: ...

    async def first(self, wait: float) -> Any: ...

    def events(self, first: Any, keepalive: float) -> AsyncIterator[Any]: ...

    async def collect(self, first: Any) -> services.TurnResult: ...

    async def input_token_count(self) -> int: ...

    def reply_headers(self) -> dict[str, str]: ...

    def log_facts(self) -> dict[str, Any]: ...
