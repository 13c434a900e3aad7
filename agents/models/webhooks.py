"""Webhooks by the Standard Webhooks specification (https://www.standardwebhooks.com/):
endpoints staff register, and each event's delivery to one of them with every attempt logged
(``agents.services.webhooks``).

An endpoint's secret (``whsec_`` and 24 random bytes in base64) is stored as it is, because
Gaia signs with it; it is shown once, when the endpoint is made, and never returned again."""

from __future__ import annotations

from django.db import models

# Every event Gaia may send; an endpoint subscribes to some of them. The response.* and
# schedule.* events are sent by the background responses and schedules that come with them.
WEBHOOK_EVENT_TYPES = (
    "response.completed",
    "response.failed",
    "response.cancelled",
    "response.incomplete",
    "approval.requested",
    "approval.decided",
    "run.finished",
    "budget.threshold",
    "budget.exceeded",
    "schedule.failed",
)
WEBHOOK_RESPONSE_CHARS = 1000  # what an attempt keeps of the receiver's answer


class WebhookEndpoint(models.Model):
    url = models.CharField(max_length=2048, help_text="Where events are POSTed; it must pass "
                           "GAIA_WEBHOOK_ALLOWED_URLS (private addresses only when listed).")
    description = models.CharField(max_length=500, blank=True)
    events = models.JSONField(default=list, help_text="The event types it receives.")
    secret = models.CharField(max_length=100, editable=False,
                              help_text="whsec_...: signs every delivery; never shown again.")
    enabled = models.BooleanField(default=True)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["pk"]

    def __str__(self) -> str:
        return self.url


class WebhookDelivery(models.Model):
    """One event for one endpoint: its state, and its last attempt's outcome (each attempt is
    a :class:`WebhookAttempt`)."""

    class State(models.TextChoices):
        PENDING = "pending"  # waiting for its next attempt (next_attempt_at)
        SENDING = "sending"
        SUCCEEDED = "succeeded"
        FAILED = "failed"  # every attempt failed (or its endpoint is disabled)

    endpoint = models.ForeignKey(WebhookEndpoint, on_delete=models.CASCADE,
                                 related_name="deliveries")
    event_id = models.CharField(max_length=40, help_text="evt_...: the webhook-id header, the "
                                "same on every attempt (receivers deduplicate by it).")
    type = models.CharField(max_length=40)
    payload = models.JSONField(help_text="The body: id, type, created_at, data.")
    state = models.CharField(max_length=10, choices=State.choices, default=State.PENDING)
    attempts = models.PositiveIntegerField(default=0, help_text="Attempts made.")
    retrying = models.BooleanField(default=True, help_text="A failed attempt is retried "
                                   "(false after a manual redelivery: that is one attempt).")
    status_code = models.PositiveIntegerField(null=True, blank=True)
    latency_ms = models.PositiveIntegerField(null=True, blank=True)
    response = models.TextField(blank=True)
    error = models.TextField(blank=True)
    next_attempt_at = models.DateTimeField(null=True, blank=True)
    claimed_at = models.DateTimeField(null=True, blank=True, editable=False)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["-pk"]
        indexes = [models.Index(fields=["endpoint", "-id"], name="webhook_delivery_log"),
                   models.Index(fields=["state", "next_attempt_at"], name="webhook_delivery_due")]

    def __str__(self) -> str:
        return f"{self.event_id} -> {self.endpoint_id}"


class WebhookAttempt(models.Model):
    delivery = models.ForeignKey(WebhookDelivery, on_delete=models.CASCADE,
                                 related_name="attempt_log")
    number = models.PositiveIntegerField()
    manual = models.BooleanField(default=False)
    started_at = models.DateTimeField()
    status_code = models.PositiveIntegerField(null=True, blank=True)
    latency_ms = models.PositiveIntegerField(default=0)
    response = models.TextField(blank=True)
    error = models.TextField(blank=True)

    class Meta:
        ordering = ["delivery", "number"]

    def __str__(self) -> str:
        return f"{self.delivery_id}#{self.number}"
