"""What a conversation says of itself: its title (the first words the person wrote, past
client scaffolding) and a coding client's workspace root (reference 000: GitHub Copilot's
``<workspace_info>``; Codex CLI's and Claude Code's own ways of saying it)."""

from __future__ import annotations

import bisect
import re

from agents.kernel import llm

MAX_WORKSPACE_ROOT = 1000  # agents.models.Thread.workspace_root

# Every search here reads a client's text on the event loop, so each is linear in it: a
# literal found with str.find, then a pattern anchored where it was found and that cannot
# backtrack past the next tag or line. The regular expressions these replace
# (``<tag>.*?</tag>`` for scaffolding, ``<userRequest>\s*(.*?)\s*</userRequest>``,
# ``^\s*...[Ww]orking directory:``) were quadratic or worse on text a client chooses: a 24 KB
# message of ``<a>`` held the loop 10.7 s, 104 KB of ``<userRequest>`` 117 s.
_SPACE = re.compile(r"\s*")
_WORD_RUN = re.compile(r"\S+")
# Copilot's block names the workspace: "...following folders:\n- /path" (reference 000).
_WORKSPACE, _FOLDERS = "<workspace_info>", "following folders:"
# Codex CLI: a user message ``<environment_context><cwd>/path</cwd>...``.
_CODEX_CONTEXT = "<environment_context>"
# Claude Code: its system prompt says ``- Primary working directory: /path`` (older versions:
# ``Working directory: /path`` in an ``<env>`` block).
_CLAUDE_CWD = "orking directory:"
_CLAUDE_PREFIX = re.compile(r"\s*(?:-\s*)?(?:Primary )?[Ww]\Z")

# Client scaffolding around what the person wrote: Claude Code's <system-reminder>, Codex's
# <environment_context> and <user_instructions>, Copilot's <context>/<workspace_info>... An
# opening tag's attributes stop at the next "<" (so a tag never spans another's start).
_OPEN_TAG = re.compile(r"<([A-Za-z][\w-]*)(?:\s[^<>]*)?>")
_CLOSE_TAG = re.compile(r"</([A-Za-z][\w-]*)>")
_USER_REQUEST, _USER_REQUEST_END = "<userRequest>", "</userRequest>"
TITLE_LENGTH = 80


def _root(found: str) -> str | None:
    root = found.strip()
    # Longer than any path (and than Thread.workspace_root holds): not one.
    return root if root and len(root) <= MAX_WORKSPACE_ROOT else None


def _copilot_root(text: str) -> str | None:
    """The first folder of Copilot's ``<workspace_info>``: after the block's start, a
    "following folders:", whitespace holding a line break, "-", then the path."""
    at = text.find(_WORKSPACE)
    if at < 0:
        return None
    at = text.find(_FOLDERS, at)
    while at >= 0:
        gap = _SPACE.match(text, at + len(_FOLDERS)).end()
        if "\n" in text[at + len(_FOLDERS):gap] and text.startswith("-", gap):
            path = _WORD_RUN.match(text, _SPACE.match(text, gap + 1).end())
            if path:
                return path.group()
        at = text.find(_FOLDERS, gap)
    return None


def _codex_root(text: str) -> str | None:
    """Codex's ``<cwd>`` after its ``<environment_context>``: the text between a ``<cwd>`` and
    the first ``</cwd>`` after it, on one line and holding no ``<``."""
    at = text.find(_CODEX_CONTEXT)
    if at < 0:
        return None
    while True:
        end = text.find("</cwd>", at)
        if end < 0:
            return None
        start = text.rfind("<cwd>", at, end)  # only the last one before it can hold no "<"
        if start >= 0:
            inside = text[start + len("<cwd>"):end].strip()
            if inside and "<" not in inside and "\n" not in inside:
                return inside
        at = end + len("</cwd>")


def _claude_root(text: str) -> str | None:
    """The path after a line's "[- ][Primary ]working directory:" (its first word may be on
    a later line), to the end of that line."""
    at = text.find(_CLAUDE_CWD, 1)  # after its "W" or "w"
    line = -1
    while at > 0:
        start = text.rfind("\n", 0, at) + 1
        if start != line:  # one candidate a line: a later one has a non-space before it
            line = start
            if _CLAUDE_PREFIX.match(text, start, at):
                first = _SPACE.match(text, at + len(_CLAUDE_CWD)).end()
                if first < len(text):
                    eol = text.find("\n", first)
                    return text[first:eol if eol >= 0 else len(text)].rstrip()
        at = text.find(_CLAUDE_CWD, at + 1)
    return None


def extract_workspace_root(messages: list[llm.Message], system: str = "") -> str | None:
    """A coding client's workspace root: GitHub Copilot's ``<workspace_info>`` block
    (reference 000), Codex CLI's ``<environment_context><cwd>``, or the working directory in
    Claude Code's system prompt; ``None`` if the request names none."""
    for m in messages:
        if m.role == "user":
            found = _copilot_root(m.text) or _codex_root(m.text)
            if found:
                return _root(found)
    for text in (system, *(m.text for m in messages if m.role == "system")):
        found = _claude_root(text)
        if found:
            return _root(found)
    return None


def without_scaffold(text: str) -> str:
    """``text`` with each tagged block (``<tag ...>...</tag>``, the first closing tag of its
    name) replaced by a space: where every closing tag is, read once, then each opening tag
    looked up there."""
    closings: dict[str, list[int]] = {}
    for m in _CLOSE_TAG.finditer(text):
        closings.setdefault(m.group(1), []).append(m.start())
    if not closings:
        return text
    out, done = [], 0
    for m in _OPEN_TAG.finditer(text):
        ends = closings.get(m.group(1))
        if m.start() < done or not ends:
            continue
        i = bisect.bisect_left(ends, m.end())
        if i < len(ends):
            out.append(text[done:m.start()])
            out.append(" ")
            done = ends[i] + len(m.group(1)) + 3
    out.append(text[done:])
    return "".join(out)


def thread_title(messages: list[llm.Message]) -> str:
    """A thread's title: the first words the person wrote, skipping client scaffolding
    (tagged blocks such as ``<system-reminder>`` or ``<environment_context>``); Copilot's
    ``<userRequest>`` is the person's text. ``""`` if no user message has words of its own."""
    for m in messages:
        if m.role != "user":
            continue
        text = m.text
        start = text.find(_USER_REQUEST)
        end = text.find(_USER_REQUEST_END, start + len(_USER_REQUEST)) if start >= 0 else -1
        if end >= 0:
            text = text[start + len(_USER_REQUEST):end]
        else:
            text = without_scaffold(text)
        words, length = [], -1
        for word in _WORD_RUN.finditer(text):  # the first words only, not the whole text's
            words.append(word.group())
            length += len(words[-1]) + 1
            if length > TITLE_LENGTH:
                break
        if words:
            joined = " ".join(words)
            if len(joined) <= TITLE_LENGTH:
                return joined
            cut = joined[:TITLE_LENGTH].rsplit(" ", 1)[0]
            return (cut or joined[:TITLE_LENGTH]) + "…"
    return ""
