"""``gaia bench submit|list|status|cancel|results|compare``: the benchmarks API from a shell.

The base URL and key come from ``--url``/``--key`` or ``GAIA_URL``/``GAIA_API_KEY`` (a key with
the ``benchmarks`` scope). Plain HTTP (httpx): no Django here, so it works from any machine.
``submit --wait`` and ``status --wait`` draw a progress bar on stderr until the run ends.
Exit codes: 0 succeeded (or the request worked), 1 the run failed or was cancelled, 2 a bad
request or an unreachable server.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from typing import Any

import httpx

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


def run_command(args: argparse.Namespace) -> int:
    try:
        return int(args.bench_func(args))
    except CliError as exc:
        print(f"gaia bench: {exc}", file=sys.stderr)
        return 2


def _call(args: argparse.Namespace, method: str, path: str, **kwargs: Any) -> Any:
    headers = {"Authorization": f"Bearer {args.key}"} if args.key else {}
    url = args.url.rstrip("/") + "/api/v1/benchmarks/" + path
    try:
        response = httpx.request(method, url, headers=headers, timeout=30, **kwargs)
    except httpx.HTTPError as exc:
        raise CliError(f"{url}: {exc}") from exc
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


def _line(run: dict[str, Any]) -> str:
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
    return (f"\r[{'#' * filled}{'.' * (width - filled)}] {p['questions_done']}/"
            f"{p['questions_total']} {run['status']} {p['packets']} packets")


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
    if run.get("baseline") and run.get("summary"):
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
    print(json.dumps(run, indent=2))
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
    for run in data["runs"]:
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
