"""What the feed's consumer (:mod:`agents.feed.consumers`) reads of a socket and of its commands:
the key in the handshake, which thread and agents an event is about (subscriptions), and
each command's fields, checked (an :class:`InvalidRequest` or :class:`NotFound` is the
command's ``error``, as REST would answer it)."""

from __future__ import annotations

import json
import uuid
from typing import Any

from agents import selectors
from agents.http.jsonbody import json_parse, unstorable_where
from agents.kernel.exceptions import AgentNotFound, GaiaError, InvalidRequest, NotFound
from agents.models import Agent, Thread


def header_key(scope: dict[str, Any]) -> str | None:
    headers = dict(scope.get("headers") or [])
    auth = headers.get(b"authorization", b"").decode("latin1").strip()
    if auth[:7].lower() == "bearer ":
        return auth[7:].strip() or None
    return headers.get(b"x-api-key", b"").decode("latin1").strip() or None


def event_thread(event: dict[str, Any]) -> str | None:
    if "thread_id" in event:
        return event["thread_id"]
    if "thread" in event:
        return event["thread"].get("id")
    if "message" in event:
        return event["message"].get("thread_id")
    return None


def event_agents(event: dict[str, Any]) -> tuple[str, ...]:
    if "agent" in event:
        return (event["agent"],)
    if "thread" in event:
        return (event["thread"].get("agent"),)
    if "message" in event:  # an agent's reply comes from it, anything else goes to it
        return (event["message"].get("from"), event["message"].get("to"))
    return ()


def command_parse(text: str | None) -> tuple[dict[str, Any] | None, InvalidRequest | None, Any]:
    """A frame as a command: ``(command, None, its id)``, or ``(None, why not, its id if it
    can be read)``. The rule every JSON input follows (:mod:`agents.http.jsonbody`): too deep, a
    NUL or a lone surrogate is refused; a frame that is no JSON object is ``parse_error``,
    as the operator API calls a body it cannot read (the REST and feed answers are one)."""
    try:
        content = json_parse(text, what="the command") if text is not None else None
    except InvalidRequest as exc:
        problem = (InvalidRequest(exc.message, code="parse_error") if exc.code == "invalid_json"
                   else exc)
        return None, problem, _frame_id(text)
    if not isinstance(content, dict):
        return None, InvalidRequest("Commands are JSON objects with a 'cmd'.",
                                    code="parse_error"), None
    return content, None, content.get("id")


def _frame_id(text: str | None) -> Any:
    """The ``id`` of a command the rule refused, when it has a plain one (so the client can
    tell which command the error answers); else ``None``."""
    try:
        value = json.loads(text) if text is not None else None
    except (ValueError, RecursionError):
        return None
    found = value.get("id") if isinstance(value, dict) else None
    if isinstance(found, int | float) and not isinstance(found, bool) or (
            isinstance(found, str) and len(found) <= 200 and unstorable_where(found) is None):
        return found
    return None


def error_code(error: GaiaError) -> str:
    """An error's ``code`` as the operator API renders it (:mod:`agents.http.rest`)."""
    return error.code or ("invalid" if error.status == 400 else error.kind)


def str_list(content: dict[str, Any], name: str) -> frozenset[str]:
    value = content.get(name) or []
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise InvalidRequest(f"'{name}' must be a list of strings.", param=name)
    return frozenset(value)


def required_str(content: dict[str, Any], name: str) -> str:
    value = content.get(name)
    if not isinstance(value, str) or not value.strip():
        raise InvalidRequest(f"'{name}' is required (a non-empty string).", param=name)
    return value.strip()


def command_thread_id(content: dict[str, Any], *, required: bool) -> str | None:
    if not required and content.get("thread_id") is None:
        return None
    raw = required_str(content, "thread_id")
    try:
        return str(uuid.UUID(raw))
    except ValueError:
        raise NotFound(f"No thread with id '{raw}'.", param="thread_id",
                       code="thread_not_found") from None


def agent_get(slug: str) -> Agent:
    agent = Agent.objects.select_related("provider").filter(slug=slug).first()
    if agent is None:
        raise AgentNotFound(f"No agent '{slug}'.", param="agent", code="agent_not_found")
    return agent


def thread_get(thread_id: str) -> Thread:
    thread = Thread.objects.select_related("agent").filter(pk=thread_id).first()
    if thread is None:
        raise NotFound(f"No thread with id '{thread_id}'.", param="thread_id",
                       code="thread_not_found")
    return thread


def feed_snapshot() -> dict[str, Any]:
    """What a new feed socket is told first (``connected``)."""
    return {
        "organism": selectors.organism_info(),
        "agents": selectors.agent_list_public(),
        "threads": selectors.thread_list_active(),
    }
