from django.apps import AppConfig


class AgentsConfig(AppConfig):
    name = "agents"
    verbose_name = "Agents"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from agents import events, signals  # noqa: F401 - events declares the feed's types

        signals.connect()
        from django.conf import settings

        if settings.DATABASES["default"]["ENGINE"].endswith("postgresql"):
            from agents.database import psycopg_tune

            psycopg_tune()
