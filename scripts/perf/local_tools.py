#!/usr/bin/env python3
"""What coding clients cost the embedded model: prompt reading speed, and generation speed with
and without a tool grammar (issue 15, item 2).

Runs the ``local`` backend in process on the embedded SmolLM2-135M GGUF (nothing else is
started) and prints one table:

* ``prompt``: tokens of a coding-client-sized request read per second (the first request of
  a Codex CLI or Claude Code session is 4-8k tokens: divide to get its time to first token);
* ``free text`` / ``tool grammar``: output tokens per second (prompt already cached) when the
  reply is unconstrained, and when it must be a call of one of ``--tools`` offered tools
  (Claude Code offers 24), so the grammar's cost per token shows.

  .venv/bin/python -m scripts.perf.local_tools [--prompt-tokens 1500] [--tools 24]
      [--output-tokens 48] [--repeat 2]

The defaults take one to two minutes on a busy 2-core machine.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import time

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "gaia_site.settings")

import django  # noqa: E402

django.setup()

from agents.backends.local import LocalBackend  # noqa: E402
from agents.kernel.llm import (  # noqa: E402
    Finish,
    LLMRequest,
    Message,
    TextDelta,
    TextPart,
    Tool,
    ToolCallDelta,
    ToolChoice,
    Usage,
)

FILLER = ("You are a coding agent. Follow the repository's conventions, keep changes small, run "
          "the tests before you finish, and explain what you changed and why. ")


def tools(n: int) -> list[Tool]:
    """``n`` tools shaped like a coding client's: a few typed parameters each."""
    return [Tool(f"tool_{i}", f"Tool number {i}: does one thing to the workspace.", {
        "type": "object", "properties": {
            "path": {"type": "string", "description": "A file path."},
            "content": {"type": "string"}, "limit": {"type": "integer"},
            "mode": {"enum": ["read", "write", "append"]}},
        "required": ["path"], "additionalProperties": False}) for i in range(n)]


def request(system: str, *, offered: list[Tool], choice: str, max_tokens: int) -> LLMRequest:
    return LLMRequest(model="", system=system, temperature=0.0, max_output_tokens=max_tokens,
                      messages=[Message("user", (TextPart("Describe the tools you have."),))],
                      tools=offered, tool_choice=ToolChoice(choice))  # type: ignore[arg-type]


async def run(backend: LocalBackend, req: LLMRequest) -> tuple[float, float, int, int, str]:
    """``(seconds to first output, seconds after it, input tokens, output tokens, kind)``."""
    t0 = time.perf_counter()
    first = None
    usage = Usage(0, 0)
    kind = "text"
    async for event in backend.stream(req):
        if isinstance(event, TextDelta | ToolCallDelta) and first is None:
            first = time.perf_counter()
        if isinstance(event, ToolCallDelta):
            kind = "call"
        if isinstance(event, Usage):
            usage = event
        if isinstance(event, Finish) and first is None:
            first = time.perf_counter()
    end = time.perf_counter()
    assert first is not None
    return first - t0, end - first, usage.input_tokens, usage.output_tokens, kind


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--prompt-tokens", type=int, default=1500)
    parser.add_argument("--tools", type=int, default=24)
    parser.add_argument("--output-tokens", type=int, default=48)
    parser.add_argument("--repeat", type=int, default=2)
    args = parser.parse_args()
    backend = LocalBackend(name="perf", options={"max_string_length": 200})
    model = await asyncio.to_thread(backend.model)
    system = FILLER * max(1, args.prompt_tokens // len(model.tokenize(FILLER)))
    offered = tools(args.tools)
    rows = []
    # Prompt reading: a different first word each time, so the KV cache cannot help.
    speeds = []
    for i in range(args.repeat):
        ttft, _, prompt, _, _ = await run(backend, request(
            f"Session {i}. " + system, offered=[], choice="auto", max_tokens=1))
        speeds.append(prompt / ttft)
    rows.append(("prompt", f"{statistics.median(speeds):.0f} tok/s read",
                 f"{prompt} tokens in {prompt / statistics.median(speeds):.1f} s"))
    short = "Be brief."
    for label, offer, choice in (("free text", [], "auto"),
                                 ("tool grammar", offered, "required")):
        rates, kinds = [], []
        req = request(short, offered=offer, choice=choice, max_tokens=args.output_tokens)
        await run(backend, req)  # the prompt is in the KV cache after this: later runs time
        for _ in range(args.repeat):  # the generation (a call is only seen once complete)
            ttft, gen, _, out, kind = await run(backend, req)
            rates.append(out / (ttft + gen))
            kinds.append(f"{kind} ({out} tokens)")
        rows.append((label, f"{statistics.median(rates):.0f} tok/s out",
                     f"{len(offer)} tools, replies: {', '.join(kinds)}"))
    print(f"embedded model, {model.llama.n_ctx()} ctx, {os.cpu_count()} cores")
    for row in rows:
        print(f"{row[0]:<14} {row[1]:<18} {row[2]}")


if __name__ == "__main__":
    asyncio.run(main())
