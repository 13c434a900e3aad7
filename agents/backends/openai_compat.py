"""The ``openai`` provider kind: any OpenAI-compatible Chat Completions server (OpenAI, vLLM,
Ollama, llama.cpp's server, LM Studio, Lemonade), streamed over aiohttp.

Provider fields: ``base_url`` (default ``https://api.openai.com/v1``), the credential
(``api_key_secret`` or ``api_key_env``), ``default_model``, ``timeout_seconds``.
Options (``Provider.options``):

* ``extra_headers``: headers sent with every request (e.g. ``{"OpenAI-Organization": ...}``);
* ``extra_body``: fields merged into every request body (server-specific knobs);
* ``max_tokens_param``: ``"max_tokens"`` (default, understood everywhere) or
  ``"max_completion_tokens"`` (OpenAI's reasoning models);
* ``images``: ``false`` for text-only models (requests with images are refused early);
* ``max_retries``: retries of a failed connection attempt (default 0);
* ``completions``: ``true`` when the upstream serves ``/v1/completions`` (vLLM, llama.cpp's
  server, Ollama, OpenAI's instruct models): a text completion (``/v1/completions``, with
  ``suffix``) is forwarded there; else the chat model is asked to continue the text
  (:mod:`agents.backends.completion`);
* ``embedding_model``: the upstream's embedding model, which ``/v1/embeddings`` of an agent
  on this provider passes through to (none: the agent does not embed).

Always streams, and always asks for ``stream_options.include_usage`` so usage comes from the
upstream. Closing the event iterator (or cancelling its task) closes the HTTP response.

Why aiohttp and not the ``openai`` SDK or httpx: time to first token is the figure a chat
user feels, and Gaia's whole budget for it is 5 ms (``scripts/perf/upstream.py``). Against
the same loopback upstream, the SDK (httpx underneath, a pydantic object per chunk) added
1-2 ms per request over a bare httpx client, and httpx itself ~0.7 ms over aiohttp (its
pure-Python HTTP/1.1 machinery, where aiohttp parses in C). The protocol used here is a few
fields of JSON per chunk, so the client is a plain aiohttp POST and a ten-line SSE reader.
"""

from __future__ import annotations

import asyncio
import json
import urllib.parse
import urllib.request
import weakref
from collections.abc import AsyncIterator, Callable
from typing import Any

import aiohttp

from agents.backends import provider_headers, provider_settings
from agents.backends.completion import completion_of, completion_params, sampling_params
from agents.backends.upstream import error_message, status_error, transport_error
from agents.infra import tracing
from agents.kernel.exceptions import BackendError
from agents.kernel.llm import (
    Event,
    Finish,
    ImagePart,
    LLMRequest,
    Message,
    ReasoningDelta,
    TextDelta,
    TextPart,
    TokenLogprob,
    ToolCallDelta,
    Usage,
    estimate_request_tokens,
)

DEFAULT_BASE_URL = "https://api.openai.com/v1"
MAX_ERROR_BODY = 64 * 1024
READ_BUFFER = 1 << 20  # a stream line (one chunk) may be up to twice this
# A chunk's JSON: what json.loads does with a str, called directly. json.loads of bytes first
# sniffs the encoding (UTF-16/32 byte order marks) in Python: five calls more for every token
# of every reply; an event stream is UTF-8 (the SSE specification).
_json_decode = json.JSONDecoder().decode

FINISH_REASONS = {
    "stop": "stop",
    "length": "length",
    "tool_calls": "tool_calls",
    "function_call": "tool_calls",
    "content_filter": "content_filter",
}

def _message_out(m: Message) -> dict[str, Any]:
    if m.role == "system":  # Chat Completions takes system messages anywhere
        return {"role": "system", "content": m.text}
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
    # Sent as Chat Completions fields (top_k too: vLLM, llama.cpp and Ollama take it; a server
    # that does not answers with its own error). Log probabilities come back with the text.
    honours = frozenset({"response_format", "seed", "top_k", "frequency_penalty",
                         "presence_penalty", "logprobs", "top_logprobs"})

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
        self.headers = {
            # Keyless local servers (Ollama, llama.cpp) ignore the header.
            **({"Authorization": f"Bearer {api_key}"} if api_key else {}),
            "Accept": "text/event-stream",
            **provider_headers(options),
        }
        self.max_tokens_param = str(options.get("max_tokens_param") or "max_tokens")
        self.completes = bool(options.get("completions"))
        self.embedding_model = str(options.get("embedding_model") or "")
        self.proxy = proxy_for(self.base_url)
        # One client (connection pool) per event loop: pooled connections belong to one.
        self._sessions: weakref.WeakKeyDictionary[Any, tuple[aiohttp.ClientSession, Any]] = (
            weakref.WeakKeyDictionary())

    @classmethod
    def from_provider(cls, provider: Any) -> OpenAIBackend:
        return cls(**provider_settings(provider))

    async def session(self) -> aiohttp.ClientSession:
        loop = asyncio.get_running_loop()
        held = self._sessions.get(loop)
        if held is None or held[0].closed:
            trace = aiohttp.TraceConfig()
            trace.on_request_chunk_sent.append(_request_sent)
            if tracing.ENABLED:  # the upstream request carries its chat span's traceparent
                trace.on_request_start.append(tracing.aiohttp_request_start)
            session = aiohttp.ClientSession(
                headers=self.headers,
                timeout=aiohttp.ClientTimeout(total=None, sock_connect=min(self.timeout, 10.0),
                                              sock_read=self.timeout),
                connector=aiohttp.TCPConnector(limit=0),  # the provider's limit applies
                read_bufsize=READ_BUFFER,
                trace_configs=[trace],
            )
            held = self._sessions[loop] = (session, await _closed_with_loop(session))
        return held[0]

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
        params.update(sampling_params(request, max_tokens_param=self.max_tokens_param, extra=(
            "response_format", "seed", "top_k", "frequency_penalty", "presence_penalty",
            "logprobs", "top_logprobs", "reasoning_effort", "service_tier")))
        extra = request.extra
        if request.tools and extra.get("parallel_tool_calls") is not None:
            params["parallel_tool_calls"] = extra["parallel_tool_calls"]
        return {**params, **(self.options.get("extra_body") or {})}

    async def _refusal(self, response: aiohttp.ClientResponse) -> BackendError:
        """The error for a non-2xx answer, from its (bounded) body."""
        raw = await response.content.read(MAX_ERROR_BODY)
        try:
            body: Any = json.loads(raw)
        except ValueError:
            body = raw.decode("utf-8", "replace").strip()
        return status_error(response.status, provider=self.name, credential=self.api_key,
                            message=error_message(body, response.reason or ""),
                            headers=response.headers)

    async def _post(self, request: LLMRequest, on_sent: Callable[[], None] | None
                    ) -> aiohttp.ClientResponse:
        """POST the request, retrying a failed connection ``max_retries`` times."""
        session = await self.session()
        completion = completion_of(request) if self.completes else None
        url, body = (f"{self.base_url}/chat/completions", self.params(request)) \
            if completion is None else (f"{self.base_url}/completions", {
                **completion_params(request.replace(
                    model=request.model or self.default_model), completion),
                **(self.options.get("extra_body") or {})})
        for attempt in range(max(0, int(self.options.get("max_retries", 0)))):
            try:
                return await session.post(url, json=body, proxy=self.proxy,
                                          trace_request_ctx={"on_sent": on_sent})
            except aiohttp.ClientConnectorError:
                await asyncio.sleep(min(0.25 * 2**attempt, 4.0))
        return await session.post(url, json=body, proxy=self.proxy,
                                  trace_request_ctx={"on_sent": on_sent})

    async def embed(self, inputs: list[str], *, dimensions: int | None
                    ) -> tuple[list[list[float]], int]:
        """``(vectors, prompt_tokens)`` from the upstream's ``/v1/embeddings`` (the model:
        ``options.embedding_model``, see :func:`agents.backends.provider_embedding_model`)."""
        body: dict[str, Any] = {"model": self.embedding_model, "input": inputs,
                                "encoding_format": "float"}
        if dimensions is not None:
            body["dimensions"] = dimensions
        try:
            session = await self.session()
            async with session.post(f"{self.base_url}/embeddings", json=body, proxy=self.proxy,
                                    headers={"Accept": "application/json"}) as response:
                if response.status >= 300:
                    raise await self._refusal(response)
                payload = await response.json(content_type=None)
        except BackendError:
            raise
        except (aiohttp.ClientError, TimeoutError) as exc:
            raise transport_error(exc, provider=self.name) from None
        except ValueError:
            raise BackendError(f"Provider {self.name!r} sent malformed embeddings.") from None
        return embeddings_in(payload, len(inputs), provider=self.name)

    async def stream(self, request: LLMRequest, *,
                     on_sent: Callable[[], None] | None = None) -> AsyncIterator[Event]:
        finish: str | None = None
        usage: Usage | None = None
        try:
            async with await self._post(request, on_sent) as response:
                if response.status >= 300:
                    raise await self._refusal(response)
                if response.content_type != "text/event-stream":
                    raise BackendError(
                        f"Provider {self.name!r} answered with {response.content_type} instead "
                        "of an event stream; is its base URL an OpenAI-compatible /v1?")
                async for data in sse_data(response):
                    if data == b"[DONE]":
                        continue  # read on to the end, so the connection goes back to the pool
                    chunk = _json_decode(data.decode())
                    if not isinstance(chunk, dict):
                        continue
                    if chunk.get("error") is not None:
                        raise BackendError(f"Provider {self.name!r} failed: "
                                           f"{error_message(chunk, 'error event')}")
                    u = chunk.get("usage")
                    if u:
                        usage = Usage(int(u.get("prompt_tokens") or 0),
                                      int(u.get("completion_tokens") or 0))
                    for choice in chunk.get("choices") or ():
                        delta = choice.get("delta")
                        if isinstance(choice.get("text"), str):  # a text_completion chunk
                            delta = {"content": choice["text"]}
                        if delta:
                            for event in delta_events(delta, choice.get("logprobs")):
                                yield event
                        if choice.get("finish_reason"):
                            finish = FINISH_REASONS.get(choice["finish_reason"], "stop")
        except BackendError:
            raise
        except (aiohttp.ClientError, TimeoutError) as exc:
            raise transport_error(exc, provider=self.name) from None
        except ValueError:
            raise BackendError(f"Provider {self.name!r} sent a malformed stream chunk."
                               ) from None
        if finish is None:
            raise BackendError(
                f"Provider {self.name!r} ended its reply without a finish reason.")
        if usage is not None:
            yield usage
        yield Finish(finish)  # type: ignore[arg-type]


def proxy_for(url: str) -> str | None:
    """The proxy for ``url`` from ``HTTPS_PROXY``/``HTTP_PROXY``/``NO_PROXY``, as the SDKs
    honour them. Resolved once per provider: aiohttp's ``trust_env`` re-reads the environment
    and ``~/.netrc`` on every request (measured: ~1.4 ms of each time to first token)."""
    parts = urllib.parse.urlsplit(url)
    if urllib.request.proxy_bypass_environment(parts.hostname or ""):
        return None
    return urllib.request.getproxies_environment().get(parts.scheme) or None


async def _closed_with_loop(session: aiohttp.ClientSession) -> AsyncIterator[None]:
    """A started async generator that closes ``session`` when it is closed: an event loop
    closes every live one as it shuts down (``asyncio.run``, uvicorn, pytest-asyncio), so
    the pooled connections are closed cleanly instead of being garbage-collected open."""
    async def keeper() -> AsyncIterator[None]:
        try:
            yield
        finally:
            await session.close()

    generator = keeper()
    await anext(generator)  # registers it with the running loop, parked at the ``yield``
    return generator


async def _request_sent(session: Any, context: Any, params: Any) -> None:
    on_sent = (context.trace_request_ctx or {}).pop("on_sent", None)
    if on_sent is not None:
        on_sent()


async def sse_data(response: aiohttp.ClientResponse) -> AsyncIterator[bytes]:
    """The ``data`` of each server-sent event (other fields are of no use here).

    Reads whatever has arrived and splits it into lines here, rather than awaiting one
    ``readline`` per line: a fast upstream's whole reply often comes in one or two reads, and
    two awaits per token were a measurable part of a turn (scripts/perf/chat.py). A line
    longer than twice ``READ_BUFFER`` is refused, as ``readline`` refused it."""
    data: list[bytes] = []
    pending = b""
    async for chunk in response.content.iter_any():
        lines = (pending + chunk).split(b"\n") if pending else chunk.split(b"\n")
        pending = lines.pop()
        if len(pending) > 2 * READ_BUFFER:
            raise ValueError("Line is too long")
        for raw in lines:
            line = raw.rstrip(b"\r")
            if not line:
                if data:
                    yield b"\n".join(data)
                    data = []
            elif line.startswith(b"data:"):
                data.append(line[6:] if line[5:6] == b" " else line[5:])
    line = pending.rstrip(b"\r")
    if line.startswith(b"data:"):
        data.append(line[6:] if line[5:6] == b" " else line[5:])
    if data:
        yield b"\n".join(data)


def logprobs_in(value: Any) -> tuple[TokenLogprob, ...]:
    """A chunk's ``logprobs.content`` as canonical token log probabilities (entries that are
    not well formed are skipped)."""
    out: list[TokenLogprob] = []
    for entry in (value or {}).get("content") or () if isinstance(value, dict) else ():
        token = _token_logprob(entry)
        if token is not None:
            top = tuple(t for t in map(_token_logprob, entry.get("top_logprobs") or ())
                        if t is not None)
            out.append(TokenLogprob(token.raw, token.logprob, top))
    return tuple(out)


def _token_logprob(entry: Any) -> TokenLogprob | None:
    if not isinstance(entry, dict) or not isinstance(entry.get("token"), str) or not isinstance(
            entry.get("logprob"), int | float):
        return None
    raw = entry.get("bytes")
    data = bytes(raw) if isinstance(raw, list) and all(
        isinstance(b, int) and 0 <= b < 256 for b in raw) else entry["token"].encode()
    return TokenLogprob(data, float(entry["logprob"]))


def delta_events(delta: dict[str, Any], logprobs: Any = None) -> list[Event]:
    """The canonical events of one chunk's ``delta`` (and its choice's ``logprobs``)."""
    events: list[Event] = []
    # Servers running reasoning models stream the thinking under one of these names.
    reasoning = delta.get("reasoning_content") or delta.get("reasoning")
    if isinstance(reasoning, str) and reasoning:
        events.append(ReasoningDelta(reasoning))
    content = delta.get("content")
    if isinstance(content, str) and content:
        events.append(TextDelta(content, logprobs_in(logprobs) if logprobs else ()))
    for call in delta.get("tool_calls") or ():
        fn = call.get("function") or {}
        events.append(ToolCallDelta(
            index=int(call.get("index") or 0),
            id=call.get("id") or None,
            name=fn.get("name") or None,
            arguments=fn.get("arguments") or "",
        ))
    return events


def embeddings_in(payload: Any, count: int, *, provider: str) -> tuple[list[list[float]], int]:
    """An upstream's embeddings answer as ``(vectors in input order, prompt_tokens)``; a
    502 when it is not ``count`` vectors of numbers."""
    data = payload.get("data") if isinstance(payload, dict) else None
    vectors: list[list[float] | None] = [None] * count
    for i, item in enumerate(data if isinstance(data, list) else ()):
        index = item.get("index", i) if isinstance(item, dict) else None
        vector = item.get("embedding") if isinstance(item, dict) else None
        if (isinstance(index, int) and 0 <= index < count and isinstance(vector, list)
                and all(isinstance(x, int | float) for x in vector)):
            vectors[index] = [float(x) for x in vector]
    if any(v is None for v in vectors):
        raise BackendError(f"Provider {provider!r} did not answer one embedding per input.")
    usage = payload.get("usage") if isinstance(payload, dict) else None
    tokens = usage.get("prompt_tokens") if isinstance(usage, dict) else None
    return vectors, int(tokens) if isinstance(tokens, int) else 0  # type: ignore[return-value]
