from django.urls import path, re_path

from benchmarks import apis

urlpatterns = [
    path("runs", apis.RunListCreateApi.as_view(), name="benchmark-runs"),
    path("runs/<int:run_id>", apis.RunDetailApi.as_view(), name="benchmark-run"),
    path("runs/<int:run_id>/results", apis.RunResultsApi.as_view(), name="benchmark-results"),
    path("runs/<int:run_id>/cancel", apis.RunCancelApi.as_view(), name="benchmark-cancel"),
    path("runs/<int:run_id>/artifacts/<path:name>", apis.RunArtifactApi.as_view(),
         name="benchmark-artifact"),
    path("compare", apis.CompareApi.as_view(), name="benchmark-compare"),
    path("suites", apis.SuiteListCreateApi.as_view(), name="benchmark-suites"),
    re_path(r"^[\s\S]*$", apis.UnknownRouteApi.as_view()),  # JSON 404 (newlines too), not HTML
]
