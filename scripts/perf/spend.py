#!/usr/bin/env python3
"""What budgets cost a turn (issue 41: at most 0.3 ms of server CPU with three budgets).

Starts a real Gaia server (``gaia api start``'s command, uvicorn) on a throwaway SQLite data
dir (or DATABASE_URL, with REDIS_URL if set) with the ``perf`` agent on the fake provider (32
tokens, no delay: Gaia's own cost) priced by an admin at $1/$2 a million tokens and three
budgets that apply to a key's every turn (the key's in USD, the agent's in tokens, a global
one in USD; limits no turn reaches), then asks it ``--turns`` JSON turns in a row over
``/v1/chat/completions``, in alternating rounds: with that key (three budgets), and with a key
staff exempted from every budget (none applies: the same path as no budget at all). The
figure is the server process's CPU (user + system, from /proc) per turn over a round: the
medians of each, and the median of each "three" round less the "none" round just before it
(this VM's pace drifts between rounds by more than the figure measured: short rounds, many
of them, paired). With two cores or more the server runs pinned to the first, this client
on the others. On PostgreSQL the database's (and Redis') own CPU is printed beside it.

  .venv/bin/python -m scripts.perf.spend [--turns 100] [--rounds 30] [--verbose]
  DATABASE_URL=postgres://... REDIS_URL=redis://... .venv/bin/python -m scripts.perf.spend
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

from scripts.perf.chat import start_server
from scripts.perf.harness import REPLY, ROOT, proc_tree_cpu, services_cpu

BUDGETS = [
    {"name": "perf-key", "scope": "key", "unit": "usd", "limit": "100000", "period": "day"},
    {"name": "perf-agent", "scope": "agent", "agent": "perf", "unit": "tokens",
     "limit": "100000000", "period": "month", "soft_percent": 90},
    {"name": "perf-global", "scope": "global", "unit": "usd", "limit": "100000",
     "period": "total"},
]


async def turns(base: str, key: str, count: int) -> None:
    async with httpx.AsyncClient(base_url=base, timeout=60,
                                 headers={"Authorization": f"Bearer {key}"}) as client:
        for _ in range(count):
            r = await client.post("/v1/chat/completions", json={
                "model": "perf", "messages": [{"role": "user", "content": "Hello"}]})
            assert r.status_code == 200, r.text[:300]
            assert r.json()["choices"][0]["message"]["content"] == REPLY


def setup(data_dir: Path, key: str) -> str:
    """The price of the fake model, the three budgets (made as the API makes them), and a
    second key staff exempted from every budget; returns that key."""
    env = {**os.environ, "GAIA_DATA_DIR": str(data_dir)}
    code = ("from agents.models import ApiKey, Budget, ModelPrice, Provider\n"
            "from agents.services import Actor, api_key_create, budget_save\n"
            "cli = Actor(label='cli', channel='cli')\n"
            "Budget.objects.filter(name__startswith='perf-').delete()  # an earlier run's\n"
            "ApiKey.objects.filter(name='perf-exempt').delete()\n"
            "ModelPrice.objects.update_or_create(provider=Provider.objects.get(name='perf'), "
            "model='', defaults=dict(input_per_mtok=1, output_per_mtok=2))\n"
            f"for body in {BUDGETS!r}:\n"
            f"    body = {{**body, 'key': {key[:13]!r}}} if body['scope'] == 'key' else body\n"
            "    budget_save(budget=None, fields=body, actor=cli)\n"
            "print(api_key_create(name='perf-exempt', budget_exempt=True, actor=cli)[1])\n")
    out = subprocess.run([sys.executable, str(ROOT / "manage.py"), "shell", "-c", code],
                         env=env, check=True, cwd=ROOT, capture_output=True, text=True)
    return out.stdout.strip().splitlines()[-1]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--turns", type=int, default=100, help="per round")
    parser.add_argument("--rounds", type=int, default=30)
    parser.add_argument("--verbose", action="store_true", help="print every round")
    args = parser.parse_args()
    args.workers, args.server, args.server_cores = 1, "uvicorn", None
    cores = sorted(os.sched_getaffinity(0))
    if len(cores) >= 2:  # the server on a core of its own, this client on the others
        args.server_cores = {cores[0]}
        os.sched_setaffinity(0, set(cores[1:]))
    postgres = (os.environ.get("DATABASE_URL") or "").startswith("postgres")
    figures: dict[str, list[float]] = {"none": [], "three": []}
    database: dict[str, list[float]] = {"none": [], "three": []}
    with tempfile.TemporaryDirectory(prefix="gaia-spend-") as tmp:
        proc, base, key = start_server(args, Path(tmp))
        try:
            keys = {"three": key, "none": setup(Path(tmp), key)}
            for k in keys.values():  # warm: imports, caches, the first connections
                asyncio.run(turns(base, k, 30))
            for n in range(args.rounds):
                for name in ("none", "three"):
                    cpu0, db0 = proc_tree_cpu(proc.pid), services_cpu() if postgres else 0
                    t0 = time.perf_counter()
                    asyncio.run(turns(base, keys[name], args.turns))
                    wall = (time.perf_counter() - t0) / args.turns * 1000
                    cpu = (proc_tree_cpu(proc.pid) - cpu0) / args.turns * 1000
                    db = ((services_cpu() - db0) / args.turns * 1000) if postgres else 0.0
                    figures[name].append(cpu)
                    database[name].append(db)
                    if args.verbose:
                        print(f"  [{n + 1}/{args.rounds}] {name:5} budgets: {cpu:6.3f} ms "
                              f"server CPU/turn" + (f", {db:6.3f} ms PostgreSQL" if postgres
                                                    else "")
                              + f" ({wall:6.2f} ms wall)", flush=True)
        finally:
            proc.terminate()
            proc.wait(10)
    none, three = (statistics.median(figures[n]) for n in ("none", "three"))
    paired = statistics.median(
        b - a for a, b in zip(figures["none"], figures["three"], strict=True))
    setup_name = "PostgreSQL + Redis" if postgres else "SQLite"
    print(f"\n{setup_name}: server CPU per JSON turn, medians of {args.rounds} rounds of "
          f"{args.turns}: no budget {none:.3f} ms, three budgets {three:.3f} ms; each round "
          f"against the one before it: +{paired:.3f} ms (median; target <= 0.3 ms)")
    if postgres:
        d_none, d_three = (statistics.median(database[n]) for n in ("none", "three"))
        d_paired = statistics.median(b - a for a, b in zip(database["none"],
                                                           database["three"], strict=True))
        print(f"PostgreSQL's (and Redis') own CPU per turn: {d_none:.3f} ms, {d_three:.3f} ms: "
              f"+{d_paired:.3f} ms (paired median)")


if __name__ == "__main__":
    main()
