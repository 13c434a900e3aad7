#!/usr/bin/env python3
"""The cost guard's counts (tests/test_cost_guard.py, issue 37): what the server does for a
JSON turn, a stream turn, a turn with one server-side tool call and an operator API list,
against the budget in ``tests/perf_budget.json``.

Runs the guard's own test (pytest, in-process, on a throwaway test database: SQLite, or the
server in DATABASE_URL with REDIS_URL if set) and prints each count beside its budget.
``--write`` records the counts as the budget of this setup (``sqlite``, or e.g.
``postgresql+redis``): commit ``tests/perf_budget.json`` saying why the turn needs more.
``--functions`` lists the functions each request calls most (to find what grew).

  .venv/bin/python -m scripts.perf.budget [--write] [--functions] [--scenarios chat_json,...]
  DATABASE_URL=postgres://... REDIS_URL=redis://... .venv/bin/python -m scripts.perf.budget

No time is measured: the counts are the same on a busy machine.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
BUDGET_FILE = ROOT / "tests" / "perf_budget.json"
TEST = "tests/test_cost_guard.py::test_a_request_costs_no_more_than_its_budget"


def run_guard(scenarios: list[str] | None, functions: bool) -> dict[str, object]:
    with tempfile.TemporaryDirectory(prefix="gaia-budget-") as tmp:
        report = Path(tmp) / "counts.json"
        env = {**os.environ, "GAIA_COST_REPORT": str(report)}
        if functions:
            env["GAIA_COST_FUNCTIONS"] = "1"
        cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
               *([f"{TEST}[{s}]" for s in scenarios] if scenarios else [TEST])]
        done = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True)
        if not report.exists():
            sys.stdout.write(done.stdout + done.stderr)
            raise SystemExit("the guard's test did not run (its output is above)")
        if done.returncode:  # over budget: the table says where
            print("(the guard fails with these counts)\n")
        return json.loads(report.read_text())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--write", action="store_true",
                        help="record the counts as this setup's budget")
    parser.add_argument("--functions", action="store_true",
                        help="list the functions each request calls most")
    parser.add_argument("--scenarios", default="",
                        help="comma-separated: chat_json,chat_stream,tool_call,threads_list")
    args = parser.parse_args()
    scenarios = [s for s in args.scenarios.split(",") if s] or None
    found = run_guard(scenarios, args.functions)
    functions = found.pop("functions", {})
    budgets = json.loads(BUDGET_FILE.read_text()) if BUDGET_FILE.exists() else {}
    for setup, by_scenario in found.items():
        print(f"{setup}:")
        print(f"  {'scenario':<14} {'count':<26} {'measured':>10} {'budget':>10} {'ratio':>7}")
        for scenario, counts in sorted(by_scenario.items()):
            budget = budgets.get(setup, {}).get(scenario, {})
            for name, value in sorted(counts.items()):
                allowed = budget.get(name)
                ratio = f"{value / allowed:.2f}" if allowed else "-"
                print(f"  {scenario:<14} {name:<26} {value:>10} "
                      f"{allowed if allowed is not None else '-':>10} {ratio:>7}")
            for name, calls in functions.get(setup, {}).get(scenario, []):
                print(f"      {calls:>6}  {name}")
        if args.write:
            budgets.setdefault(setup, {}).update(by_scenario)
    if args.write:
        BUDGET_FILE.write_text(json.dumps(budgets, indent=2, sort_keys=True) + "\n")
        print(f"\nwrote {BUDGET_FILE.relative_to(ROOT)}: commit it saying why the budget "
              "changed")


if __name__ == "__main__":
    main()
