"""OpenAI Responses API: what a reply looks like, as one JSON object and as its stream of
named SSE events (the state machine). Every object and event validates against the ``openai``
SDK's typed models.

Item ids are derived from the response id (``resp_X`` -> ``msg_X``, ``rs_X``, ``fc_X_N``) so a
stored response rendered again by ``GET /v1/responses/{id}`` carries the same ids.
"""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from agents.kernel import llm
from agents.kernel.exceptions import GaiaError
from openai_api.dialects.common import logprobs_out
from openai_api.sse import sse_event

NAMESPACE_SEP = "__"


@dataclass(frozen=True)
class ClientTools:
    """What rendering a call needs to know of the request's tools: which are custom (their
    calls render as ``custom_tool_call``) and which came from a namespace."""

    custom: frozenset[str] = frozenset()
    namespaced: frozenset[str] = frozenset()
    # The agent's tools that serve a hosted tool the client sent (name -> kind: web_search):
    # their calls render as that tool's own items (agents.tools.hosted)
    hosted: dict[str, str] = field(default_factory=dict)


def item_ids(response_id: str) -> tuple[str, str, str]:
    """``(message id, reasoning id, function call id prefix)`` for a response."""
    suffix = response_id.removeprefix("resp_")
    return f"msg_{suffix}", f"rs_{suffix}", f"fc_{suffix}"


def usage_out(usage: llm.Usage | None) -> dict[str, Any] | None:
    if usage is None:
        return None
    return {
        "input_tokens": usage.input_tokens,
        "input_tokens_details": {"cached_tokens": 0, "cache_write_tokens": 0},
        "output_tokens": usage.output_tokens,
        "output_tokens_details": {"reasoning_tokens": 0},
        "total_tokens": usage.input_tokens + usage.output_tokens,
    }


def text_part(text: str, logprobs: Sequence[llm.TokenLogprob] = ()) -> dict[str, Any]:
    return {"type": "output_text", "text": text, "annotations": [],
            "logprobs": logprobs_out(logprobs)}


def message_item(item_id: str, text: str, status: str = "completed",
                 logprobs: Sequence[llm.TokenLogprob] = ()) -> dict[str, Any]:
    return {"id": item_id, "type": "message", "role": "assistant", "status": status,
            "content": [text_part(text, logprobs)] if status == "completed" else []}


def reasoning_item(item_id: str, text: str, status: str = "completed") -> dict[str, Any]:
    return {"id": item_id, "type": "reasoning", "status": status,
            "summary": [{"type": "summary_text", "text": text}] if status == "completed" else []}


def _name_fields(name: str, tools: ClientTools) -> dict[str, str]:
    """A namespaced tool's call names its namespace apart, as the client declared it."""
    if name in tools.namespaced:
        space, _, short = name.partition(NAMESPACE_SEP)
        return {"name": short, "namespace": space}
    return {"name": name}


def function_call_item(item_id: str, call: llm.ToolCall, status: str = "completed",
                       tools: ClientTools | None = None) -> dict[str, Any]:
    return {"id": item_id, "type": "function_call", "status": status, "call_id": call.id,
            **_name_fields(call.name, tools or ClientTools()), "arguments": call.arguments}


def custom_call_item(item_id: str, call: llm.ToolCall, status: str = "completed",
                     tools: ClientTools | None = None) -> dict[str, Any]:
    return {"id": item_id, "type": "custom_tool_call", "status": status, "call_id": call.id,
            **_name_fields(call.name, tools or ClientTools()),
            "input": llm.custom_input(call.arguments) if status == "completed" else ""}


def call_item(item_id: str, call: llm.ToolCall, tools: ClientTools,
              status: str = "completed") -> dict[str, Any]:
    if call.name in tools.custom:
        return custom_call_item(item_id, call, status, tools)
    return function_call_item(item_id, call, status, tools)


def mcp_list_tools_item(item_id: str, listed: llm.ToolsListed) -> dict[str, Any]:
    return {"id": item_id, "type": "mcp_list_tools", "server_label": listed.server,
            "tools": [{"name": t["name"], "description": t.get("description") or None,
                       "input_schema": t.get("input_schema") or {"type": "object"},
                       "annotations": None} for t in listed.tools],
            "error": listed.error or None}


def mcp_approval_request_item(asked: llm.ApprovalRequest) -> dict[str, Any]:
    """A call of the client's own MCP server that waits for its ``mcp_approval_response``."""
    return {"id": asked.request_id, "type": "mcp_approval_request", "name": asked.tool,
            "server_label": asked.server, "arguments": asked.arguments}


def mcp_call_item(item_id: str, activity: llm.ToolActivity) -> dict[str, Any]:
    """An agent's own tool call as OpenAI's ``mcp_call`` (a built-in's server is ``gaia``,
    another agent's ``agents``)."""
    failed = activity.status == "failed"
    status = {"completed": "completed", "failed": "failed"}.get(activity.status, "in_progress")
    return {"id": item_id, "type": "mcp_call", "server_label": activity.server,
            "name": activity.tool, "arguments": activity.arguments,
            "output": activity.output if activity.done and not failed else None,
            "error": {"type": "mcp_tool_execution_error",
                      "content": [{"type": "text", "text": activity.output}]} if failed else None,
            "status": status, "approval_request_id": activity.approval_request_id}


def mcp_id(response_id: str, call_id: str) -> str:
    return f"mcp_{response_id.removeprefix('resp_')}_{call_id}"


# A hosted tool that the agent's own tool serves, as the Responses API's own item for it:
# kind -> (item type, id prefix, the event family its progress is told by).
HOSTED_ITEMS = {"web_search": ("web_search_call", "ws", "response.web_search_call"),
                "file_search": ("file_search_call", "fs", "response.file_search_call")}


def _query(arguments: str) -> str:
    """What a search tool's call searched for: its ``query`` (else its first text)."""
    try:
        args = json.loads(arguments) if arguments.strip() else {}
    except (ValueError, RecursionError):
        return arguments
    if not isinstance(args, dict):
        return arguments
    for value in (args.get("query"), args.get("q"), *args.values()):
        if isinstance(value, str):
            return value
    return arguments


def step_id(response_id: str, activity: llm.ToolActivity, tools: ClientTools) -> str:
    kind = tools.hosted.get(activity.name)
    prefix = HOSTED_ITEMS[kind][1] if kind in HOSTED_ITEMS else "mcp"
    return f"{prefix}_{response_id.removeprefix('resp_')}_{activity.call_id}"


def step_item(item_id: str, activity: llm.ToolActivity, tools: ClientTools) -> dict[str, Any]:
    """An agent's own tool call: OpenAI's item for the hosted tool it serves (a
    ``web_search_call``, a ``file_search_call``), else an ``mcp_call``."""
    kind = tools.hosted.get(activity.name)
    if kind not in HOSTED_ITEMS:
        return mcp_call_item(item_id, activity)
    status = {"completed": "completed", "failed": "failed"}.get(activity.status, "in_progress")
    query = _query(activity.arguments)
    if kind == "web_search":
        return {"id": item_id, "type": "web_search_call", "status": status,
                "action": {"type": "search", "query": query}}
    return {"id": item_id, "type": "file_search_call", "status": status, "queries": [query],
            "results": None}


def output_items(*, response_id: str, text: str, reasoning: str,
                 tool_calls: list[llm.ToolCall], tools: ClientTools | None = None,
                 steps: list[llm.ToolActivity] = (), listings: list[llm.ToolsListed] = (),
                 approvals: list[llm.ApprovalRequest] = (),
                 logprobs: Sequence[llm.TokenLogprob] = ()) -> list[dict[str, Any]]:
    """A finished reply as output items: the tools it was offered and ran itself, its steps,
    its words, then its calls, or the calls its client must approve first."""
    msg_id, rs_id, fc_prefix = item_ids(response_id)
    out: list[dict[str, Any]] = [
        mcp_list_tools_item(f"mcpl_{response_id.removeprefix('resp_')}_{n}", listed)
        for n, listed in enumerate(listings)]
    tools = tools or ClientTools()
    out.extend(step_item(step_id(response_id, s, tools), s, tools) for s in steps)
    if reasoning:
        out.append(reasoning_item(rs_id, reasoning))
    if text or not (tool_calls or approvals):
        out.append(message_item(msg_id, text, logprobs=logprobs))
    out.extend(mcp_approval_request_item(a) for a in approvals)
    out.extend(call_item(f"{fc_prefix}_{i}", c, tools) for i, c in enumerate(tool_calls))
    return out


STATUS = {"length": "incomplete", "error": "failed", "client_disconnected": "incomplete",
          "cancelled": "cancelled", "interrupted": "failed"}


def error_out(exc: GaiaError) -> dict[str, Any]:
    # The SDK's ResponseError.code is a closed list: map ours onto it, keep ours in ``type``.
    code = "rate_limit_exceeded" if exc.kind == "rate_limit" else "server_error"
    return {"code": code, "message": exc.message, "param": exc.param, "type": exc.code}


def render_response(*, response_id: str, model: str, created_at: float, status: str,
                    output: list[dict[str, Any]], usage: llm.Usage | None,
                    echo: dict[str, Any], error: GaiaError | None = None) -> dict[str, Any]:
    """A ``response`` object. ``echo`` holds the request fields the API echoes back."""
    body: dict[str, Any] = {
        "id": response_id,
        "object": "response",
        "created_at": created_at,
        "status": status,
        "model": model,
        "output": output,
        "usage": usage_out(usage),
        "error": error_out(error) if error is not None else None,
        "incomplete_details": {"reason": "max_output_tokens"} if status == "incomplete"
        else None,
        "instructions": None,
        "metadata": {},
        "parallel_tool_calls": True,
        "tool_choice": "auto",
        "tools": [],
        "temperature": None,
        "top_p": None,
        "max_output_tokens": None,
        "previous_response_id": None,
        "reasoning": None,
        "store": True,
        "text": {"format": {"type": "text"}},
        "truncation": "disabled",
        "user": None,
    }
    if status == "completed":
        body["completed_at"] = int(time.time())
    body.update(echo)
    return body


class ResponseEventStream:
    """Renders canonical events as Responses API named SSE events.

    One output item is open at a time: a reasoning item (its summary text streams as
    ``response.reasoning_summary_text.delta``), a message (``response.output_text.delta``) or a
    function call (``response.function_call_arguments.delta``). Switching channel closes the
    open item with its ``.done`` events. Every event carries the next ``sequence_number``.
    """

    def __init__(self, *, response_id: str, model: str, echo: dict[str, Any],
                 tools: ClientTools | None = None) -> None:
        self.id = response_id
        self.tools = tools or ClientTools()
        self.model = model
        self.echo = echo
        self.created_at = int(time.time())
        self.seq = 0
        self.output: list[dict[str, Any]] = []  # finished items
        self._msg_id, self._rs_id, self._fc_prefix = item_ids(response_id)
        self._open: str | None = None  # "reasoning" | "message" | "call"
        self._text: list[str] = []
        self._logprobs: list[llm.TokenLogprob] = []
        self._call: llm.ToolCall | None = None
        self._call_index: int | None = None
        self._cur_id = ""
        self._items: dict[str, int] = {}  # items opened so far per id base, for unique ids
        self._mcp: dict[str, int] = {}  # a running mcp_call's output index, by call id

    def _emit(self, kind: str, payload: dict[str, Any]) -> bytes:
        payload = {"type": kind, "sequence_number": self.seq, **payload}
        self.seq += 1
        return sse_event(kind, payload)

    def _response(self, status: str, usage: llm.Usage | None = None,
                  error: GaiaError | None = None) -> dict[str, Any]:
        return render_response(response_id=self.id, model=self.model, created_at=self.created_at,
                               status=status, output=list(self.output), usage=usage,
                               echo=self.echo, error=error)

    def start(self) -> bytes:
        response = self._response("in_progress")
        return (self._emit("response.created", {"response": response})
                + self._emit("response.in_progress", {"response": response}))

    def _item_id(self, base: str) -> str:
        n = self._items[base] = self._items.get(base, 0) + 1
        return base if n == 1 else f"{base}_{n}"

    def _open_item(self, kind: str) -> bytes:
        out = self._close()
        self._open = kind
        self._text = []
        self._logprobs = []
        index = len(self.output)
        if kind == "reasoning":
            self._cur_id = self._item_id(self._rs_id)
            return out + self._emit("response.output_item.added", {
                "output_index": index, "item": reasoning_item(self._cur_id, "", "in_progress"),
            }) + self._emit("response.reasoning_summary_part.added", {
                "item_id": self._cur_id, "output_index": index, "summary_index": 0,
                "part": {"type": "summary_text", "text": ""},
            })
        self._cur_id = self._item_id(self._msg_id)
        return out + self._emit("response.output_item.added", {
            "output_index": index, "item": message_item(self._cur_id, "", "in_progress"),
        }) + self._emit("response.content_part.added", {
            "item_id": self._cur_id, "output_index": index, "content_index": 0,
            "part": text_part(""),
        })

    def _close(self) -> bytes:
        kind, self._open = self._open, None
        index = len(self.output)
        if kind is None:
            return b""
        if kind == "call":
            assert self._call is not None
            call, self._call = self._call, None
            item = call_item(self._cur_id, call, self.tools)
            self.output.append(item)
            if item["type"] == "custom_tool_call":
                # The free-form input exists once the call's JSON arguments are complete.
                return self._emit("response.custom_tool_call_input.delta", {
                    "item_id": self._cur_id, "output_index": index, "delta": item["input"],
                }) + self._emit("response.custom_tool_call_input.done", {
                    "item_id": self._cur_id, "output_index": index, "input": item["input"],
                }) + self._emit("response.output_item.done", {"output_index": index,
                                                               "item": item})
            return self._emit("response.function_call_arguments.done", {
                "item_id": self._cur_id, "output_index": index, "name": item["name"],
                "arguments": call.arguments,
            }) + self._emit("response.output_item.done", {"output_index": index, "item": item})
        text = "".join(self._text)
        if kind == "reasoning":
            item = reasoning_item(self._cur_id, text)
            self.output.append(item)
            return self._emit("response.reasoning_summary_text.done", {
                "item_id": self._cur_id, "output_index": index, "summary_index": 0, "text": text,
            }) + self._emit("response.reasoning_summary_part.done", {
                "item_id": self._cur_id, "output_index": index, "summary_index": 0,
                "part": {"type": "summary_text", "text": text},
            }) + self._emit("response.output_item.done", {"output_index": index, "item": item})
        item = message_item(self._cur_id, text, logprobs=self._logprobs)
        self.output.append(item)
        return self._emit("response.output_text.done", {
            "item_id": self._cur_id, "output_index": index, "content_index": 0, "text": text,
            "logprobs": logprobs_out(self._logprobs),
        }) + self._emit("response.content_part.done", {
            "item_id": self._cur_id, "output_index": index, "content_index": 0,
            "part": text_part(text, self._logprobs),
        }) + self._emit("response.output_item.done", {"output_index": index, "item": item})

    def event(self, event: llm.Event) -> bytes:
        index = len(self.output)
        if isinstance(event, llm.TextDelta):
            if not event.text:
                return b""
            out = self._open_item("message") if self._open != "message" else b""
            self._text.append(event.text)
            self._logprobs.extend(event.logprobs)
            return out + self._emit("response.output_text.delta", {
                "item_id": self._cur_id, "output_index": len(self.output), "content_index": 0,
                "delta": event.text, "logprobs": logprobs_out(event.logprobs),
            })
        if isinstance(event, llm.ReasoningDelta):
            if not event.text:
                return b""
            out = self._open_item("reasoning") if self._open != "reasoning" else b""
            self._text.append(event.text)
            return out + self._emit("response.reasoning_summary_text.delta", {
                "item_id": self._cur_id, "output_index": len(self.output), "summary_index": 0,
                "delta": event.text,
            })
        if isinstance(event, llm.ToolActivity | llm.ToolsListed):
            return self._tool(event)
        if isinstance(event, llm.ApprovalRequest):
            out = self._close()
            item = mcp_approval_request_item(event)
            self.output.append(item)
            return out + self._emit("response.output_item.added", {
                "output_index": index, "item": item}) + self._emit(
                "response.output_item.done", {"output_index": index, "item": item})
        if isinstance(event, llm.ToolCallDelta):
            out = b""
            if self._open != "call" or self._call_index != event.index:
                out = self._close()
                index = len(self.output)
                self._open, self._call_index = "call", event.index
                self._cur_id = f"{self._fc_prefix}_{event.index}"
                self._call = llm.ToolCall(event.id or f"call_{event.index}",
                                          event.name or "", "")
                out += self._emit("response.output_item.added", {
                    "output_index": index,
                    "item": call_item(self._cur_id, self._call, self.tools, "in_progress"),
                })
            assert self._call is not None
            call = self._call
            self._call = llm.ToolCall(event.id or call.id, event.name or call.name,
                                      call.arguments + event.arguments)
            if event.arguments and call.name not in self.tools.custom:
                out += self._emit("response.function_call_arguments.delta", {
                    "item_id": self._cur_id, "output_index": index, "delta": event.arguments,
                })
            return out
        return b""

    def _tool(self, event: llm.ToolActivity | llm.ToolsListed) -> bytes:
        """The agent's own tools: ``mcp_list_tools`` and ``mcp_call`` items, OpenAI's shapes
        and events. Calls run at once each hold their place in the output from their start."""
        out = self._close()
        index = len(self.output)
        if isinstance(event, llm.ToolsListed):
            item = mcp_list_tools_item(self._item_id(f"mcpl_{self.id.removeprefix('resp_')}"),
                                       event)
            self.output.append(item)
            ids = {"item_id": item["id"], "output_index": index}
            return out + self._emit("response.output_item.added", {
                "output_index": index, "item": {**item, "tools": []}}) + self._emit(
                "response.mcp_list_tools.in_progress", ids) + self._emit(
                "response.mcp_list_tools.completed", ids) + self._emit(
                "response.output_item.done", {"output_index": index, "item": item})
        if event.name in self.tools.hosted and self.tools.hosted[event.name] in HOSTED_ITEMS:
            return out + self._hosted(event)
        item_id = mcp_id(self.id, event.call_id)
        if event.status == "running":
            self._mcp[event.call_id] = index
            item = mcp_call_item(item_id, event)
            self.output.append(item)
            ids = {"item_id": item_id, "output_index": index}
            return out + self._emit("response.output_item.added", {
                "output_index": index, "item": {**item, "arguments": ""}}) + self._emit(
                "response.mcp_call_arguments.delta", {**ids, "delta": event.arguments}) + (
                self._emit("response.mcp_call_arguments.done",
                           {**ids, "arguments": event.arguments})) + self._emit(
                "response.mcp_call.in_progress", ids)
        if not event.done or event.call_id not in self._mcp:
            return out
        index = self._mcp.pop(event.call_id)
        item = self.output[index] = mcp_call_item(item_id, event)
        ids = {"item_id": item_id, "output_index": index}
        kind = "response.mcp_call.failed" if event.status == "failed" else (
            "response.mcp_call.completed")
        return out + self._emit(kind, ids) + self._emit(
            "response.output_item.done", {"output_index": index, "item": item})

    def _hosted(self, event: llm.ToolActivity) -> bytes:
        """A call of the agent's tool that serves a hosted tool, as that tool's item and
        events (``response.web_search_call.in_progress``, ``.searching``, ``.completed``)."""
        item_id = step_id(self.id, event, self.tools)
        family = HOSTED_ITEMS[self.tools.hosted[event.name]][2]
        if event.status == "running":
            index = self._mcp[event.call_id] = len(self.output)
            item = step_item(item_id, event, self.tools)
            self.output.append(item)
            ids = {"item_id": item_id, "output_index": index}
            return self._emit("response.output_item.added", {
                "output_index": index, "item": item}) + self._emit(
                f"{family}.in_progress", ids) + self._emit(f"{family}.searching", ids)
        if not event.done or event.call_id not in self._mcp:
            return b""
        index = self._mcp.pop(event.call_id)
        item = self.output[index] = step_item(item_id, event, self.tools)
        ids = {"item_id": item_id, "output_index": index}
        done = self._emit(f"{family}.completed", ids) if event.status == "completed" else b""
        return done + self._emit("response.output_item.done", {"output_index": index,
                                                                "item": item})

    def finish(self, usage: llm.Usage, finish_reason: str) -> bytes:
        out = self._close()
        status = "incomplete" if finish_reason == "length" else "completed"
        kind = "response.incomplete" if status == "incomplete" else "response.completed"
        return out + self._emit(kind, {"response": self._response(status, usage)})

    def failed(self, exc: GaiaError, usage: llm.Usage | None) -> bytes:
        out = self._close()
        return out + self._emit("response.failed",
                                {"response": self._response("failed", usage, exc)})
