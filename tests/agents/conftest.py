"""Fixtures of the agents tests."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.clients import install


@pytest.fixture(scope="session")
def everything_bin() -> Path:
    """The MCP reference server ``server-everything`` (npm; installed once, cached)."""
    install.ensure_npm()
    return install.npm_bin("mcp-server-everything")
