"""The feed events of issue 14 in process (no Redis needed): each type once, its payload's
shape and values, from a real request through the /v1 views."""

from __future__ import annotations

import json
import time
from typing import Any

import pytest
from django.test import AsyncClient

from agents.models import AgentFallback, KnowledgeBase, RoutingPolicy, Team, TeamMember
from agents.outlet import realtime
from tests.factories import ProviderFactory

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def captured(monkeypatch: Any) -> list[dict[str, Any]]:
    events: list[dict[str, Any]] = []
    monkeypatch.setattr(realtime, "send_event", events.append)
    return events


def shaped(events: list[dict[str, Any]], name: str) -> list[dict[str, Any]]:
    found = [e for e in events if e["event"] == name]
    for e in found:
        assert set(e) == {"event", "timestamp", *realtime.EVENT_FIELDS[name]}
    return found


async def ask(key: str, model: str, text: str) -> Any:
    response = await AsyncClient().post(
        "/v1/chat/completions", content_type="application/json",
        data=json.dumps({"model": model, "messages": [{"role": "user", "content": text}]}),
        headers={"Authorization": f"Bearer {key}"})
    assert response.status_code == 200, response.content
    return json.loads(response.content)


@pytest.fixture
def setup(make_agent: Any) -> None:
    shaky = make_agent(slug="shaky", description="Volcanoes and lava.",
                       provider__name="shaky-provider", provider__options={"fail": "before"})
    AgentFallback.objects.create(agent=shaky, provider=ProviderFactory(
        name="steady", options={"reply": "lava is hot"}))
    RoutingPolicy.objects.create(default_agent=shaky)
    lead = make_agent(slug="ev-lead", provider__options={"reply": "summary"})
    team = Team.objects.create(slug="ev", display_name="Ev", leader=lead, mode="collaborate")
    TeamMember.objects.create(team=team, agent=make_agent(slug="ev-member",
                                                          provider__options={"reply": "part"}))


async def test_fallback_route_and_team_events(setup, api_key, captured):
    body = await ask(api_key, "auto", "Tell me about lava from volcanoes")
    assert body["model"] == "shaky"
    [route] = shaped(captured, "route_chosen")
    assert (route["model"], route["agent"], route["method"]) == ("auto", "shaky", "ranker")
    assert route["response_id"] == body["id"]
    [fallback] = shaped(captured, "provider_fallback")
    assert fallback["failed_provider"] == "shaky-provider"
    assert fallback["next_provider"] == "steady"
    assert "fake provider failed" in fallback["error"]
    assert fallback["response_id"] == body["id"]
    captured.clear()
    body = await ask(api_key, "team/ev", "go")
    steps = shaped(captured, "team_step")
    assert [s["step"] for s in steps] == ["task", "reply", "answer"]
    assert steps[1]["sender"] == "ev-member"
    assert steps[1]["recipient"] == "ev-lead"
    assert steps[1]["text"] == "part"
    assert {s["thread_id"] for s in steps} == {steps[0]["thread_id"]}
    inner = [e["message"] for e in shaped(captured, "message") if e["message"]["internal"]]
    assert [(m["from"], m["to"], m["payload_type"]) for m in inner] == [
        ("ev-lead", "ev-member", "task"), ("ev-member", "ev-lead", "reply")]


async def test_knowledge_events(make_agent, api_key, captured, settings):
    """Indexed by the embedded worker (this process's thread) so its events are seen here;
    the Celery path's are checked over Redis in test_knowledge_http."""
    from asgiref.sync import sync_to_async
    from django.db import connection

    settings.REDIS_URL = ""
    from agents import services as knowledge

    @sync_to_async
    def upload() -> int:
        kb = KnowledgeBase.objects.create(slug="evkb", name="Ev KB")
        doc = knowledge.knowledge_document_add(knowledge_base=kb, name="facts.txt",
                                               data=b"The kiln in Varn fires at dawn.")
        make_agent(slug="ev-reader", provider__options={"reply": "ok"}).knowledge_bases.add(kb)
        connection.close()  # this executor thread's; the test database is dropped later
        return doc.pk

    doc_id = await upload()
    deadline = time.monotonic() + 30
    while not any(e.get("status") == "ready" for e in captured) and time.monotonic() < deadline:
        await sync_to_async(time.sleep)(0.05)
    indexing = shaped(captured, "kb_indexing")
    assert [e["status"] for e in indexing] == ["queued", "indexing", "indexing", "ready"]
    assert {e["document_id"] for e in indexing} == {doc_id}
    assert indexing[-1]["chunks"] == 1
    body = await ask(api_key, "ev-reader", "When does the kiln in Varn fire?")
    [used] = shaped(captured, "knowledge_used")
    assert used["response_id"] == body["id"]
    assert used["passages"][0]["source"] == "facts.txt"
    assert "text" not in used["passages"][0]
