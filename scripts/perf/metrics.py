#!/usr/bin/env python3
"""What Prometheus metrics cost a turn (issue 40: at most 0.2 ms of server CPU per turn).

Times, in CPU seconds, exactly the metric calls one turn makes (``agents.infra.metrics``: the
turn counted in flight and out, its request, its tokens and time to first token, its
upstream's time, a tool call for the tool scenario), in one process (``./run``: values in
memory) and in multiprocess mode (``gaia api start --workers N``: values in memory-mapped
files), each in a fresh interpreter. Also times one scrape of ``/metrics``' text for the
labels made, which runs off the event loop.

  .venv/bin/python -m scripts.perf.metrics [--turns 20000]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time

ROUNDS = 5


def measure(turns: int) -> None:
    from agents.infra import metrics

    agents = [f"agent-{i}" for i in range(8)]  # a few label values, as a real server has

    def one_turn(i: int, tool: bool) -> None:
        agent = agents[i % len(agents)]
        metrics.turn_started(agent)
        if tool:
            metrics.tool_done(agent, "calculator", True, 0.001)
        metrics.turn_done(agent, "fake-model", "stop", 120, 32, 15)
        metrics.turn_ended(agent)
        metrics.request_done("v1/chat/completions", agent, 200, 0.05, 0.04)

    for tool in (False, True):
        one_turn(0, tool)  # labels made: what a running server has
        best = float("inf")
        for _ in range(ROUNDS):
            t0 = time.process_time()
            for i in range(turns):
                one_turn(i, tool)
            best = min(best, (time.process_time() - t0) / turns)
        print(f"  {'tool turn' if tool else 'plain turn':<11} {best * 1e3:.4f} ms CPU per turn "
              f"(best of {ROUNDS} x {turns} turns)")
    from gaia_site.metrics import exposition

    t0 = time.process_time()
    for _ in range(20):
        body, _ = exposition({"approvals": 0, "queued": 0, "running": 0, "workers": 1})
    print(f"  scrape      {(time.process_time() - t0) / 20 * 1e3:.2f} ms CPU "
          f"({len(body)} bytes of text)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--turns", type=int, default=20000)
    parser.add_argument("--child", choices=["single", "multi"])
    args = parser.parse_args()
    if args.child:
        import django

        os.environ.setdefault("DJANGO_SETTINGS_MODULE", "gaia_site.settings")
        django.setup()
        measure(args.turns)
        return
    for mode in ("single", "multi"):
        with tempfile.TemporaryDirectory() as directory:
            env = dict(os.environ)
            env.pop("PROMETHEUS_MULTIPROC_DIR", None)
            if mode == "multi":
                env["PROMETHEUS_MULTIPROC_DIR"] = directory
            print("one process (values in memory)" if mode == "single" else
                  "multiprocess mode (gaia api start --workers N: memory-mapped files)")
            sys.stdout.flush()
            subprocess.run([sys.executable, "-m", "scripts.perf.metrics", "--child", mode,
                            "--turns", str(args.turns)], env=env, check=True)


if __name__ == "__main__":
    main()
