"""Background responses (OpenAI's ``background: true``): a Responses API turn that a worker
runs after the request has been answered, and the events its stream produced."""

from __future__ import annotations

from django.db import models

from agents.models.keys import ApiKey
from agents.models.threads import Thread


class BackgroundResponse(models.Model):
    """One ``POST /v1/responses`` with ``background: true``: what the client asked, where it
    stands (``queued → in_progress → completed | failed | cancelled | incomplete``), and once
    it has ended the response object it answered with.

    A worker claims it (a conditional update from ``queued``) and beats while it runs; one
    whose beat stops (its worker died) is queued again, or failed after its last attempt."""

    class Status(models.TextChoices):
        QUEUED = "queued"
        IN_PROGRESS = "in_progress"
        COMPLETED = "completed"
        FAILED = "failed"
        CANCELLED = "cancelled"
        INCOMPLETE = "incomplete"

    FINISHED = (Status.COMPLETED, Status.FAILED, Status.CANCELLED, Status.INCOMPLETE)

    id = models.CharField(primary_key=True, max_length=100, editable=False)
    api_key = models.ForeignKey(ApiKey, null=True, blank=True, on_delete=models.CASCADE,
                                related_name="background_responses")
    model = models.CharField(max_length=200, help_text="The model the client named.")
    status = models.CharField(max_length=20, choices=Status.choices, default=Status.QUEUED)
    request = models.JSONField(help_text="The request's body, as the client sent it.")
    stream = models.BooleanField(default=False, help_text="Its events are kept to resume.")
    response = models.JSONField(null=True, blank=True,
                                help_text="The response object, once the turn has ended.")
    error = models.TextField(blank=True)
    thread = models.ForeignKey(Thread, null=True, blank=True, on_delete=models.SET_NULL,
                               related_name="+")
    attempts = models.PositiveIntegerField(default=0)
    worker = models.CharField(max_length=200, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    started_at = models.DateTimeField(null=True, blank=True)
    heartbeat_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at"]
        indexes = [models.Index(fields=["status", "heartbeat_at"], name="bgresp_status_beat")]

    def __str__(self) -> str:
        return self.id

    @property
    def finished(self) -> bool:
        return self.status in self.FINISHED


class BackgroundResponseEvent(models.Model):
    """One event of a background response's stream (where Redis does not keep them): its
    ``sequence_number`` and its SSE frame, bounded per response
    (``GAIA_BACKGROUND_MAX_EVENTS``)."""

    response = models.ForeignKey(BackgroundResponse, on_delete=models.CASCADE,
                                 related_name="events")
    seq = models.PositiveIntegerField()
    frame = models.TextField()

    class Meta:
        ordering = ["response", "seq"]
        constraints = [models.UniqueConstraint(fields=["response", "seq"],
                                               name="bgresp_event_seq_unique")]

    def __str__(self) -> str:
        return f"{self.response_id}#{self.seq}"
