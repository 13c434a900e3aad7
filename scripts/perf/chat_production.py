"""``python -m scripts.perf.chat --production``: SQLite and PostgreSQL + Redis side by side,
each set up and started as a user starts it (the gaia CLI on defaults alone), interleaved rounds;
with ``--load-generator shared`` the cells are driven by ../shared/perf/load.py. Run it through
chat.py (its options and help live there)."""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from scripts.perf.harness import (
    ROOT,
    Load,
    free_port,
    median_result,
    proc_tree_cpu,
    services_cpu,
    start_upstream,
    terminate,
    wait_port,
)

# ---------------------------------------------------------------------------------------------
# --production: SQLite and PostgreSQL + Redis side by side, each started as a user starts it.

# What a user's shell plausibly holds; every other variable (GAIA_*, DJANGO_*, a CI's
# settings) is left out, so the server runs on Gaia's defaults alone.
_USER_ENV = ("PATH", "HOME", "LANG", "LC_ALL", "TMPDIR", "USER", "LOGNAME")


def production_env(data_dir: Path, database_url: str | None, redis_url: str | None
                   ) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k in _USER_ENV}
    env["GAIA_DATA_DIR"] = str(data_dir)  # where a SQLite leg keeps its file (and the key)
    if database_url:
        env["DATABASE_URL"] = database_url
    if redis_url:
        env["REDIS_URL"] = redis_url
    return env


def start_production(data_dir: Path, env: dict[str, str], upstream_url: str,
                     max_output_tokens: int | None = None
                     ) -> tuple[subprocess.Popen[bytes], str, str]:
    """Gaia as a user runs it: ``manage.py migrate``, ``gaia agents import`` of an ``openai``
    provider (every setting left at its default but the upstream's URL, and the agent's output
    limit when given), ``gaia keys create``, then ``gaia api start`` (it execs uvicorn: the
    process is the server)."""
    data_dir.mkdir(parents=True, exist_ok=True)
    python = sys.executable
    gaia = [python, "-m", "gaia_site.cli"]
    subprocess.run([python, str(ROOT / "manage.py"), "migrate", "-v", "0"], env=env,
                   check=True, cwd=ROOT)
    config = data_dir / "agents.yaml"
    config.write_text(
        "providers:\n"
        f"  - {{name: upstream, kind: openai, base_url: '{upstream_url}', "
        "default_model: fake-model}\n"
        "agents:\n"
        "  - {slug: perf-openai, display_name: Perf, provider: upstream"
        + (f", max_output_tokens: {max_output_tokens}" if max_output_tokens else "") + "}\n")
    subprocess.run([*gaia, "agents", "import", str(config)], env=env, check=True, cwd=ROOT,
                   capture_output=True)
    out = subprocess.run([*gaia, "keys", "create", "--name", "perf"], env=env, check=True,
                         cwd=ROOT, capture_output=True, text=True)
    key = next(w for w in out.stdout.split() if w.startswith("gaia_"))
    port = free_port()
    log = open(data_dir / "server.log", "wb")  # noqa: SIM115 - lives as long as the server
    proc = subprocess.Popen([*gaia, "api", "start", "--port", str(port)], env=env, cwd=ROOT,
                            stdout=log, stderr=subprocess.STDOUT)
    wait_port(port, proc)
    return proc, f"http://127.0.0.1:{port}", key


SHARED_LOAD = ROOT.parent / "shared" / "perf" / "load.py"


def shared_load(load_py: Path, base: str, key: str, mode: str, c: int, duration: float,
                warmup: float, server_pid: int) -> dict[str, Any]:
    """One cell driven by the shared load generator (``load.py``, its own process, uvloop) in
    place of this script's: the issue's harness. Server CPU is read after its warmup."""
    cmd = [sys.executable, str(load_py), "--base-url", base + "/v1", "--api-key", key,
           "--model", "perf-openai", "--mode", mode, "-c", str(c), "-d", str(duration),
           "--warmup", str(warmup)]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, cwd=ROOT)
    time.sleep(warmup)
    cpu0, services0 = proc_tree_cpu(server_pid), services_cpu()
    out, _ = proc.communicate(timeout=duration + warmup + 120)
    cpu = proc_tree_cpu(server_pid) - cpu0
    services = services_cpu() - services0
    data = json.loads(out)
    ok, window = data["ok"], data["window_s"]
    ttft = data.get("ttft_ms") or {}
    return {
        "rps": data["rps"], "p50": data["latency_ms"]["p50"] or float("nan"),
        "p99": data["latency_ms"]["p99"] or float("nan"),
        "ttft50": ttft.get("p50") or float("nan"), "ttft99": ttft.get("p99") or float("nan"),
        "ok": ok, "errors": data["errors"], "client_cpu": data["client_cpu_s"] / window,
        "server_cpu": cpu / window, "cpu_ms": cpu / ok * 1000 if ok else float("nan"),
        "services_ms": services / ok * 1000 if ok else float("nan"),
    }


def production(args: argparse.Namespace) -> None:
    """Every cell on both databases in turn (SQLite, then PostgreSQL + Redis), round after
    round, against servers started by :func:`start_production`; one table with the ratios."""
    database_url = os.environ.get("DATABASE_URL", "")
    redis_url = os.environ.get("REDIS_URL", "")
    if "postgres" not in database_url or not redis_url:
        raise SystemExit("--production needs DATABASE_URL (PostgreSQL) and REDIS_URL set")
    legs = {"sqlite": (None, None), "pg+redis": (database_url, redis_url)}
    with tempfile.TemporaryDirectory(prefix="gaia-perf-") as tmp:
        upstream, upstream_url = start_upstream(args.upstream, Path(tmp))
        servers: dict[str, tuple[subprocess.Popen[bytes], str, str]] = {}
        try:
            for leg, (db, redis) in legs.items():
                data_dir = Path(tmp) / leg
                servers[leg] = start_production(
                    data_dir, production_env(data_dir, db, redis), upstream_url)
            cells = [(mode, int(c)) for mode in args.modes.split(",")
                     for c in args.concurrency.split(",")]
            results: dict[tuple[str, int, str], list[dict[str, Any]]] = {}
            for n in range(args.rounds):
                for mode, c in cells:
                    # Alternate which leg goes first, so neither always follows the other.
                    order = list(legs) if n % 2 == 0 else list(reversed(legs))
                    for leg in order:
                        proc, base, key = servers[leg]
                        if args.load_generator == "shared":
                            r = shared_load(SHARED_LOAD, base, key, mode, c, args.duration,
                                            args.warmup, proc.pid)
                        else:
                            load = Load(base, key, "chat", mode == "stream",
                                        model="perf-openai", expected=None,
                                        server_pid=proc.pid)
                            r = asyncio.run(load.run(c, args.duration, args.warmup))
                        results.setdefault((mode, c, leg), []).append(r)
                        print(f"  [{n + 1}/{args.rounds}] {leg:8} {mode:6} c={c:<3} "
                              f"{r['rps']:7.1f} req/s p50 {r['p50']:6.1f} p99 {r['p99']:6.1f}"
                              + (f" ttft p50 {r['ttft50']:6.1f} p99 {r['ttft99']:6.1f}"
                                 if mode == "stream" else "")
                              + f" cpu {r['cpu_ms']:5.2f} ms/req"
                              + f" (+{r['services_ms']:4.2f} db/redis)"
                              + (f"  errors {r['errors']}" if r["errors"] else ""),
                              file=sys.stderr, flush=True)
        finally:
            terminate((proc for proc, _, _ in servers.values()), 15)
            terminate([upstream], 10)
    print(f"\nGaia /v1/chat/completions, started as `gaia api start` with nothing else set, "
          f"agent kind openai on a fake upstream (32 tokens); {args.duration:g} s per cell, "
          f"medians of {args.rounds} interleaved round(s); load generator: "
          f"{args.load_generator}\n")
    print(f"{'mode':6} {'conc':>4} {'database':9} {'req/s':>8} {'p50 ms':>8} {'p99 ms':>8} "
          f"{'p99/p50':>7} {'ttft p50':>9} {'ttft p99':>9} {'t99/t50':>7} {'errors':>6} "
          f"{'cpu ms/req':>10} {'+db/redis':>9} {'= total':>8} {'client cpu':>10}")
    for mode, c in cells:
        med = {leg: median_result(results[(mode, c, leg)]) for leg in legs}
        for leg, r in med.items():
            stream = mode == "stream"
            print(f"{mode:6} {c:>4} {leg:9} {r['rps']:8.1f} {r['p50']:8.1f} {r['p99']:8.1f} "
                  f"{r['p99'] / r['p50']:7.2f} "
                  + (f"{r['ttft50']:9.1f} {r['ttft99']:9.1f} {r['ttft99'] / r['ttft50']:7.2f} "
                     if stream else f"{'-':>9} {'-':>9} {'-':>7} ")
                  + f"{sum(r['errors'].values()):>6} {r['cpu_ms']:10.2f} "
                  f"{r['services_ms']:9.2f} {r['cpu_ms'] + r['services_ms']:8.2f} "
                  f"{r['client_cpu']:10.2f}")
        lite, pg = med["sqlite"], med["pg+redis"]

        def total(r: dict[str, Any]) -> float:
            return r["cpu_ms"] + r["services_ms"]

        print(f"{mode:6} {c:>4} {'pg/sqlite':9} {pg['rps'] / lite['rps']:7.2f}x "
              f"{'':>8} {'':>8} {'':>7} {'':>9} {'':>9} {'':>7} {'':>6} "
              f"{pg['cpu_ms'] / lite['cpu_ms']:9.2f}x {'':>9} "
              f"{total(pg) / total(lite):7.2f}x")


