#!/usr/bin/env python3
"""What running an agent's own tools costs Gaia: the server's overhead per tool step, tool steps
per second under concurrency, and a stdio MCP server's round trip against an in-process tool.

Sets up a throwaway SQLite data dir (or DATABASE_URL's database) with agents on the ``fake``
provider, no delay (``ttft_ms``, ``delay_ms``: 0), whose ``script`` makes N rounds of one tool
call before it answers; starts a real Gaia server (uvicorn or daphne); then:

1. One client: JSON turns on /v1/chat/completions of ``tools-0`` (calculator offered, never
   called) and ``tools-N`` (N calculator rounds), once a round each, in a rotating order.
   Per step: (tools-N - tools-0) / N within a round, median and p90; server CPU from /proc.
   A step is all Gaia does for a round: reading the model's call; storing the call and the
   result as internal messages (two transactions on the database thread, each also updating
   the thread's counters); the tool_call, tool_result and message feed events; the activity
   in the dialect (``reasoning_content``); the next provider request from the grown
   conversation; and the fake model's and calculator's own work, which ``less`` takes out
   (timed around their calls in this process). ``plain`` (no tools): the loop's fixed cost a
   turn; ``mcp-N``: the same with the stdio ``mcp-server-time`` tool. Then the same turns in
   process through ``agents.turns.turn_ask`` (no HTTP), model and tool time subtracted.
2. ``--concurrency`` clients send tools-N turns back to back for ``--duration`` s: turns/s,
   tool steps/s, latency p50/p99, server CPU a turn and a step.
3. ``get_current_time`` through the shared MCP connection (``agents.tools.mcp``, stdio) to
   ``mcp-server-time`` against the built-in ``current_time`` in process, one call at a time.

  .venv/bin/python -m scripts.perf.tools [--steps 8] [--rounds 200] [--concurrency 16]
      [--duration 10] [--calls 500] [--server uvicorn|daphne]

Target: under 2 ms of server overhead per tool step. About 45 s on a 2-core machine.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp

from scripts.perf.harness import ROOT, free_port, percentile, proc_tree_cpu, wait_port

CALC = {"name": "calculator", "arguments": {"expression": "6 * 7"}}
MCP_CALL = {"name": "mcp__time__get_current_time", "arguments": {"timezone": "UTC"}}
ASK = "What is six times seven?"


def setup(steps: int) -> str:
    """Migrate, create the agents of the module docstring; the API key."""
    from django.core.management import call_command
    from django.db import connections

    from agents.models import Agent, McpServer, Provider
    from agents.services import api_key_create

    call_command("migrate", verbosity=0)
    McpServer.objects.update_or_create(name="time", defaults={"command": "mcp-server-time"})
    answer = [{"reply": "done {results}"}]
    plans = {"plain": ([], answer), "tools-0": (["calculator"], answer),
             f"tools-{steps}": (["calculator"], [{"tool_calls": [CALC]}] * steps + answer),
             f"mcp-{steps}": (["mcp:time"], [{"tool_calls": [MCP_CALL]}] * steps + answer)}
    for slug, (tools, script) in plans.items():
        provider, _ = Provider.objects.update_or_create(name=f"perf-{slug}", defaults={
            "kind": "fake", "max_concurrency": 1000, "options": {"script": script}})
        Agent.objects.update_or_create(slug=slug, defaults={  # max_steps is never reached
            "display_name": slug, "provider": provider, "tools": tools, "max_steps": steps + 1})
    key = api_key_create(name="perf-tools")[1]
    connections.close_all()
    return key


def start_server(kind: str, data_dir: Path) -> tuple[subprocess.Popen[bytes], str]:
    from gaia_site.server_cli import server_command

    port = free_port()
    log = open(data_dir / "server.log", "wb")  # noqa: SIM115 - lives as long as the server
    proc = subprocess.Popen(server_command("127.0.0.1", port, server=kind), cwd=ROOT,
                            env=dict(os.environ), stdout=log, stderr=subprocess.STDOUT)
    wait_port(port, proc)
    return proc, f"http://127.0.0.1:{port}"


def expected(model: str) -> str:
    """How the answer of ``model`` starts when its tools worked (it quotes the last result)."""
    if model.startswith("mcp-"):
        return 'done {\n  "timezone": "UTC"'
    return "done 42" if model.startswith("tools-") and model != "tools-0" else "done"


async def ask(session: aiohttp.ClientSession, base: str, key: str, model: str) -> float:
    """Milliseconds of one JSON turn of ``model``; its answer is checked."""
    t0 = time.perf_counter()
    async with session.post(base + "/v1/chat/completions",
                            headers={"Authorization": f"Bearer {key}"},
                            json={"model": model,
                                  "messages": [{"role": "user", "content": ASK}]}) as resp:
        data = await resp.json()
    elapsed = (time.perf_counter() - t0) * 1000
    if resp.status != 200 or not data["choices"][0]["message"]["content"].startswith(
            expected(model)):
        raise SystemExit(f"{model}: unexpected answer {resp.status}: {str(data)[:300]}")
    return elapsed


def rotations(models: list[str], rounds: int) -> list[list[str]]:
    """Every model once a round, the order rotated so none is always first."""
    return [models[r % len(models):] + models[:r % len(models)] for r in range(rounds)]


async def over_http(base: str, key: str, models: list[str], rounds: int, warmup: int,
                    pid: int) -> tuple[dict[str, list[float]], dict[str, float]]:
    """Turn ms per model, round by round, and the server's CPU ms a turn per model (its
    children's too: the stdio MCP server's)."""
    times: dict[str, list[float]] = {m: [] for m in models}
    cpu = dict.fromkeys(models, 0.0)
    async with aiohttp.ClientSession() as session:
        for r, order in enumerate(rotations(models, warmup + rounds)):  # warmup: caches, the
            for m in order:  # MCP server's start
                before = proc_tree_cpu(pid)
                elapsed = await ask(session, base, key, m)
                if r >= warmup:
                    times[m].append(elapsed)
                    cpu[m] += (proc_tree_cpu(pid) - before) * 1000 / rounds
    return times, cpu


async def throughput(base: str, key: str, model: str, concurrency: int, duration: float,
                     warmup: float, pid: int) -> dict[str, float]:
    latencies: list[float] = []
    async with aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(limit=concurrency * 2)) as session:
        measure_from = time.perf_counter() + warmup
        stop = measure_from + duration
        cpu0: list[float] = []

        async def client() -> None:
            while time.perf_counter() < stop:
                elapsed = await ask(session, base, key, model)
                if time.perf_counter() >= measure_from:
                    latencies.append(elapsed)

        async def mark() -> None:
            await asyncio.sleep(warmup)
            cpu0.append(proc_tree_cpu(pid))

        await asyncio.gather(mark(), *(client() for _ in range(concurrency)))
        elapsed = time.perf_counter() - measure_from
        cpu = proc_tree_cpu(pid) - cpu0[0]
    return {"turns": len(latencies) / elapsed, "cpu": cpu * 1000 / len(latencies),
            "p50": percentile(latencies, 50), "p99": percentile(latencies, 99)}


def instrument() -> dict[str, float]:
    """Seconds spent in the fake model and the calculator in this process, from now on."""
    from agents.backends.fake import FakeBackend
    from agents.tools.builtins import BUILTINS

    clock = {"spent": 0.0}
    stream, calc = FakeBackend.stream, BUILTINS["calculator"]

    async def timed_stream(self: Any, request: Any, **kwargs: Any) -> AsyncIterator[Any]:
        events = stream(self, request, **kwargs)
        while True:
            t0 = time.perf_counter()
            try:
                event = await anext(events)
            except StopAsyncIteration:
                return
            finally:
                clock["spent"] += time.perf_counter() - t0
            yield event

    async def timed_calc(args: dict[str, Any], ctx: Any) -> Any:
        t0 = time.perf_counter()
        try:
            return await calc.run(args, ctx)
        finally:
            clock["spent"] += time.perf_counter() - t0

    FakeBackend.stream = timed_stream  # type: ignore[method-assign]
    BUILTINS["calculator"] = dataclasses.replace(calc, run=timed_calc)
    return clock


async def in_process(models: list[str], rounds: int, warmup: int
                     ) -> tuple[dict[str, list[float]], dict[str, list[float]]]:
    """Turn ms per model through ``turn_ask``, and the ms of those in the model and tool."""
    from agents.turns import turn_ask

    clock = instrument()
    total: dict[str, list[float]] = {m: [] for m in models}
    spent: dict[str, list[float]] = {m: [] for m in models}
    for n, order in enumerate(rotations(models, warmup + rounds)):
        for m in order:
            before, t0 = clock["spent"], time.perf_counter()
            answer = await turn_ask(agent=m, prompt=ASK)
            elapsed = time.perf_counter() - t0
            if not answer.text.startswith(expected(m)):
                raise SystemExit(f"{m}: unexpected answer {answer.text[:200]!r}")
            if n >= warmup:
                total[m].append(elapsed * 1000)
                spent[m].append((clock["spent"] - before) * 1000)
    return total, spent


async def mcp_against_builtin(calls: int) -> tuple[str, float, dict[str, list[float]]]:
    """``(command, ms to start and list, {way: ms of each call})``."""
    from agents.tools import BUILTINS, ToolContext
    from agents.tools.mcp import McpConfig, mcp_close_all, mcp_connection, resolve_command

    command = resolve_command("mcp-server-time")
    t0 = time.perf_counter()
    connection = await mcp_connection(McpConfig(name="time", command=command))
    await connection.tools()
    opened = (time.perf_counter() - t0) * 1000
    builtin, ctx = BUILTINS["current_time"], ToolContext(agent=None, api_key=None, user=None)
    args = {"timezone": "UTC"}
    mcp, local = "stdio MCP (mcp-server-time)", "in process (current_time)"
    times: dict[str, list[float]] = {mcp: [], local: []}
    try:
        for n in range(calls + 20):  # the first 20 warm up
            t0 = time.perf_counter()
            one = await connection.call("get_current_time", args, within=10)
            t1 = time.perf_counter()
            other = await builtin.run(args, ctx)
            t2 = time.perf_counter()
            if one.is_error or other.is_error:
                raise SystemExit(f"a tool failed: {one.text[:200]} / {other.text[:200]}")
            if n >= 20:
                times[mcp].append((t1 - t0) * 1000)
                times[local].append((t2 - t1) * 1000)
    finally:
        await mcp_close_all()
    return command, opened, times


def per_step(many: list[float], none: list[float], steps: int) -> list[float]:
    """Per round: (the N-step turn - the 0-step turn) / N."""
    return [(a - b) / steps for a, b in zip(many, none, strict=True)]


def line(label: str, values: list[float] | None = None, extra: str = "") -> None:
    figures = (f"{statistics.median(values):8.3f} {percentile(values, 90):8.3f}  "
               if values else "")
    print(f"  {label:<54} {figures}{extra}".rstrip())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--steps", type=int, default=8, help="tool rounds of an N-step turn")
    parser.add_argument("--rounds", type=int, default=200, help="turns of each agent (part 1)")
    parser.add_argument("--warmup-rounds", type=int, default=10)
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("--duration", type=float, default=10.0)
    parser.add_argument("--warmup", type=float, default=2.0)
    parser.add_argument("--calls", type=int, default=500, help="tool calls of each way (part 3)")
    parser.add_argument("--server", choices=["uvicorn", "daphne"], default="uvicorn")
    args = parser.parse_args()
    n, rounds = args.steps, args.rounds
    models = ["plain", "tools-0", f"tools-{n}", f"mcp-{n}"]
    database = "PostgreSQL" if "postgres" in os.environ.get("DATABASE_URL", "") else "SQLite"

    with tempfile.TemporaryDirectory(prefix="gaia-perf-tools-") as tmp:
        os.environ["GAIA_DATA_DIR"] = tmp
        os.environ.setdefault("DJANGO_SETTINGS_MODULE", "gaia_site.settings")
        import django

        django.setup()
        key = setup(n)
        proc, base = start_server(args.server, Path(tmp))
        try:
            print(f"[1/4] {rounds} rounds over HTTP", file=sys.stderr, flush=True)
            http, cpu = asyncio.run(over_http(base, key, models, rounds, args.warmup_rounds,
                                              proc.pid))
            print(f"[2/4] concurrency {args.concurrency}", file=sys.stderr, flush=True)
            load = asyncio.run(throughput(base, key, f"tools-{n}", args.concurrency,
                                          args.duration, args.warmup, proc.pid))
        finally:
            proc.terminate()
            proc.wait(15)
        print("[3/4] in process", file=sys.stderr, flush=True)
        local, spent = asyncio.run(in_process(models[:3], rounds, args.warmup_rounds))
        print("[4/4] MCP against in process", file=sys.stderr, flush=True)
        command, opened, calls = asyncio.run(mcp_against_builtin(args.calls))

    model_tool = statistics.median(per_step(spent[f"tools-{n}"], spent["tools-0"], n))
    net = {m: [t - s for t, s in zip(local[m], spent[m], strict=True)] for m in local}
    raw = per_step(http[f"tools-{n}"], http["tools-0"], n)
    print(f"\nGaia agent tools ({args.server}, {database}; {n} steps a turn, {rounds} rounds, "
          f"concurrency {args.concurrency} for {args.duration:g} s, {args.calls} calls; "
          "fake model without delay)\n")
    print(f"{'1. one tool step, server overhead (ms)':<56} {'median':>8} {'p90':>8}")
    line(f"HTTP /v1/chat/completions, (tools-{n} - tools-0) / {n}", raw)
    line(f"  less fake model + calculator ({model_tool:.3f} ms a step)",
         [v - model_tool for v in raw], "<- target < 2 ms")
    line("  server CPU a step (mean)", None,
         f"{(cpu[f'tools-{n}'] - cpu['tools-0']) / n:8.3f}")
    line("in process (turn_ask), less model + tool time",
         per_step(net[f"tools-{n}"], net["tools-0"], n))
    line(f"HTTP with the stdio MCP tool, (mcp-{n} - tools-0) / {n}",
         per_step(http[f"mcp-{n}"], http["tools-0"], n))
    line("HTTP, the loop's fixed cost a turn, tools-0 - plain",
         per_step(http["tools-0"], http["plain"], 1))
    for m in models:
        line(f"HTTP turn of {m} (server CPU {cpu[m]:.2f} ms)", http[m])
    for m in models[:3]:
        line(f"in-process turn of {m}", local[m])
    print(f"\n2. {args.concurrency} clients, tools-{n} turns back to back")
    line("completed turns/s", None, f"{load['turns']:8.1f}")
    line("completed tool steps/s", None, f"{load['turns'] * n:8.1f}")
    line("turn latency p50 / p99 (ms)", None, f"{load['p50']:8.1f} {load['p99']:8.1f}")
    line("server CPU a turn / a step (ms)", None,
         f"{load['cpu']:8.2f} {load['cpu'] / n:8.2f}")
    print(f"\n{'3. one tool call (ms)':<56} {'median':>8} {'p90':>8}")
    for way, values in calls.items():
        line(way, values)
    line(f"stdio server started and listed in {opened:.0f} ms", None, f"({command})")


if __name__ == "__main__":
    main()
