"""What a turn's reply holds while it streams (text, reasoning, tool calls, usage, the time of
its first token), what the feed has heard of it, and what is stored of it at the end."""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field
from typing import Any

from agents import services
from agents.kernel import llm
from agents.kernel.exceptions import GaiaError, TurnInterrupted, TurnKilled
from agents.models.threads import DISCONNECTED_ERROR
from agents.turns import registry

KILLED_ERROR = "An operator stopped this turn."
# A streaming reply's progress reaches the feed at most this often per turn.
DELTA_INTERVAL = 0.1


@dataclass
class ToolCallAcc:
    id: str = ""
    name: str = ""
    arguments: list[str] = field(default_factory=list)


class Reply:
    """A reply as its provider's events build it."""

    def __init__(self) -> None:
        self.t0 = time.monotonic()
        self.first_at: float | None = None
        self.text: list[str] = []
        self.logprobs: list[llm.TokenLogprob] = []
        self.reasoning: list[str] = []
        self.tools: dict[int, ToolCallAcc] = {}
        self.usage: llm.Usage | None = None  # the provider's count, if it gave one
        self.finish_reason: str | None = None
        self.steps: list[llm.ToolActivity] = []  # the agent's own tool calls, as they ended
        self.listings: list[llm.ToolsListed] = []
        self.approvals: list[llm.ApprovalRequest] = []  # a Responses client approves first
        self.delta_at = 0.0  # when the feed last heard of this reply's progress
        self._delta_sent = (0, 0, 0)  # text, reasoning and tool-call parts already published

    def absorb(self, event: Any) -> None:
        if self.first_at is None and not isinstance(event, llm.Usage | llm.Finish
                                                    | llm.ToolsListed | llm.ApprovalRequest):
            self.first_at = time.monotonic()
        if isinstance(event, llm.TextDelta):
            self.text.append(event.text)
            self.logprobs.extend(event.logprobs)
        elif isinstance(event, llm.ReasoningDelta):
            self.reasoning.append(event.text)
        elif isinstance(event, llm.ToolCallDelta):
            acc = self.tools.setdefault(event.index, ToolCallAcc())
            acc.id = event.id or acc.id
            acc.name = event.name or acc.name
            acc.arguments.append(event.arguments)
        elif isinstance(event, llm.Usage):
            self.usage = event
        elif isinstance(event, llm.Finish):
            self.finish_reason = event.reason
        elif isinstance(event, llm.ToolActivity):
            if event.done:
                self.steps.append(event)
        elif isinstance(event, llm.ToolsListed):
            self.listings.append(event)
        elif isinstance(event, llm.ApprovalRequest):
            self.approvals.append(event)

    def delta_due(self) -> bool:
        return time.monotonic() - self.delta_at >= DELTA_INTERVAL

    def delta(self) -> dict[str, Any] | None:
        """What the reply gained since the last call (the fields of a ``message_delta``
        event), or ``None`` if nothing."""
        self.delta_at = time.monotonic()
        sent_text, sent_reasoning, _ = self._delta_sent
        text = "".join(self.text[sent_text:])
        reasoning = "".join(self.reasoning[sent_reasoning:])
        calls = len(self.tools)
        if not text and not reasoning and calls == self._delta_sent[2]:
            return None
        self._delta_sent = (len(self.text), len(self.reasoning), calls)
        return {"text": text, "reasoning": reasoning,
                "tool_calls": [{"name": t.name} for _, t in sorted(self.tools.items())],
                "output_chars": sum(len(t) for t in self.text)}

    def unsent_text(self) -> bool:
        return bool(self.text[self._delta_sent[0]:])

    def usage_for(self, request: llm.LLMRequest) -> llm.Usage:
        """The provider's usage, else an estimate from ``request`` and what came back."""
        if self.usage is not None:
            return self.usage
        out = llm.estimate_tokens("".join(self.text)) + sum(
            llm.estimate_tokens("".join(t.arguments)) for t in self.tools.values())
        return llm.Usage(llm.estimate_request_tokens(request), out, estimated=True)

    @property
    def tool_calls(self) -> list[llm.ToolCall]:
        return [llm.ToolCall(acc.id or f"call_{i}", acc.name, "".join(acc.arguments))
                for i, acc in sorted(self.tools.items())]

    def fill(self, result: services.TurnResult, request: llm.LLMRequest | None) -> None:
        """Copy what is stored of the reply into ``result``: text, reasoning and tool calls
        made storable, usage, latency, the provider's finish reason, time to first token."""
        result.text = storable("".join(self.text))
        result.reasoning = storable("".join(self.reasoning))
        result.logprobs = list(self.logprobs)
        result.tool_calls = [llm.ToolCall(storable(c.id), storable(c.name),
                                          storable(c.arguments)) for c in self.tool_calls]
        if request is not None:
            usage = self.usage_for(request)
            result.input_tokens, result.output_tokens = usage.input_tokens, usage.output_tokens
            result.usage_estimated = usage.estimated
        result.latency_ms = int((time.monotonic() - self.t0) * 1000)
        if self.finish_reason:
            result.finish_reason = self.finish_reason
        result.tool_steps, result.tool_listings = list(self.steps), list(self.listings)
        result.approval_requests = list(self.approvals)
        if self.first_at is not None:
            result.ttft_ms = int((self.first_at - self.t0) * 1000)


def outcome(error: BaseException | None, result: services.TurnResult, *, killed: bool,
            interrupted: bool) -> tuple[str, str]:
    """``(finish_reason, error)`` of a turn that ended with ``error`` (``None``: normally)."""
    if isinstance(error, TurnKilled) or (killed and error is not None):
        return "killed", KILLED_ERROR
    if isinstance(error, TurnInterrupted) or (interrupted and error is not None) or (
            registry.draining() and isinstance(error, asyncio.CancelledError | GeneratorExit)):
        return "interrupted", services.INTERRUPTED_ERROR
    if isinstance(error, asyncio.CancelledError | GeneratorExit):
        return "client_disconnected", DISCONNECTED_ERROR
    if isinstance(error, GaiaError):
        return "error", error.message
    if error is not None:
        return "error", f"Internal error: {type(error).__name__}"
    return result.finish_reason, result.error


def storable(text: str) -> str:
    """``text`` without what no database text column takes: NUL characters (PostgreSQL
    refuses them) and lone surrogates (they cannot be encoded)."""
    if "\x00" in text:
        text = text.replace("\x00", "")
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        text = text.encode("utf-8", "replace").decode("utf-8")
    return text
