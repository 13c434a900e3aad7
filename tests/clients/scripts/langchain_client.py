"""Run by tests/clients/test_sdks.py in the client venv: LangChain's ChatOpenAI and
ChatAnthropic against Gaia, configured only by the environment (the README's SDK variables)
plus ``GAIA_MODEL``. ``python langchain_client.py openai|anthropic plain|stream|tool`` prints
one JSON line."""

import json
import os
import sys

from langchain_core.messages import HumanMessage, ToolMessage
from langchain_core.tools import tool


@tool
def get_weather(city: str) -> str:
    """The weather in a city."""
    return f"sunny in {city}"


def chat(kind):
    model = os.environ["GAIA_MODEL"]
    if kind == "openai":
        from langchain_openai import ChatOpenAI

        return ChatOpenAI(model=model, max_retries=0, stream_usage=True)
    from langchain_anthropic import ChatAnthropic

    return ChatAnthropic(model=model, max_retries=0, max_tokens=256)


def main(kind, mode):
    llm = chat(kind)
    if mode == "plain":
        reply = llm.invoke("Say hello")
        print(json.dumps({"text": reply.text, "usage": reply.usage_metadata}))
    elif mode == "stream":
        chunks = list(llm.stream("Say hello"))
        total = chunks[0]
        for c in chunks[1:]:
            total = total + c
        print(json.dumps({"pieces": sum(1 for c in chunks if c.text), "text": total.text,
                          "usage": total.usage_metadata}))
    else:
        bound = llm.bind_tools([get_weather])
        history = [HumanMessage("What is the weather in Paris?")]
        first = bound.invoke(history)
        history.append(first)
        for call in first.tool_calls:
            history.append(ToolMessage(get_weather.invoke(call["args"]),
                                       tool_call_id=call["id"]))
        final = bound.invoke(history)
        print(json.dumps({"calls": first.tool_calls, "text": final.text}))


main(sys.argv[1], sys.argv[2])
