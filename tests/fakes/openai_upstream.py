"""A fake OpenAI-compatible upstream: ``/v1/chat/completions`` (JSON and SSE, with
``stream_options.include_usage``), ``/v1/completions`` (SSE: the scripted reply's text as
``text_completion`` chunks), ``/v1/embeddings`` (vector ``i`` of input ``t``: ``[len(t), i,
0.5]``, padded with zeros to ``dimensions``), ``/v1/models`` and ``/health``.

See :mod:`tests.fakes` for the scripting API. Usage counts: ``prompt_tokens`` is a 4-characters
estimate of the message texts, ``completion_tokens`` the number of streamed tokens (plus one
per tool call argument chunk). With ``api_key`` set, requests need ``Authorization: Bearer KEY``
(else 401, whose message quotes the wrong key the way OpenAI does).

Script: ``python tests/fakes/openai_upstream.py --port 9100 --tokens 32 --token-delay-ms 5``.
"""

from __future__ import annotations

import asyncio
import json
import sys
import time
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
    Raw,
    Reply,
    drop_connection,
    estimate_tokens,
    script_arguments,
    scripted,
)

_dumps = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False).encode

ERROR_TYPES = {400: "invalid_request_error", 401: "invalid_request_error",
               403: "permission_error", 404: "not_found_error", 429: "rate_limit_exceeded",
               500: "server_error", 503: "server_error"}


def prompt_tokens(body: dict[str, Any]) -> int:
    total = 0
    for m in body.get("messages") or ():
        content = m.get("content") if isinstance(m, dict) else None
        if isinstance(content, str):
            total += estimate_tokens(content)
        elif isinstance(content, list):
            total += sum(estimate_tokens(p.get("text") or "") for p in content
                         if isinstance(p, dict))
    return max(1, total)


def sse(payload: Any) -> bytes:
    return b"data: " + (payload if isinstance(payload, bytes) else _dumps(payload).encode()) \
        + b"\n\n"


class FakeOpenAIUpstream(FakeUpstream):
    base_path = "/v1"

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.routes.update({
            ("POST", "/v1/chat/completions"): self.chat_completions,
            ("POST", "/v1/completions"): self.completions,
            ("POST", "/v1/embeddings"): self.embeddings,
            ("GET", "/v1/models"): self.models,
            ("GET", "/health"): self.health,
        })

    def check_auth(self, headers: dict[str, str]) -> bool:
        return self.api_key is None or headers.get("authorization") == f"Bearer {self.api_key}"

    async def unauthorized(self, ex: Exchange) -> None:
        given = ex.record.headers.get("authorization", "")[7:]
        await ex.json(401, {"error": {
            "message": f"Incorrect API key provided: {given}. You can find your API key at "
                       "https://platform.openai.com/account/api-keys.",
            "type": "invalid_request_error", "param": None, "code": "invalid_api_key"}})

    async def health(self, ex: Exchange) -> None:
        await ex.json(200, {"status": "ok"})

    async def models(self, ex: Exchange) -> None:
        await ex.json(200, {"object": "list", "data": [
            {"id": self.model, "object": "model", "created": 0, "owned_by": "fake"}]})

    @staticmethod
    def error_body(fail: Fail) -> dict[str, Any]:
        return {"error": {"message": fail.message,
                          "type": fail.error_type or ERROR_TYPES.get(fail.status, "api_error"),
                          "param": None, "code": None}}

    @scripted
    async def chat_completions(self, ex: Exchange) -> None:
        action, body = ex.action, ex.record.body
        if not isinstance(body, dict):
            await ex.json(400, {"error": {"message": "The body must be JSON.",
                                          "type": "invalid_request_error"}})
            return
        stream = bool(body.get("stream"))
        if isinstance(action, Hang) and (action.after_tokens is None or not stream):
            await asyncio.sleep(action.seconds)
        if isinstance(action, Fail) and (action.after_tokens is None or not stream):
            await ex.json(action.status, self.error_body(action), action.headers)
            return
        if isinstance(action, Raw):
            await ex.sse(_once(action.body))
            return
        if not stream:
            await self.complete_json(ex, action if isinstance(action, Reply) else Reply())
            return
        await ex.sse(self.frames(ex, action, body))

    @scripted
    async def completions(self, ex: Exchange) -> None:
        action, body = ex.action, ex.record.body
        if isinstance(action, Fail):
            await ex.json(action.status, self.error_body(action), action.headers)
            return
        reply = action if isinstance(action, Reply) else Reply()
        tokens, cut = self.plan_text(reply, body)
        head = {"id": f"cmpl-{uuid.uuid4().hex[:24]}", "object": "text_completion",
                "created": int(time.time()), "model": body.get("model") or self.model}

        async def frames() -> AsyncIterator[bytes]:
            for i, token in enumerate(tokens):
                await self.pace(i, reply)
                yield sse({**head, "choices": [{"text": token, "index": 0, "logprobs": None,
                                                "finish_reason": None}]})
            yield sse({**head, "choices": [{"text": "", "index": 0, "logprobs": None,
                                            "finish_reason": "length" if cut else "stop"}]})
            pin = max(1, estimate_tokens(str(body.get("prompt") or "")))
            yield sse({**head, "choices": [], "usage": {
                "prompt_tokens": pin, "completion_tokens": len(tokens),
                "total_tokens": pin + len(tokens)}})
            yield sse(b"[DONE]")

        await ex.sse(frames())

    @scripted
    async def embeddings(self, ex: Exchange) -> None:
        action, body = ex.action, ex.record.body
        if isinstance(action, Fail):
            await ex.json(action.status, self.error_body(action), action.headers)
            return
        texts = body.get("input")
        texts = [texts] if isinstance(texts, str) else list(texts or [])
        size = max(3, int(body.get("dimensions") or 3))
        await ex.json(200, {"object": "list", "model": body.get("model"), "data": [
            {"object": "embedding", "index": i,
             "embedding": ([float(len(t)), float(i), 0.5] + [0.0] * size)[:size]}
            for i, t in enumerate(texts)],
            "usage": {"prompt_tokens": sum(estimate_tokens(t) for t in texts),
                      "total_tokens": sum(estimate_tokens(t) for t in texts)}})

    def _ids(self, body: dict[str, Any]) -> dict[str, Any]:
        return {"id": f"chatcmpl-{uuid.uuid4().hex[:24]}", "object": "chat.completion.chunk",
                "created": int(time.time()), "model": body.get("model") or self.model,
                "system_fingerprint": "fp_fake"}

    async def complete_json(self, ex: Exchange, reply: Reply) -> None:
        body = ex.record.body
        tokens, cut = self.plan_text(reply, body)
        ttft, gap = self.delays(reply)
        await asyncio.sleep(ttft + gap * max(0, len(tokens) - 1))
        message: dict[str, Any] = {"role": "assistant", "content": "".join(tokens) or None,
                                   "refusal": None}
        out = len(tokens)
        if reply.tool_calls:
            message["tool_calls"] = [
                {"id": c.id or f"call_{i}", "type": "function",
                 "function": {"name": c.name, "arguments": c.arguments}}
                for i, c in enumerate(reply.tool_calls)]
            out += sum(estimate_tokens(c.arguments) for c in reply.tool_calls)
        finish = reply.finish_reason or (
            "tool_calls" if reply.tool_calls else "length" if cut else "stop")
        payload = {**self._ids(body), "object": "chat.completion",
                   "choices": [{"index": 0, "message": message,
                                "logprobs": {"content": [token_logprob(i, t, body)
                                                         for i, t in enumerate(tokens)],
                                             "refusal": None} if body.get("logprobs") else None,
                                "finish_reason": finish}]}
        if reply.usage is not False:
            pin, pout = reply.usage if isinstance(reply.usage, tuple) else (
                prompt_tokens(body), out)
            payload["usage"] = {"prompt_tokens": pin, "completion_tokens": pout,
                                "total_tokens": pin + pout}
        payload.pop("system_fingerprint")
        await ex.json(200, payload)

    async def frames(self, ex: Exchange, action: Any, body: dict[str, Any]
                     ) -> AsyncIterator[bytes]:
        ids = self._ids(body)
        include_usage = bool((body.get("stream_options") or {}).get("include_usage"))
        extra = {"usage": None} if include_usage else {}

        def chunk(delta: dict[str, Any], finish: str | None = None,
                  logprobs: dict[str, Any] | None = None) -> bytes:
            return sse({**ids, "choices": [{"index": 0, "delta": delta, "logprobs": logprobs,
                                            "finish_reason": finish}], **extra})

        reply = action if isinstance(action, Reply) else Reply()
        limit = None if isinstance(action, Reply) else getattr(action, "after_tokens", None)
        tokens, cut = self.plan_text(reply, body)
        if limit is not None:
            tokens = self.plan_text(Reply(tokens=max(limit, 1) + 4), body)[0]
        yield chunk({"role": "assistant", "content": "", "refusal": None})
        if reply.reasoning:
            yield chunk({"reasoning_content": reply.reasoning})
        sent = 0
        for i, token in enumerate(tokens):
            if limit is not None and i == limit:
                break
            await self.pace(i, reply)
            yield chunk({"content": token}, logprobs={
                "content": [token_logprob(i, token, body)], "refusal": None,
            } if body.get("logprobs") else None)
            sent += 1
        if isinstance(action, Fail):
            yield sse(self.error_body(action))
            return
        if isinstance(action, Hang):
            await asyncio.sleep(action.seconds)
            return
        if isinstance(action, Drop):
            drop_connection()
        for n, call in enumerate(reply.tool_calls):
            await self.pace(0 if n == 0 and not tokens else 1, reply)
            args = call.arguments
            parts = max(1, call.chunks)
            size = -(-len(args) // parts) if args else 0
            yield chunk({"tool_calls": [{"index": n, "id": call.id or f"call_{n}",
                                         "type": "function",
                                         "function": {"name": call.name, "arguments": ""}}]})
            for k in range(parts):
                piece = args[k * size:(k + 1) * size]
                if piece:
                    yield chunk({"tool_calls": [{"index": n, "function": {"arguments": piece}}]})
                    sent += 1
        finish = reply.finish_reason or (
            "tool_calls" if reply.tool_calls else "length" if cut else "stop")
        yield chunk({}, finish)
        if include_usage and reply.usage is not False:
            pin, pout = reply.usage if isinstance(reply.usage, tuple) else (
                prompt_tokens(body), sent)
            yield sse({**ids, "choices": [], "usage": {
                "prompt_tokens": pin, "completion_tokens": pout, "total_tokens": pin + pout}})
        yield sse(b"[DONE]")


def token_logprob(index: int, token: str, body: dict[str, Any]) -> dict[str, Any]:
    """The fake's log probability of its ``index``-th token (asked for with ``logprobs``):
    ``-0.25 * (index % 4) - 0.01``, with ``top_logprobs`` alternatives ``alt0``, ``alt1``...
    below it."""
    logprob = -0.25 * (index % 4) - 0.01
    top = [{"token": f"alt{k}", "logprob": logprob - 1 - k, "bytes": list(f"alt{k}".encode())}
           for k in range(int(body.get("top_logprobs") or 0))]
    return {"token": token, "logprob": logprob, "bytes": list(token.encode()),
            "top_logprobs": top}


async def _once(body: bytes) -> AsyncIterator[bytes]:
    yield body


def main() -> None:
    args = script_arguments(__doc__.splitlines()[0]).parse_args()
    up = FakeOpenAIUpstream(tokens=args.tokens, token_delay_ms=args.token_delay_ms,
                            ttft_ms=args.ttft_ms, api_key=args.api_key, model=args.model,
                            host=args.host, port=args.port, log_level=args.log_level)
    print(f"fake OpenAI upstream on {up.base_url}", flush=True)
    up.serve_forever()


if __name__ == "__main__":
    main()
