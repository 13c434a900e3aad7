"""``gaia bench`` for runs of every kind: ``submit`` (a mesh run), ``list``, ``status``,
``cancel``, ``results``, ``compare``, ``resume``."""

from __future__ import annotations

import argparse
import json
from typing import Any

from benchmarks.cli import show
from benchmarks.cli.http import CliError, call, is_replay, line, wait


def register(sub: argparse._SubParsersAction[Any]) -> None:
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


def register_resume(sub: argparse._SubParsersAction[Any]) -> None:
    resume = sub.add_parser("resume", help="queue a cancelled or failed run again (what it "
                            "recorded stays)")
    resume.add_argument("run", type=int)
    resume.add_argument("--wait", action="store_true")
    resume.set_defaults(bench_func=_resume)


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
    run = call(args, "POST", "runs", json=body)
    print(f"queued run {run['id']} ({run['progress']['questions_total']} questions)")
    return wait(args, run) if args.wait else 0


def _list(args: argparse.Namespace) -> int:
    params = {k: getattr(args, k) for k in ("status", "suite", "protocol", "agent", "since")
              if getattr(args, k)}
    page = call(args, "GET", "runs", params={**params, "limit": args.limit})
    for run in page["results"]:
        print(line(run))
    print(f"({len(page['results'])} of {page['count']})")
    return 0


def _status(args: argparse.Namespace) -> int:
    run = call(args, "GET", f"runs/{args.run}")
    if args.wait:
        return wait(args, run)
    if args.json or not is_replay(run):
        print(json.dumps(run, indent=2))
        return 0
    print(line(run))
    print(f"  queued {run['queued_at']}, started {run['started_at'] or '-'}, finished "
          f"{run['finished_at'] or '-'}; parallel {run['parallel']}; worker "
          f"{run['worker'] or '-'}")
    for note in run["notes"]:
        print(f"  note: {note}")
    print("\n".join(show.summary_table(run.get("summary"))))
    return 0


def _cancel(args: argparse.Namespace) -> int:
    run = call(args, "POST", f"runs/{args.run}/cancel")
    print(line(run))
    return 0


def _results(args: argparse.Namespace) -> int:
    data = call(args, "GET", f"runs/{args.run}/results")
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
    data = call(args, "GET", "compare", params={"runs": ",".join(map(str, args.runs))})
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


def _resume(args: argparse.Namespace) -> int:
    run = call(args, "POST", f"runs/{args.run}/resume")
    print(line(run))
    return wait(args, run) if args.wait else 0
