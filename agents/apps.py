from typing import Any

from django.apps import AppConfig


class AgentsConfig(AppConfig):
    name = "agents"
    verbose_name = "Agents"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from agents.outlet import events  # noqa: F401 - declares the feed's event types
        from agents.services import signals

        signals.connect()
        from django.conf import settings

        _url_settings_check(settings)

        if settings.DATABASES["default"]["ENGINE"].endswith("postgresql"):
            from agents.infra.database import psycopg_tune

            psycopg_tune()


def _url_settings_check(settings: Any) -> None:
    """The URL lists an operator wrote are rules Gaia can compare (agents.selectors.urls):
    a typo, userinfo or a '*' inside a host stops the server with the setting's name, rather
    than becoming a rule that silently allows nothing (or, compared as text, too much)."""
    from django.core.exceptions import ImproperlyConfigured

    from agents.selectors.origins import origin_normalized
    from agents.selectors.urls import UrlRefused, url_rules_check

    try:
        url_rules_check(settings.GAIA_MCP_ALLOWED_URLS, setting="GAIA_MCP_ALLOWED_URLS")
        url_rules_check(getattr(settings, "GAIA_WEBHOOK_ALLOWED_URLS", []),
                        setting="GAIA_WEBHOOK_ALLOWED_URLS")
    except UrlRefused as exc:
        raise ImproperlyConfigured(str(exc)) from None
    for origin in settings.GAIA_OPERATOR_ALLOWED_ORIGINS:
        if origin_normalized(origin) is None:
            raise ImproperlyConfigured(
                f"GAIA_OPERATOR_ALLOWED_ORIGINS: {origin!r} is not an origin "
                "(scheme://host[:port], http or https, no userinfo, path or query)")
