"""What an agent's tools are, as a catalogue shows them (``/v1/models``' ``gaia.tools``):
from the agent's configuration alone, without starting or connecting to any MCP server, so a
models list stays as cheap as a read of the agents."""

from __future__ import annotations

from agents.tools.builtins import BUILTINS


def agent_tool_description(slug: str) -> str:
    """What the model is told of ``agent__<slug>`` (another agent as a tool)."""
    return f"Ask the agent '{slug}' to do a task; its answer comes back."


def tools_public(names: list[str]) -> list[dict[str, str]]:
    """The server-side tools of an agent whose tool references are ``names``
    (:func:`agents.tools.tool_names`: ``remember`` there when its memory is on), in their
    order: a built-in by name and description, another agent as ``agent__<slug>``, and an
    MCP server as its reference ``mcp:<server>`` (its tools, ``mcp__<server>__<tool>``, are
    listed by the server when a turn connects to it). A reference to nothing Gaia knows is
    left out."""
    out: list[dict[str, str]] = []
    for ref in names:
        if ref in BUILTINS:
            out.append({"name": ref, "type": "builtin", "description": BUILTINS[ref].description})
        elif ref.startswith("mcp:") and len(ref) > 4:
            out.append({"name": ref, "type": "mcp_server", "description": (
                f"The tools of the MCP server '{ref[4:]}', which the model sees as "
                f"mcp__{ref[4:]}__<tool>.")})
        elif ref.startswith("agent:") and len(ref) > 6:
            out.append({"name": f"agent__{ref[6:]}", "type": "agent",
                        "description": agent_tool_description(ref[6:])})
    return out
