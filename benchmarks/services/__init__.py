"""Writes of the benchmarks app: suites (:mod:`.suites`), the one run lifecycle every kind of
run goes through (:mod:`.runs`), and the recovery of runs whose worker died (:mod:`.recovery`).
A kind's own create lives with the kind (:mod:`benchmarks.kinds`)."""

from benchmarks.services.recovery import NO_WORKER, benchmark_run_recover_stale, lost_note
from benchmarks.services.runs import (
    RUN_QUEUE,
    RUN_STATUS,
    RUN_TASK,
    Claim,
    Progress,
    benchmark_result_record,
    benchmark_run_cancel,
    benchmark_run_claim,
    benchmark_run_dispatch,
    benchmark_run_finish,
    benchmark_run_heartbeat,
    benchmark_run_resume,
    benchmark_run_save,
    benchmark_run_status,
    benchmark_run_summary_keep,
    run_selection,
    run_selection_again,
)
from benchmarks.services.suites import suite_create, suite_version_save

__all__ = [
    "NO_WORKER", "RUN_QUEUE", "RUN_STATUS", "RUN_TASK", "Claim", "Progress",
    "benchmark_result_record", "benchmark_run_cancel", "benchmark_run_claim",
    "benchmark_run_dispatch", "benchmark_run_finish", "benchmark_run_heartbeat",
    "benchmark_run_recover_stale", "benchmark_run_resume", "benchmark_run_save",
    "benchmark_run_status", "benchmark_run_summary_keep", "lost_note", "run_selection",
    "run_selection_again", "suite_create", "suite_version_save",
]
