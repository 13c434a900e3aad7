"""Sans-I/O frame codec: a 4-byte big-endian length, then the payload.

Modelled on ``websockets`` and ``h11``: :class:`FrameConnection` takes bytes in and hands
back events; it owns no socket, task or clock. ``receive_data`` never raises: malformed input
(an oversized or empty frame, data after close, a truncated frame at EOF) is recorded in
:attr:`FrameConnection.error`, the state moves to ``CLOSED`` and a :class:`ConnectionClosed`
event is emitted. The caller then closes its transport.
"""

from __future__ import annotations

import enum
import struct
from dataclasses import dataclass

__all__ = [
    "DEFAULT_MAX_FRAME_SIZE",
    "HEADER_SIZE",
    "ConnectionClosed",
    "Event",
    "Frame",
    "FrameConnection",
    "FrameError",
    "FrameTooLarge",
    "State",
    "encode_frame",
]

HEADER_SIZE = 4
DEFAULT_MAX_FRAME_SIZE = 4 * 1024 * 1024
_HEADER = struct.Struct(">I")


class State(enum.Enum):
    OPEN = "open"
    CLOSED = "closed"


class FrameError(Exception):
    """Base class of the codec's errors (only ever raised on the *sending* side)."""


class FrameTooLarge(FrameError):
    """A payload to send is larger than the maximum frame size."""


@dataclass(frozen=True, slots=True)
class Frame:
    """One complete payload received."""

    payload: bytes

    @property
    def wire_size(self) -> int:
        return HEADER_SIZE + len(self.payload)


@dataclass(frozen=True, slots=True)
class ConnectionClosed:
    """The stream ended: ``error`` is ``None`` for a clean EOF between frames."""

    error: str | None


Event = Frame | ConnectionClosed


def encode_frame(payload: bytes, *, max_frame_size: int = DEFAULT_MAX_FRAME_SIZE) -> bytes:
    """Return ``payload`` with its length prefix.

    Raises :class:`FrameTooLarge` if the payload exceeds ``max_frame_size`` and
    :class:`FrameError` if it is empty (an empty frame is malformed on receipt).
    """
    size = len(payload)
    if size == 0:
        raise FrameError("empty frame")
    if size > max_frame_size:
        raise FrameTooLarge(f"frame of {size} bytes exceeds the limit of {max_frame_size}")
    return _HEADER.pack(size) + payload


class FrameConnection:
    """The receiving and sending state of one length-prefixed stream.

    Feed bytes with :meth:`receive_data` and EOF with :meth:`receive_eof`; both return the
    events completed by that input, in order. Build outgoing bytes with :meth:`send`.
    """

    def __init__(self, *, max_frame_size: int = DEFAULT_MAX_FRAME_SIZE) -> None:
        if max_frame_size < 1 or max_frame_size > 0xFFFFFFFF:
            raise ValueError("max_frame_size must be between 1 and 2**32 - 1")
        self.max_frame_size = max_frame_size
        self.state = State.OPEN
        self.error: str | None = None
        self.frames_received = 0
        self.bytes_received = 0
        self._buffer = bytearray()

    @property
    def buffered(self) -> int:
        """Bytes received but not yet part of a complete frame."""
        return len(self._buffer)

    def send(self, payload: bytes) -> bytes:
        """Return the bytes to write for ``payload``.

        Raises :class:`FrameError` if the connection is closed, :class:`FrameTooLarge` if the
        payload exceeds the limit. Sending is local, so these are programming errors.
        """
        if self.state is not State.OPEN:
            raise FrameError("connection is closed")
        return encode_frame(payload, max_frame_size=self.max_frame_size)

    def receive_data(self, data: bytes) -> list[Event]:
        """Consume ``data`` and return the frames it completes. Never raises."""
        if self.state is not State.OPEN:
            if data:
                # Late bytes after a close are ignored; the first error stays the reason.
                self.bytes_received += len(data)
            return []
        self.bytes_received += len(data)
        buffer = self._buffer
        buffer += data
        events: list[Event] = []
        offset = 0
        end = len(buffer)
        while end - offset >= HEADER_SIZE:
            (size,) = _HEADER.unpack_from(buffer, offset)
            if size == 0:
                return self._fail(events, "malformed frame: zero length")
            if size > self.max_frame_size:
                return self._fail(
                    events,
                    f"frame of {size} bytes exceeds the limit of {self.max_frame_size}",
                )
            stop = offset + HEADER_SIZE + size
            if stop > end:
                break
            events.append(Frame(bytes(buffer[offset + HEADER_SIZE : stop])))
            offset = stop
        if offset:
            del buffer[:offset]
        self.frames_received += len(events)
        return events

    def receive_eof(self) -> list[Event]:
        """Record the end of the stream. Never raises."""
        if self.state is not State.OPEN:
            return []
        if self._buffer:
            return self._fail([], f"truncated frame: {len(self._buffer)} bytes at EOF")
        self.state = State.CLOSED
        return [ConnectionClosed(None)]

    def fail(self, reason: str) -> list[Event]:
        """Close because a layer above found the input malformed (e.g. undecodable)."""
        if self.state is not State.OPEN:
            return []
        return self._fail([], reason)

    def _fail(self, events: list[Event], reason: str) -> list[Event]:
        self.frames_received += sum(1 for e in events if isinstance(e, Frame))
        self.state = State.CLOSED
        self.error = reason
        self._buffer.clear()
        events.append(ConnectionClosed(reason))
        return events
