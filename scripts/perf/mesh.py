"""Relay benchmark: per wire protocol, against a raw asyncio relay measured in the same run.

    .venv/bin/python -m scripts.perf.mesh [--seconds 2] [--agents 4] [--size 256] [--window 128]
        [--samples 2000] [--protocols json,msgpack,a2a,anp,json+crc,msgpack+crc,json+signed]

Run time is about (seconds + 2) x (rows). For each relay (the raw ones first, then
``MeshNetwork`` with each adapter) ``--agents`` client
processes connect; each sends one pre-encoded data frame over and over (a window of unacknowledged
frames bounds the queues) and reads what the others send. Reported per row:

- ``frame B``: wire bytes of one data frame (length prefix included), ``env B`` the envelope
  bytes beyond the packet's compact JSON form (``Adapter.envelope_size``);
- ``enc us`` / ``dec us``: in-process encode and decode time of that packet;
- ``relay fr/s``: frames the relay received and fanned out per second (each to ``agents - 1``
  others), and the ratio to the batched raw relay (``MeshNetwork`` batches its writes too);
- ``hop p50/p99 us``: one agent -> relay -> agent hop (ping-pong round trip / 2, with the other
  agents connected and idle).

Two raw relays parse length prefixes and write straight to the other transports (no decoding, no
queues, no drain): one frame per write, or all complete frames of a read per write. ``MeshNetwork``
also decodes every packet (integrity checks, tag and token accounting) and goes through
per-connection outboxes, each flushed by its writer task in one write per wake-up.
"""

from __future__ import annotations

import argparse
import asyncio
import multiprocessing as mp
import statistics
import struct
import time
import timeit
from collections.abc import Callable
from typing import Any

from mesh.network import MeshNetwork
from mesh.protocols import Adapter, Packet, compact_json, get_adapter

HEADER = struct.Struct(">I")
SEED = bytes(range(32))
WINDOW = 128  # default unacknowledged frames per blasting agent
BURST = 16


def make_packet(size: int) -> Packet:
    """A data packet whose compact JSON frame (with the 4-byte prefix) is ``size`` bytes."""
    packet: Packet = {"type": "data_event", "src": 0, "tag": "bench", "token_used": 0,
                      "payload": ""}
    base = len(compact_json(packet)) + 4
    packet["payload"] = "x" * max(0, size - base)
    return packet


def frame(blob: bytes) -> bytes:
    return HEADER.pack(len(blob)) + blob


# -- client processes ------------------------------------------------------------------------


async def _client(port: int, hello: bytes, data: bytes, role: str, seconds: float,
                  peers: int, samples: int, window: int) -> dict[str, Any]:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(hello)
    await writer.drain()
    # The relay's "go" frame: any first frame. Its size is unknown, so parse one prefix.
    head = await reader.readexactly(4)
    await reader.readexactly(HEADER.unpack(head)[0])
    size = len(data)
    if role == "blast":
        received = 0
        sent = 0
        stop = time.perf_counter() + seconds
        more = asyncio.Event()

        async def read_all() -> None:
            nonlocal received
            while True:
                chunk = await reader.read(262144)
                if not chunk:
                    return
                received += len(chunk)
                more.set()

        reading = asyncio.create_task(read_all())
        burst = data * BURST
        while time.perf_counter() < stop:
            if sent - received // size // max(1, peers - 1) < window:
                writer.write(burst)
                sent += BURST
                await writer.drain()
            else:
                more.clear()
                try:
                    await asyncio.wait_for(more.wait(), 0.05)
                except TimeoutError:
                    pass
        writer.close()
        reading.cancel()
        return {"sent": sent, "received": received // size}
    if role == "echo":
        while True:
            try:
                chunk = await reader.readexactly(size)
            except asyncio.IncompleteReadError:
                return {}
            writer.write(chunk)
    if role == "ping":
        rtts = []
        for _ in range(samples):
            start = time.perf_counter_ns()
            writer.write(data)
            await reader.readexactly(size)
            rtts.append(time.perf_counter_ns() - start)
        writer.close()
        return {"rtts": rtts}
    # "sink": read until closed
    while await reader.read(262144):
        pass
    return {}


def _client_main(port: int, hello: bytes, data: bytes, role: str, seconds: float, peers: int,
                 samples: int, window: int, out: Any) -> None:
    result = asyncio.run(_client(port, hello, data, role, seconds, peers, samples, window))
    out.put((role, result))


# -- relays ----------------------------------------------------------------------------------


class RawRelay:
    """The baseline: parse length prefixes, forward bytes to every other connection.

    ``batched=False`` writes each frame to each other transport as it is parsed (one send per
    frame and peer); ``batched=True`` forwards all complete frames of a read in one write.
    """

    def __init__(self, *, batched: bool) -> None:
        self.batched = batched
        self.writers: list[asyncio.StreamWriter] = []
        self.frames = 0
        self.port = 0
        self._server: asyncio.Server | None = None

    async def start(self) -> int:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        self.port = int(self._server.sockets[0].getsockname()[1])
        return self.port

    def _forward(self, writer: asyncio.StreamWriter, data: bytes) -> None:
        for other in self.writers:
            if other is not writer and not other.is_closing():
                other.write(data)

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        buf = bytearray()
        hello = True
        try:
            while chunk := await reader.read(65536):
                buf += chunk
                offset = start = 0
                while len(buf) - offset >= 4:
                    (n,) = HEADER.unpack_from(buf, offset)
                    end = offset + 4 + n
                    if end > len(buf):
                        break
                    if hello:  # the first frame names the agent: register, do not relay
                        hello = False
                        self.writers.append(writer)
                        start = end
                    else:
                        self.frames += 1
                        if not self.batched:
                            self._forward(writer, bytes(buf[offset:end]))
                    offset = end
                if self.batched and offset > start:
                    self._forward(writer, bytes(buf[start:offset]))
                del buf[:offset]
        except (ConnectionError, OSError):
            pass
        finally:
            if writer in self.writers:
                self.writers.remove(writer)
            writer.close()

    @property
    def connected(self) -> int:
        return len(self.writers)

    def go(self) -> None:
        for w in self.writers:
            w.write(frame(b"go"))

    async def close(self) -> None:
        for w in list(self.writers):
            w.transport.abort()
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()


class MeshRelay:
    """``MeshNetwork`` with an adapter, driven like the raw relay."""

    def __init__(self, adapter: Adapter) -> None:
        self.net = MeshNetwork(adapter)
        self.port = 0

    async def start(self) -> int:
        self.port = await self.net.start()
        return self.port

    @property
    def frames(self) -> int:
        return self.net.pkt_cnt

    @property
    def connected(self) -> int:
        return len(self.net.peers)

    def go(self) -> None:
        self.net.send_to_all({"type": "go", "src": "mesh"})

    async def close(self) -> None:
        self.net.shutting_down = True
        await self.net.close()


def _spawn(ctx: Any, port: int, node: int, adapter: Adapter | None, data: bytes, role: str,
           seconds: float, peers: int, samples: int, window: int, out: Any) -> Any:
    hello_packet = {"type": "hello", "src": node, "tool": "bench"}
    hello = frame(adapter.encode(hello_packet) if adapter else b"hello")
    proc = ctx.Process(target=_client_main,
                       args=(port, hello, data, role, seconds, peers, samples, window, out))
    proc.start()
    return proc


async def until(predicate: Callable[[], bool], limit_s: float = 30.0) -> None:
    """Poll ``predicate`` every 10 ms; raise ``TimeoutError`` after ``limit_s`` seconds."""
    for _ in range(int(limit_s / 0.01)):
        if predicate():
            return
        await asyncio.sleep(0.01)
    raise TimeoutError("relay clients did not (dis)connect in time")


async def measure(relay: RawRelay | MeshRelay, adapter: Adapter | None, data: bytes, *,
                  agents: int, seconds: float, samples: int, window: int) -> dict[str, float]:
    ctx = mp.get_context("spawn")
    port = await relay.start()
    results: dict[str, float] = {}
    try:
        # Throughput: every agent blasts.
        out = ctx.Queue()
        procs = [_spawn(ctx, port, i, adapter, data, "blast", seconds, agents, 0, window, out)
                 for i in range(agents)]
        await until(lambda: relay.connected >= agents)
        relay.go()
        first = relay.frames
        start = time.perf_counter()
        await asyncio.sleep(seconds)
        results["fps"] = (relay.frames - first) / (time.perf_counter() - start)
        for _ in procs:
            await asyncio.to_thread(out.get, True, 30)
        for p in procs:
            await asyncio.to_thread(p.join, 10)
        await until(lambda: relay.connected == 0)
        # Latency: one pinger, one echo, the rest connected sinks.
        roles = ["ping", "echo"] + ["sink"] * (agents - 2)
        out = ctx.Queue()
        procs = [_spawn(ctx, port, 100 + i, adapter, data, role, seconds, agents, samples,
                        window, out)
                 for i, role in enumerate(roles)]
        await until(lambda: relay.connected >= agents)
        relay.go()
        while True:
            role, result = await asyncio.to_thread(out.get, True, 60)
            if role == "ping":
                rtts = sorted(result["rtts"][len(result["rtts"]) // 10 :])  # drop warm-up
                break
        results["hop_p50_us"] = statistics.median(rtts) / 2 / 1000
        results["hop_p99_us"] = rtts[int(len(rtts) * 0.99) - 1] / 2 / 1000
    finally:
        await relay.close()
        for p in procs:
            await asyncio.to_thread(p.join, 5)
            if p.is_alive():
                p.kill()
    return results


def codec_times(adapter: Adapter, packet: Packet, number: int = 2000) -> tuple[float, float]:
    blob = adapter.encode(packet)
    enc = min(timeit.repeat(lambda: adapter.encode(packet), number=number, repeat=3)) / number
    dec = min(timeit.repeat(lambda: adapter.decode(blob), number=number, repeat=3)) / number
    return enc * 1e6, dec * 1e6


async def main_async(args: argparse.Namespace) -> None:
    packet = make_packet(args.size)
    rows = []
    raw_data = frame(b"r" * (args.size - 4))
    raw: dict[str, float] = {}
    for label, batched in (("raw relay, per frame", False), ("raw relay, batched", True)):
        result = await measure(RawRelay(batched=batched), None, raw_data, agents=args.agents,
                               seconds=args.seconds, samples=args.samples, window=args.window)
        raw = result  # ratios are against the batched raw relay: it batches writes as we do
        rows.append((label, len(raw_data), 0, 0.0, 0.0, result))
    for name in args.protocols.split(","):
        adapter = get_adapter(name, signing_seed=SEED)
        blob = adapter.encode(packet)
        enc, dec = codec_times(adapter, packet)
        result = await measure(MeshRelay(get_adapter(name, signing_seed=SEED)), adapter,
                               frame(blob), agents=args.agents, seconds=args.seconds,
                               samples=args.samples, window=args.window)
        rows.append((name, 4 + len(blob), adapter.envelope_size(packet, blob), enc, dec, result))
    print(f"agents={args.agents} json frame={args.size} B seconds={args.seconds} "
          f"window={args.window} cpus={mp.cpu_count()}")
    header = (f"{'protocol':<20}{'frame B':>8}{'env B':>7}{'enc us':>8}{'dec us':>8}"
              f"{'relay fr/s':>12}{'vs raw':>8}{'hop p50 us':>12}{'hop p99 us':>12}")
    print(header)
    print("-" * len(header))
    for name, size, env, enc, dec, r in rows:
        print(f"{name:<20}{size:>8}{env:>7}{enc:>8.2f}{dec:>8.2f}{r['fps']:>12,.0f}"
              f"{r['fps'] / raw['fps']:>8.2f}{r['hop_p50_us']:>12.1f}{r['hop_p99_us']:>12.1f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=float, default=2.0, help="throughput window per row")
    parser.add_argument("--agents", type=int, default=4)
    parser.add_argument("--size", type=int, default=256, help="JSON frame size in bytes")
    parser.add_argument("--samples", type=int, default=2000, help="ping-pong round trips")
    parser.add_argument("--protocols",
                        default="json,msgpack,a2a,anp,json+crc,msgpack+crc,json+signed")
    parser.add_argument("--window", type=int, default=WINDOW,
                        help="unacknowledged frames per blasting agent")
    args = parser.parse_args()
    if args.agents < 2:
        parser.error("--agents must be at least 2")
    asyncio.run(main_async(args))


if __name__ == "__main__":
    main()
