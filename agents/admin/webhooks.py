"""The admin's webhook pages, read-mostly: endpoints are made in the console or by
``/api/v1/webhooks`` (where the secret is shown, once, and the URL's rules hold); here an
endpoint's description and whether it is enabled change, and it is deleted, through the API's
services (audited). The secret is never shown. Deliveries and their attempts are read-only;
an action redelivers them."""

from __future__ import annotations

from typing import Any

from django.contrib import admin, messages
from django.http import HttpRequest
from django.urls import reverse
from django.utils.html import format_html

from agents import services
from agents.kernel.exceptions import GaiaError
from agents.models import WebhookAttempt, WebhookDelivery, WebhookEndpoint


@admin.register(WebhookEndpoint)
class WebhookEndpointAdmin(admin.ModelAdmin):
    list_display = ["url", "description", "events", "enabled", "created_at", "console"]
    list_filter = ["enabled"]
    search_fields = ["url", "description"]
    fields = ["url", "events", "description", "enabled", "created_at", "updated_at", "console"]
    readonly_fields = ["url", "events", "created_at", "updated_at", "console"]

    @admin.display(description="console")
    def console(self, obj: WebhookEndpoint) -> str:
        return format_html('<a href="{}">deliveries</a>', reverse("ui:webhook", args=[obj.pk]))

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False  # made in the console or by the API: its secret is shown there, once

    def save_model(self, request: HttpRequest, obj: WebhookEndpoint, form: Any,
                   change: bool) -> None:
        services.webhook_endpoint_save(
            endpoint=WebhookEndpoint.objects.get(pk=obj.pk),
            fields={f: form.cleaned_data[f] for f in ("description", "enabled")},
            actor=services.audit_actor_of_request(request, channel="admin"))

    def delete_model(self, request: HttpRequest, obj: WebhookEndpoint) -> None:
        services.webhook_endpoint_delete(
            endpoint=obj, actor=services.audit_actor_of_request(request, channel="admin"))

    def delete_queryset(self, request: HttpRequest, queryset: Any) -> None:
        for endpoint in queryset:
            self.delete_model(request, endpoint)


class WebhookAttemptInline(admin.TabularInline):
    model = WebhookAttempt
    extra = 0
    can_delete = False
    fields = ["number", "manual", "started_at", "status_code", "latency_ms", "response",
              "error"]
    readonly_fields = fields

    def has_add_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


@admin.action(description="Redeliver selected deliveries (same event id)")
def redeliver(modeladmin: Any, request: HttpRequest, queryset: Any) -> None:
    actor = services.audit_actor_of_request(request, channel="admin")
    done = 0
    for delivery in queryset.select_related("endpoint"):
        try:
            services.webhook_delivery_redeliver(delivery=delivery, actor=actor)
            done += 1
        except GaiaError as exc:
            modeladmin.message_user(request, f"{delivery.event_id}: {exc.message}",
                                    messages.WARNING)
    modeladmin.message_user(request, f"Redelivering {done} deliver{'y' if done == 1 else 'ies'}.")


@admin.register(WebhookDelivery)
class WebhookDeliveryAdmin(admin.ModelAdmin):
    list_display = ["event_id", "endpoint", "type", "state", "attempts", "status_code",
                    "latency_ms", "created_at"]
    list_filter = ["state", "type"]
    search_fields = ["event_id"]
    list_select_related = ["endpoint"]
    inlines = [WebhookAttemptInline]
    actions = [redeliver]

    def get_readonly_fields(self, request: HttpRequest, obj: Any = None) -> list[str]:
        return [f.name for f in WebhookDelivery._meta.fields]

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return request.method in ("GET", "HEAD") and super().has_view_permission(request, obj)

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        # The log goes with its endpoint (whose delete page asks this of each delivery), and
        # never alone.
        match = getattr(request, "resolver_match", None)
        return obj is not None and getattr(match, "url_name", "") == \
            "agents_webhookendpoint_delete"
