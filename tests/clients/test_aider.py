"""Aider (``aider-chat`` from PyPI, in its own virtualenv: its exact pins conflict with
Gaia's) against a live Gaia over Chat Completions, configured by the README's variables.
Aider does not use tool calls: its round trip is an edit block in the reply that it applies
to a file, and the file's content sent back on the next request."""

from __future__ import annotations

from pathlib import Path

import pytest

from agents.models import Message
from tests.clients.conftest import ClientEnv, Run, readme_command, readme_env

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]

EDIT = "hello.txt\n```\nhello from gaia\n```\n"


def aider(env: ClientEnv, python: Path, model: str, message: str, *flags: str,
          timeout: float = 180) -> Run:
    command = readme_command("aider")
    assert command[:3] == ["aider", "--model", "openai/gaia"]
    variables = readme_env("aider", url=env.url, key=env.key)
    aider_bin = python.parent / "aider"
    # The README's command is the model alone; the harness adds what a script needs: one
    # message, no prompts, no git, plain output, and no warning about a model LiteLLM does not
    # know (Aider would otherwise offer to open its documentation).
    return env.run([aider_bin, "--model", f"openai/{model}", *command[3:], "--message",
                    message, "--yes-always", "--no-git", "--no-pretty", "--no-fancy-input",
                    "--no-show-model-warnings", *flags], env=variables, timeout=timeout)


@pytest.mark.parametrize("stream", [False, True], ids=["plain", "stream"])
def test_aider_reply(client_env, client_python, fake_agents, stream):
    slug = f"ai-{'stream' if stream else 'plain'}"
    fake_agents(slug, reply="Hello from Gaia.", delay_ms=5)
    run = aider(client_env, client_python("aider"), slug, "Say hello",
                "--stream" if stream else "--no-stream")
    assert run.returncode == 0, run.output
    assert "Hello from Gaia." in run.stdout
    assert Message.objects.filter(thread__agent__slug=slug, role="assistant",
                                  dialect="chat", content="Hello from Gaia.").exists()


def test_aider_edit_round_trip(client_env, client_python, fake_agents):
    fake_agents("ai-edit", reply=EDIT)
    target = client_env.work / "hello.txt"
    target.write_text("hello\n")
    run = aider(client_env, client_python("aider"), "ai-edit", "Change the greeting",
                "--edit-format", "whole", "hello.txt")
    assert run.returncode == 0, run.output
    assert target.read_text() == "hello from gaia\n"  # Aider applied Gaia's edit
    sent = Message.objects.filter(thread__agent__slug="ai-edit", role="user")
    assert any("hello.txt" in m.content for m in sent)  # the file went to the provider
