"""Client-facing heuristics that find a turn's thread from what a client sends: session
headers (reference 001) and the end user a chat frontend names. (What the conversation itself
says, its title and workspace root, is the core's: :mod:`agents.turns.describe`.)"""

from __future__ import annotations

import hashlib
import json
import re
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


# Coding clients by the User-Agent they send (lower-cased prefix -> the name Gaia gives them).
CLIENT_AGENTS = (
    ("claude-cli/", "claude-code"),
    ("codex_cli_rs/", "codex"),
    ("codex_exec/", "codex"),
    ("opencode/", "opencode"),
    ("qwencode/", "qwen-code"),
    ("geminicli/", "gemini-cli"),
)
# Claude Code before its JSON metadata: user_<hash>_account_<uuid or empty>_session_<uuid>.
_CLAUDE_LEGACY = re.compile(r"user_([0-9a-fA-F]+)_account_([0-9a-fA-F-]*)_session_([0-9a-fA-F-]+)")
_SESSION_KEYS = ("session_id", "sessionId")
_IDENTITY_KEYS = ("account_uuid", "accountUuid", "user_id", "userId", "account_id",
                  "device_id", "deviceId")


def client_name(headers: Any) -> str | None:
    """The coding client a request comes from, by its User-Agent (``None``: not one Gaia
    knows)."""
    agent = (headers.get("user-agent") or "").lower()
    return next((name for prefix, name in CLIENT_AGENTS if agent.startswith(prefix)), None)


def _short(text: str) -> str:
    """A short stable name for an identifier (never the identifier itself)."""
    return hashlib.sha256(text.encode()).hexdigest()[:12]


def _fields(blob: str) -> dict[str, str]:
    """The string fields of a JSON object, or, for one cut short (a user id is kept to 300
    characters), those of its ``"key": "value"`` pairs that are whole."""
    try:
        value = json.loads(blob)
    except ValueError:
        return dict(re.findall(r'"(\w+)"\s*:\s*"([^"\\]{1,300})"', blob))
    if not isinstance(value, dict):
        return {}
    return {k: v for k, v in value.items() if isinstance(k, str) and isinstance(v, str)}


def client_identity(*, user: str | None, headers: Any, session_key: str | None
                    ) -> tuple[str | None, str | None]:
    """``(user, session key)`` with a client's own packed metadata unpacked (issue 36 item 3).

    Claude Code packs its identity into ``metadata.user_id``: a JSON object
    (``{"device_id", "account_uuid", "session_id"}``) or, before, ``user_<hash>_account_<uuid>
    _session_<uuid>``. Its user becomes ``claude-code:<hash>`` (of the account, else the
    device: one person's sessions share a name, two people's don't), and its session id counts
    as its ``X-Claude-Code-Session-Id`` header when the request has no session header. Any
    other JSON-looking user is named after the client (its User-Agent, else ``user``) and a
    short hash: a JSON blob is never a name. A plain user name is kept as given."""
    text = (user or "").strip()
    if not text:
        return user, session_key
    legacy = _CLAUDE_LEGACY.fullmatch(text)
    if legacy:
        device, account, session = legacy.groups()
        fields = {"device_id": device, "account_uuid": account, "session_id": session}
    elif text[0] in "{[":
        fields = _fields(text)
    else:
        return user, session_key
    claude = legacy is not None or {"device_id", "session_id"} <= set(fields)
    label = "claude-code" if claude else client_name(headers) or "user"
    who = next((fields[k] for k in _IDENTITY_KEYS if fields.get(k)), None)
    session = next((fields[k] for k in _SESSION_KEYS if fields.get(k)), None)
    if session and session_key is None:
        session_key = (f"x-claude-code-session-id:{session[:250]}" if claude
                       else f"{label}-session:{session[:250]}")
    return f"{label}:{_short(who or text)}", session_key
