"""The thread count kept by triggers (agents.models.ThreadTally; issue 27), as migration 0016
keeps the message total: how many threads, and how many of them a benchmark run's (the thread
list leaves those out). PostgreSQL: statement-level triggers add each INSERT's and DELETE's
rows into the connection's own shard row, and a row trigger moves a thread whose run changes
(``run_id`` set or cleared); TRUNCATE empties the tally. SQLite (one writer): row triggers on
shard 0.

The triggers are created and the existing threads counted in one transaction: on PostgreSQL
CREATE TRIGGER holds off writes to agents_thread until it commits, for as long as counting
the table takes (3-4 ms for 100,000 threads here), so no thread is missed or counted twice.
"""

from django.db import migrations, models

from agents.infra.migration_ops import vendor_sql

SHARDS = 64  # MessageTally.SHARDS
TALLY = "agents_threadtally"
UPSERT = (f"ON CONFLICT (shard) DO UPDATE SET n = {TALLY}.n + EXCLUDED.n, "
          f"runs = {TALLY}.runs + EXCLUDED.runs")

PG = [
    f"""CREATE FUNCTION agents_thread_tally_add() RETURNS trigger LANGUAGE plpgsql AS $$
    BEGIN
        INSERT INTO {TALLY} (shard, n, runs)
            SELECT pg_backend_pid() % {SHARDS}, count(*), count(run_id) FROM new_rows
            HAVING count(*) > 0 {UPSERT};
        RETURN NULL;
    END $$""",
    f"""CREATE FUNCTION agents_thread_tally_remove() RETURNS trigger LANGUAGE plpgsql AS $$
    BEGIN
        INSERT INTO {TALLY} (shard, n, runs)
            SELECT pg_backend_pid() % {SHARDS}, -count(*), -count(run_id) FROM old_rows
            HAVING count(*) > 0 {UPSERT};
        RETURN NULL;
    END $$""",
    f"""CREATE FUNCTION agents_thread_tally_run() RETURNS trigger LANGUAGE plpgsql AS $$
    BEGIN
        INSERT INTO {TALLY} (shard, n, runs)
            VALUES (pg_backend_pid() % {SHARDS}, 0,
                    CASE WHEN NEW.run_id IS NULL THEN -1 ELSE 1 END) {UPSERT};
        RETURN NULL;
    END $$""",
    f"""CREATE FUNCTION agents_thread_tally_clear() RETURNS trigger LANGUAGE plpgsql AS $$
    BEGIN
        DELETE FROM {TALLY};
        RETURN NULL;
    END $$""",
    "CREATE TRIGGER agents_thread_tally_add AFTER INSERT ON agents_thread "
    "REFERENCING NEW TABLE AS new_rows FOR EACH STATEMENT "
    "EXECUTE FUNCTION agents_thread_tally_add()",
    "CREATE TRIGGER agents_thread_tally_remove AFTER DELETE ON agents_thread "
    "REFERENCING OLD TABLE AS old_rows FOR EACH STATEMENT "
    "EXECUTE FUNCTION agents_thread_tally_remove()",
    # A row trigger: an UPDATE trigger with transition tables would run on every update of
    # a thread (each turn updates its counts); this one runs only where the run changes.
    "CREATE TRIGGER agents_thread_tally_run AFTER UPDATE OF run_id ON agents_thread "
    "FOR EACH ROW WHEN ((OLD.run_id IS NULL) <> (NEW.run_id IS NULL)) "
    "EXECUTE FUNCTION agents_thread_tally_run()",
    "CREATE TRIGGER agents_thread_tally_clear AFTER TRUNCATE ON agents_thread "
    "FOR EACH STATEMENT EXECUTE FUNCTION agents_thread_tally_clear()",
    f"INSERT INTO {TALLY} (shard, n, runs) SELECT 0, count(*), count(run_id) FROM agents_thread",
]
PG_DROP = [
    *(f"DROP TRIGGER IF EXISTS agents_thread_tally_{name} ON agents_thread"
      for name in ("add", "remove", "run", "clear")),
    *(f"DROP FUNCTION IF EXISTS agents_thread_tally_{name}()"
      for name in ("add", "remove", "run", "clear")),
]
SQLITE = [
    "CREATE TRIGGER agents_thread_tally_add AFTER INSERT ON agents_thread BEGIN "
    f"INSERT INTO {TALLY} (shard, n, runs) VALUES (0, 1, new.run_id IS NOT NULL) {UPSERT}; END",
    "CREATE TRIGGER agents_thread_tally_remove AFTER DELETE ON agents_thread BEGIN "
    f"INSERT INTO {TALLY} (shard, n, runs) VALUES (0, -1, -(old.run_id IS NOT NULL)) "
    f"{UPSERT}; END",
    "CREATE TRIGGER agents_thread_tally_run AFTER UPDATE OF run_id ON agents_thread "
    "WHEN (old.run_id IS NULL) <> (new.run_id IS NULL) BEGIN "
    f"INSERT INTO {TALLY} (shard, n, runs) "
    f"VALUES (0, 0, CASE WHEN new.run_id IS NULL THEN -1 ELSE 1 END) {UPSERT}; END",
    f"INSERT INTO {TALLY} (shard, n, runs) SELECT 0, count(*), count(run_id) FROM agents_thread",
]
SQLITE_DROP = [f"DROP TRIGGER IF EXISTS agents_thread_tally_{name}"
               for name in ("add", "remove", "run")]


class Migration(migrations.Migration):

    dependencies = [
        ('agents', '0023_agent_message_tally'),
    ]

    operations = [
        migrations.CreateModel(
            name='ThreadTally',
            fields=[
                ('shard', models.PositiveSmallIntegerField(primary_key=True, serialize=False)),
                ('n', models.BigIntegerField(default=0)),
                ('runs', models.BigIntegerField(default=0)),
            ],
            options={
                'verbose_name': 'thread tally',
            },
        ),
        migrations.RunPython(vendor_sql({"postgresql": PG, "sqlite": SQLITE}),
                             vendor_sql({"postgresql": PG_DROP, "sqlite": SQLITE_DROP}),
                             elidable=False),
    ]
