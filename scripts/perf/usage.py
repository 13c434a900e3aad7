#!/usr/bin/env python3
"""What usage over time costs at scale: ``GET /api/v1/usage`` latency on 1,000,000 stored
messages, and the roll-up's cost to a chat turn.

1. Fills a throwaway database (SQLite under a temporary GAIA_DATA_DIR; with DATABASE_URL, a
   new PostgreSQL database ``<name>_usage_perf`` next to it, dropped at the end) with
   ``--messages`` messages over the last 30 days: threads of user/assistant turns across 8
   agents, 4 upstream models and 20 API keys, 3 % of replies failed (four kinds), by bulk
   SQL (COPY on PostgreSQL, executemany on SQLite). Then builds the roll-up from them with
   ``usage_rebuild`` (the same code a deployment upgrading to it runs).
2. Times the alternative, an aggregate straight over the messages (with an index on
   ``created_at``), for 7 and 30 days: why the roll-up.
3. Measures a turn's writes (``thread_turn_begin`` + ``thread_turn_finish``, what the server
   does per chat turn) in-process with and without the roll-up's upsert: process CPU (and on
   PostgreSQL the database backend's CPU, read from /proc) and wall time per turn.
4. Starts a real server on that database and prints the usage API's latency (sequential
   requests) for 1 h, 1 day, 7 days and 30 days at p50/p99, all agents and one agent.

  .venv/bin/python -m scripts.perf.usage [--messages 1000000] [--requests 30] [--turns 300]
      [--rounds 3]
  DATABASE_URL=postgres://... .venv/bin/python -m scripts.perf.usage
"""

from __future__ import annotations

import argparse
import os
import random
import shutil
import statistics
import subprocess
import tempfile
import time
import uuid
from datetime import timedelta
from pathlib import Path
from typing import Any

from scripts.perf.harness import ROOT, free_port, percentile, wait_health

MODELS = ["gpt-small", "gpt-large", "claude-mid", "llama-local"]
KINDS = [("error", 60), ("client_disconnected", 25), ("killed", 10), ("interrupted", 5)]
TURNS_PER_THREAD = 5


def pg_database(url: str, name: str, *, create: bool) -> str:
    """``url`` with its database replaced by ``name`` (created afresh, or dropped)."""
    import psycopg
    from psycopg import sql

    base, _, _ = url.rpartition("/")
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(
            sql.Identifier(name)))
        if create:
            conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    return f"{base}/{name}"


def fill(n_messages: int, seed: int = 1) -> dict[str, Any]:
    """Agents, keys, threads and ``n_messages`` messages over 30 days, by bulk SQL."""
    from django.db import connection, transaction
    from django.utils import timezone

    from agents.models import Agent, Message, Provider, Thread
    from agents.services import api_key_create

    rng = random.Random(seed)
    provider, _ = Provider.objects.update_or_create(
        name="perf", defaults={"kind": "fake", "default_model": "fake", "max_concurrency": 1000,
                               "options": {"reply": "ok"}})
    agents = [Agent.objects.update_or_create(
        slug=f"perf-{i}", defaults={"display_name": f"Perf {i}", "provider": provider,
                                    "upstream_model": MODELS[i % len(MODELS)]})[0]
        for i in range(8)]
    keys = [api_key_create(name=f"client-{i}", scopes=["chat"])[0] for i in range(20)]
    ops = api_key_create(name="ops", scopes=["operator"])[1]
    admin = api_key_create(name="admin", scopes=["admin"])[1]
    budgets(agents, keys)
    now = timezone.now()
    n_threads = n_messages // (2 * TURNS_PER_THREAD)
    thread_rows: list[dict[str, Any]] = []
    message_rows: list[dict[str, Any]] = []
    kinds = [k for k, w in KINDS for _ in range(w)]
    for n in range(n_threads):
        tid = uuid.uuid4()
        agent = rng.choice(agents)
        key = rng.choice(keys) if rng.random() < 0.9 else None
        at = now - timedelta(seconds=rng.uniform(600, 30 * 86400))
        tin = tout = 0
        for turn in range(TURNS_PER_THREAD):
            message_rows.append({"thread_id": tid, "seq": 2 * turn, "role": "user",
                                 "content": f"question {n}.{turn}", "created_at": at})
            ttft = int(rng.lognormvariate(5.8, 0.6))
            latency = ttft + int(rng.lognormvariate(7.3, 0.7))
            failed = rng.random() < 0.03
            kind = rng.choice(kinds) if failed else ""
            i_tok, o_tok = rng.randint(20, 3000), (0 if failed else rng.randint(5, 800))
            tin, tout = tin + i_tok, tout + o_tok
            reply_at = at + timedelta(milliseconds=latency)
            message_rows.append({
                "thread_id": tid, "seq": 2 * turn + 1, "role": "assistant",
                "content": "" if failed else f"answer {n}.{turn}",
                "finish_reason": kind or "stop", "error": "failed" if failed else "",
                "input_tokens": i_tok, "output_tokens": o_tok, "ttft_ms": ttft,
                "latency_ms": latency, "provider": "perf", "created_at": reply_at})
            at = reply_at + timedelta(seconds=rng.uniform(5, 90))
        thread_rows.append({"id": tid, "agent_id": agent.pk, "api_key_id": key.pk if key else None,
                            "user": f"user-{rng.randrange(1000)}" if key else "",
                            "session_key": f"s{n}", "title": f"thread {n}",
                            "status": "completed", "message_count": 2 * TURNS_PER_THREAD,
                            "input_tokens": tin, "output_tokens": tout,
                            "history_digest": tid.hex, "created_at": at, "updated_at": at})
    t0 = time.perf_counter()
    with transaction.atomic():
        _bulk(connection, Thread, thread_rows)
        _bulk(connection, Message, message_rows)
    return {"agents": agents, "keys": keys, "ops": ops, "admin": admin, "threads": n_threads,
            "messages": len(message_rows), "insert_s": time.perf_counter() - t0}


def budgets(agents: list[Any], keys: list[Any]) -> None:
    """The budgets a deployment of this size might keep (issue 41): one a key in USD a month,
    one an agent in tokens a month, a global one in USD a day, made as the API makes them."""
    from agents.services import budget_save

    bodies = [{"name": f"key-{k.prefix}", "scope": "key", "key": k.prefix, "unit": "usd",
               "limit": "500", "period": "month", "soft_percent": 80} for k in keys]
    bodies += [{"name": f"agent-{a.slug}", "scope": "agent", "agent": a.slug, "unit": "tokens",
                "limit": "1000000000", "period": "month"} for a in agents]
    bodies.append({"name": "everyone", "scope": "global", "unit": "usd", "limit": "10000",
                   "period": "day"})
    for body in bodies:
        budget_save(budget=None, fields=body, actor=None)


def _bulk(connection: Any, model: Any, rows: list[dict[str, Any]]) -> None:
    """Insert ``rows`` (attname -> value; other columns their default) in bulk."""
    fields = [f for f in model._meta.concrete_fields
              if not (f.primary_key and f.get_internal_type() in ("AutoField", "BigAutoField"))]
    consts = {f.attname: f.get_default() for f in fields}
    names = [connection.ops.quote_name(f.column) for f in fields]
    table = model._meta.db_table
    if connection.vendor == "postgresql":
        from psycopg.types.json import Jsonb

        json_cols = {f.attname for f in fields if f.get_internal_type() == "JSONField"}
        with connection.cursor() as c, c.cursor.copy(
                f"COPY {table} ({', '.join(names)}) FROM STDIN") as copy:
            for r in rows:
                copy.write_row([
                    (Jsonb(v) if f.attname in json_cols and v is not None else v)
                    for f in fields for v in (r.get(f.attname, consts.get(f.attname)),)])
        return
    prep = {f.attname: (lambda v, f=f: f.get_db_prep_save(v, connection))
            for f in fields if f.get_internal_type() in ("DateTimeField", "UUIDField",
                                                         "JSONField", "ForeignKey")}
    sql = (f"INSERT INTO {table} ({', '.join(names)}) "  # noqa: S608
           f"VALUES ({', '.join(['%s'] * len(names))})")
    with connection.cursor() as c:
        for i in range(0, len(rows), 50000):
            batch = []
            for r in rows[i:i + 50000]:
                row = []
                for f in fields:
                    v = r.get(f.attname, consts.get(f.attname))
                    p = prep.get(f.attname)
                    row.append(p(v) if p is not None and v is not None else v)
                batch.append(row)
            c.executemany(sql, batch)


def direct_query_ms(days: int, runs: int = 3) -> float:
    """The roll-up's alternative: totals per agent and key straight over the messages."""
    from django.db import connection
    from django.utils import timezone

    since = timezone.now() - timedelta(days=days)
    sql = ("SELECT t.agent_id, t.api_key_id, m.finish_reason, count(*), sum(m.input_tokens), "
           "sum(m.output_tokens) FROM agents_message m JOIN agents_thread t ON t.id = "
           "m.thread_id WHERE m.created_at >= %s AND m.role = 'assistant' "
           "GROUP BY t.agent_id, t.api_key_id, m.finish_reason")
    best = []
    with connection.cursor() as c:
        for _ in range(runs):
            t0 = time.perf_counter()
            c.execute(sql, [since])
            c.fetchall()
            best.append((time.perf_counter() - t0) * 1000)
    return min(best)


def turn_cost(agents: list[Any], keys: list[Any], turns: int, rounds: int = 4
              ) -> dict[str, dict[str, float]]:
    """CPU and wall time of a turn's writes with and without the roll-up, alternating."""
    from django.db import connection

    from agents import services
    from agents.kernel import llm
    from agents.services import turn_end as thread_services  # where a turn ends

    backend_pid = None
    if connection.vendor == "postgresql":
        with connection.cursor() as c:
            c.execute("SELECT pg_backend_pid()")
            backend_pid = c.fetchone()[0]

    def backend_cpu() -> float:
        if backend_pid is None:
            return 0.0
        try:
            parts = Path(f"/proc/{backend_pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            return float("nan")
        return (int(parts[11]) + int(parts[12])) / os.sysconf("SC_CLK_TCK")

    real = thread_services.usage_record
    totals = {"with": [0.0, 0.0, 0.0, 0], "without": [0.0, 0.0, 0.0, 0]}
    n = 0
    for r in range(rounds):
        for mode in ("with", "without") if r % 2 == 0 else ("without", "with"):
            thread_services.usage_record = real if mode == "with" else (lambda **_: None)
            cpu0, wall0, db0 = time.process_time(), time.perf_counter(), backend_cpu()
            for _ in range(turns):
                n += 1
                agent, key = agents[n % len(agents)], keys[n % len(keys)]
                start = services.thread_turn_begin(
                    agent=agent, api_key=key, session_key=f"cost{n}", thread_id=None, user="u",
                    incoming=[llm.Message(role="user", parts=(llm.TextPart(f"hi {n}"),))],
                    workspace_root=None, dialect="chat", lease_seconds=60)
                services.thread_turn_finish(start=start, dialect="chat", result=services.TurnResult(
                    text="hello there", input_tokens=12, output_tokens=3, ttft_ms=180,
                    latency_ms=900, model=agent.model_name))
            t = totals[mode]
            t[0] += time.process_time() - cpu0
            t[1] += time.perf_counter() - wall0
            t[2] += backend_cpu() - db0
            t[3] += turns
    thread_services.usage_record = real
    return {mode: {"cpu_ms": t[0] / t[3] * 1000, "wall_ms": t[1] / t[3] * 1000,
                   "db_cpu_ms": t[2] / t[3] * 1000} for mode, t in totals.items()}


def api_latency(env: dict[str, str], key: str, admin: str, agent: str, requests: int
                ) -> list[tuple[str, float, float, int]]:
    import httpx

    from gaia_site.server_cli import server_command

    port = free_port()
    log = open(Path(env["GAIA_DATA_DIR"]) / "server.log", "wb")  # noqa: SIM115
    proc = subprocess.Popen(server_command("127.0.0.1", port), env=env, cwd=ROOT, stdout=log,
                            stderr=subprocess.STDOUT)
    base = f"http://127.0.0.1:{port}"
    out = []
    try:
        wait_health(base)
        with httpx.Client(base_url=base, headers={"Authorization": f"Bearer {key}"},
                          timeout=120) as client:
            usage = "/api/v1/usage"
            cases: list[tuple[str, str, dict[str, str], str]] = [
                (f"range={r}", usage, {"range": r}, key) for r in ("1h", "1d", "7d", "30d")]
            cases += [(f"range={r}&agent={agent}", usage, {"range": r, "agent": agent}, key)
                      for r in ("7d", "30d")]
            cases.append(("/api/v1/budgets (all)", "/api/v1/budgets", {}, admin))
            for label, path, params, by in cases:
                times = []
                for i in range(requests + 3):
                    t0 = time.perf_counter()
                    r = client.get(path, params=params,
                                   headers={"Authorization": f"Bearer {by}"})
                    elapsed = (time.perf_counter() - t0) * 1000
                    r.raise_for_status()
                    if i >= 3:  # warm-up
                        times.append(elapsed)
                body = r.json()
                counted = (body["totals"]["requests"] if path == usage
                           else len(body["results"]))
                out.append((label, percentile(times, 50), percentile(times, 99), counted))
    finally:
        proc.terminate()
        proc.wait(10)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--messages", type=int, default=1_000_000)
    parser.add_argument("--requests", type=int, default=30, help="per range")
    parser.add_argument("--turns", type=int, default=300, help="per round of the turn cost")
    parser.add_argument("--rounds", type=int, default=1,
                        help="rounds of the API latency (a server each); medians printed")
    parser.add_argument("--keep", action="store_true", help="keep the database (and the data dir)")
    args = parser.parse_args()

    tmp = tempfile.mkdtemp(prefix="gaia-perf-usage-")
    env = {k: v for k, v in os.environ.items() if k != "REDIS_URL"}
    env["GAIA_DATA_DIR"] = tmp
    pg_url = os.environ.get("DATABASE_URL")
    pg_name = None
    if pg_url:
        pg_name = pg_url.rstrip("/").rsplit("/", 1)[1].split("?")[0] + "_usage_perf"
        env["DATABASE_URL"] = pg_database(pg_url, pg_name, create=True)
    os.environ.clear()
    os.environ.update(env)
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "gaia_site.settings")
    try:
        import django

        django.setup()
        from django.core.management import call_command
        from django.db import connection

        from agents import services

        call_command("migrate", verbosity=0)
        db = "PostgreSQL" if connection.vendor == "postgresql" else "SQLite"
        t0 = time.perf_counter()
        data = fill(args.messages)
        fill_s = time.perf_counter() - t0
        t0 = time.perf_counter()
        counted = services.usage_rebuild()
        rebuild_s = time.perf_counter() - t0
        from agents.models import UsageBucket

        buckets = {s: UsageBucket.objects.filter(span=s).count() for s in (60, 3600, 21600)}
        with connection.cursor() as c:
            c.execute("CREATE INDEX perf_message_created ON agents_message (created_at)")
        if connection.vendor == "postgresql":
            with connection.cursor() as c:
                c.execute("ANALYZE")
        direct = {d: direct_query_ms(d) for d in (7, 30)}
        cost = turn_cost(data["agents"], data["keys"], args.turns)
        connection.close()
        rounds = [api_latency(env, data["ops"], data["admin"], data["agents"][0].slug,
                               args.requests)
                  for _ in range(args.rounds)]
        latency = [(label, statistics.median(r[i][1] for r in rounds),
                    statistics.median(r[i][2] for r in rounds), max(r[i][2] for r in rounds), n)
                   for i, (label, _, _, n) in enumerate(rounds[0])]
    finally:
        if pg_url and pg_name and not args.keep:
            from django.db import connections

            connections.close_all()
            pg_database(pg_url, pg_name, create=False)
        if args.keep:
            print(f"kept: GAIA_DATA_DIR={tmp}" + (f" DATABASE_URL={env['DATABASE_URL']}"
                                                  if pg_url else ""))
        else:
            shutil.rmtree(tmp, ignore_errors=True)

    print(f"\nUsage over time on {db}: {data['messages']:,} messages in {data['threads']:,} "
          f"threads over 30 days, 8 agents, 4 models, 20 keys")
    print(f"fill: {fill_s:.0f} s (bulk insert {data['insert_s']:.0f} s); roll-up rebuilt from "
          f"{counted:,} replies in {rebuild_s:.0f} s: {buckets[60]:,} minute rows, "
          f"{buckets[3600]:,} hour rows, {buckets[21600]:,} 6-hour rows")
    print("direct aggregate over the messages (index on created_at), no percentiles: "
          + ", ".join(f"{d} days {ms:.0f} ms" for d, ms in direct.items()))
    print(f"\nGET /api/v1/usage, {args.requests} sequential requests each (after 3 warm-ups), "
          f"{args.rounds} round(s): medians of the rounds, and the worst round's p99 (rows "
          "counted: the usage's requests, the budgets listed)")
    print(f"{'query':32} {'p50 ms':>8} {'p99 ms':>8} {'worst p99':>10} {'rows counted':>17}")
    for label, p50, p99, worst, n in latency:
        print(f"{label:32} {p50:8.1f} {p99:8.1f} {worst:10.1f} {n:>17,}")
    w, wo = cost["with"], cost["without"]
    print(f"\nA turn's writes (thread_turn_begin + thread_turn_finish), {args.turns * 2} turns "
          "each way, alternating:")
    print(f"{'':22} {'process CPU ms':>15} {'wall ms':>9}"
          + (f" {'db backend CPU ms':>18}" if db == "PostgreSQL" else ""))
    for name, c in (("without the roll-up", wo), ("with the roll-up", w)):
        print(f"{name:22} {c['cpu_ms']:15.3f} {c['wall_ms']:9.3f}"
              + (f" {c['db_cpu_ms']:18.3f}" if db == "PostgreSQL" else ""))
    print(f"{'roll-up adds':22} {w['cpu_ms'] - wo['cpu_ms']:15.3f} "
          f"{w['wall_ms'] - wo['wall_ms']:9.3f}"
          + (f" {w['db_cpu_ms'] - wo['db_cpu_ms']:18.3f}" if db == "PostgreSQL" else ""))


if __name__ == "__main__":
    main()
