"""``Message.agent``: the thread's agent on each of its messages, and the index of an agent's
newest messages (issue 27). ``GET /api/v1/messages?agent=`` read everyone's newest messages
until 50 were the agent's: 11,000 rows at a million messages when another agent had been
busy (26-44 ms); with the index it is one seek.

Runs online on PostgreSQL (the migration is not atomic):
1. the column is added empty (no default: no table rewrite, a moment's lock);
2. a trigger fills it for rows stored without it (what Gaia stores names its agent; rows
   from elsewhere, and turns of processes still running the old code, get their thread's);
3. the existing rows are filled in batches of 20,000, each its own short transaction, so
   chat turns keep writing meanwhile (47 s for a million rows on PostgreSQL here: every
   row is written again, with its index entries);
4. the index is built with CREATE INDEX CONCURRENTLY.
SQLite does the same steps (one writer: the batches only bound each transaction).
"""

from django.db import migrations, models, transaction

from agents.infra.migration_ops import AddIndexOnline, vendor_sql

BATCH = 20_000

PG = [
    """CREATE FUNCTION agents_message_agent() RETURNS trigger LANGUAGE plpgsql AS $$
    BEGIN
        SELECT agent_id INTO NEW.agent_id FROM agents_thread WHERE id = NEW.thread_id;
        RETURN NEW;
    END $$""",
    "CREATE TRIGGER agents_message_agent BEFORE INSERT ON agents_message FOR EACH ROW "
    "WHEN (NEW.agent_id IS NULL) EXECUTE FUNCTION agents_message_agent()",
]
PG_DROP = [
    "DROP TRIGGER IF EXISTS agents_message_agent ON agents_message",
    "DROP FUNCTION IF EXISTS agents_message_agent()",
]
SQLITE = [
    "CREATE TRIGGER agents_message_agent AFTER INSERT ON agents_message "
    "WHEN new.agent_id IS NULL BEGIN UPDATE agents_message SET agent_id = "
    "(SELECT agent_id FROM agents_thread WHERE id = new.thread_id) WHERE id = new.id; END",
]
SQLITE_DROP = ["DROP TRIGGER IF EXISTS agents_message_agent"]

FILL = {
    "postgresql": "UPDATE agents_message AS m SET agent_id = t.agent_id FROM agents_thread AS t "
                  "WHERE t.id = m.thread_id AND m.id >= %s AND m.id < %s "
                  "AND m.agent_id IS NULL",
    "sqlite": "UPDATE agents_message SET agent_id = (SELECT agent_id FROM agents_thread "
              "WHERE id = agents_message.thread_id) WHERE id >= %s AND id < %s "
              "AND agent_id IS NULL",
}



def fill(apps, schema_editor):
    connection = schema_editor.connection
    sql = FILL[connection.vendor]
    with connection.cursor() as cursor:
        cursor.execute("SELECT MIN(id), MAX(id) FROM agents_message")
        low, high = cursor.fetchone()
    if low is None:
        return
    for start in range(low, high + 1, BATCH):
        with transaction.atomic(using=connection.alias), connection.cursor() as cursor:
            cursor.execute(sql, [start, start + BATCH])


class Migration(migrations.Migration):
    atomic = False

    dependencies = [
        ('agents', '0021_thread_messages_removed'),
    ]

    operations = [
        migrations.AddField(
            model_name='message',
            name='agent',
            field=models.ForeignKey(blank=True, db_constraint=False, db_index=False, editable=False, null=True, on_delete=models.deletion.DO_NOTHING, related_name='+', to='agents.agent'),
        ),
        migrations.RunPython(vendor_sql({"postgresql": PG, "sqlite": SQLITE}),
                             vendor_sql({"postgresql": PG_DROP, "sqlite": SQLITE_DROP}),
                             elidable=False),
        migrations.RunPython(fill, migrations.RunPython.noop, elidable=False),
        AddIndexOnline(
            model_name='message',
            index=models.Index(fields=['agent', '-created_at', '-id'],
                               name='message_agent_recent'),
        ),
    ]
