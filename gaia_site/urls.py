from django.contrib import admin
from django.urls import include, path

from openai_api.apis import HealthApi, RootApi

urlpatterns = [
    path("admin/", admin.site.urls),
    path("health", HealthApi.as_view(), name="health"),
    path("", RootApi.as_view(), name="root"),
    path("v1/", include("openai_api.urls")),
]
