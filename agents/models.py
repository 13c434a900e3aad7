"""Agents, the providers they run on, API keys, and the threads clients hold with them."""

from __future__ import annotations

import uuid

from django.conf import settings
from django.core.validators import MinValueValidator, RegexValidator
from django.db import models
from django.utils import timezone

SLUG_VALIDATOR = RegexValidator(
    r"^[A-Za-z0-9][A-Za-z0-9._:/-]*$",
    "Use letters, digits and . _ : / - (it is the model id clients send).",
)


class Provider(models.Model):
    """An LLM connection. Credentials are write-only: no page or API ever shows them back."""

    class Kind(models.TextChoices):
        FAKE = "fake", "Fake (deterministic, for tests and load)"
        LOCAL = "local", "Local GGUF model (llama.cpp, offline)"
        OPENAI = "openai", "OpenAI-compatible server"
        ANTHROPIC = "anthropic", "Anthropic Messages API"

    name = models.SlugField(max_length=100, unique=True)
    kind = models.CharField(max_length=20, choices=Kind.choices, default=Kind.FAKE)
    base_url = models.URLField(max_length=500, blank=True)
    api_key_env = models.CharField(
        "API key environment variable",
        max_length=200,
        blank=True,
        help_text="Name of an environment variable holding the credential, e.g. OPENAI_API_KEY.",
    )
    api_key_secret = models.CharField(
        "API key",
        max_length=500,
        blank=True,
        help_text="Write-only. Stored for upstream calls, never displayed.",
    )
    default_model = models.CharField(max_length=200, blank=True)
    timeout_seconds = models.FloatField(default=120.0, validators=[MinValueValidator(0.1)])
    max_concurrency = models.PositiveIntegerField(
        default=8, help_text="Requests this process sends to the provider at once."
    )
    options = models.JSONField(
        default=dict,
        blank=True,
        help_text="Kind-specific settings (fake: reply, delay_ms, ttft_ms, fail; openai: "
        "extra_headers; local: model_path, n_ctx).",
    )
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return f"{self.name} ({self.kind})"

    @property
    def has_credentials(self) -> bool:
        return bool(self.api_key_secret or self.api_key_env)


class AgentTool(models.TextChoices):
    NONE = "", "No tool"
    SEARCH = "search", "search (BM25 over the context)"
    EXTRACT = "extract", "extract (supporting sentences)"
    TRIPLE = "triple", "triple (subject-relation-object)"
    REASON = "reason", "reason (final answer)"


class Agent(models.Model):
    slug = models.CharField(
        "model id", max_length=100, unique=True, validators=[SLUG_VALIDATOR]
    )
    display_name = models.CharField(max_length=200)
    description = models.TextField(blank=True)
    instructions = models.TextField(blank=True)
    provider = models.ForeignKey(Provider, on_delete=models.PROTECT, related_name="agents")
    upstream_model = models.CharField(
        max_length=200, blank=True, help_text="Blank: the provider's default model."
    )
    tool = models.CharField(max_length=20, choices=AgentTool.choices, blank=True, default="")
    temperature = models.FloatField(null=True, blank=True)
    top_p = models.FloatField(null=True, blank=True)
    max_input_tokens = models.PositiveIntegerField(default=8192)
    max_output_tokens = models.PositiveIntegerField(default=1024)
    context_overflow = models.CharField(
        max_length=20, choices=[("error", "error"), ("trim_oldest", "trim oldest turns")],
        default="error",
        help_text="Past max_input_tokens (or the model's window): answer 400, or drop the "
        "oldest turns (the system prompt and the latest message are kept; the reply says so "
        "in X-Gaia-Context-Trimmed and the thread keeps a note).",
    )
    enabled = models.BooleanField(default=True)
    listed = models.BooleanField(
        default=True,
        help_text="Shown by /v1/models (chat frontends' model pickers). An unlisted agent still "
        "answers when a key that may use it names it.",
    )
    paused = models.BooleanField(
        default=False,
        help_text="A paused agent answers new requests with 503 until an operator resumes it; "
        "turns in flight finish.",
    )
    created_at = models.DateTimeField(default=timezone.now, editable=False)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["slug"]

    def __str__(self) -> str:
        return self.slug

    @property
    def model_name(self) -> str:
        return self.upstream_model or self.provider.default_model


class ApiKey(models.Model):
    """A client credential. Only a SHA-256 of the secret is stored; the secret is shown once."""

    class Scope(models.TextChoices):
        CHAT = "chat", "chat (the /v1 model routes)"
        OPERATOR = "operator", "operator (watch and control)"
        BENCHMARKS = "benchmarks", "benchmarks (queue runs)"

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
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["-created_at"]
        verbose_name = "API key"

    def __str__(self) -> str:
        return f"{self.name} ({self.prefix}…)"

    @property
    def revoked(self) -> bool:
        return self.revoked_at is not None


class Thread(models.Model):
    class Status(models.TextChoices):
        ACTIVE = "active"
        COMPLETED = "completed"
        ERROR = "error"
        KILLED = "killed"

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    agent = models.ForeignKey(Agent, on_delete=models.CASCADE, related_name="threads")
    session_key = models.CharField(max_length=300)
    api_key = models.ForeignKey(
        ApiKey, null=True, blank=True, on_delete=models.SET_NULL, related_name="threads"
    )
    user = models.CharField("client user", max_length=300, blank=True)
    status = models.CharField(max_length=20, choices=Status.choices, default=Status.ACTIVE)
    title = models.CharField(max_length=200, blank=True)
    forked_from = models.ForeignKey(
        "self", null=True, blank=True, on_delete=models.SET_NULL, related_name="forks"
    )
    workspace_root = models.CharField(max_length=1000, blank=True)
    message_count = models.PositiveIntegerField(default=0)
    input_tokens = models.PositiveBigIntegerField(default=0)
    output_tokens = models.PositiveBigIntegerField(default=0)
    usage_estimated = models.BooleanField(
        default=False, help_text="Some token counts are estimates (the provider gave none)."
    )
    # Chain digest of the conversation so far: a client resending its history is matched to
    # the thread in one indexed query (see agents.services.thread_resolve).
    history_digest = models.CharField(max_length=64, editable=False)
    # Cross-process turn lease: one turn at a time per thread.
    lock_token = models.CharField(max_length=32, blank=True, editable=False)
    lock_expires_at = models.DateTimeField(null=True, blank=True, editable=False)
    last_error = models.TextField(blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["-updated_at"]
        # Resolving a turn's thread: by digest within a session, and the session's latest.
        # Both stay direct lookups however many threads share a session key (identical
        # first messages without a session id all do).
        indexes = [
            models.Index(fields=["session_key", "history_digest"], name="thread_session_digest"),
            models.Index(fields=["session_key", "-updated_at"], name="thread_session_recent"),
        ]

    def __str__(self) -> str:
        return self.title or str(self.id)


class Message(models.Model):
    class Role(models.TextChoices):
        USER = "user"
        ASSISTANT = "assistant"
        TOOL = "tool"
        SYSTEM = "system"  # an instruction given mid-conversation

    thread = models.ForeignKey(Thread, on_delete=models.CASCADE, related_name="messages")
    seq = models.PositiveIntegerField()
    role = models.CharField(max_length=20, choices=Role.choices)
    content = models.TextField(blank=True)
    parts = models.JSONField(null=True, blank=True, help_text="Non-text parts (images).")
    tool_calls = models.JSONField(null=True, blank=True)
    tool_call_id = models.CharField(max_length=200, blank=True)
    reasoning = models.TextField(blank=True, help_text="The agent's own steps, not its words.")
    input_tokens = models.PositiveIntegerField(null=True, blank=True)
    output_tokens = models.PositiveIntegerField(null=True, blank=True)
    usage_estimated = models.BooleanField(default=False)
    finish_reason = models.CharField(max_length=40, blank=True)
    note = models.CharField(
        max_length=500, blank=True,
        help_text="What Gaia did to serve this turn (e.g. the oldest turns it trimmed to fit "
        "the model's window).",
    )
    latency_ms = models.PositiveIntegerField(null=True, blank=True)
    ttft_ms = models.PositiveIntegerField("time to first token (ms)", null=True, blank=True)
    dialect = models.CharField(max_length=20, blank=True)
    response_id = models.CharField(max_length=100, blank=True, db_index=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["thread", "seq"]
        constraints = [
            models.UniqueConstraint(fields=["thread", "seq"], name="message_thread_seq_unique")
        ]

    def __str__(self) -> str:
        return f"{self.role}: {self.content[:60]}"


class ConfigStamp(models.Model):
    """One row whose ``version`` changes whenever agents, providers or API keys change.

    Server processes keep those rows in memory for the hot path and compare this stamp (one
    primary-key read) on every request, so an edit made anywhere (admin, CLI, another process)
    shows on the next request without a query storm per request.
    """

    version = models.CharField(max_length=32)

    class Meta:
        verbose_name = "configuration stamp"

    def __str__(self) -> str:
        return self.version
