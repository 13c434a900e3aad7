"""How ``gaia bench`` shows conversation suites and replay runs: pure functions from the API's
JSON bodies to lines of text (no I/O; the commands of :mod:`benchmarks.cli` call the API and
print them).

A replay's summary is a table, one row per target (cases, completed, failed, mean exact match,
token F1, ROUGE-L, embedding similarity, judge score, wins/ties/losses against the reference by
the judge's verdicts, tokens, tool calls, p50 duration), then each pair of targets' wins, ties
and losses by the primary score (the judge's, else the similarity). A case side by side is the
reference and each candidate with its score, its delta against the baseline, and a word diff
in wdiff's notation (``[-only the reference-]`` ``{+only the candidate+}``).
"""

from __future__ import annotations

from typing import Any

METRICS = (("EM", "exact_match"), ("F1", "f1"), ("ROUGE-L", "rouge_l"),
           ("sim", "similarity"), ("judge", "judge_score"))


def short(text: str | None, width: int = 60) -> str:
    """``text`` on one line, cut to ``width`` characters, quoted (``-`` for none)."""
    if text is None:
        return "-"
    flat = " ".join(text.split())
    return repr(flat if len(flat) <= width else flat[:width - 1] + "…")


def _num(value: float | None, fmt: str = ".3f") -> str:
    return "-" if value is None else format(value, fmt)


def suite_ref(suite: dict[str, Any]) -> str:
    return f"{suite['name']}@{suite['version']}"


def suite_made(suite: dict[str, Any]) -> str:
    origin = suite.get("origin") or {}
    source = (f" from {origin['threads']} thread(s)" if "threads" in origin else
              " from JSONL" if "jsonl" in origin else "")
    return (f"made suite {suite_ref(suite)} (id {suite['id']}): "
            f"{suite['question_count']} case(s){source}")


def suite_rows(suites: list[dict[str, Any]]) -> list[str]:
    rows = [f"{'id':>5}  {'suite':<32} {'kind':<13} {'cases':>6}  {'made by':<16} made at"]
    for s in suites:
        who = s.get("created_by") or ("built in" if s.get("builtin") else "-")
        rows.append(f"{s['id']:>5}  {suite_ref(s):<32} {s['kind']:<13} "
                    f"{s['question_count']:>6}  {who:<16} {s['created_at']}")
    return rows


def run_line(run: dict[str, Any]) -> str:
    """One line for a replay run (the list, cancel, resume and ``--wait``'s last line)."""
    p = run["progress"]
    judge = f" judged by {run['judge']}" if run.get("judge") else ""
    return (f"run {run['id']} {run['status']} replay of {run['suite']}@{run['suite_version']} "
            f"against {', '.join(run['agents'])}{judge} {p['questions_done']}/"
            f"{p['questions_total']}" + (f" error: {run['error']}" if run.get("error") else ""))


def bar_tail(run: dict[str, Any]) -> str:
    """What the progress bar says after the count: cases x targets."""
    targets = max(1, len(run["agents"]))
    cases = run["progress"]["questions_total"] // targets
    return f"({cases} case(s) x {targets} target(s))"


def summary_table(summary: dict[str, Any] | None) -> list[str]:
    """The per-target table of a replay's summary, and each pair's wins/ties/losses."""
    if not summary or not summary.get("agents"):
        return ["(no summary yet)"]
    width = max(8, *(len(a) for a in summary["agents"]))
    head = (f"{'target':<{width}} {'cases':>5} {'done':>5} {'fail':>5} "
            + " ".join(f"{label:>7}" for label, _ in METRICS)
            + f" {'vs ref W/T/L':>13} {'tokens':>8} {'tools':>6} {'p50 ms':>8}")
    rows = [head]
    for agent, s in summary["agents"].items():
        ref = s.get("vs_reference")
        wtl = f"{ref['win']}/{ref['tie']}/{ref['loss']}" if ref else "-"
        judge_errors = f"  ({s['judge_errors']} judge error(s))" if s.get("judge_errors") else ""
        rows.append(f"{agent:<{width}} {s['cases']:>5} {s['completed']:>5} {s['failed']:>5} "
                    + " ".join(f"{_num(s.get(key)):>7}" for _, key in METRICS)
                    + f" {wtl:>13} {s['tokens']:>8} {s['tool_calls']:>6} "
                    f"{_num(s.get('elapsed_ms_p50'), '.1f'):>8}{judge_errors}")
    by = "the judge's score" if summary.get("primary") == "judge_score" else "similarity"
    for pair, tally in (summary.get("pairs") or {}).items():
        rows.append(f"{pair} (by {by}): {tally['win']} win(s), {tally['tie']} tie(s), "
                    f"{tally['loss']} loss(es)")
    return rows


def result_rows(results: list[dict[str, Any]]) -> list[str]:
    """A replay's per-case results, one line each: case, target, status and scores."""
    width = max([8, *(len(r["agent"] or "") for r in results)])
    rows = []
    for r in results:
        em = "-" if r["exact_match"] is None else f"{r['exact_match']:.0f}"
        judge = (f"judge {r['judge_score']:.2f} {r['judge_verdict']}"
                 if r.get("judge_score") is not None else
                 f"judge error: {short(r['judge_error'], 40)}" if r.get("judge_error") else "")
        what = (f"answer={short(r['prediction'])}" if r["status"] == "completed"
                else f"error: {r['error']}")
        rows.append(f"case {r['question_index']:<4} {r['agent'] or '-':<{width}} "
                    f"{r['status']:<9} EM {em} F1 {_num(r['f1'], '.2f')} "
                    f"RL {_num(r['rouge_l'], '.2f')} sim {_num(r['similarity'])} "
                    f"{r['elapsed_ms']:8.1f} ms tools {r['tool_calls']} {what}"
                    + (f" {judge}" if judge else ""))
    return rows


def word_diff(diff: list[list[str]]) -> str:
    """A word diff (``[op, text]``) in wdiff's notation."""
    marks = {"=": "{}", "-": "[-{}-]", "+": "{{+{}+}}"}
    return " ".join(marks[op].format(text) for op, text in diff)


def case_rows(case: dict[str, Any]) -> list[str]:
    """One case side by side: the question, the reference, each candidate and its diff."""
    worst = case.get("worst_delta")
    rows = [f"case {case['index']}" + (f" (worst delta {worst:+.3f})" if worst is not None
                                       else "") + f": user {short(case['question'])}",
            f"  {'reference':<16} {short(case['reference'], 100)}"]
    for c in case["candidates"]:
        delta = "" if c.get("delta") is None else f" delta {c['delta']:+.3f}"
        score = "-" if c.get("score") is None else f"{c['score']:.3f}"
        status = "" if c["status"] == "completed" else f" {c['status']}: {c.get('error')}"
        rows.append(f"  {c['agent']:<16} score {score}{delta} {c['elapsed_ms']:.1f} ms "
                    f"{c['tokens']} tokens{status}")
        if c.get("prediction") is not None:
            rows.append(f"  {'':<16} {word_diff(c['diff'])}")
        if c.get("judge_reason") or c.get("judge_error"):
            rows.append(f"  {'':<16} judge: {c.get('judge_reason') or c.get('judge_error')}")
    return rows


def compare_column(column: dict[str, Any]) -> str:
    """A replay target's column in a comparison: its mean scores."""
    s = column.get("summary") or {}
    scores = " ".join(f"{label} {_num(s.get(key))}" for label, key in METRICS)
    return f"{column['label']}: {scores}" if s else f"{column['label']}: no summary"
