"""The LLM bridge: mesh agent processes reach real Gaia agents without a round trip through /v1.

A run whose roles use Gaia agents starts one small HTTP server on ``127.0.0.1`` port 0 in the
worker, for the length of the run. It speaks the one route ``mesh.llm.OpenAIChatLLM`` calls,
``POST /v1/chat/completions``, and answers it by streaming the agent's provider directly
(``agents.backends.backend_stream``) with the agent's instructions, model and limits. A random
per-run token (handed to the agent processes in their environment, never argv) guards it.
Tokens are counted per agent slug, for the run's metrics.
"""

from __future__ import annotations

import secrets
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web

from agents import llm
from agents.backends import backend_stream
from agents.exceptions import GaiaError
from agents.models import Agent


@dataclass
class AgentBridge:
    agents: dict[str, Agent]
    token: str = field(default_factory=lambda: secrets.token_urlsafe(24))
    tokens: Counter[str] = field(default_factory=Counter)
    calls: Counter[str] = field(default_factory=Counter)
    port: int = 0
    _runner: web.AppRunner | None = None

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def spec(self, slug: str) -> dict[str, Any]:
        """The ``mesh.llm`` spec an agent process uses to reach ``slug`` through the bridge."""
        agent = self.agents[slug]
        return {"kind": "openai", "base_url": self.base_url, "api_key": self.token,
                "model": slug, "timeout": float(agent.provider.timeout_seconds) + 30.0}

    async def start(self) -> AgentBridge:
        app = web.Application(client_max_size=4 * 1024 * 1024)
        app.router.add_post("/v1/chat/completions", self._chat)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        server = site._server  # aiohttp keeps the bound socket here
        assert server is not None
        self.port = int(server.sockets[0].getsockname()[1])  # type: ignore[attr-defined]
        return self

    async def close(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    def take_tokens(self) -> dict[str, int]:
        """Tokens per agent since the last call (one question's worth)."""
        counts = dict(self.tokens)
        self.tokens.clear()
        return counts

    @staticmethod
    def _error(status: int, message: str, code: str) -> web.Response:
        return web.json_response({"error": {"message": message, "type": "invalid_request",
                                            "param": None, "code": code}}, status=status)

    async def _chat(self, request: web.Request) -> web.Response:
        if not secrets.compare_digest(request.headers.get("Authorization", ""),
                                      f"Bearer {self.token}"):
            return self._error(401, "bad bridge token", "invalid_api_key")
        try:
            body = await request.json()
            slug = str(body["model"])
            messages = list(body["messages"])
        except (ValueError, KeyError, TypeError):
            return self._error(400, "expected {model, messages}", "invalid_request")
        agent = self.agents.get(slug)
        if agent is None:
            return self._error(404, f"agent {slug!r} is not part of this run", "model_not_found")
        system = [agent.instructions.strip()] if agent.instructions.strip() else []
        history = []
        for m in messages:
            text = str(m.get("content") or "")
            if m.get("role") == "system":
                system.append(text)
            else:
                history.append(llm.Message(role="assistant" if m.get("role") == "assistant"
                                           else "user", parts=(llm.TextPart(text),)))
        wanted = body.get("max_tokens")
        limit = agent.max_output_tokens or None
        max_out = min(x for x in (limit, wanted) if x) if (limit or wanted) else None
        req = llm.LLMRequest(model=agent.model_name, system="\n\n".join(system),
                             messages=history, max_output_tokens=max_out,
                             temperature=agent.temperature, top_p=agent.top_p)
        text_parts: list[str] = []
        usage: llm.Usage | None = None
        try:
            async for event in backend_stream(agent.provider, req):
                if isinstance(event, llm.TextDelta):
                    text_parts.append(event.text)
                elif isinstance(event, llm.Usage):
                    usage = event
        except GaiaError as exc:
            return self._error(502, exc.message, exc.code or "backend_error")
        text = "".join(text_parts)
        if usage is None:
            prompt = llm.estimate_request_tokens(req)
            usage = llm.Usage(prompt, llm.estimate_tokens(text), estimated=True)
        total = usage.input_tokens + usage.output_tokens
        self.tokens[slug] += total
        self.calls[slug] += 1
        return web.json_response({
            "id": f"chatcmpl-bridge-{secrets.token_hex(6)}", "object": "chat.completion",
            "model": slug,
            "choices": [{"index": 0, "message": {"role": "assistant", "content": text},
                         "finish_reason": "stop"}],
            "usage": {"prompt_tokens": usage.input_tokens,
                      "completion_tokens": usage.output_tokens, "total_tokens": total},
        })
