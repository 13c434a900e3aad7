"""API keys: who may call Gaia, with which scopes, on which agents."""

from __future__ import annotations

from django.conf import settings
from django.db import models

from agents.models.agents import HOSTED_HELP, HOSTED_POLICIES, Agent


class ApiKey(models.Model):
    """A client credential. Only a SHA-256 of the secret is stored; the secret is shown once."""

    class Scope(models.TextChoices):
        CHAT = "chat", "chat (the /v1 model routes)"
        OPERATOR = "operator", "operator (watch and control)"
        BENCHMARKS = "benchmarks", "benchmarks (queue runs)"
        METRICS = "metrics", "metrics (Prometheus scrapes /metrics)"
        # What a staff session may do over /api/v1 (keys, providers, prices, budgets, audit);
        # given only by staff or the CLI, never by a key.
        ADMIN = "admin", "admin (provisioning: what staff may do over /api/v1)"

    name = models.CharField(max_length=200)
    prefix = models.CharField(max_length=32, unique=True, editable=False)
    hashed_secret = models.CharField(max_length=64, editable=False)
    owner = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL
    )
    scopes = models.JSONField(default=list, blank=True)
    agents = models.ManyToManyField(
        Agent, blank=True, related_name="+", help_text="Agents this key may use; none = all."
    )
    expires_at = models.DateTimeField(null=True, blank=True)
    revoked_at = models.DateTimeField(null=True, blank=True)
    last_used_at = models.DateTimeField(null=True, blank=True, editable=False)
    requests_per_minute = models.PositiveIntegerField(default=0, help_text="0 = unlimited.")
    tokens_per_minute = models.PositiveIntegerField(
        default=0, help_text="Input and output tokens a minute; 0 = unlimited.")
    budget_exempt = models.BooleanField(
        default=False, help_text="Exempt from every budget (staff only, audited). Off: the "
        "key's turns count against every budget that applies, whatever its scopes.")
    hosted_tools = models.CharField(
        max_length=10, default="drop", choices=HOSTED_POLICIES,
        help_text=HOSTED_HELP + " Refused if the key or the agent says refuse.")
    users_across_keys = models.BooleanField(
        "trusted to speak for users across keys", default=False,
        help_text="The end users this key names (the request's user field or a user header) are "
        "the same people whichever key names them: its turns read every key's facts about a "
        "user and write to the memory every trusted key shares. Off: a user this key names is "
        "its own (alice of this key is not alice of another key).")
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["-created_at"]
        verbose_name = "API key"

    def __str__(self) -> str:
        return f"{self.name} ({self.prefix}…)"

    @property
    def revoked(self) -> bool:
        return self.revoked_at is not None
