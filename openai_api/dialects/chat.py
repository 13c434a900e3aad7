"""OpenAI Chat Completions: request parsing and reply rendering.

https://platform.openai.com/docs/api-reference/chat. Tolerant input (unknown fields ignored,
content as a string, parts or null), strict output.
"""

from __future__ import annotations

import time
import uuid
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from agents.kernel import llm
from agents.kernel.exceptions import InvalidRequest
from agents.tools.hosted import hosted_kind
from openai_api.dialects.base import Dialect, Parsed
from openai_api.dialects.common import (
    check_message_count,
    check_tool_call_id,
    client_finish,
    function_name,
    image_from_url,
    logprobs_out,
    steps_text,
    text_parts_merged,
    tool_call_arguments,
)
from openai_api.errors import openai_error_body
from openai_api.sse import SSE_DONE, Frames, sse_data

FINISH = {"stop": "stop", "length": "length", "tool_calls": "tool_calls",
          "content_filter": "content_filter"}


class _In(BaseModel):
    model_config = ConfigDict(extra="ignore")


class FunctionIn(_In):
    name: str
    arguments: str | dict[str, Any] = ""


class ToolCallIn(_In):
    id: str = ""
    type: str = "function"
    function: FunctionIn


class MessageIn(_In):
    role: Literal["system", "developer", "user", "assistant", "tool", "function"]
    content: str | list[dict[str, Any]] | None = None
    name: str | None = None
    tool_calls: list[ToolCallIn] | None = None
    tool_call_id: str | None = None


class FunctionDefIn(_In):
    name: str
    description: str | None = None
    parameters: dict[str, Any] | None = None


class ToolIn(_In):
    type: str = "function"
    function: FunctionDefIn | None = None  # required of function tools (parse_request)


class StreamOptionsIn(_In):
    include_usage: bool | None = None


class ChatRequestIn(_In):
    model: str = Field(min_length=1)
    messages: list[MessageIn] = Field(min_length=1)
    stream: bool | None = False
    stream_options: StreamOptionsIn | None = None
    max_tokens: int | None = Field(default=None, ge=1)
    max_completion_tokens: int | None = Field(default=None, ge=1)
    temperature: float | None = Field(default=None, ge=0, le=2)
    top_p: float | None = Field(default=None, ge=0, le=1)
    stop: str | list[str] | None = None
    tools: list[ToolIn] | None = None
    tool_choice: str | dict[str, Any] | None = None
    user: str | None = None
    n: int | None = Field(default=None, ge=1, le=1)
    response_format: dict[str, Any] | None = None
    reasoning_effort: str | None = None
    seed: int | None = None
    frequency_penalty: float | None = Field(default=None, ge=-2, le=2)
    presence_penalty: float | None = Field(default=None, ge=-2, le=2)
    logprobs: bool | None = None
    top_logprobs: int | None = Field(default=None, ge=0, le=20)
    parallel_tool_calls: bool | None = None
    service_tier: str | None = None
    metadata: dict[str, Any] | None = None
    web_search_options: dict[str, Any] | None = None


def response_format_from(value: Any, param: str) -> dict[str, Any] | None:
    """The canonical ``response_format`` (Chat Completions' shape), ``None`` for plain text."""
    if value is None:
        return None
    kind = value.get("type") if isinstance(value, dict) else None
    if kind == "text":
        return None
    if kind == "json_object":
        return {"type": "json_object"}
    if kind == "json_schema":
        spec = value.get("json_schema")
        if not isinstance(spec, dict) or not isinstance(spec.get("schema", {}), dict):
            raise InvalidRequest("json_schema needs a 'schema' object.",
                                 param=f"{param}.json_schema")
        return {"type": "json_schema", "json_schema": spec}
    raise InvalidRequest("response_format type must be text, json_object or json_schema.",
                         param=f"{param}.type")


def extra_from(req: ChatRequestIn) -> dict[str, Any]:
    """The request's fields beyond the core (``agents.kernel.llm.ANSWER_FIELDS`` and hints)."""
    extra: dict[str, Any] = {
        "response_format": response_format_from(req.response_format, "response_format"),
        "reasoning_effort": req.reasoning_effort, "seed": req.seed,
        "frequency_penalty": req.frequency_penalty or None,
        "presence_penalty": req.presence_penalty or None,
        "logprobs": True if req.logprobs else None,
        "top_logprobs": req.top_logprobs if req.logprobs else None,
        "parallel_tool_calls": req.parallel_tool_calls, "service_tier": req.service_tier,
        "metadata": req.metadata or None,
    }
    return {k: v for k, v in extra.items() if v is not None}


def _text_and_parts(content: Any, where: str, *, images: bool) -> tuple[llm.Part, ...]:
    if content is None:
        return ()
    if isinstance(content, str):
        return (llm.TextPart(content),) if content else ()
    parts: list[llm.Part] = []
    for i, part in enumerate(content):
        kind = part.get("type")
        if kind in ("text", "input_text", "output_text"):
            text = part.get("text")
            if not isinstance(text, str):
                raise InvalidRequest("Text parts need a string 'text'.",
                                     param=f"{where}.content[{i}].text")
            parts.append(llm.TextPart(text))
        elif kind == "image_url" and images:
            image = part.get("image_url")
            url = image.get("url") if isinstance(image, dict) else image
            if not isinstance(url, str):
                raise InvalidRequest("image_url parts need a 'url'.",
                                     param=f"{where}.content[{i}].image_url")
            parts.append(image_from_url(url, param=f"{where}.content[{i}].image_url"))
        elif kind == "refusal":
            parts.append(llm.TextPart(str(part.get("refusal", ""))))
        else:
            raise InvalidRequest(f"Content parts of type {kind!r} are not supported here.",
                                 param=f"{where}.content[{i}].type", code="unsupported_content")
    return text_parts_merged(parts)


def tool_choice_from(value: str | dict[str, Any] | None) -> llm.ToolChoice:
    if value is None or value == "auto":
        return llm.ToolChoice("auto")
    if value == "none":
        return llm.ToolChoice("none")
    if value == "required":
        return llm.ToolChoice("required")
    if isinstance(value, dict):
        name = function_name(value)
        if isinstance(name, str) and name:
            return llm.ToolChoice("tool", name)
    raise InvalidRequest("Invalid tool_choice.", param="tool_choice")


def parse_request(data: dict[str, Any]) -> tuple[ChatRequestIn, llm.LLMRequest]:
    """The validated request and its canonical form (``model`` is the agent slug here)."""
    from openai_api.dialects.common import validate

    check_message_count(data.get("messages"), param="messages")
    req: ChatRequestIn = validate(ChatRequestIn, data)
    # Chat Completions' hosted tool, and any a client lists as a tool: the agent's policy
    # decides (agents.tools.hosted)
    hosted = [llm.HostedTool("web_search", "web_search_options")] \
        if req.web_search_options is not None else []
    for i, tool in enumerate(req.tools or []):
        if hosted_kind(tool.type) is not None:
            hosted.append(llm.HostedTool(tool.type, f"tools[{i}].type"))
        elif tool.function is None:
            raise InvalidRequest("Function tools need a 'function'.",
                                 param=f"tools[{i}].function")
    system: list[str] = []
    messages: list[llm.Message] = []
    for i, m in enumerate(req.messages):
        where = f"messages[{i}]"
        if m.role in ("system", "developer"):
            text = llm.Message("user", _text_and_parts(m.content, where, images=False)).text
            if text:
                system.append(text)
        elif m.role == "user":
            messages.append(llm.Message("user", _text_and_parts(m.content, where, images=True)))
        elif m.role == "assistant":
            calls = tuple(
                llm.ToolCall(c.id or f"call_{i}_{j}", c.function.name, tool_call_arguments(
                    c.function.arguments, f"{where}.tool_calls[{j}].function.arguments"))
                for j, c in enumerate(m.tool_calls or [])
            )
            messages.append(
                llm.Message("assistant", _text_and_parts(m.content, where, images=False), calls)
            )
        else:  # tool, or the legacy function role
            call_id = m.tool_call_id or m.name
            if not call_id:
                raise InvalidRequest("Tool messages need a 'tool_call_id'.",
                                     param=f"{where}.tool_call_id")
            check_tool_call_id(call_id, param=f"{where}.tool_call_id")
            messages.append(llm.Message("tool", _text_and_parts(m.content, where, images=False),
                                        tool_call_id=call_id))
    if not any(m.role == "user" for m in messages):
        raise InvalidRequest("No user message in request.", param="messages",
                             code="missing_user_message")
    stop = [req.stop] if isinstance(req.stop, str) else list(req.stop or [])
    tools = [
        llm.Tool(t.function.name, t.function.description or "",
                 t.function.parameters or {"type": "object", "properties": {}})
        for t in req.tools or [] if t.function is not None and hosted_kind(t.type) is None
    ]
    canonical = llm.LLMRequest(
        model=req.model,
        system="\n\n".join(system),
        messages=messages,
        tools=tools,
        tool_choice=tool_choice_from(req.tool_choice),
        max_output_tokens=req.max_completion_tokens or req.max_tokens,
        temperature=req.temperature,
        top_p=req.top_p,
        stop=stop,
        user=req.user,
        extra=extra_from(req),
        hosted=tuple(hosted),
    )
    return req, canonical


def _tool_calls_out(calls: list[llm.ToolCall]) -> list[dict[str, Any]]:
    return [
        {"id": c.id, "type": "function", "function": {"name": c.name, "arguments": c.arguments}}
        for c in calls
    ]


def usage_out(usage: llm.Usage) -> dict[str, Any]:
    return {
        "prompt_tokens": usage.input_tokens,
        "completion_tokens": usage.output_tokens,
        "total_tokens": usage.input_tokens + usage.output_tokens,
    }


def render_completion(*, response_id: str, model: str, created: int, text: str,
                      reasoning: str, tool_calls: list[llm.ToolCall], finish_reason: str,
                      usage: llm.Usage, logprobs: list[llm.TokenLogprob] | None = None
                      ) -> dict[str, Any]:
    """``logprobs``: the text's tokens, when the request asked for them (``None``: it did
    not)."""
    message: dict[str, Any] = {"role": "assistant", "content": text or None,
                               "refusal": None}
    if not tool_calls and message["content"] is None:
        message["content"] = ""
    if tool_calls:
        message["tool_calls"] = _tool_calls_out(tool_calls)
    if reasoning:
        message["reasoning_content"] = reasoning
    return {
        "id": response_id,
        "object": "chat.completion",
        "created": created,
        "model": model,
        "choices": [{"index": 0, "message": message,
                     "logprobs": None if logprobs is None else {
                         "content": logprobs_out(logprobs), "refusal": None},
                     "finish_reason": FINISH.get(finish_reason, "stop")}],
        "usage": usage_out(usage),
        "system_fingerprint": None,
    }


class ChunkStream:
    """Renders canonical events as ``chat.completion.chunk`` SSE frames."""

    def __init__(self, *, response_id: str, model: str, include_usage: bool) -> None:
        self.id = response_id
        self.model = model
        self.created = int(time.time())
        self.include_usage = include_usage
        self.started = False

    def _chunk(self, delta: dict[str, Any], finish: str | None = None,
               logprobs: tuple[llm.TokenLogprob, ...] = ()) -> bytes:
        return sse_data({
            "id": self.id, "object": "chat.completion.chunk", "created": self.created,
            "model": self.model, "system_fingerprint": None,
            "choices": [{"index": 0, "delta": delta,
                         "logprobs": {"content": logprobs_out(logprobs), "refusal": None}
                         if logprobs else None, "finish_reason": finish}],
        })

    def start(self) -> bytes:
        self.started = True
        return self._chunk({"role": "assistant", "content": ""})

    def event(self, event: llm.Event) -> bytes:
        if isinstance(event, llm.TextDelta):
            return self._chunk({"content": event.text},
                               logprobs=event.logprobs) if event.text else b""
        if isinstance(event, llm.ReasoningDelta):
            return self._chunk({"reasoning_content": event.text})
        if isinstance(event, llm.ToolCallDelta):
            call: dict[str, Any] = {"index": event.index}
            if event.id is not None:
                call["id"] = event.id
                call["type"] = "function"
            function: dict[str, Any] = {"arguments": event.arguments}
            if event.name is not None:
                function["name"] = event.name
            call["function"] = function
            return self._chunk({"tool_calls": [call]})
        if isinstance(event, llm.ToolActivity):
            return self._chunk({"reasoning_content": event.summary()})
        return b""  # the turn's end is rendered once it is over (finish)

    def finish(self, usage: llm.Usage, finish_reason: str) -> bytes:
        """The last choice chunk, saying how the reply ended, then the usage chunk if the
        client asked for it."""
        end = self._chunk({}, FINISH.get(finish_reason, "stop"))
        if not self.include_usage:
            return end
        return end + sse_data({
            "id": self.id, "object": "chat.completion.chunk", "created": self.created,
            "model": self.model, "system_fingerprint": None, "choices": [],
            "usage": usage_out(usage),
        })


class Chat(Dialect):
    """``POST /v1/chat/completions``."""

    name = "chat"

    def new_id(self) -> str:
        return f"chatcmpl-{uuid.uuid4().hex[:24]}"

    def parse(self, data: dict[str, Any]) -> Parsed:
        req, canonical = parse_request(data)
        return Parsed(req, canonical, bool(req.stream))

    def render(self, parsed: Parsed, turn: Any, result: Any) -> dict[str, Any]:
        return render_completion(
            response_id=turn.spec.response_id, model=turn.model, created=int(time.time()),
            text=result.text, reasoning=steps_text(result) + result.reasoning,
            tool_calls=result.tool_calls, usage=turn.usage,
            finish_reason=client_finish(parsed.request, result.finish_reason, turn.usage),
            logprobs=result.logprobs if parsed.request.extra.get("logprobs") else None)

    async def frames(self, parsed: Parsed, turn: Any) -> Frames:
        options = parsed.body.stream_options
        chunks = ChunkStream(response_id=turn.spec.response_id, model=turn.model,
                             include_usage=bool(options and options.include_usage))
        return Frames(start=chunks.start(), render=chunks.event,
                      finish=lambda: chunks.finish(turn.usage, client_finish(
                          parsed.request, turn.result.finish_reason, turn.usage)),
                      fail=lambda exc: sse_data(openai_error_body(exc)), done=SSE_DONE)


DIALECT = Chat()
