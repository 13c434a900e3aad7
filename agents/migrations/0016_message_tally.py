"""The stored message count kept by triggers (agents.models.MessageTally; issue 27).

PostgreSQL: statement-level triggers add or subtract each INSERT's and DELETE's row count in
the row of the connection's own shard (``pg_backend_pid() % SHARDS``), so a transaction
touches one tally row and concurrent turns neither deadlock nor often wait; TRUNCATE empties
the tally. SQLite (one writer): row triggers on shard 0.

The triggers are created and the existing messages counted in one transaction: on PostgreSQL
CREATE TRIGGER holds off writes to agents_message until it commits, for as long as counting
the table takes (about 0.1 s per million rows), so no message is missed or counted twice.
"""

from django.db import migrations, models

SHARDS = 64

PG = [
    f"""CREATE FUNCTION agents_message_tally_add() RETURNS trigger LANGUAGE plpgsql AS $$
    BEGIN
        INSERT INTO agents_messagetally (shard, n)
            SELECT pg_backend_pid() % {SHARDS}, count(*) FROM new_rows HAVING count(*) > 0
            ON CONFLICT (shard) DO UPDATE SET n = agents_messagetally.n + EXCLUDED.n;
        RETURN NULL;
    END $$""",
    f"""CREATE FUNCTION agents_message_tally_remove() RETURNS trigger LANGUAGE plpgsql AS $$
    BEGIN
        INSERT INTO agents_messagetally (shard, n)
            SELECT pg_backend_pid() % {SHARDS}, -count(*) FROM old_rows HAVING count(*) > 0
            ON CONFLICT (shard) DO UPDATE SET n = agents_messagetally.n + EXCLUDED.n;
        RETURN NULL;
    END $$""",
    """CREATE FUNCTION agents_message_tally_clear() RETURNS trigger LANGUAGE plpgsql AS $$
    BEGIN
        DELETE FROM agents_messagetally;
        RETURN NULL;
    END $$""",
    "CREATE TRIGGER agents_message_tally_add AFTER INSERT ON agents_message "
    "REFERENCING NEW TABLE AS new_rows FOR EACH STATEMENT "
    "EXECUTE FUNCTION agents_message_tally_add()",
    "CREATE TRIGGER agents_message_tally_remove AFTER DELETE ON agents_message "
    "REFERENCING OLD TABLE AS old_rows FOR EACH STATEMENT "
    "EXECUTE FUNCTION agents_message_tally_remove()",
    "CREATE TRIGGER agents_message_tally_clear AFTER TRUNCATE ON agents_message "
    "FOR EACH STATEMENT EXECUTE FUNCTION agents_message_tally_clear()",
    "INSERT INTO agents_messagetally (shard, n) SELECT 0, count(*) FROM agents_message",
]
PG_DROP = [
    "DROP TRIGGER IF EXISTS agents_message_tally_add ON agents_message",
    "DROP TRIGGER IF EXISTS agents_message_tally_remove ON agents_message",
    "DROP TRIGGER IF EXISTS agents_message_tally_clear ON agents_message",
    "DROP FUNCTION IF EXISTS agents_message_tally_add()",
    "DROP FUNCTION IF EXISTS agents_message_tally_remove()",
    "DROP FUNCTION IF EXISTS agents_message_tally_clear()",
]
SQLITE = [
    "CREATE TRIGGER agents_message_tally_add AFTER INSERT ON agents_message BEGIN "
    "INSERT INTO agents_messagetally (shard, n) VALUES (0, 1) "
    "ON CONFLICT (shard) DO UPDATE SET n = n + 1; END",
    "CREATE TRIGGER agents_message_tally_remove AFTER DELETE ON agents_message BEGIN "
    "INSERT INTO agents_messagetally (shard, n) VALUES (0, -1) "
    "ON CONFLICT (shard) DO UPDATE SET n = n - 1; END",
    "INSERT INTO agents_messagetally (shard, n) SELECT 0, count(*) FROM agents_message",
]
SQLITE_DROP = [
    "DROP TRIGGER IF EXISTS agents_message_tally_add",
    "DROP TRIGGER IF EXISTS agents_message_tally_remove",
]


def _run(statements):
    def run(apps, schema_editor):
        for sql in statements.get(schema_editor.connection.vendor, []):
            schema_editor.execute(sql, params=None)  # no placeholders: % is modulo
    return run


class Migration(migrations.Migration):

    dependencies = [
        ('agents', '0015_scale_indexes'),
    ]

    operations = [
        migrations.CreateModel(
            name='MessageTally',
            fields=[
                ('shard', models.PositiveSmallIntegerField(primary_key=True, serialize=False)),
                ('n', models.BigIntegerField(default=0)),
            ],
            options={
                'verbose_name': 'message tally',
            },
        ),
        migrations.RunPython(_run({"postgresql": PG, "sqlite": SQLITE}),
                             _run({"postgresql": PG_DROP, "sqlite": SQLITE_DROP}),
                             elidable=False),
    ]
