"""The OpenAI Agents SDK and LangChain (OpenAI and Anthropic chat models), each in its own
virtualenv with its own pins, against a live Gaia, configured by the README's SDK
variables: a plain reply, a stream, and a tool round trip on a fake agent."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from agents.models import Message
from tests.clients.conftest import SERVER_TOOL_TOKENS, ClientEnv, readme_env

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]

SCRIPTS = Path(__file__).resolve().parent / "scripts"
WEATHER = {"city": "Paris"}


def run_script(env: ClientEnv, python: Path, script: str, model: str, *args: str
               ) -> dict[str, Any]:
    variables = {**readme_env("sdk", url=env.url, key=env.key), "GAIA_MODEL": model}
    run = env.run([python, SCRIPTS / script, *args], env=variables, timeout=120)
    assert run.returncode == 0, run.output
    return json.loads(run.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("api", ["responses", "chat"])
def test_agents_sdk_plain(client_env, client_python, fake_agents, api):
    fake_agents(f"ag-plain-{api}")
    out = run_script(client_env, client_python("sdk"), "agents_sdk.py", f"ag-plain-{api}",
                     "plain", api)
    assert out["final"] == "Hello from Gaia."
    dialect = "responses" if api == "responses" else "chat"
    assert Message.objects.filter(thread__agent__slug=f"ag-plain-{api}", role="assistant",
                                  dialect=dialect).exists()


def test_agents_sdk_stream(client_env, client_python, fake_agents):
    fake_agents("ag-stream", reply="Streamed from Gaia in words.")
    out = run_script(client_env, client_python("sdk"), "agents_sdk.py", "ag-stream", "stream")
    assert out["final"] == "Streamed from Gaia in words."
    assert len(out["deltas"]) > 1
    assert "".join(out["deltas"]) == out["final"]


@pytest.mark.parametrize("api", ["responses", "chat"])
def test_agents_sdk_tool_round_trip(client_env, client_python, fake_agents, api):
    fake_agents(f"ag-tool-{api}", tool="get_weather", arguments=WEATHER)
    out = run_script(client_env, client_python("sdk"), "agents_sdk.py", f"ag-tool-{api}",
                     "tool", api)
    assert out["calls"] == ["Paris"]  # the SDK ran our tool call
    assert out["final"] == "Tool said: sunny in Paris"


@pytest.mark.parametrize("kind", ["openai", "anthropic"])
def test_langchain_plain(client_env, client_python, fake_agents, kind):
    fake_agents(f"lc-plain-{kind}")
    out = run_script(client_env, client_python("sdk"), "langchain_client.py",
                     f"lc-plain-{kind}", kind, "plain")
    assert out["text"] == "Hello from Gaia."
    assert out["usage"]["input_tokens"] > 0
    assert out["usage"]["output_tokens"] == 3 + SERVER_TOOL_TOKENS  # its own tool call too


@pytest.mark.parametrize("kind", ["openai", "anthropic"])
def test_langchain_stream(client_env, client_python, fake_agents, kind):
    fake_agents(f"lc-stream-{kind}", reply="Streamed from Gaia in words.")
    out = run_script(client_env, client_python("sdk"), "langchain_client.py",
                     f"lc-stream-{kind}", kind, "stream")
    assert out["text"] == "Streamed from Gaia in words."
    assert out["pieces"] > 1
    # Item 4: the streamed usage carries the input tokens too (ChatAnthropic reads them
    # from message_start and the final message_delta).
    assert out["usage"]["input_tokens"] > 0
    assert out["usage"]["output_tokens"] == 5 + SERVER_TOOL_TOKENS


@pytest.mark.parametrize("kind", ["openai", "anthropic"])
def test_langchain_tool_round_trip(client_env, client_python, fake_agents, kind):
    fake_agents(f"lc-tool-{kind}", tool="get_weather", arguments=WEATHER)
    out = run_script(client_env, client_python("sdk"), "langchain_client.py",
                     f"lc-tool-{kind}", kind, "tool")
    assert [(c["name"], c["args"]) for c in out["calls"]] == [("get_weather", WEATHER)]
    assert out["text"] == "Tool said: sunny in Paris"
