"""Each agent's message count kept by triggers (agents.models.AgentMessageTally; issue 27),
as migration 0016 keeps the total: statement-level triggers on PostgreSQL add each INSERT's
and DELETE's rows per agent into the connection's own shard row of the agent; row triggers
on SQLite (shard 0), which read the thread's agent when the row names none (its own
trigger of migration 0022 fills it in after the insert).

The triggers are created and the existing messages counted per agent in one transaction: on
PostgreSQL CREATE TRIGGER holds off writes to agents_message until it commits, for as long
as counting the table takes (0.4 s per million rows here), so no message is missed or
counted twice.
"""

import django.db.models.deletion
from django.db import migrations, models

from agents.infra.migration_ops import vendor_sql

SHARDS = 64  # MessageTally.SHARDS
TALLY = "agents_agentmessagetally"
UPSERT = "ON CONFLICT (agent_id, shard) DO UPDATE SET n = agents_agentmessagetally.n + EXCLUDED.n"

PG = [
    f"""CREATE FUNCTION agents_message_agent_tally_add() RETURNS trigger LANGUAGE plpgsql AS $$
    BEGIN
        INSERT INTO {TALLY} (agent_id, shard, n)
            SELECT agent_id, pg_backend_pid() % {SHARDS}, count(*) FROM new_rows
            WHERE agent_id IS NOT NULL GROUP BY agent_id {UPSERT};
        RETURN NULL;
    END $$""",
    f"""CREATE FUNCTION agents_message_agent_tally_remove() RETURNS trigger
    LANGUAGE plpgsql AS $$
    BEGIN
        INSERT INTO {TALLY} (agent_id, shard, n)
            SELECT agent_id, pg_backend_pid() % {SHARDS}, -count(*) FROM old_rows
            WHERE agent_id IS NOT NULL GROUP BY agent_id {UPSERT};
        RETURN NULL;
    END $$""",
    f"""CREATE FUNCTION agents_message_agent_tally_clear() RETURNS trigger
    LANGUAGE plpgsql AS $$
    BEGIN
        DELETE FROM {TALLY};
        RETURN NULL;
    END $$""",
    "CREATE TRIGGER agents_message_agent_tally_add AFTER INSERT ON agents_message "
    "REFERENCING NEW TABLE AS new_rows FOR EACH STATEMENT "
    "EXECUTE FUNCTION agents_message_agent_tally_add()",
    "CREATE TRIGGER agents_message_agent_tally_remove AFTER DELETE ON agents_message "
    "REFERENCING OLD TABLE AS old_rows FOR EACH STATEMENT "
    "EXECUTE FUNCTION agents_message_agent_tally_remove()",
    "CREATE TRIGGER agents_message_agent_tally_clear AFTER TRUNCATE ON agents_message "
    "FOR EACH STATEMENT EXECUTE FUNCTION agents_message_agent_tally_clear()",
    f"INSERT INTO {TALLY} (agent_id, shard, n) SELECT agent_id, 0, count(*) "
    "FROM agents_message WHERE agent_id IS NOT NULL GROUP BY agent_id",
]
PG_DROP = [
    "DROP TRIGGER IF EXISTS agents_message_agent_tally_add ON agents_message",
    "DROP TRIGGER IF EXISTS agents_message_agent_tally_remove ON agents_message",
    "DROP TRIGGER IF EXISTS agents_message_agent_tally_clear ON agents_message",
    "DROP FUNCTION IF EXISTS agents_message_agent_tally_add()",
    "DROP FUNCTION IF EXISTS agents_message_agent_tally_remove()",
    "DROP FUNCTION IF EXISTS agents_message_agent_tally_clear()",
]
AGENT_OF = "(SELECT agent_id FROM agents_thread WHERE id = {row}.thread_id)"
SQLITE = [
    "CREATE TRIGGER agents_message_agent_tally_add AFTER INSERT ON agents_message BEGIN "
    f"INSERT INTO {TALLY} (agent_id, shard, n) SELECT "
    f"COALESCE(new.agent_id, {AGENT_OF.format(row='new')}) AS a, 0, 1 WHERE a IS NOT NULL "
    f"{UPSERT.replace('EXCLUDED.n', '1')}; END",
    "CREATE TRIGGER agents_message_agent_tally_remove AFTER DELETE ON agents_message BEGIN "
    f"INSERT INTO {TALLY} (agent_id, shard, n) SELECT "
    f"COALESCE(old.agent_id, {AGENT_OF.format(row='old')}) AS a, 0, -1 WHERE a IS NOT NULL "
    f"{UPSERT.replace('EXCLUDED.n', '1').replace('+ 1', '- 1')}; END",
    f"INSERT INTO {TALLY} (agent_id, shard, n) SELECT agent_id, 0, count(*) "
    "FROM agents_message WHERE agent_id IS NOT NULL GROUP BY agent_id",
]
SQLITE_DROP = [
    "DROP TRIGGER IF EXISTS agents_message_agent_tally_add",
    "DROP TRIGGER IF EXISTS agents_message_agent_tally_remove",
]



class Migration(migrations.Migration):

    dependencies = [
        ('agents', '0022_message_agent'),
    ]

    operations = [
        migrations.CreateModel(
            name='AgentMessageTally',
            fields=[
                ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                ('shard', models.PositiveSmallIntegerField()),
                ('n', models.BigIntegerField(default=0)),
                ('agent', models.ForeignKey(db_constraint=False, db_index=False, on_delete=django.db.models.deletion.DO_NOTHING, related_name='+', to='agents.agent')),
            ],
            options={
                'verbose_name': 'agent message tally',
                'constraints': [models.UniqueConstraint(fields=('agent', 'shard'), name='agent_message_tally_unique')],
            },
        ),
        migrations.RunPython(vendor_sql({"postgresql": PG, "sqlite": SQLITE}),
                             vendor_sql({"postgresql": PG_DROP, "sqlite": SQLITE_DROP}),
                             elidable=False),
    ]
