#!/usr/bin/env python3
"""Offer a running Gaia more turns than it admits and count how it answers (issue 37 item 4).

``--concurrency`` clients (by default twice the server's default GAIA_MAX_TURNS_IN_FLIGHT)
send Chat Completions turns back to back for ``--duration`` seconds, each with a short client
timeout. Prints one JSON object: how many were answered 200, 503 (with ``Retry-After`` and
the OpenAI error body checked), something else, timed out or failed to connect; the
latency p50/p99 of the admitted turns, and of the refusals (the issue asks for them within
100 ms).

  .venv/bin/python -m scripts.perf.overload --base-url http://127.0.0.1:8080/v1 \\
      --api-key KEY --model AGENT [--concurrency 64] [--duration 30] [--timeout 10]

Start the server as you want it measured (``gaia api start``, or ``scripts/perf/chat.py``'s
set-up; an agent proxying to ``../shared/perf/fake_upstream.py`` as in the issue).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import time
from collections import Counter

import aiohttp


def percentile(values: list[float], q: float) -> float | None:
    if not values:
        return None
    values = sorted(values)
    k = (len(values) - 1) * q / 100
    lo, hi = int(k), min(int(k) + 1, len(values) - 1)
    return round(values[lo] + (values[hi] - values[lo]) * (k - lo), 1)


async def client(session: aiohttp.ClientSession, args: argparse.Namespace, until: float,
                 counts: Counter[str], admitted: list[float], refused: list[float],
                 n: list[int]) -> None:
    url = args.base_url.rstrip("/") + "/chat/completions"
    headers = {"Authorization": f"Bearer {args.api_key}"}
    timeout = aiohttp.ClientTimeout(total=args.timeout)
    while time.monotonic() < until:
        n[0] += 1
        body = {"model": args.model, "max_tokens": 64,
                "messages": [{"role": "user", "content": f"Overload probe {n[0]}."}]}
        t0 = time.monotonic()
        try:
            async with session.post(url, json=body, headers=headers, timeout=timeout) as r:
                payload = await r.read()
                ms = (time.monotonic() - t0) * 1000
                if r.status == 200:
                    counts["200"] += 1
                    admitted.append(ms)
                elif r.status in (503, 429):
                    error = json.loads(payload).get("error", {})
                    good = "Retry-After" in r.headers and error.get("type") and error.get(
                        "message")
                    counts[f"{r.status}" if good else f"{r.status} (malformed)"] += 1
                    refused.append(ms)
                    # A client honouring Retry-After would wait; a load test keeps offering.
                else:
                    counts[str(r.status)] += 1
        except TimeoutError:
            counts["timeout"] += 1
        except aiohttp.ClientConnectionError:
            counts["connection error"] += 1


async def main(args: argparse.Namespace) -> None:
    counts: Counter[str] = Counter()
    admitted: list[float] = []
    refused: list[float] = []
    connector = aiohttp.TCPConnector(limit=0)
    async with aiohttp.ClientSession(connector=connector) as session:
        until = time.monotonic() + args.duration
        await asyncio.gather(*(client(session, args, until, counts, admitted, refused, [0])
                               for _ in range(args.concurrency)))
    print(json.dumps({
        "concurrency": args.concurrency, "duration_s": args.duration,
        "answers": dict(counts),
        "admitted_per_s": round(len(admitted) / args.duration, 1),
        "admitted_ms": {"p50": percentile(admitted, 50), "p99": percentile(admitted, 99)},
        "refused_ms": {"p50": percentile(refused, 50), "p99": percentile(refused, 99)},
    }, indent=2))


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--base-url", required=True)
    parser.add_argument("--api-key", required=True)
    parser.add_argument("--model", required=True)
    parser.add_argument("--concurrency", type=int, default=64)
    parser.add_argument("--duration", type=float, default=30.0)
    parser.add_argument("--timeout", type=float, default=10.0,
                        help="each request's client timeout (s)")
    asyncio.run(main(parser.parse_args()))
