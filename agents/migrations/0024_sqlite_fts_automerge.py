"""SQLite's full-text indexes (migrations 0015 and 0020) merge their segments less eagerly
(issue 27): FTS5 writes each transaction's terms as a new segment and, by default, merges
whenever 4 segments of a level exist, a share of that work done by every write. At a million
messages that was most of why a chat turn cost 1.3-1.4x its CPU on an empty database (3.0-3.5
ms against 2.2-2.5, ``scripts/perf/data_scale.py``); merging at 8 segments brings it to
2.6-2.8 ms, and a search reads at most twice the segments per level (17.7 -> 19 ms for a
search matching a thousand threads). PostgreSQL: nothing to do.
"""

from django.db import migrations

TABLES = ("agents_message_fts", "agents_thread_title_fts")


def _automerge(segments):
    def run(apps, schema_editor):
        if schema_editor.connection.vendor != "sqlite":
            return
        for table in TABLES:
            schema_editor.execute(
                f"INSERT INTO {table}({table}, rank) VALUES ('automerge', {segments})")
    return run


class Migration(migrations.Migration):

    dependencies = [
        ('agents', '0023_agent_message_tally'),
    ]

    operations = [
        migrations.RunPython(_automerge(8), _automerge(4), elidable=False),
    ]
