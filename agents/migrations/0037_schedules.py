# Schedules (agents.Schedule), each owning a django_celery_beat periodic task; their audit actions.

import django.db.models.deletion
from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('agents', '0036_webhooks'),
        ('django_celery_beat', '0019_alter_periodictasks_options'),
    ]

    operations = [
        migrations.AlterField(
            model_name='auditevent',
            name='action',
            field=models.CharField(choices=[('inject', 'Inject'), ('kill', 'Kill'), ('pause', 'Pause'), ('resume', 'Resume'), ('reload', 'Reload'), ('stop', 'Stop'), ('start', 'Start'), ('approve', 'Approve'), ('deny', 'Deny'), ('expire', 'Expire'), ('refuse', 'Refuse'), ('run_cancel', 'Run Cancel'), ('run_resume', 'Run Resume'), ('key_create', 'Key Create'), ('key_update', 'Key Update'), ('key_revoke', 'Key Revoke'), ('provider_create', 'Provider Create'), ('provider_update', 'Provider Update'), ('provider_test', 'Provider Test'), ('price_set', 'Price Set'), ('price_delete', 'Price Delete'), ('budget_create', 'Budget Create'), ('budget_update', 'Budget Update'), ('budget_delete', 'Budget Delete'), ('webhook_create', 'Webhook Create'), ('webhook_update', 'Webhook Update'), ('webhook_delete', 'Webhook Delete'), ('webhook_redeliver', 'Webhook Redeliver'), ('schedule_create', 'Schedule Create'), ('schedule_update', 'Schedule Update'), ('schedule_delete', 'Schedule Delete')], max_length=32),
        ),
        migrations.CreateModel(
            name='Schedule',
            fields=[
                ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                ('name', models.CharField(max_length=100, unique=True)),
                ('enabled', models.BooleanField(default=True)),
                ('cron', models.CharField(help_text="Five fields: minute hour day-of-month month day-of-week (Celery's crontab).", max_length=200)),
                ('timezone', models.CharField(default='UTC', help_text='An IANA time zone.', max_length=64)),
                ('kind', models.CharField(choices=[('agent', 'Agent'), ('replay', 'Replay')], default='agent', max_length=10)),
                ('prompt', models.TextField(blank=True)),
                ('thread_mode', models.CharField(choices=[('new', 'New'), ('continue', 'Continue')], default='new', max_length=10)),
                ('suite', models.CharField(blank=True, max_length=100)),
                ('targets', models.JSONField(blank=True, default=list)),
                ('last_run_id', models.PositiveIntegerField(blank=True, help_text='The newest replay run it started.', null=True)),
                ('last_fired_for', models.DateTimeField(blank=True, editable=False, null=True)),
                ('last_run_at', models.DateTimeField(blank=True, null=True)),
                ('last_status', models.CharField(choices=[('never', 'Never'), ('running', 'Running'), ('ok', 'Ok'), ('failed', 'Failed')], default='never', max_length=10)),
                ('last_error', models.TextField(blank=True)),
                ('run_count', models.PositiveIntegerField(default=0)),
                ('created_at', models.DateTimeField(auto_now_add=True)),
                ('updated_at', models.DateTimeField(auto_now=True)),
                ('agent', models.ForeignKey(blank=True, null=True, on_delete=django.db.models.deletion.SET_NULL, related_name='schedules', to='agents.agent')),
                ('periodic_task', models.OneToOneField(blank=True, editable=False, null=True, on_delete=django.db.models.deletion.SET_NULL, related_name='gaia_schedule', to='django_celery_beat.periodictask')),
                ('thread', models.ForeignKey(blank=True, null=True, on_delete=django.db.models.deletion.SET_NULL, related_name='+', to='agents.thread')),
            ],
            options={
                'ordering': ['name'],
            },
        ),
    ]
