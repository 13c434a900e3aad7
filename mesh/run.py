"""Run one question or a suite: agent processes, the relay, the timeout, the results.

The Python API a Celery task can call::

    result = await run_question(question, out_dir=Path("runs/7"), config=RunConfig(),
                                on_event=print)
    summary = await run_suite(load_suite(), out_dir=Path("runs"), config=RunConfig())

``on_event`` receives :class:`~mesh.network.MeshEvent` objects (``run.started``,
``agent.connected``, ``run.init``, ``packet``, ``agent.down``, ``run.answer``,
``run.finished``...) as they happen, so a caller can stream progress.

Layout of ``out_dir``: ``workspaces/<node_id>/`` (``agent.log``, ``memory.json``,
``stderr.log``), ``metrics.json`` and ``run_artifacts.tar.gz``.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import json
import os
import secrets
import shutil
import sys
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from mesh.evaluation import score_answer
from mesh.framing import DEFAULT_MAX_FRAME_SIZE
from mesh.llm import LLMCall, LLMError, LLMReply, LLMSpec
from mesh.network import EventCallback, MeshEvent, MeshNetwork
from mesh.protocols import get_adapter, needs_signing_seed
from mesh.results import archive_workspaces, summarize, write_json
from mesh.suite import Question
from mesh.tools import PIPELINE

__all__ = ["AgentPool", "LLMHost", "QuestionFailed", "RunConfig", "RunResult", "run_question",
           "run_suite"]

_PACKAGE_ROOT = str(Path(__file__).resolve().parent.parent)


@dataclass(frozen=True)
class RunConfig:
    """How to run a question.

    ``llm`` maps a tool name (or ``"*"`` for every tool) to an :data:`~mesh.llm.LLMSpec`; a
    tool without one runs deterministically. ``tool_delay_s`` adds latency before a tool runs
    (to simulate a slow model in tests and benchmarks). ``timeout_s`` bounds the whole run.
    """

    protocol: str = "json"
    agents: tuple[str, ...] = PIPELINE
    timeout_s: float = 60.0
    llm: Mapping[str, LLMSpec] = field(default_factory=dict)
    tool_delay_s: Mapping[str, float] = field(default_factory=dict)
    max_frame_size: int = DEFAULT_MAX_FRAME_SIZE
    shutdown_grace_s: float = 5.0

    def validate(self) -> None:
        """Raise ``ValueError`` for an unknown protocol or tool, or a bad timeout."""
        seed = bytes(32) if needs_signing_seed(self.protocol) else None
        get_adapter(self.protocol, signing_seed=seed)
        unknown = [a for a in self.agents if a not in PIPELINE]
        if unknown or not self.agents:
            raise ValueError(f"agents must be among {', '.join(PIPELINE)}; got {unknown}")
        if self.timeout_s <= 0:
            raise ValueError("timeout_s must be positive")


@dataclass(frozen=True)
class RunResult:
    status: str
    reason: str | None
    answer: str | None
    metrics: dict[str, Any]
    out_dir: Path

    @property
    def metrics_path(self) -> Path:
        return self.out_dir / "metrics.json"

    @property
    def archive_path(self) -> Path:
        return self.out_dir / "run_artifacts.tar.gz"


@dataclass
class _AgentProc:
    """One agent process of a pool, and what it reported for the current question."""

    node_id: int
    tool: str
    proc: asyncio.subprocess.Process
    killed: bool = False
    exit_code: int | None = None
    finished: bool = False
    # Session ends as its stdout reports them (None: stdout closed), read by one task that
    # also answers the agent's calls to a host LLM.
    ends: asyncio.Queue[int | None] = field(default_factory=asyncio.Queue)
    reader: asyncio.Task[None] | None = None
    calls: set[asyncio.Task[None]] = field(default_factory=set)


class QuestionFailed(Exception):
    """Raised by an ``llm_host`` to end the current question as failed (with the reason)."""


# How a pool answers its agents' calls to a ``host`` LLM (mesh.llm.HostLLM): the calling
# agent's tool and the call, to a reply (raise LLMError for a failed call, QuestionFailed to
# fail the whole question).
LLMHost = Callable[[str, LLMCall], Awaitable[LLMReply]]


def _open_append(path: Path) -> IO[bytes]:
    path.parent.mkdir(parents=True, exist_ok=True)
    return open(path, "ab")  # the caller closes it


def _prepare(out_dir: Path) -> Path:
    """Create ``out_dir/workspaces``, emptied of a previous run's agents (it is ours alone)."""
    workspaces = out_dir / "workspaces"
    if workspaces.is_dir():
        shutil.rmtree(workspaces)
    workspaces.mkdir(parents=True)
    return workspaces


def _write_results(out_dir: Path, workspaces: Path, metrics: dict[str, Any]) -> None:
    write_json(out_dir / "metrics.json", metrics)
    archive_workspaces(workspaces, out_dir / "run_artifacts.tar.gz")


class AgentPool:
    """The agent processes of a run, started once and attached to each question's relay.

    Each process runs ``python -m mesh.agent --serve``: per question it gets one command line
    (relay port, workspace, signing seed) and runs a fresh agent session, so every question
    sees the same bytes on the wire and a fresh workspace and state, without paying process
    start-up. A process that died or did not finish its session is replaced at the next
    :meth:`attach`. Use ``async with AgentPool(config) as pool`` (closing ends every process).
    """

    def __init__(self, config: RunConfig, *, stderr_dir: Path | None = None,
                 llm_host: LLMHost | None = None) -> None:
        config.validate()
        self.config = config
        self.stderr_dir = stderr_dir
        self.llm_host = llm_host
        self._procs: dict[int, _AgentProc] = {}
        self.spawned = 0
        self.net: MeshNetwork | None = None  # the relay of the question running now

    def fail_question(self, reason: str) -> None:
        """End the question running now as failed, saying why (its agents are told to stop,
        its metrics are kept)."""
        if self.net is not None:
            self.net.fail(reason)

    async def __aenter__(self) -> AgentPool:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    def pids(self) -> list[int]:
        return [a.proc.pid for a in self._procs.values() if a.proc.returncode is None]

    async def start(self) -> None:
        """Start every agent process now (else :meth:`attach` starts them on first use)."""
        for node_id, tool in enumerate(self.config.agents):
            await self._ensure(node_id, tool)

    async def _ensure(self, node_id: int, tool: str) -> _AgentProc:
        agent = self._procs.get(node_id)
        if agent is not None and agent.proc.returncode is None:
            return agent
        config = self.config
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(
            p for p in (_PACKAGE_ROOT, env.get("PYTHONPATH", "")) if p)
        env.pop("MESH_SIGNING_SEED", None)
        env.pop("MESH_LLM_SPEC", None)
        spec = config.llm.get(tool) or config.llm.get("*")
        if spec:
            env["MESH_LLM_SPEC"] = json.dumps(dict(spec))
        args = [
            "-m", "mesh.agent", "--serve", "--node-id", str(node_id), "--tool", tool,
            "--protocol", config.protocol,
            "--delay", str(float(config.tool_delay_s.get(tool, 0.0))),
            "--max-frame-size", str(config.max_frame_size),
        ]
        stderr: IO[bytes] | int = asyncio.subprocess.DEVNULL
        if self.stderr_dir is not None:
            stderr = _open_append(self.stderr_dir / f"agent-{node_id}.stderr.log")
        try:
            proc = await asyncio.create_subprocess_exec(
                sys.executable, *args, stdin=asyncio.subprocess.PIPE,
                stdout=asyncio.subprocess.PIPE, stderr=stderr, env=env)
        finally:
            if not isinstance(stderr, int):
                stderr.close()
        self.spawned += 1
        agent = self._procs[node_id] = _AgentProc(node_id, tool, proc)
        agent.reader = asyncio.create_task(self._read(agent), name=f"mesh-agent-{node_id}")
        return agent

    async def _read(self, agent: _AgentProc) -> None:
        """The agent's stdout: session ends (``{"code": N}``) and calls to a host LLM."""
        assert agent.proc.stdout is not None
        while True:
            line = await agent.proc.stdout.readline()
            if not line:
                agent.ends.put_nowait(None)
                return
            try:
                message = json.loads(line)
            except ValueError:
                continue
            if not isinstance(message, dict):
                continue
            call = message.get("llm")
            if isinstance(call, dict):
                task = asyncio.create_task(self._answer(agent, call))
                agent.calls.add(task)
                task.add_done_callback(agent.calls.discard)
            elif "code" in message:
                with contextlib.suppress(ValueError, TypeError):
                    agent.ends.put_nowait(int(message["code"]))

    async def _answer(self, agent: _AgentProc, call: dict[str, Any]) -> None:
        """Answer one host-LLM call of ``agent`` on its stdin (an error if there is no host,
        or the host failed)."""
        answer: dict[str, Any]
        try:
            if self.llm_host is None:
                raise LLMError("this pool has no LLM host")
            reply = await self.llm_host(agent.tool, LLMCall(str(call.get("system", "")),
                                                            str(call.get("prompt", ""))))
            answer = {"llm_reply": {"id": call.get("id"), "text": reply.text,
                                    "tokens": reply.tokens}}
        except QuestionFailed as exc:
            self.fail_question(str(exc))
            answer = {"llm_error": {"id": call.get("id"), "error": str(exc)}}
        except LLMError as exc:
            answer = {"llm_error": {"id": call.get("id"), "error": str(exc)}}
        if agent.proc.stdin is None or agent.proc.stdin.is_closing():
            return
        with contextlib.suppress(ConnectionError, OSError):
            agent.proc.stdin.write((json.dumps(answer) + "\n").encode())
            await agent.proc.stdin.drain()

    async def attach(self, node_id: int, tool: str, *, port: int, workspace: Path,
                     seed: bytes | None) -> _AgentProc:
        """Point agent ``node_id`` at the relay on ``port`` for one question."""
        agent = await self._ensure(node_id, tool)
        agent.killed, agent.exit_code, agent.finished = False, None, False
        command = {"port": port, "workspace": str(workspace),
                   "seed": seed.hex() if seed is not None else None}
        assert agent.proc.stdin is not None
        try:
            agent.proc.stdin.write((json.dumps(command) + "\n").encode())
            await agent.proc.stdin.drain()
        except (ConnectionError, OSError):
            pass  # it died: the relay sees it never connect, and its exit code is reported
        return agent

    async def _session_end(self, agent: _AgentProc) -> None:
        code = await agent.ends.get()
        if code is not None:
            agent.exit_code, agent.finished = code, True
            return
        agent.exit_code = await agent.proc.wait()

    async def finish(self, agents: Sequence[_AgentProc], grace: float) -> None:
        """Wait up to ``grace`` for each agent's session to end; kill those that did not."""
        waits = [asyncio.create_task(self._session_end(a)) for a in agents]
        if waits:
            await asyncio.wait(waits, timeout=grace)
        for agent, wait in zip(agents, waits, strict=True):
            if not wait.done():
                wait.cancel()
                agent.killed = True
                await self._kill(agent)
        if waits:
            await asyncio.gather(*waits, return_exceptions=True)

    async def abort(self, agents: Sequence[_AgentProc]) -> None:
        """Kill the agents whose session did not end (cancellation, an unexpected error), and
        stop their calls to the host."""
        for agent in agents:
            for call in list(agent.calls):
                call.cancel()
            if not agent.finished and agent.proc.returncode is None:
                agent.killed = True
                await self._kill(agent)

    async def _kill(self, agent: _AgentProc) -> None:
        with contextlib.suppress(ProcessLookupError):
            agent.proc.kill()
        agent.exit_code = await agent.proc.wait()

    async def close(self, grace: float = 2.0) -> None:
        """End every agent process: EOF on stdin, then a kill after ``grace``."""
        procs = list(self._procs.values())
        self._procs.clear()
        for agent in procs:
            for task in [*agent.calls, *([agent.reader] if agent.reader else [])]:
                task.cancel()
            if agent.proc.stdin is not None and not agent.proc.stdin.is_closing():
                agent.proc.stdin.close()
        waits = [asyncio.create_task(a.proc.wait()) for a in procs]
        if waits:
            await asyncio.wait(waits, timeout=grace)
        for agent in procs:
            if agent.proc.returncode is None:
                with contextlib.suppress(ProcessLookupError):
                    agent.proc.kill()
        if waits:
            await asyncio.gather(*waits, return_exceptions=True)


def _agent_report(agent: _AgentProc, net: MeshNetwork) -> dict[str, Any]:
    peer = net.peers.get(agent.node_id) or net.departed.get(agent.node_id)
    code = agent.exit_code if agent.exit_code is not None else agent.proc.returncode
    reason: str | None = None
    if peer is None:
        status = "never_connected"
        reason = f"exited with code {code} before connecting" if code is not None else None
    elif agent.node_id in net.down:
        status, reason = "down", net.down[agent.node_id]
    elif agent.killed:
        status, reason = "killed", "did not exit after shutdown"
    elif code == 0:
        status = "ok"
    else:
        status, reason = "error", f"exit code {code}"
    return {
        "node_id": agent.node_id,
        "tool": agent.tool,
        "status": status,
        "reason": reason,
        "exit_code": code,
        "pid": agent.proc.pid,
        "busy_ms": round(peer.busy_ms, 3) if peer is not None else 0.0,
        "pkts_sent": peer.pkts_sent if peer is not None else 0,
    }


async def run_question(question: Question, *, out_dir: Path, config: RunConfig | None = None,
                       on_event: EventCallback | None = None,
                       pool: AgentPool | None = None) -> RunResult:
    """Run ``question`` through the mesh and write its results under ``out_dir``.

    ``pool`` holds the run's agent processes (see :class:`AgentPool`; its config is used);
    without one, the agents are started for this question and ended after it.

    Never raises for agent or network failures: they end the run ``failed`` with partial
    metrics and a reason. Raises ``ValueError`` for a bad config. Cancelling the coroutine
    kills the agents of this question and closes the relay.
    """
    if pool is None:
        async with AgentPool(config or RunConfig()) as own:
            return await run_question(question, out_dir=out_dir, on_event=on_event, pool=own)
    config = pool.config
    workspaces = _prepare(out_dir)
    seed = secrets.token_bytes(32) if needs_signing_seed(config.protocol) else None
    net = MeshNetwork(get_adapter(config.protocol, signing_seed=seed),
                      max_frame_size=config.max_frame_size, on_event=on_event)
    started_at = dt.datetime.now(dt.UTC)
    deadline = time.monotonic() + config.timeout_s
    procs: list[_AgentProc] = []

    def emit(kind: str, data: dict[str, Any]) -> None:
        if on_event is not None:
            with contextlib.suppress(Exception):
                on_event(MeshEvent(kind, round(net.elapsed_ms, 3), data))

    pool.net = net
    try:
        port = await net.start()
        emit("run.started", {"question_index": question.index, "protocol": config.protocol,
                             "agents": list(config.agents), "port": port})
        for node_id, tool in enumerate(config.agents):
            procs.append(await pool.attach(node_id, tool, port=port,
                                           workspace=workspaces / str(node_id), seed=seed))
        while time.monotonic() < deadline:
            pending = [a for a in procs if a.node_id not in net.peers
                       and a.node_id not in net.departed and a.proc.returncode is None]
            if not pending:
                break
            await asyncio.sleep(0.005)
        if not any(p.tool == "reason" for p in net.peers.values()):
            net.fail("timeout before the agents connected" if time.monotonic() >= deadline
                     else "no reason agent connected")
        else:
            await net.broadcast_init(question.document(), question=question.question)
            try:
                await asyncio.wait_for(net.wait_done(), max(0.0, deadline - time.monotonic()))
            except TimeoutError:
                net.fail(f"timeout after {config.timeout_s:g} s")
        net.stop_clock()
        net.begin_shutdown()
        await pool.finish(procs, config.shutdown_grace_s)
    finally:
        # Also on cancellation or an unexpected error: no agent session or task outlives us.
        pool.net = None
        await pool.abort(procs)
        await net.close()

    completed = net.failure is None and net.answer_from is not None
    answer = None if net.answer is None else str(net.answer)
    score = score_answer(answer, question.answer) if completed and answer is not None else None
    metrics: dict[str, Any] = {
        "status": "completed" if completed else "failed",
        "reason": None if completed else (net.failure or "no final answer"),
        "question_index": question.index,
        "question_id": question.id,
        "question": question.question,
        "gold_answer": question.answer,
        "answer": answer,
        "protocol": config.protocol,
        "agent_count": len(config.agents),
        "agents": [_agent_report(a, net) for a in procs],
        "bytes_tx": net.bytes_tx,
        "bytes_rx": net.bytes_rx,
        "pkt_cnt": net.pkt_cnt,
        "frames_tx": net.frames_tx,
        "header_overhead": net.header_overhead,
        "token_sum": net.token_sum,
        "elapsed_ms": round(net.elapsed_ms, 3),
        "rejected_frames": net.rejected_frames,
        "malformed_frames": net.malformed_frames,
        "quality_score": score.quality_score if score else None,
        "exact_match": score.exact_match if score else None,
        "rouge_l": score.rouge_l if score else None,
        "f1": score.f1 if score else None,
        "started_at": started_at.isoformat(),
        "timeout_s": config.timeout_s,
    }
    await asyncio.to_thread(_write_results, out_dir, workspaces, metrics)
    emit("run.finished", {"status": metrics["status"], "reason": metrics["reason"],
                          "answer": answer, "exact_match": metrics["exact_match"]})
    return RunResult(metrics["status"], metrics["reason"], answer, metrics, out_dir)


def _write_summary(out_dir: Path, summary: dict[str, Any]) -> None:
    out_dir.mkdir(parents=True, exist_ok=True)
    write_json(out_dir / "summary.json", summary)


async def run_suite(questions: Sequence[Question], *, out_dir: Path,
                    config: RunConfig | None = None, suite_name: str = "",
                    on_event: EventCallback | None = None,
                    on_result: Callable[[Question, RunResult], None] | None = None,
                    ) -> dict[str, Any]:
    """Run each question in turn under ``out_dir/<index>/`` and write ``summary.json``."""
    config = config or RunConfig()
    config.validate()
    results = []
    async with AgentPool(config) as pool:  # the agent processes start once per suite
        for question in questions:
            result = await run_question(question, out_dir=out_dir / str(question.index),
                                        on_event=on_event, pool=pool)
            results.append(result.metrics)
            if on_result is not None:
                on_result(question, result)
    summary = summarize(results, suite=suite_name, protocol=config.protocol)
    await asyncio.to_thread(_write_summary, out_dir, summary)
    return summary
