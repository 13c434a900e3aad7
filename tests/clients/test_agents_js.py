"""The OpenAI Agents SDK for JavaScript (``@openai/agents`` from npm, run by node) against a
live Gaia, configured by the README's agents-js variables (base URL, key) and the model name:
a plain turn, a stream and a tool round trip (the SDK runs its own function tool and sends the
result back) over the Responses API, its default, and Chat Completions.

On a fake agent and on ``gaia``, the default agent on the embedded model: there the tool round
trip sets the SDK's ``toolChoice: "required"`` for the first request (the SDK resets it once
the tool has run), since a 135M model asked in prose mostly answers in prose.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from agents.models import Message
from tests.clients.conftest import ClientEnv, readme_env
from tests.clients.test_default_agent import QUESTION, assert_answered, replies
from tests.clients.test_default_agent import default_agents as default_agents  # fixture

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]

SCRIPT = Path(__file__).resolve().parent / "scripts" / "agents_sdk.cjs"
WEATHER = {"city": "Paris"}


def run_node(env: ClientEnv, sdk: Path, model: str, *args: str, timeout: float = 120,
             **extra: str) -> dict[str, Any]:
    variables = {**readme_env("agents-js", url=env.url, key=env.key), "GAIA_MODEL": model,
                 "NODE_PATH": str(sdk.parents[1]), **extra}  # sdk: node_modules/@openai/agents
    run = env.run(["node", SCRIPT, *args], env=variables, timeout=timeout)
    assert run.returncode == 0, run.output[-3000:]
    return json.loads(run.stdout.strip().splitlines()[-1])


def test_the_readme_variables_are_the_base_url_and_the_key(client_env):
    variables = readme_env("agents-js", url=client_env.url, key=client_env.key)
    assert variables == {"OPENAI_BASE_URL": f"{client_env.url}/v1",
                         "OPENAI_API_KEY": client_env.key, "OPENAI_AGENTS_DISABLE_TRACING": "1"}


@pytest.mark.parametrize("api", ["responses", "chat"])
def test_agents_js_plain(client_env, npm_clients, fake_agents, api):
    fake_agents(f"aj-plain-{api}")
    out = run_node(client_env, npm_clients("@openai/agents"), f"aj-plain-{api}", "plain", api)
    assert out["final"] == "Hello from Gaia."
    assert out["deltas"] == []
    reply = Message.objects.get(thread__agent__slug=f"aj-plain-{api}", role="assistant",
                                internal=False)
    assert reply.dialect == api


@pytest.mark.parametrize("api", ["responses", "chat"])
def test_agents_js_stream(client_env, npm_clients, fake_agents, api):
    fake_agents(f"aj-stream-{api}", reply="Streamed from Gaia in words.")
    out = run_node(client_env, npm_clients("@openai/agents"), f"aj-stream-{api}", "stream",
                   api)
    assert out["final"] == "Streamed from Gaia in words."
    assert out["deltas"] == ["Streamed", " from", " Gaia", " in", " words."]


@pytest.mark.parametrize("api", ["responses", "chat"])
def test_agents_js_tool_round_trip(client_env, npm_clients, fake_agents, api):
    fake_agents(f"aj-tool-{api}", tool="get_weather", arguments=WEATHER)
    out = run_node(client_env, npm_clients("@openai/agents"), f"aj-tool-{api}", "tool", api)
    assert out["calls"] == ["Paris"]  # the SDK ran its tool on Gaia's call
    assert out["final"] == "Tool said: sunny in Paris"  # and sent the result back
    assert out["items"][-3:] == ["tool_call_item", "tool_call_output_item",
                                 "message_output_item"]


# -- on the default agent, the embedded model ------------------------------------------------

@pytest.mark.timeout(620)
def test_agents_js_plain_on_the_default_agent(client_env, npm_clients, default_agents):
    out = run_node(client_env, npm_clients("@openai/agents"), "gaia", "plain", "responses",
                   QUESTION, timeout=560)
    [reply] = replies()
    assert_answered(reply)
    assert out["final"].strip() == reply.content.strip() != ""


@pytest.mark.timeout(620)
def test_agents_js_stream_on_the_default_agent(client_env, npm_clients, default_agents):
    out = run_node(client_env, npm_clients("@openai/agents"), "gaia", "stream", "chat",
                   QUESTION, timeout=560)
    [reply] = replies()
    assert_answered(reply)
    assert len(out["deltas"]) > 1
    assert "".join(out["deltas"]) == out["final"] == reply.content


@pytest.mark.timeout(620)
@pytest.mark.parametrize("api", ["responses", "chat"])
def test_agents_js_tool_round_trip_on_the_default_agent(client_env, npm_clients,
                                                        default_agents, api):
    out = run_node(client_env, npm_clients("@openai/agents"), "gaia", "tool", api,
                   "What is the weather in Paris?", timeout=560, GAIA_TOOL_CHOICE="required")
    assert len(out["calls"]) == 1  # the model called the SDK's tool; the SDK ran it
    made, *after = replies()
    assert made.finish_reason == "tool_calls"
    assert made.tool_calls[0]["name"] == "get_weather"
    tool = Message.objects.get(thread=made.thread, role="tool", internal=False)
    assert tool.content == f"sunny in {out['calls'][0]}"  # its result reached Gaia
    assert after, "Gaia never answered the tool's result"
    for reply in after:
        assert_answered(reply)
    assert out["final"].strip() == after[-1].content.strip()
