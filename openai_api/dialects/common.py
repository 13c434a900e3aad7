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

from agents import llm
from agents.exceptions import InvalidRequest

_DATA_URI = re.compile(r"^data:(?P<type>[\w.+-]+/[\w.+-]+)?(?P<b64>;base64)?,(?P<data>.*)$", re.S)
IMAGE_TYPES = {"image/jpeg", "image/png", "image/gif", "image/webp"}


# JSON escapes for what no database text column can hold: a NUL (PostgreSQL refuses it) or
# a UTF-16 surrogate (paired ones json.loads joins into one character; a lone one cannot be
# encoded at all). Searched for in the raw body, which is cheap; only a body that contains one
# is walked to find where it is.
_UNSTORABLE_ESCAPE = re.compile(rb"\\u(?:0000|[dD][89a-fA-F])")
_UNSTORABLE_CHAR = re.compile("[\x00\ud800-\udfff]")


def parse_json(body: bytes) -> dict[str, Any]:
    """The JSON object in ``body`` or :class:`InvalidRequest` (``invalid_json``): for bad
    syntax (``NaN`` and ``Infinity`` too), nesting too deep to parse, an integer too long to
    convert; and text holding a NUL or a lone surrogate (``invalid_value``, naming where)."""
    try:
        data = json.loads(body, parse_constant=_not_json)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise InvalidRequest(
            f"We could not parse the JSON body of your request ({exc}).", code="invalid_json"
        ) from None
    except RecursionError:
        raise InvalidRequest("The JSON body of your request is nested too deeply.",
                             code="invalid_json") from None
    except ValueError as exc:  # an integer over Python's digit limit
        raise InvalidRequest(f"We could not parse the JSON body of your request ({exc}).",
                             code="invalid_json") from None
    if not isinstance(data, dict):
        raise InvalidRequest("The request body must be a JSON object.", code="invalid_json")
    if _UNSTORABLE_ESCAPE.search(body):
        where = _unstorable_text(data, "")
        if where is not None:
            raise InvalidRequest(
                f"Invalid value for '{where or 'body'}': text may not contain NUL characters "
                "or unpaired UTF-16 surrogates.", param=where or None, code="invalid_value")
    return data


def _not_json(name: str) -> Any:
    """``NaN`` and ``Infinity`` are Python's extensions, not JSON (RFC 8259 section 6)."""
    raise json.JSONDecodeError(f"{name} is not a JSON value", name, 0)


def _unstorable_text(value: Any, where: str) -> str | None:
    """Where in ``value`` a string holds a NUL or a lone surrogate (``None``: nowhere)."""
    stack = [(value, where)]
    while stack:
        item, at = stack.pop()
        if isinstance(item, str):
            if _UNSTORABLE_CHAR.search(item):
                return at
        elif isinstance(item, dict):
            for k, v in item.items():
                path = f"{at}.{k}" if at else str(k)
                if _UNSTORABLE_CHAR.search(k):
                    return path
                stack.append((v, path))
        elif isinstance(item, list):
            stack.extend((v, f"{at}[{i}]") for i, v in enumerate(item))
    return None


def steps_text(result: Any) -> str:
    """A finished turn's own tool calls as lines of its reasoning (the Chat Completions and
    Messages dialects show them there; the Responses API has items of its own)."""
    return "".join(step.summary() for step in getattr(result, "tool_steps", ()))


# Tools that OpenAI or Anthropic run on their own servers (Responses built-in tools, Anthropic
# server tools): the type, or the prefix of a versioned type (``web_search_20250305``).
HOSTED_TOOLS = ("web_search", "file_search", "code_interpreter", "image_generation",
                "computer_use", "code_execution", "web_fetch")


def check_not_hosted(kind: Any, *, param: str) -> None:
    """Refuse a hosted tool (:data:`HOSTED_TOOLS`) with 400 naming it: no provider Gaia
    speaks to runs it, and dropping it would leave the client waiting for what it relied on."""
    if isinstance(kind, str) and kind.startswith(HOSTED_TOOLS):
        raise InvalidRequest(
            f"The tool '{kind}' is a hosted tool (run on OpenAI's or Anthropic's servers): "
            "Gaia does not host it. Remove it from 'tools', or give the agent a function "
            "tool or an MCP server that does the same.",
            param=param, code="unsupported_tool")


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
