"""The MCP Inspector's CLI (npm, ``./test`` installed it) lists and calls Gaia's agents over
``/mcp`` with a key, as a person trying the server by hand would."""

from __future__ import annotations

import json
import subprocess
from typing import Any

import pytest

from tests.clients import install

pytestmark = pytest.mark.django_db(transaction=True)


def inspector(server: Any, *args: str, key: str | None = None
              ) -> subprocess.CompletedProcess[str]:
    """One method through the Inspector's CLI (its catalog file in the server's directory)."""
    auth = ["--header", f"Authorization: Bearer {key}"] if key else []
    here = server.log_path.parent
    return subprocess.run(
        [str(install.require_npm("mcp-inspector")), "--cli", f"{server.url}/mcp",
         "--transport", "http", *auth, *args],
        capture_output=True, text=True, timeout=120, check=False,
        env={"PATH": "/usr/bin:/bin", "HOME": str(here),
             "MCP_CATALOG_PATH": str(here / "inspector.json")})


def answer(done: subprocess.CompletedProcess[str]) -> dict[str, Any]:
    assert done.returncode == 0, (done.stdout[-2000:], done.stderr[-2000:])
    return json.loads(done.stdout)


def test_the_inspector_lists_and_calls_an_agent(gaia_server: Any, make_agent: Any,
                                                api_key: str) -> None:
    make_agent(slug="guide", description="Knows the way.",
               provider__options={"reply": "Turn left at the lighthouse."})
    listed = answer(inspector(gaia_server, "--method", "tools/list", key=api_key))
    tools = {t["name"]: t for t in listed["tools"]}
    assert tools["ask_guide"]["description"] == "Knows the way."
    called = answer(inspector(gaia_server, "--method", "tools/call", "--tool-name", "ask_guide",
                              "--tool-arg", "message=Where to?", key=api_key))
    assert called["content"] == [{"type": "text", "text": "Turn left at the lighthouse."}]
    assert called["structuredContent"]["agent"] == "guide"
    assert not called.get("isError")


def test_the_inspector_without_a_key_is_told_to_authenticate(gaia_server: Any) -> None:
    done = inspector(gaia_server, "--method", "tools/list")
    assert done.returncode != 0
    # the 401's WWW-Authenticate: Bearer told it a credential is needed; it has none to give
    assert json.loads(done.stderr)["error"]["code"] == "auth_required", done.stderr[-2000:]
