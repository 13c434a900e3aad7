"""Usage roll-up: 6-hour rows (every shape) and TOTAL rows (every span), so a week's or a
month's dashboard reads whole 6-hour spans and one row per bucket for its chart (issue 25).
(Not day rows: ``span`` is a smallint on PostgreSQL, and widening it rewrites the table.)

The new rows are sums of the FULL minute rows already stored, computed in SQL one day at a
time (``agents.services.usage.usage_derive``), each day in its own short transaction: on
PostgreSQL it first locks the roll-up's table against other writers (SHARE ROW EXCLUSIVE:
reads go on), so a turn finishing meanwhile waits a moment (about 10 ms per day of history
at 1,000,000 messages) and is counted once. Turns that finish under the code before this one
after their day was filled are missing from the new rows until ``usage_rebuild`` runs. The
minute rows per agent and per key are no longer kept (a window's minutes are its edges, read
from the FULL minute rows): each day's are deleted in the same transaction.
"""

from datetime import UTC, datetime, timedelta

from django.db import migrations, models, transaction

SPAN_6H = 21600
DAY = 86400


def fill(apps, schema_editor):
    from agents.models import UsageBucket
    from agents.services.usage import usage_derive

    connection = schema_editor.connection
    starts = UsageBucket.objects.using(connection.alias).filter(span=60, shape=0)
    first = starts.order_by("start").values_list("start", flat=True).first()
    if first is None:
        return
    day = datetime.fromtimestamp(int(first.timestamp()) // DAY * DAY, UTC)
    targets = [(60, 3), (3600, 3), (SPAN_6H, 0), (SPAN_6H, 1), (SPAN_6H, 2), (SPAN_6H, 3)]
    while day <= datetime.now(UTC):
        with transaction.atomic(using=connection.alias):
            if connection.vendor == "postgresql":
                with connection.cursor() as cursor:
                    cursor.execute("LOCK TABLE agents_usagebucket IN SHARE ROW EXCLUSIVE MODE")
            usage_derive(targets=targets, since=day, until=day + timedelta(days=1))
            # Minute rows are FULL and TOTAL only now: the per-agent and per-key ones go.
            UsageBucket.objects.using(connection.alias).filter(
                span=60, shape__in=[1, 2], start__gte=day,
                start__lt=day + timedelta(days=1)).delete()
        day += timedelta(days=1)


def drop(apps, schema_editor):
    UsageBucket = apps.get_model("agents", "UsageBucket")
    UsageBucket.objects.using(schema_editor.connection.alias).filter(
        models.Q(shape=3) | models.Q(span=SPAN_6H)).delete()


class Migration(migrations.Migration):
    atomic = False

    dependencies = [
        ('agents', '0018_thread_all_recent'),
    ]

    operations = [
        migrations.AlterField(
            model_name='usagebucket',
            name='shape',
            field=models.PositiveSmallIntegerField(choices=[(0, 'agent, key, model'), (1, 'agent and model (all keys)'), (2, 'key (all agents and models)'), (3, 'all agents, keys and models')]),
        ),
        migrations.RunPython(fill, drop),
    ]
