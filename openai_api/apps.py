from django.apps import AppConfig


class OpenaiApiConfig(AppConfig):
    name = "openai_api"
    verbose_name = "/v1 API"
