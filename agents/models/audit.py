from __future__ import annotations

from django.conf import settings
from django.db import models


class AuditEvent(models.Model):
    """One operator action: who (a staff user or an API key), when, what, on what, from where.
    Written by :func:`agents.services.audit_record` in the same transaction as the change it
    records; never edited."""

    class Action(models.TextChoices):
        INJECT = "inject"
        KILL = "kill"
        PAUSE = "pause"
        RESUME = "resume"
        RELOAD = "reload"
        STOP = "stop"  # the organism: no new turn (POST /api/v1/organism/stop)
        START = "start"
        APPROVE = "approve"
        DENY = "deny"
        EXPIRE = "expire"  # an approval nobody decided in time (actor: system)
        REFUSE = "refuse"  # a call refused: its thread had too many approvals waiting
        RUN_CANCEL = "run_cancel"
        RUN_RESUME = "run_resume"
        KEY_CREATE = "key_create"
        KEY_UPDATE = "key_update"
        KEY_REVOKE = "key_revoke"
        PROVIDER_CREATE = "provider_create"
        PROVIDER_UPDATE = "provider_update"
        PROVIDER_TEST = "provider_test"
        PRICE_SET = "price_set"
        PRICE_DELETE = "price_delete"
        BUDGET_CREATE = "budget_create"
        BUDGET_UPDATE = "budget_update"
        BUDGET_DELETE = "budget_delete"
        WEBHOOK_CREATE = "webhook_create"
        WEBHOOK_UPDATE = "webhook_update"
        WEBHOOK_DELETE = "webhook_delete"
        WEBHOOK_REDELIVER = "webhook_redeliver"
        SCHEDULE_CREATE = "schedule_create"
        SCHEDULE_UPDATE = "schedule_update"
        SCHEDULE_DELETE = "schedule_delete"
        AGENT_CREATE = "agent_create"
        AGENT_UPDATE = "agent_update"
        AGENT_DELETE = "agent_delete"

    created_at = models.DateTimeField(auto_now_add=True, db_index=True)
    actor = models.CharField(max_length=320, help_text="user:<name> or key:<name> (<prefix>).")
    user = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True,
                             on_delete=models.SET_NULL, related_name="+")
    api_key = models.ForeignKey("agents.ApiKey", null=True, blank=True,
                                on_delete=models.SET_NULL, related_name="+")
    channel = models.CharField(max_length=20,
                               help_text="rest, ws, page, admin, v1 (a client) or system.")
    ip = models.GenericIPAddressField(null=True, blank=True)
    action = models.CharField(max_length=32, choices=Action.choices)
    target = models.CharField(max_length=300, help_text="agent:<slug>, thread:<id>, run:<id>, "
                              "key:<prefix>, provider:<name>, approval:<id> or organism.")
    detail = models.JSONField(default=dict, blank=True)

    class Meta:
        ordering = ["-created_at", "-pk"]
        indexes = [models.Index(fields=["action", "-created_at"], name="audit_action_time"),
                   models.Index(fields=["target", "-created_at"], name="audit_target_time")]

    def __str__(self) -> str:
        return f"{self.created_at:%Y-%m-%d %H:%M:%S} {self.actor} {self.action} {self.target}"
