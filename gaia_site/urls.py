from django.contrib import admin
from django.urls import include, path, re_path
from drf_spectacular.views import (
    SpectacularAPIView,
    SpectacularRedocView,
    SpectacularSwaggerView,
)

from agents.apis import ApiNotFoundApi
from openai_api.apis import HealthApi, NotFoundApi, RootApi

urlpatterns = [
    path("admin/", admin.site.urls),
    path("health", HealthApi.as_view(), name="health"),
    path("", RootApi.as_view(), name="root"),
    path("v1/", include("openai_api.urls")),
    path("v1", NotFoundApi.as_view()),  # the API's own 404 envelope, not Django's HTML page
    path("api/v1/benchmarks/", include("benchmarks.urls")),
    path("api/v1/", include("agents.urls")),
    path("api/schema", SpectacularAPIView.as_view(), name="api-schema"),
    path("api/docs", SpectacularSwaggerView.as_view(url_name="api-schema"), name="api-docs"),
    path("api/redoc", SpectacularRedocView.as_view(url_name="api-schema"), name="api-redoc"),
    re_path(r"^api(/[\s\S]*)?$", ApiNotFoundApi.as_view()),  # [\s\S]: newlines too
]
