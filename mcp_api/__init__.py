"""Gaia's agents as MCP tools: ``/mcp`` (Streamable HTTP, stateless), on the official ``mcp``
SDK's server. It enters the core through :mod:`agents.turns` only, as ``openai_api`` does."""
