#!/usr/bin/env python3
"""What a streaming reply's checkpoints cost (agents/turns/checkpoint.py): server CPU per
streamed turn and stream throughput with checkpoints on (the defaults: a write per second or
per 2,000 characters) and off (``GAIA_REPLY_CHECKPOINT_SECONDS=0``), on SQLite and, with
DATABASE_URL (PostgreSQL; REDIS_URL too if set), on PostgreSQL.

Each leg is a server started as a user starts it (``gaia api start``, Gaia's defaults but the
checkpoint switch) with an ``openai`` agent on ../shared/perf/fake_upstream.py answering long
replies (``--tokens``, 2,000 by default: about 11,000 characters, so about six checkpoints a
turn when the upstream streams as fast as it can). Streamed Chat Completions requests at
``--concurrency`` for ``--duration`` seconds a cell; every leg in turn, round after round (the
order alternating), and the medians printed. The machine is shared: read the ratios, and run
several rounds. On PostgreSQL it also prints the thread table's row updates per turn
(``pg_stat_user_tables``): the checkpoints are the difference between on and off.

  .venv/bin/python -m scripts.perf.checkpoint [--tokens 2000] [--token-delay-ms 0]
      [--concurrency 4] [--duration 10] [--warmup 2] [--rounds 3]
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

from scripts.perf.chat_production import production_env, start_production
from scripts.perf.harness import SHARED_UPSTREAM, Load, median_result, start_upstream, terminate


def thread_updates(database_url: str) -> int:
    """Rows of the thread table updated so far (PostgreSQL's statistics, which a backend
    flushes at most once a second, and within 10 s once idle): each turn's final record, lease
    renewals and its checkpoints."""
    import psycopg

    with psycopg.connect(database_url.replace("postgres://", "postgresql://", 1)) as conn:
        row = conn.execute("SELECT n_tup_upd FROM pg_stat_user_tables "
                           "WHERE relname = 'agents_thread'").fetchone()
    return int(row[0]) if row else 0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--tokens", type=int, default=2000)
    parser.add_argument("--token-delay-ms", type=float, default=0.0)
    parser.add_argument("--concurrency", type=int, default=4)
    parser.add_argument("--duration", type=float, default=10.0)
    parser.add_argument("--warmup", type=float, default=2.0)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    database_url = os.environ.get("DATABASE_URL", "")
    databases = {"sqlite": (None, None)}
    if "postgres" in database_url:
        databases["postgresql"] = (database_url, os.environ.get("REDIS_URL") or None)
    legs = [(db, on) for db in databases for on in (True, False)]
    results: dict[tuple[str, bool], list[dict[str, Any]]] = {}
    with tempfile.TemporaryDirectory(prefix="gaia-perf-checkpoint-") as tmp:
        upstream, upstream_url = start_upstream(
            SHARED_UPSTREAM, Path(tmp), tokens=args.tokens, token_delay_ms=args.token_delay_ms)
        servers: dict[tuple[str, bool], tuple[subprocess.Popen[bytes], str, str]] = {}
        try:
            for db, on in legs:
                data_dir = Path(tmp) / f"{db}-{'on' if on else 'off'}"
                env = production_env(data_dir, *databases[db])
                if not on:
                    env["GAIA_REPLY_CHECKPOINT_SECONDS"] = "0"
                # an output limit that lets the whole reply through
                servers[(db, on)] = start_production(
                    data_dir, env, upstream_url, max_output_tokens=args.tokens * 2)
            for n in range(args.rounds):
                for leg in legs if n % 2 == 0 else list(reversed(legs)):
                    proc, base, key = servers[leg]
                    load = Load(base, key, "chat", True, model="perf-openai", expected=None,
                                server_pid=proc.pid)
                    pg = databases[leg[0]][0]
                    updates = thread_updates(pg) if pg else 0
                    r = asyncio.run(load.run(args.concurrency, args.duration, args.warmup))
                    if pg:
                        time.sleep(11)  # an idle backend flushes its statistics within 10 s
                        r["updates"] = (thread_updates(pg) - updates) / load.n
                    results.setdefault(leg, []).append(r)
                    print(f"  [{n + 1}/{args.rounds}] {leg[0]:10} checkpoints "
                          f"{'on ' if leg[1] else 'off'} {r['rps']:6.2f} turns/s "
                          f"{r['rps'] * args.tokens:8.0f} tokens/s p50 {r['p50']:7.1f} ms "
                          f"cpu {r['cpu_ms']:6.1f} ms/turn"
                          + (f" thread updates {r['updates']:.1f}/turn" if pg else "")
                          + (f"  errors {r['errors']}" if r["errors"] else ""),
                          file=sys.stderr, flush=True)
        finally:
            terminate((proc for proc, _, _ in servers.values()), 15)
            terminate([upstream], 10)
    print(f"\nStreamed /v1/chat/completions of {args.tokens} tokens (fake upstream, "
          f"{args.token_delay_ms:g} ms between tokens), c={args.concurrency}, "
          f"{args.duration:g} s a cell, medians of {args.rounds} interleaved round(s); "
          "a shared machine\n")
    print(f"{'database':11} {'checkpoints':11} {'turns/s':>8} {'tokens/s':>9} "
          f"{'p50 ms':>8} {'ttft p50':>8} {'cpu ms/turn':>11} {'errors':>6} "
          f"{'thread UPDATEs/turn':>19}")
    for db in databases:
        med = {on: median_result(results[(db, on)]) for on in (True, False)}
        for on, r in med.items():
            print(f"{db:11} {'on' if on else 'off':11} {r['rps']:8.2f} "
                  f"{r['rps'] * args.tokens:9.0f} {r['p50']:8.1f} {r['ttft50']:8.1f} "
                  f"{r['cpu_ms']:11.2f} {sum(r['errors'].values()):>6} "
                  + (f"{r['updates']:19.2f}" if "updates" in r else f"{'-':>19}"))
        on, off = med[True], med[False]
        print(f"{db:11} {'on/off':11} {on['rps'] / off['rps']:7.3f}x {'':>9} {'':>8} "
              f"{'':>8} {on['cpu_ms'] / off['cpu_ms']:10.3f}x "
              f"({on['cpu_ms'] - off['cpu_ms']:+.2f} ms)")


if __name__ == "__main__":
    main()
