#!/usr/bin/env python3
"""CPU time of a chat turn's database work alone: ``thread_turn_begin`` (a new thread and the
user's message) and ``thread_turn_finish`` (the reply, the thread's update, whether the agent is
still at work), called back to back in this process, no server, no event loop. Feed events are
built but not published.

Runs on a throwaway SQLite file, or on the database in DATABASE_URL (migrated first). Prints CPU
and wall time per turn; ``--profile`` adds cProfile's top functions. ``--checkpoint-chars N``
also times a streaming reply's checkpoint (``thread_reply_checkpoint``: the reply's first N
characters written to its thread, agents/turns/checkpoint.py), the one write a turn adds per
second or per 2,000 characters while it streams.

  .venv/bin/python -m scripts.perf.turn_writes [--turns 2000] [--profile] [--checkpoint-chars 11000]
"""

from __future__ import annotations

import argparse
import cProfile
import os
import pstats
import tempfile
import time


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--turns", type=int, default=2000)
    parser.add_argument("--warmup", type=int, default=200)
    parser.add_argument("--profile", action="store_true")
    parser.add_argument("--checkpoint-chars", type=int, default=0)
    args = parser.parse_args()
    os.environ.setdefault("GAIA_DATA_DIR", tempfile.mkdtemp(prefix="gaia-perf-writes-"))
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "gaia_site.settings")
    import django

    django.setup()
    from django.conf import settings
    from django.core.management import call_command

    from agents import services
    from agents.kernel import llm
    from agents.models import Agent, Provider
    from agents.outlet import realtime

    call_command("migrate", verbosity=0)
    provider, _ = Provider.objects.update_or_create(
        name="perf-writes", defaults={"kind": "fake", "max_concurrency": 1000})
    agent, _ = Agent.objects.update_or_create(
        slug="perf-writes", defaults={"display_name": "perf", "provider": provider})
    key, _ = services.api_key_create(name="perf-writes")
    realtime.send_event = lambda payload: None  # the database's share only

    def turn(i: int) -> None:
        incoming = [llm.Message(role="user", parts=(llm.TextPart(f"question {i}"),))]
        start = services.thread_turn_begin(
            agent=agent, api_key=key, thread_id=None, user=None, incoming=incoming,
            session_key=services.session_key_fallback(model=agent.slug, user=None,
                                                      messages=incoming),
            workspace_root=None, dialect="chat", lease_seconds=30, exclusive=False)
        assert start is not None
        services.thread_turn_finish(start=start, dialect="chat", result=services.TurnResult(
            response_id=f"r{i}", text="tok " * 32, input_tokens=10, output_tokens=32,
            latency_ms=5, ttft_ms=1))

    for i in range(args.warmup):
        turn(i)
    profile = cProfile.Profile() if args.profile else None
    cpu, wall = time.process_time(), time.perf_counter()
    if profile is not None:
        profile.enable()
    for i in range(args.turns):
        turn(args.warmup + i)
    if profile is not None:
        profile.disable()
    cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
    engine = settings.DATABASES["default"]["ENGINE"].rsplit(".", 1)[-1]
    print(f"{engine}: {args.turns} turns, {cpu / args.turns * 1000:.3f} ms CPU and "
          f"{wall / args.turns * 1000:.3f} ms wall per turn"
          + (" (under cProfile)" if profile else ""))
    if profile is not None:
        pstats.Stats(profile).sort_stats("tottime").print_stats(25)
    if args.checkpoint_chars:
        checkpoints(args.turns, args.checkpoint_chars, engine, agent, key)


def checkpoints(n: int, chars: int, engine: str, agent: object, key: object) -> None:
    """CPU and wall time of one checkpoint of a ``chars``-character reply, on a turn that
    holds its thread's lease (the write it makes: one UPDATE of one column)."""
    from agents import services
    from agents.kernel import llm

    incoming = [llm.Message(role="user", parts=(llm.TextPart("a long answer, please"),))]
    start = services.thread_turn_begin(
        agent=agent, api_key=key, thread_id=None, user=None, incoming=incoming,
        session_key="perf-checkpoint", workspace_root=None, dialect="chat", lease_seconds=3600,
        exclusive=False)
    assert start is not None
    text = ("lorem ipsum " * (chars // 12 + 1))[:chars]
    for i in range(50):
        assert services.thread_reply_checkpoint(thread_id=start.thread_id,
                                                lock_token=start.lock_token, text=text[:i])
    cpu, wall = time.process_time(), time.perf_counter()
    for i in range(n):
        services.thread_reply_checkpoint(thread_id=start.thread_id,
                                         lock_token=start.lock_token, text=text[:chars - i % 7])
    cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
    print(f"{engine}: {n} checkpoints of {chars} characters, {cpu / n * 1000:.3f} ms CPU and "
          f"{wall / n * 1000:.3f} ms wall each (this process; the database's own work is in "
          "the wall time)")


if __name__ == "__main__":
    main()
