"""Admin: agents editable with a /v1/models preview, write-only provider credentials,
API keys shown once, threads read-only with their messages."""

from __future__ import annotations

import json
from typing import Any

from django import forms
from django.contrib import admin, messages
from django.http import HttpRequest
from django.utils.html import format_html

from agents import selectors, services
from agents.models import Agent, ApiKey, Message, Provider, Thread


class ProviderForm(forms.ModelForm):
    api_key_secret = forms.CharField(
        label="API key",
        required=False,
        widget=forms.PasswordInput(render_value=False, attrs={"autocomplete": "new-password"}),
        help_text="Write-only. Leave blank to keep the stored key; tick 'clear' to remove it.",
    )
    clear_api_key = forms.BooleanField(label="Clear stored API key", required=False)

    class Meta:
        model = Provider
        fields = ["name", "kind", "base_url", "api_key_env", "api_key_secret", "default_model",
                  "timeout_seconds", "max_concurrency", "options"]

    def save(self, commit: bool = True) -> Provider:
        provider = super().save(commit=False)
        new = self.cleaned_data.get("api_key_secret")
        if self.cleaned_data.get("clear_api_key"):
            provider.api_key_secret = ""
        elif not new and self.instance.pk:
            provider.api_key_secret = Provider.objects.get(pk=self.instance.pk).api_key_secret
        if commit:
            provider.save()
        return provider


@admin.register(Provider)
class ProviderAdmin(admin.ModelAdmin):
    form = ProviderForm
    list_display = ["name", "kind", "base_url", "default_model", "credentials", "max_concurrency"]
    list_filter = ["kind"]
    search_fields = ["name", "base_url", "default_model"]

    @admin.display(description="credentials")
    def credentials(self, obj: Provider) -> str:
        if obj.api_key_secret:
            return "stored (hidden)"
        if obj.api_key_env:
            return f"from ${obj.api_key_env}"
        return "none"


@admin.action(description="Enable selected agents")
def enable_agents(modeladmin: Any, request: HttpRequest, queryset: Any) -> None:
    count = queryset.update(enabled=True)
    services.config_changed()
    modeladmin.message_user(request, f"Enabled {count} agent(s).")


@admin.action(description="Disable selected agents")
def disable_agents(modeladmin: Any, request: HttpRequest, queryset: Any) -> None:
    count = queryset.update(enabled=False)
    services.config_changed()
    modeladmin.message_user(request, f"Disabled {count} agent(s).")


@admin.register(Agent)
class AgentAdmin(admin.ModelAdmin):
    list_display = ["slug", "display_name", "provider", "model_name", "tool", "enabled", "listed",
                    "updated_at"]
    list_filter = ["enabled", "listed", "provider", "provider__kind", "tool"]
    search_fields = ["slug", "display_name", "description", "instructions"]
    actions = [enable_agents, disable_agents]
    readonly_fields = ["models_preview", "created_at", "updated_at"]
    fieldsets = [
        (None, {"fields": ["slug", "display_name", "description", "enabled", "listed"]}),
        ("Behaviour", {"fields": ["instructions", "provider", "upstream_model", "tool"]}),
        ("Generation", {"fields": ["temperature", "top_p", "max_input_tokens",
                                   "max_output_tokens", "context_overflow"]}),
        ("As clients see it", {"fields": ["models_preview", "created_at", "updated_at"]}),
    ]

    @admin.display(description="GET /v1/models entry")
    def models_preview(self, obj: Agent) -> str:
        if not obj.pk:
            return "Saved agents show their /v1/models entry here."
        return format_html("<pre>{}</pre>", json.dumps(selectors.model_entry(obj), indent=2))


class ApiKeyForm(forms.ModelForm):
    class Meta:
        model = ApiKey
        fields = ["name", "owner", "scopes", "agents", "expires_at", "requests_per_minute"]

    scopes = forms.MultipleChoiceField(
        choices=ApiKey.Scope.choices, initial=[ApiKey.Scope.CHAT],
        widget=forms.CheckboxSelectMultiple,
    )


@admin.action(description="Revoke selected keys")
def revoke_keys(modeladmin: Any, request: HttpRequest, queryset: Any) -> None:
    for key in queryset:
        services.api_key_revoke(key=key)
    modeladmin.message_user(request, f"Revoked {queryset.count()} key(s).")


@admin.register(ApiKey)
class ApiKeyAdmin(admin.ModelAdmin):
    form = ApiKeyForm
    list_display = ["name", "prefix", "owner", "scopes", "expires_at", "revoked_at",
                    "last_used_at", "requests_per_minute"]
    list_filter = ["revoked_at", "expires_at"]
    search_fields = ["name", "prefix"]
    readonly_fields = ["prefix", "last_used_at", "revoked_at", "created_at"]
    actions = [revoke_keys]
    filter_horizontal = ["agents"]

    def save_model(self, request: HttpRequest, obj: ApiKey, form: Any, change: bool) -> None:
        if change:
            super().save_model(request, obj, form, change)
            return
        key, secret = services.api_key_create(
            name=obj.name, scopes=list(form.cleaned_data.get("scopes") or []),
            owner=obj.owner, expires_at=obj.expires_at,
            requests_per_minute=obj.requests_per_minute,
        )
        obj.pk, obj.prefix, obj.hashed_secret = key.pk, key.prefix, key.hashed_secret
        obj.created_at = key.created_at
        obj._state.adding = False
        messages.warning(
            request,
            format_html("New API key (shown once, copy it now): <code>{}</code>", secret),
        )

    def save_related(self, request: HttpRequest, form: Any, formsets: Any, change: bool) -> None:
        super().save_related(request, form, formsets, change)


class MessageInline(admin.TabularInline):
    model = Message
    extra = 0
    can_delete = False
    fields = ["seq", "role", "content", "tool_calls", "reasoning", "finish_reason", "note",
              "input_tokens", "output_tokens", "usage_estimated", "latency_ms", "created_at"]
    readonly_fields = fields

    def has_add_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


@admin.register(Thread)
class ThreadAdmin(admin.ModelAdmin):
    list_display = ["title", "agent", "status", "message_count", "input_tokens",
                    "output_tokens", "usage_estimated", "api_key", "updated_at"]
    list_filter = ["status", "agent", "usage_estimated"]
    search_fields = ["id", "title", "session_key", "user"]
    inlines = [MessageInline]

    def get_readonly_fields(self, request: HttpRequest, obj: Any = None) -> list[str]:
        return [f.name for f in Thread._meta.fields]

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return request.method in ("GET", "HEAD") and super().has_view_permission(request, obj)
