"""SQLite's text indexes merge their segments 16 at a time, not 4 (issue 27).

FTS5 writes each transaction's new terms as a small segment and, with ``automerge`` at its
default of 4, merges a level's segments once it holds 4 of them, a few pages at a time on
every later write. At a million messages that merging was most of the text index's cost in a
chat turn: storing a turn's two messages took 0.83 ms of CPU, against 0.19 on an empty
database, over 20,000 turns appended to the data_scale.py database (a direct sqlite3 timing
of the turn's statements); with 16, 0.28 ms. A search then reads more, smaller segments:
0.25 -> 0.36 ms for a rare word, 0.63 -> 0.87 for "Thread 777", 19.0 -> 19.7 for a phrase
in 20,000 messages. The setting is kept in the index's own config table: nothing is rebuilt.
PostgreSQL has no such setting (its trigram indexes are GIN).
"""

from django.db import migrations

from agents.infra.migration_ops import vendor_sql

TABLES = ("agents_message_fts", "agents_thread_title_fts")


def automerge(n: int) -> list[str]:
    return [f"INSERT INTO {t}({t}, rank) VALUES ('automerge', {n})" for t in TABLES]


class Migration(migrations.Migration):

    dependencies = [
        ('agents', '0024_thread_tally'),
    ]

    operations = [
        migrations.RunPython(vendor_sql({"sqlite": automerge(16)}),
                             vendor_sql({"sqlite": automerge(4)}), elidable=False),
    ]
