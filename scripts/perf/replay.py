#!/usr/bin/env python3
"""What replaying stored conversations costs: cases/s of a replay run with 1 and 2 workers, the
scoring cost per case of each scorer, and what a nightly replay of 10,000 conversations takes.
Prints figures; asserts nothing.

    .venv/bin/python -m scripts.perf.replay [--cases 200] [--rounds 3] [--concurrency 4]
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
import statistics
import sys
import tempfile
import time
from datetime import datetime
from pathlib import Path
from typing import Any

import httpx

from scripts.perf.harness import percentile, proc_tree_cpu
from scripts.perf.replay_scratch import (
    TARGET_REPLY,
    DatabaseCpu,
    Processes,
    database_bytes,
    machine_cpu,
    reference,
    setup,
)

API = "/api/v1/benchmarks"


# -- measurements -------------------------------------------------------------------------------


def ts(value: str) -> float:
    return datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()


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
    from agents import turns
    from agents.kernel import llm
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
