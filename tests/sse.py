"""A strict little SSE reader for tests: frames, comments and named events, as sent."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any


@dataclass
class SSEFrame:
    event: str | None = None
    data: str | None = None
    comment: str | None = None

    def json(self) -> Any:
        assert self.data is not None
        return json.loads(self.data)


@dataclass
class SSEStream:
    frames: list[SSEFrame] = field(default_factory=list)

    @property
    def comments(self) -> list[str]:
        return [f.comment for f in self.frames if f.comment is not None]

    @property
    def data(self) -> list[str]:
        return [f.data for f in self.frames if f.data is not None]

    def json_payloads(self) -> list[Any]:
        return [json.loads(d) for d in self.data if d != "[DONE]"]


def parse_sse(raw: str) -> SSEStream:
    """Parse a whole SSE body; every frame must end with a blank line."""
    stream = SSEStream()
    assert raw.endswith("\n\n"), f"stream does not end with a blank line: {raw[-80:]!r}"
    for block in raw.split("\n\n")[:-1]:
        frame = SSEFrame()
        data_lines = []
        for line in block.split("\n"):
            if line.startswith(":"):
                frame.comment = line[1:].strip()
            elif line.startswith("event: "):
                frame.event = line[7:]
            elif line.startswith("data: "):
                data_lines.append(line[6:])
            else:
                raise AssertionError(f"unexpected SSE line {line!r}")
        if data_lines:
            frame.data = "\n".join(data_lines)
        stream.frames.append(frame)
    return stream
