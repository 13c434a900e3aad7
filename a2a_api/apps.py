from django.apps import AppConfig


class A2aApiConfig(AppConfig):
    name = "a2a_api"
    verbose_name = "A2A"
    default_auto_field = "django.db.models.BigAutoField"
