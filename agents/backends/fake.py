"""A deterministic provider for tests and load measurements.

Options (``Provider.options``):

* ``reply``: the text to answer; absent, the last user message is echoed back.
* ``delay_ms``: pause before each token after the first; ``ttft_ms``: pause before the first.
* ``fail``: inject an error: ``"before"`` (before any token), ``"after"`` (after
  ``fail_after`` tokens), ``"timeout"`` (never answers), with ``fail_status`` picking the
  class (502 default, 429, 504).
* ``tool_call``: ``{"name": ..., "arguments": {...}}`` answers with that tool call when the
  request offers a tool of that name and the last message is not a tool result.
* ``reasoning``: a text streamed on the reasoning channel before the answer.
* ``echo: "system"``: answer with the system prompt the backend received (to test prompts).
* ``replies``: ``[{"system_contains": text, "reply": text}, ...]``: the first whose text is
  in the system prompt answers (a leader that plans one way and answers another).
* ``usage: false``: report no usage, as some upstreams do (Gaia then estimates).
* ``tool_result_reply: true``: after a tool result, answer ``Tool said: <its text>`` (so a
  client's tool round trip shows that the output it sent reached the provider).
* ``agent_tool``: ``{"name": ..., "arguments": {...}}``: a turn first calls this tool of the
  agent's own (one Gaia runs), then goes on as the other options say, as if that round had not
  been (a client that talks to an agent with server-side tools sees the rest unchanged).
* ``script``: the steps of an agent that uses tools, ``[{"tool_calls": [{"name": ...,
  "arguments": {...}}, ...]}, ..., {"reply": "... {results} ..."}]``: step N answers the
  request that holds N rounds of tool calls after the last user message (past the end: the
  last step); ``{results}`` stands for the tool results of the latest round, ``; ``-joined,
  ``{system}`` for the system prompt.
  Calls of tools the request does not offer are left out.

Tokens are whitespace-delimited words (each keeps its leading space), so usage counts are
exact for this backend, not estimates.
"""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import AsyncIterator, Callable
from typing import Any

from agents.kernel.exceptions import BackendError, BackendRateLimited, BackendTimeout
from agents.kernel.llm import (
    Event,
    Finish,
    LLMRequest,
    ReasoningDelta,
    TextDelta,
    ToolCallDelta,
    Usage,
)

_TOKEN = re.compile(r"\s*\S+|\s+")


def tokenize(text: str) -> list[str]:
    return _TOKEN.findall(text)


def token_count(text: str) -> int:
    """``len(tokenize(text))`` without building the list: a word and the space before it is
    one token, and so is whitespace at the end (``str.split`` and ``\\s`` agree on what
    whitespace is). 5x faster on a 1,000-message history, counted on every turn."""
    return len(text.split()) + (1 if text and text[-1].isspace() else 0)


class FakeBackend:
    accepts_images = True
    accepts_tools = True

    def __init__(self, options: dict[str, Any]) -> None:
        self.options = options
        self._counted: tuple[Any, str, int] | None = None

    @classmethod
    def from_provider(cls, provider: Any) -> FakeBackend:
        return cls(dict(provider.options or {}))

    def count_tokens(self, request: LLMRequest) -> tuple[int, bool]:
        # The same request is counted twice a turn: by Gaia (does it fit the agent's window?)
        # and here as the provider counting its input; and a continued thread's next turn
        # resends the same conversation with a few messages more. Counting it all again was
        # a fifth of a 1,000-message thread's turn in this process (py-spy, data_scale.py),
        # work a real provider does on its side. The last count is kept: a request that
        # starts with the same messages (compared item by item: mostly the same objects, so
        # by identity, in microseconds) and instructions counts only the rest.
        messages = request.messages
        held = self._counted
        if held is not None and held[1] == request.system and len(held[0]) <= len(messages) \
                and held[0] == messages[:len(held[0])]:
            words, rest = held[2], messages[len(held[0]):]
        else:
            words, rest = token_count(request.system), messages
        for m in rest:
            words += token_count(m.text)
            for c in m.tool_calls:
                words += token_count(c.arguments) + 1
        self._counted = (list(messages), request.system, words)
        return words, False

    def _reply(self, request: LLMRequest) -> str:
        for rule in self.options.get("replies") or ():
            if str(rule.get("system_contains", "")) in request.system:
                return str(rule.get("reply", ""))
        if self.options.get("echo") == "system":
            return request.system
        last = request.messages[-1] if request.messages else None
        if self.options.get("tool_result_reply") and last is not None and last.role == "tool":
            return f"Tool said: {last.text.strip()}"
        reply = self.options.get("reply")
        if reply is not None:
            return str(reply)
        for m in reversed(request.messages):
            if m.role == "user":
                return m.text
        return ""

    async def stream(self, request: LLMRequest, *,
                     on_sent: Callable[[], None] | None = None) -> AsyncIterator[Event]:
        if on_sent is not None:
            on_sent()
        opts = self.options
        fail = opts.get("fail")
        ttft = float(opts.get("ttft_ms", 0)) / 1000
        delay = float(opts.get("delay_ms", 0)) / 1000
        input_tokens, _ = self.count_tokens(request)
        if ttft:
            await asyncio.sleep(ttft)
        if fail == "timeout":
            await asyncio.sleep(3600)
        if fail == "before":
            raise self._error()

        reasoning = opts.get("reasoning")
        if reasoning:
            yield ReasoningDelta(str(reasoning))

        own = opts.get("agent_tool")
        if own and own.get("name") in {t.name for t in request.tools}:
            since = next((i for i in range(len(request.messages) - 1, -1, -1)
                          if request.messages[i].role == "user"), -1)
            after = request.messages[since + 1:]
            if not any(m.tool_calls for m in after) and request.tool_choice.mode != "none":
                arguments = json.dumps(own.get("arguments", {}))
                yield ToolCallDelta(index=0, id="call_fake_own", name=own["name"],
                                    arguments=arguments)
                yield Usage(input_tokens, len(tokenize(arguments)))
                yield Finish("tool_calls")
                return
            request = request.replace(messages=[  # the rest, as if that round had not been
                m for m in request.messages if m.tool_call_id != "call_fake_own"
                and not any(c.id == "call_fake_own" for c in m.tool_calls)])

        script = opts.get("script")
        if script:
            async for event in self._scripted(request, script, input_tokens, delay):
                yield event
            return

        tool = opts.get("tool_call")
        last = request.messages[-1] if request.messages else None
        offered = {t.name for t in request.tools}
        if (
            tool
            and tool.get("name") in offered
            and request.tool_choice.mode != "none"
            and (last is None or last.role != "tool")
        ):
            arguments = json.dumps(tool.get("arguments", {}))
            half = len(arguments) // 2
            yield ToolCallDelta(index=0, id="call_fake_0", name=tool["name"], arguments="")
            yield ToolCallDelta(index=0, arguments=arguments[:half])
            if delay:
                await asyncio.sleep(delay)
            yield ToolCallDelta(index=0, arguments=arguments[half:])
            yield Usage(input_tokens, len(tokenize(arguments)) + 1)
            yield Finish("tool_calls")
            return

        tokens = tokenize(self._reply(request))
        limit = request.max_output_tokens
        finish = "stop"
        if limit is not None and len(tokens) > limit:
            tokens, finish = tokens[:limit], "length"
        fail_after = int(opts.get("fail_after", 1))
        for i, token in enumerate(tokens):
            if i and delay:
                await asyncio.sleep(delay)
            if fail == "after" and i == fail_after:
                raise self._error()
            yield TextDelta(token)
        if opts.get("usage", True):
            yield Usage(input_tokens, len(tokens))
        yield Finish(finish)  # type: ignore[arg-type]

    async def _scripted(self, request: LLMRequest, script: list[dict[str, Any]],
                        input_tokens: int, delay: float) -> AsyncIterator[Event]:
        since = next((i for i in range(len(request.messages) - 1, -1, -1)
                      if request.messages[i].role == "user"), -1)
        after = request.messages[since + 1:]
        rounds = sum(1 for m in after if m.role == "assistant" and m.tool_calls)
        step = script[min(rounds, len(script) - 1)]
        offered = {t.name for t in request.tools}
        calls = [c for c in step.get("tool_calls") or () if c.get("name") in offered]
        if calls and request.tool_choice.mode != "none":
            for i, call in enumerate(calls):
                arguments = json.dumps(call.get("arguments", {}))
                yield ToolCallDelta(index=i, id=f"call_fake_{rounds}_{i}", name=call["name"],
                                    arguments=arguments)
            yield Usage(input_tokens, sum(len(tokenize(json.dumps(c))) for c in calls))
            yield Finish("tool_calls")
            return
        last_call = max((i for i, m in enumerate(after) if m.tool_calls), default=-1)
        results = [m.text for m in after[last_call + 1:] if m.role == "tool"]
        text = (str(step.get("reply", "")).replace("{results}", "; ".join(results))
                .replace("{system}", request.system))
        tokens = tokenize(text)
        for i, token in enumerate(tokens):
            if i and delay:
                await asyncio.sleep(delay)
            yield TextDelta(token)
        yield Usage(input_tokens, len(tokens))
        yield Finish("stop")

    def _error(self) -> BackendError:
        status = int(self.options.get("fail_status", 502))
        message = str(self.options.get("fail_message", "The fake provider failed as configured."))
        if status == 429:
            return BackendRateLimited(message, retry_after=int(self.options.get("retry_after", 7)))
        if status == 504:
            return BackendTimeout(message)
        return BackendError(message)
