"""Prometheus metrics (``prometheus-client``): the families every process counts into, and the
few calls the request edge, the turn runtime and the tool loop make to count.

One machine, one ``/metrics``: with ``PROMETHEUS_MULTIPROC_DIR`` set (``gaia api start`` sets it
for its ``--workers``, a directory per port emptied at start; a bare ``uvicorn --workers N``'s
workers find theirs by their parent's pid) every process writes its values to
memory-mapped files there and the scrape adds them up (prometheus-client's multiprocess mode);
without it (one process: ``./run``, a bare ``uvicorn``) the values live in this process. The
choice is prometheus-client's and is made when it is first imported, so the variable must be
set before the process starts.

Labels never carry a thread, a user or a key: ``agent`` is an agent's slug (or a team's),
``model`` a provider's model, ``tool`` a server-side tool, ``route`` a URL pattern, so every
label's values are bounded by what admins configured, never by what a client sends.

Cost: a counter's ``inc`` is a lock and an add (an mmap write in multiprocess mode); a turn
makes about ten of them. ``scripts/perf/metrics.py`` measures it.
"""

from __future__ import annotations

import multiprocessing
import os
import tempfile
from pathlib import Path


def _uvicorn_workers_dir() -> str | None:
    """A directory the workers of a bare ``uvicorn --workers N`` share: they are children of
    one uvicorn process, which imports nothing of Gaia's and so cannot set the variable
    itself. ``None`` in any other process."""
    parent = multiprocessing.parent_process()
    if parent is None or parent.pid is None:
        return None
    try:
        cmdline = Path(f"/proc/{parent.pid}/cmdline").read_bytes()
    except OSError:
        return None
    if b"uvicorn" not in cmdline:
        return None
    path = Path(tempfile.gettempdir()) / f"gaia-metrics-uvicorn-{parent.pid}"
    path.mkdir(mode=0o700, exist_ok=True)
    return str(path)


if not os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
    _shared = _uvicorn_workers_dir()
    if _shared is not None:
        os.environ["PROMETHEUS_MULTIPROC_DIR"] = _shared

from prometheus_client import Counter, Gauge, Histogram  # noqa: E402 - after the variable

MULTIPROCESS = bool(os.environ.get("PROMETHEUS_MULTIPROC_DIR"))

# Seconds: a model's reply takes from a fraction of a second to minutes.
LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300)
OVERHEAD_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5)

REQUESTS = Counter(
    "gaia_requests", "Requests to /v1 and /api, by route (URL pattern), agent and status.",
    ["route", "agent", "status"])
REQUEST_SECONDS = Histogram(
    "gaia_request_duration_seconds", "Time to answer a request, to its last byte.",
    ["route"], buckets=LATENCY_BUCKETS)
TTFT_SECONDS = Histogram(
    "gaia_time_to_first_token_seconds", "Time from a turn's start to its first token.",
    ["agent"], buckets=LATENCY_BUCKETS)
OVERHEAD_SECONDS = Histogram(
    "gaia_overhead_seconds", "Gaia's own time per turn request: its duration less the time "
    "the upstream provider's streams were open.", ["route"], buckets=OVERHEAD_BUCKETS)
TOKENS = Counter(
    "gaia_tokens", "Tokens of finished turns, by agent, upstream model and type.",
    ["agent", "model", "type"])
SPEND = Counter(
    "gaia_spend_usd", "What finished turns cost in USD, by agent and upstream model (turns of "
    "a model with no known price are not in it: gaia_tokens counts them).", ["agent", "model"])
TURNS = Counter(
    "gaia_turns", "Finished turns, by agent and how they ended (finish reason).",
    ["agent", "outcome"])
UPSTREAM_ERRORS = Counter(
    "gaia_upstream_errors", "Errors from upstream providers, by provider and kind.",
    ["provider", "kind"])
TOOL_CALLS = Counter(
    "gaia_tool_calls", "Server-side tool calls, by agent, tool and outcome.",
    ["agent", "tool", "outcome"])
TOOL_SECONDS = Histogram(
    "gaia_tool_call_duration_seconds", "Time a server-side tool call took (approval included).",
    ["agent", "tool"], buckets=LATENCY_BUCKETS)
BENCHMARK_CASES = Counter(
    "gaia_benchmark_cases", "Benchmark questions and replay cases recorded, by run kind and "
    "status (counted by the process that ran them: a Celery worker's own port).",
    ["kind", "status"])
TURNS_IN_FLIGHT = Gauge(
    "gaia_turns_in_flight", "Turns running now.", ["agent"], multiprocess_mode="livesum")
FEED_SUBSCRIBERS = Gauge(
    "gaia_feed_subscribers", "Open operator feed (WebSocket) connections.",
    multiprocess_mode="livesum")


def request_done(route: str, agent: str, status: int, seconds: float,
                 upstream_seconds: float | None) -> None:
    REQUESTS.labels(route, agent, str(status)).inc()
    REQUEST_SECONDS.labels(route).observe(seconds)
    if upstream_seconds is not None:
        OVERHEAD_SECONDS.labels(route).observe(max(0.0, seconds - upstream_seconds))


def turn_done(agent: str, model: str, outcome: str, input_tokens: int, output_tokens: int,
              ttft_ms: int | None) -> None:
    TURNS.labels(agent, outcome).inc()
    if input_tokens:
        TOKENS.labels(agent, model, "input").inc(input_tokens)
    if output_tokens:
        TOKENS.labels(agent, model, "output").inc(output_tokens)
    if ttft_ms is not None:
        TTFT_SECONDS.labels(agent).observe(ttft_ms / 1000)


def spent(agent: str, model: str, cost_nanos: int) -> None:
    SPEND.labels(agent, model).inc(cost_nanos / 1e9)


def tool_done(agent: str, tool: str, ok: bool, seconds: float) -> None:
    TOOL_CALLS.labels(agent, tool, "completed" if ok else "failed").inc()
    TOOL_SECONDS.labels(agent, tool).observe(seconds)


def upstream_error(provider: str, kind: str) -> None:
    UPSTREAM_ERRORS.labels(provider, kind).inc()


def turn_started(agent: str) -> None:
    TURNS_IN_FLIGHT.labels(agent).inc()


def turn_ended(agent: str) -> None:
    TURNS_IN_FLIGHT.labels(agent).dec()


def forget_dead_processes() -> None:
    """Drop the live gauges of processes that are gone (a worker uvicorn restarted, one that
    was killed): prometheus-client keeps their files, and a ``livesum`` would count them."""
    if not MULTIPROCESS:
        return
    from prometheus_client import multiprocess

    for path in Path(os.environ["PROMETHEUS_MULTIPROC_DIR"]).glob("gauge_live*_*.db"):
        try:
            pid = int(path.stem.rsplit("_", 1)[1])
            os.kill(pid, 0)
        except ProcessLookupError:
            multiprocess.mark_process_dead(pid)
        except (ValueError, PermissionError):
            continue
