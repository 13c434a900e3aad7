"""Client-facing heuristics that find a turn's thread and workspace from what a client sends:
session headers (reference 001) and a coding client's workspace root (reference 000)."""

from __future__ import annotations

import re
from typing import Any

from agents import llm

# Session headers, most specific first (issue: thread mapping).
SESSION_HEADERS = (
    "x-session-id",
    "x-openwebui-chat-id",
    "x-librechat-conversation-id",
    "x-claude-code-session-id",
    "session-id",
)

MAX_WORKSPACE_ROOT = 1000  # agents.models.Thread.workspace_root
_WORKSPACE = re.compile(r"<workspace_info>.*?following folders:\s*\n\s*-\s*([^\s\n]+)", re.DOTALL)


def extract_workspace_root(messages: list[llm.Message]) -> str | None:
    """GitHub Copilot's workspace root from a ``<workspace_info>`` block (reference 000)."""
    for m in messages:
        if m.role == "user":
            match = _WORKSPACE.search(m.text)
            if match:
                root = match.group(1).strip()
                # Longer than any path (and than Thread.workspace_root holds): not one.
                return root if len(root) <= MAX_WORKSPACE_ROOT else None
    return None


def session_from_headers(headers: Any) -> tuple[str | None, str | None]:
    """``(explicit thread id, session key)`` from the request headers; ``(None, None)`` if none."""
    thread_id = headers.get("x-gaia-thread-id")
    for name in SESSION_HEADERS:
        value = headers.get(name)
        if value:
            return thread_id, f"{name}:{value[:250]}"
    return thread_id, None
