"""What the embedded model reads of a coding client's request (issue 36, item 2): the head of
the instructions, the tools that fit a compact listing, the conversation; and a tool call it
fenced as code is still a call. No model needed: these are the prompt's rules."""

from __future__ import annotations

import json

from agents.backends.local_prompt import (
    MAX_SYSTEM_CHARS,
    MAX_TOOLS_CHARS,
    TOOLS_INTRO,
    fit_request,
    parse_call,
    reply_shape,
    request_grammar,
    tools_prompt,
)
from agents.kernel.llm import LLMRequest, Message, TextPart, Tool, ToolCall, ToolChoice


def tool(name: str, size: int = 3000, required: tuple[str, ...] = ("command",)) -> Tool:
    props = {p: {"type": "string", "description": "x" * size} for p in (*required, "extra")}
    return Tool(name, f"{name} does things, " * 8 + "\n" + "More. " * (size // 6),
                {"type": "object", "properties": props, "required": list(required)})


def user(text: str) -> Message:
    return Message("user", (TextPart(text),))


# Claude Code's shape: a 6,000-character system prompt, a system message as long, 24 tools
# with ~64,000 characters of schemas, a <system-reminder> inside the user's message.
CLAUDE_CODE = LLMRequest(
    model="m", system="You are Gaia.\n\n" + "Follow the rules of the harness.\n" * 180,
    messages=[user("<system-reminder>\nToday's date is 2026-11-28. " + "Context. " * 30
                   + "\n</system-reminder>\n\nWhat is the capital of France?"),
              Message("system", (TextPart("Available agent types:\n" + "- kind\n" * 1000),))],
    tools=[tool(f"Tool{i:02d}") for i in range(22)] + [tool("Bash"), tool("Write")])


def test_a_coding_clients_request_is_cut_to_what_the_model_reads():
    fitted = fit_request(CLAUDE_CODE)
    assert fitted.system.startswith("You are Gaia.")  # the agent's own instructions first
    assert len(fitted.system) <= MAX_SYSTEM_CHARS
    assert fitted.system.endswith("harness.")  # cut after a line, not inside one
    # The latest message is the user's question, without the harness's reminder (system
    # text, past the budget); the system message does not fit whole: left out.
    assert [m.role for m in fitted.messages] == ["user"]
    assert fitted.messages[0].text == "What is the capital of France?"
    # Every tool fits as a name and its required parameters: the model may call any of them.
    assert [t.name for t in fitted.tools] == [t.name for t in CLAUDE_CODE.tools]
    listing = tools_prompt(fitted)
    assert "- Bash(command)\n" in listing
    assert "does things" not in listing
    assert len(listing) < MAX_TOOLS_CHARS + 300
    assert len(json.dumps([t.parameters for t in CLAUDE_CODE.tools])) > 60000


def test_tools_past_the_budget_are_neither_listed_nor_callable():
    request = CLAUDE_CODE.replace(tools=[tool(f"LongToolName{i:03d}", required=(
        "first_parameter", "second_parameter")) for i in range(60)])
    fitted = fit_request(request)
    kept = [t.name for t in fitted.tools]
    assert 5 < len(kept) < 60
    assert kept == [t.name for t in request.tools][: len(kept)]  # the client's order
    grammar, calls = request_grammar(fitted)
    assert calls
    assert kept[-1] in grammar
    assert "LongToolName059" not in grammar
    assert "LongToolName059" not in tools_prompt(fitted)
    # A tool the client requires by name is kept first.
    named = fit_request(request.replace(tool_choice=ToolChoice("tool", "LongToolName059")))
    assert "LongToolName059" in tools_prompt(named)
    assert "LongToolName059" in request_grammar(named)[0]


def test_after_a_tools_result_the_model_answers_in_text():
    call = ToolCall(id="c1", name="Bash", arguments='{"command": "echo hi"}')
    request = LLMRequest(model="m", system="", tools=[Tool("Bash", "Run.", {"type": "object"})],
                         messages=[user("Run echo hi"), Message("assistant", tool_calls=(call,)),
                                   Message("tool", (TextPart("hi"),), tool_call_id="c1")])
    fitted = fit_request(request)
    assert request_grammar(fitted) == (None, False)
    assert tools_prompt(fitted) == ""
    required = request.replace(tool_choice=ToolChoice("required"))
    assert request_grammar(fit_request(required))[1]  # a client that insists still gets calls


def test_a_short_request_is_untouched():
    request = LLMRequest(model="m", system="Be brief.", messages=[user("Hi")],
                         tools=[Tool("Bash", "Run a command.", {"type": "object"})])
    assert fit_request(request) is request


def test_a_fenced_call_is_a_call_fenced_code_is_text():
    tools = [Tool("Bash", "Run.", {"type": "object"})]
    fenced = '```json\n{"name": "Bash", "arguments": {"command": "echo hi"}}\n```'
    assert [reply_shape(fenced[:n]) for n in (2, 3, 8, 9)] == [None, None, None, "call"]
    assert parse_call(fenced, tools) == ("Bash", '{"command": "echo hi"}')
    assert reply_shape("```bash\necho hi\n```") == "text"
    assert parse_call("```bash\necho hi\n```", tools) is None
    assert reply_shape("Paris.") == "text"


def test_a_call_after_an_echo_of_the_tools_prompt_is_a_call():
    """SmolLM2 repeats the tools prompt's opening before the call it was asked for (pi's and
    Kilo Code's instructions): Gaia's own words open no reply."""
    tools = [Tool("bash", "Run.", {"type": "object"})]
    call = '{"name": "bash", "arguments": {"command": "echo hi"}}'
    echoed = f"{TOOLS_INTRO}\n{call}"
    assert [reply_shape(echoed[:n]) for n in (0, 10, len(TOOLS_INTRO), len(TOOLS_INTRO) + 2)
            ] == [None, None, None, "call"]
    assert parse_call(echoed, tools) == ("bash", '{"command": "echo hi"}')
    assert parse_call(f"{TOOLS_INTRO}\n```json\n{call}\n```", tools) == (
        "bash", '{"command": "echo hi"}')
    assert reply_shape(f"{TOOLS_INTRO} I would rather not.") == "text"
    assert reply_shape("You can do it.") == "text"
