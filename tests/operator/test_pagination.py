"""Lists as the data grows (issue 27): cursor pages that stay put while new rows arrive, the
order and filters they keep, and text search through an index rather than a scan."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.db import connection
from django.utils import timezone

from agents import selectors
from agents.models import Message, Thread

API = "/api/v1"


def walk(ops, url, params=None):
    """Every page of a list, following ``next``; the ids in the order given."""
    seen, r = [], ops.get(url, params)
    while True:
        assert r.status_code == 200, r.content
        body = r.json()
        seen.extend(row["id"] for row in body["results"])
        if body["next"] is None:
            return seen
        r = ops.get(body["next"])


def test_next_pages_stay_put_while_new_threads_arrive(ops, echo_agent, make_thread):
    old = [make_thread(echo_agent, f"old {i}") for i in range(5)]
    first = ops.get(f"{API}/threads", {"limit": 2}).json()
    assert [t["id"] for t in first["results"]] == old[::-1][:2]
    new = [make_thread(echo_agent, f"new {i}") for i in range(3)]
    # An offset would now show old 4 and old 3 again (three threads came in above them).
    assert [t["id"] for t in ops.get(f"{API}/threads", {"limit": 2, "offset": 2}).json()[
        "results"]] == [new[0], old[4]]
    second = ops.get(first["next"]).json()
    assert [t["id"] for t in second["results"]] == old[::-1][2:4]
    assert second["previous"] is None
    assert second["count"] == 8  # the list's size now
    third = ops.get(second["next"]).json()
    assert [t["id"] for t in third["results"]] == [old[0]]
    assert third["next"] is None


def test_cursor_pages_keep_the_order_ties_included(ops, echo_agent, make_agent, make_thread):
    other = make_agent(slug="other")
    ids = [make_thread(echo_agent if i % 2 else other, f"t {i}") for i in range(7)]
    same = timezone.now() - timedelta(hours=1)
    Thread.objects.filter(pk__in=ids[2:6]).update(updated_at=same)  # four share a time
    expected = [str(t.pk) for t in Thread.objects.order_by("-updated_at", "pk")]
    assert walk(ops, f"{API}/threads", {"limit": 1}) == expected
    assert walk(ops, f"{API}/threads", {"limit": 3}) == expected
    # Filters hold on every page.
    mine = [i for i in expected if i in ids[1::2]]
    assert walk(ops, f"{API}/threads", {"limit": 1, "agent": "echo"}) == mine
    Thread.objects.filter(pk=ids[3]).update(status=Thread.Status.ERROR)
    assert walk(ops, f"{API}/threads", {"limit": 1, "status": "error"}) == [ids[3]]


def test_message_lists_page_by_cursor(ops, echo_agent, make_thread):
    tid = make_thread(echo_agent, "first")
    for i in range(3):
        make_thread(echo_agent, f"more {i}")
    everything = [m.pk for m in Message.objects.order_by("-created_at", "-pk")]
    first = ops.get(f"{API}/messages", {"limit": 3}).json()
    make_thread(echo_agent, "arrives meanwhile")
    rest = walk(ops, first["next"])
    assert [m["id"] for m in first["results"]] + rest == everything
    in_thread = walk(ops, f"{API}/threads/{tid}/messages", {"limit": 1})
    assert in_thread == [m.pk for m in Message.objects.filter(thread_id=tid).order_by("seq")]


@pytest.mark.parametrize("cursor", ["nonsense!", "WyJ4Il0", "e30"])
def test_a_cursor_that_is_not_one_is_a_400(ops, echo_agent, make_thread, cursor):
    make_thread(echo_agent, "hello")
    r = ops.get(f"{API}/threads", {"cursor": cursor})
    assert r.status_code == 400, r.content
    assert r.json()["param"] == "cursor"


def test_search_matches_titles_and_texts_as_substrings(ops, echo_agent, make_thread):
    title = make_thread(echo_agent, "Lighthouse keepers", reply="ok")
    text = make_thread(echo_agent, "hello", reply='a 50% chance of "rain" tomorrow')
    short = make_thread(echo_agent, "ab", reply="xy")
    make_thread(echo_agent, "nothing here", reply="nor here")

    def ids(q):
        r = ops.get(f"{API}/threads", {"q": q})
        assert r.status_code == 200, r.content
        return {t["id"] for t in r.json()["results"]}

    assert ids("HOUSE") == {title}  # inside a word, either case
    assert ids("CHANCE OF") == {text}
    assert ids('"rain"') == {text}  # quotes are text, not query syntax
    assert ids("50%") == {text}  # so is %
    assert ids("xy") == {short}  # shorter than a trigram: found by a scan
    assert ids("ab") == {short}
    assert ids("zzz") == set()
    Message.objects.filter(thread_id=text, role="assistant").update(content="sunny")
    assert ids("rain") == set()  # the index follows an edited text
    assert ids("sunny") == {text}
    Thread.objects.filter(pk=text).delete()
    assert ids("sunny") == set()


def test_search_reads_the_text_index(echo_agent, make_thread):
    make_thread(echo_agent, "hello", reply="the quasar shines")
    query = selectors.thread_list(q="quasar")
    sql, params = query.query.sql_with_params()
    with connection.cursor() as cursor:
        if connection.vendor == "postgresql":
            cursor.execute("SET LOCAL enable_seqscan = off")  # a tiny table: no shortcut
            cursor.execute("EXPLAIN " + sql, params)
            plan = "\n".join(row[0] for row in cursor.fetchall())
            assert "message_content_trgm" in plan, plan
            assert "thread_title_trgm" in plan, plan
        else:
            cursor.execute("EXPLAIN QUERY PLAN " + sql, params)
            plan = "\n".join(str(row[-1]) for row in cursor.fetchall())
            assert "VIRTUAL TABLE INDEX" in plan, plan
            assert "agents_message_fts" in plan, plan
    assert [t.pk for t in query] == [
        t.pk for t in Thread.objects.filter(messages__content__contains="quasar")]


def test_agent_last_activity_is_its_latest_thread(ops, echo_agent, make_agent, make_thread):
    idle = make_agent(slug="idle")
    make_thread(echo_agent, "one")
    latest = make_thread(echo_agent, "two")
    rows = {a["slug"]: a for a in ops.get(f"{API}/agents").json()}
    stamp = Thread.objects.get(pk=latest).updated_at
    assert rows["echo"]["last_activity"] == selectors.iso(stamp)
    assert rows[idle.slug]["last_activity"] is None


def test_total_messages_follows_every_insert_and_delete(ops, echo_agent, make_thread):
    def total():
        return ops.get(f"{API}/organism").json()["total_messages"]

    assert total() == Message.objects.count() == 0
    keep = make_thread(echo_agent, "one")
    gone = make_thread(echo_agent, "two")
    make_thread(echo_agent, "three", reply=None)
    assert total() == Message.objects.count() == 5
    Thread.objects.filter(pk=gone).delete()  # its messages go with it
    assert total() == Message.objects.count() == 3
    Message.objects.filter(thread_id=keep, role="assistant").delete()
    assert total() == Message.objects.count() == 2


def test_the_admin_thread_list_walks_an_index(admin_client, echo_agent, make_thread):
    """The admin lists every thread (benchmark threads too), latest first, reading its page
    off ``thread_all_recent`` with the agents and keys fetched apart: joined, SQLite sorted
    every thread on each page."""
    from django.test.utils import CaptureQueriesContext

    make_thread(echo_agent, "hello", reply="hi")
    with CaptureQueriesContext(connection) as queries:
        assert admin_client.get("/admin/agents/thread/").status_code == 200
    listing = next(q["sql"] for q in queries.captured_queries
                   if 'FROM "agents_thread"' in q["sql"] and "ORDER BY" in q["sql"])
    assert "JOIN" not in listing
    with connection.cursor() as cursor:
        if connection.vendor == "postgresql":
            cursor.execute("SET LOCAL enable_seqscan = off")
            cursor.execute("EXPLAIN " + listing)
            plan = "\n".join(row[0] for row in cursor.fetchall())
        else:
            cursor.execute("EXPLAIN QUERY PLAN " + listing)
            plan = "\n".join(str(row[-1]) for row in cursor.fetchall())
    assert "thread_all_recent" in plan, plan
    assert "TEMP B-TREE" not in plan, plan
    assert "Sort" not in plan, plan
