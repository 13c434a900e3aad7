"""The tallies (issue 27) are kept by their triggers alone: Django no longer manages their
tables, so its flush (between tests, ``manage.py flush``) leaves them out. On SQLite the flush
deletes tables in no set order; a tally it cleared before its table's rows went negative
through their delete triggers, and the thread list page failed on the negative count. The
tables stay as they are: this changes no schema.
"""

from django.db import migrations


class Migration(migrations.Migration):

    dependencies = [
        ('agents', '0025_fts_automerge'),
    ]

    operations = [
        migrations.AlterModelOptions(
            name='agentmessagetally',
            options={'managed': False, 'verbose_name': 'agent message tally'},
        ),
        migrations.AlterModelOptions(
            name='messagetally',
            options={'managed': False, 'verbose_name': 'message tally'},
        ),
        migrations.AlterModelOptions(
            name='threadtally',
            options={'managed': False, 'verbose_name': 'thread tally'},
        ),
    ]
