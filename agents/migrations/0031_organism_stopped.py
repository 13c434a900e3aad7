"""The organism's state on the configuration stamp's row (``POST /api/v1/organism/stop`` and
``/start``): every process reads it again when the stamp changes."""

from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('agents', '0030_fts_prefix'),
    ]

    operations = [
        migrations.AddField(
            model_name='configstamp',
            name='organism_stopped',
            field=models.BooleanField(default=False),
        ),
        migrations.AddField(
            model_name='configstamp',
            name='organism_state_at',
            field=models.DateTimeField(blank=True, null=True),
        ),
        migrations.AddField(
            model_name='configstamp',
            name='organism_state_by',
            field=models.CharField(blank=True, default='', max_length=320),
        ),
        migrations.AlterField(
            model_name='auditevent',
            name='action',
            field=models.CharField(choices=[
                ('inject', 'Inject'), ('kill', 'Kill'), ('pause', 'Pause'),
                ('resume', 'Resume'), ('reload', 'Reload'), ('stop', 'Stop'), ('start', 'Start'),
                ('approve', 'Approve'), ('deny', 'Deny'), ('expire', 'Expire'),
                ('refuse', 'Refuse'), ('run_cancel', 'Run Cancel'), ('run_resume', 'Run Resume'),
                ('key_create', 'Key Create'), ('key_update', 'Key Update'),
                ('key_revoke', 'Key Revoke'), ('provider_create', 'Provider Create'),
                ('provider_update', 'Provider Update'), ('provider_test', 'Provider Test')],
                max_length=32),
        ),
    ]
