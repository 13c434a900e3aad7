"""``MeshAgent``: one OS process, one tool, one connection to the relay.

Run as ``python -m mesh.agent --port P --node-id N --tool T --protocol NAME --workspace DIR``.
Secrets travel in the environment, not argv: ``MESH_SIGNING_SEED`` (hex, for ``signed``) and
``MESH_LLM_SPEC`` (JSON, see :mod:`mesh.llm`).

``--serve`` keeps one process for many questions (a run starts its agents once): the process
reads one JSON line per question from stdin, ``{"port": P, "workspace": DIR, "seed": HEX|null}``,
runs one agent session against that relay exactly as above (fresh state, fresh workspace, its
``stderr.log`` there), then writes ``{"code": N}`` to stdout and waits for the next line. EOF on
stdin ends the process. With a ``host`` LLM (:class:`mesh.llm.HostLLM`) its calls and their
answers share those two streams, a JSON line each.

The agent connects to the relay, says ``hello``, waits for ``doc_init``, and runs its tool once
its nearest live upstream stage has spoken (or is gone: ``peer_down`` makes it fall back to the
stage before, down to the raw document). It emits one ``data_event`` and stays until
``shutdown``. Its workspace holds ``agent.log`` (one JSON line per packet sent or received) and
``memory.json`` (its state at exit).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import sys
import threading
import time
import traceback
from pathlib import Path
from typing import IO, Any

from mesh.framing import DEFAULT_MAX_FRAME_SIZE, ConnectionClosed, Frame, FrameConnection
from mesh.llm import LLM, LLMError, llm_from_spec
from mesh.protocols import Adapter, MalformedPacket, Packet, RejectedFrame, get_adapter
from mesh.suite import parse_document
from mesh.tools import PIPELINE, TOOL_TAGS, ToolInput, ToolOutput, prepare, run_tool

__all__ = ["MeshAgent", "main"]

ENV_SIGNING_SEED = "MESH_SIGNING_SEED"
ENV_LLM_SPEC = "MESH_LLM_SPEC"
READ_SIZE = 65536


class MeshAgent:
    """An agent bound to exactly one tool, with a private workspace."""

    def __init__(self, *, node_id: int, tool: str, adapter: Adapter, workspace: Path,
                 llm: LLM | None = None, delay: float = 0.0,
                 max_frame_size: int = DEFAULT_MAX_FRAME_SIZE, close_llm: bool = True) -> None:
        if tool not in PIPELINE:
            raise ValueError(f"unknown tool {tool!r}; choose from {', '.join(PIPELINE)}")
        self.node_id = node_id
        self.tool = tool
        self.adapter = adapter
        self.workspace = workspace
        self.llm = llm
        self.close_llm = close_llm
        self.delay = delay
        self.conn = FrameConnection(max_frame_size=max_frame_size)
        self.question = ""
        self.document = ""
        self.roster: dict[int, str] = {}
        self.down: set[int] = set()
        self.upstream: dict[str, Any] = {}
        self.output: ToolOutput | None = None
        self.busy_ms = 0.0
        self.rx_packets = 0
        self.tx_packets = 0
        self.rejected_frames = 0
        self.errors: list[str] = []
        self._started = False
        self._work: asyncio.Task[None] | None = None
        self._writer: asyncio.StreamWriter | None = None
        self._log: IO[str] | None = None
        self._t0 = time.perf_counter()

    # -- lifecycle ------------------------------------------------------------------------

    async def run(self, host: str, port: int) -> int:
        """Serve until ``shutdown`` (exit code 0) or until the relay goes away (1)."""
        code = 1
        prepare(self.tool)
        with self._open_log() as log:
            self._log = log
            reader, writer = await asyncio.open_connection(host, port)
            self._writer = writer
            try:
                await self._send({"type": "hello", "src": self.node_id, "tool": self.tool,
                                  "pid": os.getpid()})
                code = await self._read_loop(reader)
            finally:
                if self._work is not None and not self._work.done():
                    self._work.cancel()
                    with contextlib.suppress(asyncio.CancelledError):
                        await self._work
                self._write_memory()
                writer.close()
                with contextlib.suppress(OSError):
                    await writer.wait_closed()
                aclose = getattr(self.llm, "aclose", None) if self.close_llm else None
                if aclose is not None:
                    await aclose()
        return code

    def _open_log(self) -> IO[str]:
        self.workspace.mkdir(parents=True, exist_ok=True)
        return open(self.workspace / "agent.log", "w", encoding="utf-8")

    async def _read_loop(self, reader: asyncio.StreamReader) -> int:
        while True:
            try:
                data = await reader.read(READ_SIZE)
            except OSError as exc:
                self.errors.append(f"read failed: {exc}")
                return 1
            events = self.conn.receive_data(data) if data else self.conn.receive_eof()
            for event in events:
                if isinstance(event, ConnectionClosed):
                    if event.error:
                        self.errors.append(event.error)
                    return 1
                code = await self._on_frame(event)
                if code is not None:
                    return code

    async def _on_frame(self, frame: Frame) -> int | None:
        """Handle one frame; an exit code ends the agent (0 on ``shutdown``)."""
        try:
            packet = self.adapter.decode(frame.payload)
        except RejectedFrame as exc:
            self.rejected_frames += 1
            self._log_line({"dir": "rx", "bytes": frame.wire_size, "rejected": str(exc)})
            return None
        except MalformedPacket as exc:
            self._log_line({"dir": "rx", "bytes": frame.wire_size, "malformed": str(exc)})
            self.conn.fail(f"malformed packet: {exc}")
            self.errors.append(f"malformed packet: {exc}")
            return 1
        self.rx_packets += 1
        self._log_line({"dir": "rx", "bytes": frame.wire_size, "packet": packet})
        kind = packet.get("type")
        if kind == "shutdown":
            return 0
        try:
            if kind == "doc_init":
                self.question = str(packet.get("question", ""))
                self.document = "".join(str(c) for c in packet.get("chunks", []))
                roster = dict(packet.get("roster", {}))
                self.roster = {int(k): str(v) for k, v in roster.items()}
            elif kind == "data_event":
                tag = str(packet.get("tag", ""))
                self.upstream.setdefault(tag, packet.get("payload"))
            elif kind == "peer_down":
                self.down.add(int(packet.get("node", -1)))
        except (TypeError, ValueError) as exc:
            self.conn.fail(f"malformed {kind} packet: {exc}")
            self.errors.append(f"malformed {kind} packet: {exc}")
            return 1
        self._maybe_start()
        return None

    # -- pipeline -------------------------------------------------------------------------

    def _alive(self, tool: str) -> bool:
        return any(t == tool and n not in self.down for n, t in self.roster.items())

    def ready(self) -> bool:
        """True once the nearest upstream stage that is present has produced its output."""
        if not self.document:
            return False
        for stage in reversed(PIPELINE[: PIPELINE.index(self.tool)]):
            if TOOL_TAGS[stage] in self.upstream:
                return True
            if self._alive(stage):
                return False
        return True

    def _maybe_start(self) -> None:
        if not self._started and self.ready():
            self._started = True
            self._work = asyncio.create_task(self._run_tool())

    async def _run_tool(self) -> None:
        if self.delay:
            await asyncio.sleep(self.delay)
        inp = ToolInput(self.question, parse_document(self.document), dict(self.upstream))
        start = time.perf_counter()
        try:
            try:
                out = await run_tool(self.tool, inp, self.llm)
            except LLMError as exc:
                self.errors.append(f"llm failed, deterministic fallback: {exc}")
                out = await run_tool(self.tool, inp, None)
        except Exception as exc:
            # A broken tool is a crashed agent: drop the link so the relay deregisters us and
            # the others fall back; the traceback goes to stderr.log in the workspace.
            traceback.print_exc()
            self.errors.append(f"tool {self.tool} failed: {exc!r}")
            if self._writer is not None:
                self._writer.transport.abort()
            return
        self.busy_ms += (time.perf_counter() - start) * 1000
        self.output = out
        packet = {
            "type": "data_event",
            "src": self.node_id,
            "tool": self.tool,
            "tag": out.tag,
            "payload": out.payload,
            "token_used": out.tokens,
            "busy_ms": round(self.busy_ms, 3),
        }
        with contextlib.suppress(ConnectionError, OSError):  # the relay is gone: we exit anyway
            await self._send(packet)

    # -- I/O helpers ----------------------------------------------------------------------

    async def _send(self, packet: Packet) -> None:
        assert self._writer is not None
        frame = self.conn.send(self.adapter.encode(packet))
        self._writer.write(frame)
        self.tx_packets += 1
        self._log_line({"dir": "tx", "bytes": len(frame), "packet": packet})
        # One connection per agent: draining here only ever waits for this agent's own socket.
        await self._writer.drain()

    def _log_line(self, record: dict[str, Any]) -> None:
        if self._log is not None:
            record = {"t_ms": round((time.perf_counter() - self._t0) * 1000, 3), **record}
            self._log.write(json.dumps(record, ensure_ascii=False, default=str) + "\n")
            self._log.flush()

    def _write_memory(self) -> None:
        memory = {
            "node_id": self.node_id,
            "tool": self.tool,
            "question": self.question,
            "roster": self.roster,
            "down": sorted(self.down),
            "inputs": sorted(self.upstream),
            "output": None if self.output is None else {
                "tag": self.output.tag, "payload": self.output.payload,
                "token_used": self.output.tokens},
            "busy_ms": round(self.busy_ms, 3),
            "rx_packets": self.rx_packets,
            "tx_packets": self.tx_packets,
            "rejected_frames": self.rejected_frames,
            "errors": self.errors,
        }
        path = self.workspace / "memory.json"
        path.write_text(json.dumps(memory, ensure_ascii=False, indent=2), encoding="utf-8")


def _parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m mesh.agent")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--serve", action="store_true",
                        help="one question per JSON line on stdin (see the module docstring)")
    parser.add_argument("--node-id", type=int, required=True)
    parser.add_argument("--tool", choices=PIPELINE, required=True)
    parser.add_argument("--protocol", default="json")
    parser.add_argument("--workspace", type=Path, default=None)
    parser.add_argument("--delay", type=float, default=0.0)
    parser.add_argument("--max-frame-size", type=int, default=DEFAULT_MAX_FRAME_SIZE)
    args = parser.parse_args(argv)
    if not args.serve and (not args.port or args.workspace is None):
        parser.error("--port and --workspace are required without --serve")
    return args


def _open_stderr(workspace: Path) -> IO[str]:
    workspace.mkdir(parents=True, exist_ok=True)
    return open(workspace / "stderr.log", "w", encoding="utf-8")  # the caller closes it


def _stdin_lines(loop: asyncio.AbstractEventLoop) -> asyncio.Queue[str]:
    """Every line of stdin, as it comes, then ``""`` at EOF (a reader thread: the pool writes
    question commands and, to a ``host`` LLM, its answers, at any time)."""
    lines: asyncio.Queue[str] = asyncio.Queue()

    def read() -> None:
        for line in sys.stdin:
            loop.call_soon_threadsafe(lines.put_nowait, line)
        loop.call_soon_threadsafe(lines.put_nowait, "")

    threading.Thread(target=read, name="mesh-stdin", daemon=True).start()
    return lines


async def _route(lines: asyncio.Queue[str], commands: asyncio.Queue[str],
                 llm: LLM | None) -> None:
    """Hand stdin's lines out as they come, a session running or not: answers to a ``host``
    LLM to it, question commands (and EOF, ``""``) to ``commands``."""
    deliver = getattr(llm, "deliver", None)
    while True:
        line = await lines.get()
        if line and deliver is not None and line.startswith('{"llm_'):
            with contextlib.suppress(ValueError, TypeError):
                if deliver(json.loads(line)):
                    continue
        commands.put_nowait(line)
        if not line:
            return


async def serve(args: argparse.Namespace, llm: LLM | None) -> int:
    """Run one agent session per command line on stdin until EOF (``--serve``)."""
    prepare(args.tool)
    commands: asyncio.Queue[str] = asyncio.Queue()
    router = asyncio.create_task(_route(_stdin_lines(asyncio.get_running_loop()), commands, llm))
    while line := await commands.get():
        try:
            command = json.loads(line)
            port = int(command["port"])
            workspace = Path(str(command["workspace"]))
            seed_hex = command.get("seed")
            seed = bytes.fromhex(str(seed_hex)) if seed_hex else None
        except (ValueError, KeyError, TypeError) as exc:
            print(f"bad serve command {line!r}: {exc}", file=sys.stderr, flush=True)
            return 2
        agent = MeshAgent(node_id=args.node_id, tool=args.tool,
                          adapter=get_adapter(args.protocol, signing_seed=seed),
                          workspace=workspace, llm=llm, delay=args.delay,
                          max_frame_size=args.max_frame_size, close_llm=False)
        with _open_stderr(workspace) as err, contextlib.redirect_stderr(err):
            try:
                code = await agent.run(args.host, port)
            except OSError as exc:  # the relay was gone before we connected
                print(f"connect failed: {exc}", file=sys.stderr)
                code = 1
        sys.stdout.write(json.dumps({"code": code}) + "\n")
        sys.stdout.flush()
    router.cancel()
    return 0


def main(argv: list[str] | None = None) -> int:
    args = _parse_args(argv)
    seed_hex = os.environ.get(ENV_SIGNING_SEED)
    seed = bytes.fromhex(seed_hex) if seed_hex else None
    spec_text = os.environ.get(ENV_LLM_SPEC)

    async def _main() -> int:
        llm = llm_from_spec(json.loads(spec_text), host_out=sys.stdout if args.serve else None
                            ) if spec_text else None
        if args.serve:
            try:
                return await serve(args, llm)
            finally:
                aclose = getattr(llm, "aclose", None)
                if aclose is not None:
                    await aclose()
        agent = MeshAgent(node_id=args.node_id, tool=args.tool,
                          adapter=get_adapter(args.protocol, signing_seed=seed),
                          workspace=args.workspace, llm=llm, delay=args.delay,
                          max_frame_size=args.max_frame_size)
        return await agent.run(args.host, args.port)

    return asyncio.run(_main())


if __name__ == "__main__":
    sys.exit(main())
