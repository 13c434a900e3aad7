"""MeshAgent in-process against a loopback relay: pipeline readiness, fallbacks, crashes."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

import mesh.tools
from mesh.agent import MeshAgent
from mesh.llm import LLM
from mesh.network import MeshNetwork
from mesh.protocols import get_adapter
from mesh.suite import load_suite
from mesh.tools import ToolInput, ToolOutput

QUESTION = load_suite()[8]


def agent(tool: str, workspace: Path, node_id: int = 0) -> MeshAgent:
    return MeshAgent(node_id=node_id, tool=tool, adapter=get_adapter("json"),
                     workspace=workspace)


def test_ready_waits_for_the_nearest_live_upstream(tmp_path: Path) -> None:
    reason = agent("reason", tmp_path)
    assert not reason.ready()  # no document yet
    reason.document = "T\nsentence"
    reason.roster = {0: "search", 1: "extract", 2: "triple", 3: "reason"}
    assert not reason.ready()  # triple is alive and silent
    reason.upstream["sentences"] = {"sentences": []}
    assert not reason.ready()
    reason.down.add(2)  # triple went down: sentences are enough now
    assert reason.ready()
    search = agent("search", tmp_path)
    search.document = "T\nsentence"
    assert search.ready()  # nothing upstream of search


def test_unknown_tool_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="unknown tool"):
        agent("dance", tmp_path)


async def test_tool_crash_is_a_disconnect_and_others_fall_back(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    async def broken(inp: ToolInput, llm: LLM | None) -> ToolOutput:
        raise RuntimeError("bug in search")

    monkeypatch.setitem(mesh.tools.TOOLS, "search", broken)
    net = MeshNetwork(get_adapter("json"))
    await net.start()
    search, reason = agent("search", tmp_path / "0", 0), agent("reason", tmp_path / "1", 1)
    tasks = [asyncio.create_task(a.run("127.0.0.1", net.port)) for a in (search, reason)]
    for _ in range(500):
        if len(net.peers) == 2:
            break
        await asyncio.sleep(0.01)
    await net.broadcast_init(QUESTION.document(), question=QUESTION.question)
    await asyncio.wait_for(net.wait_done(), 10)
    assert net.failure is None
    assert net.answer == "Terry Richardson"  # reason answered from the raw document
    assert net.down == {0: "disconnected"}
    assert await tasks[0] == 1
    net.begin_shutdown()
    assert await asyncio.wait_for(tasks[1], 10) == 0
    await net.close()
    memory = json.loads((tmp_path / "0" / "memory.json").read_text())
    assert memory["errors"] == ["tool search failed: RuntimeError('bug in search')"]
    log = [json.loads(line) for line in (tmp_path / "1" / "agent.log").read_text().splitlines()]
    assert [entry["packet"]["type"] for entry in log] == [
        "hello", "doc_init", "peer_down", "data_event", "shutdown"]


async def test_agent_exits_on_a_malformed_packet(tmp_path: Path) -> None:
    net = MeshNetwork(get_adapter("json"))
    await net.start()
    reason = agent("reason", tmp_path)
    task = asyncio.create_task(reason.run("127.0.0.1", net.port))
    for _ in range(500):
        if net.peers:
            break
        await asyncio.sleep(0.01)
    net.send_to_all({"type": "doc_init", "src": "mesh", "chunks": [], "roster": {"x": "y"}})
    assert await asyncio.wait_for(task, 10) == 1
    assert reason.errors[0].startswith("malformed doc_init packet")
    for _ in range(500):  # the relay sees the agent go
        if 0 in net.down:
            break
        await asyncio.sleep(0.01)
    assert net.down == {0: "disconnected"}
    await net.close()
