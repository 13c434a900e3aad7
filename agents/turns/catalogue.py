"""Which models exist: the agents a key may use, and the virtual models (``auto``,
``team/<slug>``) shaped like agents, as ``/v1/models`` and the admin show them."""

from __future__ import annotations

from typing import Any


def model_entry(agent: Any) -> dict[str, Any]:
    """An agent (or a virtual model) as an OpenAI model object, plus the fields chat frontends
    read."""
    return {
        "id": agent.slug,
        "object": "model",
        "created": int(agent.created_at.timestamp()),
        "owned_by": "gaia",
        "name": agent.display_name,
        "description": agent.description,
        "max_input_tokens": agent.max_input_tokens,
        "max_output_tokens": agent.max_output_tokens,
    }


def model_entry_anthropic(agent: Any) -> dict[str, Any]:
    """An agent (or a virtual model) as an Anthropic model object."""
    return {
        "type": "model",
        "id": agent.slug,
        "display_name": agent.display_name,
        "created_at": agent.created_at.isoformat().replace("+00:00", "Z"),
    }
