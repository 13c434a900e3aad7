"""Reads of replay runs: a run's summary, its cases side by side (reference against each
candidate, word-level diff, scores, cost, latency, sorted by largest regression first), and a
suite's trend over its runs. The API and the pages both show these shapes."""

from __future__ import annotations

import difflib
import statistics
from collections import defaultdict
from typing import Any

from django.db.models import QuerySet

from agents.selectors import iso
from benchmarks.models import BenchmarkResult, BenchmarkRun, BenchmarkSuite, SuiteCase
from benchmarks.replay.scoring import outcome, primary
from benchmarks.selectors import last_user_message

METRICS = ("exact_match", "f1", "rouge_l", "similarity", "judge_score")


def _mean(values: list[float]) -> float | None:
    return round(statistics.fmean(values), 4) if values else None


def _p50(values: list[float]) -> float | None:
    return round(statistics.median(values), 1) if values else None


def _tally(outcomes: list[str | None]) -> dict[str, int]:
    return {k: sum(1 for o in outcomes if o == k) for k in ("win", "tie", "loss")}


def replay_summary(*, run_id: int) -> dict[str, Any]:
    """Per target: counts, mean scores, tokens, TTFT and duration, tool calls; wins, ties and
    losses against the reference (the judge's verdicts) and against each other target (by
    the primary score: the judge's, else the embedding similarity)."""
    run = BenchmarkRun.objects.select_related("suite").get(pk=run_id)
    rows = list(BenchmarkResult.objects.filter(run_id=run_id))
    by_agent: dict[str, list[BenchmarkResult]] = defaultdict(list)
    for row in rows:
        by_agent[row.agent].append(row)
    agents: dict[str, Any] = {}
    for agent in run.agents:
        mine = by_agent.get(agent, [])
        done = [r for r in mine if r.status == "completed"]
        entry: dict[str, Any] = {
            "cases": len(mine), "completed": len(done), "failed": len(mine) - len(done),
            "judge_errors": sum(1 for r in done if r.judge_error),
            "tokens": sum(r.tokens for r in mine),
            "tool_calls": sum(r.tool_calls for r in mine),
            "ttft_ms_p50": _p50([float(r.ttft_ms) for r in done if r.ttft_ms is not None]),
            "elapsed_ms_p50": _p50([r.elapsed_ms for r in done]),
            "elapsed_ms_mean": _mean([r.elapsed_ms for r in done]),
        }
        for metric in METRICS:
            entry[metric] = _mean([float(getattr(r, metric)) for r in done
                                   if getattr(r, metric) is not None])
        verdicts = [r.judge_verdict for r in done if r.judge_verdict]
        entry["vs_reference"] = {"win": verdicts.count("better"), "tie": verdicts.count("same"),
                                 "loss": verdicts.count("worse")} if verdicts else None
        agents[agent] = entry
    index = {(r.question_index, r.agent): r for r in rows if r.status == "completed"}
    pairs = {}
    for a in run.agents:
        for b in run.agents:
            if a < b:
                outcomes = [outcome(primary(index[(i, a)]), primary(index[(i, b)]))
                            for i in run.question_indexes if (i, a) in index and (i, b) in index]
                pairs[f"{a} vs {b}"] = _tally(outcomes)
    return {"run_id": run.pk, "kind": "replay", "suite": run.suite.label,
            "cases": len(run.question_indexes), "agents": agents, "judge": run.judge or None,
            "pairs": pairs, "primary": "judge_score" if run.judge else "similarity"}


def word_diff(reference: str, candidate: str) -> list[list[str]]:
    """The candidate against the reference, word by word: ``[op, text]`` with ``=`` (both),
    ``-`` (only the reference) and ``+`` (only the candidate)."""
    a, b = reference.split(), candidate.split()
    out: list[list[str]] = []
    for tag, i1, i2, j1, j2 in difflib.SequenceMatcher(None, a, b, autojunk=False).get_opcodes():
        if tag == "equal":
            out.append(["=", " ".join(a[i1:i2])])
            continue
        if i2 > i1:
            out.append(["-", " ".join(a[i1:i2])])
        if j2 > j1:
            out.append(["+", " ".join(b[j1:j2])])
    return out


def _candidate(row: BenchmarkResult, reference: str) -> dict[str, Any]:
    return {
        "agent": row.agent, "status": row.status, "error": row.error or None,
        "prediction": row.prediction, "diff": word_diff(reference, row.prediction or ""),
        "exact_match": row.exact_match, "f1": row.f1, "rouge_l": row.rouge_l,
        "similarity": row.similarity, "judge_score": row.judge_score,
        "judge_verdict": row.judge_verdict or None, "judge_reason": row.judge_reason or None,
        "judge_error": row.judge_error or None, "tokens": row.tokens,
        "ttft_ms": row.ttft_ms, "elapsed_ms": round(row.elapsed_ms, 1),
        "tool_calls": row.tool_calls, "thread_id": str(row.thread_id) if row.thread_id else None,
        "score": primary(row),
    }


def replay_cases(*, run: BenchmarkRun, against: BenchmarkRun | None = None,
                 baseline: str | None = None) -> list[dict[str, Any]]:
    """Every case of the run side by side: its conversation's last user message, the
    reference, and each target's candidate. ``delta`` is how a candidate's primary score
    moved against the baseline (``baseline``: another target of this run; ``against``: the
    same target in another run of the suite, else the run's first target); cases are sorted
    by their worst delta, largest regression first."""
    rows = BenchmarkResult.objects.filter(run=run)
    results: dict[int, dict[str, BenchmarkResult]] = defaultdict(dict)
    for row in rows:
        results[row.question_index][row.agent] = row
    others: dict[int, dict[str, BenchmarkResult]] = defaultdict(dict)
    if against is not None:
        for row in BenchmarkResult.objects.filter(run=against):
            others[row.question_index][row.agent] = row
    cases = {c.index: c for c in SuiteCase.objects.filter(suite_id=run.suite_id,
                                                          index__in=list(results))}
    out = []
    for index in run.question_indexes:
        case = cases.get(index)
        if case is None or index not in results:
            continue
        shown = []
        for agent in run.agents:
            row = results[index].get(agent)
            if row is None:
                continue
            item = _candidate(row, case.ideal)
            if against is not None:
                base_row = others[index].get(agent)
            else:
                base_row = results[index].get(baseline or run.agents[0])
                if base_row is row:
                    base_row = None
            base = primary(base_row) if base_row is not None else None
            item["delta"] = (round(item["score"] - base, 4) if item["score"] is not None
                             and base is not None else None)
            shown.append(item)
        deltas = [c["delta"] for c in shown if c["delta"] is not None]
        out.append({"index": index, "input": case.input,
                    "question": last_user_message(case.input),
                    "reference": case.ideal, "source_thread": str(case.source_thread)
                    if case.source_thread else None, "source_agent": case.source_agent or None,
                    "candidates": shown, "worst_delta": min(deltas) if deltas else None})
    out.sort(key=lambda c: (c["worst_delta"] is None, c["worst_delta"] or 0.0, c["index"]))
    return out


def suite_versions(*, name: str) -> QuerySet[BenchmarkSuite]:
    return BenchmarkSuite.objects.filter(name=name).order_by("-version")


def suite_trend(*, name: str) -> list[dict[str, Any]]:
    """A suite's finished replay runs, oldest first (every version of the name), with each
    target's mean scores: a chart's points."""
    runs = (BenchmarkRun.objects.filter(suite__name=name, kind=BenchmarkRun.Kind.REPLAY,
                                        status=BenchmarkRun.Status.SUCCEEDED)
            .select_related("suite").order_by("finished_at", "pk"))
    points = []
    for run in runs:
        agents = (run.summary or {}).get("agents") or {}
        points.append({"run_id": run.pk, "version": run.suite.version,
                       "finished_at": iso(run.finished_at), "judge": run.judge or None,
                       "agents": {a: {m: agents[a].get(m) for m in METRICS} for a in agents}})
    return points
