"""The canonical conversation model and the backend (LLM provider) interface.

Every /v1 dialect parses its request into :class:`LLMRequest` and renders the
:data:`Event` stream a backend yields; backends never see a dialect. The shapes follow the
common ground of the OpenAI Chat Completions, OpenAI Responses and Anthropic Messages APIs.

A backend is an object with ``async def stream(request) -> AsyncIterator[Event]``. It must:

* yield zero or more :class:`TextDelta`, :class:`ReasoningDelta` and :class:`ToolCallDelta`
  events, then at most one :class:`Usage` and exactly one :class:`Finish` last;
* stop all upstream work when the iterator is closed or its task is cancelled (the HTTP
  request to the upstream is closed, a local generation stops);
* raise :class:`agents.kernel.exceptions.BackendError` (or a subclass) for provider failures.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

# ``system`` in ``messages``: an instruction given at that point of the conversation (Anthropic's
# mid-conversation system messages); the request's own ``system`` stays the opening prompt.
Role = Literal["user", "assistant", "tool", "system"]
FinishReason = Literal["stop", "length", "tool_calls", "content_filter", "cancelled", "error"]


@dataclass(frozen=True, slots=True)
class TextPart:
    text: str
    type: Literal["text"] = "text"


@dataclass(frozen=True, slots=True)
class ImagePart:
    """An image, as a URL or as base64 ``data`` with its ``media_type``."""

    url: str | None = None
    data: str | None = None
    media_type: str | None = None
    type: Literal["image"] = "image"

    def as_data_uri_or_url(self) -> str:
        if self.data is not None:
            return f"data:{self.media_type or 'image/png'};base64,{self.data}"
        return self.url or ""


Part = TextPart | ImagePart


@dataclass(frozen=True, slots=True)
class ToolCall:
    id: str
    name: str
    arguments: str  # JSON text, as the model produced it


@dataclass(frozen=True, slots=True)
class Message:
    """One conversation turn. ``tool`` messages carry ``tool_call_id`` and their output text."""

    role: Role
    parts: tuple[Part, ...] = ()
    tool_calls: tuple[ToolCall, ...] = ()
    tool_call_id: str | None = None
    is_error: bool = False
    # estimate_message_tokens's answer, once asked (-1: not yet). A continued thread's
    # stored messages are the same objects turn after turn (selectors.thread_history keeps
    # them), and every turn estimates the whole conversation: 1,000 messages' estimates
    # were a tenth of such a turn's CPU (issue 27, py-spy under scripts/perf/data_scale.py).
    _estimate: int = field(default=-1, init=False, repr=False, compare=False, hash=False)

    @property
    def text(self) -> str:
        parts = self.parts
        if len(parts) == 1 and type(parts[0]) is TextPart:  # the usual message: no join
            return parts[0].text
        return "".join(p.text for p in parts if isinstance(p, TextPart))

    @property
    def has_images(self) -> bool:
        return any(isinstance(p, ImagePart) for p in self.parts)

    def fingerprint(self) -> list[Any]:
        """What identifies this message when a client resends it (see thread reconciliation)."""
        return [
            self.role,
            self.text,
            [p.as_data_uri_or_url()[:256] for p in self.parts if isinstance(p, ImagePart)],
            [[c.id, c.name, canonical_json(c.arguments)] for c in self.tool_calls],
            self.tool_call_id,
        ]


def canonical_json(text: str) -> str:
    """JSON text in one spelling (sorted keys, no spaces), so the same tool arguments match
    whichever dialect or client re-serialised them; non-JSON text is kept as it is."""
    try:
        return json.dumps(json.loads(text), sort_keys=True, separators=(",", ":"),
                          ensure_ascii=False)
    except (ValueError, TypeError, RecursionError):  # a model's arguments can be anything
        return text


@dataclass(frozen=True, slots=True)
class Tool:
    """A tool the client offers. A ``custom`` (free-form) tool of the Responses API has the
    canonical form of a function taking one string, ``input`` (:func:`custom_tool`): every
    provider can call it, and the dialect renders its calls as custom calls again."""

    name: str
    description: str = ""
    parameters: dict[str, Any] = field(default_factory=lambda: {"type": "object", "properties": {}})
    custom: bool = False


CUSTOM_INPUT = "input"


def custom_tool(name: str, description: str, format_note: str = "") -> Tool:
    text = "The tool's whole input, as free-form text."
    if format_note:
        text += " " + format_note
    return Tool(name, description, {
        "type": "object", "properties": {CUSTOM_INPUT: {"type": "string", "description": text}},
        "required": [CUSTOM_INPUT], "additionalProperties": False,
    }, custom=True)


def custom_arguments(text: str) -> str:
    """A custom tool's free-form input as canonical call arguments."""
    return json.dumps({CUSTOM_INPUT: text}, ensure_ascii=False)


def custom_input(arguments: str) -> str:
    """A custom tool call's free-form input from canonical arguments (non-JSON text, from a
    provider that ignored the schema, is taken as the input itself)."""
    try:
        value = json.loads(arguments) if arguments else {}
    except (ValueError, RecursionError):
        return arguments
    if isinstance(value, dict) and isinstance(value.get(CUSTOM_INPUT), str):
        return value[CUSTOM_INPUT]
    return arguments


@dataclass(frozen=True, slots=True)
class ToolChoice:
    """``auto`` (may call), ``none`` (must not), ``required`` (must call one), or ``tool``:
    must call the tool ``name``."""

    mode: Literal["auto", "none", "required", "tool"] = "auto"
    name: str | None = None


# Request fields beyond the common core, under these canonical names in ``LLMRequest.extra``
# (README, "What reaches the provider"). A backend lists in ``honours`` the answer-changing
# ones it applies; the turn refuses the others with 400 naming the field (never drops them).
# Hints (reasoning effort, thinking, parallel calls, service tier, metadata) reach providers
# that take them and do not change what a provider without them answers.
ANSWER_FIELDS = ("response_format", "seed", "top_k", "frequency_penalty", "presence_penalty",
                 "logprobs", "top_logprobs")
HINT_FIELDS = ("reasoning_effort", "thinking", "parallel_tool_calls", "service_tier", "metadata")


@dataclass(frozen=True)
class ClientMcp:
    """A Responses client's ``{"type": "mcp", ...}`` tool, checked
    (:func:`agents.tools.client_mcp_server`): a streamable HTTP server an operator allowed."""

    label: str
    url: str
    headers: tuple[tuple[str, str], ...] = ()
    allowed_tools: frozenset[str] | None = None  # None: every tool
    read_only_only: bool = False  # allowed_tools {"read_only": true}
    # require_approval: "always", "never", or {"always": [...], "never": [...]} (names)
    require_approval: Any = "always"


@dataclass(frozen=True)
class ApprovalAnswer:
    """A Responses client's ``mcp_approval_response`` input item."""

    request_id: str  # the mcp_approval_request item's id
    approve: bool
    reason: str = ""
    param: str = "input"  # where it was in the request (for an error about it)


@dataclass(frozen=True)
class HostedTool:
    """A hosted tool the client sent: one its API's provider runs on its own servers (web
    search, file search, Anthropic's server tools...) or knows by type alone (``local_shell``),
    which no provider behind Gaia is given as such. Kept apart from ``tools`` until the
    agent's policy decides what becomes of it (:mod:`agents.tools.hosted`)."""

    type: str  # as the client named it: web_search_preview, web_search_20250305
    param: str  # where the request had it: tools[2].type, web_search_options
    required: bool = False  # the request's tool_choice requires it


@dataclass(slots=True)
class LLMRequest:
    model: str  # the upstream model name
    system: str
    messages: list[Message]
    tools: list[Tool] = field(default_factory=list)
    tool_choice: ToolChoice = field(default_factory=ToolChoice)
    max_output_tokens: int | None = None
    temperature: float | None = None
    top_p: float | None = None
    stop: list[str] = field(default_factory=list)
    user: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)
    # A Responses client's own MCP servers (its "mcp" tools), run by Gaia for this turn, and
    # its answers to their approval requests: for the agent loop, never for a provider.
    client_mcp: tuple[ClientMcp, ...] = ()
    approval_answers: tuple[ApprovalAnswer, ...] = ()
    # The client's hosted tools (agents.tools.hosted decides: provided, dropped or refused).
    hosted: tuple[HostedTool, ...] = ()

    def replace(self, **changes: Any) -> LLMRequest:
        return dataclasses.replace(self, **changes)


@dataclass(frozen=True, slots=True)
class TokenLogprob:
    """A token of the reply (its bytes: a token may hold part of a character) and its log
    probability; ``top``: the most likely tokens at its place, each with its own."""

    raw: bytes
    logprob: float
    top: tuple[TokenLogprob, ...] = ()

    @property
    def token(self) -> str:
        return self.raw.decode("utf-8", "replace")


@dataclass(frozen=True, slots=True)
class TextDelta:
    """Text of the reply; ``logprobs``: its tokens' log probabilities, when the client asked
    for them (``logprobs`` / ``top_logprobs``) and the provider gave them."""

    text: str
    logprobs: tuple[TokenLogprob, ...] = ()


@dataclass(frozen=True, slots=True)
class ReasoningDelta:
    """The agent's own steps (tool runs, sub-calls): shown on each dialect's reasoning channel."""

    text: str


@dataclass(frozen=True, slots=True)
class ToolCallDelta:
    """A fragment of tool call number ``index``: ``id`` and ``name`` come on its first fragment."""

    index: int
    id: str | None = None
    name: str | None = None
    arguments: str = ""


@dataclass(frozen=True, slots=True)
class Usage:
    input_tokens: int
    output_tokens: int
    estimated: bool = False


@dataclass(frozen=True, slots=True)
class Finish:
    reason: FinishReason


@dataclass(frozen=True, slots=True)
class ToolActivity:
    """A call of one of the agent's own tools, which Gaia runs (not the client's): ``running``
    when it starts (``waiting`` while it waits for an operator's approval), then
    ``completed`` or ``failed`` with its ``output``. Backends never yield it; the agent loop
    (agents.turns.loop) does, and each dialect shows it its own way."""

    call_id: str
    name: str  # as the model sees it
    server: str  # the MCP server's name, "gaia" for a built-in, "agents" for another agent
    tool: str  # its own name on that server
    arguments: str
    status: Literal["running", "waiting", "completed", "failed"]
    output: str = ""
    duration_ms: int | None = None
    approval_request_id: str | None = None  # a Responses client approved it (its request)

    @property
    def done(self) -> bool:
        return self.status in ("completed", "failed")

    def summary(self) -> str:
        """One line for a reasoning channel."""
        if self.status == "running":
            return f"[{self.name}] {self.arguments}\n"
        if self.status == "waiting":
            return f"[{self.name}] waiting for an operator's approval\n"
        took = f", {self.duration_ms} ms" if self.duration_ms is not None else ""
        text = self.output if len(self.output) <= 2000 else self.output[:2000] + "…"
        verdict = "failed" if self.status == "failed" else "done"
        return f"[{self.name} {verdict}{took}] {text}\n"


@dataclass(frozen=True, slots=True)
class ToolsListed:
    """The tools an MCP server offers the agent (the Responses API's ``mcp_list_tools``)."""

    server: str
    tools: tuple[dict[str, Any], ...]
    error: str = ""  # the server could not be listed


@dataclass(frozen=True, slots=True)
class ApprovalRequest:
    """A call of a Responses client's own MCP tool that its client must approve first: the
    response ends with it (OpenAI's ``mcp_approval_request``); the client's
    ``mcp_approval_response`` continues it."""

    request_id: str
    server: str
    tool: str
    arguments: str


Event = (TextDelta | ReasoningDelta | ToolCallDelta | Usage | Finish | ToolActivity | ToolsListed
         | ApprovalRequest)


class Backend(Protocol):
    """An LLM provider connection. One instance per provider configuration, shared by requests."""

    accepts_images: bool
    accepts_tools: bool

    def stream(
        self, request: LLMRequest, *, on_sent: Callable[[], None] | None = None
    ) -> AsyncIterator[Event]:
        """The reply as canonical events. ``on_sent`` is called once, as soon as the request
        is on its way to the model (so the caller can do its own work while the model
        thinks instead of slowing the request down); a backend that cannot tell calls it
        when it starts."""
        ...

    def count_tokens(self, request: LLMRequest) -> tuple[int, bool]:
        """Input tokens of ``request`` and whether the count is an estimate."""
        ...


# No tokenizer's token is longer than this many characters: an input with more characters
# than this many times a token limit is over it without being counted.
MAX_CHARS_PER_TOKEN = 32
# Tokenizing more than about this many tokens (by the 4-characters estimate) runs off the
# event loop: a tokenizer takes milliseconds per 100 KB, and every request waits for the loop.
COUNT_ON_LOOP_TOKENS = 8000


def estimate_tokens(text: str) -> int:
    """The usual 4-characters-a-token estimate, for providers that report no usage."""
    return max(1, (len(text) + 3) // 4) if text else 0


def estimate_message_tokens(m: Message) -> int:
    total = m._estimate
    if total >= 0:
        return total
    total = 4 + estimate_tokens(m.text)
    for c in m.tool_calls:
        total += estimate_tokens(c.name) + estimate_tokens(c.arguments)
    total += sum(85 for p in m.parts if isinstance(p, ImagePart))
    object.__setattr__(m, "_estimate", total)  # frozen: a memo, not a change of value
    return total


def estimate_request_tokens(request: LLMRequest) -> int:
    total = estimate_tokens(request.system)
    for m in request.messages:
        total += estimate_message_tokens(m)
    for t in request.tools:
        total += estimate_tokens(t.name + t.description + str(t.parameters))
    return total
