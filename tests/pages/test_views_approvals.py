"""The approvals inbox and the navigation's count as Django renders them (no browser): staff
only, waiting ones first (oldest first) then the decided ones, filters, pages, the count in
every page's navigation, and approvals kept on their thread page in every end state."""

from __future__ import annotations

import re
import uuid
from datetime import timedelta

import pytest
from django.contrib.auth import get_user_model
from django.test import Client
from django.utils import timezone

from agents.models import Approval, Message, Thread

pytestmark = pytest.mark.django_db

HTML = {"HTTP_ACCEPT": "text/html,application/xhtml+xml"}


@pytest.fixture
def staff_client(db):
    client = Client(**HTML)
    client.force_login(get_user_model().objects.create_user("op", password="pw-op-123",
                                                            is_staff=True))
    return client


def approval(agent, *, status="pending", minutes_ago=0, thread=None, call_id="call_1",
             decided_by="", reason="", arguments='{"expression": "6 * 7"}'):
    thread = thread or Thread.objects.create(agent=agent, session_key=str(uuid.uuid4()),
                                             status="waiting", history_digest="d")
    row = Approval.objects.create(
        thread=thread, agent=agent, response_id="chatcmpl-1", call_id=call_id,
        tool="calculator", arguments=arguments, status=status, decided_by=decided_by,
        reason=reason, expires_at=timezone.now() + timedelta(minutes=15),
        decided_at=None if status == "pending" else timezone.now())
    Approval.objects.filter(pk=row.pk).update(
        created_at=timezone.now() - timedelta(minutes=minutes_ago))
    return row


CSRF = re.compile(r'<input type="hidden" name="csrfmiddlewaretoken" value="[^"]*">')


def row_ids(html: str) -> list[str]:
    return re.findall(r'<tr data-approval-id="([0-9a-f-]+)"', html)


@pytest.mark.parametrize("path", ["/approvals/", "/fragments/approval-rows/",
                                  "/fragments/approvals-count/"])
def test_the_inbox_is_for_staff_only(echo_agent, path):
    client = Client(**HTML)
    assert client.get(path)["Location"].startswith("/login/?next=")
    client.force_login(get_user_model().objects.create_user("plain", password="pw-plain-123"))
    response = client.get(path)
    assert response.status_code in (302, 403)
    assert "calculator" not in response.content.decode()


def test_waiting_first_oldest_first_then_decided_latest_first(staff_client, make_agent):
    agent = make_agent(slug="careful")
    new = approval(agent, minutes_ago=1)
    old = approval(agent, minutes_ago=9)
    denied = approval(agent, status="denied", minutes_ago=30, decided_by="user:op",
                      reason="not <b>today</b>")
    expired = approval(agent, status="expired", minutes_ago=40, decided_by="turn stopped")
    Approval.objects.filter(pk=expired.pk).update(decided_at=timezone.now() - timedelta(hours=1))
    html = staff_client.get("/approvals/").content.decode()
    assert row_ids(html) == [str(old.pk), str(new.pk), str(denied.pk), str(expired.pk)]
    assert "not &lt;b&gt;today&lt;/b&gt;" in html  # escaped
    assert "not run: its turn stopped before anyone decided" in html
    assert html.count('action="/api/v1/approvals/') == 2  # the waiting ones are decided here
    assert f'href="/threads/{old.thread_id}/"' in html
    assert re.search(r'id="approvals-count"[^>]*>2</span>', html)


def test_filters_by_state_and_agent_and_pages(staff_client, make_agent):
    careful, other = make_agent(slug="careful"), make_agent(slug="other")
    waiting = approval(careful)
    approved = approval(careful, status="approved", decided_by="key:ops")
    theirs = approval(other)
    assert sorted(row_ids(staff_client.get("/approvals/?state=pending").content.decode())) == (
        sorted([str(waiting.pk), str(theirs.pk)]))
    assert row_ids(staff_client.get("/approvals/?state=approved").content.decode()) == [
        str(approved.pk)]
    assert row_ids(staff_client.get("/approvals/?agent=other").content.decode()) == [
        str(theirs.pk)]
    html = staff_client.get("/approvals/?agent=other&state=denied").content.decode()
    assert row_ids(html) == []
    assert "No approval matches." in html
    for _ in range(50):
        approval(careful, status="denied")
    first = staff_client.get("/approvals/?agent=careful").content.decode()
    assert len(row_ids(first)) == 50
    assert "page 1 of 2 (52 approvals)" in first
    assert "agent=careful&amp;page=2" in first
    assert len(row_ids(staff_client.get("/approvals/?agent=careful&page=2").content.decode())) == 2


def test_every_page_counts_waiting_approvals_in_its_navigation(staff_client, make_agent):
    agent = make_agent(slug="careful")
    html = staff_client.get("/keys/").content.decode()
    assert re.search(r'id="approvals-count" class="nav-count" hidden', html)  # zero: no badge
    approval(agent)
    approval(agent, status="approved")
    for path in ("/", "/threads/", "/keys/", "/audit/", "/runs/"):
        html = staff_client.get(path).content.decode()
        assert re.search(r'<a href="/approvals/" id="nav-approvals"[^>]*>Approvals <span '
                         r'id="approvals-count" class="nav-count"\s+aria-label="1 waiting">1'
                         r'</span>', html), path
    frag = staff_client.get("/fragments/approvals-count/").content.decode()
    assert ">1</span>" in frag


def test_a_waiting_thread_counts_as_active(staff_client, make_agent):
    agent = make_agent(slug="careful")
    thread = approval(agent).thread
    html = staff_client.get("/").content.decode()
    assert re.search(r'data-stat="active_threads">1<', html)
    assert f'data-thread="{thread.pk}"' in html
    assert "No thread is active." not in html
    frag = staff_client.get("/fragments/thread-rows/?of=dashboard").content.decode()
    assert f'data-thread="{thread.pk}"' in frag


def test_the_thread_page_keeps_decided_approvals_with_their_outcome(staff_client, make_agent):
    agent = make_agent(slug="careful")
    thread = Thread.objects.create(agent=agent, session_key="s", status="error",
                                   history_digest="d", last_error="client disconnected")
    Message.objects.create(thread=thread, seq=0, role="assistant", content="", internal=True,
                           response_id="chatcmpl-1", tool_calls=[
                               {"id": "call_1", "name": "calculator",
                                "arguments": '{"expression": "6 * 7"}'}])
    approval(agent, thread=thread, status="expired", decided_by="turn stopped")
    approval(agent, thread=thread, status="denied", decided_by="user:op", reason="no",
             call_id="call_2")
    html = staff_client.get(f"/threads/{thread.pk}/").content.decode()
    assert html.count('<article class="approval"') == 2
    assert "expires" not in html.split('id="approvals"')[1].split("</section>")[0]
    assert "its turn stopped before anyone decided" in html
    assert "denied</span> by <span class=\"decided-by\">user:op</span>" in html
    assert '<span class="tool-state">expired</span>' in html
    assert "no result yet" not in html


def test_the_inbox_fragments_are_the_markup_of_its_page(staff_client, make_agent):
    agent = make_agent(slug="careful")
    approval(agent, reason="x")
    approval(agent, status="denied", decided_by="user:op", reason="<i>no</i>")
    def get(path: str) -> str:  # each render masks the CSRF token anew
        return CSRF.sub("", staff_client.get(path).content.decode())

    page = get("/approvals/?agent=careful")
    for name in ("approval-rows", "approval-pager", "approvals-count"):
        part = get(f"/fragments/{name}/?agent=careful").strip()
        assert part
        assert part in page, name
