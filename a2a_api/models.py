"""An A2A task: one turn of an agent, asked by a key over ``/a2a/<slug>``.

Its row is what every web process knows of it: the process that runs the turn writes its state
as it changes (``working``, ``input-required`` while a tool call waits for an operator, then how
it ended); ``GetTask``, ``CancelTask`` and ``SubscribeToTask`` read it from any process. Its
conversation is the thread's (``contextId`` is the thread's id), its reply the stored reply of
``response_id``.
"""

from __future__ import annotations

import uuid

from django.db import models


class Task(models.Model):
    class State(models.TextChoices):
        WORKING = "working"
        INPUT_REQUIRED = "input-required"  # a tool call waits for an operator's approval
        COMPLETED = "completed"
        FAILED = "failed"
        CANCELED = "canceled"

    TERMINAL = (State.COMPLETED, State.FAILED, State.CANCELED)

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    agent = models.ForeignKey("agents.Agent", on_delete=models.CASCADE, related_name="+")
    # the key that asked: only it reads, cancels or follows the task (none: anonymous mode)
    api_key = models.ForeignKey("agents.ApiKey", on_delete=models.CASCADE, null=True,
                                blank=True, related_name="+")
    thread = models.ForeignKey("agents.Thread", on_delete=models.CASCADE, related_name="+")
    response_id = models.CharField(max_length=100)
    message_id = models.CharField(max_length=200, blank=True)  # the client's messageId
    text = models.TextField(blank=True)  # what the client said (its text and data parts)
    state = models.CharField(max_length=20, choices=State.choices, default=State.WORKING)
    reason = models.TextField(blank=True)  # why it failed or was canceled
    input_tokens = models.PositiveIntegerField(default=0)
    output_tokens = models.PositiveIntegerField(default=0)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        indexes = [models.Index(fields=["api_key", "-created_at"])]

    def __str__(self) -> str:
        return f"{self.agent_id}:{self.id} ({self.state})"

    @property
    def done(self) -> bool:
        return self.state in self.TERMINAL
