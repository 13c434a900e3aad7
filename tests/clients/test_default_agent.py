"""Codex CLI and Claude Code, with their default tools, against a fresh install's default agent,
``gaia``, on the embedded SmolLM2-135M model (issues 15 and 36): a plain turn, a stream and a
tool round trip, each without an error in the client.

The clients send 20,000-80,000 characters of instructions and tool schemas; the local backend
gives the model the head of them (agents.backends.local_prompt.fit_request: about 650-750
prompt tokens), which it reads in 25-40 s on a loaded 2-core machine (the whole prompt, 4,000-
5,000 tokens, took over five minutes). A reply cut by the agent's own 256-token limit ends the
turn for the client (``end_turn``, ``completed``), never its ``max_tokens``. The tool round trip
asks for the exact call: whether a 135M model calls wisely is its quality, not the protocol.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from agents.models import Message, Thread
from agents.services import agents_import
from tests.clients.conftest import TOOL_WORD, Run
from tests.clients.test_claude_code import claude
from tests.clients.test_codex import codex

# The embedded model on a busy 2-core machine: the clients get 560 s each (their own
# timeout), so pytest-timeout allows as much plus the start-up.
pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True), pytest.mark.timeout(620)]

DEFAULTS = Path(__file__).resolve().parents[2] / "agents" / "defaults.yaml"
QUESTION = "Answer in one word: what is the capital of France?"


@pytest.fixture
def default_agents(transactional_db):
    agents_import(data=yaml.safe_load(DEFAULTS.read_text()))


def first_reply() -> Message:
    reply = Message.objects.filter(thread__agent__slug="gaia", role="assistant").order_by(
        "pk").first()
    assert reply is not None, "Gaia stored no reply"
    return reply


def replies() -> list[Message]:
    return list(Message.objects.filter(thread__agent__slug="gaia", role="assistant",
                                       internal=False).order_by("pk"))


def tool_round_trip(name: str) -> tuple[Message, Message, list[Message]]:
    """Gaia's side of a tool round trip on ``gaia``: its first reply called ``name``, the
    tool's result came back and is stored, and every reply after it is an answer. Returns
    the call, the result and those replies."""
    made, *after = replies()
    assert made.finish_reason == "tool_calls"
    assert made.tool_calls[0]["name"] == name
    tool = Message.objects.filter(thread__agent__slug="gaia", role="tool",
                                  internal=False).first()
    assert tool is not None
    assert after, "Gaia never answered the tool's result"
    for reply in after:
        assert_answered(reply)
    return made, tool, after


def assert_answered(reply: Message) -> None:
    """A reply the model ended itself: no client is told to ask for more."""
    assert reply.finish_reason in ("stop", "tool_calls", "length"), (
        reply.finish_reason, reply.thread.last_error)
    if reply.tool_calls:
        [call] = reply.tool_calls
        assert isinstance(json.loads(call["arguments"]), dict)
    else:
        assert reply.content.strip()


def codex_events(run: Run) -> list[dict[str, Any]]:
    return [json.loads(x) for x in run.stdout.splitlines() if x.startswith("{")]


def test_codex_plain_turn_on_the_default_agent(client_env, npm_clients, default_agents):
    run = codex(client_env, npm_clients("codex"), "gaia", QUESTION, timeout=560)
    assert run.returncode == 0, run.output[-3000:]
    assert "Reconnecting" not in run.output, run.output[-3000:]  # no dropped stream
    [reply] = replies()  # one request: no retry after a dropped stream or an incomplete reply
    assert_answered(reply)
    assert reply.content.strip() in run.stdout


def test_codex_stream_on_the_default_agent(client_env, npm_clients, default_agents):
    run = codex(client_env, npm_clients("codex"), "gaia", QUESTION, "--json", timeout=560)
    assert run.returncode == 0, run.output[-3000:]
    events = codex_events(run)
    assert not any(e.get("type") in ("error", "turn.failed") for e in events), events
    assert any(e.get("type") == "turn.completed" for e in events), events
    messages = [e["item"]["text"] for e in events if e.get("type") == "item.completed"
                and e["item"].get("type") == "agent_message"]
    [reply] = replies()
    assert_answered(reply)
    assert messages == [reply.content]


@pytest.mark.timeout(620 * 3)  # up to five draws of a few seconds to a minute each
def test_codex_tool_round_trip_on_the_default_agent(client_env, npm_clients, default_agents):
    """Codex asks the default agent (the 135M local model, sampled at temperature 0.2) to run
    a command. Whether the model calls the tool is its draw, not Gaia's doing: in about one
    full suite in four it answered in text instead (CI, 2026-11-28). So a turn that ended
    cleanly in text is asked again, at most five times, on a fresh thread; every attempt
    must still be a clean turn, and the round trip, once the model calls, is checked in
    full. Each try works in a directory of its own, so Codex's prompt (which names it) is
    another draw too: three tries answered in text in one SQLite CI leg (2026-11-28), so five."""
    call = {"name": "exec_command", "arguments": {"cmd": f"echo {TOOL_WORD}"}}
    for attempt in range(5):
        Thread.objects.filter(agent__slug="gaia").delete()  # the last draw's text reply
        env = dataclasses.replace(client_env, work=client_env.work / f"try{attempt}")
        env.work.mkdir()
        run = codex(env, npm_clients("codex"), "gaia",
                    f"Reply with only this JSON object: {json.dumps(call)}", "--json",
                    timeout=560)
        assert run.returncode == 0, run.output[-3000:]
        events = codex_events(run)
        assert not any(e.get("type") in ("error", "turn.failed") for e in events), events
        assert any(e.get("type") == "turn.completed" for e in events), events
        ran = [e["item"] for e in events if e.get("type") == "item.completed"
               and e["item"].get("type") == "command_execution"]
        if ran:
            break
    assert ran, events
    assert TOOL_WORD in ran[0]["aggregated_output"]
    _, tool, after = tool_round_trip("exec_command")
    assert TOOL_WORD in tool.content


def test_claude_code_plain_turn_on_the_default_agent(client_env, npm_clients, default_agents):
    run = claude(client_env, npm_clients("claude"), "gaia", QUESTION, "--output-format",
                 "json", timeout=560)
    assert run.returncode == 0, run.output[-3000:]
    result = json.loads(run.stdout)
    assert result["is_error"] is False, result
    assert result["subtype"] == "success"
    [reply] = [r for r in replies() if r.thread.title == QUESTION]  # no "continue" requests
    assert_answered(reply)
    assert result["result"].strip() == reply.content.strip()


def test_claude_code_stream_on_the_default_agent(client_env, npm_clients, default_agents):
    run = claude(client_env, npm_clients("claude"), "gaia", QUESTION, "--output-format",
                 "stream-json", "--verbose", "--include-partial-messages", timeout=560)
    assert run.returncode == 0, run.output[-3000:]
    lines = [json.loads(x) for x in run.stdout.splitlines() if x.startswith("{")]
    deltas = [e["event"]["delta"]["text"] for e in lines if e.get("type") == "stream_event"
              and e["event"].get("type") == "content_block_delta"
              and e["event"]["delta"].get("type") == "text_delta"]
    stops = [e["event"]["delta"]["stop_reason"] for e in lines if e.get("type") ==
             "stream_event" and e["event"].get("type") == "message_delta"]
    assert stops, lines
    assert "max_tokens" not in stops  # the agent's own limit is not the client's
    assert lines[-1]["type"] == "result"
    assert lines[-1]["is_error"] is False, lines[-1]
    assert "".join(deltas).strip() == lines[-1]["result"].strip() != ""


def test_claude_code_tool_round_trip_on_the_default_agent(client_env, npm_clients,
                                                          default_agents):
    call = {"name": "Bash", "arguments": {"command": f"echo {TOOL_WORD}"}}
    run = claude(client_env, npm_clients("claude"), "gaia",
                 f"Reply with only this JSON object: {json.dumps(call)}", "--allowedTools",
                 "Bash(echo:*)", "--output-format", "json", "--max-turns", "4", timeout=560)
    result = json.loads(run.stdout)
    tool = Message.objects.filter(thread__agent__slug="gaia", role="tool",
                                  internal=False).first()
    assert tool is not None, result
    assert tool.content.strip() == TOOL_WORD  # Claude Code ran it and sent the output back
    made = Message.objects.get(thread=tool.thread, role="assistant", seq__lt=tool.seq)
    assert made.tool_calls[0]["name"] == "Bash"
    answers = list(Message.objects.filter(thread=tool.thread, role="assistant",
                                          seq__gt=tool.seq))
    assert answers, "Gaia never answered the tool's result"
    for reply in answers:
        assert_answered(reply)
    # The client ends without an error (or, should the small model call again and again,
    # at the turn limit the test set: a quality, not a protocol failure).
    assert result["subtype"] in ("success", "error_max_turns"), result
    assert run.returncode == 0 or result["subtype"] == "error_max_turns", run.output[-3000:]
