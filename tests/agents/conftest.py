"""Fixtures of the agents tests."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.clients import install


@pytest.fixture(scope="session")
def everything_bin() -> Path:
    """The MCP reference server ``server-everything`` (npm; ``./test`` installed it)."""
    try:
        return install.require_npm("mcp-server-everything")
    except install.InstallError as exc:
        pytest.fail(str(exc), pytrace=False)
