"""Run by tests/clients/test_sdks.py in the client venv: the OpenAI Agents SDK against Gaia.

Configured only by the environment (the README's SDK variables) plus ``GAIA_MODEL``.
``python agents_sdk.py plain|stream|tool [responses|chat]`` prints one JSON line.
"""

import asyncio
import json
import os
import sys

from openai import AsyncOpenAI

from agents import Agent, OpenAIChatCompletionsModel, Runner, function_tool

CALLS = []


@function_tool
def get_weather(city: str) -> str:
    """The weather in a city."""
    CALLS.append(city)
    return f"sunny in {city}"


async def main(mode, api):
    model = os.environ["GAIA_MODEL"]
    if api == "chat":
        model = OpenAIChatCompletionsModel(model=model, openai_client=AsyncOpenAI())
    agent = Agent(name="probe", instructions="Be brief.", model=model,
                  tools=[get_weather] if mode == "tool" else [])
    if mode == "stream":
        result = Runner.run_streamed(agent, "Say hello")
        deltas = []
        async for event in result.stream_events():
            if event.type == "raw_response_event":
                data = event.data
                if getattr(data, "type", "") in ("response.output_text.delta",):
                    deltas.append(data.delta)
        print(json.dumps({"final": result.final_output, "deltas": deltas}))
        return
    result = await Runner.run(agent, "What is the weather in Paris?" if mode == "tool"
                              else "Say hello")
    print(json.dumps({"final": result.final_output, "calls": CALLS}))


asyncio.run(main(sys.argv[1], sys.argv[2] if len(sys.argv) > 2 else "responses"))
