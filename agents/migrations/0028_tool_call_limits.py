"""Tool calls that fit their columns on every database (issue 35).

``Message.sender`` and ``recipient`` were ``varchar(100)``: a round of nine calculator calls
("calculator, calculator, ...") or five MCP calls was a 500 on PostgreSQL (SQLite does not
enforce the length). They are 300 now, and the loop names each party once, cut to fit.
On PostgreSQL widening a varchar changes the catalogue only (no table rewrite); on SQLite
nothing changes in the database (Django would rebuild the message table to change a length
SQLite ignores, and the rebuild would drop the table's triggers: its tallies, its search).

The audit trail gains two actions: ``expire`` (an approval nobody decided in time) and
``refuse`` (a call refused because its thread had too many approvals waiting), both by the
actor ``system``.
"""

from typing import Any

from django.db import migrations, models


class AlterFieldOffSqlite(migrations.AlterField):
    """``AlterField``, except on SQLite, whose columns keep no length (see above)."""

    def database_forwards(self, app_label: str, schema_editor: Any, from_state: Any,
                          to_state: Any) -> None:
        if schema_editor.connection.vendor != "sqlite":
            super().database_forwards(app_label, schema_editor, from_state, to_state)

    def database_backwards(self, app_label: str, schema_editor: Any, from_state: Any,
                           to_state: Any) -> None:
        if schema_editor.connection.vendor != "sqlite":
            super().database_backwards(app_label, schema_editor, from_state, to_state)


ACTIONS = [
    ("inject", "Inject"), ("kill", "Kill"), ("pause", "Pause"), ("resume", "Resume"),
    ("reload", "Reload"), ("approve", "Approve"), ("deny", "Deny"), ("expire", "Expire"),
    ("refuse", "Refuse"), ("run_cancel", "Run Cancel"), ("run_resume", "Run Resume"),
    ("key_create", "Key Create"), ("key_update", "Key Update"), ("key_revoke", "Key Revoke"),
    ("provider_create", "Provider Create"), ("provider_update", "Provider Update"),
    ("provider_test", "Provider Test"),
]


class Migration(migrations.Migration):

    dependencies = [
        ('agents', '0027_key_scoped_memory'),
    ]

    operations = [
        AlterFieldOffSqlite(
            model_name="message",
            name="sender",
            field=models.CharField(blank=True, max_length=300),
        ),
        AlterFieldOffSqlite(
            model_name="message",
            name="recipient",
            field=models.CharField(blank=True, max_length=300),
        ),
        migrations.AlterField(
            model_name="auditevent",
            name="action",
            field=models.CharField(choices=ACTIONS, max_length=32),
        ),
        migrations.AlterField(
            model_name="auditevent",
            name="channel",
            field=models.CharField(help_text="rest, ws, page, admin, v1 (a client) or system.",
                                   max_length=20),
        ),
    ]
