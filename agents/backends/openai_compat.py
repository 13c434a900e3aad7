"""The ``openai`` provider kind: any OpenAI-compatible Chat Completions server (OpenAI, vLLM,
Ollama, llama.cpp's server, LM Studio, Lemonade), through the official SDK.

Provider fields: ``base_url`` (default ``https://api.openai.com/v1``), the credential
(``api_key_secret`` or ``api_key_env``), ``default_model``, ``timeout_seconds``.
Options (``Provider.options``):

* ``extra_headers``: headers sent with every request (e.g. ``{"OpenAI-Organization": ...}``);
* ``extra_body``: fields merged into every request body (server-specific knobs);
* ``max_tokens_param``: ``"max_tokens"`` (default, understood everywhere) or
  ``"max_completion_tokens"`` (OpenAI's reasoning models);
* ``images``: ``false`` for text-only models (requests with images are refused early);
* ``max_retries``: SDK retries of connection errors before any output (default 0).

Always streams, and always asks for ``stream_options.include_usage`` so usage comes from the
upstream. Closing the event iterator (or cancelling its task) closes the HTTP response.
"""

from __future__ import annotations

import asyncio
import email.utils
import importlib
import math
import sys
import time
import weakref
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Any

import httpx

from agents.exceptions import BackendError, BackendRateLimited, BackendTimeout
from agents.llm import (
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
    import openai

DEFAULT_BASE_URL = "https://api.openai.com/v1"


async def load_sdk(name: str) -> Any:
    """The SDK module, imported off the event loop the first time: ``openai`` takes ~0.8 s
    and ``anthropic`` ~2 s to import, which would stall every other stream on the server."""
    module = sys.modules.get(name)
    if module is None:
        module = await asyncio.to_thread(importlib.import_module, name)
    return module

FINISH_REASONS = {
    "stop": "stop",
    "length": "length",
    "tool_calls": "tool_calls",
    "function_call": "tool_calls",
    "content_filter": "content_filter",
}


def retry_after_seconds(headers: httpx.Headers | None) -> int | None:
    """Seconds from ``retry-after-ms`` / ``retry-after`` (seconds or an HTTP date)."""
    if headers is None:
        return None
    ms = headers.get("retry-after-ms")
    if ms:
        try:
            return max(1, math.ceil(float(ms) / 1000))
        except ValueError:
            pass
    value = headers.get("retry-after")
    if not value:
        return None
    try:
        return max(0, math.ceil(float(value)))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(0, math.ceil(when.timestamp() - time.time()))


def upstream_error_text(exc: Any, limit: int = 300) -> str:
    """The upstream's own error message (``error.message`` in its body), shortened."""
    body = getattr(exc, "body", None)
    message = None
    if isinstance(body, dict):
        inner = body.get("error", body)
        message = inner.get("message") if isinstance(inner, dict) else inner
    text = str(message or getattr(exc, "message", "") or exc)
    return text[:limit]


def map_upstream_error(exc: BaseException, *, provider: str, credential: str = "",
                       sdk: Any = None) -> BackendError:
    """One :class:`BackendError` for an SDK or transport exception; never leaks the key.

    ``sdk`` is the ``openai`` or ``anthropic`` module: their exception classes share names.
    """
    def scrub(text: str) -> str:
        return text.replace(credential, "***") if credential and len(credential) >= 4 else text

    if isinstance(exc, BackendError):
        return exc
    if sdk is None:
        sdk = importlib.import_module("openai")
    if isinstance(exc, sdk.APITimeoutError | httpx.TimeoutException):
        return BackendTimeout(f"Provider {provider!r} did not answer in time.")
    if isinstance(exc, sdk.APIStatusError):
        status = exc.status_code
        if status in (401, 403):
            return BackendError(
                f"Provider {provider!r} rejected Gaia's credentials (upstream HTTP {status}); "
                "an administrator must check the provider's API key.",
                code="upstream_auth_failed",
            )
        if status == 429:
            return BackendRateLimited(
                f"Provider {provider!r} is rate limiting requests: "
                f"{scrub(upstream_error_text(exc))}",
                retry_after=retry_after_seconds(exc.response.headers),
            )
        if status >= 500:
            return BackendError(
                f"Provider {provider!r} failed (upstream HTTP {status}): "
                f"{scrub(upstream_error_text(exc))}"
            )
        return BackendError(
            f"Provider {provider!r} refused the request (upstream HTTP {status}): "
            f"{scrub(upstream_error_text(exc))}"
        )
    if isinstance(exc, sdk.APIConnectionError | httpx.TransportError):
        return BackendError(
            f"Provider {provider!r} is unreachable or closed the connection "
            f"({type(exc.__cause__ or exc).__name__})."
        )
    if isinstance(exc, sdk.APIError):
        return BackendError(f"Provider {provider!r} failed: {scrub(upstream_error_text(exc))}")
    return BackendError(f"Provider {provider!r} failed ({type(exc).__name__}).")


def _message_out(m: Message) -> dict[str, Any]:
    if m.role == "tool":
        return {"role": "tool", "tool_call_id": m.tool_call_id or "", "content": m.text}
    if m.role == "assistant":
        out: dict[str, Any] = {"role": "assistant", "content": m.text or None}
        if m.tool_calls:
            out["tool_calls"] = [
                {"id": c.id, "type": "function",
                 "function": {"name": c.name, "arguments": c.arguments or "{}"}}
                for c in m.tool_calls
            ]
        elif out["content"] is None:
            out["content"] = ""
        return out
    if not m.has_images:
        return {"role": "user", "content": m.text}
    parts: list[dict[str, Any]] = []
    for p in m.parts:
        if isinstance(p, TextPart):
            parts.append({"type": "text", "text": p.text})
        elif isinstance(p, ImagePart):
            parts.append({"type": "image_url", "image_url": {"url": p.as_data_uri_or_url()}})
    return {"role": "user", "content": parts}


def chat_messages(request: LLMRequest) -> list[dict[str, Any]]:
    out = [{"role": "system", "content": request.system}] if request.system else []
    out.extend(_message_out(m) for m in request.messages)
    return out


def tool_choice_out(request: LLMRequest) -> Any:
    choice = request.tool_choice
    if choice.mode == "tool" and choice.name:
        return {"type": "function", "function": {"name": choice.name}}
    return choice.mode if choice.mode in ("auto", "none", "required") else "auto"


class OpenAIBackend:
    accepts_tools = True

    def __init__(
        self,
        *,
        name: str,
        base_url: str,
        api_key: str,
        default_model: str,
        timeout: float,
        options: dict[str, Any],
    ) -> None:
        self.name = name
        self.base_url = (base_url or DEFAULT_BASE_URL).rstrip("/")
        self.api_key = api_key
        self.default_model = default_model
        self.timeout = timeout
        self.options = options
        self.accepts_images = bool(options.get("images", True))
        self.extra_headers = {str(k): str(v) for k, v in
                              (options.get("extra_headers") or {}).items()}
        self.max_tokens_param = str(options.get("max_tokens_param") or "max_tokens")
        # One SDK client (connection pool) per event loop: pooled connections belong to one.
        self._clients: weakref.WeakKeyDictionary[Any, openai.AsyncOpenAI] = (
            weakref.WeakKeyDictionary())

    @classmethod
    def from_provider(cls, provider: Any) -> OpenAIBackend:
        from agents.backends import provider_credential

        return cls(
            name=provider.name,
            base_url=provider.base_url,
            api_key=provider_credential(provider),
            default_model=provider.default_model,
            timeout=float(provider.timeout_seconds),
            options=dict(provider.options or {}),
        )

    def client(self) -> openai.AsyncOpenAI:
        import openai

        loop = asyncio.get_running_loop()
        client = self._clients.get(loop)
        if client is None:
            client = self._clients[loop] = openai.AsyncOpenAI(
                base_url=self.base_url,
                # Keyless local servers (Ollama, llama.cpp) ignore the header; the SDK needs one.
                api_key=self.api_key or "no-key",
                default_headers=self.extra_headers or None,
                max_retries=int(self.options.get("max_retries", 0)),
                timeout=httpx.Timeout(self.timeout, connect=min(self.timeout, 10.0)),
            )
        return client

    def count_tokens(self, request: LLMRequest) -> tuple[int, bool]:
        return estimate_request_tokens(request), True

    def params(self, request: LLMRequest) -> dict[str, Any]:
        params: dict[str, Any] = {
            "model": request.model or self.default_model,
            "messages": chat_messages(request),
            "stream": True,
            "stream_options": {"include_usage": True},
        }
        if request.tools:
            params["tools"] = [
                {"type": "function", "function": {
                    "name": t.name, "description": t.description, "parameters": t.parameters}}
                for t in request.tools
            ]
            params["tool_choice"] = tool_choice_out(request)
        if request.max_output_tokens:
            params[self.max_tokens_param] = request.max_output_tokens
        if request.temperature is not None:
            params["temperature"] = request.temperature
        if request.top_p is not None:
            params["top_p"] = request.top_p
        if request.stop:
            params["stop"] = request.stop[:4]
        if request.user:
            params["user"] = request.user
        return params

    def _error(self, exc: BaseException) -> BackendError:
        return map_upstream_error(exc, provider=self.name, credential=self.api_key)

    async def stream(self, request: LLMRequest) -> AsyncIterator[Event]:
        params = self.params(request)
        extra_body = self.options.get("extra_body") or None
        await load_sdk("openai")
        try:
            upstream = await self.client().chat.completions.create(
                **params, extra_body=extra_body)
        except Exception as exc:
            raise self._error(exc) from None
        finish: str | None = None
        usage: Usage | None = None
        try:
            async for chunk in upstream:
                if chunk.usage is not None:
                    u = chunk.usage
                    usage = Usage(int(u.prompt_tokens or 0), int(u.completion_tokens or 0))
                for choice in chunk.choices:
                    delta = choice.delta
                    if delta is not None:
                        extra = delta.model_extra or {}
                        reasoning = extra.get("reasoning_content") or extra.get("reasoning")
                        if isinstance(reasoning, str) and reasoning:
                            yield ReasoningDelta(reasoning)
                        if delta.content:
                            yield TextDelta(delta.content)
                        for call in delta.tool_calls or ():
                            fn = call.function
                            yield ToolCallDelta(
                                index=call.index,
                                id=call.id or None,
                                name=(fn.name if fn else None) or None,
                                arguments=(fn.arguments if fn else None) or "",
                            )
                    if choice.finish_reason:
                        finish = FINISH_REASONS.get(choice.finish_reason, "stop")
        except Exception as exc:
            raise self._error(exc) from None
        finally:
            await upstream.close()
        if finish is None:
            raise BackendError(
                f"Provider {self.name!r} ended its reply without a finish reason.")
        if usage is not None:
            yield usage
        yield Finish(finish)  # type: ignore[arg-type]
