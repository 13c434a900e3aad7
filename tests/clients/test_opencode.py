"""opencode (``opencode-ai`` from npm, ``opencode run``) against a live Gaia over Chat
Completions, configured with the README's ``opencode.json``: the base URL, the key and the
model, nothing else. Its default tools (bash, edit, read, task, webfetch...) stay on. opencode
always streams (the AI SDK's ``streamText``): its plain output and its ``--format json``
events are two views of one streamed reply, and a :mod:`recorder <tests.clients.recorder>`
between it and Gaia shows each request streamed.

On a fake agent first, then on ``gaia``, the default agent on the embedded SmolLM2-135M
(issue 36, item 2): opencode sends about 10,000 characters of instructions and 20,000 of tool
schemas; the local backend reads the head of them (agents.backends.local_prompt).
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import pytest

from agents.models import Thread
from tests.clients.conftest import README_URL, TOOL_WORD, ClientEnv, Run, readme_block
from tests.clients.recorder import Recorder
from tests.clients.recorder import recorder as recorder  # fixture
from tests.clients.test_default_agent import (  # noqa: F401 - default_agents is a fixture
    QUESTION,
    assert_answered,
    default_agents,
    replies,
    tool_round_trip,
)

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]

# What the tests add, in the environment: nothing leaves the machine (no update check, no
# models.dev catalogue, no LSP downloads, no share links). None changes what opencode sends.
QUIET = {"OPENCODE_DISABLE_AUTOUPDATE": "1", "OPENCODE_DISABLE_MODELS_FETCH": "1",
         "OPENCODE_DISABLE_LSP_DOWNLOAD": "1", "OPENCODE_DISABLE_SHARE": "1"}
PLUGIN = {"@opencode-ai/plugin": "1.18.33"}  # install.NPM's opencode version


def config(env: ClientEnv, model: str) -> None:
    """The README's config for ``model``, in the client's HOME. opencode installs its plugin
    SDK into its config directory from npm when that has no ``node_modules`` (a user's first
    start); the tests' HOME says it is there, so no test reaches the registry."""
    data = json.loads(readme_block("opencode").replace(README_URL, env.url))
    provider = data["provider"]["gaia"]
    provider["models"] = {model: {}}
    data["model"] = f"gaia/{model}"
    home = env.home / ".config" / "opencode"
    (home / "node_modules").mkdir(parents=True, exist_ok=True)
    (home / "opencode.json").write_text(json.dumps(data))
    (home / "package.json").write_text(json.dumps({"dependencies": PLUGIN}))
    (home / "package-lock.json").write_text(json.dumps(
        {"packages": {"": {"dependencies": PLUGIN}}}))


def opencode(env: ClientEnv, bin_: Path, model: str, prompt: str, *flags: str,
             timeout: float = 120, via: Recorder | None = None) -> Run:
    """``opencode run`` (through ``via``, a recorder in front of Gaia, if given)."""
    if via is not None:
        env = dataclasses.replace(env, url=via.url)
    config(env, model)
    return env.run([bin_, "run", *flags, prompt], env={"GAIA_API_KEY": env.key, **QUIET},
                   timeout=timeout)


def events(run: Run) -> list[dict[str, Any]]:
    return [json.loads(x) for x in run.stdout.splitlines() if x.startswith("{")]


def assert_streamed(recorder: Recorder, requests: int) -> None:
    """``requests`` Chat Completions requests, each streamed, under the client's own 32,000
    max_tokens (the agent's smaller limit is what can cut a reply)."""
    posts = recorder.posts("/chat/completions")
    assert len(posts) == requests, [p.body.get("messages", [])[-1:] for p in posts]
    assert all(p.streamed for p in posts), posts
    assert {p.body.get("max_tokens") for p in posts} == {32000}


def texts(run: Run) -> list[str]:
    return [e["part"]["text"] for e in events(run) if e["type"] == "text"]


def test_the_readme_config_is_the_base_url_the_key_and_the_model():
    data = json.loads(readme_block("opencode"))
    assert set(data) == {"provider", "model"}, data
    [(name, provider)] = data["provider"].items()
    assert set(provider) == {"npm", "options", "models"}, provider
    assert provider["npm"] == "@ai-sdk/openai-compatible"
    assert provider["options"] == {"baseURL": f"{README_URL}/v1",
                                   "apiKey": "{env:GAIA_API_KEY}"}
    assert data["model"] == f"{name}/gaia"
    assert set(provider["models"]) == {"gaia"}


def main_thread(slug: str) -> Thread:
    """The turn's thread (opencode asks the same model for a session title in another)."""
    threads = [t for t in Thread.objects.filter(agent__slug=slug)
               if not t.messages.filter(content__startswith="Generate a title").exists()]
    assert len(threads) == 1, threads
    return threads[0]


def test_opencode_plain_reply(client_env, npm_clients, fake_agents, recorder):
    fake_agents("oc-plain")
    run = opencode(client_env, npm_clients("opencode"), "oc-plain", "Say hello", via=recorder)
    assert run.returncode == 0, run.output
    assert "Hello from Gaia." in run.stdout
    reply = main_thread("oc-plain").messages.get(role="assistant", internal=False)
    assert (reply.dialect, reply.content, reply.finish_reason) == (
        "chat", "Hello from Gaia.", "stop")
    assert_streamed(recorder, 2)  # the session's title, then the turn


def test_opencode_stream_events(client_env, npm_clients, fake_agents, recorder):
    fake_agents("oc-stream", reply="Streamed from Gaia in words.", delay_ms=5)
    run = opencode(client_env, npm_clients("opencode"), "oc-stream", "Stream please",
                   "--format", "json", via=recorder)
    assert run.returncode == 0, run.output
    assert texts(run) == ["Streamed from Gaia in words."]
    assert not [e for e in events(run) if e["type"] == "error"], run.stdout
    [finish] = [e["part"]["reason"] for e in events(run) if e["type"] == "step_finish"]
    assert finish == "stop"
    assert_streamed(recorder, 2)


def test_opencode_tool_round_trip(client_env, npm_clients, fake_agents, recorder):
    fake_agents("oc-tool", tool="bash",
                arguments={"command": f"echo {TOOL_WORD}", "description": "Print a word"})
    run = opencode(client_env, npm_clients("opencode"), "oc-tool", "Run the echo command",
                   "--format", "json", via=recorder)
    assert run.returncode == 0, run.output
    [used] = [e["part"] for e in events(run) if e["type"] == "tool_use"]
    assert used["state"]["status"] == "completed"
    assert TOOL_WORD in used["state"]["output"]
    assert texts(run) == [f"Tool said: {TOOL_WORD}"]
    thread = main_thread("oc-tool")
    roles = list(thread.messages.filter(internal=False).order_by("seq")
                 .values_list("role", flat=True))
    assert roles[-3:] == ["assistant", "tool", "assistant"]
    assert TOOL_WORD in thread.messages.get(role="tool", internal=False).content
    assert_streamed(recorder, 3)
    assert "bash" in recorder.posts("/chat/completions")[-1].tools  # its default tools


# --- the default agent, on the embedded model --------------------------------------------
# ``--title``: opencode asks the model for a session title otherwise, a second call of the
# small model per run that has nothing to do with the turn. The embedded model on a busy
# 2-core machine: opencode gets 560 s (its own timeout), pytest-timeout as much plus start-up.

def on_gaia(env: ClientEnv, bin_: Path, recorder: Recorder, prompt: str, *flags: str) -> Run:
    return opencode(env, bin_, "gaia", prompt, "--title", "t", *flags, timeout=560,
                    via=recorder)


@pytest.mark.usefixtures("default_agents")
@pytest.mark.timeout(620)
def test_opencode_plain_turn_on_the_default_agent(client_env, npm_clients, recorder):
    run = on_gaia(client_env, npm_clients("opencode"), recorder, QUESTION)
    assert run.returncode == 0, run.output[-3000:]
    [reply] = replies()  # one request: no retry, no continuation
    assert_answered(reply)
    assert reply.dialect == "chat"
    assert reply.content.strip() in run.stdout
    assert_streamed(recorder, 1)


@pytest.mark.usefixtures("default_agents")
@pytest.mark.timeout(620)
def test_opencode_stream_on_the_default_agent(client_env, npm_clients, recorder):
    run = on_gaia(client_env, npm_clients("opencode"), recorder, QUESTION, "--format", "json")
    assert run.returncode == 0, run.output[-3000:]
    assert not [e for e in events(run) if e["type"] == "error"], run.stdout
    [reply] = replies()
    assert_answered(reply)
    assert "".join(texts(run)).strip() == reply.content.strip()
    # a reply the agent's 256-token limit cut ends the turn: never "length"
    assert [e["part"]["reason"] for e in events(run) if e["type"] == "step_finish"] == ["stop"]
    assert_streamed(recorder, 1)


@pytest.mark.usefixtures("default_agents")
@pytest.mark.timeout(620)
def test_opencode_tool_round_trip_on_the_default_agent(client_env, npm_clients, recorder):
    call = {"name": "bash", "arguments": {"command": f"echo {TOOL_WORD}",
                                          "description": "Print a word"}}
    run = on_gaia(client_env, npm_clients("opencode"), recorder,
                  f"Reply with only this JSON object: {json.dumps(call)}", "--format", "json")
    assert run.returncode == 0, run.output[-3000:]
    assert not [e for e in events(run) if e["type"] == "error"], run.stdout
    used = [e["part"] for e in events(run) if e["type"] == "tool_use"]
    assert used, run.stdout
    assert used[0]["tool"] == "bash"
    assert TOOL_WORD in used[0]["state"]["output"]
    _, tool, after = tool_round_trip("bash")
    assert TOOL_WORD in tool.content
    assert_streamed(recorder, 1 + len(after))
