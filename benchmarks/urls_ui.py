"""The benchmark pages, mounted at ``/runs/`` (gaia_site/urls.py)."""

from django.urls import path

from benchmarks import views

app_name = "runs"

urlpatterns = [
    path("", views.run_list, name="list"),
    path("new/", views.run_new, name="new"),
    path("compare/", views.run_compare, name="compare"),
    path("suites/", views.suite_list, name="suites"),
    path("suites/<int:suite_id>/", views.suite_detail, name="suite"),
    path("<int:run_id>/", views.run_detail, name="detail"),
]
