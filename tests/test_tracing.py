"""OpenTelemetry (issue 40, its tracing half): a live Gaia with ``OTEL_EXPORTER_OTLP_ENDPOINT``
sends its spans and GenAI metrics over OTLP/HTTP to a receiver here, decoded with
``opentelemetry-proto``. Checked: span names, kinds, parent links and GenAI attributes for a
plain turn, a request that runs no turn, a tool turn, a delegation, a turn whose provider is an
OpenAI-compatible upstream
(which receives the ``chat`` span's ``traceparent``) and a client's ``traceparent``
continued; a malformed ``traceparent`` is ignored; access lines carry the ids."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import httpx
import pytest
from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import (
    ExportMetricsServiceRequest,
)
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.trace.v1.trace_pb2 import Span

from tests.agents.test_mcp import time_agent  # noqa: F401, F811 - a fixture
from tests.conftest import GaiaServer, free_port
from tests.fakes import Reply
from tests.fakes.openai_upstream import FakeOpenAIUpstream

pytestmark = pytest.mark.django_db(transaction=True)

SERVER, CLIENT, INTERNAL = Span.SPAN_KIND_SERVER, Span.SPAN_KIND_CLIENT, Span.SPAN_KIND_INTERNAL


def _value(any_value: Any) -> Any:
    kind = any_value.WhichOneof("value")
    if kind == "array_value":
        return [_value(v) for v in any_value.array_value.values]
    return getattr(any_value, kind) if kind else None


class Receiver:
    """An OTLP/HTTP receiver: what it was sent, decoded."""

    def __init__(self) -> None:
        self.spans: list[dict[str, Any]] = []
        self.metrics: list[dict[str, Any]] = []
        self.lock = threading.Lock()

    def take(self, path: str, body: bytes) -> None:
        with self.lock:
            if path == "/v1/traces":
                request = ExportTraceServiceRequest.FromString(body)
                for resource in request.resource_spans:
                    service = {a.key: _value(a.value) for a in resource.resource.attributes}
                    for scope in resource.scope_spans:
                        for span in scope.spans:
                            self.spans.append({
                                "name": span.name, "kind": span.kind,
                                "trace": span.trace_id.hex(), "id": span.span_id.hex(),
                                "parent": span.parent_span_id.hex() or None,
                                "attrs": {a.key: _value(a.value) for a in span.attributes},
                                "error": span.status.code == span.status.STATUS_CODE_ERROR,
                                "service": service.get("service.name")})
            elif path == "/v1/metrics":
                request = ExportMetricsServiceRequest.FromString(body)
                for resource in request.resource_metrics:
                    for scope in resource.scope_metrics:
                        for metric in scope.metrics:
                            points = metric.histogram.data_points
                            self.metrics.append({
                                "name": metric.name, "unit": metric.unit,
                                "points": [({a.key: _value(a.value) for a in p.attributes},
                                            p.count, p.sum) for p in points]})

    def wait(self, check: Any, what: str, timeout: float = 20.0) -> Any:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            with self.lock:
                found = check()
            if found:
                return found
            time.sleep(0.1)
        with self.lock:
            names = [(s["name"], s["trace"][:8]) for s in self.spans]
        raise AssertionError(f"no {what} in {names}")

    def trace_of(self, root_name: str, **attrs: Any) -> list[dict[str, Any]]:
        """Every span of the trace whose root-most span is ``root_name`` with ``attrs``."""
        roots = [s for s in self.spans if s["name"] == root_name
                 and all(s["attrs"].get(k) == v for k, v in attrs.items())]
        return [s for s in self.spans if roots and s["trace"] == roots[-1]["trace"]]


@pytest.fixture
def receiver() -> Iterator[tuple[Receiver, int]]:
    received = Receiver()

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:  # noqa: N802 - http.server's name
            body = self.rfile.read(int(self.headers.get("content-length", 0)))
            received.take(self.path, body)
            self.send_response(200)
            self.send_header("content-type", "application/x-protobuf")
            self.send_header("content-length", "0")
            self.end_headers()

        def log_message(self, *args: Any) -> None:
            pass

    port = free_port()
    server = ThreadingHTTPServer(("127.0.0.1", port), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield received, port
    server.shutdown()


@pytest.fixture
def traced(receiver: tuple[Receiver, int], gaia_server_factory: Any) -> GaiaServer:
    _, port = receiver
    return gaia_server_factory(
        OTEL_EXPORTER_OTLP_ENDPOINT=f"http://127.0.0.1:{port}", OTEL_SERVICE_NAME="gaia-test",
        OTEL_BSP_SCHEDULE_DELAY="100", OTEL_METRIC_EXPORT_INTERVAL="300",
        OTEL_SEMCONV_STABILITY_OPT_IN="gen_ai_latest_experimental")


def chat(server: GaiaServer, key: str, model: str, **headers: str) -> httpx.Response:
    response = httpx.post(server.v1 + "/chat/completions", timeout=60,
                          headers={"Authorization": f"Bearer {key}", **headers},
                          json={"model": model,
                                "messages": [{"role": "user", "content": "hi"}]})
    assert response.status_code == 200, response.text
    return response


def by_name(spans: list[dict[str, Any]], name: str) -> dict[str, Any]:
    [span] = [s for s in spans if s["name"] == name]
    return span


def test_a_plain_turn_and_a_continued_trace(traced: GaiaServer, receiver: Any, api_key: str,
                                            echo_agent: Any) -> None:
    received, _ = receiver
    thread_id = chat(traced, api_key, "echo").headers["x-gaia-thread-id"]
    spans = received.wait(lambda: received.trace_of(
        "invoke_agent echo", **{"gen_ai.conversation.id": thread_id}), "the plain turn")
    root = by_name(spans, "invoke_agent echo")
    assert root["kind"] == SERVER
    assert root["parent"] is None  # the root of the turn's trace
    assert root["service"] == "gaia-test"
    attrs = root["attrs"]
    assert attrs["gen_ai.operation.name"] == "invoke_agent"
    assert attrs["gen_ai.agent.name"] == "echo"
    assert attrs["gen_ai.agent.id"] == str(echo_agent.pk)
    assert attrs["gen_ai.request.model"] == "fake-model"
    assert attrs["gen_ai.provider.name"] == "gaia.fake"
    assert attrs["gen_ai.usage.output_tokens"] > 0
    assert attrs["gen_ai.response.finish_reasons"] == ["stop"]
    assert "gen_ai.input.messages" not in attrs  # content only when asked
    upstream = by_name(spans, "chat fake-model")
    assert upstream["kind"] == CLIENT
    assert upstream["parent"] == root["id"]
    assert upstream["attrs"]["gen_ai.operation.name"] == "chat"
    assert upstream["attrs"]["gen_ai.request.max_tokens"] > 0

    # A client's traceparent: its trace goes on, the turn's span its child.
    trace_id, parent_id = "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"
    thread_id = chat(traced, api_key, "echo",
                     traceparent=f"00-{trace_id}-{parent_id}-01").headers["x-gaia-thread-id"]
    continued = received.wait(lambda: received.trace_of(
        "invoke_agent echo", **{"gen_ai.conversation.id": thread_id}), "the continued turn")
    root = by_name(continued, "invoke_agent echo")
    assert (root["trace"], root["parent"]) == (trace_id, parent_id)

    # A malformed one is ignored: a trace of Gaia's own, and a 200.
    thread_id = chat(traced, api_key, "echo", traceparent="00-zz-nonsense").headers[
        "x-gaia-thread-id"]
    fresh = received.wait(lambda: received.trace_of(
        "invoke_agent echo", **{"gen_ai.conversation.id": thread_id}), "the fresh turn")
    assert by_name(fresh, "invoke_agent echo")["parent"] is None

    # The access line names the turn's trace and span.
    line = received.wait(lambda: next((x for x in traced.log().splitlines()
                                       if f"thread_id={thread_id}" in x and "gaia.access" in x),
                                      None), "the access line")
    root = by_name(fresh, "invoke_agent echo")
    assert f"trace_id={root['trace']} span_id={root['id']}" in line, line

    # A request without a turn has a server span and ids too (a 401 of the operator API),
    # under the client's traceparent.
    assert httpx.get(traced.url + "/api/v1/agents",
                     headers={"traceparent": f"00-{trace_id}-{parent_id}-01"}).status_code == 401
    denied = received.wait(lambda: [s for s in received.spans
                                    if s["name"] == "GET /api/v1/agents"], "the API's span")
    assert denied[0]["kind"] == SERVER
    assert (denied[0]["trace"], denied[0]["parent"]) == (trace_id, parent_id)
    assert denied[0]["attrs"]["http.response.status_code"] == 401
    assert denied[0]["attrs"]["http.route"] == "/api/v1/agents"
    line = received.wait(lambda: next((x for x in traced.log().splitlines()
                                       if "GET /api/v1/agents 401" in x), None), "its line")
    assert f"trace_id={denied[0]['trace']} span_id={denied[0]['id']}" in line, line

    # The GenAI metrics leave with the spans.
    usage = received.wait(lambda: [m for m in received.metrics
                                   if m["name"] == "gen_ai.client.token.usage"], "token usage")
    types = {point[0]["gen_ai.token.type"] for m in usage for point in m["points"]}
    assert types == {"input", "output"}
    assert received.wait(lambda: [m for m in received.metrics
                                  if m["name"] == "gen_ai.client.operation.duration"
                                  and m["unit"] == "s"], "operation duration")


def test_a_tool_turn_and_a_delegation(traced: GaiaServer, receiver: Any, api_key: str,
                                      make_agent: Any) -> None:
    received, _ = receiver
    make_agent(slug="calc", tools=["calculator"], provider__options={"script": [
        {"tool_calls": [{"name": "calculator", "arguments": {"expression": "6 * 7"}}]},
        {"reply": "It is {results}."}]})
    thread_id = chat(traced, api_key, "calc").headers["x-gaia-thread-id"]
    spans = received.wait(lambda: received.trace_of(
        "invoke_agent calc", **{"gen_ai.conversation.id": thread_id}), "the tool turn")
    root = by_name(spans, "invoke_agent calc")
    tool = by_name(spans, "execute_tool calculator")
    assert tool["kind"] == INTERNAL
    assert tool["parent"] == root["id"]
    assert tool["attrs"]["gen_ai.tool.name"] == "calculator"
    assert tool["attrs"]["gen_ai.tool.type"] == "extension"  # run on the agent's side
    assert tool["attrs"]["gen_ai.tool.call.id"]
    calls = [s for s in spans if s["name"].startswith("chat ")]
    assert len(calls) == 2  # before the tool and after it
    assert {c["parent"] for c in calls} == {root["id"]}

    make_agent(slug="boss", tools=["agent:calc"], provider__options={"script": [
        {"tool_calls": [{"name": "agent__calc", "arguments": {"task": "6 * 7"}}]},
        {"reply": "Boss: {results}"}]})
    thread_id = chat(traced, api_key, "boss").headers["x-gaia-thread-id"]
    spans = received.wait(lambda: (lambda t: t if any(
        s["name"] == "invoke_agent calc" for s in t) else None)(received.trace_of(
            "invoke_agent boss", **{"gen_ai.conversation.id": thread_id})), "the delegation")
    boss = by_name(spans, "invoke_agent boss")
    delegating = by_name(spans, "execute_tool agent__calc")
    called = by_name(spans, "invoke_agent calc")
    assert delegating["parent"] == boss["id"]
    assert called["parent"] == delegating["id"]
    assert called["kind"] == INTERNAL
    assert by_name(spans, "execute_tool calculator")["parent"] == called["id"]


def test_the_upstream_receives_the_chat_spans_traceparent(
        traced: GaiaServer, receiver: Any, api_key: str, make_agent: Any) -> None:
    received, _ = receiver
    with FakeOpenAIUpstream(tokens=3) as up:
        up.script(Reply(text="Hello from upstream."))
        make_agent(slug="up", provider__kind="openai", provider__base_url=up.base_url,
                   provider__name="fake-openai", provider__default_model="up-model")
        thread_id = chat(traced, api_key, "up").headers["x-gaia-thread-id"]
        sent = up.requests[-1].headers.get("traceparent")
    spans = received.wait(lambda: received.trace_of(
        "invoke_agent up", **{"gen_ai.conversation.id": thread_id}), "the upstream turn")
    call = by_name(spans, "chat up-model")
    assert sent is not None
    assert sent.startswith(f"00-{call['trace']}-{call['id']}-")  # then its flags (sampled)
    assert call["attrs"]["gen_ai.provider.name"] == "openai"
    assert call["attrs"]["server.address"] == "127.0.0.1"
    assert call["attrs"]["server.port"] == int(up.base_url.split(":")[2].split("/")[0])
    assert call["attrs"]["gen_ai.response.model"] == "up-model"
    assert call["attrs"]["gen_ai.usage.output_tokens"] > 0


def test_message_content_only_when_asked(receiver: Any, gaia_server_factory: Any,
                                         api_key: str, echo_agent: Any) -> None:
    received, port = receiver
    server = gaia_server_factory(
        OTEL_EXPORTER_OTLP_ENDPOINT=f"http://127.0.0.1:{port}", OTEL_BSP_SCHEDULE_DELAY="100",
        OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT="true")
    thread_id = chat(server, api_key, "echo").headers["x-gaia-thread-id"]
    spans = received.wait(lambda: received.trace_of(
        "invoke_agent echo", **{"gen_ai.conversation.id": thread_id}), "the turn")
    attrs = by_name(spans, "invoke_agent echo")["attrs"]
    assert '"content": "hi"' in attrs["gen_ai.input.messages"]
    assert '"role": "assistant"' in attrs["gen_ai.output.messages"]


def test_no_spans_and_no_sdk_when_off(gaia_server: GaiaServer, api_key: str,
                                      echo_agent: Any) -> None:
    """Off (no endpoint): a traceparent changes nothing and the access line has no ids."""
    response = chat(gaia_server, api_key, "echo",
                    traceparent="00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01")
    thread_id = response.headers["x-gaia-thread-id"]
    deadline = time.monotonic() + 10
    line = None
    while line is None and time.monotonic() < deadline:
        line = next((x for x in gaia_server.log().splitlines()
                     if f"thread_id={thread_id}" in x and "gaia.access" in x), None)
        time.sleep(0.1)
    assert line is not None
    assert "trace_id" not in line


def test_an_mcp_tool_call_is_a_client_span(traced: GaiaServer, receiver: Any, api_key: str,
                                           time_agent: Any) -> None:  # noqa: F811
    """An MCP server's tool (the reference time server, over stdio): ``execute_tool`` with a
    ``tools/call`` client span under it, ``mcp.method.name`` said."""
    received, _ = receiver
    thread_id = chat(traced, api_key, "clock").headers["x-gaia-thread-id"]
    spans = received.wait(lambda: (lambda t: t if any(
        s["name"].startswith("tools/call") for s in t) else None)(received.trace_of(
            "invoke_agent clock", **{"gen_ai.conversation.id": thread_id})), "the MCP call")
    tool = by_name(spans, "execute_tool mcp__time__get_current_time")
    mcp = by_name(spans, "tools/call get_current_time")
    assert mcp["kind"] == CLIENT
    assert mcp["parent"] == tool["id"]
    assert mcp["attrs"]["mcp.method.name"] == "tools/call"
    assert mcp["attrs"]["gen_ai.tool.name"] == "get_current_time"
    assert not mcp["error"]
