"""Adapter round trips, envelope accounting, tamper and corruption, A2A conformance."""

from __future__ import annotations

import json
import os
from typing import Any

import pytest
from a2a.types import Message, Part, Role, SendMessageRequest
from google.protobuf import json_format  # type: ignore[import-untyped]
from jsonrpc.jsonrpc2 import JSONRPC20Request  # type: ignore[import-untyped]

from mesh.protocols import (
    A2AAdapter,
    MalformedPacket,
    RejectedFrame,
    compact_json,
    get_adapter,
)

SEED = bytes(range(32))
PACKET: dict[str, Any] = {
    "type": "data_event",
    "src": 2,
    "tool": "triple",
    "tag": "triples",
    "payload": {"triples": [{"s": "Ed Wood", "r": "was", "o": "an American filmmaker"}],
                "note": "naïve ünïcode ✓"},
    "token_used": 17,
    "busy_ms": 1.25,
}
NAMES = [
    "json", "msgpack", "a2a", "anp",
    "json+crc", "msgpack+crc", "a2a+signed", "anp+signed", "msgpack+signed+crc", "json+crc+signed",
]


@pytest.mark.parametrize("name", NAMES)
def test_adapter_round_trip(name: str) -> None:
    adapter = get_adapter(name, signing_seed=SEED)
    assert adapter.name == name
    blob = adapter.encode(PACKET)
    assert adapter.decode(blob) == PACKET


@pytest.mark.parametrize(("name", "envelope"), [
    ("json", 0), ("msgpack", 0), ("anp", 1), ("json+crc", 4), ("json+signed", 64),
    ("anp+signed+crc", 69), ("msgpack+crc", 4),
])
def test_envelope_size_beyond_compact_json(name: str, envelope: int) -> None:
    adapter = get_adapter(name, signing_seed=SEED)
    blob = adapter.encode(PACKET)
    assert adapter.envelope_size(PACKET, blob) == envelope


def test_json_is_compact_and_msgpack_smaller() -> None:
    assert get_adapter("json").encode(PACKET) == compact_json(PACKET)
    assert len(get_adapter("msgpack").encode(PACKET)) < len(compact_json(PACKET))


def test_a2a_envelope_is_the_jsonrpc_wrapper() -> None:
    adapter = get_adapter("a2a")
    blob = adapter.encode(PACKET)
    wrapper = len(blob) - len(compact_json(PACKET))
    assert adapter.envelope_size(PACKET, blob) == wrapper > 100


def test_anp_header_byte_is_application_protocol() -> None:
    blob = get_adapter("anp").encode(PACKET)
    assert blob[0] == 0b0100_0000
    assert json.loads(blob[1:]) == PACKET
    with pytest.raises(MalformedPacket):
        get_adapter("anp").decode(b"\x00" + blob[1:])  # meta-protocol negotiation type
    with pytest.raises(MalformedPacket):
        get_adapter("anp").decode(b"\x41" + blob[1:])  # reserved bits set


@pytest.mark.parametrize("name", ["json+signed", "msgpack+signed", "a2a+signed"])
def test_signed_rejects_tampered_frames(name: str) -> None:
    adapter = get_adapter(name, signing_seed=SEED)
    blob = bytearray(adapter.encode(PACKET))
    for index in (0, len(blob) // 2, len(blob) - 1):  # body, middle, signature
        tampered = bytearray(blob)
        tampered[index] ^= 0x01
        with pytest.raises(RejectedFrame):
            adapter.decode(bytes(tampered))
    with pytest.raises(RejectedFrame):
        adapter.decode(bytes(blob[:10]))


def test_signed_rejects_another_key() -> None:
    mine = get_adapter("json+signed", signing_seed=SEED)
    theirs = get_adapter("json+signed", signing_seed=os.urandom(32))
    with pytest.raises(RejectedFrame):
        mine.decode(theirs.encode(PACKET))


@pytest.mark.parametrize("name", ["json+crc", "msgpack+crc", "a2a+crc", "anp+crc"])
def test_crc_rejects_corrupted_frames(name: str) -> None:
    adapter = get_adapter(name)
    blob = adapter.encode(PACKET)
    for index in range(0, len(blob), max(1, len(blob) // 17)):
        corrupted = bytearray(blob)
        corrupted[index] ^= 0x80
        with pytest.raises(RejectedFrame):
            adapter.decode(bytes(corrupted))
    with pytest.raises(RejectedFrame):
        adapter.decode(b"\x00\x01")


@pytest.mark.parametrize("name", ["json", "msgpack", "a2a", "anp"])
@pytest.mark.parametrize("garbage", [b"\xff\xfe\x00garbage", b"[1, 2, 3]", b"\x93\x01\x02\x03",
                                     b"{\"jsonrpc\": \"2.0\"}", b"\x40null", b"x"])
def test_garbage_is_malformed_not_a_crash(name: str, garbage: bytes) -> None:
    with pytest.raises(MalformedPacket):
        get_adapter(name).decode(garbage)


def test_unknown_names_and_missing_seed() -> None:
    with pytest.raises(ValueError, match="unknown protocol"):
        get_adapter("xml")
    with pytest.raises(ValueError, match="unknown wrapper"):
        get_adapter("json+zip")
    with pytest.raises(ValueError, match="signing seed"):
        get_adapter("json+signed")


def test_a2a_envelope_parses_with_a2a_sdk_types() -> None:
    """Our hand-written SendMessage request is what a2a-sdk's JSON-RPC server accepts."""
    body = json.loads(A2AAdapter().encode(PACKET))
    rpc = JSONRPC20Request.from_data(body)
    assert isinstance(rpc, JSONRPC20Request)
    assert rpc.method == "SendMessage"
    request = json_format.ParseDict(body["params"], SendMessageRequest())  # strict: no unknowns
    assert request.message.role == Role.ROLE_AGENT
    assert request.message.message_id == "2-1"
    assert len(request.message.parts) == 1
    assert request.message.parts[0].media_type == "application/json"
    data = json_format.MessageToDict(request.message.parts[0].data)
    assert data == PACKET  # protobuf Value numbers are doubles; 17 == 17.0
    assert json_format.MessageToDict(request) == body["params"]


def test_a2a_sdk_built_request_decodes() -> None:
    """A request built with a2a-sdk's own types, serialised as its client does, decodes."""
    part = Part(media_type="application/json")
    json_format.ParseDict(PACKET, part.data)
    message = Message(message_id="m-1", role=Role.ROLE_USER, parts=[part])
    params = json_format.MessageToDict(SendMessageRequest(message=message))
    body = JSONRPC20Request(method="SendMessage", params=params, _id=7).data
    decoded = get_adapter("a2a").decode(json.dumps(body).encode())
    assert decoded == PACKET


def test_a2a_rejects_other_methods() -> None:
    body = json.loads(A2AAdapter().encode(PACKET))
    body["method"] = "GetTask"
    with pytest.raises(MalformedPacket, match="unexpected method"):
        get_adapter("a2a").decode(json.dumps(body).encode())


def test_msgpack_packet_keys_must_be_strings() -> None:
    import msgpack  # type: ignore[import-untyped]

    for body in ({b"type": "x"}, {"type": 1}, ["type"]):
        with pytest.raises(MalformedPacket):
            get_adapter("msgpack").decode(msgpack.packb(body, use_bin_type=True))
