from django.urls import path, re_path

from benchmarks.apis import base, replays, runs, suites

urlpatterns = [
    path("runs", runs.RunListCreateApi.as_view(), name="benchmark-runs"),
    path("runs/<int:run_id>", runs.RunDetailApi.as_view(), name="benchmark-run"),
    path("runs/<int:run_id>/results", runs.RunResultsApi.as_view(), name="benchmark-results"),
    path("runs/<int:run_id>/cancel", runs.RunCancelApi.as_view(), name="benchmark-cancel"),
    path("runs/<int:run_id>/resume", runs.RunResumeApi.as_view(), name="benchmark-resume"),
    path("runs/<int:run_id>/cases", replays.RunCasesApi.as_view(), name="benchmark-cases"),
    path("runs/<int:run_id>/artifacts/<path:name>", runs.RunArtifactApi.as_view(),
         name="benchmark-artifact"),
    path("compare", runs.CompareApi.as_view(), name="benchmark-compare"),
    path("queue", runs.QueueApi.as_view(), name="benchmark-queue"),
    path("suites", suites.SuiteListCreateApi.as_view(), name="benchmark-suites"),
    path("suites/<int:suite_id>", suites.SuiteDetailApi.as_view(), name="benchmark-suite"),
    path("suites/<int:suite_id>/cases", suites.SuiteCasesApi.as_view(),
         name="benchmark-suite-cases"),
    path("suites/<int:suite_id>/export", suites.SuiteExportApi.as_view(),
         name="benchmark-suite-export"),
    path("suites/<int:suite_id>/trend", suites.SuiteTrendApi.as_view(),
         name="benchmark-suite-trend"),
    re_path(r"^[\s\S]*$", base.UnknownRouteApi.as_view()),  # JSON 404 (newlines too), not HTML
]
