from django.urls import path, re_path

from benchmarks import apis
from benchmarks.apis import replay, suites

urlpatterns = [
    path("runs", apis.RunListCreateApi.as_view(), name="benchmark-runs"),
    path("runs/<int:run_id>", apis.RunDetailApi.as_view(), name="benchmark-run"),
    path("runs/<int:run_id>/results", apis.RunResultsApi.as_view(), name="benchmark-results"),
    path("runs/<int:run_id>/cancel", apis.RunCancelApi.as_view(), name="benchmark-cancel"),
    path("runs/<int:run_id>/resume", replay.RunResumeApi.as_view(), name="benchmark-resume"),
    path("runs/<int:run_id>/cases", replay.RunCasesApi.as_view(), name="benchmark-cases"),
    path("runs/<int:run_id>/artifacts/<path:name>", apis.RunArtifactApi.as_view(),
         name="benchmark-artifact"),
    path("compare", apis.CompareApi.as_view(), name="benchmark-compare"),
    path("queue", apis.QueueApi.as_view(), name="benchmark-queue"),
    path("suites", suites.SuiteListCreateApi.as_view(), name="benchmark-suites"),
    path("suites/<int:suite_id>", suites.SuiteDetailApi.as_view(), name="benchmark-suite"),
    path("suites/<int:suite_id>/cases", suites.SuiteCasesApi.as_view(),
         name="benchmark-suite-cases"),
    path("suites/<int:suite_id>/export", suites.SuiteExportApi.as_view(),
         name="benchmark-suite-export"),
    path("suites/<int:suite_id>/trend", suites.SuiteTrendApi.as_view(),
         name="benchmark-suite-trend"),
    re_path(r"^[\s\S]*$", apis.UnknownRouteApi.as_view()),  # JSON 404 (newlines too), not HTML
]
