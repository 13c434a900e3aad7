"""A fake Anthropic Messages upstream: ``POST /v1/messages`` (JSON and SSE), ``/v1/models``.

See :mod:`tests.fakes` for the scripting API. Stream events follow the Messages API:
``message_start`` (input usage), ``content_block_start/delta/stop`` for text (``text_delta``),
thinking (``thinking_delta``) and tool use (``input_json_delta``), ``message_delta`` (stop
reason, output usage), ``message_stop``; a scripted mid-stream failure sends ``event: error``.
With ``api_key`` set, requests need ``x-api-key: KEY`` or ``Authorization: Bearer KEY`` (newer
SDKs send the latter), else 401 ``authentication_error``.

Script: ``python tests/fakes/anthropic_upstream.py --port 9200 --tokens 32``.
"""

from __future__ import annotations

import asyncio
import json
import sys
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as a script: make ``tests.fakes`` importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from tests.fakes import (  # noqa: E402
    Drop,
    Exchange,
    Fail,
    FakeUpstream,
    Hang,
    Reply,
    drop_connection,
    estimate_tokens,
    script_arguments,
    scripted,
)

_dumps = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False).encode

ERROR_TYPES = {400: "invalid_request_error", 401: "authentication_error",
               403: "permission_error", 404: "not_found_error", 413: "request_too_large",
               429: "rate_limit_error", 500: "api_error", 529: "overloaded_error"}


def input_tokens(body: dict[str, Any]) -> int:
    total = 0
    system = body.get("system")
    if isinstance(system, str):
        total += estimate_tokens(system)
    elif isinstance(system, list):
        total += sum(estimate_tokens(b.get("text") or "") for b in system if isinstance(b, dict))
    for m in body.get("messages") or ():
        content = m.get("content") if isinstance(m, dict) else None
        if isinstance(content, str):
            total += estimate_tokens(content)
        elif isinstance(content, list):
            for b in content:
                if isinstance(b, dict):
                    total += estimate_tokens(b.get("text") or "")
                    if isinstance(b.get("content"), str):
                        total += estimate_tokens(b["content"])
    return max(1, total)


def event(name: str, payload: dict[str, Any]) -> bytes:
    return f"event: {name}\ndata: ".encode() + _dumps(payload).encode() + b"\n\n"


class FakeAnthropicUpstream(FakeUpstream):
    base_path = ""  # the SDK appends /v1/messages itself

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.routes.update({
            ("POST", "/v1/messages"): self.messages,
            ("GET", "/v1/models"): self.models,
        })

    def check_auth(self, headers: dict[str, str]) -> bool:
        if self.api_key is None:
            return True
        return self.api_key in (headers.get("x-api-key"),
                                headers.get("authorization", "").removeprefix("Bearer "))

    async def unauthorized(self, ex: Exchange) -> None:
        await ex.json(401, {"type": "error", "error": {
            "type": "authentication_error", "message": "invalid x-api-key"},
            "request_id": "req_fake"})

    async def models(self, ex: Exchange) -> None:
        await ex.json(200, {"data": [{"type": "model", "id": self.model,
                                      "display_name": self.model,
                                      "created_at": "2025-01-01T00:00:00Z"}],
                            "has_more": False, "first_id": self.model, "last_id": self.model})

    @staticmethod
    def error_body(fail: Fail) -> dict[str, Any]:
        return {"type": "error", "error": {
            "type": fail.error_type or ERROR_TYPES.get(fail.status, "api_error"),
            "message": fail.message}, "request_id": "req_fake"}

    @scripted
    async def messages(self, ex: Exchange) -> None:
        action, body = ex.action, ex.record.body
        if not isinstance(body, dict) or not body.get("max_tokens"):
            await ex.json(400, self.error_body(Fail(400, "max_tokens: Field required")))
            return
        stream = bool(body.get("stream"))
        if isinstance(action, Hang) and (action.after_tokens is None or not stream):
            await asyncio.sleep(action.seconds)
        if isinstance(action, Fail) and (action.after_tokens is None or not stream):
            await ex.json(action.status, self.error_body(action), action.headers)
            return
        if not stream:
            await self.complete_json(ex, action if isinstance(action, Reply) else Reply())
            return
        await ex.sse(self.frames(action, body))

    def _stop_reason(self, reply: Reply, cut: bool) -> str:
        return reply.finish_reason or (
            "tool_use" if reply.tool_calls else "max_tokens" if cut else "end_turn")

    def _message(self, body: dict[str, Any]) -> dict[str, Any]:
        return {"id": f"msg_{uuid.uuid4().hex[:24]}", "type": "message", "role": "assistant",
                "model": body.get("model") or self.model, "content": [],
                "stop_reason": None, "stop_sequence": None}

    def _usage(self, reply: Reply, body: dict[str, Any], out: int) -> tuple[int, int]:
        if isinstance(reply.usage, tuple):
            return reply.usage
        return input_tokens(body), out

    async def complete_json(self, ex: Exchange, reply: Reply) -> None:
        body = ex.record.body
        tokens, cut = self.plan_text(reply, body)
        ttft, gap = self.delays(reply)
        await asyncio.sleep(ttft + gap * max(0, len(tokens) - 1))
        content: list[dict[str, Any]] = []
        if reply.reasoning:
            content.append({"type": "thinking", "thinking": reply.reasoning,
                            "signature": "sig"})
        if tokens:
            content.append({"type": "text", "text": "".join(tokens)})
        for i, c in enumerate(reply.tool_calls):
            content.append({"type": "tool_use", "id": c.id or f"toolu_{i}", "name": c.name,
                            "input": json.loads(c.arguments or "{}")})
        pin, pout = self._usage(reply, body, len(tokens) + len(reply.tool_calls))
        await ex.json(200, {**self._message(body), "content": content,
                            "stop_reason": self._stop_reason(reply, cut),
                            "usage": {"input_tokens": pin, "output_tokens": pout}})

    async def frames(self, action: Any, body: dict[str, Any]) -> AsyncIterator[bytes]:
        reply = action if isinstance(action, Reply) else Reply()
        limit = None if isinstance(action, Reply) else getattr(action, "after_tokens", None)
        tokens, cut = self.plan_text(reply, body)
        if limit is not None:
            tokens = self.plan_text(Reply(tokens=max(limit, 1) + 4), body)[0]
        pin, _ = self._usage(reply, body, 0)
        yield event("message_start", {"type": "message_start", "message": {
            **self._message(body), "usage": {"input_tokens": pin, "output_tokens": 1,
                                             "cache_creation_input_tokens": 0,
                                             "cache_read_input_tokens": 0}}})
        index = 0
        if reply.reasoning:
            yield event("content_block_start", {"type": "content_block_start", "index": 0,
                                                "content_block": {"type": "thinking",
                                                                  "thinking": ""}})
            yield event("content_block_delta", {"type": "content_block_delta", "index": 0,
                                                "delta": {"type": "thinking_delta",
                                                          "thinking": reply.reasoning}})
            yield event("content_block_stop", {"type": "content_block_stop", "index": 0})
            index = 1
        sent = 0
        if tokens:
            yield event("content_block_start", {"type": "content_block_start", "index": index,
                                                "content_block": {"type": "text", "text": ""}})
            yield event("ping", {"type": "ping"})
            for i, token in enumerate(tokens):
                if limit is not None and i == limit:
                    break
                await self.pace(i, reply)
                yield event("content_block_delta", {
                    "type": "content_block_delta", "index": index,
                    "delta": {"type": "text_delta", "text": token}})
                sent += 1
            if isinstance(action, Fail):
                yield event("error", self.error_body(action))
                return
            if isinstance(action, Hang):
                await asyncio.sleep(action.seconds)
                return
            if isinstance(action, Drop):
                drop_connection()
            yield event("content_block_stop", {"type": "content_block_stop", "index": index})
            index += 1
        for n, call in enumerate(reply.tool_calls):
            await self.pace(0 if n == 0 and not tokens else 1, reply)
            yield event("content_block_start", {
                "type": "content_block_start", "index": index,
                "content_block": {"type": "tool_use", "id": call.id or f"toolu_{n}",
                                  "name": call.name, "input": {}}})
            args = call.arguments
            parts = max(1, call.chunks)
            size = -(-len(args) // parts) if args else 0
            for k in range(parts):
                piece = args[k * size:(k + 1) * size]
                if piece:
                    yield event("content_block_delta", {
                        "type": "content_block_delta", "index": index,
                        "delta": {"type": "input_json_delta", "partial_json": piece}})
            yield event("content_block_stop", {"type": "content_block_stop", "index": index})
            index += 1
            sent += 1
        _, pout = self._usage(reply, body, sent)
        yield event("message_delta", {
            "type": "message_delta",
            "delta": {"stop_reason": self._stop_reason(reply, cut), "stop_sequence": None},
            "usage": {"output_tokens": pout}})
        yield event("message_stop", {"type": "message_stop"})


def main() -> None:
    args = script_arguments(__doc__.splitlines()[0]).parse_args()
    up = FakeAnthropicUpstream(tokens=args.tokens, token_delay_ms=args.token_delay_ms,
                               ttft_ms=args.ttft_ms, api_key=args.api_key, model=args.model,
                               host=args.host, port=args.port, log_level=args.log_level)
    print(f"fake Anthropic upstream on {up.base_url}", flush=True)
    up.serve_forever()


if __name__ == "__main__":
    main()
