"""agents.infra.rows: the turn's writes without the ORM's per-statement work store exactly what the
ORM would, on SQLite and on PostgreSQL (the suite runs on both)."""

from __future__ import annotations

import uuid
from datetime import timedelta

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from agents.infra.rows import Add, rows_insert, rows_update
from agents.models import Message, Thread

pytestmark = pytest.mark.django_db


def _thread(agent, **fields):
    return Thread(agent=agent, session_key="s", history_digest="d" * 64, **fields)


def _stored(obj):
    """Every field as read back from the database (not the instance that was saved)."""
    fresh = type(obj).objects.get(pk=obj.pk)
    return {f.attname: getattr(fresh, f.attname) for f in type(obj)._meta.concrete_fields
            if f.attname not in ("id", "thread_id", "created_at", "updated_at")}


def test_insert_stores_what_save_stores(make_agent):
    agent = make_agent()
    expires = timezone.now() + timedelta(seconds=30)
    fields = dict(user="ann", title="t\u00e9st \U0001f600", workspace_root="/w",
                  message_count=2, lock_token="k" * 32, lock_expires_at=expires,
                  route={"method": "ranker", "score": 1.5}, usage_estimated=True)
    by_orm = _thread(agent, **fields)
    by_orm.save()
    fast = _thread(agent, **fields)
    assert rows_insert([fast]) == [fast]
    assert isinstance(fast.pk, uuid.UUID)
    assert fast.pk != by_orm.pk
    assert fast.created_at is not None
    assert fast.updated_at is not None
    assert _stored(fast) == _stored(by_orm)
    assert Thread.objects.get(pk=fast.pk).lock_expires_at == expires

    message = dict(seq=0, role="assistant", content="hi", tool_calls=[{"id": "c", "name": "f",
                   "arguments": "{}"}], parts=None, input_tokens=None, output_tokens=7,
                   passages=[{"source": "doc.md", "score": 0.5}], note="n", internal=True)
    orm_row = Message.objects.create(thread=by_orm, **message)
    fast_row = Message(thread=fast, **message)
    rows_insert([fast_row])
    assert isinstance(fast_row.pk, int)
    assert fast_row.pk > orm_row.pk
    assert not fast_row._state.adding
    assert _stored(fast_row) == _stored(orm_row)
    assert Message.objects.get(pk=fast_row.pk).parts is None  # SQL NULL, as the ORM stores


def test_insert_of_many_rows_sets_each_id_in_order(make_agent):
    thread = _thread(make_agent())
    rows_insert([thread])
    # More rows than SQLite takes parameters in one statement: split as bulk_create splits.
    rows = [Message(thread=thread, seq=i, role="user", content=f"m{i}") for i in range(120)]
    with CaptureQueriesContext(connection) as queries:
        rows_insert(rows)
    statements = connection.ops.bulk_batch_size(
        [f for f in Message._meta.concrete_fields if not f.primary_key], rows)
    assert len(queries) == -(-120 // statements)
    by_id = dict(Message.objects.filter(thread=thread).values_list("pk", "content"))
    assert [by_id[r.pk] for r in rows] == [f"m{i}" for i in range(120)]


def test_insert_of_nothing_touches_nothing():
    with CaptureQueriesContext(connection) as queries:
        assert rows_insert([]) == []
    assert len(queries) == 0


def test_update_sets_adds_and_counts_only_the_matching_rows(make_agent):
    agent = make_agent()
    held = _thread(agent, lock_token="a" * 32, input_tokens=5)
    other = _thread(agent, lock_token="b" * 32, input_tokens=5)
    rows_insert([held, other])
    later = timezone.now() + timedelta(hours=1)
    changed = rows_update(Thread, where={"id": held.pk, "lock_token": "a" * 32},
                          values={"input_tokens": Add(3), "status": "completed",
                                  "lock_token": "", "lock_expires_at": None,
                                  "route": {"method": "sticky"}, "updated_at": later})
    assert changed == 1
    held.refresh_from_db()
    other.refresh_from_db()
    assert (held.input_tokens, held.status, held.lock_token) == (8, "completed", "")
    assert (held.route, held.updated_at) == ({"method": "sticky"}, later)
    assert (other.input_tokens, other.status, other.lock_token) == (5, "active", "b" * 32)
    # The lease is gone: the same update no longer matches.
    assert rows_update(Thread, where={"id": held.pk, "lock_token": "a" * 32},
                       values={"input_tokens": Add(3)}) == 0


def test_update_refuses_a_condition_on_null(make_agent):
    with pytest.raises(ValueError, match="IS NULL"):
        rows_update(Thread, where={"lock_expires_at": None}, values={"status": "error"})
