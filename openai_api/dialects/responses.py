"""OpenAI Responses API: request parsing (the reply's shapes and stream are in
:mod:`openai_api.dialects.responses_output`).

https://platform.openai.com/docs/api-reference/responses (and reference 004, section 3).
Tolerant input (unknown fields ignored, ``input`` as a string or items, tools flat or nested
in a ``function`` wrapper), strict output: every object and event validates against the
``openai`` SDK's typed models.
"""

from __future__ import annotations

import dataclasses
import time
import uuid
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from agents.kernel import llm
from agents.kernel.exceptions import InvalidRequest
from agents.tools import client_mcp_server
from openai_api.dialects.base import Dialect, Parsed
from openai_api.dialects.chat import response_format_from
from openai_api.dialects.common import (
    check_message_count,
    check_tool_call_id,
    client_finish,
    function_name,
    hosted_required,
    image_from_url,
    text_parts_merged,
    tool_call_arguments,
    validate,
)
from openai_api.dialects.responses_output import (
    NAMESPACE_SEP,
    STATUS,
    ClientTools,
    ResponseEventStream,
    output_items,
    render_response,
)
from openai_api.sse import SSE_DONE, Frames

LOGPROBS_INCLUDE = "message.output_text.logprobs"


class _In(BaseModel):
    model_config = ConfigDict(extra="ignore")


class ReasoningIn(_In):
    effort: str | None = None
    summary: str | None = None


class ResponseRequestIn(_In):
    model: str = Field(min_length=1)
    input: str | list[dict[str, Any]]
    instructions: str | None = None
    tools: list[dict[str, Any]] | None = None
    tool_choice: str | dict[str, Any] | None = None
    parallel_tool_calls: bool | None = None
    max_output_tokens: int | None = Field(default=None, ge=1)
    temperature: float | None = Field(default=None, ge=0, le=2)
    top_p: float | None = Field(default=None, ge=0, le=1)
    reasoning: ReasoningIn | None = None
    previous_response_id: str | None = None
    conversation: str | dict[str, Any] | None = None
    store: bool | None = None
    metadata: dict[str, str] | None = None
    stream: bool | None = False
    background: bool | None = None
    user: str | None = None
    safety_identifier: str | None = None
    text: dict[str, Any] | None = None
    top_logprobs: int | None = Field(default=None, ge=0, le=20)
    include: list[str] | None = None
    service_tier: str | None = None


# -- parsing ------------------------------------------------------------------------------------

def _parts(content: Any, where: str, *, images: bool) -> tuple[llm.Part, ...]:
    if content is None:
        return ()
    if isinstance(content, str):
        return (llm.TextPart(content),) if content else ()
    if not isinstance(content, list):
        raise InvalidRequest("Message content must be a string or a list of parts.",
                             param=f"{where}.content")
    parts: list[llm.Part] = []
    for i, part in enumerate(content):
        here = f"{where}.content[{i}]"
        kind = part.get("type") if isinstance(part, dict) else None
        if kind in ("input_text", "output_text", "text", "summary_text", "reasoning_text"):
            text = part.get("text")
            if not isinstance(text, str):
                raise InvalidRequest("Text parts need a string 'text'.", param=f"{here}.text")
            parts.append(llm.TextPart(text))
        elif kind == "refusal":
            parts.append(llm.TextPart(str(part.get("refusal", ""))))
        elif kind == "input_image" and images:
            url = part.get("image_url")
            if not isinstance(url, str) or not url:
                raise InvalidRequest(
                    "input_image parts need an 'image_url' (an https URL or a data URI); "
                    "file ids are not supported.", param=f"{here}.image_url",
                    code="invalid_image")
            parts.append(image_from_url(url, param=f"{here}.image_url"))
        else:
            raise InvalidRequest(f"Content parts of type {kind!r} are not supported here.",
                                 param=f"{here}.type", code="unsupported_content")
    return text_parts_merged(parts)


def _arguments(value: Any, param: str) -> str:
    return tool_call_arguments(value, param)


def _call_joined(messages: list[llm.Message], call: llm.ToolCall) -> None:
    """Add ``call`` to the assistant message that ends ``messages``, or as one of its own: an
    answer's text and its calls are one assistant turn, as Chat Completions stores them."""
    last = messages[-1] if messages else None
    if last is not None and last.role == "assistant":
        messages[-1] = llm.Message("assistant", last.parts, (*last.tool_calls, call))
    else:
        messages.append(llm.Message("assistant", (), (call,)))


def parse_input(items: str | list[dict[str, Any]], answers: list[llm.ApprovalAnswer] | None = None
                ) -> tuple[list[str], list[llm.Message]]:
    """System texts and canonical messages from ``input``; the client's answers to MCP
    approval requests (``mcp_approval_response``) join ``answers``.

    A ``function_call`` joins the assistant message before it (an answer's text and its calls
    are one assistant turn, as Chat Completions stores them); ``reasoning`` items are the
    agent's own steps and are not fed back as its words, nor are its MCP items.
    """
    answers = answers if answers is not None else []
    if isinstance(items, str):
        return [], [llm.Message("user", (llm.TextPart(items),))]
    system: list[str] = []
    messages: list[llm.Message] = []
    for i, item in enumerate(items):
        where = f"input[{i}]"
        kind = item.get("type") or ("message" if "role" in item else None)
        if kind == "message":
            role = item.get("role")
            if role in ("system", "developer"):
                text = llm.Message("user", _parts(item.get("content"), where, images=False)).text
                if text:
                    system.append(text)
            elif role == "user":
                messages.append(
                    llm.Message("user", _parts(item.get("content"), where, images=True)))
            elif role == "assistant":
                messages.append(
                    llm.Message("assistant", _parts(item.get("content"), where, images=False)))
            else:
                raise InvalidRequest(f"Unknown message role {role!r}.", param=f"{where}.role")
        elif kind in ("function_call", "custom_tool_call"):
            call_id = item.get("call_id") or item.get("id")
            name = item.get("name")
            if not isinstance(call_id, str) or not call_id or not isinstance(name, str):
                raise InvalidRequest(f"{kind} items need 'call_id' and 'name'.",
                                     param=f"{where}.call_id")
            arguments = (_arguments(item.get("arguments", ""), f"{where}.arguments")
                         if kind == "function_call"
                         else llm.custom_arguments(str(item.get("input", ""))))
            _call_joined(messages, llm.ToolCall(call_id, _namespaced(item, name), arguments))
        elif kind in ("function_call_output", "custom_tool_call_output"):
            call_id = item.get("call_id")
            if not isinstance(call_id, str) or not call_id:
                raise InvalidRequest(f"{kind} items need a 'call_id'.",
                                     param=f"{where}.call_id")
            check_tool_call_id(call_id, param=f"{where}.call_id")
            output = item.get("output", "")
            parts = _parts(output, f"{where}.output", images=True) if isinstance(
                output, list) else ((llm.TextPart(str(output)),) if output != "" else ())
            messages.append(llm.Message("tool", parts, tool_call_id=call_id))
        elif kind == "mcp_approval_response":
            request_id, approve = item.get("approval_request_id"), item.get("approve")
            if not isinstance(request_id, str) or not isinstance(approve, bool):
                raise InvalidRequest("mcp_approval_response items need 'approval_request_id' "
                                     "and 'approve' (true or false).",
                                     param=f"{where}.approval_request_id")
            reason = item.get("reason")
            answers.append(llm.ApprovalAnswer(request_id, approve,
                                              reason if isinstance(reason, str) else "",
                                              f"{where}.approval_request_id"))
        elif kind in ("reasoning", "mcp_list_tools", "mcp_call", "mcp_approval_request",
                      "web_search_call", "file_search_call"):
            continue  # the reply's own records, sent back: its thread holds them already
        else:
            raise InvalidRequest(f"Input items of type {kind!r} are not supported.",
                                 param=f"{where}.type", code="unsupported_input_item")
    return system, messages




def _namespaced(item: dict[str, Any], name: str) -> str:
    space = item.get("namespace")
    return f"{space}{NAMESPACE_SEP}{name}" if isinstance(space, str) and space else name


def _format_note(fmt: Any) -> str:
    """A custom tool's input format, told to the model in words (a Lark or regex grammar is
    the client's contract; providers get it as the input's description)."""
    if not isinstance(fmt, dict) or fmt.get("type") in (None, "text"):
        return ""
    definition = str(fmt.get("definition") or "")
    return f"It must match this {fmt.get('syntax') or 'grammar'} grammar:\n{definition}"


def _tools(tools: list[dict[str, Any]] | None) -> list[llm.Tool]:
    """Function tools, flat (Responses) or nested (Chat Completions), ``custom`` (free-form)
    tools, and the function tools of a ``namespace`` (as ``NAMESPACE__NAME``). ``mcp`` tools
    are the client's servers (:func:`client_mcp_server`); every other type is a built-in
    tool (web search, file search, local shell...) that no provider here is given as such:
    :func:`hosted_tools` lists them for the agent's policy (agents.tools.hosted)."""
    out: list[llm.Tool] = []
    for i, tool in enumerate(tools or []):
        kind = tool.get("type", "function")
        if kind == "namespace":
            space = tool.get("name")
            inner = tool.get("tools")
            if not isinstance(space, str) or not space or not isinstance(inner, list):
                raise InvalidRequest("Namespace tools need a 'name' and 'tools'.",
                                     param=f"tools[{i}]")
            for tool_ in _tools(inner):
                out.append(llm.Tool(f"{space}{NAMESPACE_SEP}{tool_.name}", tool_.description,
                                    tool_.parameters, tool_.custom))
            continue
        if kind == "custom":
            name = tool.get("name")
            if not isinstance(name, str) or not name:
                raise InvalidRequest("Custom tools need a 'name'.", param=f"tools[{i}].name")
            out.append(llm.custom_tool(name, str(tool.get("description") or ""),
                                       _format_note(tool.get("format"))))
            continue
        if kind != "function":
            continue  # mcp tools: client_mcp; built-in tools: hosted_tools
        spec = tool.get("function") if isinstance(tool.get("function"), dict) else tool
        name = spec.get("name")
        if not isinstance(name, str) or not name:
            raise InvalidRequest("Function tools need a 'name'.", param=f"tools[{i}].name")
        params = spec.get("parameters")
        if params is not None and not isinstance(params, dict):
            raise InvalidRequest("Tool parameters must be a JSON schema object.",
                                 param=f"tools[{i}].parameters")
        out.append(llm.Tool(name, str(spec.get("description") or ""),
                            params or {"type": "object", "properties": {}}))
    return out


CLIENT_TOOL_TYPES = ("function", "custom", "namespace", "mcp")


def hosted_tools(tools: list[dict[str, Any]] | None) -> list[llm.HostedTool]:
    """The request's built-in tools (``web_search``, ``file_search``, ``local_shell``...)."""
    return [llm.HostedTool(str(tool.get("type")), f"tools[{i}].type")
            for i, tool in enumerate(tools or [])
            if tool.get("type", "function") not in CLIENT_TOOL_TYPES]


def client_tools(data: dict[str, Any], tools: list[llm.Tool]) -> ClientTools:
    spaced = {
        f"{t['name']}{NAMESPACE_SEP}{inner.get('name')}"
        for t in data.get("tools") or [] if isinstance(t, dict) and t.get("type") == "namespace"
        for inner in t.get("tools") or [] if isinstance(inner, dict)
    }
    return ClientTools(frozenset(t.name for t in tools if t.custom), frozenset(spaced))


def tool_choice_from(value: str | dict[str, Any] | None,
                     hosted: list[llm.HostedTool] | None = None) -> llm.ToolChoice:
    """The canonical ``tool_choice``; one that names a built-in tool (``{"type":
    "web_search"}``) marks it required in ``hosted`` and is ``auto`` until the agent's policy
    decides (agents.tools.hosted)."""
    if value is None or value == "auto":
        return llm.ToolChoice("auto")
    if value in ("none", "required"):
        return llm.ToolChoice(value)  # type: ignore[arg-type]
    if isinstance(value, dict):
        kind = value.get("type")
        if kind in ("function", "custom"):
            name = function_name(value)
            if isinstance(name, str) and name:
                return llm.ToolChoice("tool", name)
        elif kind == "allowed_tools":
            return llm.ToolChoice("required" if value.get("mode") == "required" else "auto")
        elif kind == "mcp":
            return llm.ToolChoice("auto")  # a client's server: its tools are Gaia's to run
        elif isinstance(kind, str) and kind:
            hosted_required(hosted if hosted is not None else [], kind, param="tool_choice")
            return llm.ToolChoice("auto")
    raise InvalidRequest("Invalid tool_choice.", param="tool_choice")


def parse_request(data: dict[str, Any]) -> tuple[ResponseRequestIn, llm.LLMRequest]:
    """The validated request and its canonical form (``model`` is the agent slug here)."""
    check_message_count(data.get("input"), param="input")
    req: ResponseRequestIn = validate(ResponseRequestIn, data)
    if isinstance(req.input, list) and not req.input:
        raise InvalidRequest("'input' must not be empty.", param="input")
    answers: list[llm.ApprovalAnswer] = []
    system, messages = parse_input(req.input, answers)
    conversation_of(req)  # checked before anything is looked up
    if answers and not req.previous_response_id:
        raise InvalidRequest("An mcp_approval_response continues the response that asked: "
                             "send it with that response's id as 'previous_response_id'.",
                             param="previous_response_id")
    if req.instructions:
        system.insert(0, req.instructions)
    extra: dict[str, Any] = {}
    if req.reasoning and req.reasoning.effort:
        extra["reasoning_effort"] = req.reasoning.effort
    if req.parallel_tool_calls is not None:
        extra["parallel_tool_calls"] = req.parallel_tool_calls
    fmt = (req.text or {}).get("format")
    if isinstance(fmt, dict) and fmt.get("type") == "json_schema":
        # Flat in the Responses API; Chat Completions' nested shape is the canonical one.
        fmt = {"type": "json_schema", "json_schema": {
            k: v for k, v in fmt.items() if k in ("name", "schema", "strict", "description")}}
    response_format = response_format_from(fmt, "text.format")
    if LOGPROBS_INCLUDE in (req.include or []) or req.top_logprobs:
        extra["logprobs"] = True  # asked for by include, or by wanting alternatives
    for name, value in (("response_format", response_format),
                        ("top_logprobs", req.top_logprobs or None),
                        ("service_tier", req.service_tier), ("metadata", req.metadata or None)):
        if value is not None:
            extra[name] = value
    hosted = hosted_tools(req.tools)
    canonical = llm.LLMRequest(
        model=req.model,
        system="\n\n".join(system),
        messages=messages,
        tools=_tools(req.tools),
        tool_choice=tool_choice_from(req.tool_choice, hosted),
        max_output_tokens=req.max_output_tokens,
        temperature=req.temperature,
        top_p=req.top_p,
        user=(req.user or req.safety_identifier or "")[:300] or None,  # Thread.user's length
        extra=extra,
        client_mcp=tuple(client_mcp_server(t, f"tools[{i}]") for i, t in enumerate(req.tools or [])
                         if isinstance(t, dict) and t.get("type") == "mcp"),
        approval_answers=tuple(answers),
        hosted=tuple(hosted),
    )
    return req, canonical


def conversation_of(req: ResponseRequestIn) -> str | None:
    """The conversation the request continues (``conversation``: its id, or ``{"id": ...}``),
    never with ``previous_response_id`` (OpenAI: the two are exclusive)."""
    value = req.conversation
    if isinstance(value, dict):
        value = value.get("id")
        if not isinstance(value, str):
            raise InvalidRequest("'conversation' must be a conversation id or an object with "
                                 "its 'id'.", param="conversation.id", code="invalid_value")
    if value is None:
        return None
    if not value:
        raise InvalidRequest("'conversation' must not be empty.", param="conversation",
                             code="invalid_value")
    if req.previous_response_id:
        raise InvalidRequest("Mutually exclusive parameters: send only one of "
                             "'previous_response_id' and 'conversation'.",
                             param="conversation", code="mutually_exclusive_parameters")
    return value


def _custom_format(tools: list[dict[str, Any]] | None, name: str) -> dict[str, Any]:
    for tool in tools or []:
        if tool.get("type") == "custom" and tool.get("name") == name:
            fmt = tool.get("format")
            return fmt if isinstance(fmt, dict) else {"type": "text"}
    return {"type": "text"}


def echo_fields(req: ResponseRequestIn) -> dict[str, Any]:
    """The request's own settings, as the API reports them on the response."""
    tools = [
        {"type": "custom", "name": t.name, "description": t.description or None,
         "format": _custom_format(req.tools, t.name)} if t.custom else
        {"type": "function", "name": t.name, "description": t.description or None,
         "parameters": t.parameters, "strict": False}
        for t in _tools(req.tools)
    ]
    tools.extend(  # a client's MCP servers, as given less their headers (its secrets)
        {"type": "mcp", "server_label": t.get("server_label"), "server_url": t.get("server_url"),
         "allowed_tools": t.get("allowed_tools"), "require_approval": t.get("require_approval"),
         "headers": None}
        for t in req.tools or [] if isinstance(t, dict) and t.get("type") == "mcp")
    choice: Any = req.tool_choice if isinstance(req.tool_choice, str) else "auto"
    if isinstance(req.tool_choice, dict) and req.tool_choice.get("type") in ("function",
                                                                             "custom"):
        name = function_name(req.tool_choice)
        choice = {"type": req.tool_choice["type"], "name": name}
    conversation = conversation_of(req)
    return {
        **({"conversation": {"id": conversation}} if conversation else {}),
        **({"background": True} if req.background else {}),
        "instructions": req.instructions,
        "metadata": req.metadata or {},
        "parallel_tool_calls": req.parallel_tool_calls is not False,
        "tool_choice": choice,
        "tools": tools,
        "temperature": req.temperature,
        "top_p": req.top_p,
        "max_output_tokens": req.max_output_tokens,
        "previous_response_id": req.previous_response_id,
        "reasoning": {"effort": req.reasoning.effort, "summary": req.reasoning.summary}
        if req.reasoning else None,
        "store": req.store is not False,
        "user": req.user,
    }


class Responses(Dialect):
    """``POST /v1/responses``."""

    name = "responses"
    images_param = "input"
    params = {"response_format": "text.format",  # noqa: RUF012 - read-only
              "logprobs": "include"}

    def new_id(self) -> str:
        return f"resp_{uuid.uuid4().hex}"

    def parse(self, data: dict[str, Any]) -> Parsed:
        req, canonical = parse_request(data)
        return Parsed(req, canonical, bool(req.stream),
                      previous_response_id=req.previous_response_id,
                      conversation_id=conversation_of(req),
                      extra={"echo": echo_fields(req),
                             "tools": client_tools(data, canonical.tools)})

    def render(self, parsed: Parsed, turn: Any, result: Any) -> dict[str, Any]:
        response_id = turn.spec.response_id
        return render_response(
            response_id=response_id, model=turn.model, created_at=int(time.time()),
            status=STATUS.get(client_finish(parsed.request, result.finish_reason, turn.usage),
                              "completed"),
            output=output_items(response_id=response_id, text=result.text,
                                reasoning=result.reasoning, tool_calls=result.tool_calls,
                                tools=_tools_of(parsed, turn), steps=result.tool_steps,
                                listings=result.tool_listings,
                                approvals=result.approval_requests,
                                logprobs=result.logprobs),
            usage=turn.usage, echo=parsed.extra["echo"])

    async def frames(self, parsed: Parsed, turn: Any) -> Frames:
        stream = ResponseEventStream(response_id=turn.spec.response_id, model=turn.model,
                                     echo=parsed.extra["echo"], tools=_tools_of(parsed, turn))
        return Frames(start=stream.start(), render=stream.event,
                      finish=lambda: stream.finish(turn.usage, client_finish(
                          parsed.request, turn.result.finish_reason, turn.usage)),
                      fail=lambda exc: stream.failed(exc, turn.usage), done=SSE_DONE)


def _tools_of(parsed: Parsed, turn: Any) -> ClientTools:
    """The request's tools as rendering needs them, with the agent's tools that serve its
    hosted ones (their calls are ``web_search_call`` items...: agents.tools.hosted)."""
    return dataclasses.replace(parsed.extra["tools"], hosted=turn.spec.hosted.served)


DIALECT = Responses()
