"""``/v1/models`` names each agent's server-side tools (issue 36 item 4) in Gaia's own field
``gaia``, which the official SDKs parse past: built-ins and other agents by name and
description, an MCP server by its reference, read from the configuration without starting
the server. Over real HTTP against a live Gaia."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import anthropic
import httpx
import openai
import pytest

from agents.models import McpServer
from agents.tools import BUILTINS

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def tooled(make_agent: Any, tmp_path: Path) -> Path:
    """An agent with a built-in, an MCP server, another agent and memory; the server, if it
    were ever started, would leave a file behind."""
    marker = tmp_path / "started"
    McpServer.objects.create(name="search", command=sys.executable,
                             args=["-c", f"open({str(marker)!r}, 'w').close()"])
    make_agent(slug="helper")
    make_agent(slug="tooled", tools=["calculator", "mcp:search", "agent:helper"],
               memory="per_key", provides={"web_search": "mcp__search__search"})
    return marker


EXPECTED = [
    {"name": "calculator", "type": "builtin", "description": BUILTINS["calculator"].description},
    {"name": "mcp:search", "type": "mcp_server", "description":
        "The tools of the MCP server 'search', which the model sees as mcp__search__<tool>."},
    {"name": "agent__helper", "type": "agent",
     "description": "Ask the agent 'helper' to do a task; its answer comes back."},
    {"name": "remember", "type": "builtin", "description": BUILTINS["remember"].description},
]


def test_models_list_names_each_agents_tools_in_its_own_field(gaia_server: Any, api_key: str,
                                                               tooled: Path) -> None:
    headers = {"Authorization": f"Bearer {api_key}"}
    listed = {m["id"]: m for m in httpx.get(f"{gaia_server.v1}/models", headers=headers,
                                            timeout=30).json()["data"]}
    assert listed["tooled"]["gaia"] == {"tools": EXPECTED,
                                        "provides": {"web_search": "mcp__search__search"}}
    assert listed["helper"]["gaia"] == {"tools": [], "provides": {}}
    assert listed["auto"]["gaia"] == {"tools": [], "provides": {}}
    one = httpx.get(f"{gaia_server.v1}/models/tooled", headers=headers, timeout=30).json()
    assert one == listed["tooled"]
    claude = httpx.get(f"{gaia_server.v1}/models", timeout=30, headers={
        **headers, "anthropic-version": "2023-06-01"}).json()["data"]
    assert next(m for m in claude if m["id"] == "tooled")["gaia"]["tools"] == EXPECTED
    assert not tooled.exists()  # no MCP server was started to list the models

    # the official SDKs parse the list as ever, and keep the field for whoever wants it
    client = openai.OpenAI(base_url=gaia_server.v1, api_key=api_key, max_retries=0, timeout=30)
    models = {m.id: m for m in client.models.list()}
    assert models["tooled"].owned_by == "gaia"
    assert models["tooled"].model_extra["gaia"]["tools"] == EXPECTED
    assert client.models.retrieve("tooled").model_extra["gaia"]["tools"][0]["name"] == \
        "calculator"
    sdk = anthropic.Anthropic(base_url=gaia_server.url, api_key=api_key, max_retries=0,
                              timeout=30)
    assert "tooled" in [m.id for m in sdk.models.list()]
    assert not tooled.exists()
