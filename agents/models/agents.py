"""Agents, the providers they run on, teams of agents, the routing policy of ``auto``, and the
configuration stamp every change renews."""

from __future__ import annotations

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

    @property
    def options_public(self) -> dict:
        """``options`` as pages and exports show them: ``extra_headers`` values are
        credentials as often as not, so each is :data:`SECRET_MASK` unless it only names an
        environment variable (``env:NAME``)."""
        return options_masked(self.options)


SECRET_MASK = "[hidden]"  # noqa: S105 - a write-only value as shown; sent back, keeps the stored one


def secrets_masked(values: dict | None, *, env_names_shown: bool = False) -> dict:
    """Write-only ``values`` (header or environment values) as clients see them: each value
    :data:`SECRET_MASK`; with ``env_names_shown``, a value that only names an environment
    variable (``env:NAME``) as it is. :func:`secrets_unmasked` reads a masked value back."""
    return {k: v if env_names_shown and isinstance(v, str) and v.startswith("env:")
            else SECRET_MASK for k, v in (values or {}).items()}


def secrets_unmasked(new: dict | None, stored: dict | None, *,
                     missing: str | None = None) -> dict:
    """``new`` write-only values with each :data:`SECRET_MASK` sent back replaced by the
    ``stored`` value of its key. A masked key ``stored`` lacks is dropped, or, given
    ``missing``, set to that."""
    stored = stored or {}
    return {k: stored.get(k, missing) if v == SECRET_MASK else v
            for k, v in (new or {}).items()
            if v != SECRET_MASK or k in stored or missing is not None}


def options_masked(options: dict | None) -> dict:
    """A provider's ``options`` with its ``extra_headers`` values masked (``env:NAME`` shown)."""
    options = dict(options or {})
    headers = options.get("extra_headers")
    if isinstance(headers, dict):
        options["extra_headers"] = secrets_masked(headers, env_names_shown=True)
    return options


def options_unmasked(new: dict | None, stored: dict | None) -> dict:
    """``new`` options with every :data:`SECRET_MASK` header value put back from ``stored``
    (a header whose stored value is gone is dropped)."""
    new = dict(new or {})
    headers = new.get("extra_headers")
    if isinstance(headers, dict):
        new["extra_headers"] = secrets_unmasked(
            headers, (stored or {}).get("extra_headers") or {})
    return new


# The built-in tools an agent's ``tools`` may name (agents.tools.builtins runs them).
BUILTIN_TOOLS = ("calculator", "current_time", "knowledge_search", "remember", "recall")

# What a client's hosted tool asks for (agents.tools.hosted): an agent's ``provides`` maps one of
# these to a tool of its own that serves it.
HOSTED_KINDS = ("web_search", "file_search", "code_interpreter", "image_generation",
                "computer_use", "local_shell", "shell", "apply_patch", "web_fetch",
                "code_execution")
HOSTED_POLICIES = [("drop", "drop (left out, the reply says so)"), ("refuse", "refuse (400)")]
HOSTED_HELP = ("A hosted tool a client sends (OpenAI's web_search, file_search..., "
               "Anthropic's server tools) that none of the agent's tools provides: dropped "
               "(left out of what reaches the model; the reply names it in "
               "X-Gaia-Dropped-Tools) or refused (400 unsupported_tool).")


def tool_offered(tools: list[str], name: str) -> bool:
    """Whether an agent whose ``tools`` are these runs the tool the model knows as ``name``
    (a built-in, ``mcp__<server>__<tool>``, ``agent__<slug>``)."""
    if name in tools:
        return name in BUILTIN_TOOLS
    kind, _, rest = name.partition("__")
    if kind == "mcp":
        return f"mcp:{rest.partition('__')[0]}" in tools and "__" in rest
    return kind == "agent" and f"agent:{rest}" in tools


def provides_valid(value: object, tools: list[str]) -> str | None:
    """Why ``value`` is not an agent's ``provides`` setting for these ``tools`` (None: it is)."""
    if not isinstance(value, dict):
        return 'A mapping of hosted tool to one of the agent\'s tools, e.g. {"web_search": ' \
               '"mcp__search__search"}.'
    for kind, name in value.items():
        if kind not in HOSTED_KINDS:
            return f"{kind!r} is not a hosted tool ({', '.join(HOSTED_KINDS)})."
        if not isinstance(name, str) or not tool_offered(tools, name):
            return (f"{kind}: {name!r} is not one of the agent's tools as its model sees it "
                    "(a built-in, mcp__<server>__<tool> of an mcp:<server> it has, "
                    "agent__<slug> of an agent:<slug> it has).")
    return None


APPROVAL_HELP = ('"never", "always", or a list of tool names (as the model sees them) that '
                 "wait for an operator's decision.")


def never() -> str:
    """The default of ``require_approval`` (a callable: Django's rule for JSON defaults)."""
    return "never"


def approval_rule_valid(value: object) -> bool:
    """Whether ``value`` is a ``require_approval`` setting: never, always, or tool names."""
    return value in ("never", "always") or (
        isinstance(value, list) and all(isinstance(v, str) and v for v in value))


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
    # What the agent can do besides answering (agents.tools): built-in tools by name
    # ("calculator", "current_time", "knowledge_search", "remember", "recall"), an MCP server's
    # tools ("mcp:<server>") and other agents ("agent:<slug>").
    tools = models.JSONField(
        default=list, blank=True,
        help_text='Tools the agent runs itself: built-ins ("calculator", "current_time", '
        '"knowledge_search", "remember", "recall"), "mcp:<server>", "agent:<slug>".',
    )
    memory = models.CharField(
        max_length=20, default="off",
        choices=[("off", "off"), ("per_key", "per API key"), ("per_user", "per end user")],
        help_text="Facts the agent remembers (its remember tool) and is given before each turn: "
        "kept per API key, or per end user (the request's user field or session header).",
    )
    max_steps = models.PositiveSmallIntegerField(
        default=8, help_text="Rounds of tool calls a turn may make before it must answer.")
    tool_budget_seconds = models.FloatField(
        default=300.0, validators=[MinValueValidator(0.1)],
        help_text="Time a turn's tool calls may take together.")
    max_turn_seconds = models.FloatField(
        default=900.0, validators=[MinValueValidator(1.0)],
        help_text="Wall time of a turn that runs tools (its last answer ends then).")
    require_approval = models.JSONField(default=never, blank=True, help_text=APPROVAL_HELP)
    approval_timeout_seconds = models.FloatField(
        default=300.0, validators=[MinValueValidator(1.0)],
        help_text="A tool call waiting for approval longer than this is denied.")
    hosted_tools = models.CharField(max_length=10, default="drop", choices=HOSTED_POLICIES,
                                    help_text=HOSTED_HELP)
    provides = models.JSONField(
        default=dict, blank=True,
        help_text='Hosted tools the agent\'s own tools serve: {"web_search": '
        '"mcp__search__search"} (a tool of its list, as the model sees it). A client that '
        "sends web_search then gets that tool's calls as web search (Responses "
        "web_search_call items).")
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

    def clean(self) -> None:
        from django.core.exceptions import ValidationError

        if not isinstance(self.tools, list) or not all(isinstance(t, str) and t
                                                       for t in self.tools):
            raise ValidationError({"tools": "A list of tool names."})
        if not approval_rule_valid(self.require_approval):
            raise ValidationError({"require_approval": APPROVAL_HELP})
        why = provides_valid(self.provides, self.tools)
        if why is not None:
            raise ValidationError({"provides": why})


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
    # The organism's state (``POST /api/v1/organism/stop`` and ``/start``): kept on this row
    # so that every process reads it again when the stamp changes, as it does a paused agent.
    organism_stopped = models.BooleanField(default=False)
    organism_state_at = models.DateTimeField(null=True, blank=True)
    organism_state_by = models.CharField(max_length=320, blank=True, default="")

    class Meta:
        verbose_name = "configuration stamp"

    def __str__(self) -> str:
        return self.version
