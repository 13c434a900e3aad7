"""Loopback tests of the relay on port 0, with in-process stream clients as agents."""

from __future__ import annotations

import asyncio
import socket
from typing import Any

from mesh.framing import ConnectionClosed, Frame, FrameConnection, encode_frame
from mesh.network import MeshEvent, MeshNetwork
from mesh.protocols import Adapter, Packet, get_adapter


class Client:
    """A minimal agent: a socket, a frame codec and an adapter."""

    def __init__(self, adapter: Adapter, reader: asyncio.StreamReader,
                 writer: asyncio.StreamWriter) -> None:
        self.adapter = adapter
        self.reader = reader
        self.writer = writer
        self.conn = FrameConnection()
        self.pending: list[Packet] = []
        self.closed: str | None = None

    @classmethod
    async def connect(cls, net: MeshNetwork, node_id: int, tool: str,
                      adapter: Adapter | None = None, rcvbuf: int | None = None) -> Client:
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        if rcvbuf is not None:  # before connect, so the advertised window stays small
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
        sock.setblocking(False)
        await asyncio.get_running_loop().sock_connect(sock, ("127.0.0.1", net.port))
        reader, writer = await asyncio.open_connection(sock=sock)
        client = cls(adapter or net.adapter, reader, writer)
        await client.send({"type": "hello", "src": node_id, "tool": tool})
        return client

    async def send(self, packet: Packet) -> None:
        await self.send_raw(self.adapter.encode(packet))

    async def send_raw(self, payload: bytes) -> None:
        self.writer.write(encode_frame(payload))
        await self.writer.drain()

    async def recv(self, timeout: float = 5.0) -> Packet:
        while not self.pending:
            data = await asyncio.wait_for(self.reader.read(65536), timeout)
            events = self.conn.receive_data(data) if data else self.conn.receive_eof()
            for event in events:
                if isinstance(event, Frame):
                    self.pending.append(self.adapter.decode(event.payload))
                elif isinstance(event, ConnectionClosed):
                    self.closed = event.error or "eof"
                    raise ConnectionError(self.closed)
        return self.pending.pop(0)

    async def close(self) -> None:
        self.writer.close()
        await self.writer.wait_closed()


async def wait_for(predicate: Any, timeout: float = 5.0) -> None:
    deadline = asyncio.get_running_loop().time() + timeout
    while not predicate():
        assert asyncio.get_running_loop().time() < deadline, "condition not met in time"
        await asyncio.sleep(0.005)


async def started(adapter: str = "json", **kwargs: Any) -> MeshNetwork:
    net = MeshNetwork(get_adapter(adapter, signing_seed=bytes(32)), **kwargs)
    await net.start()
    return net


async def test_two_networks_bind_distinct_ephemeral_ports() -> None:
    first, second = await started(), await started()
    try:
        assert first.port != second.port
        assert first.port > 0
        assert second.port > 0
    finally:
        await first.close()
        await second.close()


async def test_fan_out_to_all_others_and_byte_accounting() -> None:
    events: list[MeshEvent] = []
    net = await started(on_event=events.append)
    clients = [await Client.connect(net, i, t) for i, t in enumerate(["search", "reason", "x"])]
    await wait_for(lambda: len(net.peers) == 3)
    await net.broadcast_init("d" * 1000, question="q?")
    inits = [await c.recv() for c in clients]
    assert all(p["type"] == "doc_init" for p in inits)
    assert inits[0]["chunks"] == ["d" * 400, "d" * 400, "d" * 200]
    assert inits[0]["roster"] == {"0": "search", "1": "reason", "2": "x"}

    packet = {"type": "data_event", "src": 0, "tag": "search_docs", "payload": [1, 2],
              "token_used": 7}
    await clients[0].send(packet)
    assert await clients[1].recv() == packet
    assert await clients[2].recv() == packet
    await clients[1].send({"type": "data_event", "src": 1, "tag": "final_answer",
                           "payload": "yes", "token_used": 3})
    assert (await clients[0].recv())["payload"] == "yes"
    await net.wait_done()
    assert net.answer == "yes"
    assert net.answer_from == 1
    assert net.failure is None
    assert net.elapsed_ms > 0

    json_sizes = [len(get_adapter("json").encode(packet))]
    await wait_for(lambda: net.frames_tx == 3 + 2 + 2)
    assert net.pkt_cnt == 3 + 2  # three hellos, two data packets
    assert net.token_sum == 10
    hello_bytes = sum(4 + len(get_adapter("json").encode(
        {"type": "hello", "src": i, "tool": t})) for i, t in enumerate(["search", "reason", "x"]))
    data_rx = 4 + json_sizes[0]
    assert net.bytes_rx > hello_bytes + data_rx
    # JSON baseline: exactly the 4-byte length prefix per frame, both directions.
    assert net.header_overhead == 4 * (net.pkt_cnt + net.frames_tx)
    assert [e.kind for e in events].count("agent.connected") == 3
    assert any(e.kind == "run.answer" for e in events)
    for c in clients:
        await c.close()
    await net.close()


async def test_bytes_tx_counts_each_fan_out_copy() -> None:
    net = await started("msgpack+crc")
    clients = [await Client.connect(net, i, "t") for i in range(4)]
    await wait_for(lambda: len(net.peers) == 4)
    rx_before, tx_before = net.bytes_rx, net.bytes_tx
    packet = {"type": "data_event", "src": 0, "tag": "x", "payload": "p" * 200}
    blob = net.adapter.encode(packet)
    await clients[0].send(packet)
    for c in clients[1:]:
        assert await c.recv() == packet
    await wait_for(lambda: net.bytes_tx - tx_before == 3 * (4 + len(blob)))
    assert net.bytes_rx - rx_before == 4 + len(blob)
    for c in clients:
        await c.close()
    await net.close()


async def test_slow_reader_does_not_stall_the_others() -> None:
    net = await started()
    sender = await Client.connect(net, 0, "a")
    fast = await Client.connect(net, 1, "b")
    slow = await Client.connect(net, 2, "c", rcvbuf=4096)  # never reads
    await wait_for(lambda: len(net.peers) == 3)
    big = {"type": "data_event", "src": 0, "tag": "x", "payload": "z" * 60_000}
    for _ in range(120):  # ~7 MB: far beyond the slow socket's buffers
        await sender.send(big)
    for _ in range(120):
        assert (await fast.recv(timeout=5.0))["tag"] == "x"
    # Everything reached the fast agent while the slow one's copies are still queued.
    backlog = net.peers[2].outbox_bytes + net.peers[2].writer.transport.get_write_buffer_size()
    assert backlog > 1_000_000
    for c in (sender, fast, slow):
        await c.close()
    await net.close()


async def test_outbox_overflow_disconnects_the_slow_agent() -> None:
    events: list[MeshEvent] = []
    net = await started(max_outbox_bytes=200_000, on_event=events.append)
    sender = await Client.connect(net, 0, "a")
    slow = await Client.connect(net, 1, "reason", rcvbuf=4096)
    await wait_for(lambda: len(net.peers) == 2)
    await net.broadcast_init("doc")
    big = {"type": "data_event", "src": 0, "tag": "x", "payload": "z" * 60_000}
    for _ in range(200):
        await sender.send(big)
        if 1 in net.down:
            break
    await wait_for(lambda: 1 in net.down)
    assert "slow agent" in net.down[1]
    assert net.failure is not None
    assert "no reason agent left" in net.failure
    assert any(e.kind == "agent.down" for e in events)
    for c in (sender, slow):
        await c.close()
    await net.close()


async def test_disconnect_is_deregistered_and_reported() -> None:
    events: list[MeshEvent] = []
    net = await started(on_event=events.append)
    a = await Client.connect(net, 0, "search")
    b = await Client.connect(net, 1, "reason")
    c = await Client.connect(net, 2, "extract")
    await wait_for(lambda: len(net.peers) == 3)
    await net.broadcast_init("doc")
    for client in (a, b, c):
        await client.recv()
    await c.close()
    down = await a.recv()
    assert down == {"type": "peer_down", "src": "mesh", "node": 2, "tool": "extract",
                    "reason": "disconnected"}
    assert (await b.recv())["node"] == 2
    assert set(net.peers) == {0, 1}
    assert net.down == {2: "disconnected"}
    assert not net.done  # a reason agent is still there
    await b.close()
    await wait_for(lambda: net.done)
    assert net.failure is not None
    assert "no reason agent left" in net.failure
    assert [e.data["node_id"] for e in events if e.kind == "agent.down"] == [2, 1]
    await a.close()
    await net.close()


async def test_malformed_input_closes_only_that_connection() -> None:
    net = await started()
    good = await Client.connect(net, 0, "a")
    bad = await Client.connect(net, 1, "b")
    await wait_for(lambda: len(net.peers) == 2)
    await bad.send_raw(b"\xff not json")
    try:
        await bad.recv(timeout=5.0)
    except ConnectionError:
        pass
    await wait_for(lambda: 1 not in net.peers)
    assert net.malformed_frames == 1
    assert "malformed packet" in net.down[1]
    assert (await good.recv())["type"] == "peer_down"
    # An oversize length prefix is recorded the same way, never raised.
    worse = await Client.connect(net, 2, "c")
    await wait_for(lambda: 2 in net.peers)
    worse.writer.write(b"\x7f\xff\xff\xff")
    await worse.writer.drain()
    await wait_for(lambda: 2 not in net.peers)
    assert "exceeds the limit" in net.down[2]
    assert net.malformed_frames == 2
    for c in (good, bad, worse):
        await c.close()
    await net.close()


async def test_first_packet_must_be_hello_and_ids_unique() -> None:
    net = await started()
    first = await Client.connect(net, 5, "a")
    await wait_for(lambda: 5 in net.peers)
    duplicate = await Client.connect(net, 5, "b")
    reader, writer = await asyncio.open_connection("127.0.0.1", net.port)
    writer.write(encode_frame(b'{"type":"data_event","src":9}'))
    await writer.drain()
    assert await asyncio.wait_for(reader.read(), 5.0) == b""  # closed by the relay
    try:
        await duplicate.recv(timeout=5.0)
    except ConnectionError:
        pass
    assert duplicate.closed is not None
    assert list(net.peers) == [5]
    writer.close()
    for c in (first, duplicate):
        await c.close()
    await net.close()


async def test_tampered_and_corrupted_frames_are_counted_not_relayed() -> None:
    for name in ("json+signed", "msgpack+crc"):
        net = await started(name)
        a = await Client.connect(net, 0, "a")
        b = await Client.connect(net, 1, "b")
        await wait_for(lambda net=net: len(net.peers) == 2)
        blob = bytearray(net.adapter.encode({"type": "data_event", "src": 0, "tag": "t"}))
        blob[3] ^= 0x20
        await a.send_raw(bytes(blob))
        await a.send({"type": "data_event", "src": 0, "tag": "ok"})
        assert (await b.recv())["tag"] == "ok"  # the bad frame never reached b
        assert net.rejected_frames == 1
        assert set(net.peers) == {0, 1}  # integrity failures drop the frame, not the link
        for c in (a, b):
            await c.close()
        await net.close()


async def test_close_leaves_no_tasks_behind() -> None:
    net = await started()
    clients = [await Client.connect(net, i, "t") for i in range(3)]
    await wait_for(lambda: len(net.peers) == 3)
    before = {t for t in asyncio.all_tasks() if t is not asyncio.current_task()}
    assert before  # handlers and writers are running
    await net.close()
    await asyncio.sleep(0)
    leftover = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()
                and not t.done()]
    assert leftover == []
    for c in clients:
        await c.close()
