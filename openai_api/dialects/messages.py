"""Anthropic Messages API: request parsing and the dialect (the output side, a reply and its
stream's events, is :mod:`openai_api.dialects.messages_output`).

https://docs.anthropic.com/en/api/messages (and reference 004, section 1). Tolerant input
(unknown fields such as ``cache_control`` ignored, ``system`` and ``content`` as strings or
blocks), strict output: every object and event validates against the ``anthropic`` SDK's types.
Thinking blocks a client sends back are dropped on input (they are not the assistant's words).
"""

from __future__ import annotations

import base64
import binascii
import json
import uuid
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from agents.http.jsonbody import MAX_JSON_DEPTH, too_deep
from agents.kernel import llm
from agents.kernel.exceptions import InvalidRequest
from agents.tools.hosted import hosted_kind
from openai_api.dialects.base import Dialect, Parsed
from openai_api.dialects.common import (
    IMAGE_TYPES,
    check_message_count,
    check_tool_call_id,
    client_finish,
    hosted_required,
    image_from_url,
    steps_text,
    text_parts_merged,
    validate,
)
from openai_api.dialects.messages_output import (
    MessageEventStream,
    error_event,
    ping,
    render_message,
)
from openai_api.sse import Frames


class _In(BaseModel):
    model_config = ConfigDict(extra="ignore")


class MessageIn(_In):
    # ``system`` mid-conversation: Claude Code 2.x sends it for model ids it does not know
    # (the ``mid-conversation-system`` beta); kept in order as an instruction at that point.
    role: Literal["user", "assistant", "system"]
    content: str | list[dict[str, Any]]


class MessagesRequestIn(_In):
    model: str = Field(min_length=1)
    messages: list[MessageIn] = Field(min_length=1)
    max_tokens: int | None = Field(default=None, ge=1)
    system: str | list[dict[str, Any]] | None = None
    stop_sequences: list[str] | None = None
    stream: bool | None = False
    temperature: float | None = Field(default=None, ge=0, le=1)
    top_p: float | None = Field(default=None, ge=0, le=1)
    top_k: int | None = Field(default=None, ge=0)
    tools: list[dict[str, Any]] | None = None
    tool_choice: dict[str, Any] | None = None
    metadata: dict[str, Any] | None = None
    thinking: dict[str, Any] | None = None
    output_config: dict[str, Any] | None = None
    output_format: dict[str, Any] | None = None  # the structured-outputs beta's spelling
    service_tier: str | None = None


# -- parsing ------------------------------------------------------------------------------------

def _text_of(blocks: Any, where: str) -> str:
    """The text of a string or a list of text blocks (``system``)."""
    if isinstance(blocks, str):
        return blocks
    texts = []
    for i, block in enumerate(blocks or []):
        if not isinstance(block, dict) or block.get("type") != "text" or not isinstance(
                block.get("text"), str):
            raise InvalidRequest("Expected text blocks with a string 'text'.",
                                 param=f"{where}[{i}]")
        texts.append(block["text"])
    return "\n\n".join(t for t in texts if t)


def _image(block: dict[str, Any], where: str) -> llm.ImagePart:
    source = block.get("source")
    if not isinstance(source, dict):
        raise InvalidRequest("Image blocks need a 'source'.", param=f"{where}.source",
                             code="invalid_image")
    kind = source.get("type")
    if kind == "base64":
        media_type = str(source.get("media_type") or "").lower()
        data = source.get("data")
        if media_type not in IMAGE_TYPES:
            raise InvalidRequest(f"Unsupported image media_type {media_type!r}.",
                                 param=f"{where}.source.media_type", code="invalid_image")
        if not isinstance(data, str):
            raise InvalidRequest("Base64 image sources need 'data'.",
                                 param=f"{where}.source.data", code="invalid_image")
        try:
            base64.b64decode(data[:4096 - 4096 % 4], validate=True)
        except binascii.Error:
            raise InvalidRequest("The image data is not valid base64.",
                                 param=f"{where}.source.data", code="invalid_image") from None
        return llm.ImagePart(data=data, media_type=media_type)
    if kind == "url" and isinstance(source.get("url"), str):
        return image_from_url(source["url"], param=f"{where}.source.url")
    raise InvalidRequest(f"Image sources of type {kind!r} are not supported.",
                         param=f"{where}.source.type", code="invalid_image")


def _tool_result(block: dict[str, Any], where: str) -> llm.Message:
    call_id = block.get("tool_use_id")
    if not isinstance(call_id, str) or not call_id:
        raise InvalidRequest("tool_result blocks need a 'tool_use_id'.",
                             param=f"{where}.tool_use_id")
    check_tool_call_id(call_id, param=f"{where}.tool_use_id")
    content = block.get("content")
    parts: list[llm.Part] = []
    if isinstance(content, str):
        if content:
            parts.append(llm.TextPart(content))
    elif isinstance(content, list):
        for j, inner in enumerate(content):
            kind = inner.get("type") if isinstance(inner, dict) else None
            if kind == "text" and isinstance(inner.get("text"), str):
                parts.append(llm.TextPart(inner["text"]))
            elif kind == "image":
                parts.append(_image(inner, f"{where}.content[{j}]"))
            else:
                raise InvalidRequest(f"tool_result content of type {kind!r} is not supported.",
                                     param=f"{where}.content[{j}].type",
                                     code="unsupported_content")
    elif content is not None:
        raise InvalidRequest("tool_result content must be a string or blocks.",
                             param=f"{where}.content")
    return llm.Message("tool", text_parts_merged(parts), tool_call_id=call_id,
                       is_error=bool(block.get("is_error")))


def parse_messages(messages: list[MessageIn]) -> list[llm.Message]:
    """Canonical messages. A user turn's ``tool_result`` blocks become ``tool`` messages (in
    order, before the turn's own text); ``thinking`` blocks are dropped."""
    out: list[llm.Message] = []
    for i, m in enumerate(messages):
        where = f"messages[{i}]"
        if m.role == "system":
            text = _text_of(m.content, f"{where}.content")
            if text:
                out.append(llm.Message("system", (llm.TextPart(text),)))
            continue
        if isinstance(m.content, str):
            out.append(llm.Message(m.role, (llm.TextPart(m.content),) if m.content else ()))
            continue
        parts: list[llm.Part] = []
        calls: list[llm.ToolCall] = []
        results: list[llm.Message] = []
        for j, block in enumerate(m.content):
            here = f"{where}.content[{j}]"
            kind = block.get("type")
            if kind == "text":
                if not isinstance(block.get("text"), str):
                    raise InvalidRequest("Text blocks need a string 'text'.",
                                         param=f"{here}.text")
                parts.append(llm.TextPart(block["text"]))
            elif kind == "image" and m.role == "user":
                parts.append(_image(block, here))
            elif kind == "tool_use" and m.role == "assistant":
                call_id, name = block.get("id"), block.get("name")
                if not isinstance(call_id, str) or not isinstance(name, str):
                    raise InvalidRequest("tool_use blocks need 'id' and 'name'.",
                                         param=f"{here}.id")
                tool_input = block.get("input") or {}
                if isinstance(tool_input, dict | list) and too_deep(tool_input, MAX_JSON_DEPTH):
                    raise InvalidRequest(f"'input' is nested more than {MAX_JSON_DEPTH} levels "
                                         "deep.", param=f"{here}.input", code="invalid_value")
                calls.append(llm.ToolCall(call_id, name, json.dumps(tool_input)))
            elif kind == "tool_result" and m.role == "user":
                results.append(_tool_result(block, here))
            elif kind in ("thinking", "redacted_thinking") and m.role == "assistant":
                continue
            else:
                raise InvalidRequest(
                    f"Content blocks of type {kind!r} are not supported in {m.role} messages.",
                    param=f"{here}.type", code="unsupported_content")
        out.extend(results)
        if parts or calls or not results:
            out.append(llm.Message(m.role, text_parts_merged(parts), tuple(calls)))
    return out


def _tools(tools: list[dict[str, Any]] | None, hosted: list[llm.HostedTool]
           ) -> tuple[list[llm.Tool], dict[str, str]]:
    """Client tools (``name``, ``description``, ``input_schema``), and the names of the
    hosted ones (-> their type). Anthropic's server tools (``web_search_...``,
    ``code_execution_...``, ``web_fetch_...``), which only Anthropic runs, and its computer
    use join ``hosted``: the agent's policy decides (agents.tools.hosted). Its other tools
    with a versioned ``type`` (``bash_...``, ``text_editor_...``: run by the client, but with
    schemas only Anthropic's models know) are refused with 400 naming them."""
    out: list[llm.Tool] = []
    names: dict[str, str] = {}
    for i, tool in enumerate(tools or []):
        kind = tool.get("type")
        if hosted_kind(kind) is not None:
            hosted.append(llm.HostedTool(kind, f"tools[{i}].type"))
            if isinstance(tool.get("name"), str):
                names[tool["name"]] = kind
            continue
        if kind not in (None, "custom"):
            raise InvalidRequest(
                f"The tool type {kind!r} (a tool Anthropic's models know by heart) is not "
                "supported: define it as a client tool with a 'name' and an 'input_schema'.",
                param=f"tools[{i}].type", code="unsupported_tool")
        name = tool.get("name")
        if not isinstance(name, str) or not name:
            raise InvalidRequest("Tools need a 'name'.", param=f"tools[{i}].name")
        schema = tool.get("input_schema")
        if not isinstance(schema, dict):
            raise InvalidRequest("Tools need an 'input_schema' object.",
                                 param=f"tools[{i}].input_schema")
        out.append(llm.Tool(name, str(tool.get("description") or ""), schema))
    return out, names


def tool_choice_from(value: dict[str, Any] | None) -> llm.ToolChoice:
    """``auto`` -> auto, ``any`` -> required, ``tool`` -> that tool, ``none`` -> none."""
    if value is None:
        return llm.ToolChoice("auto")
    kind = value.get("type")
    if kind == "auto":
        return llm.ToolChoice("auto")
    if kind == "any":
        return llm.ToolChoice("required")
    if kind == "none":
        return llm.ToolChoice("none")
    if kind == "tool" and isinstance(value.get("name"), str) and value["name"]:
        return llm.ToolChoice("tool", value["name"])
    raise InvalidRequest("Invalid tool_choice.", param="tool_choice")


def parse_request(data: dict[str, Any], *, require_max_tokens: bool = True
                  ) -> tuple[MessagesRequestIn, llm.LLMRequest]:
    """The validated request and its canonical form (``model`` is the agent slug here)."""
    check_message_count(data.get("messages"), param="messages")
    req: MessagesRequestIn = validate(MessagesRequestIn, data)
    if require_max_tokens and req.max_tokens is None:
        raise InvalidRequest("max_tokens: Field required", param="max_tokens")
    user = (req.metadata or {}).get("user_id")
    conversation = parse_messages(req.messages)
    if not any(m.role in ("user", "tool") for m in conversation):
        raise InvalidRequest("No user message in request.", param="messages",
                             code="missing_user_message")
    hosted: list[llm.HostedTool] = []
    tools, hosted_names = _tools(req.tools, hosted)
    choice = tool_choice_from(req.tool_choice)
    if choice.mode == "tool" and choice.name in hosted_names:  # a server tool, by its name
        hosted_required(hosted, hosted_names[choice.name], param="tool_choice")
        choice = llm.ToolChoice("auto")
    canonical = llm.LLMRequest(
        model=req.model,
        system=_text_of(req.system, "system") if req.system is not None else "",
        messages=conversation,
        tools=tools,
        tool_choice=choice,
        max_output_tokens=req.max_tokens,
        temperature=req.temperature,
        top_p=req.top_p,
        stop=list(req.stop_sequences or []),
        user=user[:300] if isinstance(user, str) and user else None,  # Thread.user's length
        extra=extra_from(req),
        hosted=tuple(hosted),
    )
    return req, canonical


def output_format_from(req: MessagesRequestIn) -> dict[str, Any] | None:
    """The canonical ``response_format`` (Chat Completions' shape) of ``output_config.format``
    (or the older top-level ``output_format``): ``{"type": "json_schema", "schema": {...}}``."""
    config_format = (req.output_config or {}).get("format")
    fmt, param = ((config_format, "output_config.format") if config_format is not None
                  else (req.output_format, "output_format"))
    if fmt is None:
        return None
    if not isinstance(fmt, dict) or fmt.get("type") != "json_schema":
        raise InvalidRequest(f"{param}.type must be 'json_schema'.", param=f"{param}.type")
    schema = fmt.get("schema")
    if not isinstance(schema, dict):
        raise InvalidRequest(f"{param} needs a 'schema' object.", param=f"{param}.schema")
    return {"type": "json_schema", "json_schema": {"name": "output", "schema": schema}}


def extra_from(req: MessagesRequestIn) -> dict[str, Any]:
    """The request's fields beyond the core: ``top_k``, ``thinking`` (unless disabled), the
    effort of ``output_config`` (Claude Code sends it) as ``reasoning_effort``, its
    ``format`` as ``response_format``, the tier, and ``tool_choice.disable_parallel_tool_use``
    as ``parallel_tool_calls: false``."""
    effort = (req.output_config or {}).get("effort")
    thinking = req.thinking if (req.thinking or {}).get("type") not in (None, "disabled") \
        else None
    extra: dict[str, Any] = {"top_k": req.top_k, "thinking": thinking,
                             "reasoning_effort": effort if isinstance(effort, str) else None,
                             "response_format": output_format_from(req),
                             "service_tier": req.service_tier}
    if (req.tool_choice or {}).get("disable_parallel_tool_use") is True:
        extra["parallel_tool_calls"] = False  # the canonical spelling (README's table)
    return {k: v for k, v in extra.items() if v is not None}


class Messages(Dialect):
    """``POST /v1/messages``."""

    name = "messages"
    errors = "anthropic"
    params = {"response_format": "output_config.format"}  # noqa: RUF012 - read-only

    def new_id(self) -> str:
        return f"msg_{uuid.uuid4().hex[:24]}"

    def parse(self, data: dict[str, Any]) -> Parsed:
        req, canonical = parse_request(data)
        return Parsed(req, canonical, bool(req.stream))

    def render(self, parsed: Parsed, turn: Any, result: Any) -> dict[str, Any]:
        return render_message(
            message_id=turn.spec.response_id, model=turn.model, text=result.text,
            reasoning=steps_text(result) + result.reasoning, tool_calls=result.tool_calls,
            finish_reason=client_finish(parsed.request, result.finish_reason, turn.usage),
            usage=turn.usage)

    async def frames(self, parsed: Parsed, turn: Any) -> Frames:
        # message_start carries the input tokens: counted now, before the first token.
        input_tokens = await turn.input_token_count()
        stream = MessageEventStream(message_id=turn.spec.response_id, model=turn.model)
        return Frames(start=stream.start(input_tokens), render=stream.event,
                      keepalive=ping(), fail=error_event,
                      finish=lambda: stream.finish(turn.usage, client_finish(
                          parsed.request, turn.result.finish_reason, turn.usage)))


DIALECT = Messages()
