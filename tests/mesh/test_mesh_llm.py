"""The LLM path against a tiny fake OpenAI-compatible server on port 0 (aiohttp)."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web

from mesh.llm import LLMError, OpenAIChatLLM, llm_from_spec
from mesh.run import RunConfig, run_question
from mesh.suite import load_suite
from mesh.tools import ToolInput, run_tool


@dataclass
class FakeOpenAI:
    """Answers chat completions by a rule, and records every request."""

    base_url: str = ""
    requests: list[dict[str, Any]] = field(default_factory=list)
    status: int = 200

    async def handle(self, request: web.Request) -> web.Response:
        body = await request.json()
        body["_auth"] = request.headers.get("Authorization")
        self.requests.append(body)
        if self.status != 200:
            return web.json_response({"error": {"message": "boom"}}, status=self.status)
        system = body["messages"][0]["content"]
        text = "Answer: Chief of Protocol" if "short span" in system else "0 1 2"
        return web.json_response({
            "id": "cmpl-1", "object": "chat.completion", "model": body["model"],
            "choices": [{"index": 0, "finish_reason": "stop",
                         "message": {"role": "assistant", "content": text}}],
            "usage": {"prompt_tokens": 40, "completion_tokens": 2, "total_tokens": 42},
        })


@pytest.fixture
async def fake_openai() -> AsyncIterator[FakeOpenAI]:
    fake = FakeOpenAI()
    app = web.Application()
    app.router.add_post("/v1/chat/completions", fake.handle)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    fake.base_url = f"http://127.0.0.1:{port}/v1"
    yield fake
    await runner.cleanup()


async def test_openai_llm_reports_usage_tokens(fake_openai: FakeOpenAI) -> None:
    llm = llm_from_spec({"kind": "openai", "base_url": fake_openai.base_url,
                         "api_key": "sk-test", "model": "gaia-reasoner"})
    assert isinstance(llm, OpenAIChatLLM)
    try:
        reply = await llm("Answer with a short span.", "Who?")
    finally:
        await llm.aclose()
    assert reply.text == "Answer: Chief of Protocol"
    assert reply.tokens == 42
    [request] = fake_openai.requests
    assert request["model"] == "gaia-reasoner"
    assert request["_auth"] == "Bearer sk-test"
    assert [m["role"] for m in request["messages"]] == ["system", "user"]


async def test_openai_llm_http_error_raises_llm_error(fake_openai: FakeOpenAI) -> None:
    fake_openai.status = 500
    llm = OpenAIChatLLM(base_url=fake_openai.base_url, model="m")
    try:
        with pytest.raises(LLMError):
            await llm("s", "p")
    finally:
        await llm.aclose()


def test_llm_spec_validation() -> None:
    assert llm_from_spec(None) is None
    with pytest.raises(ValueError, match="unknown LLM kind"):
        llm_from_spec({"kind": "magic"})
    with pytest.raises(ValueError, match="base_url and model"):
        llm_from_spec({"kind": "openai", "model": "m"})


async def test_tool_uses_llm_answer_and_tokens(fake_openai: FakeOpenAI) -> None:
    q = load_suite()[1]
    llm = OpenAIChatLLM(base_url=fake_openai.base_url, model="m")
    try:
        out = await run_tool("reason", ToolInput(q.question, list(q.paragraphs)), llm)
    finally:
        await llm.aclose()
    assert (out.tag, out.payload, out.tokens) == ("final_answer", "Chief of Protocol", 42)


async def test_mesh_run_with_llm_agents(tmp_path: Path, fake_openai: FakeOpenAI) -> None:
    spec = {"kind": "openai", "base_url": fake_openai.base_url, "api_key": "k", "model": "m"}
    config = RunConfig(protocol="a2a+signed", llm={"reason": spec, "extract": spec},
                       timeout_s=30.0)
    result = await run_question(load_suite()[1], out_dir=tmp_path, config=config)
    assert result.status == "completed"
    assert result.answer == "Chief of Protocol"
    assert result.metrics["exact_match"] == 1
    assert result.metrics["token_sum"] == 2 * 42  # extract and reason each made one call
    assert len(fake_openai.requests) == 2
    memory = json.loads((tmp_path / "workspaces" / "1" / "memory.json").read_text())
    assert memory["output"]["token_used"] == 42
    assert len(memory["output"]["payload"]["sentences"]) == 3  # the model picked 0, 1, 2
