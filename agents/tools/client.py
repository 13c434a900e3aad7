"""A Responses client's own MCP servers (``{"type": "mcp", "server_label", "server_url",
"require_approval", "allowed_tools", "headers"}``), which Gaia calls for it as OpenAI's
Responses API does: every rule of them, for the dialect that reads them and the loop that
runs them.

Only streamable HTTP servers, and only at URLs an operator allowed
(``GAIA_MCP_ALLOWED_URLS``: empty by default, so a client's ``mcp`` tool is refused with a
400 that names the setting). Gaia never starts a process or reaches an address because a
client asked it to.
"""

from __future__ import annotations

import re
from typing import Any

from django.conf import settings

from agents.kernel import llm
from agents.kernel.exceptions import InvalidRequest
from agents.selectors.urls import Url, UrlRefused, url_listed, url_parsed

LABEL = re.compile(r"^[A-Za-z0-9_-]{1,64}$")


def url_allowed(url: str | Url) -> bool:
    """Whether an operator allowed ``url`` (``GAIA_MCP_ALLOWED_URLS``: exact, or a path prefix
    when the rule ends in ``*``), compared parsed: scheme, host and port exactly
    (:func:`agents.selectors.urls.url_matches`)."""
    return url_listed(url, settings.GAIA_MCP_ALLOWED_URLS)


def _names(value: Any, param: str) -> frozenset[str]:
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise InvalidRequest("'tool_names' is a list of tool names.", param=param)
    return frozenset(value)


def _approval(value: Any, param: str) -> Any:
    if value is None:
        return "always"  # OpenAI's default: ask before anything reaches the server
    if value in ("always", "never"):
        return value
    if isinstance(value, dict) and set(value) <= {"always", "never"}:
        rule = {}
        for side in ("always", "never"):
            if side in value:
                part = value[side] if isinstance(value[side], dict) else {}
                rule[side] = _names(part.get("tool_names", []), f"{param}.{side}.tool_names")
                rule[f"{side}_read_only"] = part.get("read_only") is True
        return rule
    raise InvalidRequest("'require_approval' is 'always', 'never', or {\"always\": "
                         "{\"tool_names\": [...]}, \"never\": {\"tool_names\": [...]}}.",
                         param=param)


def client_mcp_server(tool: dict[str, Any], param: str) -> llm.ClientMcp:
    """A client's ``mcp`` tool as Gaia will call it, or :class:`InvalidRequest` saying why
    not (``param``: where the tool is in the request, e.g. ``tools[0]``)."""
    label = tool.get("server_label")
    if not isinstance(label, str) or not LABEL.match(label):
        raise InvalidRequest("An mcp tool needs a 'server_label' (letters, digits, _ and -).",
                             param=f"{param}.server_label")
    url = tool.get("server_url")
    if not isinstance(url, str) or not url:
        raise InvalidRequest("Gaia calls MCP servers by 'server_url' only (streamable HTTP); "
                             "connectors and tunnels are not supported.",
                             param=f"{param}.server_url", code="unsupported_mcp_server")
    try:
        parsed = url_parsed(url)
    except UrlRefused as exc:
        raise InvalidRequest(f"'server_url' must be a plain http(s) URL of a streamable HTTP "
                             f"MCP server: {exc}.", param=f"{param}.server_url",
                             code="mcp_server_not_allowed") from None
    if not url_allowed(parsed):
        raise InvalidRequest(
            f"The MCP server {parsed.text!r} is not allowed: an operator lists the servers "
            "clients may use in the GAIA_MCP_ALLOWED_URLS setting (empty by default).",
            param=f"{param}.server_url", code="mcp_server_not_allowed")
    headers = tool.get("headers") or {}
    if not isinstance(headers, dict) or not all(
            isinstance(k, str) and isinstance(v, str) for k, v in headers.items()):
        raise InvalidRequest("'headers' is an object of strings.", param=f"{param}.headers")
    if isinstance(tool.get("authorization"), str) and tool["authorization"]:
        headers = {**headers, "Authorization": f"Bearer {tool['authorization']}"}
    allowed, read_only = tool.get("allowed_tools"), False
    if isinstance(allowed, dict):
        read_only = allowed.get("read_only") is True
        allowed = allowed.get("tool_names")
    return llm.ClientMcp(
        label=label, url=parsed.text, headers=tuple(sorted(headers.items())),
        allowed_tools=None if allowed is None else _names(allowed, f"{param}.allowed_tools"),
        read_only_only=read_only,
        require_approval=_approval(tool.get("require_approval"), f"{param}.require_approval"))


def client_tool_allowed(server: llm.ClientMcp, tool: Any) -> bool:
    """Whether the client let its model use ``tool`` (an MCP ``Tool``) of ``server``."""
    if server.allowed_tools is not None and tool.name not in server.allowed_tools:
        return False
    return not server.read_only_only or _read_only(tool)


def client_approval_needed(server: llm.ClientMcp, tool: Any) -> bool:
    """Whether a call of ``tool`` waits for the client's ``mcp_approval_response``."""
    rule = server.require_approval
    if rule in ("always", "never"):
        return rule == "always"
    if tool.name in rule.get("never", ()) or (rule.get("never_read_only") and _read_only(tool)):
        return False
    if tool.name in rule.get("always", ()) or (rule.get("always_read_only")
                                               and _read_only(tool)):
        return True
    return "never" in rule  # a tool neither list names: asked, unless only "always" is given


def _read_only(tool: Any) -> bool:
    annotations = getattr(tool, "annotations", None)
    return bool(getattr(annotations, "read_only_hint", None)
                or getattr(annotations, "readOnlyHint", None))
