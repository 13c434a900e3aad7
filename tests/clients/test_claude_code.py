"""Claude Code (``@anthropic-ai/claude-code`` from npm, print mode) against a live Gaia over
the Messages API, configured with the README's environment variables."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from agents.models import Thread
from tests.clients.conftest import TOOL_WORD, ClientEnv, Run, readme_command, readme_env

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]


def claude(env: ClientEnv, bin_: Path, model: str, prompt: str, *flags: str,
           timeout: float = 120) -> Run:
    variables = readme_env("claude-code", url=env.url, key=env.key)
    variables.update(ANTHROPIC_MODEL=model, ANTHROPIC_SMALL_FAST_MODEL=model)
    assert readme_command("claude-code") == ["claude"]
    return env.run([bin_, "-p", prompt, *flags], env=variables, timeout=timeout)


def main_thread(slug: str) -> Thread:
    """The conversation's thread (Claude Code may make side requests on threads of their own)."""
    threads = [t for t in Thread.objects.filter(agent__slug=slug)
               if t.messages.filter(role="tool", internal=False).exists() or t.title]
    assert threads, list(Thread.objects.filter(agent__slug=slug))
    return threads[0]


def test_claude_code_plain_reply(client_env, npm_clients, fake_agents):
    fake_agents("cc-plain")
    run = claude(client_env, npm_clients("claude"), "cc-plain", "Say hello",
                 "--output-format", "json")
    assert run.returncode == 0, run.output
    result = json.loads(run.stdout)
    assert result["is_error"] is False, result
    assert result["result"] == "Hello from Gaia."
    thread = Thread.objects.get(agent__slug="cc-plain", title="Say hello")
    # Item 5: the title skips <system-reminder>; the workspace is Claude Code's cwd.
    assert thread.workspace_root == str(client_env.work)
    # Issue 36 item 3: its packed metadata.user_id names the client, never the JSON blob
    assert thread.user.startswith("claude-code:"), thread.user
    assert thread.session_key.startswith("x-claude-code-session-id:")


def test_claude_code_stream(client_env, npm_clients, fake_agents):
    fake_agents("cc-stream", reply="Streamed from Gaia in words.", delay_ms=5)
    run = claude(client_env, npm_clients("claude"), "cc-stream", "Stream please",
                 "--output-format", "stream-json", "--verbose", "--include-partial-messages")
    assert run.returncode == 0, run.output
    lines: list[dict[str, Any]] = [json.loads(x) for x in run.stdout.splitlines()
                                   if x.startswith("{")]
    deltas = [e["event"]["delta"]["text"] for e in lines if e.get("type") == "stream_event"
              and e["event"].get("type") == "content_block_delta"
              and e["event"]["delta"].get("type") == "text_delta"]
    assert len(deltas) > 1  # the reply arrived in pieces
    assert "".join(deltas) == "Streamed from Gaia in words."
    assert lines[-1]["type"] == "result"
    assert lines[-1]["result"] == "Streamed from Gaia in words."


def test_claude_code_tool_round_trip(client_env, npm_clients, fake_agents):
    fake_agents("cc-tool", tool="Bash",
                arguments={"command": f"echo {TOOL_WORD}", "description": "Print a word"})
    run = claude(client_env, npm_clients("claude"), "cc-tool", "Run the echo command",
                 "--allowedTools", "Bash(echo:*)", "--output-format", "json")
    assert run.returncode == 0, run.output
    assert json.loads(run.stdout)["result"] == f"Tool said: {TOOL_WORD}"
    thread = main_thread("cc-tool")
    assert thread.messages.get(role="tool", internal=False).content.strip() == TOOL_WORD
