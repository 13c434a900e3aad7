"""The ``local`` provider's text in and out: a conversation as the chat template's messages, the
offered tools listed for a small model, the llama.cpp grammar that makes a reply either plain
text or one well-formed call of an offered tool (``response_format`` constrains it the same
way), and the reply's tokens as text (UTF-8 decoded across tokens, cut at a stop string). The
backend itself is :mod:`agents.backends.local`."""

from __future__ import annotations

import codecs
import json
import logging
import re
from typing import Any

from agents.kernel.exceptions import InvalidRequest
from agents.kernel.llm import LLMRequest, Message, TextPart, Tool, ToolChoice

log = logging.getLogger("gaia.local")


def chat_message(m: Message) -> dict[str, str]:
    if m.role == "tool":
        return {"role": "user", "content": f"Tool result:\n{m.text}"}
    text = m.text
    if m.role == "assistant" and m.tool_calls:
        # In the form the model is asked to call tools in (tools_prompt).
        calls = "\n".join(_call_json(c.name, c.arguments) for c in m.tool_calls)
        text = f"{text}\n{calls}".strip()
    return {"role": m.role, "content": text}


def _call_json(name: str, arguments: str) -> str:
    try:
        args = json.loads(arguments) if arguments else {}
    except (ValueError, RecursionError):
        args = {}
    return json.dumps({"name": name, "arguments": args}, ensure_ascii=False)


# -- tools and structured output as grammars ----------------------------------------------------

def offered_tools(request: LLMRequest) -> list[Tool]:
    """The tools the model may call under ``tool_choice``."""
    mode = request.tool_choice.mode
    if mode == "none":
        return []
    if mode == "tool":
        return [t for t in request.tools if t.name == request.tool_choice.name]
    return list(request.tools)


# What the small model is told of the client's instructions and tools (``Provider.options``
# ``max_system_chars`` and ``max_tools_chars``): a coding client's 20,000-80,000 characters
# (Claude Code: a 6,000-character system prompt, a 6,000-character system message and 24
# tools with 64,000 characters of schemas) would take the embedded model minutes to read on 2
# cores, and a 135M model follows none of it.
MAX_SYSTEM_CHARS = 1500
MAX_TOOLS_CHARS = 1200
REMINDER = re.compile(r"<system-reminder>.*?</system-reminder>\s*", re.DOTALL)


def _head(text: str, limit: int) -> str:
    """The start of ``text`` within ``limit`` characters, cut after a line (else a word)."""
    if len(text) <= limit:
        return text
    cut = text.rfind("\n", 0, limit + 1)
    if cut < limit // 2:
        cut = text.rfind(" ", 0, limit + 1)
    return text[: cut if cut > 0 else limit].rstrip()


def fit_request(request: LLMRequest, *, max_system_chars: int = MAX_SYSTEM_CHARS,
                max_tools_chars: int = MAX_TOOLS_CHARS) -> LLMRequest:
    """``request`` as the small model reads it: the head of its instructions (the system text,
    the agent's own first, then the client's, and any system message of the conversation,
    within ``max_system_chars`` in all) and the offered tools, in the client's order, whose
    listing (:func:`tools_prompt`) fits ``max_tools_chars`` (a tool the client names in
    ``tool_choice`` first). The conversation's turns are kept (the agent's input limit bounds
    them). A tool left out is neither listed nor in the grammar: the model cannot call it.
    After a tool's result (``tool_choice`` ``auto``) the model answers in text."""
    left = max_system_chars
    system = _head(request.system, left)
    left -= len(system)
    messages: list[Message] = []
    changed = system != request.system
    for m in request.messages:
        if m.role == "user" and REMINDER.search(m.text):
            # The client's instructions inside the user's message (Claude Code's
            # <system-reminder>): system text, within the same budget.
            reminders = "".join(REMINDER.findall(m.text))
            if len(reminders) > left:
                m = Message("user", (TextPart(REMINDER.sub("", m.text).strip()),))
                changed = True
            else:
                left -= len(reminders)
        if m.role != "system":
            messages.append(m)
            continue
        if len(m.text) <= left:  # whole or not at all: a cut one would end the prompt badly
            left -= len(m.text)
            messages.append(m)
        else:
            changed = True
    if request.messages and request.messages[-1].role == "tool" and (
            request.tool_choice.mode == "auto" and request.tools):
        # After a tool's result the small model answers in text: it repeats the call it
        # was asked for otherwise, and a client without a turn limit (Codex CLI) loops.
        request = request.replace(tool_choice=ToolChoice("none"))
        changed = True
    offered = offered_tools(request)
    named = [t for t in offered if request.tool_choice.mode == "tool"]
    tools, brief = list(request.tools), False
    if sum(len(_tool_line(t)) + 1 for t in offered) > max_tools_chars:
        tools, brief, used = [], True, 0  # names and parameters only, as many as fit
        for t in named + [t for t in offered if t not in named]:
            size = len(_tool_line(t, brief=True)) + 1
            if tools and used + size > max_tools_chars:
                continue
            tools.append(t)
            used += size
    if not (changed or brief):
        return request
    return request.replace(system=system, messages=messages, tools=tools,
                           extra={**request.extra, BRIEF_TOOLS: brief})


BRIEF_TOOLS = "gaia_local_brief_tools"  # request.extra: list the tools without descriptions


def _tool_line(t: Tool, *, brief: bool = False) -> str:
    """A tool as the prompt lists it: its name and parameters (the required ones only when
    ``brief``, unless it has none), then the first line of its description (not when
    ``brief``)."""
    schema = t.parameters if isinstance(t.parameters, dict) else {}
    props = schema.get("properties")
    names = list(props) if isinstance(props, dict) else []
    required = [n for n in schema.get("required") or [] if n in names]
    params = ", ".join(required if brief and required else names)
    return f"- {t.name}({params})" if brief else (
        f"- {t.name}({params}): {_first_line(t.description)}")


def _first_line(text: str, limit: int = 160) -> str:
    line = next((x.strip() for x in text.splitlines() if x.strip()), "")
    return line if len(line) <= limit else line[: limit - 1] + "…"


# How the tools prompt opens. SmolLM2 often repeats it before the call it was asked for (with
# Kilo Code's and pi's instructions): an echo of Gaia's own words opens no reply, so the
# reply is read past it (reply_shape, parse_call).
TOOLS_INTRO = "You can call tools. To call one, reply with only a JSON object:"


def _past_echo(text: str) -> str | None:
    """``text`` past a leading echo of :data:`TOOLS_INTRO`; ``None`` while it may still be
    one."""
    text = text.lstrip()
    if TOOLS_INTRO.startswith(text):
        return None
    return text[len(TOOLS_INTRO):] if text.startswith(TOOLS_INTRO) else text


def tools_prompt(request: LLMRequest) -> str:
    """How to call the offered tools, told compactly (their schemas are in the grammar)."""
    tools = offered_tools(request)
    if not tools:
        return ""
    must = request.tool_choice.mode in ("required", "tool")
    lines = [f"{TOOLS_INTRO} "
             '{"name": "<tool name>", "arguments": {<its arguments>}}.'
             + ("" if must else " Otherwise reply in plain text."), "Tools:"]
    brief = bool(request.extra.get(BRIEF_TOOLS))
    lines.extend(_tool_line(t, brief=brief) for t in tools)
    return "\n".join(lines)


def _schema_gbnf(schema: dict[str, Any]) -> str:
    from llama_cpp.llama_grammar import json_schema_to_gbnf

    gbnf = json_schema_to_gbnf(json.dumps(schema))
    # JSON strings hold no raw control characters (RFC 8259, section 7); this converter's
    # string rule allows them, and a small model then rambles across lines inside a string.
    return gbnf.replace('char ::= [^"\\\\] |', 'char ::= [^"\\\\\\x7F\\x00-\\x1F] |')


def cap_strings(schema: Any, limit: int) -> Any:
    """``schema`` with ``maxLength: limit`` on every unbounded string (``options.
    max_string_length``): a small model can ramble inside a string until its output budget
    runs out, and a call cut short is no call."""
    if isinstance(schema, list):
        return [cap_strings(x, limit) for x in schema]
    if not isinstance(schema, dict):
        return schema
    out: dict[str, Any] = {}
    for key, value in schema.items():
        if key in ("properties", "$defs", "definitions") and isinstance(value, dict):
            out[key] = {name: cap_strings(sub, limit) for name, sub in value.items()}
        elif key in ("items", "additionalProperties", "anyOf", "oneOf", "allOf", "prefixItems"):
            out[key] = cap_strings(value, limit)
        else:
            out[key] = value
    kinds = schema.get("type")
    is_string = kinds == "string" or (isinstance(kinds, list) and "string" in kinds)
    if is_string and not any(k in schema for k in ("maxLength", "enum", "const", "pattern",
                                                   "format")):
        out["maxLength"] = limit
    return out


def _arguments_schema(tool: Tool, max_string: int | None = None) -> dict[str, Any]:
    """The tool's parameter schema if llama.cpp's converter takes it, else any JSON object."""
    schema = tool.parameters if isinstance(tool.parameters, dict) and tool.parameters else {
        "type": "object"}
    if max_string:
        schema = cap_strings(schema, max_string)
    try:
        _schema_gbnf(schema)
    except Exception:  # noqa: BLE001 - a construct the converter lacks: keep the call's shape
        log.info("tool %r: schema not expressible as a grammar; any object allowed", tool.name)
        return {"type": "object"}
    return schema


# Plain text: anything that does not open a JSON object.
_TEXT_RULES = 'text ::= [^{ \\t\\n\\r] [^\\x00]*\n'


def request_grammar(request: LLMRequest, *, max_string: int | None = None
                    ) -> tuple[str | None, bool]:
    """``(GBNF or None, whether a JSON reply is a tool call)`` for ``request``;
    ``max_string`` bounds the strings of tool arguments (:func:`cap_strings`).

    Raises :class:`InvalidRequest` for a ``response_format`` schema the converter cannot
    express (never silently unconstrained)."""
    tools = offered_tools(request)
    if tools:
        calls = [{"type": "object", "properties": {"name": {"const": t.name},
                                                   "arguments": _arguments_schema(t, max_string)},
                  "required": ["name", "arguments"]} for t in tools]
        gbnf = _schema_gbnf(calls[0] if len(calls) == 1 else {"oneOf": calls})
        if request.tool_choice.mode in ("required", "tool"):
            return gbnf, True
        either = "root ::= call | text\n" + _TEXT_RULES
        return either + gbnf.replace("root ::=", "call ::=", 1), True
    fmt = request.extra.get("response_format")
    if isinstance(fmt, dict):
        kind = fmt.get("type")
        if kind == "json_object":
            return _schema_gbnf({"type": "object"}), False
        if kind == "json_schema":
            spec = fmt.get("json_schema") if isinstance(fmt.get("json_schema"), dict) else fmt
            schema = spec.get("schema") if isinstance(spec, dict) else None
            try:
                return _schema_gbnf(schema if isinstance(schema, dict) else {}), False
            except Exception as exc:  # noqa: BLE001 - reported to the client by name
                raise InvalidRequest(
                    f"The local model cannot enforce this JSON Schema ({exc}).",
                    param="response_format", code="unsupported_schema") from None
    return None, False


def reply_shape(text: str) -> str | None:
    """``"call"`` if a reply opening with ``text`` may be a tool call (a JSON object, bare or
    in a fenced code block: small models fence the call they were asked for), ``"text"`` if
    not, ``None`` while it cannot tell yet. An echo of the tools prompt's opening before it is
    passed over (:data:`TOOLS_INTRO`)."""
    past = _past_echo(text)
    if past is None:
        return None
    text = past.lstrip()
    if text.startswith("```"):
        line, newline, rest = text.partition("\n")
        if not newline or not rest.strip():
            return None
        text = rest.lstrip()
    if not text or text == "`" * len(text):
        return None
    return "call" if text.startswith("{") else "text"


def _unfenced(text: str) -> str:
    text = text.strip()
    if text.startswith("```") and text.endswith("```") and "\n" in text:
        return text.partition("\n")[2][:-3]
    return text


def parse_call(text: str, tools: list[Tool]) -> tuple[str, str] | None:
    """``(name, arguments JSON)`` if ``text`` is a call of one of ``tools`` (bare or in a
    fenced code block), past an echo of the tools prompt's opening."""
    try:
        value = json.loads(_unfenced(_past_echo(text) or ""))
    except ValueError:
        return None
    if not isinstance(value, dict) or value.get("name") not in {t.name for t in tools}:
        return None
    args = value.get("arguments")
    return value["name"], json.dumps(args if isinstance(args, dict) else {}, ensure_ascii=False)


class TokenText:
    """Incremental detokenizer: a token's bytes may end inside a multi-byte UTF-8 character;
    those bytes wait for the next token, so no text piece ever holds a broken character."""

    def __init__(self, llama: Any) -> None:
        self.llama = llama
        self.decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")

    def token(self, token: int) -> str:
        return self.decoder.decode(self.llama.detokenize([token]))

    def flush(self) -> str:
        return self.decoder.decode(b"", final=True)


class StopText:
    """Holds back text that could be the start of a stop string; finds stop strings."""

    def __init__(self, stops: list[str]) -> None:
        self.stops = [s for s in stops if s]
        self.pending = ""

    def feed(self, text: str) -> tuple[str, bool]:
        """``(text safe to emit, stopped)``."""
        if not self.stops:
            return text, False
        self.pending += text
        cut = min((i for i in (self.pending.find(s) for s in self.stops) if i >= 0),
                  default=-1)
        if cut >= 0:
            out, self.pending = self.pending[:cut], ""
            return out, True
        keep = 0
        for s in self.stops:
            for k in range(min(len(s) - 1, len(self.pending)), keep, -1):
                if self.pending.endswith(s[:k]):
                    keep = k
                    break
        out = self.pending[:len(self.pending) - keep]
        self.pending = self.pending[len(out):]
        return out, False

    def flush(self) -> str:
        out, self.pending = self.pending, ""
        return out
