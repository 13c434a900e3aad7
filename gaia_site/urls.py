from typing import Any

from asgiref.sync import sync_to_async
from django.contrib import admin
from django.http import HttpRequest, HttpResponse
from django.urls import include, path, re_path
from drf_spectacular.views import (
    SpectacularAPIView,
    SpectacularRedocView,
    SpectacularSwaggerView,
)

from agents.apis import ApiNotFoundApi
from agents.pages import views as pages
from gaia_site.metrics import MetricsApi
from openai_api.apis import HealthApi, NotFoundApi, RootApi

# The API docs' pages may load only this server's files: Redoc's bundle draws a logo from
# cdn.redoc.ly (no option turns it off), which this keeps the browser from fetching. Inline
# scripts and styles: the pages' init script, and the styles Redoc and Swagger UI inject;
# blob: workers: Redoc's search.
DOCS_CSP = ("default-src 'self'; img-src 'self' data:; style-src 'self' 'unsafe-inline'; "
            "script-src 'self' 'unsafe-inline' blob:; worker-src 'self' blob:; "
            "font-src 'self' data:; connect-src 'self'")


class DocsPolicy:
    """A docs view's responses carry :data:`DOCS_CSP`."""

    def dispatch(self, request: HttpRequest, *args: Any, **kwargs: Any) -> Any:
        response = super().dispatch(request, *args, **kwargs)  # type: ignore[misc]
        response["Content-Security-Policy"] = DOCS_CSP
        return response


class RedocView(DocsPolicy, SpectacularRedocView):
    pass


class SwaggerView(DocsPolicy, SpectacularSwaggerView):
    pass


_root_api = RootApi.as_view()
_dashboard = sync_to_async(pages.dashboard)


async def root(request: HttpRequest) -> HttpResponse:
    """``/``: the operator dashboard for a browser (a GET that asks for HTML); clients' probes
    (``HEAD``, ``OPTIONS``, a GET for JSON) get the API's answer (``RootApi``)."""
    if request.method == "GET" and "text/html" in request.headers.get("accept", ""):
        return await _dashboard(request)
    return await _root_api(request)


urlpatterns = [
    path("admin/", admin.site.urls),
    path("health", HealthApi.as_view(), name="health"),
    path("metrics", MetricsApi.as_view(), name="metrics"),
    path("", root, name="root"),
    path("v1/", include("openai_api.urls")),
    path("v1", NotFoundApi.as_view()),  # the API's own 404 envelope, not Django's HTML page
    path("api/v1/benchmarks/", include("benchmarks.urls")),
    path("api/v1/", include("agents.urls")),
    path("api/schema", SpectacularAPIView.as_view(), name="api-schema"),
    path("api/docs", SwaggerView.as_view(url_name="api-schema"), name="api-docs"),
    path("api/redoc", RedocView.as_view(url_name="api-schema"), name="api-redoc"),
    re_path(r"^api(/[\s\S]*)?$", ApiNotFoundApi.as_view()),  # [\s\S]: newlines too
    path("runs/", include("benchmarks.urls_ui")),  # the benchmark pages
    path("", include("agents.pages.urls")),  # the operator pages; keep last
]
