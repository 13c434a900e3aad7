"""Wire protocol adapters: pure encode/decode between a packet (a JSON-able dict) and bytes.

Adapters are chosen by name and compose as ``base[+wrapper...]``, wrappers applied left to
right on the way out (``msgpack+signed+crc`` is ``crc(signed(msgpack(packet)))``):

- ``json``: compact UTF-8 JSON, the baseline.
- ``msgpack``: MessagePack.
- ``a2a``: an A2A v1.0 JSON-RPC ``SendMessage`` request whose message carries the packet as
  one data part (https://a2a-protocol.org/v1.0.0/specification/), written by hand.
- ``anp``: the ANP meta-protocol framing: one header byte (protocol type in the top two bits,
  ``01`` = application protocol, six reserved zero bits), then the JSON body.
- ``signed``: appends an Ed25519 signature (PyNaCl) of the inner bytes.
- ``crc``: appends the CRC-32 of the inner bytes, big-endian.

``decode`` raises :class:`RejectedFrame` when an integrity check fails (bad signature or CRC:
drop and count) and :class:`MalformedPacket` when the bytes cannot be a packet at all (record and
close). ``envelope_size`` reports the bytes of a blob beyond the packet's compact JSON form.
"""

from __future__ import annotations

import itertools
import json
import zlib
from collections.abc import Callable
from typing import Any, Protocol

import msgpack  # type: ignore[import-untyped]
from nacl.exceptions import BadSignatureError
from nacl.signing import SigningKey, VerifyKey

__all__ = [
    "A2AAdapter",
    "ANP_APPLICATION_PROTOCOL",
    "Adapter",
    "AnpAdapter",
    "CrcAdapter",
    "JsonAdapter",
    "MalformedPacket",
    "MsgpackAdapter",
    "Packet",
    "ProtocolError",
    "RejectedFrame",
    "SignedAdapter",
    "adapter_names",
    "compact_json",
    "get_adapter",
]

Packet = dict[str, Any]


class ProtocolError(Exception):
    """Base class of decoding failures."""


class MalformedPacket(ProtocolError):
    """The bytes are not a packet in this protocol."""


class RejectedFrame(ProtocolError):
    """An integrity check failed (tampered or corrupted frame)."""


_ENCODER = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"))
_DECODER = json.JSONDecoder()


def compact_json(packet: Packet) -> bytes:
    """The packet's compact JSON form: the yardstick for envelope overhead."""
    return _ENCODER.encode(packet).encode("utf-8")


class Adapter(Protocol):
    name: str

    def encode(self, packet: Packet) -> bytes: ...

    def decode(self, blob: bytes) -> Packet: ...

    def envelope_size(self, packet: Packet, blob: bytes) -> int: ...


def _require_packet(value: object, *, check_keys: bool = False) -> Packet:
    """A packet is an object with string keys and a string ``type``.

    JSON object keys are always strings, so only non-JSON bodies ask for ``check_keys``.
    """
    if not isinstance(value, dict):
        raise MalformedPacket("a packet must be an object")
    if check_keys and not all(isinstance(k, str) for k in value):
        raise MalformedPacket("a packet must have string keys")
    if not isinstance(value.get("type"), str):
        raise MalformedPacket("a packet must have a string type")
    return value


def _load_json(blob: bytes) -> object:
    try:
        return _DECODER.decode(blob.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as exc:
        raise MalformedPacket(f"invalid JSON: {exc}") from None


class _JsonBodied:
    """Envelope = bytes beyond the compact JSON form (never negative)."""

    def envelope_size(self, packet: Packet, blob: bytes) -> int:
        return max(0, len(blob) - len(compact_json(packet)))


class JsonAdapter(_JsonBodied):
    name = "json"

    def encode(self, packet: Packet) -> bytes:
        return compact_json(packet)

    def decode(self, blob: bytes) -> Packet:
        return _require_packet(_load_json(blob))


class MsgpackAdapter(_JsonBodied):
    """MessagePack re-encodes the body; usually smaller than JSON, so its envelope is 0."""

    name = "msgpack"

    def encode(self, packet: Packet) -> bytes:
        return bytes(msgpack.packb(packet, use_bin_type=True))

    def decode(self, blob: bytes) -> Packet:
        try:
            value = msgpack.unpackb(blob, raw=False, strict_map_key=True)
        except (ValueError, TypeError, msgpack.ExtraData, msgpack.FormatError,
                msgpack.StackError) as exc:
            raise MalformedPacket(f"invalid msgpack: {exc}") from None
        return _require_packet(value, check_keys=True)


A2A_METHOD = "SendMessage"


class A2AAdapter(_JsonBodied):
    """A2A v1.0 JSON-RPC 2.0 ``SendMessage`` request carrying the packet as a data part.

    Ids are per-adapter counters, so an encoding is deterministic for a given sequence.
    """

    name = "a2a"

    def __init__(self) -> None:
        self._ids = itertools.count(1)

    def encode(self, packet: Packet) -> bytes:
        n = next(self._ids)
        src = packet.get("src", "mesh")
        request = {
            "jsonrpc": "2.0",
            "id": n,
            "method": A2A_METHOD,
            "params": {
                "message": {
                    "messageId": f"{src}-{n}",
                    "role": "ROLE_AGENT",
                    "parts": [{"data": packet, "mediaType": "application/json"}],
                }
            },
        }
        return compact_json(request)

    def decode(self, blob: bytes) -> Packet:
        request = _load_json(blob)
        if not isinstance(request, dict) or request.get("jsonrpc") != "2.0":
            raise MalformedPacket("not a JSON-RPC 2.0 request")
        if request.get("method") != A2A_METHOD:
            raise MalformedPacket(f"unexpected method {request.get('method')!r}")
        params = request.get("params")
        message = params.get("message") if isinstance(params, dict) else None
        parts = message.get("parts") if isinstance(message, dict) else None
        if not isinstance(parts, list) or len(parts) != 1 or not isinstance(parts[0], dict):
            raise MalformedPacket("expected a message with exactly one part")
        if "data" not in parts[0]:
            raise MalformedPacket("expected a data part")
        return _require_packet(parts[0]["data"])


ANP_APPLICATION_PROTOCOL = 0b01
_ANP_HEADER = bytes([ANP_APPLICATION_PROTOCOL << 6])


class AnpAdapter(_JsonBodied):
    """ANP meta-protocol message: a one-byte header, then the JSON body."""

    name = "anp"

    def encode(self, packet: Packet) -> bytes:
        return _ANP_HEADER + compact_json(packet)

    def decode(self, blob: bytes) -> Packet:
        if not blob:
            raise MalformedPacket("empty ANP message")
        header = blob[0]
        if header >> 6 != ANP_APPLICATION_PROTOCOL:
            raise MalformedPacket(f"unsupported ANP protocol type {header >> 6}")
        if header & 0b111111:
            raise MalformedPacket("ANP reserved header bits must be zero")
        return _require_packet(_load_json(blob[1:]))


class SignedAdapter:
    """Appends a 64-byte Ed25519 signature of the inner bytes; verifies on decode."""

    SIGNATURE_SIZE = 64

    def __init__(self, inner: Adapter, signing_key: SigningKey,
                 verify_key: VerifyKey | None = None) -> None:
        self.inner = inner
        self.name = f"{inner.name}+signed"
        self.signing_key = signing_key
        self.verify_key = verify_key or signing_key.verify_key

    def encode(self, packet: Packet) -> bytes:
        inner = self.inner.encode(packet)
        return inner + self.signing_key.sign(inner).signature

    def decode(self, blob: bytes) -> Packet:
        if len(blob) <= self.SIGNATURE_SIZE:
            raise RejectedFrame("frame too short to carry a signature")
        inner, signature = blob[: -self.SIGNATURE_SIZE], blob[-self.SIGNATURE_SIZE :]
        try:
            self.verify_key.verify(inner, signature)
        except BadSignatureError:
            raise RejectedFrame("bad Ed25519 signature") from None
        return self.inner.decode(inner)

    def envelope_size(self, packet: Packet, blob: bytes) -> int:
        inner = blob[: -self.SIGNATURE_SIZE]
        return self.SIGNATURE_SIZE + self.inner.envelope_size(packet, inner)


class CrcAdapter:
    """Appends the CRC-32 of the inner bytes (4 bytes, big-endian); verifies on decode."""

    CRC_SIZE = 4

    def __init__(self, inner: Adapter) -> None:
        self.inner = inner
        self.name = f"{inner.name}+crc"

    def encode(self, packet: Packet) -> bytes:
        inner = self.inner.encode(packet)
        return inner + zlib.crc32(inner).to_bytes(4, "big")

    def decode(self, blob: bytes) -> Packet:
        if len(blob) <= self.CRC_SIZE:
            raise RejectedFrame("frame too short to carry a CRC")
        inner, crc = blob[: -self.CRC_SIZE], blob[-self.CRC_SIZE :]
        if zlib.crc32(inner) != int.from_bytes(crc, "big"):
            raise RejectedFrame("CRC-32 mismatch")
        return self.inner.decode(inner)

    def envelope_size(self, packet: Packet, blob: bytes) -> int:
        return self.CRC_SIZE + self.inner.envelope_size(packet, blob[: -self.CRC_SIZE])


_BASES: dict[str, Callable[[], Adapter]] = {
    "json": JsonAdapter,
    "msgpack": MsgpackAdapter,
    "a2a": A2AAdapter,
    "anp": AnpAdapter,
}
_WRAPPERS = ("signed", "crc")


def adapter_names() -> list[str]:
    """The base and wrapper names :func:`get_adapter` accepts."""
    return [*_BASES, *_WRAPPERS]


def get_adapter(name: str, *, signing_seed: bytes | None = None) -> Adapter:
    """Build the adapter named ``name`` (e.g. ``"json"``, ``"msgpack+crc"``, ``"a2a+signed"``).

    ``signing_seed`` (32 bytes) is required for ``signed``: every party of a run derives the
    same Ed25519 key from it. Raises ``ValueError`` for an unknown or ill-formed name.
    """
    base, *wrappers = [part.strip().lower() for part in name.split("+")]
    if base not in _BASES:
        raise ValueError(f"unknown protocol {base!r}; choose from {', '.join(_BASES)}")
    adapter: Adapter = _BASES[base]()
    for wrapper in wrappers:
        if wrapper == "crc":
            adapter = CrcAdapter(adapter)
        elif wrapper == "signed":
            if signing_seed is None or len(signing_seed) != 32:
                raise ValueError("the signed wrapper needs a 32-byte signing seed")
            adapter = SignedAdapter(adapter, SigningKey(signing_seed))
        else:
            raise ValueError(f"unknown wrapper {wrapper!r}; choose from {', '.join(_WRAPPERS)}")
    return adapter


def needs_signing_seed(name: str) -> bool:
    return "signed" in [part.strip().lower() for part in name.split("+")[1:]]
