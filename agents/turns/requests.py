"""The one place an agent becomes a provider request, and the calls that run one.

:func:`agent_request` applies an agent's settings (instructions, model, output limit,
sampling) to a conversation; :func:`with_knowledge` adds its knowledge bases' best passages;
:func:`request_fit` keeps the request within the agent's and the model's input window. A turn
(:mod:`agents.turns.runtime`), a team's leader and members (:mod:`agents.turns.teams`) and the
``auto`` router (:mod:`agents.turns.auto`) all build their requests here.

:func:`agent_call` runs one request to an agent's provider chain to its end, without a turn of
its own (a team's inner step, the router's choice): its outcome is a :class:`Call`, never an
exception.
"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass, field
from itertools import accumulate
from typing import Any

from agents import selectors
from agents.backends import fallback_stream
from agents.kernel import llm
from agents.kernel.exceptions import ContextTooLong, GaiaError, InvalidRequest
from agents.models import Agent

log = logging.getLogger("gaia.turns")

MAX_CHARS_PER_TOKEN = llm.MAX_CHARS_PER_TOKEN
COUNT_ON_LOOP_TOKENS = llm.COUNT_ON_LOOP_TOKENS


def agent_request(agent: Agent, *, messages: list[llm.Message], system: str = "",
                  base: llm.LLMRequest | None = None, max_output_tokens: int | None = None,
                  workspace: str | None = None, **fields: Any) -> llm.LLMRequest:
    """``messages`` as a request to ``agent``'s model: its instructions, then ``system`` (the
    client's system text, or what a team or the router tells it), then the client's workspace
    root; at most the smaller of the agent's ``max_output_tokens`` and the one asked for
    (``max_output_tokens``, else ``base``'s); ``base``'s temperature and top_p, else the
    agent's. ``base`` carries the client's other fields (tools, format...); ``fields``
    override anything."""
    base = base or llm.LLMRequest(model="", system="", messages=[])
    parts = [agent.instructions.strip(), system.strip(),
             f"The user's workspace root is {workspace}." if workspace else ""]
    limit = agent.max_output_tokens or None
    wanted = max_output_tokens or base.max_output_tokens
    values: dict[str, Any] = {
        "model": agent.model_name,
        "system": "\n\n".join(p for p in parts if p),
        "messages": messages,
        "max_output_tokens": min(x for x in (limit, wanted) if x) if (limit or wanted) else None,
        "temperature": base.temperature if base.temperature is not None else agent.temperature,
        "top_p": base.top_p if base.top_p is not None else agent.top_p,
    }
    values.update(fields)
    return base.replace(**values)


def request_check(agent: Agent, backend: Any, client: llm.LLMRequest) -> None:
    """Refuse what ``agent``'s provider cannot honour: images for a text-only model, a field
    that would change the answer (:data:`agents.kernel.llm.ANSWER_FIELDS`), client tools. Raises
    :class:`InvalidRequest` naming the field (``param``, as Gaia spells it: dialects rename
    it)."""
    if not backend.accepts_images and any(m.has_images for m in client.messages):
        raise InvalidRequest(
            f"The model '{agent.slug}' cannot read images (its provider "
            f"'{agent.provider.name}' is text-only). Remove the images or pick another model.",
            param="messages", code="images_not_supported")
    honours = getattr(backend, "honours", None)
    for name in llm.ANSWER_FIELDS:
        if honours is not None and name in client.extra and name not in honours:
            raise InvalidRequest(
                f"The model '{agent.slug}' (a '{agent.provider.kind}' provider) cannot honour "
                f"'{name}'. Remove it, or pick another model.",
                param=name, code="unsupported_parameter")
    fmt = client.extra.get("response_format")
    kinds = getattr(backend, "response_formats", None)
    if isinstance(fmt, dict) and kinds is not None and fmt.get("type") not in kinds:
        raise InvalidRequest(
            f"The model '{agent.slug}' (a '{agent.provider.kind}' provider) cannot honour "
            f"'response_format' of type {fmt.get('type')!r}; it takes "
            f"{' or '.join(sorted(kinds))}.", param="response_format",
            code="unsupported_parameter")
    if client.tools and not backend.accepts_tools:
        raise InvalidRequest(f"The model '{agent.slug}' cannot call client tools.",
                             param="tools", code="tools_not_supported")


async def with_knowledge(agent: Agent, request: llm.LLMRequest, query: str
                         ) -> tuple[llm.LLMRequest, list[dict[str, Any]] | None]:
    """``request`` with the best passages of ``agent``'s knowledge bases for ``query`` added
    to its system text (numbered, with their sources), and the passages it got (without
    their text: what a reply records), or ``None`` when there were none."""
    ids = getattr(agent, "knowledge_base_ids", None)
    if not ids or not query.strip():
        return request, None
    passages = await selectors.knowledge_search(knowledge_base_ids=ids, query=query)
    if not passages:
        return request, None
    system = request.system
    request = request.replace(system=(system + "\n\n" if system else "")
                              + selectors.passages_prompt(passages))
    return request, [{k: v for k, v in p.items() if k != "text"} for p in passages]


async def count_tokens(backend: Any, request: llm.LLMRequest, *, rough: int | None = None
                       ) -> int:
    """The backend's count of ``request``'s input tokens, off the event loop when large."""
    if rough is None:
        rough = llm.estimate_request_tokens(request)
    if rough <= COUNT_ON_LOOP_TOKENS:
        return backend.count_tokens(request)[0]
    return (await asyncio.to_thread(backend.count_tokens, request))[0]


@dataclass
class Fitted:
    """A request that fits its agent's window: how many input tokens it has (``None``: not
    counted, the agent has no limit) and how many of the oldest messages were left out."""

    request: llm.LLMRequest
    input_tokens: int | None = None
    trimmed: int = 0
    note: str = ""


async def request_fit(agent: Agent, backend: Any, request: llm.LLMRequest) -> Fitted:
    """Keep ``request`` within the agent's ``max_input_tokens`` and the model's own window (a
    backend that knows it has ``input_window()``). Past it, the agent's ``context_overflow``
    decides: ``error`` (400 naming the setting) or ``trim_oldest``: the oldest turns are
    dropped (the system prompt and the latest message are kept) and the reply says so.

    The prompt is bounded by the window before anything is tokenized: input with more
    characters than even the longest tokens could fit is refused (``error``) or trimmed by the
    4-characters estimate, each message estimated once (``trim_oldest``); then the exact count
    finds where to cut by bisection over the turns (a few counts of at most that bound, not
    one count of the whole prompt per dropped turn: an 18.5 MB, 1,999-message request held a
    core for 75 s). Large counts run off the event loop.
    Raises :class:`ContextTooLong` when the request cannot be served."""
    fitted = Fitted(request)
    limit = agent.max_input_tokens or None
    window_of = getattr(backend, "input_window", None)
    window = window_of() if window_of is not None else None
    if window:
        room = window - (request.max_output_tokens or 0)
        limit = min(limit, room) if limit else room
    if not limit:
        return fitted
    trim = agent.context_overflow == "trim_oldest"
    bound = limit * MAX_CHARS_PER_TOKEN // 4  # no text this rough could fit in the limit
    messages = list(request.messages)
    cuts = [0, *_turn_cuts(messages)] if trim else [0]  # where the kept messages may start
    # rough[i]: the estimate of the request keeping messages[i:] (each message counted once)
    fixed = llm.estimate_request_tokens(request.replace(messages=[]))
    # After each message's first estimate it is kept on the message (llm.Message), and a
    # continued thread's turn sums the same objects again: accumulate keeps that sum in C
    # (the loop in Python was 0.47 ms of a 1,000-message thread's turn, issue 27).
    after = list(accumulate(map(llm.estimate_message_tokens, reversed(messages)), initial=0))
    after.reverse()
    first = next((k for k, cut in enumerate(cuts) if fixed + after[cut] <= bound),
                 len(cuts) - 1)
    rough = fixed + after[cuts[first]]
    if rough > bound:
        raise ContextTooLong(
            f"This conversation has at least {rough * 4 // MAX_CHARS_PER_TOKEN} input "
            f"tokens; the model '{agent.slug}' accepts {limit}.", param="messages")

    counted: dict[int, int] = {}

    async def used_from(k: int) -> int:
        if k not in counted:
            kept = request.replace(messages=messages[cuts[k]:])
            counted[k] = await count_tokens(backend, kept, rough=fixed + after[cuts[k]])
        return counted[k]

    used = await used_from(first)
    if used > limit and not trim:
        raise ContextTooLong(
            f"This conversation has about {used} input tokens; the model '{agent.slug}' "
            f"accepts {limit}. Set the agent's context_overflow to trim_oldest to drop the "
            "oldest turns, or raise its max_input_tokens (and its model's window).",
            param="messages")
    chosen = first
    if used > limit:  # the fewest turns dropped that fit: counts only fall as turns go
        low, high = first + 1, len(cuts) - 1
        chosen = high
        while low <= high:
            middle = (low + high) // 2
            if await used_from(middle) <= limit:
                chosen, high = middle, middle - 1
            else:
                low = middle + 1
        used = await used_from(chosen)
    fitted.trimmed = cuts[chosen]
    fitted.request = request.replace(messages=messages[cuts[chosen]:]) if fitted.trimmed \
        else request
    fitted.input_tokens = used
    if used > limit:
        raise ContextTooLong(
            f"Even with its oldest turns trimmed, this request needs about {used} input "
            f"tokens (the system prompt, the tools and the latest message); the model "
            f"'{agent.slug}' accepts {limit}. Raise the agent's max_input_tokens (and its "
            "model's window), or send a shorter system prompt.", param="messages")
    if fitted.trimmed:
        fitted.note = (f"Trimmed the {fitted.trimmed} oldest messages to fit the model's window "
                       f"({limit} input tokens; context_overflow=trim_oldest).")
    return fitted


def _turn_cuts(messages: list[llm.Message]) -> list[int]:
    """Where the kept messages start as the oldest whole turns are dropped, one after
    another: at the next user message, else at the call the latest tool results answer (a
    result never loses its call), else at the latest message alone. One pass."""
    users = [i for i, m in enumerate(messages) if m.role == "user"]
    last_call = max((i for i, m in enumerate(messages) if m.role == "assistant"), default=-1)
    ends_with_results = bool(messages) and messages[-1].role == "tool"
    cuts: list[int] = []
    at, next_user = 0, 0
    while True:
        while next_user < len(users) and users[next_user] <= at:
            next_user += 1
        if next_user < len(users):
            cut = users[next_user]
        elif ends_with_results and last_call >= at:
            cut = last_call
        else:
            cut = len(messages) - 1
        if cut <= at:
            return cuts
        cuts.append(cut)
        at = cut


# -- one call, without a turn ---------------------------------------------------------------


@dataclass
class Call:
    """What one request to an agent gave: its text, reasoning and tool-call arguments, its
    usage and timings, and why it failed (``error``) if it did."""

    agent: Agent
    text: str = ""
    reasoning: str = ""
    tool_args: str = ""
    usage: llm.Usage = field(default_factory=lambda: llm.Usage(0, 0))
    provider: str = ""
    latency_ms: int = 0
    ttft_ms: int | None = None
    finish_reason: str = "stop"
    error: str = ""


async def agent_call(agent: Agent, request: llm.LLMRequest, *, within: float) -> Call:
    """Run one request to ``agent`` (its provider chain) to the end; never raises for the
    provider's failures or a timeout (they are in ``Call.error``)."""
    call = Call(agent)
    t0 = time.monotonic()
    text: list[str] = []
    reasoning: list[str] = []
    args: list[str] = []
    usage: llm.Usage | None = None

    def answered(provider: Any) -> None:
        call.provider = provider.name

    try:
        async with asyncio.timeout(within):
            chain = getattr(agent, "provider_chain", None) or [agent.provider]
            async for event in fallback_stream(chain, request, on_answer=answered):
                if call.ttft_ms is None and not isinstance(event, llm.Usage | llm.Finish):
                    call.ttft_ms = int((time.monotonic() - t0) * 1000)
                if isinstance(event, llm.TextDelta):
                    text.append(event.text)
                elif isinstance(event, llm.ReasoningDelta):
                    reasoning.append(event.text)
                elif isinstance(event, llm.ToolCallDelta):
                    args.append(event.arguments)
                elif isinstance(event, llm.Usage):
                    usage = event
                elif isinstance(event, llm.Finish):
                    call.finish_reason = event.reason
    except TimeoutError:
        call.error = f"{agent.slug} did not answer within {within:g} s"
        call.finish_reason = "error"
    except GaiaError as exc:
        call.error = exc.message
    except Exception as exc:  # noqa: BLE001 - one call's bug must not sink its caller
        log.exception("call to %s failed", agent.slug)
        call.error = f"internal error ({type(exc).__name__})"
    call.text, call.reasoning, call.tool_args = "".join(text), "".join(reasoning), "".join(args)
    call.latency_ms = int((time.monotonic() - t0) * 1000)
    call.usage = usage or llm.Usage(
        llm.estimate_request_tokens(request),
        llm.estimate_tokens(call.text + call.tool_args), estimated=True)
    return call
