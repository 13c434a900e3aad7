"""What agents remember across threads (an agent's ``memory`` setting and its remember tool)."""

from __future__ import annotations

from django.db import models

from agents.models.agents import Agent

# Whose facts a row holds (``Memory.scope``), as :func:`agents.selectors.memory_scope` names
# them: ``key:<id>`` (an agent with per-key memory), ``key:<id>/user:<name>`` (a user named
# by that key: alice of one key is not alice of another), ``anonymous/user:<name>`` (a user
# named without a key), ``user:<name>`` (a user named by a key trusted to speak for users
# across keys, ``ApiKey.users_across_keys``; and the facts of unknown origin stored before
# users were scoped by key, migration 0027).
SCOPE_MAX_CHARS = 340  # key:<id>/user: and a 300-character user (Thread.user's length)


def scope_user(scope: str) -> str:
    """The end user a scope is about (``""``: a key's own memory)."""
    if scope.startswith("user:"):
        return scope[len("user:"):]
    head, sep, name = scope.partition("/user:")  # a key id or "anonymous" holds no "/"
    return name if sep and "/" not in head else ""


class Memory(models.Model):
    """One fact an agent was told to remember, kept for one scope (a key, or an end user as
    the key that named them: the names above): only turns of the same scope are given it,
    and a trusted key's turns every key's facts about their user."""

    agent = models.ForeignKey(Agent, on_delete=models.CASCADE, related_name="memories")
    scope = models.CharField(max_length=SCOPE_MAX_CHARS)
    user = models.CharField(max_length=300, blank=True, default="", editable=False,
                            help_text="The end user the fact is about, whichever key named "
                            "them (empty: a key's own memory).")
    text = models.TextField()
    thread = models.ForeignKey("Thread", null=True, blank=True, on_delete=models.SET_NULL,
                               related_name="+", help_text="Where it was learnt.")
    created_at = models.DateTimeField(auto_now_add=True)
    # Not a column: the scope's oldest facts the storing of this one forgot (past the cap,
    # agents.services.memory_remember)
    forgotten = 0

    class Meta:
        ordering = ["-created_at"]
        indexes = [models.Index(fields=["agent", "scope"], name="memory_agent_scope"),
                   models.Index(fields=["agent", "user"], name="memory_agent_user")]

    def __str__(self) -> str:
        return self.text[:60]
