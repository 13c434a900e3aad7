"""Benchmark runs through the queue: latency, throughput and suite wall times. Prints figures.

    REDIS_URL=redis://127.0.0.1:6379/3 .venv/bin/python -m scripts.perf.bench [--model-questions 3]

Sets up a scratch Gaia in a temporary data dir (SQLite, or ``--database-url``; migrated, the
default agents created), starts one API server (uvicorn) and Celery workers (``-P solo``, one run
at a time each) on ``REDIS_URL``, and measures:

* submit -> running latency (the run's ``started_at - queued_at``), p50/p99 over 1-question runs;
* runs per minute with 1 and 2 workers (5-question runs, deterministic tools);
* the 30-question deterministic suite through the queue and through ``gaia mesh run``;
* what reaching Gaia agents costs a run: the 30 questions with every role on an instant ``fake``
  agent (four agent calls a question, each a turn of the runtime: a thread of the run, the
  feed, the lease) against the same questions with deterministic tools, through the queue;
* the same with the embedded model's ``mesh-*`` agents (``--model-questions`` of them: the
  135M model on a shared 2-core box takes seconds a question), through the queue (each call a
  turn, ``agents.turns.turn_ask``) and through ``gaia mesh run --llm-spec`` (HTTP to /v1).

Deterministic tools' quality is a baseline (they were written against these 30 questions).
"""

from __future__ import annotations

import argparse
import json
import os
import re
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

from scripts.perf.harness import ROOT, free_port, stop_group

API = "/api/v1/benchmarks"


def pct(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[max(0, min(len(ordered) - 1, round(p / 100 * len(ordered) + 0.5) - 1))]


class Stack:
    def __init__(self, env: dict[str, str], data: Path) -> None:
        self.env = env
        self.data = data
        self.procs: list[subprocess.Popen[bytes]] = []
        self.workers: list[subprocess.Popen[bytes]] = []

    def manage(self, *argv: str) -> str:
        return subprocess.run([sys.executable, "manage.py", *argv], cwd=ROOT, env=self.env,
                              check=True, capture_output=True, text=True).stdout

    def start_server(self) -> str:
        port = free_port()
        log = open(self.data / "server.log", "wb")  # noqa: SIM115
        self.procs.append(subprocess.Popen(
            [sys.executable, "-m", "uvicorn", "gaia_site.asgi:application", "--port", str(port),
             "--lifespan", "off", "--loop", "uvloop", "--http", "httptools"],
            cwd=ROOT, env=self.env, stdout=log, stderr=subprocess.STDOUT,
            start_new_session=True))
        url = f"http://127.0.0.1:{port}"
        for _ in range(300):
            try:
                httpx.get(url + "/health", timeout=1)
                return url
            except httpx.HTTPError:
                time.sleep(0.1)
        raise SystemExit("server did not start; see " + str(self.data / "server.log"))

    def start_worker(self, name: str) -> None:
        log_path = self.data / f"worker-{name}.log"
        log = open(log_path, "wb")  # noqa: SIM115
        proc = subprocess.Popen(
            [sys.executable, "-m", "celery", "-A", "gaia_site", "worker", "-P", "solo", "-n",
             f"{name}@%h", "--without-gossip", "--without-mingle", "--without-heartbeat",
             "-l", "warning"],
            cwd=ROOT, env=self.env, stdout=log,
            stderr=subprocess.STDOUT, start_new_session=True)
        self.procs.append(proc)
        self.workers.append(proc)
        # -l warning prints no banner: wait until the worker consumes (inspect ping).
        from celery import Celery

        app = Celery(broker=self.env["REDIS_URL"])
        for _ in range(300):
            replies = app.control.ping(timeout=0.5) or []
            if any(f"{name}@" in k for r in replies for k in r):
                return
        raise SystemExit(f"worker {name} did not start; see {log_path}")

    def stop_workers(self) -> None:
        for proc in self.workers:
            os.killpg(proc.pid, signal.SIGTERM)
            proc.wait(20)
            self.procs.remove(proc)
        self.workers.clear()

    def stop(self) -> None:
        for proc in self.procs:
            stop_group(proc)


def ts(value: str) -> float:
    return datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()


def submit(http: httpx.Client, **body: Any) -> int:
    r = http.post(API + "/runs", json=body)
    r.raise_for_status()
    return int(r.json()["id"])


def wait(http: httpx.Client, run_id: int, timeout: float = 600) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        run = http.get(f"{API}/runs/{run_id}").json()
        if run["status"] in ("succeeded", "failed", "cancelled"):
            return run
        time.sleep(0.02)
    raise SystemExit(f"run {run_id} did not finish in {timeout} s")


def quality(run: dict[str, Any]) -> str:
    s = run.get("summary") or {}
    label = "baseline" if run.get("baseline") else "agents"
    return f"EM {s.get('mean_exact_match', 0):.3f} F1 {s.get('mean_f1', 0):.3f} ({label})"


FAKE_AGENTS = """
providers:
  - {name: perf-instant, kind: fake, options: {reply: "0 1 2", delay_ms: 0}}
agents:
""" + "".join(f"  - {{slug: perf-{role}, provider: perf-instant, listed: false}}\n"
              for role in ("search", "extract", "triple", "reason"))


def agent_calls(stack: Stack, http: httpx.Client, *, deterministic: float) -> None:
    """The 30 questions with every role on an instant fake agent: what the agent calls (each
    a turn of the runtime) add to a run, per call."""
    spec = stack.data / "fake-agents.yaml"
    spec.write_text(FAKE_AGENTS)
    stack.manage("agents_import", str(spec))
    tools = {role: f"perf-{role}" for role in ("search", "extract", "triple", "reason")}
    walls = []
    for _ in range(3):
        t0 = time.monotonic()
        run = wait(http, submit(http, tools=tools))
        walls.append(time.monotonic() - t0)
        assert run["status"] == "succeeded", run
    wall = statistics.median(walls)
    calls = 30 * 4
    print(f"30 questions, every role on an instant fake agent ({calls} agent calls), through "
          f"the queue: {wall:.2f} s wall (median of 3: {', '.join(f'{w:.2f}' for w in walls)}"
          f"); {(wall - deterministic) / calls * 1000:.1f} ms a call over the deterministic "
          f"suite's {deterministic:.2f} s")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--database-url", default="")
    parser.add_argument("--latency-runs", type=int, default=20)
    parser.add_argument("--throughput-runs", type=int, default=6)
    parser.add_argument("--model-questions", type=int, default=3)
    parser.add_argument("--agent-calls-only", action="store_true",
                        help="only the deterministic suite and the fake agents' one")
    args = parser.parse_args()
    redis_url = os.environ.get("REDIS_URL", "")
    if not redis_url:
        raise SystemExit("set REDIS_URL (the Celery broker), e.g. redis://127.0.0.1:6379/3")

    data = Path(tempfile.mkdtemp(prefix="gaia-bench-perf-"))
    env = {**os.environ, "GAIA_DATA_DIR": str(data), "REDIS_URL": redis_url,
           "DATABASE_URL": args.database_url or f"sqlite:///{data / 'gaia.sqlite3'}",
           "PYTHONUNBUFFERED": "1"}
    stack = Stack(env, data)
    from celery import Celery

    Celery(broker=redis_url).control.purge()
    try:
        stack.manage("migrate", "--noinput", "-v", "0")
        stack.manage("gaia_setup", "--no-key")
        bench_key = re.findall(r"gaia_[0-9a-f]+_\S+", stack.manage(
            "keys_create", "--name", "perf", "--scope", "benchmarks"))[0]
        chat_key = re.findall(r"gaia_[0-9a-f]+_\S+", stack.manage(
            "keys_create", "--name", "perf-chat", "--scope", "chat"))[0]
        url = stack.start_server()
        http = httpx.Client(base_url=url, timeout=30,
                            headers={"Authorization": f"Bearer {bench_key}"})
        print(f"scratch Gaia at {url}, data {data}, database "
              f"{'PostgreSQL' if args.database_url else 'SQLite'}, broker {redis_url}")

        stack.start_worker("w1")
        wait(http, submit(http, indexes=[0]))  # warm-up: imports, first connections
        if args.agent_calls_only:
            walls = []
            for _ in range(3):
                t0 = time.monotonic()
                wait(http, submit(http))
                walls.append(time.monotonic() - t0)
            print(f"30-question deterministic suite through the queue: median of 3 "
                  f"{statistics.median(walls):.2f} s ({', '.join(f'{w:.2f}' for w in walls)})")
            agent_calls(stack, http, deterministic=statistics.median(walls))
            return 0
        latencies = []
        for _ in range(args.latency_runs):
            run = wait(http, submit(http, indexes=[0]))
            latencies.append((ts(run["started_at"]) - ts(run["queued_at"])) * 1000)
        print(f"submit->running latency ({len(latencies)} runs, 1 idle worker): "
              f"p50 {pct(latencies, 50):.1f} ms  p99 {pct(latencies, 99):.1f} ms  "
              f"max {max(latencies):.1f} ms")

        for workers in (1, 2):
            if workers == 2:
                stack.start_worker("w2")
            t0 = time.monotonic()
            ids = [submit(http, limit=5) for _ in range(args.throughput_runs)]
            runs = [wait(http, i) for i in ids]
            wall = time.monotonic() - t0
            assert all(r["status"] == "succeeded" for r in runs), runs
            by = {r["worker"] for r in runs}
            print(f"runs per minute, {workers} worker(s): {len(ids) / wall * 60:.1f} "
                  f"({len(ids)} runs x 5 questions in {wall:.2f} s; {len(by)} worker(s) used)")
        stack.stop_workers()
        stack.start_worker("w1")

        t0 = time.monotonic()
        run = wait(http, submit(http))
        wall = time.monotonic() - t0
        print(f"30-question deterministic suite through the queue: {wall:.2f} s wall "
              f"(started->finished {ts(run['finished_at']) - ts(run['started_at']):.2f} s); "
              f"{quality(run)}")

        agent_calls(stack, http, deterministic=wall)

        out = data / "mesh-cli"
        t0 = time.monotonic()
        subprocess.run([sys.executable, "-m", "gaia_site.cli", "mesh", "run", "--out", str(out)],
                       cwd=ROOT, env=env, check=True, capture_output=True)
        wall = time.monotonic() - t0
        s = json.loads((out / "summary.json").read_text())
        print(f"30-question deterministic suite through gaia mesh run: {wall:.2f} s wall; "
              f"EM {s['mean_exact_match']:.3f} F1 {s['mean_f1']:.3f} (baseline)")

        n = args.model_questions
        t0 = time.monotonic()
        run = wait(http, submit(http, limit=n, tools="agents", question_timeout_s=300))
        wall = time.monotonic() - t0
        tokens = (run.get("summary") or {}).get("tokens_by_agent")
        print(f"{n} questions, mesh-* agents on the embedded model, through the queue: "
              f"{wall:.2f} s wall ({wall / n:.2f} s a question, model load included); "
              f"{run['status']}; {quality(run)}; tokens {tokens}")

        spec = {tool: {"kind": "openai", "base_url": url + "/v1", "api_key": chat_key,
                       "model": f"mesh-{tool}", "timeout": 300}
                for tool in ("search", "extract", "triple", "reason")}
        (data / "spec.json").write_text(json.dumps(spec))
        out = data / "mesh-cli-model"
        t0 = time.monotonic()
        subprocess.run([sys.executable, "-m", "gaia_site.cli", "mesh", "run", "--limit", str(n),
                        "--timeout", "300", "--llm-spec", str(data / "spec.json"),
                        "--out", str(out)], cwd=ROOT, env=env, capture_output=True)
        wall = time.monotonic() - t0
        s = json.loads((out / "summary.json").read_text())
        print(f"{n} questions, mesh-* agents on the embedded model, through gaia mesh run "
              f"(HTTP to /v1): {wall:.2f} s wall ({wall / n:.2f} s a question); "
              f"{s['completed']}/{s['count']} completed; EM {s['mean_exact_match']:.3f} "
              f"F1 {s['mean_f1']:.3f} (agents); tokens {s['token_sum']}")
        print(f"(median of the latencies above: {statistics.median(latencies):.1f} ms)")
    finally:
        stack.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
