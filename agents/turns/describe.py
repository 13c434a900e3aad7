"""What a conversation says of itself: its title (the first words the person wrote, past
client scaffolding) and a coding client's workspace root (reference 000: GitHub Copilot's
``<workspace_info>``; Codex CLI's and Claude Code's own ways of saying it)."""

from __future__ import annotations

import re

from agents import llm

MAX_WORKSPACE_ROOT = 1000  # agents.models.Thread.workspace_root
_WORKSPACE = re.compile(r"<workspace_info>.*?following folders:\s*\n\s*-\s*([^\s\n]+)", re.DOTALL)
# Codex CLI: a user message ``<environment_context><cwd>/path</cwd>...``.
_CODEX_CWD = re.compile(r"<environment_context>.*?<cwd>\s*([^<\n]+?)\s*</cwd>", re.DOTALL)
# Claude Code: its system prompt says ``- Primary working directory: /path`` (older versions:
# ``Working directory: /path`` in an ``<env>`` block).
_CLAUDE_CWD = re.compile(r"^\s*(?:-\s*)?(?:Primary )?[Ww]orking directory:\s*(\S.*?)\s*$",
                         re.MULTILINE)

# Client scaffolding around what the person wrote: Claude Code's <system-reminder>, Codex's
# <environment_context> and <user_instructions>, Copilot's <context>/<workspace_info>...
_SCAFFOLD = re.compile(r"<([A-Za-z][\w-]*)(?:\s[^>]*)?>.*?</\1>", re.DOTALL)
_COPILOT_REQUEST = re.compile(r"<userRequest>\s*(.*?)\s*</userRequest>", re.DOTALL)
TITLE_LENGTH = 80


def extract_workspace_root(messages: list[llm.Message], system: str = "") -> str | None:
    """A coding client's workspace root: GitHub Copilot's ``<workspace_info>`` block
    (reference 000), Codex CLI's ``<environment_context><cwd>``, or the working directory in
    Claude Code's system prompt; ``None`` if the request names none."""
    for m in messages:
        if m.role == "user":
            match = _WORKSPACE.search(m.text) or _CODEX_CWD.search(m.text)
            if match:
                root = match.group(1).strip()
                # Longer than any path (and than Thread.workspace_root holds): not one.
                return root if len(root) <= MAX_WORKSPACE_ROOT else None
    for text in (system, *(m.text for m in messages if m.role == "system")):
        match = _CLAUDE_CWD.search(text)
        if match:
            root = match.group(1).strip()
            return root if len(root) <= MAX_WORKSPACE_ROOT else None
    return None


def thread_title(messages: list[llm.Message]) -> str:
    """A thread's title: the first words the person wrote, skipping client scaffolding
    (tagged blocks such as ``<system-reminder>`` or ``<environment_context>``); Copilot's
    ``<userRequest>`` is the person's text. ``""`` if no user message has words of its own."""
    for m in messages:
        if m.role != "user":
            continue
        request = _COPILOT_REQUEST.search(m.text)
        text = request.group(1) if request else _SCAFFOLD.sub(" ", m.text)
        words = " ".join(text.split())
        if words:
            if len(words) <= TITLE_LENGTH:
                return words
            cut = words[:TITLE_LENGTH].rsplit(" ", 1)[0]
            return (cut or words[:TITLE_LENGTH]) + "…"
    return ""
