"""Backend construction: one shared backend object per provider configuration per process.

A provider edited in the admin gets a fresh backend on the next request (the cache key holds
``updated_at``), so no restart is needed.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import importlib
import logging
import os
import time
from collections.abc import AsyncIterator, Callable
from typing import TYPE_CHECKING, Any

from agents.backends.completion import completion_as_chat
from agents.backends.upstream import Redactor
from agents.infra import metrics, tracing
from agents.kernel.exceptions import BackendError, BackendOverloaded, GaiaError
from agents.kernel.llm import (
    Backend,
    Event,
    Finish,
    LLMRequest,
    ReasoningDelta,
    TextDelta,
    ToolCallDelta,
    Usage,
)

log = logging.getLogger("gaia.backends")

# The most tokens one reply may count (a database integer column holds 2**31 - 1).
MAX_USAGE_TOKENS = 2**31 - 1


def usage_clamped(usage: Usage) -> Usage:
    """``usage`` with each count within ``0..MAX_USAGE_TOKENS`` (providers have sent
    negative and absurd counts; the database refuses them and the reply would be lost)."""
    def clamp(n: object) -> int:
        try:
            return min(max(int(n), 0), MAX_USAGE_TOKENS)  # type: ignore[call-overload]
        except (TypeError, ValueError, OverflowError):
            return 0

    i, o = clamp(usage.input_tokens), clamp(usage.output_tokens)
    if (i, o) == (usage.input_tokens, usage.output_tokens):
        return usage
    return Usage(i, o, usage.estimated)

if TYPE_CHECKING:
    from agents.models import Provider

ENV_PREFIX = "env:"  # an extra header value naming an environment variable
_backends: dict[tuple[int, str], Backend] = {}
_limits: dict[int, tuple[int, asyncio.Semaphore]] = {}


def provider_headers(options: dict[str, Any]) -> dict[str, str]:
    """``options["extra_headers"]`` as sent: a value ``env:NAME`` is read from the environment
    variable ``NAME`` (keeps a credential out of the database and of exports)."""
    out = {}
    for name, value in (options.get("extra_headers") or {}).items():
        value = str(value)
        if value.startswith(ENV_PREFIX):
            value = os.environ.get(value[len(ENV_PREFIX):], "")
        out[str(name)] = value
    return out


def provider_secrets(provider: Provider) -> list[str]:
    """Every secret value a request to ``provider`` carries: its credential and each
    ``extra_headers`` value (as sent), what :class:`~agents.backends.upstream.Redactor`
    takes out of whatever the provider answers."""
    return [provider_credential(provider),
            *provider_headers(dict(provider.options or {})).values()]


def provider_credential(provider: Provider) -> str:
    """The provider's secret: the write-only field, else the named environment variable."""
    if provider.api_key_secret:
        return provider.api_key_secret
    if provider.api_key_env:
        return os.environ.get(provider.api_key_env, "")
    return ""


def provider_settings(provider: Provider) -> dict[str, Any]:
    """What a backend that calls a remote provider is made of (its constructor's keywords):
    the provider's name, ``base_url``, credential, default model, timeout and a copy of its
    options."""
    return {"name": provider.name, "base_url": provider.base_url,
            "api_key": provider_credential(provider), "default_model": provider.default_model,
            "timeout": float(provider.timeout_seconds), "options": dict(provider.options or {})}


# Imported on first use of each kind: the SDKs behind some kinds take seconds to import, and
# a server whose agents never use them should not pay for it (or stall its first request).
BACKEND_CLASSES = {
    "fake": "agents.backends.fake:FakeBackend",
    "openai": "agents.backends.openai_compat:OpenAIBackend",
    "anthropic": "agents.backends.anthropic_backend:AnthropicBackend",
    "local": "agents.backends.local:LocalBackend",
}


def provider_embedding_model(provider: Provider) -> str | None:
    """The embedding model ``/v1/embeddings`` of an agent on ``provider`` uses, read from its
    configuration (no backend is built): the ``local`` kind's package-shipped one
    (:mod:`agents.backends.local_raw`), an ``openai`` provider's ``options.embedding_model``;
    ``None``: it does not embed."""
    if provider.kind == "local":
        from agents.backends.local_raw import EMBEDDING_MODEL

        return EMBEDDING_MODEL
    if provider.kind == "openai":
        return str((provider.options or {}).get("embedding_model") or "") or None
    return None


def _factory(kind: str) -> Callable[[Provider], Backend] | None:
    target = BACKEND_CLASSES.get(kind)
    if target is None:
        return None
    module_name, _, class_name = target.partition(":")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise BackendError(f"Provider kind {kind!r} is not available here ({exc}).") from exc
    return getattr(module, class_name).from_provider


def backends_preload(kinds: Any) -> list[str]:
    """Import the backend of each of these provider kinds (those in use), and so its HTTP
    library: aiohttp loads the default TLS certificates when it is imported (about 1.2 s),
    which a process's first call to an OpenAI-kind provider did on the event loop, every
    client waiting. The server runs this on a thread before it serves (gaia_site.lifespan);
    a kind first used later is imported on first use. The kinds imported."""
    loaded = []
    for kind in sorted(set(kinds)):
        try:
            if _factory(kind) is not None:
                loaded.append(kind)
        except BackendError:
            continue  # said again on first use, where a turn reports it
    return loaded


def backend_for(provider: Provider) -> Backend:
    key = (provider.pk, provider.updated_at.isoformat() if provider.updated_at else "")
    backend = _backends.get(key)
    if backend is None:
        factory = _factory(provider.kind)
        if factory is None:
            raise BackendError(f"Provider kind {provider.kind!r} is not available here.")
        for stale in [k for k in _backends if k[0] == provider.pk]:
            _backends.pop(stale)
        backend = _backends[key] = factory(provider)
    return backend


def _semaphore(provider: Provider) -> asyncio.Semaphore:
    limit = max(1, provider.max_concurrency)
    held = _limits.get(provider.pk)
    if held is None or held[0] != limit:
        held = _limits[provider.pk] = (limit, asyncio.Semaphore(limit))
    return held[1]


@contextlib.asynccontextmanager
async def provider_semaphore(provider: Provider) -> AsyncIterator[None]:
    """Hold one of the provider's ``max_concurrency`` slots (a caller bounds the wait)."""
    semaphore = _semaphore(provider)
    await semaphore.acquire()
    try:
        yield
    finally:
        semaphore.release()


async def backend_stream(
    provider: Provider, request: LLMRequest, *, queue_timeout: float | None = None,
    on_sent: Callable[[], None] | None = None,
) -> AsyncIterator[Event]:
    """Stream ``request`` from the provider within its concurrency limit and timeouts.

    Waits for a free slot (at most the provider timeout), then applies the timeout to the
    first event and to every gap between events: a stalled upstream becomes a
    :class:`BackendTimeout` instead of a hung client. Closing the iterator closes the backend.
    """
    from agents.kernel.exceptions import BackendTimeout

    backend = backend_for(provider)
    if not getattr(backend, "completes", False):  # /v1/completions asked of a chat model
        request = completion_as_chat(request)
    timeout = provider.timeout_seconds
    semaphore = _semaphore(provider)
    try:
        async with asyncio.timeout(queue_timeout if queue_timeout is not None else timeout):
            await semaphore.acquire()
    except TimeoutError:
        raise BackendOverloaded(
            f"Provider {provider.name!r} is at its concurrency limit; try again shortly.",
            retry_after=1,
        ) from None
    stream = backend.stream(request, on_sent=on_sent)
    gaps: _GapWatch | None = None
    redactor = Redactor(provider_secrets(provider))
    redacting = bool(redactor)  # asked once, not per event
    try:
        async with asyncio.timeout(None) as deadline:
            gaps = _GapWatch(deadline, timeout)
            while True:
                gaps.wait()
                try:
                    event = await anext(stream)
                except StopAsyncIteration:
                    for kind, text in redactor.flush():
                        yield kind(text)
                    return
                except GaiaError as exc:
                    if redacting:
                        for kind, text in redactor.flush():
                            yield kind(text)
                        exc.message = redactor.text(exc.message)
                        exc.args = (exc.message,)
                    raise
                except (TimeoutError, asyncio.CancelledError):
                    raise
                except Exception as exc:
                    # A reply of a shape no backend expected (a choice that is a string,
                    # usage that is a list, a line over the read buffer): the provider's
                    # fault, a 502.
                    log.warning("provider %s sent a reply that could not be read: %r",
                                provider.name, exc)
                    raise BackendError(
                        f"Provider {provider.name!r} sent a reply Gaia could not read "
                        f"({type(exc).__name__}).") from None
                gaps.waiting = False
                if isinstance(event, Usage):
                    event = usage_clamped(event)
                elif redacting:
                    if isinstance(event, TextDelta | ReasoningDelta):
                        text = redactor.feed(type(event), event.text)
                        if text:
                            yield type(event)(text)
                        continue
                    for kind, text in redactor.flush():
                        yield kind(text)
                    if isinstance(event, ToolCallDelta) and event.arguments:
                        event = dataclasses.replace(
                            event, arguments=redactor.text(event.arguments))
                yield event
    except TimeoutError:
        raise BackendTimeout(
            f"Provider {provider.name!r} did not answer within {timeout:g} s.") from None
    finally:
        if gaps is not None:
            gaps.stop()
        semaphore.release()
        await _aclose(stream)


class _GapWatch:
    """The provider timeout on the first event and on every gap between two events, counted
    only while the stream is waited for (not while its reader handles an event), for a stream
    read by one task.

    One timer per ``timeout`` seconds of streaming rather than an ``asyncio.timeout`` per
    event: arming and cancelling a timer for every token was about 4 % of a chat turn's CPU
    (py-spy, scripts/perf/chat.py). When the timer finds the stream waited for longer than
    ``timeout`` it expires ``deadline`` (an ``asyncio.timeout`` around the reading), which
    cancels the wait and raises ``TimeoutError`` there, as a per-event timeout would."""

    def __init__(self, deadline: asyncio.Timeout, timeout: float) -> None:
        self.loop = asyncio.get_running_loop()
        self.deadline, self.timeout = deadline, timeout
        self.waiting = False  # the reader is waiting for the stream's next event
        self.since = self.loop.time()  # since when
        self.timer = self.loop.call_at(self.since + timeout, self._check)

    def wait(self) -> None:
        self.waiting = True
        self.since = self.loop.time()

    def _check(self) -> None:
        now = self.loop.time()
        if self.waiting and now - self.since >= self.timeout:
            self.deadline.reschedule(now)  # expires: the wait is cancelled, TimeoutError
            return
        # Not waiting (the reader has the last event), or waiting for less than the timeout.
        self.timer = self.loop.call_at(
            (self.since if self.waiting else now) + self.timeout, self._check)

    def stop(self) -> None:
        self.timer.cancel()


async def _aclose(stream: Any) -> None:
    aclose = getattr(stream, "aclose", None)
    if aclose is not None:
        await aclose()


def can_fall_back(exc: BaseException) -> bool:
    """Whether a failure before the first token lets the next provider try: connection
    errors, 5xx, 429, timeouts and a full concurrency limit do; a refused request (4xx) or
    rejected credentials do not (another provider would be asked the same thing wrongly, or
    the admin must act)."""
    return isinstance(exc, BackendError) and exc.code not in (
        "upstream_auth_failed", "upstream_refused")


async def fallback_stream(
    providers: list[Provider], request: LLMRequest, *,
    on_sent: Callable[[], None] | None = None,
    on_answer: Callable[[Provider], None] | None = None,
    on_fallback: Callable[[Provider, Provider, BackendError], None] | None = None,
    on_done: Callable[[float], None] | None = None,
) -> AsyncIterator[Event]:
    """:func:`backend_stream` over ``providers`` in order: a provider that fails before its
    first event (:func:`can_fall_back`) hands the request to the next one, whose default
    model replaces the request's model. ``on_answer`` names the provider whose first event
    arrived; after it, errors propagate as they are (the caller reports them in-band).
    ``on_fallback(failed, next, error)`` is called for every hand-over. The last provider's
    error propagates. ``on_done(seconds)`` is told how long the providers' streams were
    open, whatever the outcome (Gaia's overhead is a request's time less that)."""
    t0 = time.perf_counter()
    try:
        for i, provider in enumerate(providers):
            attempt = request if i == 0 else request.replace(
                model=provider.default_model or request.model)
            stream = backend_stream(provider, attempt, on_sent=on_sent)
            started = False
            span = tracing.chat_span(provider, attempt.model, attempt) if tracing.ENABLED else None
            usage: Usage | None = None
            finish, failure = "", None
            try:
                async for event in stream:
                    if span is not None:
                        if isinstance(event, Usage):
                            usage = event
                        elif isinstance(event, Finish):
                            finish = str(event.reason)
                    if not started:
                        started = True
                        if on_answer is not None:
                            on_answer(provider)
                    yield event
                return
            except BackendError as exc:
                failure = exc
                metrics.upstream_error(provider.name, exc.kind)
                if started or i == len(providers) - 1 or not can_fall_back(exc):
                    raise
                if on_fallback is not None:
                    on_fallback(provider, providers[i + 1], exc)
            finally:
                await _aclose(stream)
                if span is not None:
                    span.end(usage=usage, model=attempt.model, finish=finish, error=failure)
    finally:
        if on_done is not None:
            on_done(time.perf_counter() - t0)


PROBE_PROMPT = "Reply with the word OK."


async def backend_probe(provider: Provider, *, model: str | None = None) -> dict[str, Any]:
    """The console's "test connection": one short request (a few output tokens) to the
    provider's default model, through :func:`backend_stream` as a turn's would go. Says
    whether it answered, how fast, and what went wrong in the words a turn would report
    (never a credential: a provider error's message is the one clients see)."""
    from agents.kernel.llm import Message, TextDelta, TextPart

    request = LLMRequest(model=model or provider.default_model, system="",
                         messages=[Message(role="user", parts=(TextPart(PROBE_PROMPT),))],
                         max_output_tokens=8)
    started = time.perf_counter()
    first: float | None = None
    text = []
    try:
        async for event in backend_stream(provider, request):
            if isinstance(event, TextDelta):
                first = first if first is not None else time.perf_counter()
                text.append(event.text)
    except GaiaError as exc:
        return {"ok": False, "error": exc.message, "kind": exc.kind,
                "elapsed_ms": round((time.perf_counter() - started) * 1000)}
    except Exception as exc:  # a backend that broke in a way no turn expected
        log.warning("provider %s probe failed: %r", provider.name, exc)
        return {"ok": False, "error": f"The provider could not be reached ({type(exc).__name__}).",
                "kind": "backend_error",
                "elapsed_ms": round((time.perf_counter() - started) * 1000)}
    done = time.perf_counter()
    return {"ok": True, "model": request.model or None, "reply": "".join(text)[:200],
            "ttft_ms": round(((first or done) - started) * 1000),
            "elapsed_ms": round((done - started) * 1000)}
