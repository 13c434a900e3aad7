"""Hosted tools, by policy (issue 36): the one rule for every dialect.

A hosted tool is one a client names by type alone and expects its API's provider to run or
to know: OpenAI's Responses built-ins (``web_search``, ``web_search_preview``,
``file_search``, ``code_interpreter``, ``image_generation``, ``computer_use_preview``,
``local_shell``, ``shell``, ``apply_patch``), Chat Completions' ``web_search_options``,
Anthropic's server tools (``web_search_*``, ``web_fetch_*``, ``code_execution_*``) and its
computer-use tool. No provider behind Gaia is given them as such. Clients offer some by default
(Codex CLI sends ``web_search``), so one that merely offers must not break the request:

* the agent serves it when its ``provides`` names one of its own tools for the kind
  (``{"web_search": "mcp__search__search"}``): the model has that tool (it is one of the
  agent's), a ``tool_choice`` that requires the hosted tool requires that tool, and a dialect
  with items of its own for the kind shows its calls as those (Responses ``web_search_call``);
* otherwise it is dropped: left out of what reaches the model, and the reply says so
  (:data:`DROPPED_HEADER`, the stored reply's ``dropped_tools``, the feed's ``message`` event,
  the thread page);
* ``hosted_tools: refuse`` on the agent or on the key refuses it instead (400
  ``unsupported_tool`` naming it), for deployments that want a client to know at once;
* a ``tool_choice`` that requires a dropped tool is a 400 naming it: the client relies on it.

The dialects only recognise hosted tools (:func:`hosted_kind`) and put them in
:attr:`agents.kernel.llm.LLMRequest.hosted`; the turn's door decides (:func:`hosted_plan`) once the
agent is known.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from agents.kernel import llm
from agents.kernel.exceptions import InvalidRequest
from agents.models import HOSTED_KINDS, tool_offered

DROPPED_HEADER = "X-Gaia-Dropped-Tools"

# A hosted tool's type (its date suffix taken off) -> the kind an agent's ``provides`` names.
_KINDS = {
    # OpenAI Responses built-in tools (platform.openai.com/docs/guides/tools)
    "web_search": "web_search", "web_search_preview": "web_search",
    "file_search": "file_search", "code_interpreter": "code_interpreter",
    "image_generation": "image_generation", "computer_use_preview": "computer_use",
    "computer_use": "computer_use", "local_shell": "local_shell", "shell": "shell",
    "apply_patch": "apply_patch",
    # Anthropic server tools (web_search_20250305, web_fetch_20250910, code_execution_20250825)
    # and computer use (computer_20250124), whose schema only Anthropic's models know
    "web_fetch": "web_fetch", "code_execution": "code_execution", "computer": "computer_use",
}
assert set(_KINDS.values()) == set(HOSTED_KINDS), "agents.models.HOSTED_KINDS lists the kinds"
# web_search_20250305 (Anthropic), web_search_preview_2025_03_11 (OpenAI)
_DATED = re.compile(r"_(?:\d{8}|\d{4}_\d{2}_\d{2})$")


def hosted_kind(kind: Any) -> str | None:
    """The hosted tool a tool ``type`` asks for (``web_search_20250305`` -> ``web_search``),
    or ``None`` when it is not one."""
    if not isinstance(kind, str):
        return None
    return _KINDS.get(kind) or _KINDS.get(_DATED.sub("", kind))


@dataclass(frozen=True)
class HostedPlan:
    """What becomes of a request's hosted tools: the ones left out (as the client named
    them), and the agent's tools that serve the others (the name the model knows -> kind)."""

    dropped: tuple[str, ...] = ()
    served: dict[str, str] = field(default_factory=dict)
    choice: llm.ToolChoice | None = None  # the request's tool_choice, when a hosted one

    def headers(self) -> dict[str, str]:
        """The reply's header naming the dropped tools (none when none were)."""
        return {DROPPED_HEADER: ", ".join(self.dropped)} if self.dropped else {}


def refuses(agent: Any, api_key: Any) -> bool:
    """Whether hosted tools nothing provides are refused: the agent's or the key's
    ``hosted_tools`` says ``refuse``."""
    return "refuse" in (getattr(agent, "hosted_tools", "drop"),
                        getattr(api_key, "hosted_tools", "drop"))


def hosted_plan(*, request: llm.LLMRequest, agent: Any, api_key: Any, tools_run: bool
                ) -> HostedPlan:
    """Decide what becomes of ``request.hosted`` for ``agent`` (see the module docstring).
    ``tools_run``: the agent's provider can call tools (else none of its tools serves).

    Raises :class:`InvalidRequest` (``unsupported_tool``) naming the tool when the policy
    refuses it or the request's ``tool_choice`` requires one that is dropped."""
    if not request.hosted:
        return HostedPlan()
    provides = getattr(agent, "provides", None) or {}
    tools = [str(t) for t in getattr(agent, "tools", None) or ()]
    refuse = refuses(agent, api_key)
    dropped: list[str] = []
    served: dict[str, str] = {}
    choice: llm.ToolChoice | None = None
    for tool in request.hosted:
        kind = hosted_kind(tool.type) or tool.type
        name = provides.get(kind)
        if tools_run and isinstance(name, str) and tool_offered(tools, name):
            served[name] = kind
            if tool.required:
                choice = llm.ToolChoice("tool", name)
            continue
        if refuse:
            raise InvalidRequest(
                f"The tool '{tool.type}' is a hosted tool (run on OpenAI's or Anthropic's "
                f"servers): Gaia does not host it, and the model '{agent.slug}' refuses hosted "
                "tools none of its tools provides (hosted_tools: refuse). Remove it from the "
                "request, or give the agent a tool that provides it (its 'provides').",
                param=tool.param, code="unsupported_tool")
        if tool.required:
            raise InvalidRequest(
                f"'tool_choice' requires the hosted tool '{tool.type}', which the model "
                f"'{agent.slug}' does not have: none of its tools provides {kind} (its "
                "'provides'). Choose another tool, or give the agent one that provides it.",
                param="tool_choice", code="unsupported_tool")
        if tool.type not in dropped:
            dropped.append(tool.type)
    if (dropped and request.tool_choice.mode == "required" and not request.tools
            and not tools and not request.client_mcp):
        raise InvalidRequest(
            f"'tool_choice' requires a tool call, and the only tools are hosted tools the "
            f"model '{agent.slug}' does not have ({', '.join(dropped)}).",
            param="tool_choice", code="unsupported_tool")
    return HostedPlan(tuple(dropped), served, choice)
