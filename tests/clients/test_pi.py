"""pi (``@mariozechner/pi-coding-agent`` from npm, print mode) against a live Gaia over the
Anthropic Messages API, configured with the README's ``models.json``: the base URL, the key and
the model, nothing else; its own tools (read, bash, edit, write) stay on. pi always streams:
its plain turn prints the answer, its stream is ``--mode json`` (every delta as an event).

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
from tests.clients.stored import assert_stored_tool_turn, only_thread
from tests.clients.test_default_agent import QUESTION, assert_answered, replies
from tests.clients.test_default_agent import default_agents as default_agents  # fixture

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]

# Nothing leaves the machine: no version check, no install ping.
PI_QUIET = {"PI_OFFLINE": "1", "PI_TELEMETRY": "0", "PI_SKIP_VERSION_CHECK": "1"}
CALL = {"name": "bash", "arguments": {"command": f"echo {TOOL_WORD}"}}


def pi(env: ClientEnv, bin_: Path, model: str, prompt: str, *flags: str,
       timeout: float = 120) -> Run:
    config = json.loads(readme_block("pi").replace(README_URL, env.url))
    config["providers"]["gaia"]["models"] = [{"id": model}]
    path = env.home / ".pi" / "agent" / "models.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(config))
    return env.run([bin_, "--model", f"gaia/{model}", *flags, "-p", prompt],
                   env={"GAIA_API_KEY": env.key, **PI_QUIET}, timeout=timeout)


def events(run: Run) -> list[dict[str, Any]]:
    assert run.returncode == 0, run.output[-3000:]
    return [json.loads(x) for x in run.stdout.splitlines() if x.startswith("{")]


def deltas(lines: list[dict[str, Any]]) -> str:
    return "".join(e["assistantMessageEvent"]["delta"] for e in lines
                   if e["type"] == "message_update"
                   and e["assistantMessageEvent"]["type"] == "text_delta")


def answers(lines: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [e["message"] for e in lines if e["type"] == "message_end"
            and e["message"]["role"] == "assistant"]


def ran(lines: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [e for e in lines if e["type"] == "tool_execution_end"]


def test_the_readme_config_is_the_base_url_the_key_and_the_model():
    config = json.loads(readme_block("pi"))
    assert list(config) == ["providers"]
    provider = config["providers"]["gaia"]
    assert provider == {"baseUrl": README_URL, "api": "anthropic-messages",
                        "apiKey": "GAIA_API_KEY", "models": [{"id": "gaia"}]}


def test_pi_plain_turn(client_env, npm_clients, fake_agents):
    fake_agents("pi-plain")
    run = pi(client_env, npm_clients("pi"), "pi-plain", "Say hello")
    assert run.returncode == 0, run.output
    assert run.stdout.strip() == "Hello from Gaia."
    thread = only_thread("pi-plain")
    assert thread.title == "Say hello"
    assert thread.messages.get(role="assistant", internal=False).dialect == "messages"


def test_pi_stream(client_env, npm_clients, fake_agents):
    fake_agents("pi-stream", reply="Streamed from Gaia in words.", delay_ms=5)
    lines = events(pi(client_env, npm_clients("pi"), "pi-stream", "Stream please", "--mode",
                      "json"))
    pieces = [e for e in lines if e["type"] == "message_update"
              and e["assistantMessageEvent"]["type"] == "text_delta"]
    assert len(pieces) == 5
    assert deltas(lines) == "Streamed from Gaia in words."
    [answer] = answers(lines)
    assert answer["stopReason"] == "stop"
    # Gaia's own calculator step arrived as a signed thinking block
    assert answer["content"][0]["type"] == "thinking"
    assert answer["content"][0]["thinkingSignature"]


def test_pi_tool_round_trip(client_env, npm_clients, fake_agents):
    fake_agents("pi-tool", tool="bash", arguments=CALL["arguments"])
    lines = events(pi(client_env, npm_clients("pi"), "pi-tool", "Run the echo command",
                      "--mode", "json"))
    [done] = ran(lines)
    assert done["toolName"] == "bash"
    assert done["isError"] is False
    assert done["result"]["content"][0]["text"].strip() == TOOL_WORD
    assert answers(lines)[-1]["content"] == [{"type": "text", "text": f"Tool said: {TOOL_WORD}"}]
    # pi sent Gaia's signed thinking back as thinking: the stored turn matched
    assert_stored_tool_turn("pi-tool")


# -- on the default agent, the embedded model ------------------------------------------------

@pytest.mark.timeout(620)
def test_pi_plain_turn_on_the_default_agent(client_env, npm_clients, default_agents):
    run = pi(client_env, npm_clients("pi"), "gaia", QUESTION, timeout=560)
    assert run.returncode == 0, run.output[-3000:]
    [reply] = replies()
    assert_answered(reply)
    assert reply.content.strip() in run.stdout


@pytest.mark.timeout(620)
def test_pi_stream_on_the_default_agent(client_env, npm_clients, default_agents):
    lines = events(pi(client_env, npm_clients("pi"), "gaia", QUESTION, "--mode", "json",
                      timeout=560))
    [reply] = replies()
    assert_answered(reply)
    [answer] = answers(lines)
    assert answer["stopReason"] == "stop"  # the agent's own limit is not the client's
    assert deltas(lines).strip() == reply.content.strip() != ""


@pytest.mark.timeout(620)
def test_pi_tool_round_trip_on_the_default_agent(client_env, npm_clients, default_agents):
    lines = events(pi(client_env, npm_clients("pi"), "gaia",
                      f"Reply with only this JSON object: {json.dumps(CALL)}", "--mode", "json",
                      timeout=560))
    done = ran(lines)
    assert done, lines
    assert done[0]["toolName"] == "bash"
    assert TOOL_WORD in done[0]["result"]["content"][0]["text"]
    thread = only_thread("gaia")
    tool = thread.messages.get(role="tool", internal=False)
    assert tool.content.strip() == TOOL_WORD  # pi ran it and sent the output back
    made = Message.objects.get(thread=thread, role="assistant", seq__lt=tool.seq)
    assert made.tool_calls[0]["name"] == "bash"
    after = list(thread.messages.filter(role="assistant", seq__gt=tool.seq))
    assert after, "Gaia never answered the tool's result"
    for reply in after:
        assert_answered(reply)
    assert answers(lines)[-1]["stopReason"] == "stop"
