"""A turn's writes as few statements as its database allows (issue 27): on PostgreSQL a new
thread with its messages is one statement and the turn's end (reply, thread, usage, the
agent's other work) another; what is written is the same on both databases, and a turn
that lost its lease still appends its reply after the thread's newer messages."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from agents import services
from agents.kernel import llm
from agents.models import Message, Thread, UsageBucket

pytestmark = pytest.mark.django_db


def begin(agent, text, *, session=None, before=()):
    """A turn of ``text`` after the client-held history ``before`` ((role, text) pairs)."""
    incoming = [llm.Message(role=role, parts=(llm.TextPart(said),))
                for role, said in (*before, ("user", text))]
    start = services.thread_turn_begin(
        agent=agent, api_key=None, session_key=session or f"s:{text}", thread_id=None,
        user="u", incoming=incoming,
        workspace_root=None, dialect="chat", lease_seconds=60, exclusive=session is not None)
    assert start is not None
    return start


def finish(start, text):
    services.thread_turn_finish(
        start=start, result=services.TurnResult(text=text, finish_reason="stop",
                                                input_tokens=4, output_tokens=3, ttft_ms=7),
        dialect="chat")


def writes(queries):
    return [q["sql"] for q in queries.captured_queries
            if not q["sql"].startswith(("SAVEPOINT", "RELEASE SAVEPOINT"))
            and not q["sql"].lstrip().upper().startswith("SELECT")]


def test_a_turn_is_two_statements_on_postgresql_and_stores_the_same_rows(make_agent):
    agent = make_agent(slug="few")
    with CaptureQueriesContext(connection) as began:
        start = begin(agent, "hello")
    with CaptureQueriesContext(connection) as ended:
        finish(start, "hi there")
    if connection.vendor == "postgresql":
        assert len(writes(began)) == 1, writes(began)
        assert len(writes(ended)) == 1, writes(ended)
        assert "WITH held AS" in writes(ended)[0]
    else:  # SQLite: its statements are calls in the process, several are as cheap as one
        assert len(writes(began)) == 2
    thread = Thread.objects.get(pk=start.thread_id)
    assert (thread.message_count, thread.status, thread.lock_token) == (2, "completed", "")
    assert (thread.input_tokens, thread.output_tokens) == (4, 3)
    rows = list(thread.messages.order_by("seq").values_list("seq", "role", "content"))
    assert rows == [(0, "user", "hello"), (1, "assistant", "hi there")]
    # The usage roll-up: one request in each of its buckets (minute, hour, six hours).
    assert set(UsageBucket.objects.values_list("requests", flat=True)) == {1}
    assert UsageBucket.objects.filter(span=60, shape=0).get().input_tokens == 4


def test_a_turn_that_lost_its_lease_appends_after_the_newer_turn(make_agent):
    agent = make_agent(slug="late")
    first = begin(agent, "one", session="k")
    finish(first, "reply one")
    late = begin(agent, "two", session="k", before=[("user", "one"),
                                                     ("assistant", "reply one")])
    assert late.thread_id == first.thread_id
    # Its lease expires; another turn takes the thread and stores its message at seq 3.
    newer = "n" * 32
    Thread.objects.filter(pk=late.thread_id).update(
        lock_token=newer, lock_expires_at=timezone.now() + timedelta(seconds=60),
        message_count=4)
    Message.objects.create(thread_id=late.thread_id, seq=3, role="user", content="three")
    finish(late, "reply two")
    thread = Thread.objects.get(pk=late.thread_id)
    assert thread.lock_token == newer  # the newer turn keeps its lease
    assert thread.message_count == 5
    assert list(thread.messages.order_by("seq").values_list("seq", "content")) == [
        (0, "one"), (1, "reply one"), (2, "two"), (3, "three"), (4, "reply two")]
    # Counted once in the usage roll-up, whichever way the reply was stored.
    assert UsageBucket.objects.filter(span=60, shape=0).get().requests == 2



def continue_by_id(agent, thread_id, text):
    """A turn that names its thread and sends only its new message (stateful)."""
    return services.thread_turn_begin(
        agent=agent, api_key=None, session_key="by-id", thread_id=str(thread_id), user="u",
        incoming=[llm.Message(role="user", parts=(llm.TextPart(text),))],
        workspace_root=None, dialect="chat", lease_seconds=60)


def test_a_thread_continued_by_id_is_one_write_and_reads_what_came_before(make_agent):
    agent = make_agent(slug="onward")
    first = begin(agent, "one", session="k")
    finish(first, "reply one")
    with CaptureQueriesContext(connection) as began:
        start = continue_by_id(agent, first.thread_id, "two")
    if connection.vendor == "postgresql":  # the lease, the message and the count at once
        assert len(writes(began)) == 1, writes(began)
        assert "WITH held AS" in writes(began)[0]
    assert start is not None
    assert start.found == "stateful"
    # What the backend gets: the stored conversation, then the new message once.
    assert [m.text for m in start.history] == ["one", "reply one", "two"]
    assert (start.next_seq, start.base_digest) == (3, Thread.objects.get(
        pk=first.thread_id).history_digest)
    # Its lease is held: a second turn on the thread waits, and nothing of it is stored.
    assert continue_by_id(agent, first.thread_id, "meanwhile") is None
    finish(start, "reply two")
    again = continue_by_id(agent, first.thread_id, "three")
    assert [m.text for m in again.history] == ["one", "reply one", "two", "reply two", "three"]
    thread = Thread.objects.get(pk=first.thread_id)
    assert thread.lock_token == again.lock_token
    assert thread.message_count == 5
    assert list(thread.messages.order_by("seq").values_list("content", flat=True)) == [
        "one", "reply one", "two", "reply two", "three"]


def test_a_thread_whose_turn_was_abandoned_is_continued_after_its_record(make_agent):
    agent = make_agent(slug="after-crash")
    first = begin(agent, "one", session="k")
    finish(first, "reply one")
    crashed = continue_by_id(agent, first.thread_id, "two")
    # The process running that turn died: its lease expired without the turn finishing.
    Thread.objects.filter(pk=crashed.thread_id).update(
        lock_expires_at=timezone.now() - timedelta(seconds=1))
    start = continue_by_id(agent, first.thread_id, "three")
    assert start is not None
    assert start.lock_token != crashed.lock_token
    thread = Thread.objects.get(pk=first.thread_id)
    assert list(thread.messages.order_by("seq").values_list("role", "content")) == [
        ("user", "one"), ("assistant", "reply one"), ("user", "two"),
        ("assistant", ""), ("user", "three")]
    assert thread.messages.get(seq=3).finish_reason == "interrupted"
    assert [m.text for m in start.history] == ["one", "reply one", "two", "three"]
