from django.contrib import admin
from django.urls import include, path

from openai_api.apis import HealthApi

urlpatterns = [
    path("admin/", admin.site.urls),
    path("health", HealthApi.as_view(), name="health"),
    path("v1/", include("openai_api.urls")),
    path("api/v1/benchmarks/", include("benchmarks.urls")),
]
