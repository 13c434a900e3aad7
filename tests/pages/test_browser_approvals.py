"""The approvals inbox in a real browser (Debian's Chromium through Playwright) against a live
Gaia process: the navigation's live count, deciding from the inbox, its filters, decided and
lost approvals kept on their thread with their outcome, and a waiting thread counted as
active on the dashboard."""

from __future__ import annotations

import threading
import time
from typing import Any

import httpx
import pytest

from tests.pages.conftest import no_raw_times, screenshot
from tests.pages.test_browser_tools import WAIT, BackgroundTurn, expect

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]

SCRIPT = [{"tool_calls": [{"name": "calculator", "arguments": {"expression": "6 * 7"}}]},
          {"reply": "Results: {results}"}]


@pytest.fixture
def careful(make_agent: Any) -> Any:
    return make_agent(slug="careful", tools=["calculator"], require_approval="always",
                      provider__options={"script": SCRIPT})


def pending(server: Any, key: str) -> list[dict[str, Any]]:
    r = httpx.get(f"{server.url}/api/v1/approvals", timeout=10,
                  headers={"Authorization": f"Bearer {key}"})
    assert r.status_code == 200, r.text
    return r.json()["results"]


def nav_count(page: Any) -> Any:
    return page.locator("#nav-approvals #approvals-count")


def test_the_inbox_counts_live_and_decides(page, gaia_server, careful, api_key):
    page.goto("/approvals/")
    expect()(page.locator("#feed-status")).to_have_attribute("data-state", "live")
    expect()(nav_count(page)).to_be_hidden()  # nothing waits: no badge
    expect()(page.locator("#approval-rows tr.empty")).to_have_count(1)
    turn = BackgroundTurn(gaia_server, api_key, "careful")
    expect()(nav_count(page)).to_have_text("1", timeout=WAIT)
    expect()(nav_count(page)).to_be_visible()
    row = page.locator("#approval-rows tr[data-approval-id]")
    expect()(row).to_have_count(1, timeout=WAIT)
    expect()(row).to_have_attribute("data-status", "pending")
    expect()(row.locator(".approval-tool")).to_have_text("calculator")
    expect()(row.locator(".approval-args")).to_have_text('{"expression": "6 * 7"}')
    expect()(row.locator("a.approval-thread")).to_have_attribute(
        "href", f"/threads/{turn.thread_id}/")
    expect()(row.locator(".approval-when")).to_contain_text("expires in")
    expect()(page.locator("#approval-pager")).to_contain_text("(1 approvals)")
    no_raw_times(page)
    screenshot(page, "approvals-inbox")
    row.locator("input[name=reason]").fill("checked the maths")
    row.locator("button.approve").click()
    expect()(row).to_have_attribute("data-status", "approved", timeout=WAIT)
    expect()(nav_count(page)).to_be_hidden(timeout=WAIT)
    expect()(row.locator(".decided-by")).to_have_text("user:operator")
    expect()(row.locator(".reason")).to_have_text("checked the maths")
    expect()(row.locator(".approval-outcome")).to_have_text("the tool ran")
    assert turn.join() == "Results: 42"  # the thread went on; the client got its reply
    page.reload()
    expect()(nav_count(page)).to_be_hidden()
    expect()(page.locator("#approval-rows tr[data-status=approved]")).to_have_count(1)


def test_the_count_follows_on_every_page_and_a_thread_page(page, gaia_server, careful,
                                                             api_key, make_key):
    """A thread page follows its own thread only; the count still comes (it is about none)."""
    _, ops = make_key("ops", scopes=["operator"])
    first = BackgroundTurn(gaia_server, api_key, "careful")
    page.goto(f"/threads/{first.thread_id}/")
    expect()(page.locator("#feed-status")).to_have_attribute("data-state", "live")
    expect()(nav_count(page)).to_have_text("1", timeout=WAIT)
    second = BackgroundTurn(gaia_server, api_key, "careful")
    expect()(nav_count(page)).to_have_text("2", timeout=WAIT)
    for a in pending(gaia_server, ops):
        r = httpx.post(f"{gaia_server.url}/api/v1/approvals/{a['id']}", timeout=10,
                       json={"decision": "approve"}, headers={"Authorization": f"Bearer {ops}"})
        assert r.status_code == 200, r.text
    expect()(nav_count(page)).to_be_hidden(timeout=WAIT)
    assert first.join() == second.join() == "Results: 42"


def test_the_inbox_filters_by_agent_and_state(page, gaia_server, careful, make_agent, api_key):
    make_agent(slug="wary", tools=["calculator"], require_approval="always",
               provider__options={"script": SCRIPT})
    one = BackgroundTurn(gaia_server, api_key, "careful")
    two = BackgroundTurn(gaia_server, api_key, "wary")
    page.goto("/approvals/")
    rows = page.locator("#approval-rows tr[data-approval-id]")
    expect()(rows).to_have_count(2, timeout=WAIT)
    page.select_option("#id_agent", "wary")
    page.click("form.filters button[type=submit]")
    expect()(rows).to_have_count(1)
    expect()(rows).to_have_attribute("data-agent", "wary")
    rows.locator("input[name=reason]").fill("no")
    rows.locator("button.deny").click()
    expect()(rows).to_have_attribute("data-status", "denied", timeout=WAIT)
    page.goto("/approvals/?state=pending")
    expect()(rows).to_have_count(1)
    expect()(rows).to_have_attribute("data-agent", "careful")
    page.goto("/approvals/?state=denied")
    expect()(rows).to_have_count(1)
    expect()(rows).to_have_attribute("data-agent", "wary")
    expect()(rows.locator(".approval-outcome")).to_have_text(
        "not run: the model was told it was denied")
    page.goto("/approvals/?state=pending")
    rows.locator("button.approve").click()
    expect()(rows).to_have_count(0, timeout=WAIT)  # decided: no longer waiting, moved out
    expect()(page.locator("#approval-rows tr.empty")).to_have_text("No approval matches.")
    assert one.join() == "Results: 42"
    assert two.join() == "Results: calculator was not run: user:operator denied it: no."


def test_a_denied_approval_stays_on_its_thread(page, gaia_server, careful, api_key):
    turn = BackgroundTurn(gaia_server, api_key, "careful")
    page.goto("/approvals/")
    row = page.locator("#approval-rows tr[data-approval-id]")
    expect()(row).to_have_count(1, timeout=WAIT)
    row.locator("input[name=reason]").fill("not today")
    row.locator("button.deny").click()
    expect()(row).to_have_attribute("data-status", "denied", timeout=WAIT)
    assert turn.join() == "Results: calculator was not run: user:operator denied it: not today."
    row.locator("a.approval-thread").click()
    card = page.locator("#approvals article.approval")
    expect()(card).to_have_count(1)
    expect()(card).to_have_attribute("data-status", "denied")
    expect()(card.locator(".approval-outcome")).to_have_text("denied by user:operator: not today")
    expect()(card.locator(".approval-when")).to_contain_text("decided")
    expect()(card).not_to_contain_text("expires")
    expect()(card.locator("form")).to_be_hidden()
    expect()(page.locator("details.tool-call.failed")).to_have_count(1)


def test_a_lost_clients_approval_is_kept_with_its_end(page, gaia_server, careful, api_key):
    """The client goes away while its call waits: the inbox and the thread page still show the
    approval, and how it ended; the call does not read 'no result yet'."""
    page.goto("/approvals/")
    expect()(page.locator("#feed-status")).to_have_attribute("data-state", "live")
    started, gone = threading.Event(), threading.Event()
    seen: dict[str, str] = {}

    def lost_client() -> None:
        with httpx.Client(timeout=60) as client, client.stream(
                "POST", gaia_server.v1 + "/chat/completions",
                headers={"Authorization": f"Bearer {api_key}"},
                json={"model": "careful", "stream": True,
                      "messages": [{"role": "user", "content": "six times seven?"}]}) as r:
            seen["thread"] = r.headers["x-gaia-thread-id"]
            started.set()
            gone.wait(30)  # then leaves without reading the rest

    worker = threading.Thread(target=lost_client, daemon=True)
    worker.start()
    assert started.wait(30)
    row = page.locator("#approval-rows tr[data-approval-id]")
    expect()(row).to_have_attribute("data-status", "pending", timeout=WAIT)
    expect()(nav_count(page)).to_have_text("1", timeout=WAIT)
    gone.set()
    worker.join(30)
    expect()(row).to_have_attribute("data-status", "expired", timeout=WAIT)
    expect()(nav_count(page)).to_be_hidden(timeout=WAIT)
    expect()(row.locator(".approval-outcome")).to_have_text(
        "not run: its turn stopped before anyone decided")
    expect()(row.locator(".decided-by")).to_have_text("turn stopped")
    page.goto(f"/threads/{seen['thread']}/")
    card = page.locator("#approvals article.approval")
    expect()(card).to_have_count(1)
    expect()(card).to_have_attribute("data-status", "expired")
    expect()(card.locator(".approval-outcome")).to_have_text(
        "expired (its turn stopped before anyone decided)")
    expect()(card).not_to_contain_text("expires")
    expect()(page.locator("#thread-status")).to_have_text("error")
    expect()(page.locator("#thread-error")).to_contain_text("disconnected")
    call = page.locator("details.tool-call")
    expect()(call).to_have_count(1)
    expect()(call.locator(".tool-state")).to_have_text("expired")
    screenshot(page, "thread-approval-lost-client")


def test_a_waiting_thread_is_active_on_the_dashboard(page, gaia_server, careful, api_key,
                                                     make_key):
    _, ops = make_key("ops", scopes=["operator"])
    page.goto("/")
    expect()(page.locator("#feed-status")).to_have_attribute("data-state", "live")
    turn = BackgroundTurn(gaia_server, api_key, "careful")
    row = page.locator(f"#thread-rows tr[data-thread=\"{turn.thread_id}\"]")
    expect()(row).to_have_count(1, timeout=WAIT)
    expect()(row).to_contain_text("waiting", timeout=WAIT)
    expect()(page.locator('[data-stat="active_threads"]')).to_have_text("1", timeout=WAIT)
    page.reload()
    expect()(row).to_have_count(1)
    expect()(page.locator('[data-stat="active_threads"]')).to_have_text("1")
    expect()(page.locator("main")).not_to_contain_text("No thread is active")
    deadline = time.monotonic() + 30
    while not (waiting := pending(gaia_server, ops)) and time.monotonic() < deadline:
        time.sleep(0.1)
    r = httpx.post(f"{gaia_server.url}/api/v1/approvals/{waiting[0]['id']}", timeout=10,
                   json={"decision": "approve"}, headers={"Authorization": f"Bearer {ops}"})
    assert r.status_code == 200, r.text
    assert turn.join() == "Results: 42"
    expect()(row).to_have_count(0, timeout=WAIT)
