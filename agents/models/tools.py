"""What agents call beyond themselves: MCP servers (``mcp:<name>``) and remote A2A agents
(``a2a:<name>``) in an agent's tools."""

from __future__ import annotations

from django.core.validators import MinValueValidator
from django.db import models

from agents.models.agents import (
    APPROVAL_HELP,
    approval_rule_valid,
    never,
    secrets_masked,
    secrets_unmasked,
)


class McpServer(models.Model):
    """An MCP server whose tools agents may run (``mcp:<name>`` in an agent's tools): a
    command started over stdio, or a streamable HTTP URL. Values of ``env`` and ``headers``
    are write-only (``env:NAME`` reads an environment variable instead)."""

    name = models.SlugField(max_length=64, unique=True,
                            help_text="The model sees its tools as mcp__<name>__<tool>.")
    command = models.CharField(max_length=500, blank=True,
                               help_text="stdio: the program to start (on PATH or a path).")
    args = models.JSONField(default=list, blank=True)
    env = models.JSONField(default=dict, blank=True,
                           help_text="stdio: extra environment (values are write-only).")
    url = models.URLField(max_length=500, blank=True,
                          help_text="Streamable HTTP: the server's MCP endpoint.")
    headers = models.JSONField(default=dict, blank=True,
                               help_text="HTTP: extra headers (values are write-only).")
    headers_env = models.JSONField(default=dict, blank=True,
                                   help_text="HTTP: header name -> environment variable.")
    allowed_tools = models.JSONField(default=list, blank=True,
                                     help_text="The server's tools agents may use; none: all.")
    require_approval = models.JSONField(default=never, blank=True, help_text=APPROVAL_HELP)
    timeout_seconds = models.FloatField(default=60.0, validators=[MinValueValidator(0.1)],
                                        help_text="Per call.")
    enabled = models.BooleanField(default=True)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["name"]
        verbose_name = "MCP server"

    def __str__(self) -> str:
        return self.name

    @property
    def transport(self) -> str:
        return "stdio" if self.command else "http"

    def secrets_masked(self, field: str) -> dict:
        """``env`` or ``headers`` as exports, config views and the admin show them: every
        value :data:`SECRET_MASK` (write-only; ``headers_env`` only names variables)."""
        return secrets_masked(getattr(self, field))

    def secrets_kept(self, field: str, new: dict | None) -> dict:
        """``new`` values for ``env`` or ``headers`` with each :data:`SECRET_MASK` replaced
        by this row's stored value (``""`` for a key it does not have)."""
        return secrets_unmasked(new, getattr(self, field), missing="")

    def clean(self) -> None:
        from django.core.exceptions import ValidationError

        if bool(self.command) == bool(self.url):
            raise ValidationError("Give a command (stdio) or a url (streamable HTTP), not both.")
        for name in ("args", "allowed_tools"):
            value = getattr(self, name)
            if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
                raise ValidationError({name: "A list of strings."})
        for name in ("env", "headers", "headers_env"):
            value = getattr(self, name)
            if not isinstance(value, dict) or not all(isinstance(k, str) and isinstance(v, str)
                                                      for k, v in value.items()):
                raise ValidationError({name: "A mapping of strings to strings."})
        if not approval_rule_valid(self.require_approval):
            raise ValidationError({"require_approval": APPROVAL_HELP})


class A2aAgent(models.Model):
    """A remote A2A agent agents may ask (``a2a:<name>`` in an agent's tools; the model sees
    ``a2a__<name>``). ``url`` is its base URL (its card at ``<url>/.well-known/agent-card.json``);
    the card's JSON-RPC interface must be that URL or one ``GAIA_A2A_ALLOWED_URLS`` lists.
    ``headers_env``: header name -> the environment variable holding its value (a bearer key)."""

    name = models.SlugField(max_length=64, unique=True,
                            help_text="The model sees it as the tool a2a__<name>.")
    url = models.URLField(max_length=500, help_text="The agent's base URL (where its card is).")
    headers_env = models.JSONField(default=dict, blank=True,
                                   help_text="Header name -> environment variable.")
    description = models.TextField(blank=True, help_text="What the model is told it does; "
                                   "blank: the card's description.")
    require_approval = models.BooleanField(default=False,
                                           help_text="An operator approves each call.")
    timeout_seconds = models.FloatField(default=300.0, validators=[MinValueValidator(0.1)],
                                        help_text="Per call, the remote agent's approvals "
                                        "included.")
    enabled = models.BooleanField(default=True)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["name"]
        verbose_name = "A2A agent"

    def __str__(self) -> str:
        return self.name
