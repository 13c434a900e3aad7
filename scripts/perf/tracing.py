#!/usr/bin/env python3
"""What OpenTelemetry tracing costs a turn (issue 40: on, at most 0.5 ms of server CPU per
turn; off, nothing measurable).

Runs, in a fresh interpreter each, exactly the tracing calls one turn makes
(``agents.infra.tracing``: the ``invoke_agent`` span made current for the turn's work, one
``chat`` span with its usage and GenAI metrics, an ``execute_tool`` span for the tool
scenario, the ends), with tracing off and with it on. On, the spans and metrics go over
OTLP/HTTP to a receiver in this process that reads and drops them, and the CPU counted is the
whole worker process's, the exporter's batching and encoding thread included, after a final
flush.

  .venv/bin/python -m scripts.perf.tracing [--turns 5000]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import SimpleNamespace
from typing import Any


def measure(turns: int) -> None:
    from agents.infra import tracing
    from agents.kernel.llm import Usage

    agent = SimpleNamespace(slug="bench", pk=1, description="")
    provider = SimpleNamespace(kind="openai", base_url="http://127.0.0.1:9100/v1")
    request = SimpleNamespace(max_output_tokens=256, temperature=None, top_p=None, model="m")
    usage = Usage(120, 32)

    def one_turn(tool: bool) -> None:
        span = tracing.turn_span(agent=agent, model="m", provider="openai",
                                 delegated=False) if tracing.ENABLED else None
        token = tracing.attach(span) if span is not None else None  # as Turn._pump does
        chat = tracing.chat_span(provider, "m", request) if tracing.ENABLED else None
        if chat is not None:
            chat.end(usage=usage, model="m", finish="stop")
        if tool:
            with tracing.tool_span(name="calculator", call_id="call_1", server="gaia"):
                pass
        if span is not None:
            tracing.detach(token)
            tracing.turn_thread(span, "00000000-0000-0000-0000-000000000000")
            tracing.turn_end(span, result=SimpleNamespace(
                input_tokens=120, output_tokens=32, finish_reason="stop", response_id="r",
                model="m", text="", error=""), error=None)

    for tool in (False, True):
        one_turn(tool)  # the SDK loaded and set up: what a running server has
        tracing.flush()
        t0 = time.process_time()
        for _ in range(turns):
            one_turn(tool)
        tracing.flush()  # the exporter's work is counted: process_time counts its thread
        per_turn = (time.process_time() - t0) / turns
        print(f"  {'tool turn' if tool else 'plain turn':<11} {per_turn * 1e3:.4f} ms CPU per turn "
              f"({turns} turns)")


def sink() -> tuple[ThreadingHTTPServer, int]:
    class Drop(BaseHTTPRequestHandler):
        def do_POST(self) -> None:  # noqa: N802 - http.server's name
            self.rfile.read(int(self.headers.get("content-length", 0)))
            self.send_response(200)
            self.send_header("content-length", "0")
            self.end_headers()

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Drop)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, server.server_address[1]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--turns", type=int, default=5000)
    parser.add_argument("--child", action="store_true")
    args = parser.parse_args()
    if args.child:
        measure(args.turns)
        return
    server, port = sink()
    for label, endpoint in (("tracing off", None), ("tracing on (OTLP/HTTP)",
                                                    f"http://127.0.0.1:{port}")):
        env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
        if endpoint:
            env["OTEL_EXPORTER_OTLP_ENDPOINT"] = endpoint
            # Room for every span of the run: a span dropped is export work not counted.
            env["OTEL_BSP_MAX_QUEUE_SIZE"] = str(4 * args.turns + 100)
        print(label)
        sys.stdout.flush()
        subprocess.run([sys.executable, "-m", "scripts.perf.tracing", "--child",
                        "--turns", str(args.turns)], env=env, check=True)
    server.shutdown()


if __name__ == "__main__":
    main()
