#!/usr/bin/env python3
"""Soak Gaia with mixed traffic and faults, then check that nothing was lost.

Starts a real Gaia server (``gaia api start``'s uvicorn command) on a throwaway SQLite data
dir (or the database in DATABASE_URL), with three agents on the deterministic ``fake``
provider: one that answers, one that fails before any token (502) and one that fails after
three tokens (an in-band error). Workers then send, for ``--duration`` seconds, a mix of JSON
and streamed requests in the three dialects, requests to the failing agents, and streams the
client abandons after two frames; halfway through the server is restarted (SIGTERM, as
``gaia api stop`` does, or SIGKILL with ``--kill``) and started again.

Every request carries a unique marker. A request is *acknowledged* when the server answered
it (any status, or the first frames of an abandoned stream); at the end the database must
hold, for every acknowledged request, its user message followed by exactly one assistant
message (a reply, an error, a disconnect or an interruption). Prints requests, errors by kind,
messages stored vs acknowledged, threads still holding a lease, and the server's RSS at start
and end.

  .venv/bin/python -m scripts.perf.soak [--duration 60] [--concurrency 8] [--kill]
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import os
import random
import signal
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

import aiohttp

ROOT = Path(__file__).resolve().parents[2]

REPLY = " ".join(f"tok{i}" for i in range(24))
AGENTS = {
    "soak": {"reply": REPLY, "delay_ms": 10},
    "soak-fail": {"fail": "before"},
    "soak-midfail": {"reply": REPLY, "delay_ms": 10, "fail": "after", "fail_after": 3},
}
PATHS = {"chat": "/v1/chat/completions", "responses": "/v1/responses",
         "messages": "/v1/messages"}
# kind: (weight, route, agent, stream, abandon after two frames)
MIX = {
    "chat json": (25, "chat", "soak", False, False),
    "chat stream": (15, "chat", "soak", True, False),
    "responses json": (10, "responses", "soak", False, False),
    "responses stream": (5, "responses", "soak", True, False),
    "messages json": (10, "messages", "soak", False, False),
    "messages stream": (10, "messages", "soak", True, False),
    "provider error (before)": (5, "chat", "soak-fail", False, False),
    "provider error (mid-stream)": (5, "messages", "soak-midfail", True, False),
    "client disconnect": (15, "chat", "soak", True, True),
}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def body(route: str, agent: str, stream: bool, text: str) -> dict[str, Any]:
    if route == "responses":
        return {"model": agent, "input": text, "stream": stream}
    if route == "messages":
        return {"model": agent, "max_tokens": 256, "stream": stream,
                "messages": [{"role": "user", "content": text}]}
    return {"model": agent, "stream": stream, "messages": [{"role": "user", "content": text}]}


class Server:
    def __init__(self, data_dir: Path, env: dict[str, str]) -> None:
        self.data_dir, self.env, self.port = data_dir, env, free_port()
        self.base = f"http://127.0.0.1:{self.port}"
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        from gaia_site.server_cli import server_command

        log = open(self.data_dir / "server.log", "ab")  # noqa: SIM115 - the server's lifetime
        self.proc = subprocess.Popen(server_command("127.0.0.1", self.port), env=self.env,
                                     cwd=ROOT, stdout=log, stderr=subprocess.STDOUT)
        for _ in range(300):
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=0.2):
                    return
            except OSError:
                time.sleep(0.1)
        raise RuntimeError("the server did not start; see server.log")

    def stop(self, sig: int = signal.SIGTERM) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(sig)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)


class Soak:
    def __init__(self, server: Server, key: str, run: str) -> None:
        self.server, self.key, self.run = server, key, run
        self.sent = 0
        self.kinds: collections.Counter[str] = collections.Counter()
        self.errors: collections.Counter[str] = collections.Counter()
        self.acknowledged: list[str] = []
        self.unanswered: list[str] = []  # no answer (the server went away mid-request)

    async def one(self, session: aiohttp.ClientSession) -> None:
        kind = random.choices(list(MIX), weights=[m[0] for m in MIX.values()])[0]
        _, route, agent, stream, abandon = MIX[kind]
        self.sent += 1
        marker = f"{self.run}-{self.sent}"
        self.kinds[kind] += 1
        headers = {"Authorization": f"Bearer {self.key}", "anthropic-version": "2023-06-01"}
        try:
            async with session.post(self.server.base + PATHS[route], headers=headers,
                                    json=body(route, agent, stream, marker)) as r:
                if r.status >= 300:
                    error = (await r.json()).get("error", {})
                    self.errors[f"{r.status} {error.get('code') or error.get('type')}"] += 1
                    self.acknowledged.append(marker)
                    return
                if not stream:
                    await r.read()
                    self.acknowledged.append(marker)
                    return
                frames = 0
                text = b""
                async for line in r.content:
                    if line.startswith(b"data:"):
                        frames += 1
                        text += line
                        if abandon and frames >= 2:
                            self.errors["client disconnect (planned)"] += 1
                            self.acknowledged.append(marker)
                            return  # leaving the block closes the connection mid-stream
                if b'"error":{' in text or b'"type":"error"' in text:
                    self.errors["in-band error after the first byte"] += 1
                self.acknowledged.append(marker)
        except aiohttp.ClientConnectorError:
            # The server is down (restarting): the request never reached it.
            self.errors["refused: server restarting (not sent)"] += 1
            self.sent -= 1
            self.kinds[kind] -= 1
            await asyncio.sleep(0.1)
        except (TimeoutError, aiohttp.ClientError, ConnectionError) as exc:
            self.errors[f"no answer: {type(exc).__name__}"] += 1
            self.unanswered.append(marker)

    async def drive(self, concurrency: int, until: float) -> None:
        timeout = aiohttp.ClientTimeout(total=60)
        async with aiohttp.ClientSession(timeout=timeout) as session:
            async def worker() -> None:
                while time.monotonic() < until:
                    await self.one(session)

            await asyncio.gather(*(worker() for _ in range(concurrency)))


def setup_database(env: dict[str, str]) -> str:
    os.environ.update(env)
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "gaia_site.settings")
    import django

    django.setup()
    from django.core.management import call_command

    call_command("migrate", verbosity=0)
    from agents.models import Agent, Provider
    from agents.services import api_key_create

    for slug, options in AGENTS.items():
        provider, _ = Provider.objects.update_or_create(
            name=slug, defaults={"kind": "fake", "max_concurrency": 1000, "options": options})
        Agent.objects.update_or_create(slug=slug, defaults={
            "display_name": slug, "provider": provider, "max_output_tokens": 512})
    return api_key_create(name="soak")[1]


def audit(soak: Soak) -> dict[str, Any]:
    """Every acknowledged request's user message and the one assistant message after it."""
    from django.db import connections

    from agents.models import Message, Thread

    connections.close_all()
    users = {m.content: m for m in Message.objects.filter(
        role="user", content__startswith=soak.run + "-")}
    replies = collections.Counter()
    finishes: collections.Counter[str] = collections.Counter()
    by_thread = collections.defaultdict(list)
    for m in Message.objects.filter(thread_id__in={u.thread_id for u in users.values()}):
        by_thread[m.thread_id].append(m)
    for user in users.values():
        after = [m for m in by_thread[user.thread_id]
                 if m.role == "assistant" and m.seq == user.seq + 1]
        replies[user.content] = len(after)
        for m in after:
            finishes[m.finish_reason or "?"] += 1
    acked = soak.acknowledged
    stored = sum(1 for marker in acked if replies.get(marker) == 1)
    return {
        "acknowledged": len(acked), "stored": stored,
        "missing": [m for m in acked if replies.get(m, 0) == 0][:10],
        "duplicated": [m for m in acked if replies.get(m, 0) > 1][:10],
        "unanswered_stored": sum(1 for m in soak.unanswered if replies.get(m) == 1),
        "finishes": dict(finishes),
        "leases_held": Thread.objects.filter(lock_token__gt="",
                                             title__startswith=soak.run).count(),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--duration", type=float, default=60.0)
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--kill", action="store_true", help="restart with SIGKILL, not SIGTERM")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="gaia-soak-") as tmp:
        env = {**os.environ, "GAIA_DATA_DIR": tmp, "GAIA_THREAD_LOCK_SECONDS": "5"}
        key = setup_database(env)
        server = Server(Path(tmp), env)
        soak = Soak(server, key, f"soak{uuid.uuid4().hex[:8]}")
        server.start()
        try:
            asyncio.run(soak.drive(args.concurrency, time.monotonic() + 2))  # warm up
            rss = [("start", rss_mb(server.proc.pid))]  # type: ignore[union-attr]
            t0 = time.monotonic()
            half = t0 + args.duration / 2

            async def restart_at_half() -> None:
                await asyncio.sleep(max(0.0, half - time.monotonic()))
                rss.append(("before restart", rss_mb(server.proc.pid)))  # type: ignore[union-attr]
                await asyncio.to_thread(server.stop, signal.SIGKILL if args.kill
                                        else signal.SIGTERM)
                await asyncio.to_thread(server.start)
                rss.append(("after restart", rss_mb(server.proc.pid)))  # type: ignore[union-attr]

            async def run() -> None:
                await asyncio.gather(soak.drive(args.concurrency, t0 + args.duration),
                                     restart_at_half())

            asyncio.run(run())
            elapsed = time.monotonic() - t0
            rss.append(("end", rss_mb(server.proc.pid)))  # type: ignore[union-attr]
            time.sleep(1.0)  # the last abandoned streams are recorded
            if args.kill:
                time.sleep(6.0)  # a lease later, the sweep records the dead process's turns
        finally:
            server.stop()
        result = audit(soak)
    print(f"\nGaia soak: {elapsed:.0f} s, concurrency {args.concurrency}, one restart "
          f"({'SIGKILL' if args.kill else 'SIGTERM'}), "
          f"{os.environ.get('DATABASE_URL', 'SQLite').split('@')[-1]}")
    print(f"requests sent        {soak.sent}  ({soak.sent / elapsed:.1f}/s)")
    for kind, n in soak.kinds.most_common():
        print(f"  {kind:28} {n}")
    print("errors by kind")
    for kind, n in soak.errors.most_common():
        print(f"  {kind:40} {n}")
    print(f"messages acknowledged {result['acknowledged']}")
    print(f"messages stored       {result['stored']}  (a user message and exactly one "
          f"reply for each acknowledged request)")
    print(f"  reply finishes      {result['finishes']}")
    print(f"  missing             {result['missing']}")
    print(f"  duplicated          {result['duplicated']}")
    print(f"unanswered requests   {len(soak.unanswered)} (in flight at the restart; "
          f"{result['unanswered_stored']} of them stored as well)")
    print(f"threads still leased  {result['leases_held']}")
    print("server RSS (MB)       " + ", ".join(f"{k} {v:.0f}" for k, v in rss))
    verdict = result["acknowledged"] == result["stored"] and not result["leases_held"]
    print("OK: stored == acknowledged" if verdict else "FAILED: stored != acknowledged")
    sys.exit(0 if verdict else 1)


if __name__ == "__main__":
    main()
