"""The operator pages, mounted at ``/`` (gaia_site/urls.py includes them last)."""

from django.urls import path

from agents.pages import approvals, traces, views, webhooks

app_name = "ui"

urlpatterns = [
    path("", views.dashboard, name="dashboard"),
    path("login/", views.LoginView.as_view(), name="login"),
    path("logout/", views.LogoutView.as_view(), name="logout"),
    path("agents/", views.agent_list, name="agents"),
    path("agents/<path:slug>/", views.agent_detail, name="agent"),
    path("threads/", views.thread_list, name="threads"),
    path("threads/<str:thread_id>/", views.thread_detail, name="thread"),
    path("threads/<str:thread_id>/turns/<str:n>/", traces.turn_trace, name="turn-trace"),
    path("keys/", views.key_list, name="keys"),
    path("keys/<str:key_id>/", views.key_detail, name="key"),
    path("providers/", views.provider_list, name="providers"),
    path("providers/<str:name>/", views.provider_detail, name="provider"),
    path("budgets/", views.budget_list, name="budgets"),
    path("webhooks/", webhooks.webhook_list, name="webhooks"),
    path("webhooks/<str:endpoint_id>/", webhooks.webhook_detail, name="webhook"),
    path("audit/", views.audit_list, name="audit"),
    path("approvals/", approvals.approval_inbox, name="approvals"),
    path("fragments/<str:name>/", views.fragment, name="fragment"),
]
