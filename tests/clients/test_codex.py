"""Codex CLI (``@openai/codex`` from npm, exec mode) against a live Gaia over the Responses
API, configured with the README's ``config.toml``: the base URL, the key and the model, nothing
else. Codex's own defaults stay on, its hosted ``web_search`` tool among them (issue 36): Gaia
leaves that out of what reaches the model and says so (agents.tools.hosted)."""

from __future__ import annotations

import json
import re
import tomllib
from pathlib import Path
from typing import Any

import pytest

from tests.clients.conftest import README_URL, TOOL_WORD, ClientEnv, Run, readme_block
from tests.clients.stored import only_thread

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]


# What the tests add to the README's config, on the command line: nothing leaves the machine
# (no update check, no analytics). Neither changes what Codex sends Gaia.
QUIET = ["-c", "check_for_update_on_startup=false", "-c", "analytics.enabled=false"]


def codex(env: ClientEnv, bin_: Path, model: str, prompt: str, *flags: str,
          timeout: float = 120) -> Run:
    config = env.home / ".codex" / "config.toml"
    config.parent.mkdir(exist_ok=True)
    config.write_text(readme_block("codex").replace(README_URL, env.url)
                      .replace('model = "gaia"', f'model = "{model}"'))
    return env.run([bin_, "exec", "--strict-config", "--skip-git-repo-check", *QUIET, *flags,
                    prompt], env={"GAIA_API_KEY": env.key}, timeout=timeout)


def test_the_readme_config_is_the_base_url_the_key_and_the_model():
    """The README's Codex config names Gaia (base URL, key, model) and changes nothing else
    of Codex's: no tool turned off, no feature flag."""
    block = readme_block("codex")
    config = tomllib.loads(block)
    assert set(config) == {"model", "model_provider", "model_providers"}, config
    assert config["model"] == "gaia"
    provider = config["model_providers"][config["model_provider"]]
    assert set(provider) == {"name", "base_url", "env_key", "wire_api"}, provider
    assert provider["base_url"] == f"{README_URL}/v1"
    assert provider["env_key"] == "GAIA_API_KEY"
    assert provider["wire_api"] == "responses"
    assert not re.search(r"web_search|tools|features", block)


def test_codex_plain_reply(client_env, npm_clients, fake_agents):
    fake_agents("cx-plain")
    run = codex(client_env, npm_clients("codex"), "cx-plain", "Say hello")
    assert run.returncode == 0, run.output
    assert "Hello from Gaia." in run.stdout
    thread = only_thread("cx-plain")
    # Item 5: the title is what the person wrote, the workspace is Codex's <cwd>.
    assert thread.title == "Say hello"
    assert thread.workspace_root == str(client_env.work)
    reply = thread.messages.get(role="assistant", dialect="responses", internal=False)
    # Codex offered its hosted web search (its default); Gaia left it out and said so.
    assert reply.dropped_tools == ["web_search"]


def test_codex_stream_events(client_env, npm_clients, fake_agents):
    fake_agents("cx-stream", reply="Streamed from Gaia in words.", delay_ms=5)
    run = codex(client_env, npm_clients("codex"), "cx-stream", "Stream please", "--json")
    assert run.returncode == 0, run.output
    events: list[dict[str, Any]] = [json.loads(line) for line in run.stdout.splitlines()
                                    if line.startswith("{")]
    messages = [e["item"]["text"] for e in events if e.get("type") == "item.completed"
                and e["item"].get("type") == "agent_message"]
    assert messages == ["Streamed from Gaia in words."]
    assert any(e.get("type") == "turn.completed" for e in events)
    assert not any(e.get("type") in ("error", "turn.failed") for e in events), events
    reply = only_thread("cx-stream").messages.get(role="assistant", internal=False)
    assert reply.dropped_tools == ["web_search"]


def test_codex_tool_round_trip(client_env, npm_clients, fake_agents):
    fake_agents("cx-tool", tool="exec_command",
                arguments={"cmd": f"echo {TOOL_WORD}", "login": False})
    run = codex(client_env, npm_clients("codex"), "cx-tool", "Run the echo command")
    assert run.returncode == 0, run.output
    assert "Tool said:" in run.stdout
    thread = only_thread("cx-tool")
    roles = list(thread.messages.order_by("seq").values_list("role", flat=True))
    assert roles[-3:] == ["assistant", "tool", "assistant"]
    tool = thread.messages.get(role="tool", internal=False)
    assert TOOL_WORD in tool.content  # Codex ran the command and sent its output back
    # Both requests of the round trip offered web search; each reply says it was left out.
    replies = thread.messages.filter(role="assistant", internal=False).order_by("seq")
    assert [r.dropped_tools for r in replies] == [["web_search"], ["web_search"]]
