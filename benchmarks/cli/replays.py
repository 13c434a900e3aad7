"""``gaia bench`` for replays: ``replay`` (a conversation suite against agents) and ``cases``
(side by side, largest regression first)."""

from __future__ import annotations

import argparse
import json
from typing import Any

from benchmarks.cli import show
from benchmarks.cli.http import call, wait
from benchmarks.cli.suites import suite_ref


def register(sub: argparse._SubParsersAction[Any]) -> None:
    replay = sub.add_parser("replay", help="replay a conversation suite against agents")
    replay.add_argument("suite", help="id, name or name@version")
    replay.add_argument("--agent", action="append", required=True, dest="agents",
                        metavar="AGENT", help="a target: an agent's slug, 'auto' or "
                        "'team/<slug>' (repeat for more)")
    replay.add_argument("--judge", help="an agent that grades each reply against the "
                        "reference")
    replay.add_argument("--parallel", type=int, help="how many workers may share the run")
    replay.add_argument("--concurrency", type=int, help="cases in flight per worker")
    replay.add_argument("--limit", type=int, help="the first N cases")
    replay.add_argument("--question-timeout", type=float, help="seconds a replayed turn")
    replay.add_argument("--time-limit", type=float)
    replay.add_argument("--wait", action="store_true", help="wait, with a progress bar")
    replay.set_defaults(bench_func=_replay)

    cases = sub.add_parser("cases", help="a replay's cases side by side, largest regression "
                           "first")
    cases.add_argument("run", type=int)
    cases.add_argument("--against", type=int, help="another run of the suite: deltas against "
                       "the same target there")
    cases.add_argument("--baseline", help="the target the others are compared with (default: "
                       "the first)")
    cases.add_argument("--limit", type=int, default=20)
    cases.add_argument("--json", action="store_true")
    cases.set_defaults(bench_func=_cases)


def _replay(args: argparse.Namespace) -> int:
    body: dict[str, Any] = {"suite": suite_ref(args.suite), "agents": args.agents}
    for key, value in (("judge", args.judge), ("parallel", args.parallel),
                       ("concurrency", args.concurrency), ("limit", args.limit),
                       ("question_timeout_s", args.question_timeout),
                       ("time_limit_s", args.time_limit)):
        if value is not None:
            body[key] = value
    run = call(args, "POST", "runs", json=body)
    print(f"queued run {run['id']} ({show.bar_tail(run)[1:-1]}, suite "
          f"{run['suite']}@{run['suite_version']})")
    return wait(args, run) if args.wait else 0


def _cases(args: argparse.Namespace) -> int:
    params: dict[str, Any] = {"limit": args.limit}
    if args.against:
        params["against"] = args.against
    if args.baseline:
        params["baseline"] = args.baseline
    page = call(args, "GET", f"runs/{args.run}/cases", params=params)
    if args.json:
        print(json.dumps(page, indent=2))
        return 0
    for case in page["results"]:
        print("\n".join(show.case_rows(case)))
    print(f"({len(page['results'])} of {page['count']} case(s), largest regression first)")
    return 0
