"""Helpers every dialect adapter shares: body parsing, validation errors, images. (SSE framing
is :mod:`openai_api.sse`.)"""

from __future__ import annotations

import base64
import binascii
import json
import re
from typing import Any

from django.conf import settings
from pydantic import BaseModel, ValidationError

from agents.http.jsonbody import MAX_JSON_DEPTH, json_parse, json_text_check, too_deep
from agents.kernel import llm
from agents.kernel.exceptions import InvalidRequest

_DATA_URI = re.compile(r"^data:(?P<type>[\w.+-]+/[\w.+-]+)?(?P<b64>;base64)?,(?P<data>.*)$", re.S)
IMAGE_TYPES = {"image/jpeg", "image/png", "image/gif", "image/webp"}


def parse_json(body: bytes) -> dict[str, Any]:
    """The JSON object in ``body`` or :class:`InvalidRequest`: the rule every JSON input
    follows (:func:`agents.http.jsonbody.json_parse`: ``invalid_json``, or ``invalid_value`` naming
    where a text holds a NUL or a lone surrogate), at whatever depth the parser reaches (a
    /v1 body is large: no walk to measure its depth)."""
    data = json_parse(body, max_depth=None)
    if not isinstance(data, dict):
        raise InvalidRequest("The request body must be a JSON object.", code="invalid_json")
    return data


def text_parts_merged(parts: list[llm.Part]) -> tuple[llm.Part, ...]:
    """``parts`` with each run of adjacent text parts joined by newlines: one text for the
    backend, whichever dialect's content blocks it came in."""
    merged: list[llm.Part] = []
    for p in parts:
        if isinstance(p, llm.TextPart) and merged and isinstance(merged[-1], llm.TextPart):
            merged[-1] = llm.TextPart(merged[-1].text + "\n" + p.text)
        else:
            merged.append(p)
    return tuple(merged)


def steps_text(result: Any) -> str:
    """A finished turn's own tool calls as lines of its reasoning (the Chat Completions and
    Messages dialects show them there; the Responses API has items of its own)."""
    return "".join(step.summary() for step in getattr(result, "tool_steps", ()))


def client_finish(request: llm.LLMRequest, finish_reason: str, usage: llm.Usage | None) -> str:
    """How a reply ended, as the client's own output limit sees it (every dialect):
    ``length`` only when it reached the ``max_tokens`` / ``max_completion_tokens`` /
    ``max_output_tokens`` the client asked for. Cut by a smaller limit of the agent's
    (``max_output_tokens``) or by the model's window, the agent's turn is over: ``stop``
    (Claude Code answers ``max_tokens`` by asking for more, four times, then fails with
    "exceeded the 32000 output token maximum"; Codex CLI fails an ``incomplete`` response;
    Aider answers ``length`` with "hit a token limit!" and applies no edit; Qwen Code asks
    again with twice the ``max_tokens``, then for a continuation). The stored turn keeps
    ``length``."""
    asked = request.max_output_tokens
    if finish_reason == "length" and (
            asked is None or usage is None or usage.output_tokens < asked):
        return "stop"
    return finish_reason


def hosted_required(hosted: list[llm.HostedTool], kind: str, *, param: str) -> None:
    """Mark the hosted tool of type ``kind`` as required by the request's ``tool_choice``
    (one the tools do not list joins them, from ``param``)."""
    for i, tool in enumerate(hosted):
        if tool.type == kind:
            hosted[i] = llm.HostedTool(tool.type, tool.param, required=True)
            return
    hosted.append(llm.HostedTool(kind, param, required=True))


def logprobs_out(tokens: Any) -> list[dict[str, Any]]:
    """Token log probabilities in OpenAI's shape (Chat Completions' ``logprobs.content``,
    the Responses API's ``output_text.logprobs``)."""
    return [{"token": t.token, "logprob": t.logprob, "bytes": list(t.raw),
             "top_logprobs": [{"token": a.token, "logprob": a.logprob, "bytes": list(a.raw)}
                              for a in t.top]}
            for t in tokens]


MAX_TOOL_CALL_ID = 200  # agents.models.Message.tool_call_id


def check_message_count(items: Any, *, param: str) -> None:
    """Refuse more than ``GAIA_MAX_MESSAGES`` items before any is validated or stored."""
    limit = settings.GAIA_MAX_MESSAGES
    if isinstance(items, list) and len(items) > limit:
        raise InvalidRequest(
            f"A request may carry at most {limit} messages; this one has {len(items)}.",
            param=param, code="too_many_messages")


def check_tool_call_id(call_id: str, *, param: str) -> None:
    if len(call_id) > MAX_TOOL_CALL_ID:
        raise InvalidRequest(f"Tool call ids are at most {MAX_TOOL_CALL_ID} characters.",
                             param=param, code="invalid_value")


def function_name(value: dict[str, Any]) -> Any:
    """The tool a ``tool_choice`` object names: ``name``, or ``function.name`` (any type)."""
    function = value.get("function")
    return value.get("name") or (function.get("name") if isinstance(function, dict) else None)


def validate(model: type[BaseModel], data: dict[str, Any]) -> Any:
    """``model`` from ``data`` or :class:`InvalidRequest` naming the first bad field."""
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        err = exc.errors()[0]
        param = ""
        for part in err["loc"]:
            if isinstance(part, int):
                param += f"[{part}]"
            elif part not in ("function-after", "list", "str", "dict", "union", "tagged-union"):
                param += ("." if param else "") + str(part)
        raise InvalidRequest(f"Invalid value for '{param}': {err['msg']}.", param=param or None,
                             code="invalid_value") from None


def image_from_url(url: str, *, param: str) -> llm.ImagePart:
    """An image part from an ``https://`` URL or a ``data:`` URI (validated base64)."""
    if url.startswith("data:"):
        match = _DATA_URI.match(url)
        if not match or not match.group("b64"):
            raise InvalidRequest("Image data URIs must be base64 encoded.", param=param,
                                 code="invalid_image")
        media_type = (match.group("type") or "image/png").lower()
        if media_type not in IMAGE_TYPES:
            raise InvalidRequest(f"Unsupported image type {media_type!r}.", param=param,
                                 code="invalid_image")
        data = match.group("data")
        try:
            base64.b64decode(data[:4096 - 4096 % 4] or "", validate=True)
        except binascii.Error:
            raise InvalidRequest("The image data is not valid base64.", param=param,
                                 code="invalid_image") from None
        return llm.ImagePart(data=data, media_type=media_type)
    if url.startswith(("http://", "https://")):
        return llm.ImagePart(url=url)
    raise InvalidRequest("Image URLs must be http(s) URLs or data URIs.", param=param,
                         code="invalid_image")


def tool_call_arguments(value: Any, param: str) -> str:
    """A client's tool call ``arguments`` as text, checked before anything costs: JSON in it
    must not nest too deeply nor hold a NUL or a lone surrogate (what was stored or hashed of
    it failed after the upstream had answered)."""
    if isinstance(value, str):
        json_text_check(value, param=param)
        return value
    if isinstance(value, dict | list) and too_deep(value, MAX_JSON_DEPTH):
        raise InvalidRequest(f"'{param}' is nested more than {MAX_JSON_DEPTH} levels deep.",
                             param=param, code="invalid_value")
    return json.dumps(value)
