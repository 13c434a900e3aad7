"""The operator pages rendered by Django (no browser): login, staff only, CSRF, and that every
page is useful without JavaScript and escapes what models and users wrote."""

from __future__ import annotations

import re

import pytest
from django.contrib.auth import get_user_model
from django.test import Client

from agents.models import Message, Thread

pytestmark = pytest.mark.django_db

PAGES = ["/", "/agents/", "/threads/", "/runs/", "/runs/new/", "/runs/compare/?runs=1,2",
         "/runs/suites/", "/keys/", "/providers/", "/webhooks/",
         "/audit/"]  # a run: test_browser.py


@pytest.fixture
def staff(db):
    return get_user_model().objects.create_user("op", password="pw-op-123", is_staff=True)


HTML = {"HTTP_ACCEPT": "text/html,application/xhtml+xml"}  # what a browser asks for


@pytest.fixture
def client():
    return Client(**HTML)


@pytest.fixture
def staff_client(staff):
    client = Client(**HTML)
    client.force_login(staff)
    return client


def make_thread(agent, *, status="completed", title="", messages=()):
    thread = Thread.objects.create(agent=agent, session_key="s", status=status, title=title,
                                   history_digest="d", message_count=len(messages))
    for i, (role, content) in enumerate(messages):
        Message.objects.create(thread=thread, seq=i, role=role, content=content,
                               finish_reason="stop" if role == "assistant" else "",
                               ttft_ms=12 if role == "assistant" else None,
                               output_tokens=3 if role == "assistant" else None)
    return thread


@pytest.mark.parametrize("path", PAGES)
def test_page_needs_login(client, echo_agent, path):
    response = client.get(path)
    assert response.status_code == 302
    assert response["Location"].startswith("/login/?next=")


def test_page_refuses_non_staff_user(client, echo_agent):
    user = get_user_model().objects.create_user("plain", password="pw-plain-123")
    client.force_login(user)
    assert client.get("/")["Location"].startswith("/login/")


def test_login_form_refuses_non_staff_and_accepts_staff(staff):
    get_user_model().objects.create_user("plain", password="pw-plain-123")
    client = Client(enforce_csrf_checks=True, **HTML)
    page = client.get("/login/")
    token = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', page.text).group(1)
    refused = client.post("/login/", {"username": "plain", "password": "pw-plain-123",
                                      "csrfmiddlewaretoken": token})
    assert refused.status_code == 200
    assert "staff accounts only" in refused.text
    ok = client.post("/login/", {"username": "op", "password": "pw-op-123",
                                 "csrfmiddlewaretoken": token, "next": "/threads/"})
    assert ok.status_code == 302
    assert ok["Location"] == "/threads/"
    assert client.get("/threads/").status_code == 200


def test_login_says_the_same_whether_or_not_the_password_was_right(staff):
    """A message only a right password gets would confirm a valid credential."""
    get_user_model().objects.create_user("plain", password="pw-plain-123")
    get_user_model().objects.create_user("idle", password="pw-idle-123", is_staff=True,
                                         is_active=False)
    client = Client(enforce_csrf_checks=True, **HTML)
    page = client.get("/login/")
    token = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', page.text).group(1)

    def errors(username: str, password: str) -> list[str]:
        answer = client.post("/login/", {"username": username, "password": password,
                                         "csrfmiddlewaretoken": token})
        assert answer.status_code == 200
        return answer.context["form"].non_field_errors()

    right = errors("plain", "pw-plain-123")  # a right password, not staff
    assert right == errors("plain", "wrong") == errors("nobody", "wrong") == errors(
        "idle", "pw-idle-123") == errors("op", "wrong")
    assert len(right) == 1
    assert "staff" in right[0]


def test_login_without_csrf_token_is_refused(staff):
    client = Client(enforce_csrf_checks=True, **HTML)
    response = client.post("/login/", {"username": "op", "password": "pw-op-123"})
    assert response.status_code == 403


def test_logout_is_a_post_with_csrf(staff_client):
    page = staff_client.get("/")
    assert re.search(r'<form class="logout" method="post" action="/logout/">'
                     r'<input type="hidden" name="csrfmiddlewaretoken"', page.text)
    assert staff_client.post("/logout/")["Location"] == "/login/"
    assert staff_client.get("/")["Location"].startswith("/login/")


@pytest.mark.parametrize("path", PAGES)
def test_every_page_renders_for_staff(staff_client, echo_agent, path):
    response = staff_client.get(path)
    assert response.status_code == 200
    assert 'src="/static/gaia/feed.js"' in response.text
    # Nothing is loaded from another host: every script, stylesheet and image is ours. (A
    # search for "cdn" in the page also matched random tokens: CI once saw "...bscdnam".)
    loaded = re.findall(r'<(?:script|link|img)\b[^>]*?\b(?:src|href)="([^"]*)"', response.text)
    assert loaded
    assert all(url.startswith("/") and not url.startswith("//") for url in loaded), loaded


def test_dashboard_shows_stats_agents_and_active_threads(staff_client, make_agent):
    busy = make_agent(slug="busy-one")
    make_agent(slug="paused-one", paused=True)
    make_thread(busy, status="active", title="live talk")
    make_thread(busy, status="completed", title="old talk")
    html = staff_client.get("/").text
    assert re.search(r'data-stat="agent_count">2<', html)
    assert re.search(r'data-stat="active_threads">1<', html)
    assert 'class="light state-paused"' in html
    assert "live talk" in html
    assert "old talk" not in html


def test_agent_page_shows_sanitised_config_and_controls(staff_client, make_agent):
    agent = make_agent(slug="secretive", provider__api_key_secret="sk-very-secret",
                       provider__api_key_env="MY_SECRET_ENV", instructions="Be <b>kind</b>.")
    html = staff_client.get("/agents/secretive/").text
    assert "sk-very-secret" not in html
    assert "MY_SECRET_ENV" not in html
    assert "Credentials</dt><dd>set" in html
    assert "Be &lt;b&gt;kind&lt;/b&gt;." in html
    assert 'action="/api/v1/agents/secretive/pause"' in html
    assert f'href="/admin/agents/agent/{agent.pk}/change/"' in html
    assert re.search(r'<form[^>]+/resume"[^>]*hidden>', html)  # not paused: resume hidden


def test_unknown_agent_thread_and_run_are_404(staff_client):
    assert staff_client.get("/agents/nobody/").status_code == 404
    assert staff_client.get("/runs/not-a-number/").status_code == 404
    assert staff_client.get("/threads/not-a-uuid/").status_code == 404
    assert staff_client.get(
        "/threads/7d4c2a52-5b8e-4d3c-9f6e-1d2a3b4c5d6e/").status_code == 404


def test_thread_list_filters_and_searches(staff_client, make_agent):
    a, b = make_agent(slug="alpha"), make_agent(slug="beta")
    make_thread(a, status="completed", title="first", messages=[("user", "about penguins")])
    make_thread(a, status="error", title="second", messages=[("user", "about whales")])
    make_thread(b, status="completed", title="third", messages=[("user", "penguins again")])

    def titles(query):
        html = staff_client.get("/threads/" + query).text
        return sorted(t for t in ("first", "second", "third") if f">{t}</a>" in html)

    assert titles("") == ["first", "second", "third"]
    assert titles("?status=error") == ["second"]
    assert titles("?agent=alpha") == ["first", "second"]
    assert titles("?q=PENGUINS") == ["first", "third"]
    assert titles("?q=penguins&agent=beta") == ["third"]
    assert staff_client.get("/threads/?status=bogus").status_code == 200  # ignored, not 500
    assert staff_client.get("/threads/?page=999").status_code == 200


def test_thread_list_pager_keeps_the_query(staff_client, make_agent, monkeypatch):
    monkeypatch.setattr("agents.pages.views.THREADS_PER_PAGE", 1)
    a = make_agent(slug="alpha")
    make_thread(a, title="first")
    make_thread(a, title="second")
    make_thread(make_agent(slug="beta"), title="third")
    first = staff_client.get("/threads/?agent=alpha").text
    assert "page 1 of 2 (2 threads)" in first
    assert '<a href="?agent=alpha&amp;page=2">next</a>' in first
    second = staff_client.get("/threads/?agent=alpha&page=2").text
    assert '<a href="?agent=alpha&amp;page=1">previous</a>' in second
    assert ">next</a>" not in second


def test_thread_page_shows_messages_as_text_with_their_figures(staff_client, echo_agent):
    thread = make_thread(echo_agent, status="active", messages=[
        ("user", "hi <script>alert(1)</script>"), ("assistant", "<img src=x onerror=alert(2)>")])
    html = staff_client.get(f"/threads/{thread.pk}/").text
    assert "<script>alert(1)</script>" not in html
    assert "hi &lt;script&gt;alert(1)&lt;/script&gt;" in html
    assert "&lt;img src=x onerror=alert(2)&gt;" in html
    assert 'data-meta="ttft">12<' in html
    assert 'data-meta="finish">stop<' in html
    assert f'action="/api/v1/threads/{thread.pk}/kill"' in html
    assert re.search(r'<form id="kill-form"[^>]*data-kind="kill" >', html)  # shown: active
    assert 'action="/api/v1/inject"' in html


def test_kill_button_hidden_when_no_turn_runs(staff_client, echo_agent):
    thread = make_thread(echo_agent, status="completed")
    html = staff_client.get(f"/threads/{thread.pk}/").text
    assert re.search(r'<form id="kill-form"[^>]*data-kind="kill" hidden>', html)


def test_root_answers_clients_probes_and_browsers(staff_client):
    """``/`` is the dashboard for a browser; API clients probing it get JSON."""
    probe = Client().get("/", HTTP_ACCEPT="application/json")
    assert probe.status_code == 200
    assert probe.json()["api"] == "/v1"
    assert Client().head("/").status_code == 200
    page = staff_client.get("/")
    assert page.status_code == 200
    assert 'data-page="dashboard"' in page.text


def test_thread_page_draws_tool_calls_with_their_results_and_pending_approvals(
        staff_client, make_agent):
    from datetime import timedelta

    from django.utils import timezone

    from agents.models import Approval

    agent = make_agent(slug="toolish", tools=["calculator"])
    thread = make_thread(agent, status="waiting", messages=[("user", "sums please")])

    def add(role, content="", **fields):
        return Message.objects.create(thread=thread, seq=thread.messages.count(), role=role,
                                      content=content, **fields)

    args = '{"expression": "<b>6 * 7</b>"}'
    add("assistant", sender="toolish", recipient="calculator", internal=True,
        tool_calls=[{"id": "c1", "name": "calculator", "arguments": args}])
    result = add("tool", "42", sender="calculator", recipient="toolish", internal=True,
                 tool_call_id="c1", latency_ms=5)
    add("tool", "lookup: boom", sender="lookup", recipient="toolish", internal=True,
        tool_call_id="c9", latency_ms=7, error="lookup: boom")  # its call is not stored
    add("assistant", sender="toolish", recipient="calculator", internal=True,
        tool_calls=[{"id": "c2", "name": "calculator", "arguments": "{}"}])
    approval = Approval.objects.create(
        thread=thread, agent=agent, call_id="c2", tool="calculator", server="gaia",
        arguments='{"expression": "<i>1</i>"}', expires_at=timezone.now() + timedelta(minutes=5))
    Approval.objects.create(thread=thread, agent=agent, call_id="c0", tool="calculator",
                            status="approved", decided_by="user:op",
                            expires_at=timezone.now())  # decided: kept, with its outcome
    html = staff_client.get(f"/threads/{thread.pk}/").text

    calls = re.findall(r'<details class="tool-call[^"]*"[^>]*>', html)
    assert len(calls) == 3
    assert not any(" open" in c for c in calls)  # collapsed
    assert "<b>6 * 7</b>" not in html
    assert "{&quot;expression&quot;: &quot;&lt;b&gt;6 * 7&lt;/b&gt;&quot;}" in html
    # the result is drawn in its call, not as a message of its own
    assert f'<div class="tool-result" data-message-id="{result.pk}">' in html
    assert html.count('<article class="msg role-tool') == 1  # the one without its call
    assert re.search(r'class="tool-duration">5 ms</span></summary>', html)
    # a result without its call stands alone, failed
    assert re.search(r'<details class="tool-call alone failed" data-call-id="c9" '
                     r'data-tool="lookup"', html)
    assert 'class="tool-failed">failed<' in html
    # the call that waits, and its approval with the buttons
    assert 'class="tool-state">waiting for approval<' in html
    assert re.search(r'<section id="approvals" class="approvals" aria-live="polite" >', html)
    assert html.count('<article class="approval"') == 2
    assert 'data-status="approved"' in html
    assert 'approved</span> by <span class="decided-by">user:op</span>' in html
    assert f'action="/api/v1/approvals/{approval.pk}"' in html
    assert "&lt;i&gt;1&lt;/i&gt;" in html
    assert 'value="approve"' in html
    assert 'value="deny"' in html
    assert re.search(r'<form id="kill-form"[^>]*data-kind="kill" >', html)  # shown: waiting
    assert 'class="badge status-waiting">waiting<' in html


def test_thread_page_hides_the_approvals_when_none_waits(staff_client, echo_agent):
    thread = make_thread(echo_agent, status="completed", messages=[("user", "hi")])
    html = staff_client.get(f"/threads/{thread.pk}/").text
    assert re.search(r'<section id="approvals"[^>]*hidden>', html)
    assert "<details class=\"tool-call" not in html


@pytest.mark.parametrize("path", ["/runs/987654/", "/threads/00000000-0000-0000-0000-000000000000/",
                                  "/agents/nobody/", "/keys/424242/", "/providers/none/",
                                  "/no/such/page/"])
def test_a_missing_page_is_a_404_inside_the_layout(staff_client, path):
    r = staff_client.get(path)
    assert r.status_code == 404
    html = r.content.decode()
    assert "<h1>Not found</h1>" in html
    assert 'href="/threads/"' in html  # the console's own navigation, not Django's bare page
    assert "gaia.css" in html


def test_the_server_error_page_is_styled_and_says_nothing_was_lost(rf):
    from django.views.defaults import server_error

    r = server_error(rf.get("/"))
    assert r.status_code == 500
    html = r.content.decode()
    assert "gaia.css" in html
    assert "nothing you sent was lost" in html


def test_an_agent_in_error_shows_why(staff_client, make_agent):
    agent = make_agent(slug="flaky")
    make_thread(agent)
    html = staff_client.get("/agents/flaky/").text
    assert re.search(r'<p id="agent-error" class="error" hidden>', html)
    failed = make_thread(agent, status="error")
    Thread.objects.filter(pk=failed.pk).update(last_error="Provider 'p' timed out after 30 s.")
    html = staff_client.get("/agents/flaky/").text
    assert "Provider &#x27;p&#x27; timed out after 30 s." in html
    assert f'href="/threads/{failed.pk}/"' in html
    assert "state-error" in html
    # a newer good turn: no error shown
    make_thread(agent)
    assert re.search(r'<p id="agent-error" class="error" hidden>',
                     staff_client.get("/agents/flaky/").text)
