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
    Thread.objects.filter(pk=title).update(title="Beacon watch")
    assert ids("beacon") == {title}  # the title index follows a renamed thread
    renamed = Thread.objects.get(pk=title)
    renamed.title = "Harbor watch"
    renamed.save()
    assert ids("beacon") == set()
    assert ids("harbor") == {title}
    renamed.delete()
    assert ids("harbor") == set()


def test_a_search_matching_more_threads_than_it_reads_still_finds_them_all(
        ops, echo_agent, make_thread, monkeypatch):
    from agents.selectors import threads as thread_selectors

    found = {make_thread(echo_agent, f"comet {i}", reply="ok") for i in range(4)}
    make_thread(echo_agent, "other", reply="ok")
    for read in (100, 2):  # read once as ids, and past that as the query itself
        monkeypatch.setattr(thread_selectors, "MATCHES_READ", read)
        body = ops.get(f"{API}/threads", {"q": "comet", "limit": 3}).json()
        assert body["count"] == 4
        assert set(walk(ops, f"{API}/threads", {"q": "comet", "limit": 3})) == found


def test_search_reads_the_text_index(echo_agent, make_thread):
    make_thread(echo_agent, "hello", reply="the quasar shines")
    query = selectors.thread_list(q="quasar")
    sql, params = selectors.thread_matches("quasar").query.sql_with_params()
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
            assert "agents_thread_title_fts" in plan, plan  # migration 0020
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


def test_deep_offset_pages_are_the_pages_an_offset_reads(ops, staff, echo_agent, make_agent,
                                                         make_thread, monkeypatch):
    """Past ``SEEK_FROM`` a page reads its ids first, then its rows: the same rows, in the
    same order, on the API and the thread list page (here from offset 2); past the middle
    of the list it reads them from the other end (offsets 5-9 here, the page list's third
    page, a tie on ``updated_at`` among them)."""
    from agents.http import paging

    other = make_agent(slug="other")
    for i in range(9):
        make_thread(echo_agent if i % 3 else other, f"t {i}")
    Thread.objects.filter(title__in=["t 2", "t 5"]).update(updated_at=timezone.now())  # a tie
    expected = [str(pk) for pk in Thread.objects.order_by("-updated_at", "pk")
                .values_list("pk", flat=True)]
    mine = [str(pk) for pk in Thread.objects.filter(agent=echo_agent)
            .order_by("-updated_at", "pk").values_list("pk", flat=True)]
    monkeypatch.setattr(paging, "SEEK_FROM", 2)
    for offset in range(0, 10):
        body = ops.get(f"{API}/threads", {"limit": 3, "offset": offset}).json()
        assert [t["id"] for t in body["results"]] == expected[offset:offset + 3]
        assert body["count"] == 9
    for offset in range(0, 7):
        body = ops.get(f"{API}/threads", {"limit": 2, "offset": offset, "agent": "echo"}).json()
        assert [t["id"] for t in body["results"]] == mine[offset:offset + 2]
    oldest = [t["id"] for t in ops.get(f"{API}/threads", {"limit": 50, "sort": "last_activity"}
                                       ).json()["results"]]  # from offset 0: read directly
    assert sorted(oldest) == sorted(expected)
    for offset in (2, 6, 8):
        body = ops.get(f"{API}/threads", {"limit": 3, "offset": offset,
                                          "sort": "last_activity"}).json()
        assert [t["id"] for t in body["results"]] == oldest[offset:offset + 3], body
    import agents.pages.views as views

    monkeypatch.setattr(views, "THREADS_PER_PAGE", 4)
    for number, rows in ((1, expected[:4]), (2, expected[4:8]), (3, expected[8:])):
        response = staff.get("/threads/", {"page": number})
        assert response.status_code == 200
        assert [str(t.pk) for t in response.context["page_obj"].object_list] == rows


def test_message_counts_read_without_counting_are_the_counts(ops, echo_agent, make_agent,
                                                               make_thread):
    other = make_agent(slug="other")
    make_thread(echo_agent, "one")
    make_thread(echo_agent, "two", reply=None)  # a running turn: its reply not stored yet
    make_thread(other, "three")

    def count(**params):
        r = ops.get(f"{API}/messages", {"limit": 1, **params})
        assert r.status_code == 200, r.content
        return r.json()["count"]

    assert count() == Message.objects.count() == 5
    assert count(agent="echo") == Message.objects.filter(thread__agent=echo_agent).count() == 3
    assert count(agent="other") == 2
    assert count(agent="echo", role="user") == 2
    # Kept by triggers (migration 0023): rows stored or deleted by any code, a whole thread.
    one = Message.objects.filter(thread__agent=other).first()
    Message.objects.create(thread_id=one.thread_id, seq=9, role="user", content="by hand")
    assert count(agent="other") == 3
    Message.objects.filter(pk=one.pk).delete()
    assert count(agent="other") == 2
    Thread.objects.filter(agent=echo_agent).first().delete()
    assert count(agent="echo") == Message.objects.filter(thread__agent=echo_agent).count()
    assert count(agent="nobody") == 0
    assert count() == Message.objects.count()


def test_thread_counts_read_without_counting_are_the_counts(ops, staff, admin_client,
                                                              echo_agent, make_agent,
                                                              make_thread):
    """The whole thread list (its API, its page, the admin's) is counted by the tally's
    triggers (migration 0024), which follow threads stored, deleted and moved in or out of
    a benchmark run by any code; a filtered list is counted."""
    from django.test.utils import CaptureQueriesContext

    other = make_agent(slug="other")

    def counts():
        api = ops.get(f"{API}/threads", {"limit": 1}).json()["count"]
        page = staff.get("/threads/").context["page_obj"].paginator.count
        admin = admin_client.get("/admin/agents/thread/").context["cl"].result_count
        return api, page, admin

    def expected():
        outside = Thread.objects.filter(run_id=None).count()
        return outside, outside, Thread.objects.count()

    assert counts() == expected() == (0, 0, 0)
    for i in range(4):
        make_thread(echo_agent if i % 2 else other, f"t {i}")
    Thread.objects.create(agent=echo_agent, session_key="by hand", run_id=7)
    assert counts() == expected() == (4, 4, 5)
    Thread.objects.filter(title="t 0").update(run_id=8)  # into a run, by an UPDATE
    assert counts() == expected() == (3, 3, 5)
    moved = Thread.objects.get(run_id=7)
    moved.run_id = None  # out of it, by a save
    moved.save()
    assert counts() == expected() == (4, 4, 5)
    moved.run_id = 9
    moved.save(update_fields=["run_id"])
    Thread.objects.filter(title="t 0").update(run_id=10)  # from a run to another: no change
    assert counts() == expected() == (3, 3, 5)
    other.delete()  # its threads go with it
    assert counts() == expected() == (2, 2, 3)
    # A filter is counted: its threads, not the tally's.
    assert ops.get(f"{API}/threads", {"agent": "echo", "limit": 1}).json()["count"] == 2
    assert ops.get(f"{API}/threads", {"status": "error"}).json()["count"] == 0
    assert ops.get(f"{API}/threads", {"run": 9}).json()["count"] == 1
    assert admin_client.get("/admin/agents/thread/", {"q": "t 1"}).context["cl"].result_count == 1
    with CaptureQueriesContext(connection) as queries:
        assert ops.get(f"{API}/threads").status_code == 200
        assert staff.get("/threads/").status_code == 200
        assert admin_client.get("/admin/agents/thread/", {"p": 1}).status_code == 200
    counted = [q["sql"] for q in queries.captured_queries
               if "COUNT(" in q["sql"].upper() and 'FROM "agents_thread"' in q["sql"]]
    assert counted == []


def test_a_flush_leaves_the_tallies_to_their_triggers(transactional_db, echo_agent,
                                                      make_thread):
    """Django's flush (tests between them, ``manage.py flush``) empties the tables but not
    the tallies: the triggers empty those as the rows go. On SQLite the flush deletes tables
    in no set order, and a tally it cleared before its table's rows went negative (the
    thread list page then failed on a negative count)."""
    from django.core.management.color import no_style

    make_thread(echo_agent, "one")
    make_thread(echo_agent, "two")
    tables = connection.introspection.django_table_names(only_existing=True,
                                                        include_views=False)
    statements = connection.ops.sql_flush(no_style(), tables, allow_cascade=True)
    assert not [sql for sql in statements if "tally" in sql], statements
    connection.ops.execute_sql_flush(statements)
    assert Thread.objects.count() == Message.objects.count() == 0
    assert selectors.thread_total() == selectors.message_total() == 0
    assert selectors.message_count_of_agent(agent="echo") == 0


def test_an_agents_messages_are_its_newest_first(ops, echo_agent, make_agent, make_thread):
    other = make_agent(slug="other")
    for i in range(6):
        make_thread(echo_agent if i % 2 else other, f"m {i}", reply=f"r {i}")
    expected = [m.pk for m in Message.objects.filter(thread__agent=echo_agent)
                .order_by("-created_at", "-pk")]
    got = []
    body = ops.get(f"{API}/messages", {"agent": "echo", "limit": 4}).json()
    while True:
        got += [m["id"] for m in body["results"]]
        if body["next"] is None:
            break
        body = ops.get(body["next"]).json()
    assert got == expected


def test_every_message_carries_its_threads_agent_and_the_agents_list_seeks_it(
        ops, echo_agent, make_agent, make_thread):
    """``Message.agent`` (migration 0022): set by the turn's own writes, else by the database
    from the thread (a row stored by other code); the agent's list reads its index."""
    other = make_agent(slug="other")
    mine = make_thread(echo_agent, "one", reply="r1")
    theirs = make_thread(other, "two", reply="r2")
    # Stored by other code, naming no agent: the database fills it in from the thread.
    Message.objects.create(thread_id=theirs, seq=2, role="user", content="by hand")
    Message.objects.bulk_create([Message(thread_id=mine, seq=2, role="user", content="bulk")])
    assert not Message.objects.filter(agent__isnull=True).exists()
    for row in Message.objects.select_related("thread"):
        assert row.agent_id == row.thread.agent_id
    listed = ops.get(f"{API}/messages", {"agent": "other"}).json()["results"]
    assert [m["payload"]["content"] for m in listed] == ["by hand", "r2", "two"]
    assert ops.get(f"{API}/messages", {"agent": "nobody"}).json()["results"] == []
    sql, params = selectors.message_list(agent="echo")[:50].query.sql_with_params()
    with connection.cursor() as cursor:
        if connection.vendor == "postgresql":
            cursor.execute("SET LOCAL enable_seqscan = off")  # a tiny table: no shortcut
            cursor.execute("EXPLAIN " + sql, params)
            plan = "\n".join(row[0] for row in cursor.fetchall())
        else:
            cursor.execute("EXPLAIN QUERY PLAN " + sql, params)
            plan = "\n".join(str(row[-1]) for row in cursor.fetchall())
    assert "message_agent_recent" in plan, plan
    assert "Sort" not in plan, plan  # read in order
    assert "TEMP B-TREE" not in plan, plan

