"""What agents remember across threads (an agent's ``memory`` setting and its remember tool)."""

from __future__ import annotations

from django.db import models

from agents.models.agents import Agent


class Memory(models.Model):
    """One fact an agent was told to remember, kept for one API key (``key:<id>``) or one end
    user (``user:<name>``): only turns of the same scope are given it."""

    agent = models.ForeignKey(Agent, on_delete=models.CASCADE, related_name="memories")
    scope = models.CharField(max_length=320)
    text = models.TextField()
    thread = models.ForeignKey("Thread", null=True, blank=True, on_delete=models.SET_NULL,
                               related_name="+", help_text="Where it was learnt.")
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["-created_at"]
        indexes = [models.Index(fields=["agent", "scope"], name="memory_agent_scope")]

    def __str__(self) -> str:
        return self.text[:60]
