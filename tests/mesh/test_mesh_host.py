"""The ``host`` LLM: an agent process asks the pool that started it over its own stdio, and the
pool's ``llm_host`` answers (how Gaia's benchmark runs reach Gaia agents). Real agent processes,
no Django."""

from __future__ import annotations

import asyncio
import io
import json
from pathlib import Path

import pytest

from mesh.llm import HostLLM, LLMCall, LLMError, LLMReply, llm_from_spec
from mesh.run import AgentPool, QuestionFailed, RunConfig, run_question
from mesh.suite import load_suite

HOST = {"reason": {"kind": "host", "model": "anything", "timeout": 20}}


async def test_the_pool_answers_its_agents_calls(tmp_path: Path) -> None:
    calls: list[tuple[str, LLMCall]] = []

    async def host(tool: str, call: LLMCall) -> LLMReply:
        calls.append((tool, call))
        return LLMReply("Terry Richardson", 7)

    question = load_suite()[8]
    async with AgentPool(RunConfig(llm=HOST, timeout_s=30), llm_host=host) as pool:
        first = await run_question(question, out_dir=tmp_path / "a", pool=pool)
        second = await run_question(question, out_dir=tmp_path / "b", pool=pool)
    for result in (first, second):
        assert (result.status, result.answer) == ("completed", "Terry Richardson")
        assert result.metrics["token_sum"] >= 7
    assert [tool for tool, _ in calls] == ["reason", "reason"]  # one call a question
    assert question.question in calls[0][1].prompt
    assert calls[0][1].system


async def test_a_failed_call_falls_back_and_question_failed_fails_the_question(
        tmp_path: Path) -> None:
    async def refuse(tool: str, call: LLMCall) -> LLMReply:
        raise LLMError("the model is down")

    async def stop(tool: str, call: LLMCall) -> LLMReply:
        raise QuestionFailed("an operator stopped it")

    question = load_suite()[8]
    async with AgentPool(RunConfig(llm=HOST, timeout_s=30), llm_host=refuse) as pool:
        fallback = await run_question(question, out_dir=tmp_path / "a", pool=pool)
        pool.llm_host = stop
        failed = await run_question(question, out_dir=tmp_path / "b", pool=pool)
    assert fallback.status == "completed"  # the deterministic tool answered
    memory = json.loads((tmp_path / "a" / "workspaces" / "3" / "memory.json").read_text())
    assert any("the model is down" in e for e in memory["errors"])
    assert (failed.status, failed.reason) == ("failed", "an operator stopped it")


async def test_host_llm_lines_and_timeout() -> None:
    out = io.StringIO()
    llm = HostLLM(out, timeout=0.2)
    task = asyncio.create_task(llm("sys", "prompt"))
    await asyncio.sleep(0.01)
    call = json.loads(out.getvalue())["llm"]
    assert (call["system"], call["prompt"]) == ("sys", "prompt")
    assert llm.deliver({"llm_reply": {"id": call["id"], "text": "hi", "tokens": 3}})
    assert await task == LLMReply("hi", 3)
    assert not llm.deliver({"port": 1})  # not an answer: a command
    with pytest.raises(LLMError, match="did not answer"):
        await llm("sys", "nobody answers")
    task = asyncio.create_task(llm("sys", "refused"))
    await asyncio.sleep(0.01)
    last = json.loads(out.getvalue().splitlines()[-1])["llm"]
    llm.deliver({"llm_error": {"id": last["id"], "error": "no"}})
    with pytest.raises(LLMError, match="no"):
        await task


def test_a_host_spec_needs_a_pool() -> None:
    with pytest.raises(ValueError, match="pool"):
        llm_from_spec({"kind": "host"})
