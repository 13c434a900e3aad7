"""Run results: ``metrics.json``, ``run_artifacts.tar.gz`` and a suite's ``summary.json``."""

from __future__ import annotations

import json
import math
import statistics
import tarfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

__all__ = ["METRIC_FIELDS", "archive_workspaces", "percentile", "summarize", "write_json"]

# Every field ``metrics.json`` always has (reference 002's performance and quality fields,
# plus f1, the protocol, the agent count, per-agent busy time and status).
METRIC_FIELDS = (
    "status", "reason", "question_index", "question_id", "question", "gold_answer", "answer",
    "protocol", "agent_count", "agents",
    "bytes_tx", "bytes_rx", "pkt_cnt", "frames_tx", "header_overhead", "token_sum",
    "elapsed_ms", "rejected_frames", "malformed_frames",
    "quality_score", "exact_match", "rouge_l", "f1",
)


def write_json(path: Path, data: Any) -> None:
    path.write_text(json.dumps(data, ensure_ascii=False, indent=2) + "\n", encoding="utf-8")


def archive_workspaces(workspaces: Path, archive: Path) -> list[str]:
    """Pack every ``workspaces/<node_id>/`` into ``archive`` (gzip tar); return member dirs."""
    members = []
    with tarfile.open(archive, "w:gz") as tar:
        for node_dir in sorted(workspaces.iterdir(), key=lambda p: p.name):
            if node_dir.is_dir():
                tar.add(node_dir, arcname=f"workspaces/{node_dir.name}")
                members.append(node_dir.name)
    return members


def percentile(values: Sequence[float], pct: float) -> float:
    """Nearest-rank percentile (``pct`` in 0..100); 0.0 for no values."""
    if not values:
        return 0.0
    ordered = sorted(values)
    rank = max(1, math.ceil(pct / 100 * len(ordered)))
    return float(ordered[rank - 1])


def _mean(values: Sequence[float]) -> float:
    return float(statistics.fmean(values)) if values else 0.0


def summarize(metrics: Sequence[dict[str, Any]], *, suite: str, protocol: str) -> dict[str, Any]:
    """Aggregate per-question metrics.

    Quality means count a failed question as 0; elapsed statistics cover completed questions;
    byte means cover all questions.
    """
    completed = [m for m in metrics if m.get("status") == "completed"]
    elapsed = [float(m.get("elapsed_ms") or 0.0) for m in completed]

    def quality(key: str) -> float:
        return round(_mean([float(m.get(key) or 0.0) for m in metrics]), 4)

    bytes_rx = [float(m.get("bytes_rx", 0)) for m in metrics]
    bytes_tx = [float(m.get("bytes_tx", 0)) for m in metrics]
    return {
        "suite": suite,
        "protocol": protocol,
        "count": len(metrics),
        "completed": len(completed),
        "failed": len(metrics) - len(completed),
        "failures": [{"question_index": m.get("question_index"), "reason": m.get("reason")}
                     for m in metrics if m.get("status") != "completed"],
        "elapsed_ms": {
            "mean": round(_mean(elapsed), 3),
            "p50": round(percentile(elapsed, 50), 3),
            "p95": round(percentile(elapsed, 95), 3),
        },
        "mean_exact_match": quality("exact_match"),
        "mean_f1": quality("f1"),
        "mean_rouge_l": quality("rouge_l"),
        "mean_quality_score": quality("quality_score"),
        "bytes_per_question": {
            "rx": round(_mean(bytes_rx), 1),
            "tx": round(_mean(bytes_tx), 1),
            "total": round(_mean([a + b for a, b in zip(bytes_rx, bytes_tx, strict=True)]), 1),
        },
        "pkt_cnt_per_question": round(_mean([float(m.get("pkt_cnt", 0)) for m in metrics]), 2),
        "header_overhead_per_question": round(
            _mean([float(m.get("header_overhead", 0)) for m in metrics]), 1),
        "token_sum": sum(int(m.get("token_sum", 0)) for m in metrics),
    }
