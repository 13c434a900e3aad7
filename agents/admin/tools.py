"""The admin's pages for what agents call beyond themselves: MCP servers and remote A2A
agents. Their URLs follow the rules of every URL Gaia calls (:func:`url_parsed`), as their
import does (:mod:`agents.services.tools`)."""

from __future__ import annotations

from typing import Any

from django import forms
from django.contrib import admin
from django.core.exceptions import ValidationError

from agents.models import A2aAgent, McpServer
from agents.selectors.urls import UrlRefused, url_parsed


class _UrlChecked(forms.ModelForm):
    def clean_url(self) -> str:
        url = self.cleaned_data.get("url") or ""
        try:
            if url:
                url_parsed(url)  # no userinfo, backslash, ...: agents.selectors.urls
        except UrlRefused as exc:
            raise ValidationError(f"Not a URL Gaia calls: {exc}.") from None
        return url


class McpServerForm(_UrlChecked):
    """Values of ``env`` and ``headers`` are write-only, as a provider's header values are."""

    class Meta:
        model = McpServer
        fields = ["name", "command", "args", "env", "url", "headers", "headers_env",
                  "allowed_tools", "require_approval", "timeout_seconds", "enabled"]

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        for name in ("env", "headers"):
            if self.instance.pk:
                self.initial[name] = self.instance.secrets_masked(name)
            self.fields[name].help_text += (" Write-only: shown as [hidden], and [hidden] keeps "
                                            "the stored value; 'env:NAME' reads variable NAME.")

    def save(self, commit: bool = True) -> McpServer:
        server = super().save(commit=False)
        stored = McpServer.objects.get(pk=self.instance.pk) if self.instance.pk else McpServer()
        for name in ("env", "headers"):  # the import's rule too (services.mcp_servers_import)
            setattr(server, name, stored.secrets_kept(name, getattr(server, name)))
        if commit:
            server.save()
        return server


class A2aAgentForm(_UrlChecked):
    class Meta:
        model = A2aAgent
        fields = ["name", "url", "headers_env", "description", "require_approval",
                  "timeout_seconds", "enabled"]


@admin.register(McpServer)
class McpServerAdmin(admin.ModelAdmin):
    form = McpServerForm
    list_display = ["name", "transport", "command", "url", "require_approval", "enabled"]
    list_filter = ["enabled"]
    search_fields = ["name", "command", "url"]


@admin.register(A2aAgent)
class A2aAgentAdmin(admin.ModelAdmin):
    form = A2aAgentForm
    list_display = ["name", "url", "require_approval", "timeout_seconds", "enabled"]
    list_filter = ["enabled"]
    search_fields = ["name", "url"]
