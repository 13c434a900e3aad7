#!/usr/bin/env python3
"""Throughput and latency of Gaia's /v1 routes against a fake provider.

Starts a real Gaia server (uvicorn by default, or daphne) on a throwaway SQLite data dir (or
the database in DATABASE_URL), creates an agent on the deterministic `fake` provider (32
tokens, no delay) and an API key, then drives each route at concurrency 1, 16 and 64 with an
aiohttp load generator that checks every reply. Threads and messages are persisted as in
production. Prints one table: requests/s, latency p50/p99 for JSON requests and time to first
token p50/p99 for streams.

  .venv/bin/python scripts/perf/chat.py [--routes chat,responses,messages]
      [--concurrency 1,16,64] [--duration 8] [--server uvicorn|daphne] [--workers 1]

The load generator shares the machine's CPU with the server; `client cpu` shows its share.
Targets on a 2-core machine: >= 100 JSON requests/s at concurrency 16 with p99 < 3x p50, and
stream time to first token p50 < 150 ms at concurrency 16.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import resource
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import aiohttp

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

PROMPT = "Summarise the plot of a short story about a lighthouse keeper in two sentences."
REPLY = " ".join(f"tok{i}" for i in range(32))


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def percentile(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    values = sorted(values)
    k = (len(values) - 1) * q / 100
    lo, hi = int(k), min(int(k) + 1, len(values) - 1)
    return values[lo] + (values[hi] - values[lo]) * (k - lo)


# ---------------------------------------------------------------------------------------------
# Requests per route: body, and how to check a reply and spot the first token.


def body_for(route: str, stream: bool, n: int) -> dict[str, Any]:
    text = f"{PROMPT} (request {n})"
    if route == "responses":
        return {"model": "perf", "input": text, "stream": stream}
    if route == "messages":
        return {"model": "perf", "max_tokens": 256, "stream": stream,
                "messages": [{"role": "user", "content": text}]}
    return {"model": "perf", "stream": stream, "messages": [{"role": "user", "content": text}]}


PATHS = {"chat": "/v1/chat/completions", "responses": "/v1/responses", "messages": "/v1/messages"}


def check_json(route: str, data: dict[str, Any]) -> None:
    if route == "chat":
        ok = data["choices"][0]["message"]["content"] == REPLY
    elif route == "responses":
        ok = data["output"][-1]["content"][0]["text"] == REPLY
    else:
        ok = data["content"][0]["text"] == REPLY
    if not ok:
        raise ValueError(f"unexpected reply: {json.dumps(data)[:200]}")


def first_token(route: str, line: bytes) -> bool:
    if route == "chat":
        return b'"content":"tok' in line
    if route == "responses":
        return b"response.output_text.delta" in line
    return b'"text_delta"' in line


def finished(route: str, line: bytes) -> bool:
    if route == "chat":
        return line.strip() == b"data: [DONE]"
    if route == "responses":
        return b"response.completed" in line
    return b"message_stop" in line


class Load:
    def __init__(self, base: str, key: str, route: str, stream: bool) -> None:
        self.base, self.key, self.route, self.stream = base, key, route, stream
        self.latency: list[float] = []
        self.ttft: list[float] = []
        self.errors: dict[str, int] = {}
        self.n = 0

    async def one(self, session: aiohttp.ClientSession) -> None:
        self.n += 1
        t0 = time.perf_counter()
        headers = {"Authorization": f"Bearer {self.key}", "anthropic-version": "2023-06-01"}
        if self.route != "messages":
            headers.pop("anthropic-version")
        async with session.post(self.base + PATHS[self.route], headers=headers,
                                json=body_for(self.route, self.stream, self.n)) as resp:
            if resp.status != 200:
                raise ValueError(f"http_{resp.status}")
            if not self.stream:
                check_json(self.route, await resp.json())
                self.latency.append(time.perf_counter() - t0)
                return
            got_first, done = None, False
            async for line in resp.content:
                if got_first is None and first_token(self.route, line):
                    got_first = time.perf_counter() - t0
                if finished(self.route, line):
                    done = True
            if got_first is None or not done:
                raise ValueError("incomplete_stream")
            self.ttft.append(got_first)
            self.latency.append(time.perf_counter() - t0)

    async def run(self, concurrency: int, duration: float, warmup: float) -> dict[str, Any]:
        connector = aiohttp.TCPConnector(limit=concurrency * 2)
        timeout = aiohttp.ClientTimeout(total=60)
        async with aiohttp.ClientSession(connector=connector, timeout=timeout) as session:
            start = time.perf_counter()
            measure_from = start + warmup
            stop = measure_from + duration
            cpu0: list[float] = []

            async def worker() -> None:
                while time.perf_counter() < stop:
                    try:
                        await self.one(session)
                    except Exception as exc:  # counted, never fatal for the run
                        kind = str(exc).split(":")[0][:40] or type(exc).__name__
                        self.errors[kind] = self.errors.get(kind, 0) + 1

            async def mark() -> None:
                await asyncio.sleep(warmup)
                self.latency.clear()
                self.ttft.clear()
                cpu0.append(resource.getrusage(resource.RUSAGE_SELF).ru_utime
                            + resource.getrusage(resource.RUSAGE_SELF).ru_stime)

            await asyncio.gather(mark(), *(worker() for _ in range(concurrency)))
            elapsed = time.perf_counter() - measure_from
            usage = resource.getrusage(resource.RUSAGE_SELF)
            cpu = usage.ru_utime + usage.ru_stime - (cpu0[0] if cpu0 else 0)
        ok = len(self.latency)
        return {
            "rps": ok / elapsed,
            "p50": percentile(self.latency, 50) * 1000,
            "p99": percentile(self.latency, 99) * 1000,
            "ttft50": percentile(self.ttft, 50) * 1000,
            "ttft99": percentile(self.ttft, 99) * 1000,
            "ok": ok,
            "errors": self.errors,
            "client_cpu": cpu / elapsed,
        }


# ---------------------------------------------------------------------------------------------


def start_server(
    args: argparse.Namespace, data_dir: Path
) -> tuple[subprocess.Popen[bytes], str, str]:
    env = {**os.environ, "GAIA_DATA_DIR": str(data_dir)}
    python = sys.executable
    manage = [python, str(ROOT / "manage.py")]
    subprocess.run([*manage, "migrate", "-v", "0"], env=env, check=True, cwd=ROOT)
    setup = (
        "from agents.models import Provider, Agent\n"
        "from agents.services import api_key_create\n"
        f"p, _ = Provider.objects.update_or_create(name='perf', defaults=dict(kind='fake', "
        f"max_concurrency=1000, options={{'reply': {REPLY!r}}}))\n"
        "Agent.objects.update_or_create(slug='perf', defaults=dict(display_name='Perf', "
        "provider=p, max_output_tokens=512))\n"
        "print(api_key_create(name='perf')[1])\n"
    )
    out = subprocess.run([*manage, "shell", "-c", setup], env=env, check=True, cwd=ROOT,
                         capture_output=True, text=True)
    key = out.stdout.strip().splitlines()[-1]
    port = free_port()
    from gaia_site.server_cli import server_command

    cmd = server_command("127.0.0.1", port, workers=args.workers, server=args.server)
    log = open(data_dir / "server.log", "wb")  # noqa: SIM115 - lives as long as the server
    proc = subprocess.Popen(cmd, env=env, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT)
    base = f"http://127.0.0.1:{port}"
    for _ in range(200):
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.2):
                break
        except OSError:
            time.sleep(0.1)
    return proc, base, key


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--routes", default="chat,responses,messages")
    parser.add_argument("--concurrency", default="1,16,64")
    parser.add_argument("--duration", type=float, default=8.0)
    parser.add_argument("--warmup", type=float, default=2.0)
    parser.add_argument("--server", choices=["uvicorn", "daphne"], default="uvicorn")
    parser.add_argument("--workers", type=int, default=1)
    parser.add_argument("--modes", default="json,stream")
    args = parser.parse_args()

    with tempfile.TemporaryDirectory(prefix="gaia-perf-") as tmp:
        proc, base, key = start_server(args, Path(tmp))
        rows = []
        try:
            for route in args.routes.split(","):
                for mode in args.modes.split(","):
                    for c in [int(x) for x in args.concurrency.split(",")]:
                        load = Load(base, key, route, mode == "stream")
                        r = asyncio.run(load.run(c, args.duration, args.warmup))
                        rows.append((route, mode, c, r))
                        print(f"  {route:9} {mode:6} c={c:<3} {r['rps']:7.1f} req/s "
                              f"p50 {r['p50']:6.1f} ms  p99 {r['p99']:6.1f} ms"
                              + (f"  ttft p50 {r['ttft50']:6.1f} ms" if mode == "stream" else "")
                              + (f"  errors {r['errors']}" if r["errors"] else ""),
                              file=sys.stderr, flush=True)
        finally:
            proc.terminate()
            proc.wait(10)
    print(f"\nGaia /v1 against a fake provider ({args.server}, {args.workers} worker(s), "
          f"SQLite unless DATABASE_URL; {args.duration:g} s per cell)\n")
    print(f"{'route':10} {'mode':6} {'conc':>4} {'req/s':>8} {'p50 ms':>8} {'p99 ms':>8} "
          f"{'p99/p50':>7} {'ttft p50':>9} {'ttft p99':>9} {'ok':>6} {'errors':>6} "
          f"{'client cpu':>10}")
    for route, mode, c, r in rows:
        ttft = (f"{r['ttft50']:9.1f} {r['ttft99']:9.1f}" if mode == "stream"
                else f"{'-':>9} {'-':>9}")
        print(f"{route:10} {mode:6} {c:>4} {r['rps']:8.1f} {r['p50']:8.1f} {r['p99']:8.1f} "
              f"{r['p99'] / r['p50']:7.2f} {ttft} {r['ok']:>6} {sum(r['errors'].values()):>6} "
              f"{r['client_cpu']:10.2f}")


if __name__ == "__main__":
    main()
