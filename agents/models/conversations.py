"""Conversations (OpenAI's Conversations API): a client's name for one of its threads."""

from __future__ import annotations

import uuid

from django.db import models

from agents.models.threads import Thread


def conversation_id_new() -> str:
    return f"conv_{uuid.uuid4().hex}"


class Conversation(models.Model):
    """A thread a client created, and holds, by its ``conv_…`` id (``/v1/conversations``).

    The conversation *is* the thread: its items are the thread's messages, its turns the
    thread's turns, operators see and act on it as on any thread. Deleting the conversation
    forgets the name (the client cannot reach it any more); the thread stays as the record,
    as a Responses API client's threads do."""

    id = models.CharField(primary_key=True, max_length=40, default=conversation_id_new,
                          editable=False)
    thread = models.OneToOneField(Thread, on_delete=models.CASCADE, related_name="conversation")
    metadata = models.JSONField(default=dict, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["-created_at"]

    def __str__(self) -> str:
        return self.id
