"""The admin's thread list renders its rows itself (agents.pages.templatetags.gaia_admin, issue 27):
the markup must be Django's own, cell for cell, whatever the rows hold and however the list
is filtered or sorted."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.contrib import admin
from django.contrib.admin.templatetags.admin_list import results
from django.test import RequestFactory
from django.utils import timezone

from agents.models import Thread
from agents.pages.templatetags.gaia_admin import _rows, fast_result_list

pytestmark = pytest.mark.django_db


@pytest.fixture
def threads(make_agent, make_key):
    agent = make_agent(slug="a<b")
    other = make_agent(slug="other")
    key, _ = make_key(name="k & co")
    now = timezone.now()
    made = []
    for i, (title, status, estimated, with_key) in enumerate([
        ("Plain", "completed", False, True),
        ("<script>alert('x')</script> & \"quotes\"", "error", True, False),
        ("", "active", False, True),  # no title: the empty display
        ("   ", "killed", True, False),  # blank: the empty display too
        ("Ünïcode — 日本", "waiting", False, True),
    ]):
        made.append(Thread.objects.create(
            agent=agent if i % 2 else other, session_key=f"s{i}", title=title, status=status,
            usage_estimated=estimated, api_key=key if with_key else None,
            message_count=i * 1234, input_tokens=i * 1000003, output_tokens=i,
            history_digest="d"))
        Thread.objects.filter(pk=made[-1].pk).update(updated_at=now - timedelta(minutes=i))
    return made


def changelist(admin_user, query=""):
    request = RequestFactory().get("/admin/agents/thread/" + query)
    request.user = admin_user
    cl = admin.site._registry[Thread].get_changelist_instance(request)
    cl.formset = None  # as the changelist view sets it for a list that is not editable
    return cl


@pytest.mark.parametrize("query", ["", "?o=-2.5", "?status__exact=error", "?q=Plain",
                                   "?agent__id__exact=1&o=3", "?usage_estimated__exact=1"])
def test_the_rows_are_djangos_markup_cell_for_cell(threads, admin_user, query):
    cl = changelist(admin_user, query)
    expected = ["".join(cells) for cells in results(cl)]
    got = [row[0] for row in _rows(cl)]
    assert got == expected
    assert len(got) == len(cl.result_list)


def test_the_list_page_shows_them(threads, admin_client):
    page = admin_client.get("/admin/agents/thread/?o=-2")
    assert page.status_code == 200
    html = page.content.decode()
    assert "&lt;script&gt;alert(&#x27;x&#x27;)&lt;/script&gt; &amp; &quot;quotes&quot;" in html
    assert "<script>alert" not in html
    for t in threads:
        assert f'/admin/agents/thread/{t.pk}/change/' in html


def test_a_column_it_does_not_render_leaves_the_list_to_django(threads, admin_user,
                                                               monkeypatch):
    thread_admin = admin.site._registry[Thread]
    monkeypatch.setattr(thread_admin, "list_display",
                        [*thread_admin.list_display, "__str__"])
    cl = changelist(admin_user)
    assert _rows(cl) is None
    context = fast_result_list(cl)  # Django's own tag's context
    assert ["".join(r) for r in context["results"]] == ["".join(r) for r in results(cl)]
