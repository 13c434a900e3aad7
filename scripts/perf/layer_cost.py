#!/usr/bin/env python3
"""What Redis costs per feed event batch: CPU of one group send and its receipt.

A turn publishes its feed events in batches (agents.outlet.realtime): with ``REDIS_URL`` each batch
is one ``group_send`` to the feed group and one ``receive`` in every process's listener. This
times that pair on channels-redis's queue layer (what Gaia uses) and, for comparison, on its
pub/sub layer, in this process, interleaved over ``--rounds``; prints the medians.

  REDIS_URL=redis://127.0.0.1:6379/3 .venv/bin/python -m scripts.perf.layer_cost [--n 1500]
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics


def cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


async def pair_cost(layer: object, n: int) -> float:
    """CPU ms of one group send plus its receipt, over ``n`` pairs."""
    channel = await layer.new_channel()  # type: ignore[attr-defined]
    await layer.group_add("perf.layer", channel)  # type: ignore[attr-defined]
    message = {"type": "agents.feed_events", "events": [
        {"event": "message", "timestamp": "2026-11-26T00:00:00Z", "thread": "t" * 32,
         "content": "hello " * 20}] * 3}
    for _ in range(50):
        await layer.group_send("perf.layer", message)  # type: ignore[attr-defined]
        await layer.receive(channel)  # type: ignore[attr-defined]
    t0 = cpu()
    for _ in range(n):
        await layer.group_send("perf.layer", message)  # type: ignore[attr-defined]
        await layer.receive(channel)  # type: ignore[attr-defined]
    spent = cpu() - t0
    await layer.group_discard("perf.layer", channel)  # type: ignore[attr-defined]
    return spent / n * 1000


async def main(args: argparse.Namespace) -> None:
    from channels_redis.core import RedisChannelLayer
    from channels_redis.pubsub import RedisPubSubChannelLayer

    url = os.environ["REDIS_URL"]
    results: dict[str, list[float]] = {"queue (channels_redis.core)": [],
                                       "pub/sub (channels_redis.pubsub)": []}
    for _ in range(args.rounds):
        queue = RedisChannelLayer(hosts=[{"address": url, "socket_timeout": 30}])
        results["queue (channels_redis.core)"].append(await pair_cost(queue, args.n))
        await queue.close_pools()
        pubsub = RedisPubSubChannelLayer(hosts=[url])
        results["pub/sub (channels_redis.pubsub)"].append(await pair_cost(pubsub, args.n))
        await pubsub.flush()
    print(f"\nCPU ms per group send + receive, {args.n} pairs, median of {args.rounds} rounds")
    for name, values in results.items():
        print(f"  {name:34} {statistics.median(values):6.3f}   "
              f"({', '.join(f'{v:.3f}' for v in values)})")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--n", type=int, default=1500)
    parser.add_argument("--rounds", type=int, default=3)
    if not os.environ.get("REDIS_URL"):
        raise SystemExit("REDIS_URL is needed")
    import uvloop

    uvloop.run(main(parser.parse_args()))
