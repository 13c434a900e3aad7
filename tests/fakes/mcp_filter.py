"""A stdio MCP server that says odd things: it runs a real one (the command line it is given)
and passes everything through, except that in what the server writes ``@@FF@@`` becomes the
byte 0xFF (not UTF-8) and ``@@D800@@`` the JSON escape of a lone surrogate (``\\ud800``),
and an answer holding ``@@ERROR@@`` becomes a JSON-RPC error answer to the same request.
With ``server-everything``'s ``echo``, a client chooses what the server answers.

``python tests/fakes/mcp_filter.py <server> [args...]``
"""

from __future__ import annotations

import json
import subprocess
import sys
import threading

MARKS = ((b"@@FF@@", b"\xff"), (b"@@D800@@", b"\\ud800"))


def main() -> int:
    server = subprocess.Popen(sys.argv[1:], stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    into, out = server.stdin, server.stdout
    if into is None or out is None:
        return 2

    def forward() -> None:
        for line in sys.stdin.buffer:
            into.write(line)
            into.flush()
        into.close()

    threading.Thread(target=forward, daemon=True).start()
    for line in out:
        if b"@@ERROR@@" in line:
            line = json.dumps({"jsonrpc": "2.0", "id": json.loads(line)["id"], "error": {
                "code": -32603, "message": "the server failed"}}).encode() + b"\n"
        for mark, odd in MARKS:
            line = line.replace(mark, odd)
        sys.stdout.buffer.write(line)
        sys.stdout.buffer.flush()
    return server.wait()


if __name__ == "__main__":
    sys.exit(main())
