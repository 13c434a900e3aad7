"""Anthropic Messages API, the output side: a reply rendered whole, and the streaming state
machine of its events (``message_start`` ... ``message_stop``). Request parsing and the dialect
are :mod:`openai_api.dialects.messages`; split as Responses is (``responses_output``).

The agent's own steps (the reasoning channel) become ``thinking`` blocks, signed as Anthropic
signs its own (:func:`thinking_signature`; streamed as a ``signature_delta`` before the block
stops): clients treat an unsigned block as cut off and send it back as text (pi does), which
would not match the stored turn and fork the thread.
"""

from __future__ import annotations

import json
from typing import Any

from django.utils.crypto import salted_hmac

from agents.kernel import llm
from agents.kernel.exceptions import GaiaError
from openai_api.errors import anthropic_error_body
from openai_api.sse import sse_event

STOP_REASON = {"stop": "end_turn", "length": "max_tokens", "tool_calls": "tool_use",
               "content_filter": "refusal"}


# -- rendering ----------------------------------------------------------------------------------

def tool_input(arguments: str) -> dict[str, Any]:
    """A tool call's arguments as the ``input`` object; malformed JSON gives ``{}`` (ref 004)."""
    try:
        value = json.loads(arguments) if arguments else {}
    except (ValueError, RecursionError):
        return {}
    return value if isinstance(value, dict) else {}


def usage_out(input_tokens: int, output_tokens: int) -> dict[str, Any]:
    return {"input_tokens": input_tokens, "output_tokens": output_tokens,
            "cache_creation_input_tokens": 0, "cache_read_input_tokens": 0}


def thinking_signature(thinking: str) -> str:
    """The ``signature`` of a thinking block Gaia wrote: an HMAC of its text under the
    server's secret key, opaque to clients as Anthropic's own are."""
    return salted_hmac("gaia.thinking", thinking, algorithm="sha256").hexdigest()


def render_message(*, message_id: str, model: str, text: str, reasoning: str,
                   tool_calls: list[llm.ToolCall], finish_reason: str,
                   usage: llm.Usage) -> dict[str, Any]:
    content: list[dict[str, Any]] = []
    if reasoning:
        content.append({"type": "thinking", "thinking": reasoning,
                        "signature": thinking_signature(reasoning)})
    if text:
        content.append({"type": "text", "text": text})
    content.extend(
        {"type": "tool_use", "id": c.id, "name": c.name, "input": tool_input(c.arguments)}
        for c in tool_calls
    )
    return {
        "id": message_id,
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": content,
        "stop_reason": STOP_REASON.get(finish_reason, "end_turn"),
        "stop_sequence": None,
        "usage": usage_out(usage.input_tokens, usage.output_tokens),
    }


def ping() -> bytes:
    return sse_event("ping", {"type": "ping"})


def error_event(exc: GaiaError) -> bytes:
    return sse_event("error", anthropic_error_body(exc))


class MessageEventStream:
    """Renders canonical events as Anthropic Messages SSE events.

    One content block is open at a time: ``thinking`` (reasoning), ``text`` or ``tool_use`` (one
    per tool call, its arguments as ``input_json_delta``). Switching channel stops the open block.
    """

    def __init__(self, *, message_id: str, model: str) -> None:
        self.id = message_id
        self.model = model
        self.index = -1
        self._open: str | None = None
        self._call_index: int | None = None
        self._thinking = ""  # the open thinking block's text, signed when it stops

    def start(self, input_tokens: int) -> bytes:
        return sse_event("message_start", {"type": "message_start", "message": {
            "id": self.id, "type": "message", "role": "assistant", "model": self.model,
            "content": [], "stop_reason": None, "stop_sequence": None,
            "usage": usage_out(input_tokens, 0),
        }})

    def _close(self) -> bytes:
        if self._open is None:
            return b""
        out = b""
        if self._open == "thinking":
            out = self._delta({"type": "signature_delta",
                               "signature": thinking_signature(self._thinking)})
            self._thinking = ""
        self._open = None
        return out + sse_event("content_block_stop", {"type": "content_block_stop",
                                                "index": self.index})

    def _start_block(self, kind: str, block: dict[str, Any]) -> bytes:
        out = self._close()
        self.index += 1
        self._open = kind
        return out + sse_event("content_block_start", {
            "type": "content_block_start", "index": self.index, "content_block": block})

    def _delta(self, delta: dict[str, Any]) -> bytes:
        return sse_event("content_block_delta", {"type": "content_block_delta",
                                                 "index": self.index, "delta": delta})

    def event(self, event: llm.Event) -> bytes:
        if isinstance(event, llm.TextDelta):
            if not event.text:
                return b""
            out = b"" if self._open == "text" else self._start_block(
                "text", {"type": "text", "text": ""})
            return out + self._delta({"type": "text_delta", "text": event.text})
        if isinstance(event, llm.ToolActivity):
            event = llm.ReasoningDelta(event.summary())
        if isinstance(event, llm.ReasoningDelta):
            if not event.text:
                return b""
            out = b"" if self._open == "thinking" else self._start_block(
                "thinking", {"type": "thinking", "thinking": "", "signature": ""})
            self._thinking += event.text
            return out + self._delta({"type": "thinking_delta", "thinking": event.text})
        if isinstance(event, llm.ToolCallDelta):
            out = b""
            if self._open != "tool_use" or self._call_index != event.index:
                out = self._start_block("tool_use", {
                    "type": "tool_use", "id": event.id or f"call_{event.index}",
                    "name": event.name or "", "input": {}})
                self._call_index = event.index
            if event.arguments:
                out += self._delta({"type": "input_json_delta", "partial_json": event.arguments})
            return out
        return b""

    def finish(self, usage: llm.Usage, finish_reason: str) -> bytes:
        return self._close() + sse_event("message_delta", {
            "type": "message_delta",
            "delta": {"stop_reason": STOP_REASON.get(finish_reason, "end_turn"),
                      "stop_sequence": None},
            # The final usage is cumulative, as Anthropic sends it (LangChain's
            # ChatAnthropic.stream() reads input_tokens here).
            "usage": usage_out(usage.input_tokens, usage.output_tokens),
        }) + sse_event("message_stop", {"type": "message_stop"})
