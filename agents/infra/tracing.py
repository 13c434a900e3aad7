"""OpenTelemetry traces and GenAI metrics, by the GenAI semantic conventions (the latest
experimental ones, ``OTEL_SEMCONV_STABILITY_OPT_IN=gen_ai_latest_experimental``).

On when ``OTEL_EXPORTER_OTLP_ENDPOINT`` (or ``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT``) is set,
with the SDK's own reading of the standard ``OTEL_*`` variables (service name, headers,
batch delays, sampler); spans and metrics leave over OTLP/HTTP. Off otherwise: every function
here returns after one test of :data:`ENABLED`, and the SDK is never imported.

The span tree of a turn::

    invoke_agent <agent>          SERVER (the root; INTERNAL when delegated)
      chat <model>                CLIENT, one per upstream call (its traceparent goes upstream)
      execute_tool <tool>         INTERNAL, one per server-side tool call
        tools/call <tool>         CLIENT, an MCP server's tool (traceparent in params._meta)
        invoke_agent <agent>      a delegation: the called agent's turn

A client's W3C ``traceparent`` (``openai_api.middleware``) is the parent of its turn's span; a
malformed one is ignored, as the W3C propagator does. A request that runs no turn gets a server
span of its own, so that every access line names one. Message content is recorded only with
``OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT=true``.

Configured once per process, on first use, and again after a fork (a Celery pool's children:
the exporter's thread does not survive one).
"""

from __future__ import annotations

import json
import logging
import os
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any
from urllib.parse import urlsplit

ENABLED = bool(os.environ.get("OTEL_EXPORTER_OTLP_ENDPOINT")
               or os.environ.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")) and (
    os.environ.get("OTEL_SDK_DISABLED", "").lower() != "true")
CAPTURE_CONTENT = os.environ.get(
    "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT", "").lower() == "true"
SCOPE = "gaia"
log = logging.getLogger("gaia.tracing")

_lock = threading.Lock()
_pid: int | None = None
_tracer: Any = None
_token_usage: Any = None
_duration: Any = None
_providers: tuple[Any, Any] | None = None


def _setup() -> None:
    """The SDK's providers with OTLP/HTTP exporters, in this process (once; again after a
    fork)."""
    global _pid, _tracer, _token_usage, _duration, _providers
    with _lock:
        if _pid == os.getpid():
            return
        from opentelemetry.exporter.otlp.proto.http.metric_exporter import OTLPMetricExporter
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
        from opentelemetry.sdk.metrics import MeterProvider
        from opentelemetry.sdk.metrics.export import PeriodicExportingMetricReader
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor

        resource = Resource.create({"service.name": os.environ.get("OTEL_SERVICE_NAME", "gaia")})
        tracer_provider = TracerProvider(resource=resource)
        tracer_provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
        meter_provider = MeterProvider(resource=resource, metric_readers=[
            PeriodicExportingMetricReader(OTLPMetricExporter())])
        # Kept here, not made global (set_tracer_provider refuses a second call, and a forked
        # child needs its own, whose exporter thread it does not inherit): propagation needs
        # only the context, which the API keeps.
        _providers = (tracer_provider, meter_provider)
        _tracer = tracer_provider.get_tracer(SCOPE)
        meter = meter_provider.get_meter(SCOPE)
        _token_usage = meter.create_histogram(
            "gen_ai.client.token.usage", unit="{token}",
            description="Number of input and output tokens used.",
            explicit_bucket_boundaries_advisory=[
                1, 4, 16, 64, 256, 1024, 4096, 16384, 65536, 262144, 1048576, 4194304,
                16777216, 67108864])
        _duration = meter.create_histogram(
            "gen_ai.client.operation.duration", unit="s",
            description="GenAI operation duration.",
            explicit_bucket_boundaries_advisory=[
                0.01, 0.02, 0.04, 0.08, 0.16, 0.32, 0.64, 1.28, 2.56, 5.12, 10.24, 20.48,
                40.96, 81.92])
        _pid = os.getpid()


def _ready() -> Any:
    if _pid != os.getpid():
        _setup()
    return _tracer


def extract(headers: Any) -> Any:
    """The context a request's ``traceparent``/``tracestate`` headers carry (``None`` when
    tracing is off or they carry none; malformed ones are ignored)."""
    if not ENABLED or "traceparent" not in headers:
        return None
    _ready()
    from opentelemetry.propagate import extract as otel_extract

    return otel_extract({k.lower(): v for k, v in headers.items()})


@contextmanager
def attached(ctx: Any) -> Iterator[None]:
    """``ctx`` is the current context inside the block (nothing when ``ctx`` is ``None``)."""
    if ctx is None:
        yield
        return
    from opentelemetry import context

    token = context.attach(ctx)
    try:
        yield
    finally:
        context.detach(token)


def attach(span: Any) -> Any:
    """Make ``span`` current in this task; the token for :func:`detach`."""
    from opentelemetry import context, trace

    return context.attach(trace.set_span_in_context(span))


def detach(token: Any) -> None:
    from opentelemetry import context

    context.detach(token)


def flush() -> None:
    """Export what is buffered now (tests; a process about to end)."""
    if _providers is not None and _pid == os.getpid():
        _providers[0].force_flush()
        _providers[1].force_flush()


def span_ids(span: Any) -> tuple[str, str] | None:
    if span is None:
        return None
    span_context = span.get_span_context()
    return format(span_context.trace_id, "032x"), format(span_context.span_id, "016x")


def request_span_ids(*, method: str, route: str | None, path: str, status: int,
                     error_kind: str | None, seconds: float, parent: Any) -> tuple[str, str] | None:
    """A server span for a request that ran no turn (an operator API call, a refused one),
    recorded as it ends, over the time it took, under the client's ``traceparent`` if it
    sent one: its access line then names a span too. Its ids; never raises."""
    try:
        tracer = _ready()
        from opentelemetry.trace import SpanKind

        end = time.time_ns()
        span = tracer.start_span(
            f"{method} /{route}" if route else method, context=parent, kind=SpanKind.SERVER,
            start_time=end - int(seconds * 1e9),
            attributes={"http.request.method": method, "url.path": path,
                        "http.response.status_code": status,
                        **({"http.route": "/" + route} if route else {})})
        if status >= 500 or error_kind:
            _failed(span, error_kind or str(status), f"status {status}")
        span.end(end_time=end)
        return span_ids(span)
    except Exception:
        log.warning("could not record a request's span", exc_info=True)
        return None


def turn_span(*, agent: Any, model: str, provider: str, delegated: bool) -> Any:
    """The ``invoke_agent`` span of a turn, started (not current); ``None`` when off. Its
    parent is the current context: a client's traceparent (attached by the request edge) or,
    for a delegation, the caller's tool call."""
    if not ENABLED:
        return None
    tracer = _ready()
    from opentelemetry.trace import SpanKind

    # The root of Gaia's part of a trace (under a client's traceparent): the server's work
    # for its request; a delegated turn runs inside its caller, internal.
    return tracer.start_span(
        f"invoke_agent {agent.slug}",
        kind=SpanKind.INTERNAL if delegated else SpanKind.SERVER,
        attributes={"gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": agent.slug,
                    "gen_ai.agent.id": str(agent.pk), "gen_ai.request.model": model,
                    "gen_ai.provider.name": provider_name(provider),
                    **({"gen_ai.agent.description": agent.description[:500]}
                       if getattr(agent, "description", "") else {})})


def turn_thread(span: Any, thread_id: Any) -> None:
    if span is not None and thread_id is not None:
        span.set_attribute("gen_ai.conversation.id", str(thread_id))


def turn_end(span: Any, *, result: Any, error: tuple[str, int] | None,
             input_messages: Any = None) -> None:
    """Usage, finish reason, response model and any error on the turn's span; ends it."""
    if span is None:
        return
    attributes: dict[str, Any] = {
        "gen_ai.usage.input_tokens": int(result.input_tokens or 0),
        "gen_ai.usage.output_tokens": int(result.output_tokens or 0),
        "gen_ai.response.finish_reasons": [result.finish_reason or "unknown"],
        "gen_ai.response.id": result.response_id,
    }
    if result.model:
        attributes["gen_ai.response.model"] = result.model
    if CAPTURE_CONTENT:
        if input_messages is not None:
            attributes["gen_ai.input.messages"] = json.dumps(input_messages)[:100_000]
        attributes["gen_ai.output.messages"] = json.dumps([{
            "role": "assistant", "parts": [{"type": "text", "content": result.text or ""}],
            "finish_reason": result.finish_reason or "unknown"}])[:100_000]
    span.set_attributes(attributes)
    if error is not None:
        _failed(span, error[0], result.error or error[0])
    span.end()


def _failed(span: Any, kind: str, message: str) -> None:
    from opentelemetry.trace import Status, StatusCode

    span.set_attribute("error.type", kind)
    span.set_status(Status(StatusCode.ERROR, message[:500]))


class ChatSpan:
    """One upstream call's ``chat`` span and its GenAI metrics; current while the call runs,
    so the backend's HTTP request carries its ``traceparent``."""

    __slots__ = ("span", "token", "t0", "attributes")

    def __init__(self, provider: Any, model: str, request: Any) -> None:
        tracer = _ready()
        from opentelemetry import context, trace
        from opentelemetry.trace import SpanKind

        self.attributes = {"gen_ai.operation.name": "chat",
                           "gen_ai.provider.name": provider_name(
                               getattr(provider, "kind", "")),
                           "gen_ai.request.model": model}
        attributes: dict[str, Any] = dict(self.attributes)
        url = urlsplit(getattr(provider, "base_url", "") or "")
        if url.hostname:
            attributes["server.address"] = url.hostname
            attributes["server.port"] = url.port or (443 if url.scheme == "https" else 80)
        for name, value in (("gen_ai.request.max_tokens", request.max_output_tokens),
                            ("gen_ai.request.temperature", getattr(request, "temperature", None)),
                            ("gen_ai.request.top_p", getattr(request, "top_p", None))):
            if value is not None:
                attributes[name] = value
        self.span = tracer.start_span(f"chat {model}", kind=SpanKind.CLIENT,
                                      attributes=attributes)
        self.token = context.attach(trace.set_span_in_context(self.span))
        self.t0 = time.perf_counter()

    def end(self, *, usage: Any = None, model: str = "", finish: str = "",
            error: BaseException | None = None) -> None:
        """Ends the span; never raises (a trace must never fail a turn)."""
        try:
            self._end(usage, model, finish, error)
        except Exception:
            log.warning("could not record a chat span", exc_info=True)

    def _end(self, usage: Any, model: str, finish: str, error: BaseException | None) -> None:
        from opentelemetry import context

        context.detach(self.token)
        span, attributes = self.span, self.attributes
        if model:
            span.set_attribute("gen_ai.response.model", model)
            attributes = {**attributes, "gen_ai.response.model": model}
        if finish:
            span.set_attribute("gen_ai.response.finish_reasons", [finish])
        if usage is not None:
            span.set_attribute("gen_ai.usage.input_tokens", usage.input_tokens)
            span.set_attribute("gen_ai.usage.output_tokens", usage.output_tokens)
            _token_usage.record(usage.input_tokens, {**attributes, "gen_ai.token.type": "input"})
            _token_usage.record(usage.output_tokens,
                                {**attributes, "gen_ai.token.type": "output"})
        if error is not None:
            kind = getattr(error, "kind", None) or type(error).__name__
            attributes = {**attributes, "error.type": kind}
            _failed(span, kind, str(getattr(error, "message", error)))
        _duration.record(time.perf_counter() - self.t0, attributes)
        span.end()


def chat_span(provider: Any, model: str, request: Any) -> ChatSpan | None:
    return ChatSpan(provider, model, request) if ENABLED else None


def provider_name(kind: str) -> str:
    """The GenAI conventions' ``gen_ai.provider.name`` for a provider ``kind``: the
    well-known name of the API an upstream speaks, else ``gaia.<kind>``."""
    return {"openai": "openai", "anthropic": "anthropic"}.get(kind, f"gaia.{kind or 'unknown'}")


@contextmanager
def tool_span(*, name: str, call_id: str, server: str) -> Iterator[Any]:
    """The ``execute_tool`` span of a server-side tool call, current inside the block."""
    if not ENABLED:
        yield None
        return
    tracer = _ready()
    from opentelemetry.trace import SpanKind

    with tracer.start_as_current_span(
            f"execute_tool {name}", kind=SpanKind.INTERNAL, record_exception=False,
            set_status_on_exception=False,
            attributes={"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": name,
                        "gen_ai.tool.call.id": call_id,
                        # The conventions' types: every tool here runs on the agent's side
                        # ("extension"); a knowledge search reads a datastore.
                        "gen_ai.tool.type": "datastore" if name == "knowledge_search"
                        else "extension"}) as span:
        yield span


def tool_failed(span: Any, message: str) -> None:
    if span is not None:
        _failed(span, "tool_error", message)


@contextmanager
def mcp_span(*, server: str, tool: str) -> Iterator[dict[str, str] | None]:
    """An MCP client span (``tools/call <tool>``) current inside the block; yields the
    ``_meta`` trace context to send with the request (MCP carries it in ``params._meta``)."""
    if not ENABLED:
        yield None
        return
    tracer = _ready()
    from opentelemetry.propagate import inject
    from opentelemetry.trace import SpanKind

    with tracer.start_as_current_span(
            f"tools/call {tool}", kind=SpanKind.CLIENT,
            attributes={"mcp.method.name": "tools/call", "gen_ai.tool.name": tool,
                        "gen_ai.operation.name": "execute_tool",
                        "mcp.server.name": server}):
        carrier: dict[str, str] = {}
        inject(carrier)
        yield carrier


def inject_headers(headers: Any) -> None:
    """The current context's ``traceparent`` (and ``tracestate``) into ``headers``."""
    if ENABLED:
        from opentelemetry.propagate import inject

        inject(headers)


async def aiohttp_request_start(session: Any, trace_config_ctx: Any, params: Any) -> None:
    """aiohttp's ``on_request_start``: an upstream request carries the ``chat`` span."""
    inject_headers(params.headers)
