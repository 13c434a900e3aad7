"""End users' usage per day beside per hour (``UserUsage.span``): a 30-day read sums 30 day
rows a user instead of 720 hours. The days of the hours already stored are summed here."""

from django.db import migrations, models


def days_from_hours(apps, schema_editor):
    UserUsage = apps.get_model("agents", "UserUsage")
    days: dict[tuple, list[int]] = {}
    fields = ("requests", "input_tokens", "output_tokens", "cost_nanos", "unpriced")
    for row in UserUsage.objects.filter(span=3600).iterator(chunk_size=2000):
        day = row.start.replace(hour=0, minute=0, second=0, microsecond=0)
        sums = days.setdefault((day, row.key_id, row.user, row.agent_id), [0] * len(fields))
        for i, name in enumerate(fields):
            sums[i] += getattr(row, name)
    UserUsage.objects.bulk_create(
        [UserUsage(span=86400, start=day, key_id=key_id, user=user, agent_id=agent_id,
                   **dict(zip(fields, sums, strict=True)))
         for (day, key_id, user, agent_id), sums in days.items()], batch_size=500)


class Migration(migrations.Migration):

    dependencies = [
        ('agents', '0033_spend'),
    ]

    operations = [
        migrations.AddField(
            model_name='userusage',
            name='span',
            field=models.PositiveIntegerField(db_default=3600, default=3600),
        ),
        migrations.RemoveConstraint(
            model_name='userusage',
            name='user_usage_unique',
        ),
        migrations.AddConstraint(
            model_name='userusage',
            constraint=models.UniqueConstraint(fields=('span', 'start', 'key_id', 'user', 'agent_id'), name='user_usage_span_unique'),
        ),
        migrations.RunPython(days_from_hours, migrations.RunPython.noop),
    ]
