"""The lease services: renewal in one write, and a turn whose lease expired without it
finishing recorded as interrupted, with what the feed hears of it."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from agents import services
from agents.models import Message, Thread
from agents.outlet import realtime

pytestmark = pytest.mark.django_db


@pytest.fixture
def sent(monkeypatch):
    events = []
    monkeypatch.setattr(realtime, "send_event", events.append)
    return events


def held_thread(agent, *, expires_in, token="t" * 32):
    thread = Thread.objects.create(
        agent=agent, session_key="s", history_digest="d", message_count=1,
        lock_token=token, lock_expires_at=timezone.now() + timedelta(seconds=expires_in))
    thread.messages.create(seq=0, role="user", content="hello")
    return thread


def test_renewal_extends_only_the_named_leases(make_agent):
    agent = make_agent()
    mine = held_thread(agent, expires_in=1)
    other = Thread.objects.create(agent=agent, session_key="o", history_digest="d",
                                  lock_token="o" * 32,
                                  lock_expires_at=timezone.now() + timedelta(seconds=1))
    assert services.thread_leases_renew(tokens=["t" * 32], lease_seconds=30) == 1
    mine.refresh_from_db()
    other.refresh_from_db()
    assert mine.lock_expires_at > timezone.now() + timedelta(seconds=20)
    assert other.lock_expires_at < timezone.now() + timedelta(seconds=2)


def test_sweep_records_an_abandoned_turn_and_tells_the_feed(
        make_agent, sent, django_capture_on_commit_callbacks):
    agent = make_agent(slug="swept")
    thread = held_thread(agent, expires_in=-1)
    alive = held_thread(agent, expires_in=60, token="a" * 32)
    with django_capture_on_commit_callbacks(execute=True):
        assert services.thread_leases_sweep() == 1
    thread.refresh_from_db()
    assert thread.lock_token == ""
    assert thread.lock_expires_at is None
    assert thread.status == Thread.Status.ERROR
    assert thread.last_error == services.INTERRUPTED_ERROR
    assert thread.message_count == 2
    row = Message.objects.get(thread=thread, role="assistant")
    assert (row.seq, row.finish_reason, row.error) == (1, "interrupted",
                                                       services.INTERRUPTED_ERROR)
    alive.refresh_from_db()
    assert alive.lock_token  # a live lease is left alone
    names = [e["event"] for e in sent]
    assert names == ["message", "thread_updated", "error"]
    assert sent[1]["status"] == "error"
    assert sent[1]["thread_id"] == str(thread.pk)
    assert sent[2]["agent"] == "swept"
    assert services.thread_leases_sweep() == 0  # idempotent
