"""Agents, the providers they run on, API keys, and the threads clients hold with them."""

from __future__ import annotations

import uuid

from django.conf import settings
from django.core.validators import MinValueValidator, RegexValidator
from django.db import models
from django.utils import timezone

from agents import llm

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

    @property
    def options_public(self) -> dict:
        """``options`` as pages and exports show them: ``extra_headers`` values are
        credentials as often as not, so each is :data:`SECRET_MASK` unless it only names an
        environment variable (``env:NAME``)."""
        return options_masked(self.options)


SECRET_MASK = "[hidden]"  # noqa: S105 - a write-only value as shown; sent back, keeps the stored one


def options_masked(options: dict | None) -> dict:
    options = dict(options or {})
    headers = options.get("extra_headers")
    if isinstance(headers, dict):
        options["extra_headers"] = {
            k: v if isinstance(v, str) and v.startswith("env:") else SECRET_MASK
            for k, v in headers.items()}
    return options


def options_unmasked(new: dict | None, stored: dict | None) -> dict:
    """``new`` options with every :data:`SECRET_MASK` header value put back from ``stored``
    (a header whose stored value is gone is dropped)."""
    new = dict(new or {})
    headers = new.get("extra_headers")
    if isinstance(headers, dict):
        old = (stored or {}).get("extra_headers") or {}
        new["extra_headers"] = {
            k: (old[k] if v == SECRET_MASK else v) for k, v in headers.items()
            if v != SECRET_MASK or k in old}
    return new


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
    knowledge_bases = models.ManyToManyField(
        "KnowledgeBase", blank=True, related_name="agents",
        help_text="Each turn gets the top passages of these for the conversation.",
    )
    fallback_providers = models.ManyToManyField(
        Provider, through="AgentFallback", blank=True, related_name="+",
        help_text="Tried in order when the provider fails before its first token.",
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


class AgentFallback(models.Model):
    """One of an agent's fallback providers: a connection error, 5xx, 429 or timeout before
    the first token moves the turn to the next one (``position`` order)."""

    agent = models.ForeignKey(Agent, on_delete=models.CASCADE, related_name="fallbacks")
    provider = models.ForeignKey(Provider, on_delete=models.PROTECT, related_name="+")
    position = models.PositiveIntegerField(default=0)

    class Meta:
        ordering = ["agent", "position", "pk"]
        constraints = [
            models.UniqueConstraint(fields=["agent", "provider"], name="agent_fallback_unique")
        ]

    def __str__(self) -> str:
        return f"{self.agent} → {self.provider.name} (#{self.position})"


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
    route = models.JSONField(
        null=True, blank=True,
        help_text="How a request for a virtual model (auto, team/...) reached this thread's "
        "agent, and why.",
    )
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
            # Which threads of an agent hold a live lease (its state, for operators).
            models.Index(fields=["agent", "lock_expires_at"], name="thread_agent_lease"),
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
    error = models.TextField(blank=True, help_text="Why this reply failed, if it did.")
    note = models.CharField(
        max_length=500, blank=True,
        help_text="What Gaia did to serve this turn (e.g. the oldest turns it trimmed to fit "
        "the model's window).",
    )
    latency_ms = models.PositiveIntegerField(null=True, blank=True)
    ttft_ms = models.PositiveIntegerField("time to first token (ms)", null=True, blank=True)
    dialect = models.CharField(max_length=20, blank=True)
    response_id = models.CharField(max_length=100, blank=True, db_index=True)
    provider = models.CharField(
        max_length=100, blank=True, help_text="The provider that produced this reply."
    )
    # Who spoke to whom; blank: derived from the role (the client and the thread's agent).
    sender = models.CharField(max_length=100, blank=True)
    recipient = models.CharField(max_length=100, blank=True)
    internal = models.BooleanField(
        default=False, help_text="A team's inner work (leader and members), not part of the "
        "conversation the client holds.",
    )
    passages = models.JSONField(
        null=True, blank=True, help_text="Knowledge-base passages given to the model for "
        "this reply (source, chunk id, score).",
    )
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["thread", "seq"]
        constraints = [
            models.UniqueConstraint(fields=["thread", "seq"], name="message_thread_seq_unique")
        ]

    def __str__(self) -> str:
        return f"{self.role}: {self.content[:60]}"

    def to_llm(self) -> llm.Message:
        """This stored message as the runtime's canonical message (what a provider gets)."""
        parts: list[llm.Part] = []
        if self.content:
            parts.append(llm.TextPart(self.content))
        for p in self.parts or []:
            parts.append(llm.ImagePart(url=p.get("url"), data=p.get("data"),
                                       media_type=p.get("media_type")))
        calls = tuple(llm.ToolCall(c["id"], c["name"], c["arguments"])
                      for c in self.tool_calls or [])
        return llm.Message(role=self.role, parts=tuple(parts),  # type: ignore[arg-type]
                           tool_calls=calls, tool_call_id=self.tool_call_id or None)

    @classmethod
    def from_llm(cls, message: llm.Message, *, thread_id: uuid.UUID, seq: int,
                 dialect: str) -> Message:
        """An unsaved row for ``message`` at position ``seq`` of the thread."""
        images = [{"url": p.url, "data": p.data, "media_type": p.media_type}
                  for p in message.parts if isinstance(p, llm.ImagePart)]
        return cls(
            thread_id=thread_id, seq=seq, role=message.role, content=message.text,
            parts=images or None,
            tool_calls=[{"id": c.id, "name": c.name, "arguments": c.arguments}
                        for c in message.tool_calls] or None,
            tool_call_id=message.tool_call_id or "", dialect=dialect,
        )


class Team(models.Model):
    """Several agents answering one request; clients ask for the model ``team/<slug>``.

    ``coordinate``: the leader splits the task, members answer their parts, the leader writes
    the answer. ``collaborate``: every member answers the whole task, the leader synthesises.
    ``route``: the leader hands the whole request to one member, whose reply is the answer."""

    class Mode(models.TextChoices):
        COORDINATE = "coordinate"
        COLLABORATE = "collaborate"
        ROUTE = "route"

    slug = models.SlugField(max_length=100, unique=True,
                            help_text="Clients ask for the model team/<slug>.")
    display_name = models.CharField(max_length=200)
    description = models.TextField(blank=True)
    leader = models.ForeignKey(Agent, on_delete=models.PROTECT, related_name="+")
    members = models.ManyToManyField(Agent, through="TeamMember", related_name="teams")
    mode = models.CharField(max_length=20, choices=Mode.choices, default=Mode.COORDINATE)
    max_total_tokens = models.PositiveIntegerField(
        default=32000, help_text="Every call's input and output tokens together; 0 = no limit.")
    max_seconds = models.FloatField(default=300.0, validators=[MinValueValidator(0.1)],
                                    help_text="Wall time for the whole team turn.")
    member_timeout_seconds = models.FloatField(
        default=120.0, validators=[MinValueValidator(0.1)],
        help_text="A member that has not answered by then is reported as timed out.")
    enabled = models.BooleanField(default=True)
    created_at = models.DateTimeField(default=timezone.now, editable=False)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["slug"]

    def __str__(self) -> str:
        return f"team/{self.slug}"


class TeamMember(models.Model):
    team = models.ForeignKey(Team, on_delete=models.CASCADE, related_name="memberships")
    agent = models.ForeignKey(Agent, on_delete=models.PROTECT, related_name="+")
    position = models.PositiveIntegerField(default=0)

    class Meta:
        ordering = ["team", "position", "pk"]
        constraints = [
            models.UniqueConstraint(fields=["team", "agent"], name="team_member_unique")
        ]

    def __str__(self) -> str:
        return f"{self.team} member {self.agent}"


class KnowledgeBase(models.Model):
    """Documents an agent answers from: chunked and indexed (BM25); each turn of an agent
    with knowledge bases gets the top passages for the conversation, with their sources."""

    slug = models.SlugField(max_length=100, unique=True)
    name = models.CharField(max_length=200)
    description = models.TextField(blank=True)
    chunk_chars = models.PositiveIntegerField(
        default=800, validators=[MinValueValidator(100)],
        help_text="A passage's length in characters, at most.")
    chunk_overlap = models.PositiveIntegerField(
        default=100, help_text="Characters a passage repeats from the one before.")
    top_k = models.PositiveIntegerField(default=4, validators=[MinValueValidator(1)],
                                        help_text="Passages given to the model per turn.")
    # Renewed whenever its chunks change: every process rebuilds its index on next use.
    index_version = models.CharField(max_length=32, blank=True, editable=False)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["slug"]

    def __str__(self) -> str:
        return self.slug


class KnowledgeDocument(models.Model):
    class Kind(models.TextChoices):
        TEXT = "text"
        MARKDOWN = "markdown"
        PDF = "pdf"

    class Status(models.TextChoices):
        QUEUED = "queued"
        INDEXING = "indexing"
        READY = "ready"
        ERROR = "error"

    knowledge_base = models.ForeignKey(KnowledgeBase, on_delete=models.CASCADE,
                                       related_name="documents")
    name = models.CharField(max_length=300)
    kind = models.CharField(max_length=20, choices=Kind.choices)
    data = models.BinaryField(editable=False, help_text="The uploaded file as it came.")
    status = models.CharField(max_length=20, choices=Status.choices, default=Status.QUEUED)
    error = models.TextField(blank=True)
    chunk_count = models.PositiveIntegerField(default=0)
    created_at = models.DateTimeField(auto_now_add=True)
    indexed_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["knowledge_base", "name"]

    def __str__(self) -> str:
        return f"{self.knowledge_base.slug}/{self.name}"


class KnowledgeChunk(models.Model):
    knowledge_base = models.ForeignKey(KnowledgeBase, on_delete=models.CASCADE,
                                       related_name="chunks")
    document = models.ForeignKey(KnowledgeDocument, on_delete=models.CASCADE,
                                 related_name="chunks")
    seq = models.PositiveIntegerField()
    source = models.CharField(max_length=400, help_text="Document, page or section.")
    text = models.TextField()

    class Meta:
        ordering = ["document", "seq"]

    def __str__(self) -> str:
        return self.source


class RoutingPolicy(models.Model):
    """How the model id ``auto`` picks an agent (one row). With a router agent its LLM picks
    among the agents' slugs and descriptions; without one a deterministic ranker (BM25 over
    the descriptions) does. A failed or unclear pick goes to the default agent."""

    router = models.ForeignKey(
        Agent, null=True, blank=True, on_delete=models.SET_NULL, related_name="+",
        help_text="Blank: the deterministic ranker. The router itself is never routed to.",
    )
    default_agent = models.ForeignKey(
        Agent, null=True, blank=True, on_delete=models.SET_NULL, related_name="+",
        help_text="Where an unclear or failed routing goes (blank: the first agent by slug).",
    )
    router_timeout_seconds = models.FloatField(default=10.0, validators=[MinValueValidator(0.1)])

    class Meta:
        verbose_name = "auto routing policy"
        verbose_name_plural = "auto routing policy"

    def __str__(self) -> str:
        return "auto routing"


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
