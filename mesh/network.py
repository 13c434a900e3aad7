"""``MeshNetwork``: the star relay. This module owns the relay's sockets and tasks.

The relay listens on ``127.0.0.1`` port 0 (two runs never collide); agents connect and say
``hello`` with their node id, which is how connections are keyed (never by peer port). Every
packet from one agent goes to every other agent through per-connection outboxes, each drained by
its own writer task, so one slow agent never stalls the others; an outbox that grows past
``max_outbox_bytes`` disconnects that agent.

Counters cover what crosses the sockets, both ways:

- ``bytes_rx`` / ``bytes_tx``: frame bytes (length prefix included) received / written, each
  fan-out copy counted; ``pkt_cnt`` / ``frames_tx``: the frames themselves.
- ``header_overhead``: per frame, the 4-byte length prefix plus the envelope bytes beyond the
  packet's compact JSON form (``Adapter.envelope_size``); the JSON baseline shows 4 a frame.
- ``token_sum``: the ``token_used`` of the packets agents sent.
- ``rejected_frames`` (integrity check failed: dropped), ``malformed_frames`` (not a packet:
  the connection is closed).

The first ``tag == "final_answer"`` stops the clock and sets :meth:`wait_done`. A registered agent
that disconnects is deregistered, reported (an ``agent.down`` event and a ``peer_down`` packet to
the others) and, if no ``reason`` agent is left, the run is marked impossible.
"""

from __future__ import annotations

import asyncio
import contextlib
import struct
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from mesh.framing import (
    DEFAULT_MAX_FRAME_SIZE,
    HEADER_SIZE,
    ConnectionClosed,
    Frame,
    FrameConnection,
    State,
)
from mesh.protocols import Adapter, MalformedPacket, Packet, RejectedFrame

__all__ = ["DOC_CHUNK_SIZE", "EventCallback", "MeshEvent", "MeshNetwork", "Peer"]

DOC_CHUNK_SIZE = 400
READ_SIZE = 65536
DEFAULT_MAX_OUTBOX_BYTES = 64 * 1024 * 1024
_HEADER = struct.Struct(">I")


@dataclass(frozen=True, slots=True)
class MeshEvent:
    """A progress event: ``kind`` is e.g. ``agent.connected``, ``packet``, ``agent.down``."""

    kind: str
    t_ms: float
    data: dict[str, Any]


EventCallback = Callable[[MeshEvent], None]


@dataclass(eq=False)
class Peer:
    """One agent connection (keyed by the node id its ``hello`` declared)."""

    writer: asyncio.StreamWriter
    conn: FrameConnection
    node_id: int | None = None
    tool: str = ""
    pid: int | None = None
    outbox: list[tuple[bytes, int]] = field(default_factory=list)
    outbox_bytes: int = 0
    wakeup: asyncio.Event = field(default_factory=asyncio.Event)
    closing: bool = False
    closed: bool = False
    close_reason: str | None = None
    pkts_sent: int = 0
    busy_ms: float = 0.0
    writer_task: asyncio.Task[None] | None = None


class MeshNetwork:
    """The relay. Use ``await start()``, then ``broadcast_init``, ``wait_done``, ``close``."""

    def __init__(self, adapter: Adapter, *, max_frame_size: int = DEFAULT_MAX_FRAME_SIZE,
                 max_outbox_bytes: int = DEFAULT_MAX_OUTBOX_BYTES,
                 on_event: EventCallback | None = None, host: str = "127.0.0.1") -> None:
        self.adapter = adapter
        self.max_frame_size = max_frame_size
        self.max_outbox_bytes = max_outbox_bytes
        self.on_event = on_event
        self.host = host
        self.port = 0
        # counters
        self.bytes_rx = 0
        self.bytes_tx = 0
        self.pkt_cnt = 0
        self.frames_tx = 0
        self.header_overhead = 0
        self.token_sum = 0
        self.rejected_frames = 0
        self.malformed_frames = 0
        # state
        self.peers: dict[int, Peer] = {}
        self.departed: dict[int, Peer] = {}
        self.down: dict[int, str] = {}
        self.answer: Any = None
        self.answer_from: int | None = None
        self.failure: str | None = None
        self.t0: float | None = None
        self.done_ts: float | None = None
        self.callback_errors: list[str] = []
        self.shutting_down = False
        self._server: asyncio.Server | None = None
        self._handlers: set[asyncio.Task[None]] = set()
        self._conns: set[Peer] = set()
        self._writers: set[asyncio.Task[None]] = set()
        self._done = asyncio.Event()
        self._created = time.perf_counter()

    # -- lifecycle ------------------------------------------------------------------------

    async def start(self) -> int:
        """Listen on ``host`` port 0 and return the bound port."""
        self._server = await asyncio.start_server(self._serve, self.host, 0)
        self.port = int(self._server.sockets[0].getsockname()[1])
        return self.port

    async def broadcast_init(self, doc: str, *, question: str = "") -> None:
        """Send the document (in 400-character chunks) to every agent; the clock starts."""
        self.t0 = time.perf_counter()
        chunks = [doc[i : i + DOC_CHUNK_SIZE] for i in range(0, len(doc), DOC_CHUNK_SIZE)]
        roster = {str(n): p.tool for n, p in sorted(self.peers.items())}
        self.send_to_all({"type": "doc_init", "src": "mesh", "question": question,
                          "chunks": chunks, "roster": roster})
        self._emit("run.init", {"chunks": len(chunks), "agents": len(self.peers)})

    async def wait_done(self) -> None:
        """Return once a final answer arrived or the pipeline can no longer finish."""
        await self._done.wait()

    @property
    def done(self) -> bool:
        return self._done.is_set()

    @property
    def elapsed_ms(self) -> float:
        """From ``broadcast_init`` to the final answer (or to now if there is none yet)."""
        if self.t0 is None:
            return 0.0
        end = self.done_ts if self.done_ts is not None else time.perf_counter()
        return (end - self.t0) * 1000

    def stop_clock(self) -> None:
        if self.done_ts is None:
            self.done_ts = time.perf_counter()

    def fail(self, reason: str) -> None:
        """Mark the run as unable to finish (first reason wins)."""
        if not self._done.is_set():
            self.stop_clock()
            self.failure = reason
            self._done.set()

    def begin_shutdown(self) -> None:
        """Ask every agent to stop; later disconnects are expected, not failures."""
        self.shutting_down = True
        self.send_to_all({"type": "shutdown", "src": "mesh"})

    async def close(self) -> None:
        """Stop listening, flush writers, close every connection, await every task."""
        self.shutting_down = True
        if self._server is not None:
            self._server.close()
        peers = list(self.peers.values())
        for peer in peers:
            peer.closing = True
            peer.wakeup.set()
        writers = [p.writer_task for p in peers if p.writer_task is not None]
        if writers:
            await asyncio.wait(writers, timeout=2.0)
        # Closing the transports ends every reader with EOF; the handlers then finish on their
        # own (cancelling a start_server handler makes Python 3.11 log a spurious error).
        for peer in list(self._conns):
            self._drop(peer, peer.close_reason or "relay closed")
        handlers = list(self._handlers)
        if handlers:
            _, stuck = await asyncio.wait(handlers, timeout=2.0)
            for task in stuck:
                task.cancel()
        writers = list(self._writers)
        for task in writers:
            task.cancel()
        if writers:
            await asyncio.gather(*writers, return_exceptions=True)
        if self._server is not None:
            await self._server.wait_closed()
            self._server = None

    # -- sending --------------------------------------------------------------------------

    def send_to_all(self, packet: Packet) -> None:
        """Encode ``packet`` once and queue it to every registered agent."""
        if not self.peers:
            return
        blob = self.adapter.encode(packet)
        wire = _HEADER.pack(len(blob)) + blob
        overhead = HEADER_SIZE + self.adapter.envelope_size(packet, blob)
        for peer in list(self.peers.values()):
            self._enqueue(peer, wire, overhead)

    def _enqueue(self, peer: Peer, wire: bytes, overhead: int) -> None:
        if peer.closed or peer.closing:
            return
        peer.outbox.append((wire, overhead))
        peer.outbox_bytes += len(wire)
        if peer.outbox_bytes > self.max_outbox_bytes:
            self._drop(peer, f"outbound queue over {self.max_outbox_bytes} bytes (slow agent)")
            return
        peer.wakeup.set()

    async def _write_loop(self, peer: Peer) -> None:
        writer = peer.writer
        try:
            while True:
                await peer.wakeup.wait()
                peer.wakeup.clear()
                if peer.outbox:
                    batch, peer.outbox, peer.outbox_bytes = peer.outbox, [], 0
                    data = b"".join(wire for wire, _ in batch)
                    writer.write(data)
                    self.bytes_tx += len(data)
                    self.frames_tx += len(batch)
                    self.header_overhead += sum(overhead for _, overhead in batch)
                    await writer.drain()
                if peer.closing and not peer.outbox:
                    return
        except (ConnectionError, OSError) as exc:
            self._drop(peer, f"write failed: {exc!r}")

    # -- receiving ------------------------------------------------------------------------

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._handlers.add(task)
        peer = Peer(writer=writer, conn=FrameConnection(max_frame_size=self.max_frame_size))
        self._conns.add(peer)
        peer.writer_task = asyncio.create_task(self._write_loop(peer))
        self._writers.add(peer.writer_task)
        peer.writer_task.add_done_callback(self._writers.discard)
        reason: str | None = None
        try:
            while peer.conn.state is State.OPEN and not peer.closed:
                try:
                    data = await reader.read(READ_SIZE)
                except (ConnectionError, OSError) as exc:
                    reason = f"read failed: {exc!r}"
                    break
                events = peer.conn.receive_data(data) if data else peer.conn.receive_eof()
                for event in events:
                    if isinstance(event, ConnectionClosed):
                        reason = event.error or "disconnected"
                        if event.error:
                            self.malformed_frames += 1
                        break
                    self._on_frame(peer, event)
                    if peer.conn.state is not State.OPEN:
                        reason = peer.conn.error
                        break
        finally:
            self._drop(peer, reason or peer.close_reason or "disconnected")
            writer.close()
            with contextlib.suppress(ConnectionError, OSError, asyncio.CancelledError):
                await writer.wait_closed()
            self._handlers.discard(task)
            self._conns.discard(peer)

    def _on_frame(self, peer: Peer, frame: Frame) -> None:
        payload = frame.payload
        self.bytes_rx += HEADER_SIZE + len(payload)
        self.pkt_cnt += 1
        try:
            packet = self.adapter.decode(payload)
        except RejectedFrame as exc:
            self.rejected_frames += 1
            self._emit("frame.rejected", {"node_id": peer.node_id, "reason": str(exc)})
            return
        except MalformedPacket as exc:
            self.malformed_frames += 1
            peer.conn.fail(f"malformed packet: {exc}")
            return
        overhead = HEADER_SIZE + self.adapter.envelope_size(packet, payload)
        self.header_overhead += overhead
        if peer.node_id is None:
            self._register(peer, packet)
            return
        token_used = packet.get("token_used", 0)
        if isinstance(token_used, int) and not isinstance(token_used, bool):
            self.token_sum += token_used
        busy = packet.get("busy_ms")
        if isinstance(busy, (int, float)) and not isinstance(busy, bool):
            peer.busy_ms = max(peer.busy_ms, float(busy))
        peer.pkts_sent += 1
        wire = _HEADER.pack(len(payload)) + payload
        for other in list(self.peers.values()):
            if other is not peer:
                self._enqueue(other, wire, overhead)
        tag = packet.get("tag")
        if self.on_event is not None:
            self._emit("packet", {"node_id": peer.node_id, "tool": peer.tool,
                                  "type": packet.get("type"), "tag": tag,
                                  "bytes": HEADER_SIZE + len(payload)})
        if tag == "final_answer" and self.answer_from is None and not self._done.is_set():
            self.stop_clock()
            self.answer = packet.get("payload")
            self.answer_from = peer.node_id
            self._done.set()
            self._emit("run.answer", {"node_id": peer.node_id, "answer": self.answer})

    def _register(self, peer: Peer, packet: Packet) -> None:
        node_id = packet.get("src")
        if packet.get("type") != "hello" or not isinstance(node_id, int) or isinstance(
                node_id, bool):
            self.malformed_frames += 1
            peer.conn.fail("the first packet must be hello with an integer src")
            return
        if node_id in self.peers or node_id in self.departed:
            peer.conn.fail(f"node id {node_id} is already taken")
            return
        peer.node_id = node_id
        peer.tool = str(packet.get("tool", ""))
        pid = packet.get("pid")
        peer.pid = pid if isinstance(pid, int) else None
        self.peers[node_id] = peer
        self._emit("agent.connected", {"node_id": node_id, "tool": peer.tool, "pid": peer.pid})

    def _drop(self, peer: Peer, reason: str) -> None:
        """Deregister ``peer`` (idempotent) and tell the others."""
        if peer.closed:
            return
        peer.closed = True
        peer.close_reason = reason
        peer.outbox.clear()
        peer.wakeup.set()
        if peer.writer_task is not None and peer.writer_task is not asyncio.current_task():
            peer.writer_task.cancel()
        # Abort, not close: a close waits to flush a slow peer's backlog, which may be never.
        # It also wakes the reader with EOF if the drop came from elsewhere.
        peer.writer.transport.abort()
        if peer.node_id is None or self.peers.get(peer.node_id) is not peer:
            return
        del self.peers[peer.node_id]
        self.departed[peer.node_id] = peer
        if self.shutting_down:
            return
        self.down[peer.node_id] = reason
        self._emit("agent.down", {"node_id": peer.node_id, "tool": peer.tool,
                                  "reason": reason})
        self.send_to_all({"type": "peer_down", "src": "mesh", "node": peer.node_id,
                          "tool": peer.tool, "reason": reason})
        if self.t0 is not None and not any(p.tool == "reason" for p in self.peers.values()):
            self.fail(f"agent {peer.node_id} ({peer.tool}) went down: {reason}; "
                      "no reason agent left to answer")

    def _emit(self, kind: str, data: dict[str, Any]) -> None:
        if self.on_event is None:
            return
        t_ms = (time.perf_counter() - (self.t0 or self._created)) * 1000
        try:
            self.on_event(MeshEvent(kind, round(t_ms, 3), data))
        except Exception as exc:  # a broken observer must not break the relay
            self.callback_errors.append(f"{kind}: {exc!r}")
