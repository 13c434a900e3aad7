"""The scratch Gaia that scripts/perf/replay.py measures: its data (the fake agents and the
stored support conversations, seeded in this process through the thread services), its
processes (a uvicorn server, Celery workers) and what they cost the machine (the database's
size and its backends' CPU, the machine's CPU)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

from scripts.perf.harness import ROOT, free_port, stop_group, wait_port

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

    from agents import services
    from agents.kernel import llm
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
            stop_group(proc)


# -- measurements -------------------------------------------------------------------------------


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
