#!/usr/bin/env python3
"""The live feed (/ws) under load: delivery rate, latency, and what subscribers cost /v1.

Starts a real Gaia server (uvicorn, one worker; SQLite in a throwaway data dir unless
DATABASE_URL) with a `fake`-provider agent, an operator key and a chat key, then measures:

1. events/s delivered to 1, 10 and 100 subscribers: a separate process with no event loop
   (as a Celery worker or a management command) publishes `--events` events as fast as it
   can through agents.outlet.realtime; subscribers (aiohttp WebSockets in a child process) count
   what they receive. Needs REDIS_URL (the only way events cross processes).
2. event latency p50/p99 from commit to client: the publisher commits a transaction every
   10 ms and builds the event in its on-commit callback, stamping the commit time; the
   subscriber subtracts it from the time it parsed the event. With 1 and 100 subscribers.
3. /v1 JSON requests/s at concurrency 16 with 0 and with 100 subscribers connected (each
   receiving every event the requests cause: about 7 per request), with the server's CPU time
   per request (from /proc). Target: < 10 % lower.

  .venv/bin/python -m scripts.perf.feed [--events 5000] [--duration 8] [--subscribers 1,10,100]
      [--pin] [--rounds 1] [--modes single,batch]
  .venv/bin/python -m scripts.perf.feed --side-by-side batch [--rounds 3] [--duration 6]

3 compares runs one after another, each with subscribers between two without (``--rounds``).
On a shared machine one server's throughput drifts by 15 % between identical runs, more than
the effect measured; ``--side-by-side MODE`` measures it instead on two identical servers
sharing one core at the same time, 100 MODE subscribers on one of them (alternately): the
ratio of their throughputs is the ratio of their CPU costs per request, and the machine's
drift affects both alike.

Everything shares the machine's CPU (2 cores here): the subscribers' own CPU use is printed.
With ``--pin`` the server runs on the first core and everything else (the load generator, the
subscribers, the publisher) on the others, so that what the subscribers' client burns is not
taken from the server: requests/s then measures what the feed costs the server alone.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import resource
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import aiohttp

from scripts.perf.harness import REPLY, ROOT, Load, free_port, percentile

MANAGE = [sys.executable, str(ROOT / "manage.py")]


# ---------------------------------------------------------------------------------------------
# The subscriber pool (a child process: `python -m scripts.perf.feed --child URL KEY N SECONDS
# PREFIX EXPECT`)


async def child_main(url: str, key: str, n: int, seconds: float, prefix: str,
                     expect: int) -> None:
    """Open ``n`` feed sockets, say "ready", then read for at most ``seconds`` (or until each
    saw ``expect`` events whose reason starts with ``prefix``, or SIGUSR1); print one JSON
    line."""
    first: float | None = None
    last = 0.0
    counts = [0] * n
    lat: list[float] = []
    total = [0]
    lagged = [0]
    done = asyncio.Event()

    async def one(i: int, session: aiohttp.ClientSession, ready: asyncio.Event,
                  opened: list[int]) -> None:
        nonlocal first, last
        async with session.ws_connect(url, headers={"Authorization": f"Bearer {key}"},
                                      max_msg_size=0) as ws:
            hello = json.loads((await ws.receive()).data)
            hello = hello[0] if isinstance(hello, list) else hello
            assert hello["event"] == "connected", hello
            opened[0] += 1
            if opened[0] == n:
                ready.set()
            async for msg in ws:
                if prefix == "-" and '"lagged"' not in msg.data:
                    # Only counting (while /v1 is measured): no JSON parsing, so that the
                    # subscribers' own CPU takes as little as it can from the server's.
                    total[0] += msg.data.count('"seq":')
                    continue
                now = time.time()
                data = json.loads(msg.data)
                for event in data if isinstance(data, list) else (data,):
                    total[0] += 1
                    if event["event"] == "lagged":
                        lagged[0] += event["missed"]
                    reason = event.get("reason") or ""
                    if not reason.startswith(prefix):
                        continue
                    if prefix == "lat:":
                        lat.append(now - float(reason[4:]))
                    first = now if first is None else first
                    last = now
                    counts[i] += 1
                    if expect and all(c >= expect for c in counts):
                        done.set()

    connector = aiohttp.TCPConnector(limit=0)
    async with aiohttp.ClientSession(connector=connector) as session:
        ready = asyncio.Event()
        opened = [0]
        tasks = [asyncio.create_task(one(i, session, ready, opened)) for i in range(n)]
        await asyncio.wait_for(ready.wait(), 60)
        asyncio.get_running_loop().add_signal_handler(signal.SIGUSR1, done.set)
        cpu0 = resource.getrusage(resource.RUSAGE_SELF)
        print("ready", flush=True)

        async def idle() -> None:  # events stopped coming (some were dropped: lagged)
            while first is None or time.time() - last < 2.0:  # noqa: ASYNC110 - a poll
                await asyncio.sleep(0.2)
            done.set()

        watchdog = asyncio.create_task(idle()) if expect else None
        try:
            await asyncio.wait_for(done.wait(), seconds)
        except TimeoutError:
            pass
        if watchdog is not None:
            watchdog.cancel()
        cpu1 = resource.getrusage(resource.RUSAGE_SELF)
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
    cpu = (cpu1.ru_utime + cpu1.ru_stime) - (cpu0.ru_utime + cpu0.ru_stime)
    print(json.dumps({"counts": counts, "first": first, "last": last, "lat": lat,
                      "total": total[0], "lagged": lagged[0], "cpu": cpu}), flush=True)


class Subscribers:
    def __init__(self, ws_url: str, key: str, n: int, seconds: float, prefix: str = "-",
                 expect: int = 0) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "scripts.perf.feed", "--child", ws_url, key, str(n),
             str(seconds), prefix, str(expect)], stdout=subprocess.PIPE, text=True, cwd=ROOT)
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline().strip()
        if line != "ready":
            raise RuntimeError(f"subscribers did not start: {line!r}")

    def result(self, *, stop: bool = False) -> dict[str, Any]:
        if stop:
            self.proc.send_signal(signal.SIGUSR1)
        out, _ = self.proc.communicate(timeout=120)
        return json.loads(out.strip().splitlines()[-1])


# ---------------------------------------------------------------------------------------------
# Publishing from a process without an event loop

BURST = """
import time
from agents.outlet import realtime
for i in range({n}):
    realtime.send_event(realtime.event("config_changed", reason=f"perf:{{i}}"))
    if i % 100 == 99:
        time.sleep(0.002)  # offered: at most 50,000 events/s, in bursts of 100
"""

PACED = """
import time
from django.db import transaction
from agents.outlet import realtime
from agents.models import ConfigStamp
t0 = time.perf_counter()
for i in range({n}):
    with transaction.atomic():
        ConfigStamp.objects.filter(pk=1).exists()
        realtime.send_event_on_commit(
            lambda: realtime.event("config_changed", reason=f"lat:{{time.time()!r}}"))
    time.sleep(max(0, t0 + (i + 1) * {interval} - time.perf_counter()))
"""


def publish(env: dict[str, str], code: str) -> None:
    subprocess.run([*MANAGE, "shell", "-c", code], env=env, check=True, cwd=ROOT)


SERVER_CPUS: set[int] | None = None  # --pin: the server's core; this process has the rest


def pin(cores: set[int] | None) -> Any:
    """A ``preexec_fn`` that runs the child on ``cores`` (None: wherever it likes)."""
    if cores is None:
        return None
    return lambda: os.sched_setaffinity(0, cores)


# ---------------------------------------------------------------------------------------------


def start_server(env: dict[str, str]) -> tuple[subprocess.Popen[bytes], str, str, str]:
    subprocess.run([*MANAGE, "migrate", "-v", "0"], env=env, check=True, cwd=ROOT)
    setup = (
        "from agents.models import Provider, Agent, ApiKey\n"
        "from agents.services import api_key_create\n"
        "p, _ = Provider.objects.update_or_create(name='perf', defaults=dict(kind='fake', "
        f"max_concurrency=1000, options={{'reply': {REPLY!r}}}))\n"
        "Agent.objects.update_or_create(slug='perf', defaults=dict(display_name='Perf', "
        "provider=p, max_output_tokens=512))\n"
        "print(api_key_create(name='perf')[1])\n"
        "print(api_key_create(name='perf-ops', scopes=[ApiKey.Scope.OPERATOR])[1])\n"
    )
    out = subprocess.run([*MANAGE, "shell", "-c", setup], env=env, check=True, cwd=ROOT,
                         capture_output=True, text=True)
    chat_key, ops_key = out.stdout.strip().splitlines()[-2:]
    port = free_port()
    from gaia_site.server_cli import server_command

    log = open(Path(env["GAIA_DATA_DIR"]) / "server.log", "wb")  # noqa: SIM115
    cmd = server_command("127.0.0.1", port)
    if os.environ.get("GAIA_PERF_PROFILE"):  # a cProfile dump of the server, written at exit
        cmd[1:1] = ["-m", "cProfile", "-o", os.environ["GAIA_PERF_PROFILE"]]
    proc = subprocess.Popen(cmd, env=env, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT,
                            preexec_fn=pin(SERVER_CPUS))  # noqa: PLW1509 - no threads yet
    base = f"http://127.0.0.1:{port}"
    for _ in range(300):
        try:
            import httpx

            httpx.get(base + "/health", timeout=1)
            break
        except Exception:
            time.sleep(0.1)
    return proc, base, chat_key, ops_key


async def _loads_together(servers: list[tuple[str, str, int]], seconds: float,
                          warmup: float) -> list[dict[str, Any]]:
    return list(await asyncio.gather(*(
        Load(base, key, "chat", False, server_pid=pid).run(16, seconds, warmup)
        for base, key, pid in servers)))


def side_by_side(args: argparse.Namespace, mode: str) -> None:
    """Two identical servers on the same core at the same time, each under /v1 load at c=16,
    100 ``mode`` subscribers on one of them (alternately). The core is shared fairly, so the
    ratio of their throughputs is the ratio of their CPU costs per request, measured in the
    same seconds: whatever the machine's speed does meanwhile, it does to both."""
    path = "/ws?batch=1" if mode == "batch" else "/ws"
    with tempfile.TemporaryDirectory(prefix="gaia-perf-a-") as tmp_a, \
            tempfile.TemporaryDirectory(prefix="gaia-perf-b-") as tmp_b:
        started = [start_server({**os.environ, "GAIA_DATA_DIR": tmp}) for tmp in (tmp_a, tmp_b)]
        rows = []
        try:
            for i in range(2 * args.rounds):
                watched = i % 2
                proc, base, _, ops_key = started[watched]
                subs = Subscribers(base.replace("http://", "ws://") + path, ops_key, 100,
                                   args.duration + args.warmup + 30)
                results = asyncio.run(_loads_together(
                    [(b, key, p.pid) for p, b, key, _ in started], args.duration, args.warmup))
                extra = subs.result(stop=True)
                with_subs, without = results[watched], results[1 - watched]
                rows.append((watched, with_subs, without, extra))
                print(f"  side by side: {with_subs['rps']:.1f} req/s with 100 {mode} "
                      f"subscribers, {without['rps']:.1f} without", file=sys.stderr)
        finally:
            for proc, *_ in started:
                proc.terminate()
                proc.wait(10)
    db = "PostgreSQL" if os.environ.get("DATABASE_URL", "").startswith("postgres") else "SQLite"
    print(f"\nTwo Gaia servers side by side on one core (uvicorn, 1 worker each, {db}), /v1 "
          f"JSON at c=16 on each at once ({args.duration:g} s), 100 {mode} subscribers on one\n")
    print(f"{'round':>5} {'server':>6} {'with subs req/s':>15} {'without req/s':>13} "
          f"{'ratio':>6} {'cpu ms/req with':>15} {'without':>8} {'events to subs':>14}")
    ratios = []
    for i, (watched, w, wo, extra) in enumerate(rows):
        ratio = w["rps"] / wo["rps"] if wo["rps"] else float("nan")
        ratios.append(ratio)
        print(f"{i + 1:>5} {'AB'[watched]:>6} {w['rps']:15.1f} {wo['rps']:13.1f} {ratio:6.3f} "
              f"{w['cpu_ms']:15.2f} {wo['cpu_ms']:8.2f} {extra['total']:>14}")
    print(f"100 {mode} subscribers cost {100 * (1 - percentile(ratios, 50)):.1f} % of /v1 "
          f"throughput (median of {len(ratios)} side-by-side runs, range "
          f"{100 * (1 - max(ratios)):.1f} to {100 * (1 - min(ratios)):.1f} %; target < 10 %)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--events", type=int, default=5000)
    parser.add_argument("--subscribers", default="1,10,100")
    parser.add_argument("--duration", type=float, default=8.0)
    parser.add_argument("--warmup", type=float, default=2.0)
    parser.add_argument("--rounds", type=int, default=1,
                        help="runs with subscribers per mode, each between two without")
    parser.add_argument("--modes", default="single,batch",
                        help="the subscriber modes to measure /v1 with (single, batch)")
    parser.add_argument("--pin", action="store_true",
                        help="the server on the first core, everything else on the others")
    parser.add_argument("--side-by-side", metavar="MODE", choices=("single", "batch"),
                        help="only the /v1 cost of 100 MODE subscribers, measured on two "
                             "servers sharing one core at the same time (implies --pin)")
    args = parser.parse_args()
    redis = os.environ.get("REDIS_URL", "")
    global SERVER_CPUS
    if args.pin or args.side_by_side:
        cores = sorted(os.sched_getaffinity(0))
        if len(cores) < 2:
            raise SystemExit("--pin needs two cores")
        SERVER_CPUS = {cores[0]}
        os.sched_setaffinity(0, set(cores[1:]))  # inherited by the subscribers and publisher
    if args.side_by_side:
        side_by_side(args, args.side_by_side)
        return
    with tempfile.TemporaryDirectory(prefix="gaia-perf-feed-") as tmp:
        env = {**os.environ, "GAIA_DATA_DIR": tmp}
        proc, base, chat_key, ops_key = start_server(env)
        ws_url = base.replace("http://", "ws://") + "/ws"
        rates, lats, v1 = [], [], []
        modes = {"single": ws_url, "batch": ws_url + "?batch=1"}
        try:
            if redis:
                for mode, url in modes.items():
                    for n in [int(x) for x in args.subscribers.split(",")]:
                        subs = Subscribers(url, ops_key, n, 60, "perf:", args.events)
                        publish(env, BURST.format(n=args.events))
                        r = subs.result()
                        span = max(r["last"] - r["first"], 1e-9) if r["first"] else float("nan")
                        got = sum(r["counts"])
                        rates.append((mode, n, got, n * args.events, got / span, r["lagged"],
                                      r["cpu"]))
                        print(f"  {mode} {n:>3} subscribers: {got / span:9.0f} deliveries/s "
                              f"({got}/{n * args.events}, lagged {r['lagged']})",
                              file=sys.stderr)
                    for n in (1, 100):
                        count = 300
                        subs = Subscribers(url, ops_key, n, 30, "lat:", count)
                        publish(env, PACED.format(n=count, interval=0.01))
                        r = subs.result()
                        lat = [x * 1000 for x in r["lat"]]
                        lats.append((mode, n, len(lat), percentile(lat, 50),
                                     percentile(lat, 99)))
                        print(f"  {mode} latency with {n} subscribers: p50 {lats[-1][3]:.1f} ms "
                              f"p99 {lats[-1][4]:.1f} ms", file=sys.stderr)
            # Each run with subscribers between two without: the server's speed drifts by
            # several % over a few runs (the database grows), so each is compared with its
            # own neighbours.
            order: list[tuple[str, int]] = [("-", 0)]
            for _ in range(args.rounds):
                for mode in (m for m in args.modes.split(",") if m):
                    order += [(mode, 100), ("-", 0)]
            for mode, n in order:
                subs = (Subscribers(modes[mode], ops_key, n, args.duration + args.warmup + 30)
                        if n else None)
                r = asyncio.run(Load(base, chat_key, "chat", False, server_pid=proc.pid).run(
                    16, args.duration, args.warmup))
                extra = subs.result(stop=True) if subs else None
                v1.append((mode, n, r, extra))
                print(f"  /v1 c=16 with {n} {mode} subscribers: {r['rps']:.1f} req/s, "
                      f"server {r['cpu_ms']:.2f} ms CPU per request", file=sys.stderr)
        finally:
            proc.terminate()
            proc.wait(10)

    mode = "Redis" if redis else "in-memory layer"
    db = "PostgreSQL" if os.environ.get("DATABASE_URL", "").startswith("postgres") else "SQLite"
    pinned = ", server pinned to one core, clients to the other" if args.pin else ""
    print(f"\nGaia live feed (/ws): uvicorn, 1 worker, {mode}, {db}{pinned}\n")
    if rates:
        print(f"events published as fast as possible by another process ({args.events} each);"
              " single: one event per message, batch: /ws?batch=1")
        print(f"{'mode':>6} {'subscribers':>11} {'delivered':>14} {'deliveries/s':>13} "
              f"{'events/s/sub':>13} {'lagged':>7} {'sub cpu s':>9}")
        for mode, n, got, want, rate, lagged, cpu in rates:
            print(f"{mode:>6} {n:>11} {got:>7}/{want:<6} {rate:13.0f} {rate / n:13.0f} "
                  f"{lagged:>7} {cpu:9.2f}")
        print("\nlatency from commit to client (100 commits/s)")
        print(f"{'mode':>6} {'subscribers':>11} {'events':>7} {'p50 ms':>8} {'p99 ms':>8}")
        for mode, n, k, p50, p99 in lats:
            print(f"{mode:>6} {n:>11} {k:>7} {p50:8.1f} {p99:8.1f}")
    else:
        print("(events/s and latency need REDIS_URL: the publisher is another process)")
    print(f"\n/v1/chat/completions JSON at concurrency 16 ({args.duration:g} s each, in the "
          "order run)")
    print(f"{'mode':>6} {'subscribers':>11} {'req/s':>8} {'p50 ms':>8} {'p99 ms':>8} "
          f"{'errors':>6} {'server cpu ms/req':>17} {'events to subs':>14} {'sub cpu s':>9}")
    for mode, n, r, extra in v1:
        events = extra["total"] if extra else 0
        cpu = f"{extra['cpu']:9.2f}" if extra else f"{'-':>9}"
        print(f"{mode:>6} {n:>11} {r['rps']:8.1f} {r['p50']:8.1f} {r['p99']:8.1f} "
              f"{sum(r['errors'].values()):>6} {r['cpu_ms']:17.2f} {events:>14} {cpu}")
    costs: dict[str, list[tuple[float, float]]] = {}
    for i, (mode, n, r, _) in enumerate(v1):
        if not n:
            continue
        before, after = v1[i - 1][2], v1[i + 1][2]
        base_rps = (before["rps"] + after["rps"]) / 2
        base_cpu = (before["cpu_ms"] + after["cpu_ms"]) / 2
        if base_rps and base_cpu:
            costs.setdefault(mode, []).append((100 * (1 - r["rps"] / base_rps),
                                               100 * (r["cpu_ms"] / base_cpu - 1)))
    for mode, runs in costs.items():
        drops = ", ".join(f"{d:.1f}" for d, _ in runs)
        mores = ", ".join(f"{m:.1f}" for _, m in runs)
        print(f"100 {mode} subscribers cost {percentile([d for d, _ in runs], 50):.1f} % of "
              f"/v1 throughput and add {percentile([m for _, m in runs], 50):.1f} % server CPU "
              f"per request (median of {len(runs)}: {drops} % and {mores} %; each against "
              "the mean of the runs without just before and after; target < 10 %)")


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        url, key, n, seconds, prefix, expect = sys.argv[2:8]
        asyncio.run(child_main(url, key, int(n), float(seconds), prefix, int(expect)))
    else:
        main()
