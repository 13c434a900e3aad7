"""``Thread.messages_removed``, bumped by a trigger whenever messages of a thread are deleted
(issue 27): a process keeping a conversation in memory (agents.selectors.history) checked
that none of its rows went away by counting them on every turn, and on PostgreSQL that count
read every message of the thread (14 ms a turn on a 12,000-message thread). Now it reads one
number off the thread.

The column is added with ``ALTER TABLE ... ADD COLUMN ... DEFAULT 0`` on both databases, and
the default stays in the database: Django's own AddField drops it afterwards, which SQLite
cannot do in place, so on SQLite it copies the whole table, and a copy loses the table's
triggers (migration 0020's title index stopped following renames). On PostgreSQL 11 and
later a constant default rewrites nothing: online. The trigger is statement-level there (one
UPDATE per thread per DELETE, however many rows it deletes); SQLite: a row trigger.
"""

from django.db import migrations, models

from agents.infra.migration_ops import vendor_sql

ADD_COLUMN = ("ALTER TABLE agents_thread ADD COLUMN messages_removed integer NOT NULL "
              "DEFAULT 0 CHECK (messages_removed >= 0)")
DROP_COLUMN = "ALTER TABLE agents_thread DROP COLUMN messages_removed"

PG = [
    """CREATE FUNCTION agents_message_removed() RETURNS trigger LANGUAGE plpgsql AS $$
    BEGIN
        UPDATE agents_thread SET messages_removed = messages_removed + 1
            WHERE id IN (SELECT DISTINCT thread_id FROM old_rows);
        RETURN NULL;
    END $$""",
    "CREATE TRIGGER agents_message_removed AFTER DELETE ON agents_message "
    "REFERENCING OLD TABLE AS old_rows FOR EACH STATEMENT "
    "EXECUTE FUNCTION agents_message_removed()",
]
PG_DROP = [
    "DROP TRIGGER IF EXISTS agents_message_removed ON agents_message",
    "DROP FUNCTION IF EXISTS agents_message_removed()",
]
SQLITE = [
    "CREATE TRIGGER agents_message_removed AFTER DELETE ON agents_message BEGIN "
    "UPDATE agents_thread SET messages_removed = messages_removed + 1 "
    "WHERE id = old.thread_id; END",
]
SQLITE_DROP = ["DROP TRIGGER IF EXISTS agents_message_removed"]



class Migration(migrations.Migration):

    dependencies = [
        ('agents', '0020_thread_title_search'),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[migrations.AddField(
                model_name='thread',
                name='messages_removed',
                field=models.PositiveIntegerField(default=0, editable=False),
            )],
            database_operations=[migrations.RunSQL(ADD_COLUMN, DROP_COLUMN, elidable=False)],
        ),
        migrations.RunPython(vendor_sql({"postgresql": PG, "sqlite": SQLITE}),
                             vendor_sql({"postgresql": PG_DROP, "sqlite": SQLITE_DROP}),
                             elidable=False),
    ]
