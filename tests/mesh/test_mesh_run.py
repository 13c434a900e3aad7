"""End to end: real agent processes on loopback, a real HotpotQA question."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import tarfile
from pathlib import Path
from typing import Any

import pytest

import mesh.evaluation
import mesh.run
from mesh.evaluation import Score
from mesh.network import MeshEvent
from mesh.results import METRIC_FIELDS
from mesh.run import RunConfig, run_question
from mesh.suite import load_suite

SUITE = load_suite()
QUESTION = SUITE[8]  # "Who is older, Annie Morton or Terry Richardson?"


async def test_full_four_agent_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    evaluations: list[str] = []
    real_score = mesh.evaluation.score_answer

    def counting_score(prediction: str, gold: str) -> Score:
        evaluations.append(prediction)
        return real_score(prediction, gold)

    monkeypatch.setattr(mesh.run, "score_answer", counting_score)
    events: list[MeshEvent] = []
    result = await run_question(QUESTION, out_dir=tmp_path,
                                config=RunConfig(protocol="msgpack+crc"),
                                on_event=events.append)

    assert evaluations == ["Terry Richardson"]  # evaluated exactly once
    stray = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
    assert stray == []
    assert result.status == "completed"
    metrics = json.loads(result.metrics_path.read_text())
    assert metrics == json.loads(json.dumps(result.metrics))
    assert set(METRIC_FIELDS) <= set(metrics)
    assert metrics["reason"] is None
    assert metrics["answer"] == metrics["gold_answer"] == "Terry Richardson"
    assert (metrics["exact_match"], metrics["f1"], metrics["rouge_l"],
            metrics["quality_score"]) == (1, 1.0, 1.0, 1.0)
    assert metrics["protocol"] == "msgpack+crc"
    assert metrics["agent_count"] == 4
    assert [a["tool"] for a in metrics["agents"]] == ["search", "extract", "triple", "reason"]
    for agent in metrics["agents"]:
        assert agent["status"] == "ok"
        assert agent["exit_code"] == 0
        assert agent["pkts_sent"] == 1
        assert agent["busy_ms"] > 0
    # 4 hellos + 4 data events in; 4 doc_init + 4 x 3 fan-out copies + 4 shutdowns out.
    assert metrics["pkt_cnt"] == 8
    assert metrics["frames_tx"] == 20
    assert metrics["bytes_rx"] > 1000
    assert metrics["bytes_tx"] > 10 * 1000  # the document went to four agents
    assert metrics["header_overhead"] == 8 * (metrics["pkt_cnt"] + metrics["frames_tx"])
    assert metrics["token_sum"] == 0  # deterministic tools use no model
    assert 0 < metrics["elapsed_ms"] < 10_000
    assert metrics["rejected_frames"] == metrics["malformed_frames"] == 0

    with tarfile.open(result.archive_path) as tar:
        names = set(tar.getnames())
        for node in range(4):
            assert f"workspaces/{node}/agent.log" in names
            assert f"workspaces/{node}/memory.json" in names
        log = tar.extractfile("workspaces/3/agent.log")
        assert log is not None
        lines = [json.loads(line) for line in log.read().splitlines()]
    directions = [(line["dir"], line["packet"]["type"]) for line in lines]
    assert directions[0] == ("tx", "hello")
    assert ("rx", "doc_init") in directions
    assert ("tx", "data_event") in directions
    assert directions[-1] == ("rx", "shutdown")
    memory = json.loads((tmp_path / "workspaces" / "3" / "memory.json").read_text())
    assert memory["output"]["payload"] == "Terry Richardson"
    assert memory["inputs"] == ["search_docs", "sentences", "triples"]

    kinds = [e.kind for e in events]
    assert kinds[0] == "run.started"
    assert kinds.count("agent.connected") == 4
    assert kinds.count("packet") == 4
    assert kinds[-1] == "run.finished"
    assert "agent.down" not in kinds


async def test_two_runs_at_once(tmp_path: Path) -> None:
    ports: list[int] = []

    def on_event(event: MeshEvent) -> None:
        if event.kind == "run.started":
            ports.append(event.data["port"])

    first, second = await asyncio.gather(
        run_question(SUITE[0], out_dir=tmp_path / "a", config=RunConfig(protocol="json"),
                     on_event=on_event),
        run_question(SUITE[12], out_dir=tmp_path / "b", config=RunConfig(protocol="anp"),
                     on_event=on_event),
    )
    assert len(set(ports)) == 2
    assert (first.status, first.answer) == ("completed", "yes")
    assert (second.status, second.answer) == ("completed", "1999")
    assert first.metrics["header_overhead"] == 4 * (first.metrics["pkt_cnt"]
                                                    + first.metrics["frames_tx"])
    assert second.metrics["header_overhead"] == 5 * (second.metrics["pkt_cnt"]
                                                     + second.metrics["frames_tx"])


def killer(tool: str, when: str) -> tuple[list[MeshEvent], Any]:
    """An event callback that SIGKILLs the ``tool`` agent once ``when`` happens."""
    events: list[MeshEvent] = []
    pids: dict[str, int] = {}

    def on_event(event: MeshEvent) -> None:
        events.append(event)
        if event.kind == "agent.connected":
            pids[event.data["tool"]] = event.data["pid"]
        if event.kind == when or event.data.get("tag") == when:
            os.kill(pids[tool], signal.SIGKILL)

    return events, on_event


async def test_killed_agent_mid_run_pipeline_still_finishes(tmp_path: Path) -> None:
    events, on_event = killer("triple", "sentences")
    config = RunConfig(tool_delay_s={"triple": 30.0}, timeout_s=20.0)
    result = await run_question(QUESTION, out_dir=tmp_path, config=config, on_event=on_event)
    assert result.status == "completed"
    assert result.answer == "Terry Richardson"
    agents = {a["tool"]: a for a in result.metrics["agents"]}
    assert agents["triple"]["status"] == "down"
    assert agents["triple"]["exit_code"] == -signal.SIGKILL
    assert agents["reason"]["status"] == "ok"
    assert any(e.kind == "agent.down" and e.data["tool"] == "triple" for e in events)
    assert result.metrics["elapsed_ms"] < 15_000  # it did not wait for the 30 s delay
    memory = json.loads((tmp_path / "workspaces" / "3" / "memory.json").read_text())
    assert memory["down"] == [2]
    assert "triples" not in memory["inputs"]
    assert result.archive_path.exists()


async def test_killed_reason_agent_fails_with_partial_metrics(tmp_path: Path) -> None:
    _, on_event = killer("reason", "run.init")
    config = RunConfig(tool_delay_s={"reason": 30.0}, timeout_s=20.0)
    result = await run_question(QUESTION, out_dir=tmp_path, config=config, on_event=on_event)
    assert result.status == "failed"
    assert result.reason is not None
    assert "no reason agent left" in result.reason
    metrics = json.loads(result.metrics_path.read_text())
    assert set(METRIC_FIELDS) <= set(metrics)
    assert metrics["answer"] is None
    assert metrics["exact_match"] is None
    assert metrics["bytes_tx"] > 0
    assert metrics["pkt_cnt"] >= 4
    assert {a["tool"]: a["status"] for a in metrics["agents"]}["reason"] == "down"
    assert result.archive_path.exists()


async def test_run_level_timeout(tmp_path: Path) -> None:
    config = RunConfig(tool_delay_s={"reason": 30.0}, timeout_s=4.0)
    result = await run_question(SUITE[0], out_dir=tmp_path, config=config)
    assert result.status == "failed"
    assert result.reason == "timeout after 4 s"
    assert result.metrics["answer"] is None
    assert result.metrics["pkt_cnt"] >= 7  # hellos and the three upstream outputs arrived
    assert all(a["status"] == "ok" for a in result.metrics["agents"])  # they obeyed shutdown


def test_cli_runs_a_question_and_writes_a_summary(tmp_path: Path,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    from mesh.__main__ import main

    code = main(["run", "--index", "12", "--protocol", "json", "--agents",
                 "search,extract,reason", "--timeout", "30", "--out", str(tmp_path), "-v"])
    assert code == 0
    out = capsys.readouterr().out
    assert "[1/1] q12 completed" in out
    # A rerun into the same directory replaces the previous run's workspaces.
    assert main(["run", "--index", "12", "--agents", "search,reason", "--out",
                 str(tmp_path)]) == 0
    assert sorted(p.name for p in (tmp_path / "12" / "workspaces").iterdir()) == ["0", "1"]
    log = (tmp_path / "12" / "workspaces" / "0" / "agent.log").read_text().splitlines()
    assert sum('"hello"' in line for line in log) == 1
    assert "agent.connected node_id=2 tool='reason'" in out
    assert "run.answer node_id=2 answer='1999'" in out
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert (summary["count"], summary["completed"], summary["failed"]) == (1, 1, 0)
    assert summary["mean_exact_match"] == 1.0
    assert summary["protocol"] == "json"
    metrics = json.loads((tmp_path / "12" / "metrics.json").read_text())
    assert metrics["agent_count"] == 2
    assert (tmp_path / "12" / "run_artifacts.tar.gz").exists()


def test_cli_rejects_bad_arguments(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from mesh.__main__ import main

    assert main(["run", "--protocol", "xml", "--out", str(tmp_path)]) == 2
    assert main(["run", "--agents", "search,dance", "--out", str(tmp_path)]) == 2
    assert main(["run", "--index", "99", "--out", str(tmp_path)]) == 2
    assert "unknown protocol" in capsys.readouterr().err


async def test_pool_starts_agents_once_and_gives_each_question_a_fresh_session(
        tmp_path: Path) -> None:
    from mesh.run import AgentPool

    fresh = await run_question(SUITE[12], out_dir=tmp_path / "fresh", config=RunConfig())
    pids: list[set[int]] = []

    def on_event(event: MeshEvent) -> None:
        if event.kind == "run.started":
            pids.append(set())
        if event.kind == "agent.connected":
            pids[-1].add(event.data["pid"])

    async with AgentPool(RunConfig()) as pool:
        results = [await run_question(q, out_dir=tmp_path / str(i), pool=pool, on_event=on_event)
                   for i, q in enumerate([SUITE[12], SUITE[8], SUITE[12]])]
        assert pool.spawned == 4
        live = pool.pids()
    assert [r.answer for r in results] == ["1999", "Terry Richardson", "1999"]
    assert pids[0] == pids[1] == pids[2] == set(live)
    for pid in live:  # closing the pool ended them
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)
    # The same traffic as a question whose agents were started for it alone.
    for key in ("pkt_cnt", "frames_tx", "header_overhead"):
        assert results[0].metrics[key] == results[2].metrics[key] == fresh.metrics[key]
    assert abs(results[2].metrics["bytes_tx"] - fresh.metrics["bytes_tx"]) < 64  # busy_ms digits
    # Fresh state per question: each workspace logs one hello and one doc_init.
    log = (tmp_path / "2" / "workspaces" / "3" / "agent.log").read_text().splitlines()
    assert sum('"hello"' in line for line in log) == 1
    assert sum('"doc_init"' in line for line in log) == 1
    memory = json.loads((tmp_path / "1" / "workspaces" / "3" / "memory.json").read_text())
    assert memory["question"] == SUITE[8].question


async def test_pool_replaces_an_agent_killed_in_an_earlier_question(tmp_path: Path) -> None:
    from mesh.run import AgentPool

    _, on_event = killer("reason", "run.init")
    config = RunConfig(tool_delay_s={"reason": 0.5}, timeout_s=20.0)
    async with AgentPool(config) as pool:
        first = await run_question(QUESTION, out_dir=tmp_path / "a", pool=pool,
                                   on_event=on_event)
        second = await run_question(QUESTION, out_dir=tmp_path / "b", pool=pool)
        assert pool.spawned == 5
    assert first.status == "failed"
    assert {a["tool"]: a["exit_code"] for a in first.metrics["agents"]}["reason"] == (
        -signal.SIGKILL)
    assert (second.status, second.answer) == ("completed", "Terry Richardson")


async def test_cancelling_a_pooled_question_ends_its_agents(tmp_path: Path) -> None:
    from mesh.run import AgentPool

    config = RunConfig(tool_delay_s={"reason": 30.0}, timeout_s=60.0)
    async with AgentPool(config) as pool:
        await pool.start()
        pids = pool.pids()
        task = asyncio.create_task(run_question(QUESTION, out_dir=tmp_path, pool=pool))
        await asyncio.sleep(1.0)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert pool.pids() == []  # the session never ended: its processes were killed
    for pid in pids:
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)
