from django.contrib import admin
from django.urls import include, path

from openai_api.apis import HealthApi, NotFoundApi

urlpatterns = [
    path("admin/", admin.site.urls),
    path("health", HealthApi.as_view(), name="health"),
    path("v1/", include("openai_api.urls")),
    path("v1", NotFoundApi.as_view()),  # the API's own 404 envelope, not Django's HTML page
]
