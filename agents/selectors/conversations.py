"""Reads of conversations (``/v1/conversations``): a key's own conversations and their
messages, in order, a page at a time."""

from __future__ import annotations

from django.db.models import QuerySet

from agents.kernel.exceptions import NotFound
from agents.models import ApiKey, Conversation, Message

MAX_CONVERSATION_ID = 40  # Conversation.id


def conversation_get(*, conversation_id: str, api_key: ApiKey | None,
                     param: str = "conversation_id") -> Conversation:
    """The conversation ``conversation_id`` of ``api_key``'s, with its thread; another key's
    is as unknown as one that never was (404 ``conversation_not_found``, naming ``param``)."""
    found = None
    if len(conversation_id) <= MAX_CONVERSATION_ID and "\x00" not in conversation_id:
        found = (Conversation.objects.select_related("thread")
                 .filter(pk=conversation_id, thread__api_key=api_key).first())
    if found is None:
        raise NotFound(f"Conversation with id '{conversation_id}' not found.", param=param,
                       code="conversation_not_found")
    return found


def conversation_messages(*, conversation: Conversation) -> QuerySet[Message]:
    """The conversation's messages (its thread's, less the agent's inner work), first first."""
    return Message.objects.filter(thread_id=conversation.thread_id, internal=False
                                  ).order_by("seq")


def conversation_message_get(*, conversation: Conversation, pk: int | None = None,
                             response_id: str | None = None) -> Message | None:
    """One message of the conversation: by its id, or the reply ``response_id``."""
    rows = conversation_messages(conversation=conversation)
    if pk is not None:
        return rows.filter(pk=pk).first()
    return rows.filter(response_id=response_id, role=Message.Role.ASSISTANT).order_by(
        "-seq").first()


def conversation_message_page(*, conversation: Conversation, after_seq: int | None,
                              descending: bool, rows: int) -> list[Message]:
    """At most ``rows`` messages of the conversation from the position ``after_seq``
    (included: the caller drops the items of it it has shown), in the order asked."""
    found = conversation_messages(conversation=conversation)
    if descending:
        found = found.order_by("-seq")
        if after_seq is not None:
            found = found.filter(seq__lte=after_seq)
    elif after_seq is not None:
        found = found.filter(seq__gte=after_seq)
    return list(found[:rows])
