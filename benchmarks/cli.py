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
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

import httpx

from benchmarks import cli_replay as show

DEFAULT_URL = "http://127.0.0.1:8080"
FINAL = ("succeeded", "failed", "cancelled")


class CliError(Exception):
    pass


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

    submit = sub.add_parser("submit", help="queue a run")
    submit.add_argument("--suite", default="hotpotqa-dev-30")
    pick = submit.add_mutually_exclusive_group()
    pick.add_argument("--limit", type=int, help="the first N questions")
    pick.add_argument("--indexes", help="question indexes, e.g. 0,3,7")
    submit.add_argument("--protocol", default="json", help="e.g. json, msgpack+crc, a2a+signed")
    submit.add_argument("--tools", default="deterministic",
                        help="'deterministic', 'agents' (the mesh-* agents) or "
                             "role=backend,... e.g. reason=mesh-reason")
    submit.add_argument("--question-timeout", type=float, default=60.0)
    submit.add_argument("--time-limit", type=float, default=3600.0)
    submit.add_argument("--wait", action="store_true", help="wait, with a progress bar")
    submit.set_defaults(bench_func=_submit)

    lst = sub.add_parser("list", help="list runs")
    for name in ("status", "suite", "protocol", "agent", "since"):
        lst.add_argument(f"--{name}")
    lst.add_argument("--limit", type=int, default=20)
    lst.set_defaults(bench_func=_list)

    status = sub.add_parser("status", help="one run")
    status.add_argument("run", type=int)
    status.add_argument("--wait", action="store_true")
    status.add_argument("--json", action="store_true", help="the run's JSON (a mesh run's "
                        "default)")
    status.set_defaults(bench_func=_status)

    cancel = sub.add_parser("cancel", help="cancel a queued or running run")
    cancel.add_argument("run", type=int)
    cancel.set_defaults(bench_func=_cancel)

    results = sub.add_parser("results", help="per-question results")
    results.add_argument("run", type=int)
    results.add_argument("--json", action="store_true")
    results.set_defaults(bench_func=_results)

    compare = sub.add_parser("compare", help="runs side by side")
    compare.add_argument("runs", type=int, nargs="+")
    compare.add_argument("--json", action="store_true")
    compare.set_defaults(bench_func=_compare)
    _register_replay(sub)


def _register_replay(sub: argparse._SubParsersAction[Any]) -> None:
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

    resume = sub.add_parser("resume", help="queue a cancelled or failed run again (what it "
                            "recorded stays)")
    resume.add_argument("run", type=int)
    resume.add_argument("--wait", action="store_true")
    resume.set_defaults(bench_func=_resume)


def run_command(args: argparse.Namespace) -> int:
    try:
        return int(args.bench_func(args))
    except CliError as exc:
        print(f"gaia bench: {exc}", file=sys.stderr)
        return 2


def _call(args: argparse.Namespace, method: str, path: str, *, raw: bool = False,
          headers: dict[str, str] | None = None, **kwargs: Any) -> Any:
    """The API's JSON body (``raw``: its text); :class:`CliError` with the API's message for
    an error."""
    headers = {**({"Authorization": f"Bearer {args.key}"} if args.key else {}),
               **(headers or {})}
    url = args.url.rstrip("/") + "/api/v1/benchmarks/" + path
    try:
        response = httpx.request(method, url, headers=headers, timeout=60, **kwargs)
    except httpx.HTTPError as exc:
        raise CliError(f"{url}: {exc}") from exc
    if raw and response.status_code < 400:
        return response.text
    try:
        body = response.json()
    except ValueError:
        body = {"detail": response.text[:200]}
    if response.status_code >= 400:
        detail = body.get("detail") if isinstance(body, dict) else body
        raise CliError(f"HTTP {response.status_code}: {detail}")
    return body


def _tools(text: str) -> Any:
    if text in ("deterministic", "agents"):
        return text
    tools = {}
    for item in text.split(","):
        role, sep, backend = item.partition("=")
        if not sep:
            raise CliError(f"--tools: {item!r} is not role=backend")
        tools[role.strip()] = backend.strip()
    return tools


def _is_replay(run: dict[str, Any]) -> bool:
    return run.get("kind") == "replay"


def _line(run: dict[str, Any]) -> str:
    if _is_replay(run):
        return show.run_line(run)
    p = run["progress"]
    summary = run.get("summary") or {}
    quality = (f" EM {summary['mean_exact_match']:.3f} F1 {summary['mean_f1']:.3f}"
               if "mean_exact_match" in summary else "")
    label = " [baseline]" if run.get("baseline") and quality else ""
    return (f"run {run['id']} {run['status']} {run['suite']} {run['protocol']} "
            f"{p['questions_done']}/{p['questions_total']}{quality}{label}"
            + (f" error: {run['error']}" if run.get("error") else ""))


def _bar(run: dict[str, Any], width: int = 30) -> str:
    p = run["progress"]
    total = max(1, p["questions_total"])
    filled = int(width * p["questions_done"] / total)
    tail = show.bar_tail(run) if _is_replay(run) else f"{p['packets']} packets"
    return (f"\r[{'#' * filled}{'.' * (width - filled)}] {p['questions_done']}/"
            f"{p['questions_total']} {run['status']} {tail}")


def _wait(args: argparse.Namespace, run: dict[str, Any]) -> int:
    tty = sys.stderr.isatty()
    while run["status"] not in FINAL:
        if tty:
            sys.stderr.write(_bar(run))
            sys.stderr.flush()
        time.sleep(0.5)
        run = _call(args, "GET", f"runs/{run['id']}")
    sys.stderr.write(_bar(run) + "\n")
    print(_line(run))
    if _is_replay(run):
        print("\n".join(show.summary_table(run.get("summary"))))
    elif run.get("baseline") and run.get("summary"):
        print(f"  quality: {run['quality_label']}")
    return 0 if run["status"] == "succeeded" else 1


def _submit(args: argparse.Namespace) -> int:
    body: dict[str, Any] = {"suite": args.suite, "protocol": args.protocol,
                            "tools": _tools(args.tools),
                            "question_timeout_s": args.question_timeout,
                            "time_limit_s": args.time_limit}
    if args.limit is not None:
        body["limit"] = args.limit
    if args.indexes:
        try:
            body["indexes"] = [int(x) for x in args.indexes.split(",") if x.strip()]
        except ValueError as exc:
            raise CliError("--indexes: integers separated by commas") from exc
    run = _call(args, "POST", "runs", json=body)
    print(f"queued run {run['id']} ({run['progress']['questions_total']} questions)")
    return _wait(args, run) if args.wait else 0


def _list(args: argparse.Namespace) -> int:
    params = {k: getattr(args, k) for k in ("status", "suite", "protocol", "agent", "since")
              if getattr(args, k)}
    page = _call(args, "GET", "runs", params={**params, "limit": args.limit})
    for run in page["results"]:
        print(_line(run))
    print(f"({len(page['results'])} of {page['count']})")
    return 0


def _status(args: argparse.Namespace) -> int:
    run = _call(args, "GET", f"runs/{args.run}")
    if args.wait:
        return _wait(args, run)
    if args.json or not _is_replay(run):
        print(json.dumps(run, indent=2))
        return 0
    print(_line(run))
    print(f"  queued {run['queued_at']}, started {run['started_at'] or '-'}, finished "
          f"{run['finished_at'] or '-'}; parallel {run['parallel']}; worker "
          f"{run['worker'] or '-'}")
    for note in run["notes"]:
        print(f"  note: {note}")
    print("\n".join(show.summary_table(run.get("summary"))))
    return 0


def _cancel(args: argparse.Namespace) -> int:
    run = _call(args, "POST", f"runs/{args.run}/cancel")
    print(_line(run))
    return 0


def _results(args: argparse.Namespace) -> int:
    data = _call(args, "GET", f"runs/{args.run}/results")
    if args.json:
        print(json.dumps(data, indent=2))
        return 0
    print(f"run {data['run_id']} {data['status']} suite {data['suite']}; "
          f"quality: {data['quality_label']}")
    if (data.get("summary") or {}).get("kind") == "replay" or any(
            r.get("agent") for r in data["results"]):
        print("\n".join(show.result_rows(data["results"])))
        print("\n".join(show.summary_table(data.get("summary"))))
        return 0
    for r in data["results"]:
        em = "-" if r["exact_match"] is None else f"{r['exact_match']:.0f}"
        f1 = "-" if r["f1"] is None else f"{r['f1']:.2f}"
        print(f"q{r['question_index']:<4} {r['status']:<9} EM {em} F1 {f1} "
              f"{r['bytes_tx'] + r['bytes_rx']:>7} B {r['elapsed_ms']:8.1f} ms "
              f"answer={r['prediction']!r} gold={r['gold']!r}")
    summary = data.get("summary") or {}
    if summary:
        print(f"mean EM {summary['mean_exact_match']:.3f} F1 {summary['mean_f1']:.3f} "
              f"ROUGE-L {summary['mean_rouge_l']:.3f}")
    return 0


def _compare(args: argparse.Namespace) -> int:
    data = _call(args, "GET", "compare", params={"runs": ",".join(map(str, args.runs))})
    if args.json:
        print(json.dumps(data, indent=2))
        return 0
    for column in data["columns"]:
        if column["agent"] is not None:
            print(show.compare_column(column))
    for run in data["runs"]:
        if run["kind"] == "replay":
            continue
        s = run.get("summary") or {}
        em = s.get("mean_exact_match")
        quality = f"EM {em:.3f} F1 {s['mean_f1']:.3f}" if em is not None else "no summary"
        print(f"run {run['id']}: {run['status']} {run['suite']} {run['protocol']} "
              f"{quality} ({run['quality_label']})")
    print(f"{len(data['differences'])} question(s) differ: {data['differences']}")
    for q in data["questions"]:
        if q["differs"]:
            answers = " | ".join(f"{rid}: {(v or {}).get('prediction')!r}"
                                 for rid, v in q["runs"].items())
            print(f"  q{q['question_index']} gold={q['gold']!r} {answers}")
    return 0


# -- conversation suites and replay runs ----------------------------------------------------


def _suite_ref(text: str) -> int | str:
    """A suite as the API takes it: an id, a name or ``name@version``."""
    return int(text) if text.isdigit() else text


def _suite_id(args: argparse.Namespace, text: str) -> int:
    """The id of the suite ``text`` names (a name: its newest version)."""
    ref = _suite_ref(text)
    if isinstance(ref, int):
        return ref
    name, _, version = ref.partition("@")
    found = _call(args, "GET", "suites", params={"name": name})["results"]
    if version:
        found = [s for s in found if str(s["version"]) == version]
    if not found:
        raise CliError(f"no suite {text!r} (gaia bench suites lists them)")
    return int(found[0]["id"])


def _suites(args: argparse.Namespace) -> int:
    params = {k: v for k, v in (("name", args.name), ("kind", args.kind)) if v}
    if args.latest:
        params["latest"] = "true"
    found = _call(args, "GET", "suites", params=params)["results"]
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
    print(show.suite_made(_call(args, "POST", "suites", json=body)))
    return 0


def _suite_import(args: argparse.Namespace) -> int:
    try:
        data = sys.stdin.buffer.read() if args.file == "-" else Path(args.file).read_bytes()
    except OSError as exc:
        raise CliError(f"{args.file}: {exc.strerror}") from exc
    suite = _call(args, "POST", "suites", params={"name": args.name}, content=data,
                  headers={"Content-Type": "application/jsonl"})
    print(show.suite_made(suite))
    return 0


def _suite_export(args: argparse.Namespace) -> int:
    suite_id = _suite_id(args, args.suite)
    text = _call(args, "GET", f"suites/{suite_id}/export", raw=True)
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


def _replay(args: argparse.Namespace) -> int:
    body: dict[str, Any] = {"suite": _suite_ref(args.suite), "agents": args.agents}
    for key, value in (("judge", args.judge), ("parallel", args.parallel),
                       ("concurrency", args.concurrency), ("limit", args.limit),
                       ("question_timeout_s", args.question_timeout),
                       ("time_limit_s", args.time_limit)):
        if value is not None:
            body[key] = value
    run = _call(args, "POST", "runs", json=body)
    print(f"queued run {run['id']} ({show.bar_tail(run)[1:-1]}, suite "
          f"{run['suite']}@{run['suite_version']})")
    return _wait(args, run) if args.wait else 0


def _cases(args: argparse.Namespace) -> int:
    params: dict[str, Any] = {"limit": args.limit}
    if args.against:
        params["against"] = args.against
    if args.baseline:
        params["baseline"] = args.baseline
    page = _call(args, "GET", f"runs/{args.run}/cases", params=params)
    if args.json:
        print(json.dumps(page, indent=2))
        return 0
    for case in page["results"]:
        print("\n".join(show.case_rows(case)))
    print(f"({len(page['results'])} of {page['count']} case(s), largest regression first)")
    return 0


def _resume(args: argparse.Namespace) -> int:
    run = _call(args, "POST", f"runs/{args.run}/resume")
    print(_line(run))
    return _wait(args, run) if args.wait else 0
