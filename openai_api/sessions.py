"""Client-facing heuristics that find a turn's thread from what a client sends: session
headers (reference 001) and the end user a chat frontend names. (What the conversation itself
says, its title and workspace root, is the core's: :mod:`agents.turns.describe`.)"""

from __future__ import annotations

from typing import Any

# Session headers, most specific first (issue: thread mapping).
SESSION_HEADERS = (
    "x-session-id",
    "x-openwebui-chat-id",
    "x-librechat-conversation-id",
    "x-claude-code-session-id",
    "session-id",
)


def user_from_headers(headers: Any) -> str | None:
    """The end user a chat frontend names in a header (LibreChat's ``X-LibreChat-User-Id``),
    for requests whose body names none."""
    value = headers.get("x-librechat-user-id")
    return value[:300] if value else None


def session_from_headers(headers: Any) -> tuple[str | None, str | None]:
    """``(explicit thread id, session key)`` from the request headers; ``(None, None)`` if none."""
    thread_id = headers.get("x-gaia-thread-id")
    for name in SESSION_HEADERS:
        value = headers.get(name)
        if value:
            return thread_id, f"{name}:{value[:250]}"
    return thread_id, None
