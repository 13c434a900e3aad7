"""``gaia bench`` for suites: ``suites`` (every version, newest first), ``suite-from-threads``,
``suite-import`` and ``suite-export`` (JSONL, OpenAI Evals samples)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from benchmarks.cli import show
from benchmarks.cli.http import CliError, call


def register(sub: argparse._SubParsersAction[Any]) -> None:
    suites = sub.add_parser("suites", help="list suites (every version, newest first)")
    suites.add_argument("--name")
    suites.add_argument("--kind", choices=["hotpotqa", "conversations"])
    suites.add_argument("--latest", action="store_true", help="each name's newest version only")
    suites.set_defaults(bench_func=_suites)

    threads = sub.add_parser("suite-from-threads", help="a conversation suite from stored "
                             "threads: by ids, or the thread list's filters")
    threads.add_argument("name", help="the suite's name (an existing one gets a new version)")
    threads.add_argument("--agent")
    threads.add_argument("--since", help="ISO date or datetime")
    threads.add_argument("--until", help="ISO date or datetime")
    threads.add_argument("--status")
    threads.add_argument("-q", dest="q", help="text search, as the thread list's")
    threads.add_argument("--ids", nargs="+", metavar="ID", help="thread ids (no filters then)")
    threads.add_argument("--turns", choices=["last", "all"], default="last",
                         help="a case per thread (its last answered user message) or per "
                              "answered user message")
    threads.add_argument("--description", default="")
    threads.set_defaults(bench_func=_suite_from_threads)

    imp = sub.add_parser("suite-import", help="a conversation suite from JSONL (one OpenAI "
                         "Evals sample a line: {\"input\": [messages], \"ideal\": \"...\"})")
    imp.add_argument("name")
    imp.add_argument("file", help="a .jsonl file, or - for stdin")
    imp.set_defaults(bench_func=_suite_import)

    exp = sub.add_parser("suite-export", help="a conversation suite as JSONL")
    exp.add_argument("suite", help="id, name or name@version")
    exp.add_argument("-o", "--output", help="write here (default: stdout)")
    exp.set_defaults(bench_func=_suite_export)


def suite_ref(text: str) -> int | str:
    """A suite as the API takes it: an id, a name or ``name@version``."""
    return int(text) if text.isdecimal() else text


def suite_id_of(args: argparse.Namespace, text: str) -> int:
    """The id of the suite ``text`` names (a name: its newest version)."""
    ref = suite_ref(text)
    if isinstance(ref, int):
        return ref
    name, _, version = ref.partition("@")
    found = call(args, "GET", "suites", params={"name": name})["results"]
    if version:
        found = [s for s in found if str(s["version"]) == version]
    if not found:
        raise CliError(f"no suite {text!r} (gaia bench suites lists them)")
    return int(found[0]["id"])


def _suites(args: argparse.Namespace) -> int:
    params = {k: v for k, v in (("name", args.name), ("kind", args.kind)) if v}
    if args.latest:
        params["latest"] = "true"
    found = call(args, "GET", "suites", params=params)["results"]
    print("\n".join(show.suite_rows(found)))
    print(f"({len(found)} suite version(s))")
    return 0


def _suite_from_threads(args: argparse.Namespace) -> int:
    filters = {k: getattr(args, k) for k in ("agent", "since", "until", "status", "q")
               if getattr(args, k)}
    if args.ids and filters:
        raise CliError("give --ids, or filters (--agent, --since, ...), not both")
    spec: dict[str, Any] = {"ids": args.ids} if args.ids else filters
    spec["turns"] = args.turns
    body = {"name": args.name, "from_threads": spec}
    if args.description:
        body["description"] = args.description
    print(show.suite_made(call(args, "POST", "suites", json=body)))
    return 0


def _suite_import(args: argparse.Namespace) -> int:
    try:
        data = sys.stdin.buffer.read() if args.file == "-" else Path(args.file).read_bytes()
    except OSError as exc:
        raise CliError(f"{args.file}: {exc.strerror}") from exc
    suite = call(args, "POST", "suites", params={"name": args.name}, content=data,
                  headers={"Content-Type": "application/jsonl"})
    print(show.suite_made(suite))
    return 0


def _suite_export(args: argparse.Namespace) -> int:
    suite_id = suite_id_of(args, args.suite)
    text = call(args, "GET", f"suites/{suite_id}/export", raw=True)
    lines = text.count("\n")
    if not args.output:
        sys.stdout.write(text)
        return 0
    try:
        Path(args.output).write_text(text, encoding="utf-8")
    except OSError as exc:
        raise CliError(f"{args.output}: {exc.strerror}") from exc
    print(f"wrote {lines} case(s) of suite {suite_id} to {args.output}", file=sys.stderr)
    return 0
