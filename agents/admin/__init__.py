"""Admin: agents editable with a /v1/models preview, write-only provider credentials,
API keys shown once, threads read-only with their messages a page at a time."""

from __future__ import annotations

import json
from typing import Any

from django import forms
from django.contrib import admin, messages
from django.contrib.admin import helpers
from django.contrib.admin.views.main import ORDER_VAR, PAGE_VAR
from django.core.exceptions import ValidationError
from django.core.paginator import Paginator
from django.http import HttpRequest
from django.utils.html import format_html
from django.utils.translation import gettext as _

from agents import selectors, services, turns
from agents.http.paging import SeekPaginator
from agents.kernel.exceptions import GaiaError
from agents.models import (
    Agent,
    AgentFallback,
    ApiKey,
    Approval,
    KnowledgeBase,
    KnowledgeDocument,
    Memory,
    Message,
    Provider,
    RoutingPolicy,
    Team,
    TeamMember,
    Thread,
)
from agents.services.config import AGENT_FIELDS
from agents.services.documents import document_kind


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

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        if self.instance.pk:  # header values are write-only, like the API key
            self.initial["options"] = self.instance.options_public
        self.fields["options"].help_text += (
            " Values in extra_headers are write-only: shown as [hidden], and [hidden] keeps "
            "the stored value; 'env:NAME' reads environment variable NAME instead.")

    def save(self, commit: bool = True) -> Provider:
        provider = super().save(commit=False)
        stored = Provider.objects.get(pk=self.instance.pk) if self.instance.pk else None
        services.provider_secrets_kept(  # the console's rule too (services.provider_save)
            provider, stored=stored, api_key=self.cleaned_data.get("api_key_secret"),
            clear_api_key=bool(self.cleaned_data.get("clear_api_key")))
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
    for agent in queryset:
        services.agent_changed_announce(agent=agent, change="updated")
    modeladmin.message_user(request, f"Enabled {count} agent(s).")


@admin.action(description="Disable selected agents")
def disable_agents(modeladmin: Any, request: HttpRequest, queryset: Any) -> None:
    count = queryset.update(enabled=False)
    services.config_changed()
    for agent in queryset:
        services.agent_changed_announce(agent=agent, change="updated")
    modeladmin.message_user(request, f"Disabled {count} agent(s).")


class AgentFallbackInline(admin.TabularInline):
    model = AgentFallback
    fk_name = "agent"
    extra = 0
    fields = ["position", "provider"]
    verbose_name = "fallback provider"
    verbose_name_plural = "Fallback providers (tried in order when the provider fails before "\
        "its first token)"


class AgentForm(forms.ModelForm):
    """Checked by the API's and the import's rule (:func:`agents.services.agent_save`), its
    errors said on the form's fields instead of a 500 when it saves."""

    class Meta:
        model = Agent
        fields = ["slug", "provider", *AGENT_FIELDS, "paused", "knowledge_bases"]

    def clean(self) -> dict[str, Any]:
        data = super().clean()
        stored = Agent.objects.filter(pk=self.instance.pk).first() if self.instance.pk else None
        fields = {k: v for k, v in data.items() if k in services.AGENT_EDIT_FIELDS
                  and k not in ("knowledge_bases", "fallback_providers")}  # saved after it
        if "provider" in fields:
            fields["provider"] = fields["provider"].name if fields["provider"] else ""
        if stored is not None:
            fields.pop("slug", None)
        self.agent_fields = fields
        if not self.errors:
            try:
                services.agent_save(agent=stored, fields=fields, actor=None, commit=False)
            except GaiaError as exc:
                self.add_error(exc.param if exc.param in self.fields else None, exc.message)
        return data


@admin.register(Agent)
class AgentAdmin(admin.ModelAdmin):
    form = AgentForm
    inlines = [AgentFallbackInline]
    filter_horizontal = ["knowledge_bases"]
    list_display = ["slug", "display_name", "provider", "model_name", "enabled", "listed",
                    "paused", "updated_at"]
    list_filter = ["enabled", "listed", "paused", "provider", "provider__kind", "memory"]
    search_fields = ["slug", "display_name", "description", "instructions"]
    actions = [enable_agents, disable_agents]
    readonly_fields = ["models_preview", "created_at", "updated_at"]
    fieldsets = [
        (None, {"fields": ["slug", "display_name", "description", "enabled", "listed",
                           "paused"]}),
        ("Behaviour", {"fields": ["instructions", "provider", "upstream_model",
                                  "knowledge_bases"]}),
        ("Tools and memory", {"fields": ["tools", "memory", "max_steps", "tool_budget_seconds",
                                         "max_turn_seconds", "require_approval",
                                         "approval_timeout_seconds", "hosted_tools",
                                         "provides"]}),
        ("Generation", {"fields": ["temperature", "top_p", "max_input_tokens",
                                   "max_output_tokens", "context_overflow"]}),
        ("As clients see it", {"fields": ["models_preview", "created_at", "updated_at"]}),
    ]

    def get_readonly_fields(self, request: HttpRequest, obj: Agent | None = None) -> Any:
        # the model id its clients send: made once (services.agent_save's rule)
        return [*self.readonly_fields, "slug"] if obj is not None else self.readonly_fields

    def save_model(self, request: HttpRequest, obj: Agent, form: Any, change: bool) -> None:
        """Saved by :func:`agents.services.agent_save`, the API's and the console's rule: it
        audits, tells the operator feed, and pauses or resumes through the pause service."""
        actor = services.audit_actor_of_request(request, channel="admin")
        saved = services.agent_save(agent=Agent.objects.get(pk=obj.pk) if change else None,
                                    fields=form.agent_fields, actor=actor)
        obj.pk = saved.pk

    def delete_model(self, request: HttpRequest, obj: Agent) -> None:
        services.agent_delete(agent=obj, actor=services.audit_actor_of_request(
            request, channel="admin"))

    def delete_queryset(self, request: HttpRequest, queryset: Any) -> None:
        actor = services.audit_actor_of_request(request, channel="admin")
        for agent in list(queryset):
            services.agent_delete(agent=agent, actor=actor)

    @admin.display(description="GET /v1/models entry")
    def models_preview(self, obj: Agent) -> str:
        if not obj.pk:
            return "Saved agents show their /v1/models entry here."
        return format_html("<pre>{}</pre>", json.dumps(turns.model_entry(obj), indent=2))


class TeamMemberInline(admin.TabularInline):
    model = TeamMember
    extra = 1
    fields = ["position", "agent"]
    verbose_name = "member"


@admin.register(Team)
class TeamAdmin(admin.ModelAdmin):
    """Teams: clients ask for the model ``team/<slug>``."""

    list_display = ["__str__", "display_name", "mode", "leader", "member_list", "enabled"]
    list_filter = ["mode", "enabled"]
    search_fields = ["slug", "display_name", "description"]
    inlines = [TeamMemberInline]
    fieldsets = [
        (None, {"fields": ["slug", "display_name", "description", "enabled"]}),
        ("Work", {"fields": ["leader", "mode"]}),
        ("Limits", {"fields": ["max_total_tokens", "max_seconds", "member_timeout_seconds"]}),
    ]

    @admin.display(description="members")
    def member_list(self, obj: Team) -> str:
        return ", ".join(m.agent.slug for m in obj.memberships.select_related("agent"))


class KnowledgeBaseForm(forms.ModelForm):
    upload = forms.FileField(
        required=False, label="Add a document",
        help_text="Text, Markdown or PDF; indexed in the background (progress on the feed). "
        "A document of the same name is replaced.")

    class Meta:
        model = KnowledgeBase
        fields = ["slug", "name", "description", "chunk_chars", "chunk_overlap", "top_k"]

    def clean_upload(self) -> Any:
        upload = self.cleaned_data.get("upload")
        if upload is not None:
            data = upload.read()
            try:
                kind = document_kind(upload.name, data)
                if kind == KnowledgeDocument.Kind.PDF and data[:5] != b"%PDF-":
                    raise forms.ValidationError("Not a PDF file.")
                if kind != KnowledgeDocument.Kind.PDF:
                    data.decode("utf-8-sig")
            except UnicodeDecodeError:
                raise forms.ValidationError("Text and Markdown must be UTF-8.") from None
            if not data:
                raise forms.ValidationError("The file is empty.")
            self.upload_data = (upload.name, data)
        return upload


class KnowledgeDocumentInline(admin.TabularInline):
    model = KnowledgeDocument
    extra = 0
    fields = ["name", "kind", "status", "chunk_count", "error", "created_at", "indexed_at"]
    readonly_fields = fields

    def has_add_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


@admin.action(description="Re-index selected knowledge bases")
def reindex_knowledge_bases(modeladmin: Any, request: HttpRequest, queryset: Any) -> None:
    count = sum(services.knowledge_base_reindex(knowledge_base=kb) for kb in queryset)
    modeladmin.message_user(request, f"Queued {count} document(s) for indexing.")


@admin.register(KnowledgeBase)
class KnowledgeBaseAdmin(admin.ModelAdmin):
    form = KnowledgeBaseForm
    list_display = ["slug", "name", "document_count", "chunk_total", "top_k", "updated_at"]
    search_fields = ["slug", "name", "description"]
    inlines = [KnowledgeDocumentInline]
    actions = [reindex_knowledge_bases]

    @admin.display(description="documents")
    def document_count(self, obj: KnowledgeBase) -> int:
        return obj.documents.count()

    @admin.display(description="passages")
    def chunk_total(self, obj: KnowledgeBase) -> int:
        return obj.chunks.count()

    def save_model(self, request: HttpRequest, obj: KnowledgeBase, form: Any,
                   change: bool) -> None:
        super().save_model(request, obj, form, change)
        upload = getattr(form, "upload_data", None)
        if upload is not None:
            name, data = upload
            services.knowledge_document_add(knowledge_base=obj, name=name, data=data)
            messages.info(request, f"{name} is being indexed in the background.")


@admin.register(RoutingPolicy)
class RoutingPolicyAdmin(admin.ModelAdmin):
    """One row: how the model id ``auto`` picks an agent."""

    list_display = ["__str__", "router", "default_agent", "router_timeout_seconds"]

    def has_add_permission(self, request: HttpRequest) -> bool:
        return not RoutingPolicy.objects.exists() and super().has_add_permission(request)


class ApiKeyForm(forms.ModelForm):
    class Meta:
        model = ApiKey
        fields = ["name", "owner", "scopes", "agents", "expires_at", "requests_per_minute",
                  "tokens_per_minute", "users_across_keys", "hosted_tools", "budget_exempt"]

    scopes = forms.MultipleChoiceField(
        choices=ApiKey.Scope.choices, initial=[ApiKey.Scope.CHAT],
        widget=forms.CheckboxSelectMultiple,
    )

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.fields["hosted_tools"].required = False  # left out: the default, drop
        self.fields["tokens_per_minute"].required = False  # left out: no limit

    def clean_hosted_tools(self) -> str:
        return self.cleaned_data.get("hosted_tools") or "drop"

    def clean_tokens_per_minute(self) -> int:
        return self.cleaned_data.get("tokens_per_minute") or 0

    @property
    def changed_data(self) -> list[str]:
        # left out is the default (0), not a change
        return [f for f in super().changed_data if f != "tokens_per_minute" or
                self.cleaned_data.get(f, 0) != self.initial.get(f, 0)]


@admin.action(description="Revoke selected keys")
def revoke_keys(modeladmin: Any, request: HttpRequest, queryset: Any) -> None:
    actor = services.audit_actor_of_request(request, channel="admin")
    for key in queryset:
        services.api_key_revoke(key=key, actor=actor)
    modeladmin.message_user(request, f"Revoked {queryset.count()} key(s).")


@admin.register(ApiKey)
class ApiKeyAdmin(admin.ModelAdmin):
    form = ApiKeyForm
    list_display = ["name", "prefix", "owner", "scopes", "expires_at", "revoked_at",
                    "last_used_at", "requests_per_minute", "users_across_keys"]
    list_filter = ["revoked_at", "expires_at"]
    search_fields = ["name", "prefix"]
    readonly_fields = ["prefix", "last_used_at", "revoked_at", "created_at"]
    actions = [revoke_keys]
    filter_horizontal = ["agents"]

    def save_model(self, request: HttpRequest, obj: ApiKey, form: Any, change: bool) -> None:
        if change:
            super().save_model(request, obj, form, change)
            if form.changed_data:  # audited as the operator API's changes are
                services.audit_record(
                    actor=services.audit_actor_of_request(request, channel="admin"),
                    action="key_update", target=f"key:{obj.prefix}",
                    detail={"fields": sorted(form.changed_data)})
            return
        key, secret = services.api_key_create(
            name=obj.name, scopes=list(form.cleaned_data.get("scopes") or []),
            owner=obj.owner, expires_at=obj.expires_at,
            requests_per_minute=obj.requests_per_minute,
            tokens_per_minute=obj.tokens_per_minute, budget_exempt=obj.budget_exempt,
            users_across_keys=obj.users_across_keys,
            hosted_tools=obj.hosted_tools,
            actor=services.audit_actor_of_request(request, channel="admin"),
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


@admin.register(Thread)
class ThreadAdmin(admin.ModelAdmin):
    list_display = ["title", "agent", "status", "message_count", "input_tokens",
                    "output_tokens", "usage_estimated", "api_key", "updated_at"]
    list_filter = ["status", "agent", "usage_estimated"]
    # The page's agents and keys in two queries, not joined into the list's: joined, SQLite
    # started from the agents and sorted every thread (1.1 s at 100,000 threads, issue 27)
    # instead of reading the latest off the updated_at index.
    list_select_related = ()
    search_fields = ["title"]  # shows the search box; get_search_results decides
    search_help_text = "A thread id, a session key, or text in its title or messages."
    # The admin renders each cell through its display machinery, 0.5 ms a row here: 100 rows
    # a page took 65 ms at c=1 with the queries under 1 ms (issue 27); 50, as the console's
    # lists. A deep page reads its ids first (agents.http.paging); a filtered list is not counted
    # a second time for the unfiltered total.
    list_per_page = 50
    paginator = SeekPaginator
    show_full_result_count = False

    def get_queryset(self, request: HttpRequest) -> Any:
        return super().get_queryset(request).prefetch_related("agent", "api_key")

    def get_paginator(self, request: HttpRequest, queryset: Any, per_page: int,
                      orphans: int = 0, allow_empty_first_page: bool = True) -> Any:
        # The whole list (no filter, no search: only a page and an order asked for) is
        # every thread, counted by the tally's triggers rather than by reading them.
        whole = set(request.GET) <= {PAGE_VAR, ORDER_VAR}
        return self.paginator(queryset, per_page, orphans, allow_empty_first_page,
                              count=selectors.thread_total() if whole else None)

    def action_checkbox(self, obj: Thread) -> str:
        """Django's row checkbox, the same markup, without a form widget rendered through the
        template engine for every row (a third of the list's rendering, cProfile)."""
        return format_html(
            '<input type="checkbox" name="{}" value="{}" class="action-select" aria-label="{}">',
            helpers.ACTION_CHECKBOX_NAME, str(obj.pk),
            format_html(_("Select this object for an action - {}"), str(obj)))

    def get_search_results(self, request: HttpRequest, queryset: Any,
                           search_term: str) -> tuple[Any, bool]:
        return selectors.thread_admin_search(queryset, search_term), False
    # Messages are shown a page at a time below the thread (a thread may hold thousands:
    # an inline renders every one of them, and a 100,000-message page never finished).
    change_form_template = "admin/agents/thread/change_form.html"
    messages_per_page = 100
    message_preview_chars = 2000

    def change_view(self, request: HttpRequest, object_id: str, form_url: str = "",
                    extra_context: dict[str, Any] | None = None) -> Any:
        rows = Message.objects.filter(thread_id=object_id).order_by("seq").only(
            "seq", "role", "content", "tool_calls", "finish_reason", "error", "input_tokens",
            "output_tokens", "latency_ms", "created_at")
        try:
            paginator = Paginator(rows, self.messages_per_page)
            page = paginator.get_page(request.GET.get("messages_page"))
        except ValidationError:  # an id that is not a UUID: the admin answers that itself
            page = None
        if page is not None:
            for row in page.object_list:
                row.preview = row.content[:self.message_preview_chars]
                row.truncated = len(row.content) > self.message_preview_chars
        context = {**(extra_context or {}), "messages_page": page}
        return super().change_view(request, object_id, form_url, extra_context=context)

    def get_readonly_fields(self, request: HttpRequest, obj: Any = None) -> list[str]:
        return [f.name for f in Thread._meta.fields]

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return request.method in ("GET", "HEAD") and super().has_view_permission(request, obj)


@admin.register(Memory)
class MemoryAdmin(admin.ModelAdmin):
    list_display = ["agent", "scope", "text", "created_at"]
    list_filter = ["agent"]
    search_fields = ["text", "scope"]
    raw_id_fields = ["thread"]


@admin.register(Approval)
class ApprovalAdmin(admin.ModelAdmin):
    list_display = ["tool", "agent", "status", "decided_by", "created_at", "decided_at"]
    list_filter = ["status", "agent"]
    readonly_fields = [f.name for f in Approval._meta.fields]

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False


# MCP servers' and A2A agents' pages, registered by importing them
from agents.admin.schedules import ScheduleForm  # noqa: E402, F401
from agents.admin.spend import BudgetForm  # noqa: E402, F401
from agents.admin.tools import A2aAgentForm, McpServerForm  # noqa: E402, F401
from agents.admin.webhooks import WebhookEndpointAdmin  # noqa: E402, F401
