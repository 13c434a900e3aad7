"""SQLite's text index holds each message's first 32,768 characters (migration 0030).

Indexing a message cost its whole length in trigrams on the one database thread (a 1 MB
message 0.36 s, every other request's database work waiting); now its beginning only. A
search still finds what a message says there, the index stays consistent through updates and
deletes (an external-content FTS5 row is deleted with the text it was indexed with), and the
migration re-indexes the long messages indexed whole before it. On 026b68b the words past the
beginning were indexed (the assertions that they are not fail there).
"""

from __future__ import annotations

import importlib
import sqlite3
from typing import Any

import pytest
from django.db import connection

from agents.models import Message, Thread
from agents.selectors.threads import thread_matches

prefix = importlib.import_module("agents.migrations.0030_fts_prefix")
search_0015 = importlib.import_module("agents.migrations.0015_scale_indexes")

OPENING, CLOSING = "zorblaxopening", "quilltonclosing"
LONG = f"{OPENING} " + "lorem ipsum dolor " * 60_000 + f" {CLOSING}"  # about 1 MB


def found(q: str) -> list[Any]:
    return [row["pk"] for row in thread_matches(q)]


@pytest.mark.django_db
def test_a_long_message_is_found_by_its_beginning(make_agent: Any) -> None:
    if connection.vendor != "sqlite":
        pytest.skip("SQLite's FTS5 index (PostgreSQL's trigram index is the server's work)")
    thread = Thread.objects.create(agent=make_agent(), session_key="s", history_digest="d",
                                   message_count=1)
    message = thread.messages.create(seq=0, role="user", content=LONG)
    assert len(LONG) > prefix.PREFIX * 30
    assert found(OPENING) == [thread.pk]
    assert found("lorem ipsum") == [thread.pk]
    assert found(CLOSING) == []  # past the indexed beginning
    Message.objects.filter(pk=message.pk).update(content=f"now {CLOSING}")
    assert found(CLOSING) == [thread.pk]
    assert found(OPENING) == []
    Message.objects.filter(pk=message.pk).update(content=LONG)
    assert found(OPENING) == [thread.pk]
    Message.objects.filter(pk=message.pk).delete()
    assert found(OPENING) == []
    assert found("lorem") == []
    with connection.cursor() as cursor:  # the index's own structure is sound
        cursor.execute(f"INSERT INTO {prefix.T}({prefix.T}) VALUES ('integrity-check')")


def test_the_migration_reindexes_the_long_messages_by_their_beginning() -> None:
    """On a database indexed by 0015's triggers (whole texts): after 0030 a long message is
    found by its beginning only, a short one as before, and deleting them leaves the index
    empty and sound (a delete with another text than the indexed one would not)."""
    db = sqlite3.connect(":memory:")
    db.execute("CREATE TABLE agents_message (id INTEGER PRIMARY KEY, content TEXT)")
    for sql in search_0015.SQLITE_SEARCH:
        db.execute(sql)
    db.execute("INSERT INTO agents_message (id, content) VALUES (1, ?), (2, ?)",
               (LONG, f"short {CLOSING}"))
    for sql in prefix.FORWARD:
        db.execute(sql)

    def match(q: str) -> list[int]:
        return [r[0] for r in db.execute(f"SELECT rowid FROM {prefix.T} WHERE {prefix.T} "  # noqa: S608 - ours
                                         "MATCH ? ORDER BY rowid", (f'"{q}"',))]

    assert match(OPENING) == [1]
    assert match(CLOSING) == [2]
    db.execute("DELETE FROM agents_message")
    assert match("lorem") == []
    assert match("short") == []
    db.execute(f"INSERT INTO {prefix.T}({prefix.T}) VALUES ('integrity-check')")
    for sql in prefix.BACKWARD:  # and back: whole texts again
        db.execute(sql)
    db.execute("INSERT INTO agents_message (id, content) VALUES (3, ?)", (LONG,))
    assert match(CLOSING) == [3]
