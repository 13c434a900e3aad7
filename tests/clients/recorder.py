"""A forwarding proxy between a client and Gaia that notes what each request asked for: the
path, the JSON body's ``stream`` flag and the tools it offered, and the content type Gaia
answered with. For the clients that always stream and show no deltas (Kilo Code's ``--format
json`` prints whole parts), it is what shows the turn was streamed; the bytes pass unchanged.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import httpx
import pytest

# Headers of one connection, not of the message (RFC 9110, 7.6.1).
HOP = {"connection", "keep-alive", "transfer-encoding", "te", "upgrade", "host",
       "proxy-connection", "content-length"}


@dataclass
class Exchange:
    method: str
    path: str
    body: dict[str, Any]
    status: int = 0
    content_type: str = ""

    @property
    def streamed(self) -> bool:
        return bool(self.body.get("stream")) and self.content_type.startswith(
            "text/event-stream")

    @property
    def tools(self) -> list[str]:
        return [t.get("name") or t.get("function", {}).get("name", "")
                for t in self.body.get("tools") or []]


@dataclass
class Recorder:
    url: str
    exchanges: list[Exchange] = field(default_factory=list)

    def posts(self, path: str) -> list[Exchange]:
        return [e for e in self.exchanges if e.method == "POST" and e.path.endswith(path)]


def _handler(upstream: str, recorder: Recorder) -> type[BaseHTTPRequestHandler]:
    class Forward(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args: Any) -> None:  # the test's output stays clean
            pass

        def _body(self) -> bytes:
            if "chunked" not in self.headers.get("transfer-encoding", "").lower():
                length = int(self.headers.get("content-length") or 0)
                return self.rfile.read(length) if length else b""
            raw = b""
            while size := int(self.rfile.readline().split(b";")[0], 16):
                raw += self.rfile.read(size)
                self.rfile.readline()
            while self.rfile.readline() not in (b"\r\n", b"\n", b""):  # trailers
                pass
            return raw

        def _forward(self) -> None:
            raw = self._body()
            try:
                body = json.loads(raw) if raw else {}
            except ValueError:
                body = {}
            exchange = Exchange(self.command, self.path, body if isinstance(body, dict) else {})
            recorder.exchanges.append(exchange)
            headers = {k: v for k, v in self.headers.items() if k.lower() not in HOP}
            with httpx.stream(self.command, upstream + self.path, headers=headers, content=raw,
                              timeout=600) as reply:
                exchange.status = reply.status_code
                exchange.content_type = reply.headers.get("content-type", "")
                self.send_response(reply.status_code)
                for name, value in reply.headers.multi_items():
                    if name.lower() not in HOP:
                        self.send_header(name, value)
                self.send_header("Transfer-Encoding", "chunked")
                self.end_headers()
                for chunk in reply.iter_raw():
                    self.wfile.write(b"%x\r\n%s\r\n" % (len(chunk), chunk))
                    self.wfile.flush()
                self.wfile.write(b"0\r\n\r\n")

        do_GET = do_POST = do_HEAD = do_DELETE = _forward

    return Forward


@pytest.fixture
def recorder(gaia_server: Any) -> Iterator[Recorder]:
    """A :class:`Recorder` in front of the session's Gaia server (its ``url`` in place of
    Gaia's)."""
    record = Recorder("")
    server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(gaia_server.url, record))
    record.url = f"http://127.0.0.1:{server.server_address[1]}"
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield record
    server.shutdown()
    server.server_close()
