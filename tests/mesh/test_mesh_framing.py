"""Byte-level tests of the sans-I/O frame codec: no sockets."""

from __future__ import annotations

import random

import pytest

from mesh.framing import (
    ConnectionClosed,
    Frame,
    FrameConnection,
    FrameError,
    FrameTooLarge,
    State,
    encode_frame,
)


def frames_of(events: list[Frame | ConnectionClosed]) -> list[bytes]:
    return [e.payload for e in events if isinstance(e, Frame)]


def test_encode_frame_prefixes_big_endian_length() -> None:
    assert encode_frame(b"abc") == b"\x00\x00\x00\x03abc"
    assert encode_frame(b"x" * 258)[:4] == b"\x00\x00\x01\x02"


def test_receive_data_whole_frames_in_one_chunk() -> None:
    conn = FrameConnection()
    data = encode_frame(b"one") + encode_frame(b"two") + encode_frame(b"three")
    assert frames_of(conn.receive_data(data)) == [b"one", b"two", b"three"]
    assert conn.state is State.OPEN
    assert conn.buffered == 0
    assert conn.frames_received == 3


def test_receive_data_split_byte_by_byte() -> None:
    conn = FrameConnection()
    data = encode_frame(b"hello") + encode_frame(b"world!")
    got: list[bytes] = []
    for i in range(len(data)):
        got += frames_of(conn.receive_data(data[i : i + 1]))
    assert got == [b"hello", b"world!"]
    assert conn.bytes_received == len(data)


def test_receive_data_split_inside_header_and_payload() -> None:
    conn = FrameConnection()
    data = encode_frame(b"abcdef")
    assert conn.receive_data(data[:2]) == []
    assert conn.receive_data(data[2:7]) == []
    assert conn.buffered == 7
    assert frames_of(conn.receive_data(data[7:])) == [b"abcdef"]


def test_oversize_frame_closes_without_raising() -> None:
    conn = FrameConnection(max_frame_size=16)
    events = conn.receive_data(encode_frame(b"ok") + (17).to_bytes(4, "big") + b"x" * 17)
    assert frames_of(events) == [b"ok"]
    assert isinstance(events[-1], ConnectionClosed)
    assert events[-1].error is not None
    assert "exceeds the limit" in events[-1].error
    assert conn.state is State.CLOSED
    assert conn.error == events[-1].error


def test_frame_at_exact_limit_is_accepted() -> None:
    conn = FrameConnection(max_frame_size=16)
    assert frames_of(conn.receive_data(encode_frame(b"y" * 16))) == [b"y" * 16]


def test_zero_length_frame_is_malformed() -> None:
    conn = FrameConnection()
    events = conn.receive_data(b"\x00\x00\x00\x00")
    assert events == [ConnectionClosed("malformed frame: zero length")]
    assert conn.state is State.CLOSED


def test_garbage_never_raises_and_closes_or_waits() -> None:
    rng = random.Random(5)
    for _ in range(300):
        conn = FrameConnection(max_frame_size=1024)
        blob = rng.randbytes(rng.randint(1, 64))
        events = conn.receive_data(blob)
        events += conn.receive_eof()
        # Either the garbage parsed as frames and a clean EOF, or it was recorded as an error.
        assert isinstance(events[-1], ConnectionClosed)
        assert conn.state is State.CLOSED
        if events[-1].error is None:
            assert conn.buffered == 0


def test_high_length_garbage_is_rejected_immediately() -> None:
    conn = FrameConnection(max_frame_size=1024)
    events = conn.receive_data(b"GET / HTTP/1.1\r\n\r\n")
    assert len(events) == 1
    assert isinstance(events[0], ConnectionClosed)
    assert conn.error is not None
    assert "exceeds the limit" in conn.error


def test_truncated_frame_at_eof_is_an_error() -> None:
    conn = FrameConnection()
    assert conn.receive_data(encode_frame(b"abcdef")[:6]) == []
    events = conn.receive_eof()
    assert events == [ConnectionClosed("truncated frame: 6 bytes at EOF")]


def test_clean_eof_between_frames() -> None:
    conn = FrameConnection()
    conn.receive_data(encode_frame(b"a"))
    assert conn.receive_eof() == [ConnectionClosed(None)]
    assert conn.error is None


def test_data_after_close_is_ignored() -> None:
    conn = FrameConnection(max_frame_size=4)
    conn.receive_data(b"\xff\xff\xff\xff")
    assert conn.receive_data(encode_frame(b"ok")) == []
    assert conn.receive_eof() == []
    assert conn.fail("again") == []
    assert conn.error is not None
    assert "exceeds" in conn.error


def test_fail_records_reason_from_upper_layer() -> None:
    conn = FrameConnection()
    assert conn.fail("malformed packet: x") == [ConnectionClosed("malformed packet: x")]
    assert conn.state is State.CLOSED


def test_send_checks_limits_and_state() -> None:
    conn = FrameConnection(max_frame_size=8)
    assert conn.send(b"12345678") == b"\x00\x00\x00\x0812345678"
    with pytest.raises(FrameTooLarge):
        conn.send(b"123456789")
    with pytest.raises(FrameError):
        conn.send(b"")
    conn.fail("bye")
    with pytest.raises(FrameError):
        conn.send(b"x")
