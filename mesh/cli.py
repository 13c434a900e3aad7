"""``gaia mesh run``: run one question or a whole suite through the mesh.

``gaia mesh run [--suite FILE] [--index N | --limit N] [--protocol NAME]
[--agents search,extract,triple,reason] [--timeout S] --out DIR`` writes each question's
``metrics.json`` and artifacts under ``DIR/<n>/`` and a ``summary.json`` in ``DIR``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from pathlib import Path
from typing import Any

from mesh.llm import LLMSpec
from mesh.network import MeshEvent
from mesh.protocols import adapter_names
from mesh.run import RunConfig, RunResult, run_suite
from mesh.suite import Question, default_suite_path, load_suite
from mesh.tools import PIPELINE

__all__ = ["register", "run_command"]


def register(subparsers: argparse._SubParsersAction[Any]) -> None:
    """Add the ``mesh`` group (``gaia mesh run ...``) to the ``gaia`` parser."""
    mesh = subparsers.add_parser("mesh", help="run questions through the multi-agent mesh")
    sub = mesh.add_subparsers(dest="mesh_command", required=True)
    run = sub.add_parser("run", help="run one question or a suite",
                         description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    run.add_argument("--suite", type=Path, default=None,
                     help=f"suite JSON (default: {default_suite_path().name})")
    pick = run.add_mutually_exclusive_group()
    pick.add_argument("--index", type=int, default=None, help="run only question N (0-based)")
    pick.add_argument("--limit", type=int, default=None, help="run the first N questions")
    run.add_argument("--protocol", default="json",
                     help=f"adapter, composable with '+' ({', '.join(adapter_names())}); "
                          "e.g. msgpack+crc")
    run.add_argument("--agents", default=",".join(PIPELINE),
                     help="comma-separated tools, one agent each (default: %(default)s)")
    run.add_argument("--timeout", type=float, default=60.0, help="per-question timeout, s")
    run.add_argument("--llm-spec", type=Path, default=None,
                     help="JSON file: one LLM spec for every tool, or {tool: spec}")
    run.add_argument("--out", type=Path, required=True, help="output directory")
    run.add_argument("-v", "--verbose", action="store_true",
                     help="also print each run's events (agents, packets, answer) as they happen")
    run.set_defaults(func=run_command)


def _select(questions: list[Question], index: int | None, limit: int | None) -> list[Question]:
    if index is not None:
        if not 0 <= index < len(questions):
            raise ValueError(f"--index {index} is outside 0..{len(questions) - 1}")
        return [questions[index]]
    if limit is not None:
        if limit < 1:
            raise ValueError("--limit must be at least 1")
        return questions[:limit]
    return questions


def _llm_specs(path: Path | None) -> dict[str, LLMSpec]:
    if path is None:
        return {}
    data = json.loads(path.read_text(encoding="utf-8"))
    if not isinstance(data, dict):
        raise ValueError("--llm-spec must hold a JSON object")
    if "base_url" in data or "kind" in data:
        return {"*": data}
    return {str(k): dict(v) for k, v in data.items()}


def run_command(args: argparse.Namespace) -> int:
    """Entry point of ``gaia mesh run``; returns 0 if every question completed, else 1."""
    try:
        questions = _select(load_suite(args.suite), args.index, args.limit)
        agents = tuple(a.strip() for a in str(args.agents).split(",") if a.strip())
        config = RunConfig(protocol=args.protocol, agents=agents, timeout_s=args.timeout,
                           llm=_llm_specs(args.llm_spec))
        config.validate()
    except (OSError, ValueError) as exc:
        print(f"gaia mesh run: {exc}", file=sys.stderr)
        return 2
    total = len(questions)
    done = 0

    def progress(question: Question, result: RunResult) -> None:
        nonlocal done
        done += 1
        m = result.metrics
        quality = (f"EM={m['exact_match']} F1={m['f1']:.2f} ROUGE-L={m['rouge_l']:.2f}"
                   if result.status == "completed" else f"reason={result.reason}")
        print(f"[{done}/{total}] q{question.index} {result.status} {m['elapsed_ms']:.1f} ms "
              f"{m['bytes_rx'] + m['bytes_tx']} B {quality} answer={result.answer!r} "
              f"gold={question.answer!r}", flush=True)

    def show(event: MeshEvent) -> None:
        data = " ".join(f"{k}={v!r}" for k, v in event.data.items())
        print(f"  {event.t_ms:9.1f} ms {event.kind} {data}", flush=True)

    suite_name = str(args.suite) if args.suite else default_suite_path().name
    summary = asyncio.run(run_suite(questions, out_dir=args.out, config=config,
                                    suite_name=suite_name, on_result=progress,
                                    on_event=show if args.verbose else None))
    deterministic = [t for t in agents if t not in config.llm and "*" not in config.llm]
    label = (" (baseline: deterministic tools, written against the built-in 30 questions)"
             if deterministic else "")
    print(f"{summary['completed']}/{summary['count']} completed; "
          f"EM {summary['mean_exact_match']:.3f} F1 {summary['mean_f1']:.3f} "
          f"ROUGE-L {summary['mean_rouge_l']:.3f}{label}; elapsed p50 "
          f"{summary['elapsed_ms']['p50']:.1f} ms p95 {summary['elapsed_ms']['p95']:.1f} ms; "
          f"{summary['bytes_per_question']['total']:.0f} B/question -> "
          f"{args.out / 'summary.json'}")
    return 0 if summary["failed"] == 0 else 1
