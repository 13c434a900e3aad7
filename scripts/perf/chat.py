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

  .venv/bin/python -m scripts.perf.chat [--kinds fake,openai] [--routes chat,responses,messages]
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
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from scripts.perf.chat_production import production
from scripts.perf.harness import (
    OWN_UPSTREAM,
    REPLY,
    ROOT,
    SHARED_UPSTREAM,
    Load,
    free_port,
    median_result,
    start_upstream,
    wait_port,
)


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
