"""Agent edits in the admin reach the operator feed (agent_changed), and the admin edits
``paused``."""

from __future__ import annotations

import pytest
from django.urls import reverse

from agents.models import Agent, AuditEvent
from agents.outlet import realtime

pytestmark = pytest.mark.django_db


@pytest.fixture
def events(monkeypatch):
    sent: list[dict] = []
    monkeypatch.setattr(realtime, "send_event", sent.append)
    return sent


def form(agent: Agent, **changes):
    data = {"slug": agent.slug, "display_name": agent.display_name,
            "description": agent.description, "enabled": "on",
            "instructions": agent.instructions, "provider": agent.provider_id,
            "upstream_model": "", "temperature": "", "top_p": "",
            "max_input_tokens": agent.max_input_tokens,
            "max_output_tokens": agent.max_output_tokens, "context_overflow": "error",
            "tools": "[]", "memory": "off", "max_steps": 8, "tool_budget_seconds": 300,
            "max_turn_seconds": 900, "require_approval": '"never"', "approval_timeout_seconds": 300,
            "hosted_tools": "drop", "provides": "{}",
            # the fallback providers inline's (empty) formset
            "fallbacks-TOTAL_FORMS": "0", "fallbacks-INITIAL_FORMS": "0"}
    data.update(changes)
    return {k: v for k, v in data.items() if v is not None}


def changes(events):
    return [(e["agent"], e["change"]) for e in events if e["event"] == "agent_changed"]


def test_admin_create_edit_pause_delete_announce(admin_client, make_agent, make_provider, events,
                                                 django_capture_on_commit_callbacks):
    provider = make_provider(name="p")
    with django_capture_on_commit_callbacks(execute=True):
        r = admin_client.post(reverse("admin:agents_agent_add"), form(
            Agent(slug="fresh", display_name="Fresh", provider=provider, max_input_tokens=100,
                  max_output_tokens=10)))
    assert r.status_code == 302, r.content
    agent = Agent.objects.get(slug="fresh")
    assert changes(events) == [("fresh", "created")]

    events.clear()
    with django_capture_on_commit_callbacks(execute=True):
        admin_client.post(reverse("admin:agents_agent_change", args=[agent.pk]),
                          form(agent, display_name="Renamed"))
    assert changes(events) == [("fresh", "updated")]
    agent.refresh_from_db()  # the next form sends what is stored: only paused changes

    events.clear()
    with django_capture_on_commit_callbacks(execute=True):
        admin_client.post(reverse("admin:agents_agent_change", args=[agent.pk]),
                          form(agent, paused="on"))
    agent.refresh_from_db()
    assert agent.paused
    assert changes(events) == [("fresh", "paused")]
    assert [e["state"] for e in events if e["event"] == "agent_state"] == ["paused"]

    events.clear()
    with django_capture_on_commit_callbacks(execute=True):
        admin_client.post(reverse("admin:agents_agent_delete", args=[agent.pk]), {"post": "yes"})
    assert not Agent.objects.filter(slug="fresh").exists()
    assert changes(events) == [("fresh", "deleted")]


def test_admin_list_shows_paused_and_bulk_actions_announce(admin_client, make_agent, events,
                                                           django_capture_on_commit_callbacks):
    a = make_agent(slug="one")
    Agent.objects.filter(pk=a.pk).update(paused=True)
    page = admin_client.get(reverse("admin:agents_agent_changelist") + "?paused__exact=1")
    assert b">one</a>" in page.content
    assert b"paused" in page.content.lower()
    running = admin_client.get(reverse("admin:agents_agent_changelist") + "?paused__exact=0")
    assert b">one</a>" not in running.content
    with django_capture_on_commit_callbacks(execute=True):
        admin_client.post(reverse("admin:agents_agent_changelist"),
                          {"action": "disable_agents", "_selected_action": [a.pk]})
    assert changes(events) == [("one", "updated")]
    events.clear()
    with django_capture_on_commit_callbacks(execute=True):
        admin_client.post(reverse("admin:agents_agent_changelist"),
                          {"action": "delete_selected", "_selected_action": [a.pk],
                           "post": "yes"})
    assert changes(events) == [("one", "deleted")]


def test_admin_checks_an_agent_by_the_api_rule_and_audits_it(admin_client, make_agent):
    agent = make_agent(slug="a1")
    url = reverse("admin:agents_agent_change", args=[agent.pk])
    r = admin_client.post(url, form(agent, tools='["mcp:nowhere"]'))
    assert r.status_code == 200  # the form again, with the rule's message on the field
    assert "unknown tool &#x27;mcp:nowhere&#x27;" in r.content.decode()
    agent.refresh_from_db()
    assert agent.tools == []
    r = admin_client.post(url, form(agent, tools='["calculator"]', slug="renamed",
                                         listed="on"))
    assert r.status_code == 302
    agent.refresh_from_db()
    assert (agent.slug, agent.tools) == ("a1", ["calculator"])  # a slug is made once
    trail = AuditEvent.objects.get(action="agent_update")
    assert (trail.target, trail.channel, trail.detail) == ("agent:a1", "admin",
                                                           {"changed": ["tools"]})
