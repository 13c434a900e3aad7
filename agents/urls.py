"""``/api/v1``: the operator API (agents/apis/)."""

from django.urls import path, re_path

from agents import apis
from agents.apis import (
    agent_admin,
    console,
    organism,
    schedules,
    spend,
    tools,
    traces,
    usage,
    webhooks,
)

app_name = "operator"

# Agent slugs may hold "/" (SLUG_VALIDATOR), so the agent routes match their suffix first.
urlpatterns = [
    path("organism", apis.OrganismApi.as_view(), name="organism"),
    path("organism/config", apis.OrganismConfigApi.as_view(), name="organism-config"),
    path("organism/reload", apis.OrganismReloadApi.as_view(), name="organism-reload"),
    path("organism/stop", organism.OrganismStopApi.as_view(), name="organism-stop"),
    path("organism/start", organism.OrganismStartApi.as_view(), name="organism-start"),
    path("agents", agent_admin.AgentListApi.as_view(), name="agent-list"),
    path("agents/<path:slug>/memories", tools.AgentMemoryListApi.as_view(),
         name="agent-memories"),
    # str, not int: "-1" is an unknown memory (404), not another route's 405
    path("agents/<path:slug>/memories/<str:memory_id>", tools.AgentMemoryDetailApi.as_view(),
         name="agent-memory"),
    path("agents/<path:slug>/config", apis.AgentConfigApi.as_view(), name="agent-config"),
    path("agents/<path:slug>/schema", apis.AgentSchemaApi.as_view(), name="agent-schema"),
    path("agents/<path:slug>/pause", apis.AgentPauseApi.as_view(), name="agent-pause"),
    path("agents/<path:slug>/resume", apis.AgentResumeApi.as_view(), name="agent-resume"),
    path("agents/<path:slug>", agent_admin.AgentDetailApi.as_view(), name="agent-detail"),
    path("threads", apis.ThreadListApi.as_view(), name="thread-list"),
    path("threads/<str:thread_id>", apis.ThreadDetailApi.as_view(), name="thread-detail"),
    path("threads/<str:thread_id>/messages", apis.ThreadMessageListApi.as_view(),
         name="thread-messages"),
    path("threads/<str:thread_id>/turns", traces.TurnListApi.as_view(), name="thread-turns"),
    # str, not int: "-1" or "x" is an unknown turn (404), not another route's
    path("threads/<str:thread_id>/turns/<str:n>", traces.TurnTraceApi.as_view(),
         name="thread-turn"),
    path("threads/<str:thread_id>/kill", apis.ThreadKillApi.as_view(), name="thread-kill"),
    path("messages", apis.MessageListApi.as_view(), name="message-list"),
    path("approvals", tools.ApprovalListApi.as_view(), name="approval-list"),
    path("approvals/<str:approval_id>", tools.ApprovalDecideApi.as_view(),
         name="approval-detail"),
    path("inject", apis.InjectApi.as_view(), name="inject"),
    path("keys", console.KeyListApi.as_view(), name="key-list"),
    path("keys/<str:key_id>", console.KeyDetailApi.as_view(), name="key-detail"),
    path("keys/<str:key_id>/revoke", console.KeyRevokeApi.as_view(), name="key-revoke"),
    path("providers", console.ProviderListApi.as_view(), name="provider-list"),
    path("providers/<str:name>", console.ProviderDetailApi.as_view(), name="provider-detail"),
    path("providers/<str:name>/test", console.ProviderTestApi.as_view(), name="provider-test"),
    path("audit", console.AuditListApi.as_view(), name="audit-list"),
    path("budgets", spend.BudgetListApi.as_view(), name="budget-list"),
    path("budgets/<int:budget_id>", spend.BudgetDetailApi.as_view(), name="budget-detail"),
    path("prices", spend.PriceListApi.as_view(), name="price-list"),
    path("usage", usage.UsageApi.as_view(), name="usage"),
    path("webhooks", webhooks.WebhookListApi.as_view(), name="webhook-list"),
    path("webhooks/<str:endpoint_id>", webhooks.WebhookDetailApi.as_view(),
         name="webhook-detail"),
    path("webhooks/<str:endpoint_id>/deliveries", webhooks.WebhookDeliveryListApi.as_view(),
         name="webhook-deliveries"),
    path("webhooks/<str:endpoint_id>/deliveries/<str:delivery_id>",
         webhooks.WebhookDeliveryDetailApi.as_view(), name="webhook-delivery"),
    path("webhooks/<str:endpoint_id>/deliveries/<str:delivery_id>/redeliver",
         webhooks.WebhookRedeliverApi.as_view(), name="webhook-redeliver"),
    path("schedules", schedules.ScheduleListApi.as_view(), name="schedule-list"),
    # str, not int: an id that is no number is an unknown schedule (404), not another route's
    path("schedules/<str:schedule_id>", schedules.ScheduleDetailApi.as_view(),
         name="schedule-detail"),
    re_path(r"^[\s\S]*$", apis.ApiNotFoundApi.as_view()),
]
