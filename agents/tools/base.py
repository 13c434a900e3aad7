"""What every tool an agent runs itself looks like, whatever runs it: a built-in (in this
process), an MCP server's tool, another agent. The loop (:mod:`agents.turns.loop`) treats them
alike, as MCP's own ``Tool`` shape does: a name, a description, a JSON Schema of its input.

A tool's failure is data for the model (a :class:`ToolResult` with ``is_error``), never an
exception for the client.

Nothing a client sends may hold the event loop. A tool's arguments are the client's (a model
does whatever the user's message says), so a tool whose cost its arguments decide (evaluating,
searching, parsing, tokenizing, scoring) checks their size before any work, on the loop (a
cheap check), and then does the work where it cannot stall other requests: a thread for I/O
or work that releases the GIL, and for CPU-bound Python either a subprocess or bounds that make
the worst case provably small, said in a comment with a measured figure (a thread cannot be
cancelled, so abandoning one at a timeout enforces nothing). The calculator bounds every
number and every step (:mod:`agents.tools.builtins`); a knowledge or memory search keeps a
bounded number of the query's terms (:func:`agents.kernel.bm25.query_terms`). Each is tested with
an independent poller: ``/health`` and another client's chat stay under 250 ms while the
attack runs (tests/agents/test_loop_stalls.py, scripts/perf/attacks.py).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from agents.kernel import llm

# The server a tool belongs to, as the feed and the Responses dialect name it.
BUILTIN = "gaia"
AGENTS = "agents"
MAX_RESULT_CHARS = 20_000  # a tool's text as the model gets it (the rest is cut, and said so)


@dataclass(frozen=True)
class ToolResult:
    text: str
    is_error: bool = False


@dataclass
class ToolContext:
    """Who a tool runs for: the turn's agent, key, end user and thread, and its memory scope
    (``None``: the agent remembers nothing for this turn)."""

    agent: Any
    api_key: Any
    user: str | None
    thread_id: Any = None
    memory_scope: str | None = None
    depth: int = 0  # how many agents delegated down to this turn
    extra: dict[str, Any] = field(default_factory=dict)


Runner = Callable[[dict[str, Any], ToolContext], Awaitable[ToolResult]]


@dataclass(frozen=True)
class ToolSpec:
    """One tool as the model sees it (``name``), and where it runs (``server``, its own name
    there ``tool``), with its call's bounds."""

    name: str
    description: str
    parameters: dict[str, Any]
    server: str
    tool: str
    run: Runner
    needs_approval: bool = False  # an operator's (the agent's or its server's rule)
    timeout: float = 60.0
    client_approval: bool = False  # a Responses client's own server: its client approves
    read_only: bool = False  # the server says the tool changes nothing (readOnlyHint)

    def as_llm(self) -> llm.Tool:
        return llm.Tool(self.name, self.description, self.parameters)


@dataclass
class Toolbox:
    """The tools one turn of an agent may run, by the name the model sees, and the MCP servers
    they were listed from (``listings``: server name -> its tools, for the Responses API's
    ``mcp_list_tools`` items)."""

    tools: dict[str, ToolSpec] = field(default_factory=dict)
    listings: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    problems: list[str] = field(default_factory=list)  # servers that could not be listed
    listing_errors: dict[str, str] = field(default_factory=dict)  # a client's server: why
    # A client's own servers' connections: this turn's alone, closed when it ends.
    connections: list[Any] = field(default_factory=list)

    async def close(self) -> None:
        for connection in self.connections:
            await connection.close()
        self.connections.clear()

    def add(self, spec: ToolSpec) -> None:
        self.tools[spec.name] = spec

    def __bool__(self) -> bool:
        return bool(self.tools)


def text_of(value: Any, limit: int = MAX_RESULT_CHARS) -> str:
    """A tool's output as the model reads it, cut at ``limit`` characters (saying so)."""
    text = value if isinstance(value, str) else repr(value)
    if len(text) > limit:
        return text[:limit] + f"\n[output cut at {limit} of {len(text)} characters]"
    return text


def approval_needed(rule: Any, name: str) -> bool:
    """Whether a ``require_approval`` rule (never, always, or names) covers tool ``name``."""
    if rule == "always":
        return True
    return isinstance(rule, list) and name in rule
