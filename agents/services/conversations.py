"""Writes of conversations (OpenAI's Conversations API, ``/v1/conversations``): a conversation
is a thread the client names by a ``conv_…`` id; its items are the thread's messages.

Every write is the key's own: a conversation of another key is not found
(:func:`agents.selectors.conversation_get`). Messages are added to a thread only while no
turn holds its lease (409 otherwise), at the thread's next positions, and the feed hears of
them as of a turn's messages: operators see a conversation as any other thread.
"""

from __future__ import annotations

from typing import Any

from django.db import transaction
from django.db.models import F
from django.utils import timezone

from agents import selectors
from agents.infra.rows import rows_insert
from agents.kernel import llm
from agents.kernel.exceptions import Conflict, PermissionDenied
from agents.models import Agent, ApiKey, Conversation, Message, Thread
from agents.outlet import events, realtime
from agents.services.digests import digest_chain

DIALECT = "responses"  # what the conversation's messages are stored as (its turns' dialect)


def _home_agent(api_key: ApiKey | None) -> Agent:
    """The agent a new conversation's thread starts with, before any turn names one: the
    first agent this key may use (the allowed-agents rule of ``/v1/models``), preferring one
    not paused. Its first turn moves the thread to the agent that answers it."""
    agents = selectors.model_list(api_key=api_key)
    agent = next((a for a in agents if not a.paused), agents[0] if agents else None)
    if agent is None:
        raise PermissionDenied("This API key may use no model: a conversation needs one.",
                               code="no_model_available")
    return agent


def _announce(*, thread: Thread, agent_slug: str, rows: list[Message], created: bool,
              api_key: ApiKey | None) -> None:
    client = selectors.client_label(user=thread.user, api_key=api_key)
    announced = [events.thread_created(thread, agent=agent_slug, client=client)] if created \
        else [events.thread_updated(thread_id=thread.pk, agent=agent_slug, status=thread.status,
                                    message_count=thread.message_count, at=thread.updated_at)]
    announced += [events.message(row, agent=agent_slug, client=client) for row in rows]
    for event in announced:
        realtime.send_event_on_commit(event)


def _rows(thread: Thread, messages: list[llm.Message], *, start: int) -> list[Message]:
    return [Message.from_llm(m, thread_id=thread.pk, seq=start + i, dialect=DIALECT,
                             agent_id=thread.agent_id) for i, m in enumerate(messages)]


@transaction.atomic
def conversation_create(*, api_key: ApiKey | None, metadata: dict[str, str],
                        messages: list[llm.Message]) -> tuple[Conversation, list[Message]]:
    """A new conversation of ``api_key``: a thread holding ``messages`` (its first items),
    with ``metadata``. Returns it with the stored rows. Raises :class:`PermissionDenied` if
    the key may use no agent (a thread belongs to one)."""
    agent = _home_agent(api_key)
    conversation = Conversation(metadata=metadata)
    chain = digest_chain(messages)
    thread = Thread(
        agent=agent, session_key=f"conversation:{conversation.pk}", api_key=api_key,
        title=next((m.text for m in messages if m.role == "user"), "")[:200],
        history_digest=chain[-1], message_count=len(messages),
        status=Thread.Status.COMPLETED if messages else Thread.Status.ACTIVE,
    )
    thread.save()
    conversation.thread = thread
    conversation.save()
    rows = list(rows_insert(_rows(thread, messages, start=0)))
    _announce(thread=thread, agent_slug=agent.slug, rows=rows, created=True, api_key=api_key)
    return conversation, rows


def conversation_update(*, conversation: Conversation, metadata: dict[str, str]
                        ) -> Conversation:
    """Replace the conversation's metadata (OpenAI's update: the whole set)."""
    conversation.metadata = metadata
    conversation.save(update_fields=["metadata"])
    return conversation


def conversation_delete(*, conversation: Conversation) -> None:
    """Forget the conversation's id: the client reaches it no more. Its thread stays, the
    record operators keep (OpenAI's delete leaves a conversation's items too)."""
    conversation.delete()


def _thread_free(thread_id: Any) -> Thread:
    """The thread, locked for this transaction, if no turn holds its lease (else 409)."""
    thread = Thread.objects.select_for_update(of=("self",)).select_related("agent", "api_key").get(
        pk=thread_id)
    if thread.lock_expires_at is not None and thread.lock_expires_at > timezone.now():
        raise Conflict("A response is still in progress in this conversation; try again when "
                       "it has finished.", code="conversation_locked")
    return thread


@transaction.atomic
def conversation_items_add(*, conversation: Conversation, messages: list[llm.Message]
                           ) -> list[Message]:
    """Append ``messages`` to the conversation's thread (after its last message); the rows
    stored. Raises :class:`Conflict` while a turn runs in it."""
    thread = _thread_free(conversation.thread_id)
    rows = list(rows_insert(_rows(thread, messages, start=thread.message_count)))
    now = timezone.now()
    thread.message_count += len(rows)
    thread.history_digest = digest_chain(messages, start=thread.history_digest)[-1]
    thread.updated_at = now
    Thread.objects.filter(pk=thread.pk).update(
        message_count=thread.message_count, history_digest=thread.history_digest,
        updated_at=now)
    _announce(thread=thread, agent_slug=thread.agent.slug, rows=rows, created=False,
              api_key=thread.api_key)
    return rows


@transaction.atomic
def conversation_item_remove(*, conversation: Conversation, row: Message,
                             part: str, index: int = 0) -> None:
    """Remove one item of the conversation: ``part`` of the message ``row`` (``message``:
    its words, ``reasoning``, ``call``: its ``index``-th tool call). A message left with
    nothing is deleted. Raises :class:`Conflict` while a turn runs in it.

    A message changed in place bumps the thread's ``messages_removed``, as a deletion does
    (its trigger): a process keeping the conversation in memory reads it afresh
    (:mod:`agents.selectors.history`)."""
    _thread_free(conversation.thread_id)
    if part == "reasoning":
        row.reasoning = ""
    elif part == "call":
        calls = list(row.tool_calls or [])
        if 0 <= index < len(calls):
            del calls[index]
        row.tool_calls = calls or None
    else:
        row.content, row.parts = "", None
    if row.role != Message.Role.ASSISTANT or not (row.content or row.reasoning
                                                  or row.tool_calls):
        row.delete()
        return
    row.save(update_fields=["content", "parts", "reasoning", "tool_calls"])
    Thread.objects.filter(pk=conversation.thread_id).update(
        messages_removed=F("messages_removed") + 1)


@transaction.atomic
def conversation_turn_thread(*, conversation_id: str, api_key: ApiKey | None, agent: Agent,
                             title: str) -> str:
    """The thread a turn in the conversation ``conversation_id`` continues (its id), for the
    agent that answers it: a thread with no reply yet moves to that agent (a conversation is
    created before any model is named); a blank title takes ``title``. Raises
    :class:`NotFound` (``param="conversation"``) for a conversation not this key's."""
    conversation = selectors.conversation_get(conversation_id=conversation_id,
                                              api_key=api_key, param="conversation")
    thread = conversation.thread
    update: dict[str, Any] = {}
    if thread.agent_id != agent.pk and not thread.messages.filter(
            role=Message.Role.ASSISTANT).exists():
        update["agent_id"] = agent.pk
        thread.messages.update(agent_id=agent.pk)
    if not thread.title and title:
        update["title"] = title[:200]
    if update:
        Thread.objects.filter(pk=thread.pk).update(**update)
    return str(thread.pk)
