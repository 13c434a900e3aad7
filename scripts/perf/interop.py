#!/usr/bin/env python3
"""Server CPU per turn over MCP (``/mcp`` ``tools/call``) and A2A (``/a2a/perf``
``SendMessage``) against ``/v1`` on the same agent (issue 39: within 1.25x).

Starts a real Gaia server (``gaia api start``'s command, uvicorn) on a throwaway SQLite data
dir (or DATABASE_URL, with REDIS_URL if set) with the ``perf`` agent on the fake provider (32
tokens, no delay: Gaia's own cost), then, in alternating rounds, asks it ``--turns`` times in a
row over ``/v1/chat/completions`` (JSON, httpx), over MCP (the official ``mcp`` client, one
client for the round: each call one stateless POST) and over A2A (the official ``a2a-sdk``
client, non-streaming: each message one POST that waits for the task's end). The figure is the
server process's CPU (user + system, from /proc) over a round, per turn; medians of the
rounds.

  .venv/bin/python -m scripts.perf.interop [--turns 200] [--rounds 5]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import tempfile
import time
from pathlib import Path

import httpx

from scripts.perf.chat import start_server
from scripts.perf.harness import REPLY, proc_tree_cpu


async def over_v1(base: str, key: str, turns: int) -> None:
    async with httpx.AsyncClient(base_url=base, timeout=60,
                                 headers={"Authorization": f"Bearer {key}"}) as client:
        for _ in range(turns):
            r = await client.post("/v1/chat/completions", json={
                "model": "perf", "messages": [{"role": "user", "content": "Hello"}]})
            assert r.json()["choices"][0]["message"]["content"] == REPLY, r.text[:200]


async def over_mcp(base: str, key: str, turns: int) -> None:
    import httpx2
    from mcp import Client
    from mcp.client.streamable_http import streamable_http_client

    async with httpx2.AsyncClient(headers={"Authorization": f"Bearer {key}"},
                                  timeout=60) as http, \
            Client(streamable_http_client(f"{base}/mcp", http_client=http)) as client:
        for _ in range(turns):
            result = await client.call_tool("ask_perf", {"message": "Hello"})
            assert (result.is_error, result.content[0].text) == (False, REPLY), result


async def over_a2a(base: str, key: str, turns: int) -> None:
    import uuid

    from a2a.client import A2ACardResolver, ClientConfig, ClientFactory
    from a2a.types import a2a_pb2 as pb

    async with httpx.AsyncClient(headers={"Authorization": f"Bearer {key}"},
                                 timeout=60) as http:
        card = await A2ACardResolver(http, f"{base}/a2a/perf").get_agent_card()
        client = ClientFactory(ClientConfig(httpx_client=http, streaming=False)).create(card)
        for _ in range(turns):
            request = pb.SendMessageRequest(message=pb.Message(
                message_id=uuid.uuid4().hex, role=pb.Role.ROLE_USER,
                parts=[pb.Part(text="Hello")]))
            (response,) = [r async for r in client.send_message(request)]
            task = response.task
            reply = "".join(p.text for a in task.artifacts for p in a.parts)
            assert (task.status.state, reply) == (pb.TaskState.TASK_STATE_COMPLETED, REPLY), task


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--turns", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    args.workers, args.server, args.server_cores = 1, "uvicorn", None
    ways = {"/v1": over_v1, "MCP": over_mcp, "A2A": over_a2a}
    figures: dict[str, list[float]] = {name: [] for name in ways}
    with tempfile.TemporaryDirectory(prefix="gaia-interop-") as tmp:
        proc, base, key = start_server(args, Path(tmp))
        try:
            for way in ways.values():  # warm: imports, caches, the first connections
                asyncio.run(way(base, key, 20))
            for n in range(args.rounds):
                for name, way in ways.items():
                    cpu0, t0 = proc_tree_cpu(proc.pid), time.perf_counter()
                    asyncio.run(way(base, key, args.turns))
                    cpu = (proc_tree_cpu(proc.pid) - cpu0) / args.turns * 1000
                    wall = (time.perf_counter() - t0) / args.turns * 1000
                    figures[name].append(cpu)
                    print(f"  [{n + 1}/{args.rounds}] {name:4} {cpu:6.2f} ms CPU/turn "
                          f"({wall:6.2f} ms wall)", flush=True)
        finally:
            proc.terminate()
            proc.wait(10)
    v1, mcp, a2a = (statistics.median(figures[n]) for n in ways)
    print(f"\nserver CPU per turn, medians of {args.rounds} rounds of {args.turns}: "
          f"/v1 {v1:.2f} ms, MCP {mcp:.2f} ms ({mcp / v1:.2f}x), A2A {a2a:.2f} ms "
          f"({a2a / v1:.2f}x) (target <= 1.25x each)")



if __name__ == "__main__":
    main()
