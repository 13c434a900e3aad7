"""Kilo Code CLI (``@kilocode/cli`` from npm, ``kilo run``) against a live Gaia over Chat
Completions, configured with the README's ``kilo.json``: the base URL, the key and the model,
nothing else; its own tools (bash, read, edit...) stay on and run without asking, as they do
by default. Kilo always streams and prints whole parts (``--format json`` too), so a
:mod:`recorder <tests.clients.recorder>` between it and Gaia shows each request asked for a
stream and got one.

On a fake agent and on ``gaia``, the default agent on the embedded model (asked for the exact
call, as tests/clients/test_default_agent.py does: the protocol is the point, not the model).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from agents.models import Message
from tests.clients.conftest import README_URL, TOOL_WORD, ClientEnv, Run, readme_block
from tests.clients.recorder import Recorder
from tests.clients.recorder import recorder as recorder  # fixture
from tests.clients.stored import assert_stored_tool_turn, only_thread
from tests.clients.test_default_agent import QUESTION, assert_answered, replies
from tests.clients.test_default_agent import default_agents as default_agents  # fixture

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]

# Nothing leaves the machine: Kilo's telemetry is on unless this says otherwise, and it
# fetches model lists and updates at start.
KILO_QUIET = {"KILO_TELEMETRY_LEVEL": "off", "KILO_DISABLE_MODELS_FETCH": "1",
              "KILO_DISABLE_AUTOUPDATE": "1"}
CALL = {"name": "bash", "arguments": {"command": f"echo {TOOL_WORD}"}}
TOOLS = {"bash", "read", "edit", "write", "glob", "grep"}  # some of what Kilo offers


def kilo(env: ClientEnv, bin_: Path, url: str, model: str, prompt: str, *flags: str,
         timeout: float = 180, stdin: bool = False) -> Run:
    """``kilo run``; with ``stdin`` the prompt is piped in (on the command line, Kilo sends a
    prompt holding quotes as a JSON string: escaped quotes the small model copies badly)."""
    config = json.loads(readme_block("kilo").replace(README_URL, url))
    config["model"] = f"gaia/{model}"
    config["provider"]["gaia"]["models"] = {model: {}}
    path = env.home / ".config" / "kilo" / "kilo.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(config))
    return env.run([bin_, "run", *flags, *([] if stdin else [prompt])],
                   env={"GAIA_API_KEY": env.key, **KILO_QUIET}, timeout=timeout,
                   stdin=prompt if stdin else None)


def events(run: Run) -> list[dict[str, Any]]:
    assert run.returncode == 0, run.output[-3000:]
    lines = [json.loads(x) for x in run.stdout.splitlines() if x.startswith("{")]
    assert not [e for e in lines if e["type"] == "error"], lines
    return lines


def texts(lines: list[dict[str, Any]]) -> list[str]:
    return [e["part"]["text"] for e in lines if e["type"] == "text"]


def tool_uses(lines: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [e["part"] for e in lines if e["type"] == "tool_use"]


def assert_streamed(record: Recorder, requests: int) -> None:
    asked = record.posts("/v1/chat/completions")
    assert len(asked) == requests, [(e.path, e.status) for e in asked]
    for exchange in asked:
        assert exchange.status == 200
        assert exchange.streamed  # "stream": true, answered as text/event-stream
        assert set(exchange.tools) >= TOOLS  # Kilo's own tools, as it offers them by default


def test_the_readme_config_is_the_base_url_the_key_and_the_model():
    config = json.loads(readme_block("kilo"))
    assert set(config) == {"model", "provider"}
    assert config["model"] == "gaia/gaia"
    assert config["provider"] == {"gaia": {
        "npm": "@ai-sdk/openai-compatible",
        "options": {"baseURL": f"{README_URL}/v1", "apiKey": "{env:GAIA_API_KEY}"},
        "models": {"gaia": {}}}}


def test_kilo_plain_turn(client_env, npm_clients, fake_agents, recorder):
    fake_agents("kl-plain")
    run = kilo(client_env, npm_clients("kilo"), recorder.url, "kl-plain", "Say hello")
    assert run.returncode == 0, run.output
    assert "Hello from Gaia." in run.stdout
    assert_streamed(recorder, 1)
    reply = only_thread("kl-plain").messages.get(role="assistant", internal=False)
    assert (reply.content, reply.dialect) == ("Hello from Gaia.", "chat")


def test_kilo_stream(client_env, npm_clients, fake_agents, recorder):
    fake_agents("kl-stream", reply="Streamed from Gaia in words.", delay_ms=5)
    lines = events(kilo(client_env, npm_clients("kilo"), recorder.url, "kl-stream",
                        "Stream please", "--format", "json"))
    assert texts(lines) == ["Streamed from Gaia in words."]
    finished = [e["part"]["reason"] for e in lines if e["type"] == "step_finish"]
    assert finished == ["stop"]
    assert_streamed(recorder, 1)


def test_kilo_tool_round_trip(client_env, npm_clients, fake_agents, recorder):
    fake_agents("kl-tool", tool="bash", arguments=CALL["arguments"])
    lines = events(kilo(client_env, npm_clients("kilo"), recorder.url, "kl-tool",
                        "Run the echo command", "--format", "json"))
    [used] = tool_uses(lines)
    assert used["tool"] == "bash"
    assert used["state"]["status"] == "completed"
    assert used["state"]["output"].strip() == TOOL_WORD
    assert texts(lines) == [f"Tool said: {TOOL_WORD}"]
    assert_streamed(recorder, 2)
    assert_stored_tool_turn("kl-tool")


# -- on the default agent, the embedded model ------------------------------------------------

@pytest.mark.timeout(620)
def test_kilo_plain_turn_on_the_default_agent(client_env, npm_clients, default_agents,
                                              recorder):
    run = kilo(client_env, npm_clients("kilo"), recorder.url, "gaia", QUESTION, timeout=560)
    assert run.returncode == 0, run.output[-3000:]
    [reply] = replies()
    assert_answered(reply)
    assert reply.content.strip()[:40] in run.stdout
    assert_streamed(recorder, 1)


@pytest.mark.timeout(620)
def test_kilo_stream_on_the_default_agent(client_env, npm_clients, default_agents, recorder):
    lines = events(kilo(client_env, npm_clients("kilo"), recorder.url, "gaia", QUESTION,
                        "--format", "json", timeout=560))
    [reply] = replies()
    assert_answered(reply)
    assert [t.strip() for t in texts(lines)] == [reply.content.strip()]
    # the agent's own output limit ends the turn, never as the client's
    assert [e["part"]["reason"] for e in lines if e["type"] == "step_finish"] == ["stop"]
    assert_streamed(recorder, 1)


@pytest.mark.timeout(620)
def test_kilo_tool_round_trip_on_the_default_agent(client_env, npm_clients, default_agents,
                                                   recorder):
    lines = events(kilo(client_env, npm_clients("kilo"), recorder.url, "gaia",
                        f"Reply with only this JSON object: {json.dumps(CALL)}\n", "--format",
                        "json", timeout=560, stdin=True))
    used = tool_uses(lines)
    assert used, lines
    assert used[0]["tool"] == "bash"
    assert TOOL_WORD in used[0]["state"]["output"]
    thread = only_thread("gaia")
    tool = thread.messages.get(role="tool", internal=False)
    assert tool.content.strip() == TOOL_WORD  # Kilo ran it and sent the output back
    made = Message.objects.get(thread=thread, role="assistant", seq__lt=tool.seq)
    assert made.tool_calls[0]["name"] == "bash"
    after = list(thread.messages.filter(role="assistant", seq__gt=tool.seq))
    assert after, "Gaia never answered the tool's result"
    for reply in after:
        assert_answered(reply)
    assert_streamed(recorder, 2)
