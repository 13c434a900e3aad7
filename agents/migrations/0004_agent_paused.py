from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("agents", "0003_thread_lookup_indexes"),
    ]

    operations = [
        migrations.AddField(
            model_name="agent",
            name="paused",
            field=models.BooleanField(
                default=False,
                help_text="A paused agent answers new requests with 503 until an operator "
                "resumes it; turns in flight finish.",
            ),
        ),
        migrations.AddIndex(
            model_name="thread",
            index=models.Index(fields=["agent", "lock_expires_at"], name="thread_agent_lease"),
        ),
    ]
