"""What the measurements under scripts/perf share: the repository's root, free ports and
waiting for a process to answer, starting and stopping the processes a measurement runs (an
OpenAI-compatible upstream, process groups), CPU read from /proc, percentiles and medians, and
the /v1 load generator (``Load``) that checks every reply.

The scripts are modules of this package; run them from the repository's root as
``.venv/bin/python -m scripts.perf.NAME``."""

from __future__ import annotations

import asyncio
import json
import os
import re
import resource
import signal
import socket
import statistics
import subprocess
import sys
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import aiohttp
import httpx

ROOT = Path(__file__).resolve().parents[2]

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
# Processes a measurement starts, waits for and stops.


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


def start_upstream(path: Path, data_dir: Path, *, tokens: int = 32,
                   token_delay_ms: float | None = None) -> tuple[subprocess.Popen[bytes], str]:
    """The OpenAI-compatible upstream (``path``, a fake) of the ``openai`` kind: ``tokens``
    tokens a reply, no delay unless ``token_delay_ms`` is given; its log in ``data_dir``."""
    port = free_port()
    log = open(data_dir / "upstream.log", "wb")  # noqa: SIM115 - lives as long as the process
    delay = [] if token_delay_ms is None else ["--token-delay-ms", str(token_delay_ms)]
    proc = subprocess.Popen([sys.executable, str(path), "--port", str(port),
                             "--tokens", str(tokens), *delay],
                            cwd=ROOT, stdout=log, stderr=subprocess.STDOUT)
    wait_port(port, proc)
    return proc, f"http://127.0.0.1:{port}/v1"



def wait_health(base: str, *, tries: int = 300, timeout: float = 1.0) -> None:
    """Poll ``base``/health until it answers at all (any status), ``tries`` times 0.1 s apart;
    gives up quietly (the first request then says what is wrong)."""
    for _ in range(tries):
        try:
            httpx.get(base + "/health", timeout=timeout)
            return
        except httpx.HTTPError:
            time.sleep(0.1)


def stop_group(proc: subprocess.Popen[bytes]) -> None:
    """SIGTERM to the process group of ``proc`` (started with ``start_new_session=True``) if it
    still runs; SIGKILL when it has not ended 15 s later."""
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(15)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)


def terminate(procs: Iterable[subprocess.Popen[bytes]], wait: float) -> None:
    """SIGTERM to each of ``procs``, then wait up to ``wait`` seconds for it to end."""
    for proc in procs:
        proc.terminate()
        proc.wait(wait)
