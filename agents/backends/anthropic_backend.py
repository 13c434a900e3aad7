"""The ``anthropic`` provider kind: Anthropic's Messages API through the official SDK.

Provider fields: ``base_url`` (default: the SDK's, ``https://api.anthropic.com``; a trailing
``/v1`` is accepted), the credential (``api_key_secret`` or ``api_key_env``, sent as
``x-api-key``), ``default_model``, ``timeout_seconds``. Options: ``extra_headers`` (e.g.
``{"anthropic-beta": "..."}``), ``extra_body``, ``sampling`` (``false``: never send
temperature/top_p, for models that reject them), ``max_tokens`` (the default output limit the API
requires, 4096), ``images`` (``false`` for text-only models), ``max_retries`` (default 0).

Mapping: the system text goes in ``system``; tools as ``input_schema``; assistant tool calls as
``tool_use`` blocks and tool results as ``tool_result`` blocks in a user turn; images as
``image`` blocks. Stop reasons: end_turn/stop_sequence/pause_turn → stop, max_tokens → length,
tool_use → tool_calls, refusal → content_filter. Usage: input tokens (including cache reads and
writes) from ``message_start``, output tokens from ``message_delta``.
"""

from __future__ import annotations

import asyncio
import json
import weakref
from collections.abc import AsyncIterator, Callable
from typing import TYPE_CHECKING, Any

from agents.backends import provider_headers, provider_settings
from agents.backends.upstream import load_sdk, map_sdk_error, upstream_error_text
from agents.infra import tracing
from agents.kernel.exceptions import BackendError, BackendRateLimited
from agents.kernel.llm import (
    Event,
    Finish,
    ImagePart,
    LLMRequest,
    Message,
    ReasoningDelta,
    TextDelta,
    TextPart,
    ToolCallDelta,
    Usage,
    estimate_request_tokens,
)

if TYPE_CHECKING:
    import anthropic

STOP_REASONS = {
    "end_turn": "stop",
    "stop_sequence": "stop",
    "pause_turn": "stop",
    "max_tokens": "length",
    "model_context_window_exceeded": "length",
    "tool_use": "tool_calls",
    "refusal": "content_filter",
}

DEFAULT_MAX_TOKENS = 4096


def _image_block(p: ImagePart) -> dict[str, Any]:
    if p.data is not None:
        return {"type": "image", "source": {"type": "base64",
                                            "media_type": p.media_type or "image/png",
                                            "data": p.data}}
    url = p.url or ""
    if url.startswith("data:") and ";base64," in url:
        head, data = url[5:].split(";base64,", 1)
        return {"type": "image", "source": {"type": "base64", "media_type": head or "image/png",
                                            "data": data}}
    return {"type": "image", "source": {"type": "url", "url": url}}


def _arguments(text: str) -> Any:
    try:
        value = json.loads(text) if text else {}
    except (ValueError, RecursionError):
        return {"arguments": text}
    return value if isinstance(value, dict) else {"value": value}


def _blocks(m: Message) -> tuple[str, list[dict[str, Any]]]:
    if m.role == "system":
        # Outside the mid-conversation-system beta the API takes system text only up front:
        # the instruction stays where it was given, as a marked part of the user's turn.
        return "user", [{"type": "text", "text": f"<system>\n{m.text}\n</system>"}]
    if m.role == "tool":
        block: dict[str, Any] = {"type": "tool_result", "tool_use_id": m.tool_call_id or "",
                                 "content": m.text}
        if m.is_error:
            block["is_error"] = True
        return "user", [block]
    blocks: list[dict[str, Any]] = []
    for p in m.parts:
        if isinstance(p, TextPart):
            if p.text:
                blocks.append({"type": "text", "text": p.text})
        elif isinstance(p, ImagePart):
            blocks.append(_image_block(p))
    if m.role == "assistant":
        blocks.extend({"type": "tool_use", "id": c.id, "name": c.name,
                       "input": _arguments(c.arguments)} for c in m.tool_calls)
    return m.role, blocks


def messages_out(request: LLMRequest) -> list[dict[str, Any]]:
    """The Messages API turns; consecutive same-role turns (tool results) are merged."""
    out: list[dict[str, Any]] = []
    for m in request.messages:
        role, blocks = _blocks(m)
        if not blocks:
            continue
        if out and out[-1]["role"] == role:
            out[-1]["content"].extend(blocks)
        else:
            out.append({"role": role, "content": blocks})
    for turn in out:  # plain text turns as strings: the common, compact form
        content = turn["content"]
        if len(content) == 1 and content[0]["type"] == "text":
            turn["content"] = content[0]["text"]
    return out


def tool_choice_out(request: LLMRequest) -> dict[str, Any]:
    choice = request.tool_choice
    if choice.mode == "tool" and choice.name:
        return {"type": "tool", "name": choice.name}
    return {"type": {"required": "any", "none": "none"}.get(choice.mode, "auto")}


class AnthropicBackend:
    accepts_tools = True
    # The Messages API has no seed or penalties; its structured outputs take a JSON schema
    # (``output_config.format``) but have no schemaless JSON mode.
    honours = frozenset({"top_k", "response_format"})
    response_formats = frozenset({"json_schema"})

    def __init__(self, *, name: str, base_url: str, api_key: str, default_model: str,
                 timeout: float, options: dict[str, Any]) -> None:
        base = (base_url or "").rstrip("/")
        if base.endswith("/v1"):
            base = base[:-3]
        self.name = name
        self.base_url = base or None
        self.api_key = api_key
        self.default_model = default_model
        self.timeout = timeout
        self.options = options
        self.accepts_images = bool(options.get("images", True))
        self.extra_headers = provider_headers(options)
        self.default_max_tokens = int(options.get("max_tokens") or DEFAULT_MAX_TOKENS)
        self._clients: weakref.WeakKeyDictionary[Any, anthropic.AsyncAnthropic] = (
            weakref.WeakKeyDictionary())

    @classmethod
    def from_provider(cls, provider: Any) -> AnthropicBackend:
        return cls(**provider_settings(provider))

    def client(self) -> anthropic.AsyncAnthropic:
        import anthropic

        loop = asyncio.get_running_loop()
        client = self._clients.get(loop)
        if client is None:
            client = self._clients[loop] = anthropic.AsyncAnthropic(
                api_key=self.api_key or "no-key",  # explicit: never read the environment
                base_url=self.base_url,
                default_headers=self.extra_headers or None,
                max_retries=int(self.options.get("max_retries", 0)),
                timeout=self.timeout,
            )
        return client

    def count_tokens(self, request: LLMRequest) -> tuple[int, bool]:
        return estimate_request_tokens(request), True

    def params(self, request: LLMRequest) -> dict[str, Any]:
        params: dict[str, Any] = {
            "model": request.model or self.default_model,
            "messages": messages_out(request),
            "max_tokens": request.max_output_tokens or self.default_max_tokens,
            "stream": True,
        }
        if request.system:
            params["system"] = request.system
        if request.tools:
            params["tools"] = [{"name": t.name, "description": t.description,
                                "input_schema": t.parameters} for t in request.tools]
            params["tool_choice"] = tool_choice_out(request)
        # Sampling knobs are body fields the SDK no longer names (newer models fix them);
        # sent when asked for, unless the provider sets ``options.sampling: false``.
        sampling: dict[str, Any] = {}
        if self.options.get("sampling", True):
            if request.temperature is not None:
                sampling["temperature"] = min(1.0, request.temperature)
            if request.top_p is not None:
                sampling["top_p"] = request.top_p
        extra = {**sampling, **(self.options.get("extra_body") or {})}
        if extra:
            params["extra_body"] = extra
        if request.stop:
            params["stop_sequences"] = request.stop
        if request.user:
            params["metadata"] = {"user_id": request.user[:256]}
        extra = request.extra
        if extra.get("top_k") is not None:
            params.setdefault("extra_body", {})["top_k"] = extra["top_k"]
        if isinstance(extra.get("thinking"), dict):
            params.setdefault("extra_body", {})["thinking"] = extra["thinking"]
        if extra.get("service_tier") in ("auto", "standard_only"):
            params["service_tier"] = extra["service_tier"]
        if request.tools and extra.get("parallel_tool_calls") is False:
            params["tool_choice"] = {**params["tool_choice"], "disable_parallel_tool_use": True}
        fmt = extra.get("response_format")
        if isinstance(fmt, dict) and fmt.get("type") == "json_schema":
            params.setdefault("extra_body", {})["output_config"] = {"format": {
                "type": "json_schema", "schema": fmt["json_schema"].get("schema") or {}}}
        return params

    def _error(self, exc: BaseException) -> BackendError:
        import anthropic

        status = getattr(exc, "status_code", None)
        if isinstance(exc, anthropic.APIStatusError) and status is not None and status < 300:
            # An ``event: error`` inside a 200 stream: classify by the error type.
            body = getattr(exc, "body", None)
            kind = (body.get("error") or {}).get("type") if isinstance(body, dict) else None
            text = upstream_error_text(exc)
            if kind == "rate_limit_error":
                return BackendRateLimited(
                    f"Provider {self.name!r} is rate limiting requests: {text}")
            return BackendError(f"Provider {self.name!r} failed mid-reply ({kind}): {text}")
        try:
            import httpx2
        except ImportError:  # pragma: no cover - older SDKs use httpx
            httpx2 = None
        if httpx2 is not None and isinstance(exc, httpx2.TimeoutException):
            exc = anthropic.APITimeoutError(request=exc.request)  # type: ignore[arg-type]
        elif httpx2 is not None and isinstance(exc, httpx2.TransportError):
            return BackendError(f"Provider {self.name!r} is unreachable or closed the "
                                f"connection ({type(exc).__name__}).")
        return map_sdk_error(exc, provider=self.name, credential=self.api_key, sdk=anthropic)

    async def stream(self, request: LLMRequest, *,
                     on_sent: Callable[[], None] | None = None) -> AsyncIterator[Event]:
        params = self.params(request)
        if tracing.ENABLED:  # the upstream request carries its chat span's traceparent
            carrier: dict[str, str] = {}
            tracing.inject_headers(carrier)
            params["extra_headers"] = {**(params.get("extra_headers") or {}), **carrier}
        await load_sdk("anthropic")
        try:
            upstream = await self.client().messages.create(**params)
        except Exception as exc:
            raise self._error(exc) from None
        if on_sent is not None:  # the SDK tells no sooner than the response headers
            on_sent()
        tools: dict[int, int] = {}  # content block index -> tool call index
        input_tokens = output_tokens = 0
        seen_usage = False
        stop: str | None = None
        try:
            async for event in upstream:
                kind = event.type
                if kind == "content_block_delta":
                    delta = event.delta
                    if delta.type == "text_delta":
                        if delta.text:
                            yield TextDelta(delta.text)
                    elif delta.type == "input_json_delta":
                        index = tools.get(event.index)
                        if index is not None and delta.partial_json:
                            yield ToolCallDelta(index=index, arguments=delta.partial_json)
                    elif delta.type == "thinking_delta" and delta.thinking:
                        yield ReasoningDelta(delta.thinking)
                elif kind == "content_block_start":
                    block = event.content_block
                    if block.type == "tool_use":
                        tools[event.index] = index = len(tools)
                        yield ToolCallDelta(index=index, id=block.id, name=block.name)
                    elif block.type == "text" and block.text:
                        yield TextDelta(block.text)
                elif kind == "message_start":
                    usage = event.message.usage
                    input_tokens = (usage.input_tokens or 0) + (
                        getattr(usage, "cache_creation_input_tokens", None) or 0) + (
                        getattr(usage, "cache_read_input_tokens", None) or 0)
                    output_tokens = usage.output_tokens or 0
                    seen_usage = True
                elif kind == "message_delta":
                    if event.delta.stop_reason:
                        stop = STOP_REASONS.get(event.delta.stop_reason, "stop")
                    if event.usage is not None and event.usage.output_tokens is not None:
                        output_tokens = event.usage.output_tokens
                        seen_usage = True
                elif kind == "message_stop":
                    break
        except Exception as exc:
            raise self._error(exc) from None
        finally:
            await upstream.close()
        if stop is None:
            raise BackendError(f"Provider {self.name!r} ended its reply without a stop reason.")
        if seen_usage:
            yield Usage(input_tokens, output_tokens)
        yield Finish(stop)  # type: ignore[arg-type]
