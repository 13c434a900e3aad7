#!/usr/bin/env python3
"""Throughput and latency of the operator API (/api/v1) on a populated database.

Starts a real Gaia server (as scripts/perf/chat.py does: throwaway SQLite data dir, or the
database in DATABASE_URL), stores ``--threads`` threads of two messages each across four agents,
creates an operator key, then drives each query route, and ``POST /inject`` (202 with the
message stored; its reply produced in the background), at each concurrency for ``--duration``
seconds. Every reply is checked. Prints one table: requests/s and latency p50/p99.

  .venv/bin/python -m scripts.perf.operator_api [--threads 2000] [--concurrency 1,8]
      [--duration 2] [--routes organism,agents,threads,search,messages,thread,inject]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import aiohttp

from scripts.perf.harness import ROOT, free_port, percentile, wait_health

SETUP = """
import uuid
from agents.models import Agent, Message, Provider, Thread
from agents.services import api_key_create
p, _ = Provider.objects.update_or_create(name='perf', defaults=dict(kind='fake',
    max_concurrency=1000, options={'reply': 'ok'}))
agents = [Agent.objects.update_or_create(slug=f'perf-{i}', defaults=dict(display_name='Perf',
    provider=p))[0] for i in range(4)]
threads = [Thread(agent=agents[n % 4], session_key=f's{n}', user='perf', title=f'thread {n}',
    status='completed', message_count=2, history_digest=uuid.uuid4().hex)
    for n in range(N)]
Thread.objects.bulk_create(threads, batch_size=500)
Message.objects.bulk_create([m for n, t in enumerate(threads) for m in (
    Message(thread=t, seq=0, role='user', content=f'question {n} about lighthouses'),
    Message(thread=t, seq=1, role='assistant', content=f'answer {n}' +
            (' needle' if n % 100 == 0 else ''), finish_reason='stop'))], batch_size=1000)
print(threads[0].pk)
print(api_key_create(name='ops', scopes=['operator'])[1])
"""


def routes(thread_id: str) -> dict[str, tuple[str, str, Any]]:
    """name -> (method, path, JSON body)."""
    return {
        "organism": ("GET", "/api/v1/organism", None),
        "agents": ("GET", "/api/v1/agents", None),
        "threads": ("GET", "/api/v1/threads?limit=50", None),
        "search": ("GET", "/api/v1/threads?q=needle&limit=50", None),
        "messages": ("GET", "/api/v1/messages?limit=50&role=assistant", None),
        "thread": ("GET", f"/api/v1/threads/{thread_id}", None),
        "inject": ("POST", "/api/v1/inject", {"to": "perf-0", "payload": "ping"}),
    }


async def drive(base: str, key: str, method: str, path: str, body: Any, concurrency: int,
                duration: float) -> dict[str, Any]:
    latency: list[float] = []
    errors: dict[str, int] = {}
    headers = {"Authorization": f"Bearer {key}"}
    expected = 202 if method == "POST" else 200
    async with aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(limit=concurrency * 2),
            timeout=aiohttp.ClientTimeout(total=60)) as session:
        stop = time.perf_counter() + duration

        async def worker() -> None:
            while time.perf_counter() < stop:
                t0 = time.perf_counter()
                try:
                    async with session.request(method, base + path, json=body,
                                               headers=headers) as resp:
                        data = await resp.json()
                        if resp.status != expected or not data:
                            raise ValueError(f"http_{resp.status}")
                    latency.append(time.perf_counter() - t0)
                except Exception as exc:  # counted, never fatal for the run
                    kind = str(exc)[:40] or type(exc).__name__
                    errors[kind] = errors.get(kind, 0) + 1

        t_start = time.perf_counter()
        await asyncio.gather(*(worker() for _ in range(concurrency)))
        elapsed = time.perf_counter() - t_start
    return {"rps": len(latency) / elapsed, "p50": percentile(latency, 50) * 1000,
            "p99": percentile(latency, 99) * 1000, "ok": len(latency), "errors": errors}


def access_line_cost(n: int = 20000) -> dict[str, float]:
    """Microseconds the /v1 hot path spends on its access line (openai_api.middleware), per
    format, written to a null stream: what every /v1 request pays for its log line."""
    import io
    import logging

    import django

    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "gaia_site.settings")
    django.setup()
    from django.test import RequestFactory
    from pythonjsonlogger.json import JsonFormatter

    from openai_api.middleware import access_line

    request = RequestFactory().post("/v1/chat/completions",
                                    HTTP_AUTHORIZATION="Bearer gaia_0123abcd_secret")
    request.gaia_facts = {"agent": "perf", "thread_id": "5832c001-6c03-4416-b499-000000000000",
                          "thread_found": "new/hash", "ttft_ms": 3, "input_tokens": 20,
                          "output_tokens": 32}
    logger = logging.getLogger("gaia.access")
    out = {}
    for name, formatter in (("plain", logging.Formatter(
            "%(asctime)s %(levelname)s %(name)s: %(message)s")),
            ("json", JsonFormatter("%(asctime)s %(levelname)s %(name)s %(message)s"))):
        handler = logging.StreamHandler(io.StringIO())
        handler.setFormatter(formatter)
        saved = logger.handlers, logger.propagate
        logger.handlers, logger.propagate = [handler], False
        try:
            t0 = time.perf_counter()
            for _ in range(n):
                access_line(request, 200, t0)
            out[name] = (time.perf_counter() - t0) / n * 1e6
        finally:
            logger.handlers, logger.propagate = saved
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--threads", type=int, default=2000)
    parser.add_argument("--concurrency", default="1,8")
    parser.add_argument("--duration", type=float, default=1.5)
    parser.add_argument("--routes", default="organism,agents,threads,search,messages,thread,"
                                            "inject")
    parser.add_argument("--skip-server", action="store_true",
                        help="only the access line's cost")
    args = parser.parse_args()
    cost = access_line_cost()
    print("access line per /v1 request: " + ", ".join(
        f"{k} {v:.1f} us" for k, v in cost.items()))
    if args.skip_server:
        return
    with tempfile.TemporaryDirectory(prefix="gaia-perf-ops-") as tmp:
        env = {**os.environ, "GAIA_DATA_DIR": tmp}
        manage = [sys.executable, str(ROOT / "manage.py")]
        subprocess.run([*manage, "migrate", "-v", "0"], env=env, check=True, cwd=ROOT)
        out = subprocess.run([*manage, "shell", "-c", SETUP.replace("N)", f"{args.threads})")],
                             env=env, check=True, cwd=ROOT, capture_output=True, text=True)
        thread_id, key = out.stdout.strip().splitlines()[-2:]
        port = free_port()
        from gaia_site.server_cli import server_command

        log = open(Path(tmp) / "server.log", "wb")  # noqa: SIM115 - lives with the server
        proc = subprocess.Popen(server_command("127.0.0.1", port), env=env, cwd=ROOT,
                                stdout=log, stderr=subprocess.STDOUT)
        base = f"http://127.0.0.1:{port}"
        rows = []
        try:
            wait_health(base, tries=200)
            table = routes(thread_id)
            for name in args.routes.split(","):
                method, path, body = table[name]
                for c in [int(x) for x in args.concurrency.split(",")]:
                    r = asyncio.run(drive(base, key, method, path, body, c, args.duration))
                    rows.append((name, method, path, c, r))
        finally:
            proc.terminate()
            proc.wait(10)
    print(f"\nGaia operator API, {args.threads} threads stored (SQLite unless DATABASE_URL; "
          f"{args.duration:g} s per cell)\n")
    print(f"{'route':9} {'request':45} {'conc':>4} {'req/s':>7} {'p50 ms':>7} {'p99 ms':>7} "
          f"{'ok':>5} {'errors':>6}")
    for name, method, path, c, r in rows:
        print(f"{name:9} {method + ' ' + path[:40]:45} {c:>4} {r['rps']:7.1f} {r['p50']:7.1f} "
              f"{r['p99']:7.1f} {r['ok']:>5} {sum(r['errors'].values()):>6}")


if __name__ == "__main__":
    main()
