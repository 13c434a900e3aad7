"""Teams, fallbacks and the routing policy in the admin and the agents YAML."""

from __future__ import annotations

import pytest
from django.urls import reverse

from agents import services
from agents.kernel.exceptions import InvalidRequest
from agents.models import AgentFallback, RoutingPolicy, Team

pytestmark = pytest.mark.django_db

DOC = {
    "providers": [{"name": "p", "kind": "fake"}],
    "agents": [{"slug": s, "provider": "p"} for s in ("lead", "a", "b")],
    "teams": [{"slug": "duo", "display_name": "Duo", "leader": "lead", "members": ["b", "a"],
               "mode": "collaborate", "max_total_tokens": 999}],
}


def test_teams_yaml_round_trip():
    report = services.agents_import(data=DOC)
    assert "team:duo" in report.created
    team = Team.objects.get(slug="duo")
    assert [m.agent.slug for m in team.memberships.order_by("position")] == ["b", "a"]
    exported = services.agents_export()["teams"][0]
    assert exported["members"] == ["b", "a"]
    assert exported["mode"] == "collaborate"
    assert exported["max_total_tokens"] == 999
    again = services.agents_import(data=DOC)
    assert "team:duo" in again.unchanged
    swapped = {**DOC, "teams": [{"slug": "duo", "members": ["a", "b"]}]}
    assert "team:duo" in services.agents_import(data=swapped).updated


@pytest.mark.parametrize(("team", "message"), [
    ({"slug": "x", "members": ["a"]}, "needs a leader"),
    ({"slug": "x", "leader": "ghost", "members": ["a"]}, "unknown leader"),
    ({"slug": "x", "leader": "lead", "members": ["a", "nobody"]}, "unknown member"),
    ({"slug": "x", "leader": "lead", "members": ["a"], "mode": "chaos"}, "mode"),
    ({"slug": "x", "leader": "lead", "members": ["a"], "colour": 1}, "unknown fields"),
])
def test_bad_team_entries_are_refused_and_nothing_is_written(team, message):
    services.agents_import(data={**DOC, "teams": []})
    with pytest.raises(InvalidRequest, match=message):
        services.agents_import(data={"teams": [team]})
    assert not Team.objects.filter(slug="x").exists()


def test_admin_pages_for_teams_fallbacks_and_routing(admin_client):
    services.agents_import(data=DOC)
    team = Team.objects.get()
    page = admin_client.get(reverse("admin:agents_team_change", args=[team.pk]))
    assert page.status_code == 200
    assert b"max_total_tokens" in page.content
    listing = admin_client.get(reverse("admin:agents_team_changelist"))
    assert b"b, a" in listing.content
    agent = team.leader
    page = admin_client.get(reverse("admin:agents_agent_change", args=[agent.pk]))
    assert b"Fallback providers" in page.content
    assert admin_client.get(reverse("admin:agents_routingpolicy_add")).status_code == 200
    RoutingPolicy.objects.create(default_agent=agent)
    assert admin_client.get(reverse("admin:agents_routingpolicy_add")).status_code == 403
    assert not AgentFallback.objects.exists()
