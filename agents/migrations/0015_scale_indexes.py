"""Indexes for every operator list as the data grows (issue 27).

Runs online on PostgreSQL: each index is built with CREATE INDEX CONCURRENTLY (so this migration
is not atomic), and chat turns keep writing while it runs. The text search indexes are outside
Django's model state (they are one database's own kind): on PostgreSQL trigram GIN indexes on
UPPER(title) and UPPER(content), the expressions Django's ``icontains`` compares; on SQLite an
FTS5 table of message texts with the trigram tokenizer (substring matching, as ``icontains``),
kept in step by triggers.
"""

from django.db import migrations, models

from agents.infra.migration_ops import AddIndexOnline

PG_SEARCH = [
    "CREATE EXTENSION IF NOT EXISTS pg_trgm",
    "CREATE INDEX CONCURRENTLY IF NOT EXISTS message_content_trgm ON agents_message "
    "USING gin (UPPER(content) gin_trgm_ops)",
    "CREATE INDEX CONCURRENTLY IF NOT EXISTS thread_title_trgm ON agents_thread "
    "USING gin (UPPER(title) gin_trgm_ops)",
]
PG_SEARCH_DROP = [
    "DROP INDEX CONCURRENTLY IF EXISTS message_content_trgm",
    "DROP INDEX CONCURRENTLY IF EXISTS thread_title_trgm",
]
SQLITE_SEARCH = [
    "CREATE VIRTUAL TABLE agents_message_fts USING fts5(content, content='agents_message', "
    "content_rowid='id', tokenize='trigram')",
    "CREATE TRIGGER agents_message_fts_insert AFTER INSERT ON agents_message BEGIN "
    "INSERT INTO agents_message_fts(rowid, content) VALUES (new.id, new.content); END",
    "CREATE TRIGGER agents_message_fts_delete AFTER DELETE ON agents_message BEGIN "
    "INSERT INTO agents_message_fts(agents_message_fts, rowid, content) "
    "VALUES ('delete', old.id, old.content); END",
    "CREATE TRIGGER agents_message_fts_update AFTER UPDATE OF content ON agents_message BEGIN "
    "INSERT INTO agents_message_fts(agents_message_fts, rowid, content) "
    "VALUES ('delete', old.id, old.content); "
    "INSERT INTO agents_message_fts(rowid, content) VALUES (new.id, new.content); END",
    "INSERT INTO agents_message_fts(agents_message_fts) VALUES ('rebuild')",
]
SQLITE_SEARCH_DROP = [
    "DROP TRIGGER IF EXISTS agents_message_fts_insert",
    "DROP TRIGGER IF EXISTS agents_message_fts_delete",
    "DROP TRIGGER IF EXISTS agents_message_fts_update",
    "DROP TABLE IF EXISTS agents_message_fts",
]


def _run(statements: dict[str, list[str]]):
    def run(apps, schema_editor):
        for sql in statements.get(schema_editor.connection.vendor, []):
            schema_editor.execute(sql)
    return run


class Migration(migrations.Migration):
    atomic = False

    dependencies = [
        ('agents', '0014_usage_bucket'),
    ]

    operations = [
        AddIndexOnline(
            model_name='message',
            index=models.Index(fields=['-created_at', '-id'], name='message_recent'),
        ),
        AddIndexOnline(
            model_name='thread',
            index=models.Index(condition=models.Q(('run_id__isnull', True)),
                               fields=['-updated_at', 'id'], name='thread_recent'),
        ),
        AddIndexOnline(
            model_name='thread',
            index=models.Index(fields=['status', '-updated_at'], name='thread_status_recent'),
        ),
        AddIndexOnline(
            model_name='thread',
            index=models.Index(fields=['agent', '-updated_at'], name='thread_agent_recent'),
        ),
        migrations.RunPython(
            _run({"postgresql": PG_SEARCH, "sqlite": SQLITE_SEARCH}),
            _run({"postgresql": PG_SEARCH_DROP, "sqlite": SQLITE_SEARCH_DROP}),
            elidable=False,
        ),
    ]
