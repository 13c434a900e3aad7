from django.urls import path, re_path

from openai_api import apis

urlpatterns = [
    path("models", apis.ModelListApi.as_view(), name="v1-models"),
    re_path(r"^models/(?P<model_id>.+)$", apis.ModelDetailApi.as_view(), name="v1-model"),
    path("chat/completions", apis.ChatCompletionCreateApi.as_view(), name="v1-chat"),
    re_path(r"^.*$", apis.NotFoundApi.as_view()),
]
