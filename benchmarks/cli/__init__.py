"""``gaia bench``: the benchmarks API from a shell.

* mesh runs: ``submit``, ``list``, ``status``, ``cancel``, ``results``, ``compare``;
* conversation suites: ``suites``, ``suite-from-threads``, ``suite-import`` (JSONL, OpenAI
  Evals samples), ``suite-export``;
* replay runs: ``replay`` (a suite against agents), ``cases`` (side by side, largest
  regression first), ``resume``; ``status``, ``results``, ``list``, ``cancel`` and ``compare``
  take them too.

A suite is named by its id, its name (the newest version) or ``name@version``. The base URL and
key come from ``--url``/``--key`` or ``GAIA_URL``/``GAIA_API_KEY`` (a key with the
``benchmarks`` scope). Plain HTTP (httpx): no Django here, so it works from any machine.
``--wait`` draws a progress bar on stderr until the run ends. Exit codes: 0 succeeded (or the
request worked), 1 the run failed or was cancelled, 2 a bad request (the API's message is
printed) or an unreachable server.
"""


from __future__ import annotations

import argparse
import os
import sys
from typing import Any

from benchmarks.cli import replays, runs, suites
from benchmarks.cli.http import DEFAULT_URL, CliError


def register(subparsers: argparse._SubParsersAction[Any]) -> None:
    bench = subparsers.add_parser("bench", help="benchmark runs over the API",
                                  description=__doc__,
                                  formatter_class=argparse.RawDescriptionHelpFormatter)
    bench.set_defaults(func=run_command)
    bench.add_argument("--url", default=os.environ.get("GAIA_URL", DEFAULT_URL),
                       help="Gaia base URL (env GAIA_URL; default %(default)s)")
    bench.add_argument("--key", default=os.environ.get("GAIA_API_KEY", ""),
                       help="API key with the benchmarks scope (env GAIA_API_KEY)")
    sub = bench.add_subparsers(dest="bench_command", required=True)
    runs.register(sub)
    suites.register(sub)
    replays.register(sub)
    runs.register_resume(sub)


def run_command(args: argparse.Namespace) -> int:
    try:
        return int(args.bench_func(args))
    except CliError as exc:
        print(f"gaia bench: {exc}", file=sys.stderr)
        return 2
