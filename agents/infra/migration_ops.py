"""Migration operations that keep a large table writable while they run (issue 27).

A thread or message table may hold millions of rows by the time a migration adds an index to
it; a plain ``CREATE INDEX`` blocks every write to the table (every chat turn) until it ends.
On PostgreSQL these build the index with ``CREATE INDEX CONCURRENTLY`` (the migration must say
``atomic = False``: that statement cannot run in a transaction); on SQLite, which has one writer
anyway, they do what the plain operation does.
"""

from __future__ import annotations

from typing import Any

from django.contrib.postgres.operations import AddIndexConcurrently
from django.db import migrations


class AddIndexOnline(AddIndexConcurrently):
    """``AddIndex``, built concurrently on PostgreSQL."""

    def database_forwards(self, app_label: str, schema_editor: Any, from_state: Any,
                          to_state: Any) -> None:
        if schema_editor.connection.vendor == "postgresql":
            super().database_forwards(app_label, schema_editor, from_state, to_state)
        else:
            migrations.AddIndex.database_forwards(self, app_label, schema_editor, from_state,
                                                  to_state)

    def database_backwards(self, app_label: str, schema_editor: Any, from_state: Any,
                           to_state: Any) -> None:
        if schema_editor.connection.vendor == "postgresql":
            super().database_backwards(app_label, schema_editor, from_state, to_state)
        else:
            migrations.AddIndex.database_backwards(self, app_label, schema_editor, from_state,
                                                   to_state)

    def describe(self) -> str:
        return f"{super().describe()} (concurrently on PostgreSQL)"


def vendor_sql(statements: dict[str, list[str]]) -> Any:
    """A ``RunPython`` function that runs the SQL of ``statements`` given for the
    connection's vendor (``"postgresql"``, ``"sqlite"``), in order, without parameters
    (so ``%`` is SQL's modulo): triggers and functions, each database's own kind."""

    def run(apps: Any, schema_editor: Any) -> None:
        for sql in statements.get(schema_editor.connection.vendor, []):
            schema_editor.execute(sql, params=None)

    return run
