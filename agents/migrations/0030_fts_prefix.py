"""SQLite's text index of messages holds each message's first 32,768 characters (issue 35,
the class "nothing a client sends may hold the event loop").

The trigram index (migration 0015) cost about 0.36 ms of the one database thread per KB a
message stored: a client's 1 MB message held every other request's database work 0.36 s, a
20 MB body (``GAIA_MAX_BODY_BYTES``) 7 s. The triggers now index ``substr(content, 1, N)``
(N = :data:`PREFIX`, at most about 12 ms a message) and the messages already longer than
that are indexed anew by their beginning (an external-content FTS5 row is deleted with the
text it was indexed with: the triggers' delete uses the same prefix). A search of threads
finds what a message says in its first 32,768 characters; PostgreSQL's trigram index (GIN,
built by the database server, not this process's database thread) is unchanged.
"""

# ruff: noqa: S608 - the SQL is this module's own constants, no value from outside

from django.db import migrations

from agents.infra.migration_ops import vendor_sql

PREFIX = 32768
T = "agents_message_fts"


def _triggers(text: str) -> list[str]:
    new, old = text.format(row="new"), text.format(row="old")
    return [
        "DROP TRIGGER IF EXISTS agents_message_fts_insert",
        "DROP TRIGGER IF EXISTS agents_message_fts_delete",
        "DROP TRIGGER IF EXISTS agents_message_fts_update",
        f"CREATE TRIGGER agents_message_fts_insert AFTER INSERT ON agents_message BEGIN "
        f"INSERT INTO {T}(rowid, content) VALUES (new.id, {new}); END",
        f"CREATE TRIGGER agents_message_fts_delete AFTER DELETE ON agents_message BEGIN "
        f"INSERT INTO {T}({T}, rowid, content) VALUES ('delete', old.id, {old}); END",
        f"CREATE TRIGGER agents_message_fts_update AFTER UPDATE OF content ON agents_message "
        f"BEGIN INSERT INTO {T}({T}, rowid, content) VALUES ('delete', old.id, {old}); "
        f"INSERT INTO {T}(rowid, content) VALUES (new.id, {new}); END",
    ]


FORWARD = [
    *_triggers(f"substr({{row}}.content, 1, {PREFIX})"),
    # the long messages indexed whole: out with their whole text, in by their beginning
    f"INSERT INTO {T}({T}, rowid, content) SELECT 'delete', id, content FROM agents_message "
    f"WHERE length(content) > {PREFIX}",
    f"INSERT INTO {T}(rowid, content) SELECT id, substr(content, 1, {PREFIX}) "
    f"FROM agents_message WHERE length(content) > {PREFIX}",
]
BACKWARD = [
    *_triggers("{row}.content"),
    f"INSERT INTO {T}({T}) VALUES ('rebuild')",
]


class Migration(migrations.Migration):

    dependencies = [
        ('agents', '0029_hosted_tools'),
    ]

    operations = [
        migrations.RunPython(vendor_sql({"sqlite": FORWARD}), vendor_sql({"sqlite": BACKWARD}),
                             elidable=False),
    ]
