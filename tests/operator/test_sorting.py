"""Sorting every console list (agents.selectors.ordering): the API's ``sort`` orders the rows,
ties by id, a bad column is a 400 naming ``sort``, and cursor pages follow the sort (a cursor of
another sort is refused); the pages' column headers sort by the same rule."""

from __future__ import annotations

import pytest
from rest_framework.test import APIClient

from agents.models import ApiKey, AuditEvent, Provider, Thread

API = "/api/v1"
pytestmark = pytest.mark.django_db


def walk(client, url, params):
    """Every row of a list, following ``next``."""
    seen, r = [], client.get(url, params)
    while True:
        assert r.status_code == 200, r.content
        body = r.json()
        seen.extend(body["results"])
        if body["next"] is None:
            return seen
        r = client.get(body["next"])


@pytest.fixture
def threads(echo_agent, make_thread):
    ids = [make_thread(echo_agent, f"t {i}") for i in range(7)]
    titles = ["delta", "alpha", "charlie", "alpha", "bravo", "alpha", "echo"]
    for pk, title in zip(ids, titles, strict=True):
        Thread.objects.filter(pk=pk).update(title=title)
    return ids


def test_threads_sort_by_a_column_with_ties_in_id_order(staff, threads):
    rows = Thread.objects.all()
    ascending = [str(t.pk) for t in rows.order_by("title", "pk")]
    descending = [str(t.pk) for t in rows.order_by("-title", "-pk")]
    assert ascending != [str(t.pk) for t in rows.order_by("-updated_at", "pk")]
    r = staff.get(f"{API}/threads", {"sort": "title"})
    assert [t["id"] for t in r.json()["results"]] == ascending
    assert [t["title"] for t in r.json()["results"]][:3] == ["alpha"] * 3
    r = staff.get(f"{API}/threads", {"sort": "-title"})
    assert [t["id"] for t in r.json()["results"]] == descending
    # Cursor pages across the sort, three alphas tied at a page's edge included.
    for limit in (1, 2, 3):
        assert [t["id"] for t in walk(staff, f"{API}/threads",
                                      {"sort": "title", "limit": limit})] == ascending
        assert [t["id"] for t in walk(staff, f"{API}/threads",
                                      {"sort": "-title", "limit": limit})] == descending
    # Offset pages too (the console's pages).
    assert [t["id"] for t in staff.get(f"{API}/threads", {
        "sort": "title", "limit": 2, "offset": 2}).json()["results"]] == ascending[2:4]


def test_a_cursor_keeps_its_sort_and_another_sort_refuses_it(staff, threads):
    first = staff.get(f"{API}/threads", {"sort": "title", "limit": 2}).json()
    assert "sort=title" in first["next"]
    cursor = first["next"].split("cursor=")[1].split("&")[0]
    r = staff.get(f"{API}/threads", {"sort": "-message_count", "limit": 2, "cursor": cursor})
    assert r.status_code == 400, r.content
    assert r.json()["param"] == "cursor"
    r = staff.get(f"{API}/threads", {"limit": 2, "cursor": cursor})  # the default sort
    assert r.status_code == 400
    assert r.json()["param"] == "cursor"


def names(r, field):
    assert r.status_code == 200, r.content
    body = r.json()
    return [row[field] for row in (body["results"] if isinstance(body, dict) else body)]


def test_keys_providers_audit_and_agents_sort(staff, make_agent, make_key):
    for name in ("mango", "apple", "kiwi"):
        make_key(name, scopes=["chat"])
    keys = sorted(ApiKey.objects.values_list("name", flat=True))
    assert names(staff.get(f"{API}/keys", {"sort": "name"}), "name") == keys
    assert names(staff.get(f"{API}/keys", {"sort": "-name"}), "name") == keys[::-1]
    assert [k["name"] for k in walk(staff, f"{API}/keys", {"sort": "name", "limit": 1})] == keys

    for name, kind in (("zed", "fake"), ("abe", "openai"), ("max", "fake")):
        Provider.objects.create(name=name, kind=kind)
    providers = sorted(Provider.objects.values_list("name", flat=True))
    assert names(staff.get(f"{API}/providers", {"sort": "-name"}), "name") == providers[::-1]
    by_kind = [p.name for p in Provider.objects.order_by("kind", "pk")]
    assert names(staff.get(f"{API}/providers", {"sort": "kind"}), "name") == by_kind

    for action, actor in (("kill", "user:b"), ("inject", "user:c"), ("pause", "user:a")):
        AuditEvent.objects.create(action=action, actor=actor, target="agent:x", channel="api")
    assert names(staff.get(f"{API}/audit", {"sort": "actor"}), "actor") == [
        "user:a", "user:b", "user:c"]
    assert names(staff.get(f"{API}/audit", {"sort": "-action"}), "action") == [
        "pause", "kill", "inject"]

    for slug in ("bee", "ant", "cat"):
        make_agent(slug=slug, display_name=f"The {slug[::-1]}")
    slugs = sorted(names(staff.get(f"{API}/agents"), "slug"))
    assert names(staff.get(f"{API}/agents", {"sort": "-agent"}), "slug") == slugs[::-1]
    by_name = names(staff.get(f"{API}/agents", {"sort": "name"}), "display_name")
    assert by_name == sorted(by_name)
    assert by_name != names(staff.get(f"{API}/agents"), "display_name")


def test_benchmark_runs_and_suites_sort(make_key):
    from benchmarks.models import BenchmarkRun, BenchmarkSuite

    bench_suite_row = BenchmarkSuite.objects.create(name="zzz", questions=[])
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {make_key('b', scopes=['benchmarks'])[1]}")
    runs = [BenchmarkRun.objects.create(suite=bench_suite_row, protocol=p, status=s,
                                        tools={"retriever": "deterministic"},
                                        question_indexes=[0])
            for p, s in (("json", "succeeded"), ("msgpack", "failed"), ("json", "queued"))]
    by_status = [r.pk for r in sorted(runs, key=lambda r: (r.status, r.pk))]
    assert names(client.get(f"{API}/benchmarks/runs", {"sort": "status"}), "id") == by_status
    assert names(client.get(f"{API}/benchmarks/runs", {"sort": "id"}), "id") == sorted(
        r.pk for r in runs)
    assert [r["id"] for r in walk(client, f"{API}/benchmarks/runs",
                                  {"sort": "-protocol", "limit": 1})] == [
        r.pk for r in sorted(runs, key=lambda r: (r.protocol, r.pk), reverse=True)]
    BenchmarkSuite.objects.create(name="aaa", questions=[], version=3)
    listed = names(client.get(f"{API}/benchmarks/suites", {"sort": "-version"}), "version")
    assert listed == sorted(listed, reverse=True)
    assert listed[0] == 3
    assert names(client.get(f"{API}/benchmarks/suites", {"sort": "name"}), "name")[0] == "aaa"


@pytest.mark.parametrize("url", ["threads", "agents", "keys", "providers", "audit",
                                 "benchmarks/runs", "benchmarks/suites"])
@pytest.mark.parametrize("sort", ["nope", "-secret", "--title", "pk", "api_key__name"])
def test_a_column_a_list_does_not_sort_by_is_a_400_naming_sort(staff, make_key, url, sort):
    client = staff
    if url.startswith("benchmarks"):
        client = APIClient()
        client.credentials(
            HTTP_AUTHORIZATION=f"Bearer {make_key('b', scopes=['benchmarks'])[1]}")
    r = client.get(f"{API}/{url}", {"sort": sort})
    assert r.status_code == 400, r.content
    assert r.json()["param"] == "sort"


def test_pages_sort_by_their_column_headers(client, django_user_model, threads):
    user = django_user_model.objects.create_user("ann", password="pw-12345678", is_staff=True)
    client.force_login(user)
    html = client.get("/threads/", {"sort": "title", "page": "1"}).content.decode()
    # The list in the sort, the header saying so and offering the other direction.
    order = [html.index(f'data-thread="{pk}"') for pk in
             (str(t.pk) for t in Thread.objects.order_by("title", "pk"))]
    assert order == sorted(order)
    assert '<th scope="col" aria-sort="ascending" data-sort="title"><a href="?sort=-title">' \
        in html
    assert 'aria-sort="none" data-sort="last_activity"' in html
    default = client.get("/threads/").content.decode()
    assert 'aria-sort="descending" data-sort="last_activity"' in default
    for path in ("/threads/", "/keys/", "/audit/", "/providers/", "/agents/", "/runs/suites/"):
        assert client.get(path, {"sort": "nope"}).status_code == 400, path
        assert client.get(path).status_code == 200, path
