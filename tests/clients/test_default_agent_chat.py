"""Aider, configured by the README's variables, against the default agent ``gaia`` on the
embedded SmolLM2-135M (issue 36, item 2): a plain turn and a stream (its default), each one
request without an error in the client (a :mod:`recorder <tests.clients.recorder>` between it
and Gaia shows which). Aider has no tool calls (its edits are blocks of the
reply: tests/clients/test_aider.py). It sends about 2,500 characters (the edit format's
instructions and examples), which the model reads whole in a few seconds.

A reply cut by the agent's own output limit ends the turn with ``stop`` (common.client_finish):
Aider answers ``length`` with "hit a token limit!" and applies no edit.
"""

from __future__ import annotations

import dataclasses

import pytest

from agents.models import Message
from tests.clients.recorder import recorder as recorder  # fixture
from tests.clients.test_aider import aider
from tests.clients.test_default_agent import (  # noqa: F401 - default_agents is a fixture
    QUESTION,
    assert_answered,
    default_agents,
)

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]

LIMIT_ERROR = "hit a token limit"


def answers(slug: str) -> list[Message]:
    """Gaia's replies (Aider's examples of the edit format are assistant messages too)."""
    return list(Message.objects.filter(thread__agent__slug=slug, role="assistant")
                .exclude(finish_reason="").order_by("pk"))


@pytest.mark.usefixtures("default_agents")
@pytest.mark.timeout(620)  # the embedded model on a busy 2-core machine: 560 s for Aider
@pytest.mark.parametrize("stream", [False, True], ids=["plain", "stream"])
def test_aider_on_the_default_agent(client_env, client_python, recorder, stream):
    run = aider(dataclasses.replace(client_env, url=recorder.url), client_python("aider"),
                "gaia", QUESTION, *([] if stream else ["--no-stream"]), timeout=560)
    assert run.returncode == 0, run.output[-3000:]
    assert LIMIT_ERROR not in run.output, run.output[-3000:]
    [reply] = answers("gaia")  # one request: no retry
    assert_answered(reply)
    assert reply.dialect == "chat"
    assert reply.content.strip() in run.stdout
    [post] = recorder.posts("/chat/completions")
    assert post.streamed is stream


def test_aider_takes_the_agents_output_limit_as_the_end(client_env, client_python,
                                                        fake_agents, recorder):
    agent = fake_agents("ai-short", reply="one two three four five six seven eight")
    agent.max_output_tokens = 3
    agent.save(update_fields=["max_output_tokens"])
    run = aider(dataclasses.replace(client_env, url=recorder.url), client_python("aider"),
                "ai-short", "Count to eight")
    assert run.returncode == 0, run.output
    assert LIMIT_ERROR not in run.output, run.output
    assert "one two three" in run.stdout
    [reply] = answers("ai-short")
    assert reply.finish_reason == "length"  # Gaia's record says what happened
    [post] = recorder.posts("/chat/completions")  # no limit of the client's: Gaia's cut it
    assert "max_tokens" not in post.body
    assert "max_completion_tokens" not in post.body
