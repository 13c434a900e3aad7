"""An operator's message to an agent (reference 003's ``inject``): every rule of it, in one
place, for ``POST /api/v1/inject`` and the feed's ``inject`` command alike.

The rules, in the order they are checked (each refusal is a :class:`GaiaError` with the same
code on both channels):

0. The body (the feed's command without its ``cmd`` and ``id``) is read by one parser,
   :func:`inject_parse`: an object of ``to``, ``payload`` and ``thread_id`` only (400
   ``invalid`` naming the field: an unknown one, a missing ``to`` or ``payload``, a ``to``
   that is not a non-empty string of at most 100 characters, a ``thread_id`` that is neither
   null nor a thread's id as a string).
1. ``payload`` is a non-empty string, or an object: ``{"text": ...}`` / ``{"content": ...}``
   stand for that string, any other object is sent as its JSON (400 ``invalid_payload``).
2. ``to`` names an agent (404 ``agent_not_found``) that the caller's key may use, if the key is
   limited to some agents (403 ``agent_not_allowed``), and that is enabled (400
   ``agent_disabled``).
3. A ``thread_id`` names a thread (404 ``thread_not_found``) of that agent (400
   ``thread_agent_mismatch``); the message continues it as its own client's conversation (a
   ``/v1`` client's thread stays that client's, whoever injects).
4. The agent is not paused (503 ``agent_paused``, ``Retry-After``), nor the organism stopped
   (503 ``organism_stopped``).
5. The thread is not busy with another turn (409 ``thread_busy``; an operator gets an answer
   now, no waiting).

Then the message is stored (the answer carries its thread and message ids) and the agent's
reply is produced in the background on this event loop, seen on the feed like any other turn.
"""

from __future__ import annotations

import asyncio
import json
import logging
import uuid
from dataclasses import dataclass
from typing import Any

from agents import selectors, services
from agents.infra.database import run_db
from agents.kernel import llm
from agents.kernel.exceptions import (
    AgentNotFound,
    AgentPaused,
    GaiaError,
    InvalidRequest,
    NotFound,
    OrganismStopped,
)
from agents.models import Agent, ApiKey
from agents.turns import registry
from agents.turns.runtime import Turn
from agents.turns.spec import TurnSpec

log = logging.getLogger("gaia.turns")


def inject_payload_text(payload: Any) -> str:
    """The text the agent reads for an inject's ``payload`` (rule 1)."""
    if isinstance(payload, dict) and len(payload) == 1:
        (name, only), = payload.items()
        if name in ("text", "content") and isinstance(only, str):
            payload = only
    if isinstance(payload, dict) and payload:
        payload = json.dumps(payload, ensure_ascii=False)
    if not isinstance(payload, str) or not payload.strip():
        raise InvalidRequest(
            "'payload' must be a non-empty string, or an object (an object with only a "
            "'text' or 'content' string stands for that string; any other is sent as its "
            "JSON).", param="payload", code="invalid_payload")
    return payload


INJECT_FIELDS = ("to", "payload", "thread_id")
TO_MAX_CHARS = 100  # an agent's slug is no longer


@dataclass(frozen=True)
class InjectBody:
    """An inject's fields as :func:`inject_parse` read them."""

    to: str
    payload: str  # the text the agent reads (rule 1)
    thread_id: str | None  # a UUID's canonical text


def _invalid(param: str, message: str, code: str = "invalid") -> InvalidRequest:
    return InvalidRequest(f"{param}: {message}", param=param, code=code)


def inject_parse(body: Any) -> InjectBody:
    """Rules 0 and 1 on what a client sent: ``POST /api/v1/inject``'s JSON body, the feed's
    ``inject`` command without ``cmd`` and ``id``; the same answer, whichever it came by.
    Raises :class:`InvalidRequest` (``invalid`` naming the field, ``invalid_payload``)."""
    if not isinstance(body, dict):
        raise InvalidRequest("The body must be a JSON object: {to, payload, thread_id?}.",
                             code="invalid")
    unknown = sorted(str(k) for k in body if k not in INJECT_FIELDS)
    if unknown:
        raise _invalid(unknown[0], "Unknown field; an inject has 'to', 'payload' and "
                       "'thread_id'.")
    if "to" not in body:
        raise _invalid("to", "This field is required (the agent's slug).")
    to = body["to"]
    if not isinstance(to, str) or not to.strip():
        raise _invalid("to", "The agent's slug, a non-empty string.")
    if len(to) > TO_MAX_CHARS:
        raise _invalid("to", f"At most {TO_MAX_CHARS} characters (an agent's slug).")
    if "payload" not in body:
        raise _invalid("payload", "This field is required.")
    text = inject_payload_text(body["payload"])
    thread_id = body.get("thread_id")
    if thread_id is not None:
        if not isinstance(thread_id, str):
            raise _invalid("thread_id", "A thread's id (a UUID, as a string) or null.")
        try:
            thread_id = str(uuid.UUID(thread_id))
        except ValueError:
            raise _invalid("thread_id", "Must be a valid UUID (a thread's id).") from None
    return InjectBody(to=to, payload=text, thread_id=thread_id)


@dataclass
class Inject:
    """A message that passed the rules: its text, the agent it goes to, the thread it
    continues (if any) and the key and user the turn runs as."""

    text: str
    agent: Agent
    thread_id: str | None
    api_key: ApiKey | None
    user: str | None
    actor: services.Actor | None = None  # the operator who sends it (audit trail, label)


def inject_prepare(*, to: str, payload: Any, thread_id: str | None, api_key: ApiKey | None,
                   operator: str | None, actor: services.Actor | None = None) -> Inject:
    """Rules 1 to 4 (reads the database: call it on the thread whose connection sees the
    caller's data). ``api_key`` is the caller's key (``None`` for a staff session, whose
    ``operator`` is the user's name)."""
    text = inject_payload_text(payload)
    agent = None
    if "\x00" not in to:
        agent = Agent.objects.select_related("provider").filter(slug=to).first()
    if agent is None:
        raise AgentNotFound(f"No agent '{to}'.", param="to", code="agent_not_found")
    selectors.api_key_agent_check(api_key=api_key, agent=agent, param="to")
    if not agent.enabled:
        raise InvalidRequest(f"The agent '{agent.slug}' is disabled.", param="to",
                             code="agent_disabled")
    selectors.agent_provider_chain_load(agent)  # its fallback providers and knowledge, as /v1
    target = Inject(text, agent, None, api_key, None if api_key is not None else operator,
                    actor)
    if thread_id is not None:
        try:
            thread = selectors.thread_get(thread_id=thread_id)
        except NotFound:
            raise NotFound(f"No thread with id '{thread_id}'.", param="thread_id",
                           code="thread_not_found") from None
        if thread.agent_id != agent.pk:
            raise InvalidRequest(
                f"Thread {thread.pk} belongs to the agent '{thread.agent.slug}', not "
                f"'{agent.slug}'.", param="thread_id", code="thread_agent_mismatch")
        # The thread continues as its own client's conversation.
        target.thread_id, target.api_key, target.user = (str(thread.pk), thread.api_key,
                                                         thread.user or None)
    if agent.paused:
        raise AgentPaused(f"The agent '{agent.slug}' is paused by an operator; resume it first.",
                          retry_after=services.AGENT_PAUSED_RETRY_AFTER)
    if selectors.organism_state().stopped:
        raise OrganismStopped("Gaia is stopped by an operator; start it first.",
                              retry_after=services.ORGANISM_STOPPED_RETRY_AFTER)
    return target


@dataclass
class Injected:
    thread_id: str
    message_id: int
    task: Any  # asyncio.Task[None]: the reply, produced in the background


async def inject(*, to: str, payload: Any, thread_id: str | None = None,
                 api_key: ApiKey | None = None, operator: str | None = None,
                 actor: services.Actor | None = None) -> Injected:
    """Send an operator's message (see the module docstring for the rules): rules 1 to 4 on
    a database thread (:func:`inject_prepare`), then :func:`turn_inject`."""
    prepared = await run_db(inject_prepare, to=to, payload=payload, thread_id=thread_id,
                            api_key=api_key, operator=operator, actor=actor)
    return await turn_inject(prepared)


async def turn_inject(target: Inject) -> Injected:
    """Store a prepared message and have its agent reply (rule 5: a busy thread is a 409).
    Runs on the event loop that is to produce the reply (the server's). Raises before
    anything is stored; the background task records its own outcome (reply, error or
    kill)."""
    text = target.text
    request = llm.LLMRequest(
        model=target.agent.slug, system="", user=target.user,
        messages=[llm.Message(role="user", parts=(llm.TextPart(text),))],
    )
    turn = Turn(TurnSpec(
        agent=target.agent, api_key=target.api_key, request=request, dialect="operator",
        response_id=f"inject-{uuid.uuid4().hex[:24]}", thread_id=target.thread_id,
        session_key=None if target.thread_id else f"inject:{uuid.uuid4().hex}",
        user=target.user, store_first=True, lease_wait=0,
        # the message is labelled with who sent it, not the client whose thread it joins
        sender=f"operator {target.actor.label}" if target.actor else "",
    ))
    await turn.open()
    assert turn.start is not None
    start = turn.start
    await run_db(services.audit_record, actor=target.actor, action="inject",
                 target=f"thread:{start.thread_id}",
                 detail={"agent": target.agent.slug, "message_id": start.message_ids[-1]})

    async def reply() -> None:
        try:
            await turn.collect(await turn.first(wait=3600))
        except GaiaError:
            pass  # recorded on the thread by the turn itself, and sent to the feed
        except Exception:
            log.exception("injected turn failed on thread %s", start.thread_id)

    task = asyncio.create_task(reply(), name=f"inject-{start.thread_id}")
    registry.background_keep(task)
    return Injected(str(start.thread_id), start.message_ids[-1], task)
