#!/usr/bin/env python3
"""What replaying stored conversations costs: cases/s of a replay run with 1 and 2 workers, the
scoring cost per case of each scorer, and what a nightly replay of 10,000 conversations takes.
Prints figures; asserts nothing.

    .venv/bin/python scripts/perf/replay.py [--cases 200] [--rounds 3] [--concurrency 4]
    DATABASE_URL=postgres://... REDIS_URL=redis://127.0.0.1:6379/N .venv/bin/python \\
        scripts/perf/replay.py

Sets up a scratch Gaia (a temporary data dir; SQLite there, or DATABASE_URL's database,
migrated) with agents on the ``fake`` provider, no delay: ``perf-source`` owns ``--cases``
stored conversations (seeded through the thread services, as a client's turns store them: a
support question of about 25 words and a reply of about 50), ``perf-target`` answers every
case with the same 45-word reply, ``perf-judge`` answers the judge's verdict JSON. Starts a
real server (uvicorn) and makes a suite from the threads (``POST /suites``, ``from_threads``);
then:

1. **cases/s, end to end**: from ``POST /runs`` to the run's ``finished_at`` (``succeeded``),
   ``--rounds`` times, median. With ``REDIS_URL``: real Celery worker processes (``-P solo``,
   as ``tests/benchmarks/processes.py`` starts them) and ``parallel`` = the number of workers;
   without: the server's embedded worker (one thread: ``parallel 2`` runs its two parts one
   after the other). Also the workers' CPU per case (from /proc) and the database's growth per
   case. Then one replay with the judge (a second turn a case).
2. **scoring cost per case**, in this process over the suite's cases and the last run's
   replies: exact match, token F1, ROUGE-L (``mesh.evaluation``), embedding similarity
   (WordLlama via ``benchmarks.replay.scoring``; its one-off load apart), the whole
   ``scoring.score``, and the judge's turn (``agents.turns.turn_replay`` to the fake judge with
   the verdict schema, a thread of the run, then ``scoring.judge_parse``); median and p90.
3. **a nightly replay of 10,000 conversations**, extrapolated from 1 and 2 (linearly: said so).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import datetime
from pathlib import Path
from typing import Any

import httpx

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from chat import free_port, percentile, proc_tree_cpu, wait_port  # noqa: E402

API = "/api/v1/benchmarks"
VERDICT = '{"score": 0.6, "verdict": "worse", "reason": "It misses the specific steps."}'
TARGET_REPLY = (
    "Thanks for reaching out. You can change this from the account settings page: open "
    "Settings, choose the section you need, make the change and save it. If the option is "
    "greyed out, your plan may not include it; contact support with your account id and we "
    "will check it for you.")
THINGS = ["invoice", "password", "billing address", "team seat", "API key", "export",
          "webhook", "two-factor login", "workspace name", "data retention"]
PLANS = ["free", "starter", "team", "business", "enterprise"]


def question(i: int) -> str:
    thing, plan = THINGS[i % len(THINGS)], PLANS[i % len(PLANS)]
    return (f"Hi, how do I change the {thing} on our {plan} plan? I tried the dashboard "
            f"yesterday (attempt {i}) but the page just reloads and nothing is saved.")


def reference(i: int) -> str:
    thing, plan = THINGS[i % len(THINGS)], PLANS[i % len(PLANS)]
    return (f"Sorry about that. On the {plan} plan the {thing} is managed under Settings, "
            f"then Account, then {thing.title()}. The page reloading without saving is a known "
            f"issue when the browser blocks third-party cookies: allow cookies for our domain "
            f"or use a private window, then save again. If it still fails, send us ticket "
            f"{1000 + i} and we will change it for you.")


# -- setup (in this process: Django) ----------------------------------------------------------


def setup(cases: int) -> tuple[str, list[str]]:
    """Migrate, create the fake agents and the stored conversations; ``(key, thread ids)``."""
    from django.core.management import call_command
    from django.db import connections

    from agents import llm, services
    from agents.models import Agent, Provider
    from agents.services import api_key_create

    call_command("migrate", verbosity=0)
    replies = {"perf-source": {}, "perf-target": {"reply": TARGET_REPLY},
               "perf-judge": {"reply": VERDICT}}
    agents = {}
    for slug, options in replies.items():
        provider, _ = Provider.objects.update_or_create(name=slug, defaults={
            "kind": "fake", "max_concurrency": 1000, "options": options})
        agents[slug], _ = Agent.objects.update_or_create(slug=slug, defaults={
            "display_name": slug, "provider": provider, "listed": False})
    ids = []
    stamp = time.time_ns()
    for i in range(cases):
        start = services.thread_turn_begin(
            agent=agents["perf-source"], api_key=None, session_key=f"perf-{stamp}-{i}",
            thread_id=None, user="perf", workspace_root=None, dialect="chat",
            incoming=[llm.Message(role="user", parts=(llm.TextPart(question(i)),))],
            lease_seconds=60)
        assert start is not None
        services.thread_turn_finish(start=start, result=services.TurnResult(
            text=reference(i), finish_reason="stop", input_tokens=30, output_tokens=60,
            ttft_ms=300), dialect="chat")
        ids.append(str(start.thread_id))
    key = api_key_create(name=f"perf-replay-{stamp}", scopes=["benchmarks"])[1]
    connections.close_all()
    return key, ids


def database_bytes() -> int:
    """The database's size on disk (SQLite: the file and its WAL)."""
    from django.db import connection

    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute("select pg_database_size(current_database())")
            return int(cursor.fetchone()[0])
    name = Path(connection.settings_dict["NAME"])
    return sum(p.stat().st_size for p in (name, Path(f"{name}-wal")) if p.exists())


# -- processes ----------------------------------------------------------------------------------


class Processes:
    def __init__(self, data: Path, env: dict[str, str]) -> None:
        self.data, self.env = data, env
        self.server: subprocess.Popen[bytes] | None = None
        self.workers: list[subprocess.Popen[bytes]] = []

    def start_server(self) -> str:
        from gaia_site.server_cli import server_command

        port = free_port()
        log = open(self.data / "server.log", "wb")  # noqa: SIM115 - lives as long as the server
        self.server = subprocess.Popen(server_command("127.0.0.1", port), cwd=ROOT,
                                       env=self.env, stdout=log, stderr=subprocess.STDOUT,
                                       start_new_session=True)
        wait_port(port, self.server)
        return f"http://127.0.0.1:{port}"

    def start_worker(self, name: str) -> subprocess.Popen[bytes]:
        """A Celery worker as tests/benchmarks/processes.py starts one; waits for " ready."."""
        log_path = self.data / f"worker-{name}.log"
        with open(log_path, "wb") as log:
            proc = subprocess.Popen(
                [sys.executable, "-m", "celery", "-A", "gaia_site", "worker", "-P", "solo",
                 "-n", f"{name}@%h", "--without-gossip", "--without-mingle",
                 "--without-heartbeat", "-l", "info"],
                cwd=ROOT, env=self.env, stdout=log, stderr=subprocess.STDOUT,
                start_new_session=True)
        self.workers.append(proc)
        deadline = time.monotonic() + 60
        while " ready." not in log_path.read_text(errors="replace"):
            if proc.poll() is not None or time.monotonic() > deadline:
                raise SystemExit(f"worker {name} did not start; see {log_path}")
            time.sleep(0.1)
        return proc

    def executors(self) -> list[int]:
        """The pids that execute runs: the workers, else the server (embedded worker)."""
        return [p.pid for p in self.workers] or [self.server.pid if self.server else 0]

    def stop(self) -> None:
        for proc in [*self.workers, *([self.server] if self.server else [])]:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGTERM)
                try:
                    proc.wait(15)
                except subprocess.TimeoutExpired:
                    os.killpg(proc.pid, signal.SIGKILL)


# -- measurements -------------------------------------------------------------------------------


def ts(value: str) -> float:
    return datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()


def machine_cpu() -> tuple[int, int]:
    """``(busy, total)`` jiffies of every CPU of the machine so far (/proc/stat)."""
    with open("/proc/stat") as f:
        fields = [int(x) for x in f.readline().split()[1:]]
    idle = fields[3] + fields[4]  # idle, iowait
    return sum(fields) - idle, sum(fields)


class DatabaseCpu:
    """CPU seconds of the PostgreSQL backends serving this database (sampled from
    pg_stat_activity and /proc while a run goes on: a backend's last sample counts, so a
    backend that ends between samples is undercounted by at most one interval)."""

    def __init__(self) -> None:
        from django.db import connection

        self.enabled = connection.vendor == "postgresql"
        self.first: dict[int, float] = {}  # a backend's CPU when first seen (0: born since)
        self.last: dict[int, float] = {}
        self.started = False

    def sample(self) -> None:
        if not self.enabled:
            return
        from django.db import connection

        with connection.cursor() as cursor:
            cursor.execute("select pid from pg_stat_activity where datname = "
                           "current_database() and pid <> pg_backend_pid()")
            pids = [row[0] for row in cursor.fetchall()]
        tick = os.sysconf("SC_CLK_TCK")
        for pid in pids:
            try:
                with open(f"/proc/{pid}/stat") as f:
                    fields = f.read().rsplit(")", 1)[1].split()
            except OSError:
                continue
            cpu = (int(fields[11]) + int(fields[12])) / tick
            self.first.setdefault(pid, 0.0 if self.started else cpu)
            self.last[pid] = cpu
        self.started = True

    def seconds(self) -> float | None:
        if not self.enabled:
            return None
        return sum(self.last[p] - self.first[p] for p in self.last)


def replay(http: httpx.Client, suite: int, *, parallel: int, concurrency: int,
           limit: int | None = None, judge: str | None = None,
           db_cpu: DatabaseCpu | None = None) -> dict[str, Any]:
    """One replay against perf-target, end to end: ``POST /runs`` until it succeeded."""
    body: dict[str, Any] = {"suite": suite, "agents": ["perf-target"], "parallel": parallel,
                            "concurrency": concurrency}
    if limit:
        body["limit"] = limit
    if judge:
        body["judge"] = judge
    if db_cpu is not None:
        db_cpu.sample()
    t0 = time.time()
    r = http.post(API + "/runs", json=body)
    if r.status_code != 201:
        raise SystemExit(f"POST /runs: {r.status_code} {r.text[:300]}")
    run_id = r.json()["id"]
    deadline = time.monotonic() + 900
    while (run := http.get(f"{API}/runs/{run_id}").json())["status"] in ("queued", "running"):
        if time.monotonic() > deadline:
            raise SystemExit(f"run {run_id} did not finish")
        if db_cpu is not None:
            db_cpu.sample()
        time.sleep(0.2)  # the wall is read from finished_at, not from this poll
    if run["status"] != "succeeded":
        raise SystemExit(f"run {run_id} {run['status']}: {run['error']}")
    run["wall_s"] = ts(run["finished_at"]) - t0
    run["run_s"] = ts(run["finished_at"]) - ts(run["started_at"])
    return run


def part_workers(run_id: int) -> int:
    from benchmarks.models import RunPart

    return len(set(RunPart.objects.filter(run_id=run_id).values_list("worker", flat=True)))


def throughput(http: httpx.Client, procs: Processes, suite: int, cases: int, *, workers: int,
               parallel: int, concurrency: int, rounds: int, judge: str | None = None
               ) -> dict[str, Any]:
    walls, spans, cpus, dbs, busy, grows, used = [], [], [], [], [], [], set()
    last = None
    for _ in range(rounds):
        cpu0 = sum(proc_tree_cpu(p) for p in procs.executors())
        size0 = database_bytes()
        db_cpu = DatabaseCpu()
        busy0, total0 = machine_cpu()
        last = replay(http, suite, parallel=parallel, concurrency=concurrency, judge=judge,
                      db_cpu=db_cpu)
        busy1, total1 = machine_cpu()
        cpus.append((sum(proc_tree_cpu(p) for p in procs.executors()) - cpu0) * 1000 / cases)
        busy.append(100 * (busy1 - busy0) / max(1, total1 - total0))
        db_s = db_cpu.seconds()
        if db_s is not None:
            dbs.append(db_s * 1000 / cases)
        grows.append((database_bytes() - size0) / cases)
        walls.append(last["wall_s"])
        spans.append(last["run_s"])
        used.add(part_workers(last["id"]))
    wall = statistics.median(walls)
    return {"workers": workers, "parallel": parallel, "wall": wall, "walls": walls,
            "span": statistics.median(spans), "cases_s": cases / wall,
            "cpu_ms": statistics.median(cpus), "db_ms": statistics.median(dbs) if dbs else None,
            "busy": statistics.median(busy), "bytes": statistics.median(grows),
            "used": sorted(used), "run": last}


def timed(fn: Any, *args: Any) -> float:
    t0 = time.perf_counter()
    fn(*args)
    return (time.perf_counter() - t0) * 1000


def scoring_costs(run_id: int) -> tuple[float, dict[str, list[float]]]:
    """``(ms to load the embedding model, {scorer: ms per case})`` over the run's cases."""
    from benchmarks.models import BenchmarkResult
    from benchmarks.replay import scoring
    from mesh.evaluation import exact_match, f1_score, rouge_l

    pairs = list(BenchmarkResult.objects.filter(run_id=run_id).order_by("question_index")
                 .values_list("prediction", "gold"))
    t0 = time.perf_counter()
    scoring.embedding_model()
    load_ms = (time.perf_counter() - t0) * 1000
    costs: dict[str, list[float]] = {"exact match": [], "token F1": [], "ROUGE-L": [],
                                     "embedding similarity": [], "all four (scoring.score)": []}
    scoring.score(*pairs[0])  # warm: first-call caches
    for prediction, gold in pairs:
        costs["exact match"].append(timed(exact_match, prediction, gold))
        costs["token F1"].append(timed(f1_score, prediction, gold))
        costs["ROUGE-L"].append(timed(rouge_l, prediction, gold))
        costs["embedding similarity"].append(timed(scoring.similarity, prediction, gold))
        costs["all four (scoring.score)"].append(timed(scoring.score, prediction, gold))
    return load_ms, costs


async def judge_costs(run_id: int) -> list[float]:
    """The judge's turn per case, in this process: the run's judge prompt to perf-judge
    through the turn runtime (a thread of the run), its verdict parsed."""
    from agents import llm, turns
    from benchmarks.models import BenchmarkResult, SuiteCase
    from benchmarks.replay import scoring
    from benchmarks.replay.execute import JUDGE_FORMAT

    rows = [r async for r in BenchmarkResult.objects.filter(run_id=run_id)
            .select_related("run").order_by("question_index")]
    cases = {c.index: c async for c in SuiteCase.objects.filter(suite_id=rows[0].run.suite_id)}
    times = []
    for n, row in enumerate([rows[0], *rows]):  # the first warms up
        case = cases[row.question_index]
        t0 = time.perf_counter()
        verdict = await turns.turn_replay(
            target="perf-judge", run_id=run_id, system=scoring.JUDGE_INSTRUCTIONS,
            response_format=JUDGE_FORMAT, title=f"perf judge {n}",
            messages=[llm.Message(role="user", parts=(llm.TextPart(scoring.judge_prompt(
                case.input, case.ideal, row.prediction or "")),))])
        scoring.judge_parse(verdict.text)
        if n:
            times.append((time.perf_counter() - t0) * 1000)
    return times


# -- report ---------------------------------------------------------------------------------


def duration(seconds: float) -> str:
    if seconds < 120:
        return f"{seconds:.0f} s"
    if seconds < 7200:
        return f"{seconds / 60:.1f} min"
    return f"{seconds / 3600:.2f} h"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--cases", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=5, help="replays of each setting")
    parser.add_argument("--concurrency", type=int, default=4, help="cases in flight a worker "
                        "(the API's default)")
    parser.add_argument("--nightly", type=int, default=10_000)
    args = parser.parse_args()
    redis_url = os.environ.get("REDIS_URL", "")
    database = "PostgreSQL" if "postgres" in os.environ.get("DATABASE_URL", "") else "SQLite"

    with tempfile.TemporaryDirectory(prefix="gaia-perf-replay-") as tmp:
        data = Path(tmp)
        os.environ["GAIA_DATA_DIR"] = tmp
        os.environ.setdefault("DJANGO_SETTINGS_MODULE", "gaia_site.settings")
        import django

        django.setup()
        print(f"[setup] {args.cases} stored conversations, fake agents", file=sys.stderr,
              flush=True)
        key, ids = setup(args.cases)
        busy0, total0 = machine_cpu()
        time.sleep(3)
        busy1, total1 = machine_cpu()
        background = 100 * (busy1 - busy0) / max(1, total1 - total0)
        env = {**os.environ, "PYTHONUNBUFFERED": "1", "GAIA_BENCH_HEARTBEAT_SECONDS": "1"}
        if redis_url:
            from celery import Celery

            Celery(broker=redis_url).control.purge()
        else:
            env.update(REDIS_URL="", GAIA_EMBEDDED_WORKER="1")
        procs = Processes(data, env)
        results: list[dict[str, Any]] = []
        try:
            base = procs.start_server()
            http = httpx.Client(base_url=base, timeout=60,
                                headers={"Authorization": f"Bearer {key}"})
            r = http.post(API + "/suites", json={"name": "perf-replay",
                                                 "from_threads": {"ids": ids}})
            if r.status_code != 201:
                raise SystemExit(f"POST /suites: {r.status_code} {r.text[:300]}")
            suite = r.json()
            plans = [(1, 1), (2, 2)] if redis_url else [(1, 1), (1, 2)]
            for workers, parallel in plans:
                while redis_url and len(procs.workers) < workers:
                    procs.start_worker(f"perf-replay-{len(procs.workers) + 1}")
                print(f"[1/3] {workers} worker(s), parallel {parallel}: warm-up, then "
                      f"{args.rounds} replays", file=sys.stderr, flush=True)
                # warm-up: each worker loads the embedding model, opens its connections
                replay(http, suite["id"], parallel=parallel, concurrency=args.concurrency,
                       limit=10 * parallel)
                results.append(throughput(http, procs, suite["id"], args.cases,
                                          workers=workers, parallel=parallel,
                                          concurrency=args.concurrency, rounds=args.rounds))
            workers, parallel = plans[-1] if redis_url else plans[0]
            print("[1/3] with the judge", file=sys.stderr, flush=True)
            judged = throughput(http, procs, suite["id"], args.cases, workers=workers,
                                parallel=parallel, concurrency=args.concurrency, rounds=1,
                                judge="perf-judge")
        finally:
            procs.stop()
        print("[2/3] scoring in process", file=sys.stderr, flush=True)
        last = results[0]["run"]
        load_ms, costs = scoring_costs(last["id"])
        costs["judge's turn (fake agent)"] = asyncio.run(judge_costs(last["id"]))
        tokens = last["summary"]["agents"]["perf-target"]["tokens"] / args.cases

    mode = (f"{database}, Redis broker, Celery workers (-P solo)" if redis_url else
            f"{database}, single process: the server's embedded worker")
    print(f"\nReplay of {args.cases} stored conversations against a fake agent (no delay), "
          f"concurrency {args.concurrency} a worker; {mode}; {os.cpu_count()} CPUs shared\n")
    print(f"{'1. end to end, POST /runs -> succeeded':<44} {'cases/s':>7} {'wall s':>6} "
          f"{'run s':>5} {'CPU ms/case':>11} {'PG ms/case':>10} {'busy':>5} {'DB B/case':>9}"
          "  rounds (wall s)")
    for res in [*results, judged]:
        label = (f"{res['workers']} worker(s), parallel {res['parallel']}"
                 + (" + judge" if res is judged else "")
                 + (f" ({'/'.join(map(str, res['used']))} took parts)" if redis_url else
                    " (parts one after the other)" if res["parallel"] > 1 else ""))
        db_ms = "-" if res["db_ms"] is None else f"{res['db_ms']:.1f}"
        print(f"  {label:<42} {res['cases_s']:7.1f} {res['wall']:6.2f} {res['span']:5.2f} "
              f"{res['cpu_ms']:11.1f} {db_ms:>10} {res['busy']:4.0f}% {res['bytes']:9.0f}  "
              f"{', '.join(f'{w:.2f}' for w in res['walls'])}")
    cpu_note = "the worker processes'" if redis_url else "the server process's (it executes)"
    print(f"  (CPU: {cpu_note} user+system over the run, from /proc; PG: the PostgreSQL "
          "backends of this database, sampled; busy: every CPU of the machine over the run, "
          f"{background:.0f}% in the 3 s before the runs (other users); DB B/case: the "
          "database's growth over a run)")

    print(f"\n{'2. scoring cost per case (ms), in process':<46} {'median':>8} {'p90':>8}")
    for name, values in costs.items():
        print(f"  {name:<44} {statistics.median(values):8.3f} {percentile(values, 90):8.3f}")
    print(f"  (embedding model load, once per worker process: {load_ms:.0f} ms; "
          f"{len(costs['exact match'])} cases, replies of {len(TARGET_REPLY.split())} words "
          f"against references of about {len(reference(0).split())})")

    best = max(results, key=lambda r: r["cases_s"])
    n = args.nightly
    score_ms = statistics.median(costs["all four (scoring.score)"])
    judge_ms = statistics.median(costs["judge's turn (fake agent)"])
    print(f"\n3. a nightly replay of {n:,} conversations (extrapolated linearly from the "
          f"{args.cases}-case runs above, not measured)")
    for res in results:
        print(f"  {res['workers']} worker(s), parallel {res['parallel']}: "
              f"{duration(n / res['cases_s'])} wall, {n * res['cpu_ms'] / 1000 / 60:.1f} "
              f"worker CPU-minutes")
    print(f"  with the judge ({judged['workers']} worker(s)): {duration(n / judged['cases_s'])}"
          f" wall, {n * judged['cpu_ms'] / 1000 / 60:.1f} worker CPU-minutes")
    print(f"  of which scoring: {n * score_ms / 1000:.0f} CPU-s (all four scorers), the "
          f"judge's turns {n * judge_ms / 1000:.0f} s in process")
    print(f"  database growth: {n * best['bytes'] / 1e6:.0f} MB without the judge, "
          f"{n * judged['bytes'] / 1e6:.0f} MB with it (a thread a replayed turn)")
    print(f"  tokens: {tokens:.0f} a case here (the fake counts words) -> {n * tokens:,.0f} "
          "a night; with the judge about twice that plus the rubric. Price them at your "
          "provider's rates")
    print(f"  with a real provider the replies dominate: wall ~ {n:,} x reply latency / "
          f"(workers x concurrency); at 2 s a reply, {best['workers']} worker(s) x "
          f"{args.concurrency}: {duration(n * 2 / (best['workers'] * args.concurrency))}, "
          "twice that with a judge on the same provider")


if __name__ == "__main__":
    main()
