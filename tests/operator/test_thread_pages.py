"""A thread's messages come a page at a time (issue 26 item 3): ``GET /api/v1/threads/{id}``
and the thread page embed the latest ones and a cursor to the rest, however long the thread
(a 100,002-message thread was 44.8 MB in 22 s)."""

from __future__ import annotations

import re
from typing import Any

import pytest
from django.contrib.auth import get_user_model
from django.test import Client

from agents.models import Message, Thread

pytestmark = pytest.mark.django_db

API = "/api/v1"


@pytest.fixture
def long_thread(echo_agent: Any, make_thread: Any) -> tuple[str, int]:
    """A thread of 12,010 messages (seq 0 to 12,009), all but its first turn written in
    bulk."""
    tid = make_thread(echo_agent, "first", reply="reply")
    extra = [Message(thread_id=tid, seq=seq, role="user" if seq % 2 else "assistant",
                     content=f"m{seq} " + "x" * 200) for seq in range(2, 12_010)]
    Message.objects.bulk_create(extra, batch_size=2000)
    Thread.objects.filter(pk=tid).update(message_count=12_010)
    return tid, 12_010


def test_the_thread_api_embeds_the_latest_page_and_a_cursor_to_the_rest(
        ops: Any, long_thread: tuple[str, int]) -> None:
    tid, total = long_thread
    response = ops.get(f"{API}/threads/{tid}")
    assert response.status_code == 200
    assert len(response.content) < 200_000  # 50 messages, not 12,010 (2.6 MB)
    body = response.json()
    assert body["message_count"] == total
    seqs = [m["seq"] for m in body["messages"]]
    assert seqs == list(range(total - 50, total))  # the latest 50, in order
    assert body["messages_before"] == total - 50
    # the cursor walks back, page by page, to the first message: each once
    seen = seqs
    url = body["messages_older"]
    pages = 1
    while url is not None:
        assert url.startswith("http://testserver/api/v1/threads/")
        page = ops.get(url.removeprefix("http://testserver")).json()
        seen = [m["seq"] for m in page["messages"]] + seen
        url = page["messages_older"]
        pages += 1
    assert seen == list(range(total))
    assert pages == -(-total // 50)
    assert page["messages"][0]["payload"]["content"] == "first"


def test_the_page_size_and_cursor_are_checked(ops: Any, long_thread: tuple[str, int]) -> None:
    tid, total = long_thread
    body = ops.get(f"{API}/threads/{tid}", {"limit": 200, "before": 100}).json()
    assert [m["seq"] for m in body["messages"]] == list(range(100))
    assert body["messages_before"] is None
    assert body["messages_older"] is None
    for params, param in (({"limit": 201}, "limit"), ({"limit": 0}, "limit"),
                          ({"before": "x"}, "before"), ({"before": 0}, "before")):
        response = ops.get(f"{API}/threads/{tid}", params)
        assert response.status_code == 400
        assert response.json()["param"] == param


def test_a_short_thread_is_whole_with_no_cursor(ops: Any, echo_agent: Any,
                                                make_thread: Any) -> None:
    tid = make_thread(echo_agent, "question", reply="answer")
    body = ops.get(f"{API}/threads/{tid}").json()
    assert [m["payload"]["content"] for m in body["messages"]] == ["question", "answer"]
    assert body["messages_before"] is None
    assert body["messages_older"] is None


def test_the_thread_page_shows_the_latest_messages_and_links_to_earlier_ones(
        long_thread: tuple[str, int]) -> None:
    tid, total = long_thread
    staff = get_user_model().objects.create_user("op", password="pw-op-123", is_staff=True)
    client = Client()
    client.force_login(staff)
    html = client.get(f"/threads/{tid}/").content.decode()
    assert len(html) < 400_000
    shown = [int(s) for s in re.findall(r"\bm(\d+) x", html)]
    assert shown == list(range(total - 100, total))
    older = re.search(r'id="older-messages" href="\?before=(\d+)"', html)
    assert older is not None
    assert int(older.group(1)) == total - 100
    html = client.get(f"/threads/{tid}/", {"before": older.group(1)}).content.decode()
    shown = [int(s) for s in re.findall(r"\bm(\d+) x", html)]
    assert shown == list(range(total - 200, total - 100))
    assert 'id="latest-messages"' in html
    assert 'data-older-page="1"' in html
    first = client.get(f"/threads/{tid}/", {"before": 100}).content.decode()
    assert 'id="older-messages"' not in first
    assert [int(s) for s in re.findall(r"\bm(\d+) x", first)] == list(range(2, 100))
