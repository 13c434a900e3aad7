#!/usr/bin/env python3
"""Throughput, latency and server CPU per request of Gaia's /v1 routes.

Starts a real Gaia server (uvicorn by default, or daphne) on a throwaway SQLite data dir (or
the database in DATABASE_URL, with REDIS_URL if set), creates an API key and an agent per
provider kind, then drives each route at each concurrency with an aiohttp load generator that
checks every reply. Threads and messages are persisted as in production. Provider kinds:

* ``fake``: the deterministic in-process provider (32 tokens, no delay): Gaia's own cost;
* ``openai``: an OpenAI-compatible upstream in its own process (``--upstream``, by default
  ``../shared/perf/fake_upstream.py`` when it is there, else ``tests/fakes/openai_upstream.py``)
  with 32 tokens and no delay: Gaia's cost plus its upstream client's.

Prints one table: requests/s, latency p50/p99 for JSON requests, time to first token p50/p99
for streams, and the server's CPU time per request (user + system of the server process and
its workers, from /proc, over the measured window), the figure that decides throughput when
the server has about one core. With ``--rounds N`` every cell is run N times in turn and the
medians are printed.

  .venv/bin/python scripts/perf/chat.py [--kinds fake,openai] [--routes chat,responses,messages]
      [--modes json,stream] [--concurrency 1,16,64] [--duration 8] [--rounds 1]
      [--server uvicorn|daphne] [--workers 1] [--upstream PATH] [--pin]

The load generator shares the machine's CPU with the server; `client cpu` shows its share.
With ``--pin`` the server runs on the first core only and everything else on the others.
Targets on a 2-core machine (issue 16): <= 5 ms server CPU per JSON request on SQLite (6 ms
on PostgreSQL), >= 200 JSON requests/s at concurrency 16 with p99 < 3x p50, and stream time
to first token p50 <= 80 ms at concurrency 16.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import resource
import socket
import statistics
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


def reply_text(route: str, data: dict[str, Any]) -> str:
    if route == "chat":
        return data["choices"][0]["message"]["content"]
    if route == "responses":
        return data["output"][-1]["content"][0]["text"]
    return data["content"][0]["text"]


SERVICES = ("postgres", "redis-server")


def _processes() -> list[tuple[int, str, int, float]]:
    """Every process in /proc: (pid, command name, parent pid, CPU seconds used so far, user
    + system); empty where /proc is not there."""
    tick = os.sysconf("SC_CLK_TCK")
    try:
        entries = os.listdir("/proc")
    except OSError:
        return []
    out = []
    for entry in entries:
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                name, rest = f.read().split("(", 1)[1].rsplit(")", 1)
        except (OSError, ValueError):
            continue
        # After the command: state, ppid, ..., utime (14th field), stime (15th).
        fields = rest.split()
        out.append((int(entry), name, int(fields[1]),
                    (int(fields[11]) + int(fields[12])) / tick))
    return out


def services_cpu() -> float:
    """CPU seconds used so far by the machine's PostgreSQL and Redis processes (a turn's
    database work happens there with PostgreSQL and inside the server with SQLite); 0.0 where
    /proc is not there. Anything else using them on the machine counts too."""
    return sum(cpu for _, name, _, cpu in _processes() if name in SERVICES)


def proc_tree_cpu(pid: int) -> float:
    """CPU seconds (user + system) used so far by ``pid`` and its children (uvicorn's
    workers), from /proc; 0.0 where /proc is not there."""
    return sum(cpu for p, _, parent, cpu in _processes() if pid in (p, parent))


_CHAT_TEXT = re.compile(rb'"content":"[^"]')


def first_token(route: str, line: bytes) -> bool:
    if route == "chat":
        return _CHAT_TEXT.search(line) is not None
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
    """``concurrency`` clients sending requests back to back; every reply is checked (the
    JSON reply's text must be ``expected``, or, when that is ``None``, the same non-empty
    text every time)."""

    def __init__(self, base: str, key: str, route: str, stream: bool, *, model: str = "perf",
                 expected: str | None = REPLY, server_pid: int | None = None) -> None:
        self.base, self.key, self.route, self.stream = base, key, route, stream
        self.model, self.expected, self.server_pid = model, expected, server_pid
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
                                json={**body_for(self.route, self.stream, self.n),
                                      "model": self.model}) as resp:
            if resp.status != 200:
                raise ValueError(f"http_{resp.status}")
            if not self.stream:
                data = await resp.json()
                text = reply_text(self.route, data)
                if self.expected is None and text:
                    self.expected = text
                if text != self.expected:
                    raise ValueError(f"unexpected reply: {json.dumps(data)[:200]}")
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
            server0: list[float] = []
            services0: list[float] = []

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
                if self.server_pid is not None:
                    server0.append(proc_tree_cpu(self.server_pid))
                services0.append(services_cpu())

            await asyncio.gather(mark(), *(worker() for _ in range(concurrency)))
            elapsed = time.perf_counter() - measure_from
            usage = resource.getrusage(resource.RUSAGE_SELF)
            cpu = usage.ru_utime + usage.ru_stime - (cpu0[0] if cpu0 else 0)
            server_cpu = (proc_tree_cpu(self.server_pid) - server0[0]
                          if self.server_pid is not None and server0 else float("nan"))
            services = services_cpu() - services0[0] if services0 else float("nan")
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
            "server_cpu": server_cpu / elapsed,  # cores the server kept busy
            "cpu_ms": server_cpu / ok * 1000 if ok else float("nan"),  # per request
            # PostgreSQL's and Redis's processes, per request (on SQLite: ~0, its work is
            # in cpu_ms).
            "services_ms": services / ok * 1000 if ok else float("nan"),
        }


def median_result(results: list[dict[str, Any]]) -> dict[str, Any]:
    """Every figure's median over rounds; errors added up."""
    out: dict[str, Any] = {}
    for name in results[0]:
        if name == "errors":
            errors: dict[str, int] = {}
            for r in results:
                for kind, n in r["errors"].items():
                    errors[kind] = errors.get(kind, 0) + n
            out[name] = errors
        elif name == "ok":
            out[name] = sum(r["ok"] for r in results)
        else:
            out[name] = statistics.median(r[name] for r in results)
    return out


# ---------------------------------------------------------------------------------------------


SHARED_UPSTREAM = ROOT.parent / "shared" / "perf" / "fake_upstream.py"
OWN_UPSTREAM = ROOT / "tests" / "fakes" / "openai_upstream.py"


def wait_port(port: int, proc: subprocess.Popen[bytes] | None = None) -> None:
    for _ in range(300):
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.2):
                return
        except OSError:
            if proc is not None and proc.poll() is not None:
                raise SystemExit(
                    f"process on port {port} exited with {proc.returncode}") from None
            time.sleep(0.1)
    raise SystemExit(f"nothing answered on port {port}")


def start_upstream(path: Path, data_dir: Path) -> tuple[subprocess.Popen[bytes], str]:
    """The OpenAI-compatible upstream of the ``openai`` kind: 32 tokens, no delay."""
    port = free_port()
    log = open(data_dir / "upstream.log", "wb")  # noqa: SIM115 - lives as long as the process
    proc = subprocess.Popen([sys.executable, str(path), "--port", str(port), "--tokens", "32"],
                            cwd=ROOT, stdout=log, stderr=subprocess.STDOUT)
    wait_port(port, proc)
    return proc, f"http://127.0.0.1:{port}/v1"


def start_server(
    args: argparse.Namespace, data_dir: Path, upstream_url: str | None = None
) -> tuple[subprocess.Popen[bytes], str, str]:
    """A Gaia server with an API key and the agent ``perf`` (kind ``fake``), and, given
    ``upstream_url``, ``perf-openai`` (kind ``openai`` on it)."""
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
    )
    if upstream_url:
        setup += (
            "o, _ = Provider.objects.update_or_create(name='perf-openai', defaults=dict("
            f"kind='openai', base_url={upstream_url!r}, default_model='fake-model', "
            "timeout_seconds=60, max_concurrency=1000))\n"
            "Agent.objects.update_or_create(slug='perf-openai', defaults=dict("
            "display_name='Perf (openai)', provider=o, max_output_tokens=512))\n"
        )
    setup += "print(api_key_create(name='perf')[1])\n"
    out = subprocess.run([*manage, "shell", "-c", setup], env=env, check=True, cwd=ROOT,
                         capture_output=True, text=True)
    key = out.stdout.strip().splitlines()[-1]
    port = free_port()
    from gaia_site.server_cli import server_command

    cmd = server_command("127.0.0.1", port, workers=args.workers, server=args.server)
    log = open(data_dir / "server.log", "wb")  # noqa: SIM115 - lives as long as the server
    cores = args.server_cores
    proc = subprocess.Popen(cmd, env=env, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT,
                            preexec_fn=(lambda: os.sched_setaffinity(0, cores)) if cores
                            else None)  # noqa: PLW1509 - no threads here yet
    wait_port(port, proc)
    return proc, f"http://127.0.0.1:{port}", key


MODELS = {"fake": "perf", "openai": "perf-openai"}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--kinds", default="fake,openai")
    parser.add_argument("--routes", default="chat,responses,messages")
    parser.add_argument("--concurrency", default="1,16,64")
    parser.add_argument("--duration", type=float, default=8.0)
    parser.add_argument("--warmup", type=float, default=2.0)
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--server", choices=["uvicorn", "daphne"], default="uvicorn")
    parser.add_argument("--workers", type=int, default=1)
    parser.add_argument("--modes", default="json,stream")
    parser.add_argument("--upstream", type=Path,
                        default=SHARED_UPSTREAM if SHARED_UPSTREAM.exists() else OWN_UPSTREAM)
    parser.add_argument("--pin", action="store_true",
                        help="the server on the first core, this load generator on the others")
    parser.add_argument("--production", action="store_true",
                        help="SQLite and PostgreSQL + Redis (DATABASE_URL, REDIS_URL) side by "
                        "side, interleaved, each server started as `gaia api start` with "
                        "nothing else set (openai kind, chat route)")
    parser.add_argument("--load-generator", choices=["inprocess", "shared"], default="inprocess",
                        help="with --production: this script's load generator, or "
                        "../shared/perf/load.py in a process of its own (the issue's harness)")
    args = parser.parse_args()
    if args.production:
        from chat_production import production  # a module of its own (500 lines a file)

        production(args)
        return
    args.server_cores = None
    if args.pin:
        cores = sorted(os.sched_getaffinity(0))
        if len(cores) < 2:
            raise SystemExit("--pin needs two cores")
        args.server_cores = {cores[0]}
        os.sched_setaffinity(0, set(cores[1:]))  # the upstream inherits it too
    kinds = args.kinds.split(",")
    database = "PostgreSQL" if "postgres" in os.environ.get("DATABASE_URL", "") else "SQLite"
    redis = " + Redis" if os.environ.get("REDIS_URL") else ""

    with tempfile.TemporaryDirectory(prefix="gaia-perf-") as tmp:
        upstream = None
        if "openai" in kinds:
            upstream, upstream_url = start_upstream(args.upstream, Path(tmp))
        proc, base, key = start_server(args, Path(tmp), upstream_url if upstream else None)
        cells = [(kind, route, mode, int(c)) for kind in kinds
                 for route in args.routes.split(",") for mode in args.modes.split(",")
                 for c in args.concurrency.split(",")]
        results: dict[tuple[str, str, str, int], list[dict[str, Any]]] = {}
        try:
            for n in range(args.rounds):
                for kind, route, mode, c in cells:
                    load = Load(base, key, route, mode == "stream", model=MODELS[kind],
                                expected=REPLY if kind == "fake" else None,
                                server_pid=proc.pid)
                    r = asyncio.run(load.run(c, args.duration, args.warmup))
                    results.setdefault((kind, route, mode, c), []).append(r)
                    print(f"  [{n + 1}/{args.rounds}] {kind:6} {route:9} {mode:6} c={c:<3} "
                          f"{r['rps']:7.1f} req/s p50 {r['p50']:6.1f} ms p99 {r['p99']:6.1f} ms"
                          + (f" ttft p50 {r['ttft50']:6.1f} ms" if mode == "stream" else "")
                          + f" cpu {r['cpu_ms']:5.2f} ms/req"
                          + (f"  errors {r['errors']}" if r["errors"] else ""),
                          file=sys.stderr, flush=True)
        finally:
            for p in (proc, upstream):
                if p is not None:
                    p.terminate()
                    p.wait(10)
    pinned = "; server pinned to one core" if args.pin else ""
    print(f"\nGaia /v1 ({args.server}, {args.workers} worker(s), {database}{redis}{pinned}; "
          f"{args.duration:g} s per cell, medians of {args.rounds} round(s))\n")
    print(f"{'kind':7} {'route':10} {'mode':6} {'conc':>4} {'req/s':>8} {'p50 ms':>8} "
          f"{'p99 ms':>8} {'p99/p50':>7} {'ttft p50':>9} {'ttft p99':>9} {'ok':>6} "
          f"{'errors':>6} {'cpu ms/req':>10} {'server cpu':>10} {'client cpu':>10}")
    for (kind, route, mode, c), rounds in results.items():
        r = median_result(rounds)
        ttft = (f"{r['ttft50']:9.1f} {r['ttft99']:9.1f}" if mode == "stream"
                else f"{'-':>9} {'-':>9}")
        print(f"{kind:7} {route:10} {mode:6} {c:>4} {r['rps']:8.1f} {r['p50']:8.1f} "
              f"{r['p99']:8.1f} {r['p99'] / r['p50']:7.2f} {ttft} {r['ok']:>6} "
              f"{sum(r['errors'].values()):>6} {r['cpu_ms']:10.2f} {r['server_cpu']:10.2f} "
              f"{r['client_cpu']:10.2f}")


if __name__ == "__main__":
    main()
