"""One markup per thing on a page: a live update swaps in the partial template the page
includes, rendered by ``/fragments/<name>/`` from the page's own context builder. Without a
browser: a fragment is the very markup the page holds, for staff only. In Chromium: a row and a
message drawn live are the ones Django draws on a reload, byte for byte."""

from __future__ import annotations

import re

import httpx
import pytest
from django.contrib.auth import get_user_model
from django.test import Client

from tests.pages.test_views import HTML, make_thread


@pytest.fixture
def staff_client(db):
    client = Client(**HTML)
    client.force_login(get_user_model().objects.create_user("op", is_staff=True))
    return client


def fragment_in_page(client: Client, page: str, fragment: str) -> str:
    shown = client.get(page).content.decode()
    part = client.get(fragment)
    assert part.status_code == 200, part.content[:500]
    body = part.content.decode().strip()
    assert body
    assert body in shown, f"{fragment} is not the markup of {page}"
    return body


@pytest.mark.django_db
def test_each_fragment_is_the_markup_its_page_holds(staff_client, make_agent, make_key):
    agent = make_agent(slug="frag-agent")
    active = make_thread(agent, status="active", title="<b>still going</b>",
                         messages=[("user", "hello <script>"), ("assistant", "hi")])
    make_thread(agent, title="walrus talk", messages=[("user", "walrus?")])
    make_key("frag-key", scopes=["chat"])
    rows = fragment_in_page(staff_client, "/", "/fragments/thread-rows/?of=dashboard")
    assert f'data-thread="{active.pk}"' in rows
    assert "walrus" not in rows
    assert "&lt;b&gt;still going" in rows  # escaped by the template
    fragment_in_page(staff_client, "/", "/fragments/agent-rows/")
    fragment_in_page(staff_client, "/agents/?sort=-agent", "/fragments/agent-rows/?sort=-agent")
    listed = fragment_in_page(staff_client, "/threads/?q=walrus",
                              "/fragments/thread-rows/?q=walrus")
    assert "walrus talk" in listed
    assert "still going" not in listed
    fragment_in_page(staff_client, "/agents/frag-agent/",
                     "/fragments/thread-rows/?of=agent&agent=frag-agent")
    messages = fragment_in_page(staff_client, f"/threads/{active.pk}/",
                                f"/fragments/messages/?thread={active.pk}")
    assert messages.count("<article") == 2
    assert "hello &lt;script&gt;" in messages
    fragment_in_page(staff_client, "/keys/", "/fragments/key-rows/")


@pytest.mark.django_db
def test_fragments_are_for_staff_and_known_names(staff_client, make_agent):
    assert staff_client.get("/fragments/no-such-thing/").status_code == 404
    assert staff_client.get("/fragments/messages/?thread=nope").status_code == 404
    assert staff_client.get("/fragments/approvals/?thread=nope").status_code == 404
    assert staff_client.get("/fragments/agent-error/?agent=nobody").status_code == 404
    assert staff_client.get("/fragments/agent-rows/?sort=password").status_code == 400
    anonymous = Client(**HTML).get("/fragments/agent-rows/")
    assert anonymous.status_code == 302
    assert "/login/" in anonymous["Location"]


def expect():
    from playwright.sync_api import expect as pw_expect

    return pw_expect


ROW_HTML = """r => { const c = r.cloneNode(true); c.classList.remove('flash');
                     if (!c.classList.length) c.removeAttribute('class'); return c.outerHTML; }"""


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_a_row_and_messages_drawn_live_are_the_ones_django_draws(page, gaia_server, echo_agent,
                                                                 api_key):
    page.goto("/threads/")
    expect()(page.locator("#feed-status")).to_have_attribute("data-state", "live")
    page.wait_for_function("window.gaiaFeed.lastResync === 'connect'")
    page.evaluate("window.__same_document = true")
    r = httpx.post(gaia_server.v1 + "/chat/completions", timeout=30, json={
        "model": echo_agent.slug, "messages": [{"role": "user", "content": "a <i>new</i> one"}]},
        headers={"Authorization": f"Bearer {api_key}"})
    thread_id = r.headers["x-gaia-thread-id"]
    row = page.locator(f'#thread-rows tr[data-thread="{thread_id}"]')
    expect()(row.locator(".message-count")).to_have_text("2", timeout=10_000)
    expect()(row.locator(".badge")).to_have_text("completed", timeout=10_000)
    assert page.evaluate("window.__same_document") is True  # drawn live, not reloaded
    live = row.evaluate(ROW_HTML)
    page.reload()
    assert row.evaluate(ROW_HTML) == live

    page.goto(f"/threads/{thread_id}/")
    expect()(page.locator("#feed-status")).to_have_attribute("data-state", "live")
    page.wait_for_function("window.gaiaFeed.lastResync === 'connect'")
    page.evaluate("window.__same_document = true")
    page.fill("#inject-text", "and <b>another</b>")
    page.click("#inject")
    expect()(page.locator("article[data-message-id]")).to_have_count(4, timeout=10_000)
    assert page.evaluate("window.__same_document") is True
    articles = "as => as.map(a => a.outerHTML)"
    live = page.locator("#messages > article").evaluate_all(articles)
    assert len(live) == 4
    assert re.search(r"and &lt;b&gt;another&lt;/b&gt;", live[2])
    page.reload()
    assert page.locator("#messages > article").evaluate_all(articles) == live
