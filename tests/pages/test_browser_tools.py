"""An agent's own tool calls on the thread page, in a real browser (Debian's Chromium through
Playwright) against a live Gaia process: drawn collapsed, live and as rendered by Django alike,
and the calls that wait for an operator approved or denied from the page (or elsewhere)."""

from __future__ import annotations

import re
import threading
from typing import Any

import httpx
import openai
import pytest

from tests.pages.conftest import screenshot

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]

SCRIPT = [{"tool_calls": [{"name": "calculator", "arguments": {"expression": "6 * 7"}}]},
          {"reply": "Results: {results}"}]
WAIT = 15_000  # ms: how long a live change may take to show, at most


def expect():
    from playwright.sync_api import expect as pw_expect

    return pw_expect


class BackgroundTurn:
    """A streamed chat completion through the OpenAI SDK, in a thread: the turn waits for an
    approval while the test drives the page."""

    def __init__(self, server: Any, key: str, model: str) -> None:
        self.started = threading.Event()
        self.thread_id = ""
        self.text = ""
        self.error: BaseException | None = None
        client = openai.OpenAI(base_url=server.v1, api_key=key, max_retries=0, timeout=60)

        def run() -> None:
            try:
                with client.chat.completions.with_streaming_response.create(
                        model=model, stream=True,
                        messages=[{"role": "user", "content": "What is six times seven?"}],
                ) as raw:
                    self.thread_id = raw.headers["x-gaia-thread-id"]
                    self.started.set()
                    self.text = "".join(c.choices[0].delta.content or ""
                                        for c in raw.parse() if c.choices)
            except BaseException as exc:  # noqa: BLE001 - reported by join()
                self.error = exc
                self.started.set()

        self.worker = threading.Thread(target=run, daemon=True)
        self.worker.start()
        assert self.started.wait(30), "the turn did not start"
        assert self.error is None, self.error

    def join(self) -> str:
        self.worker.join(60)
        assert not self.worker.is_alive(), "the turn did not end"
        assert self.error is None, self.error
        return self.text


@pytest.fixture
def careful(make_agent: Any) -> Any:
    return make_agent(slug="careful", tools=["calculator"], require_approval="always",
                      provider__options={"script": SCRIPT})


def open_waiting_thread(page: Any, turn: BackgroundTurn) -> Any:
    """The thread page of ``turn`` once its call waits; the pending approval's card."""
    page.goto(f"/threads/{turn.thread_id}/")
    expect()(page.locator("#feed-status")).to_have_attribute("data-state", "live")
    card = page.locator("#approvals article.approval")
    expect()(card).to_have_count(1, timeout=WAIT)
    expect()(card).to_have_attribute("data-status", "pending")
    expect()(card.locator(".approval-tool")).to_have_text("calculator")
    expect()(card.locator(".approval-args")).to_have_text('{"expression": "6 * 7"}')
    expect()(page.locator("#thread-status")).to_have_text("waiting", timeout=WAIT)
    expect()(page.locator("#kill")).to_be_visible()
    call = page.locator("article.tools details.tool-call")
    expect()(call).to_have_count(1, timeout=WAIT)
    expect()(call.locator(".tool-state")).to_have_text("waiting for approval", timeout=WAIT)
    return card


def summary_words(call: Any) -> list[str]:
    return call.locator("summary").text_content().split()


def check_call_drawn(page: Any, *, result: str, failed: bool) -> list[str]:
    """The one tool call, collapsed (summary: tool, origin, duration, failed marker), then
    expanded: its arguments and its result. Returns the expanded call's words."""
    call = page.locator("article.tools details.tool-call")
    expect()(call).to_have_count(1)
    assert call.evaluate("d => d.open") is False
    expect()(call.locator(".tool-result pre")).to_be_hidden()
    expect()(call.locator("summary .tool-name")).to_have_text("calculator")
    expect()(call.locator("summary .tool-origin")).to_have_text("agent")
    expect()(call.locator("summary .tool-duration")).to_have_text(re.compile(r"^\d+ ms$"))
    expect()(call.locator("summary .tool-failed")).to_have_count(1 if failed else 0)
    expect()(call.locator(".tool-state")).to_have_count(0)
    call.locator("summary").click()
    expect()(call.locator(".tool-args pre")).to_have_text('{"expression": "6 * 7"}')
    expect()(call.locator(".tool-args pre")).to_be_visible()
    expect()(call.locator(".tool-result pre")).to_have_text(result)
    expect()(call.locator(".tool-result pre")).to_be_visible()
    # the results are drawn in their calls, not as messages of their own
    expect()(page.locator("article.role-tool")).to_have_count(0)
    return call.inner_text().split()


def check_reload_draws_the_same(page: Any, live_words: list[str]) -> None:
    """What Django renders is what the feed drew."""
    page.reload()
    call = page.locator("article.tools details.tool-call")
    expect()(call).to_have_count(1)
    assert call.evaluate("d => d.open") is False
    call.locator("summary").click()
    assert call.inner_text().split() == live_words


def test_approve_a_tool_call_from_the_thread_page(page, gaia_server, careful, api_key):
    turn = BackgroundTurn(gaia_server, api_key, "careful")
    card = open_waiting_thread(page, turn)
    screenshot(page, "thread-approval")
    card.locator("button.approve").click()
    expect()(card).to_have_attribute("data-status", "approved", timeout=WAIT)
    expect()(card.locator("form")).to_be_hidden()
    expect()(card.locator(".approval-outcome")).to_have_text("approved by user:operator")
    reply = page.locator("article.role-assistant:not(.tools)[data-message-id] .body")
    expect()(reply).to_have_text("Results: 42", timeout=WAIT)
    expect()(page.locator("#thread-status")).to_have_text("completed", timeout=WAIT)
    expect()(page.locator("#kill-form")).to_be_hidden()
    assert turn.join() == "Results: 42"
    words = check_call_drawn(page, result="42", failed=False)
    screenshot(page, "thread-tool-call")
    check_reload_draws_the_same(page, words)
    # nothing waits any more; the decided approval stays, with its outcome and no expiry
    card = page.locator("#approvals article.approval")
    expect()(card).to_have_attribute("data-status", "approved")
    expect()(card.locator(".approval-outcome")).to_have_text("approved by user:operator")
    expect()(card).not_to_contain_text("expires")


def test_deny_a_tool_call_from_the_thread_page(page, gaia_server, careful, api_key):
    turn = BackgroundTurn(gaia_server, api_key, "careful")
    card = open_waiting_thread(page, turn)
    card.locator("input[name=reason]").fill("not today")
    card.locator("button.deny").click()
    expect()(card).to_have_attribute("data-status", "denied", timeout=WAIT)
    expect()(card.locator(".approval-outcome")).to_have_text(
        "denied by user:operator: not today")
    refusal = "calculator was not run: user:operator denied it: not today."
    reply = page.locator("article.role-assistant:not(.tools)[data-message-id] .body")
    expect()(reply).to_have_text(f"Results: {refusal}", timeout=WAIT)
    expect()(page.locator("#thread-status")).to_have_text("completed", timeout=WAIT)
    assert turn.join() == f"Results: {refusal}"
    words = check_call_drawn(page, result=refusal, failed=True)
    expect()(page.locator("details.tool-call.failed")).to_have_count(1)
    screenshot(page, "thread-tool-denied")
    check_reload_draws_the_same(page, words)


def test_a_call_that_waits_arrives_live_and_is_decided_elsewhere(page, gaia_server, careful,
                                                                  api_key, make_key):
    """The second turn's approval reaches the open page over the feed; an operator key decides
    it through the API, and the page shows who did."""
    _, ops = make_key("ops", scopes=["operator"])
    turn = BackgroundTurn(gaia_server, api_key, "careful")
    open_waiting_thread(page, turn).locator("button.approve").click()
    assert turn.join() == "Results: 42"
    expect()(page.locator("#thread-status")).to_have_text("completed", timeout=WAIT)
    page.fill("#inject-text", "once more")
    page.click("#inject")
    cards = page.locator("#approvals article.approval")
    expect()(cards).to_have_count(2, timeout=WAIT)
    card = cards.last
    expect()(card).to_have_attribute("data-status", "pending")
    expect()(cards.first).to_have_attribute("data-status", "approved")
    expect()(page.locator("#thread-status")).to_have_text("waiting", timeout=WAIT)
    calls = page.locator("article.tools details.tool-call")
    expect()(calls).to_have_count(2, timeout=WAIT)
    expect()(calls.last.locator(".tool-state")).to_have_text("waiting for approval",
                                                             timeout=WAIT)
    r = httpx.post(f"{gaia_server.url}/api/v1/approvals/{card.get_attribute('data-approval-id')}",
                   json={"decision": "approve", "reason": "fine by me"}, timeout=10,
                   headers={"Authorization": f"Bearer {ops}"})
    assert r.status_code == 200, r.text
    expect()(card).to_have_attribute("data-status", "approved", timeout=WAIT)
    expect()(card.locator("form")).to_be_hidden()
    expect()(card.locator(".approval-outcome")).to_have_text(
        "approved by key:ops: fine by me")
    replies = page.locator("article.role-assistant:not(.tools)[data-message-id] .body")
    expect()(replies).to_have_count(2, timeout=WAIT)
    expect()(replies.last).to_have_text("Results: 42")
    expect()(calls.last.locator(".tool-result pre")).to_have_text("42", timeout=WAIT)
    expect()(page.locator("#thread-status")).to_have_text("completed", timeout=WAIT)


def expanded_words(page: Any) -> list[list[str]]:
    calls = page.locator("details.tool-call")
    calls.evaluate_all("ds => ds.forEach(d => { d.open = true; })")
    return [c.split() for c in calls.all_inner_texts()]


def test_tool_calls_drawn_live_join_their_results(page, gaia_server, make_agent, api_key):
    """Calls and results that arrive over the feed are drawn as Django draws them; a call id
    used again by the next turn gets its own result."""
    make_agent(slug="calc-live", tools=["calculator"], provider__options={"script": SCRIPT})
    first = httpx.post(gaia_server.v1 + "/chat/completions", timeout=30, json={
        "model": "calc-live", "messages": [{"role": "user", "content": "six times seven?"}]},
        headers={"Authorization": f"Bearer {api_key}"})
    assert first.json()["choices"][0]["message"]["content"] == "Results: 42"
    page.goto(f"/threads/{first.headers['x-gaia-thread-id']}/")
    expect()(page.locator("#feed-status")).to_have_attribute("data-state", "live")
    page.wait_for_function("window.gaiaFeed.lastResync === 'connect'")
    expect()(page.locator("details.tool-call")).to_have_count(1)
    page.fill("#inject-text", "and again?")
    page.click("#inject")
    replies = page.locator("article.role-assistant:not(.tools)[data-message-id] .body")
    expect()(replies).to_have_count(2, timeout=WAIT)
    expect()(replies.last).to_have_text("Results: 42")
    calls = page.locator("article.tools details.tool-call")
    expect()(calls).to_have_count(2)
    # the same call id in both turns: each call holds its own stored result
    assert calls.evaluate_all("ds => ds.map(d => d.dataset.callId)") == ["call_fake_0_0"] * 2
    expect()(calls.locator(".tool-result[data-message-id]")).to_have_count(2, timeout=WAIT)
    for i in range(2):
        assert calls.nth(i).evaluate("d => d.open") is False
        expect()(calls.nth(i).locator(".tool-result pre")).to_have_text("42")
    expect()(page.locator("article.role-tool")).to_have_count(0)
    order = page.locator("#messages > article").evaluate_all(
        "as => as.map(a => a.classList.contains('tools') ? 'calls' : a.className.split(' ')[1])")
    assert order == ["role-user", "calls", "role-assistant"] * 2
    live = expanded_words(page)
    page.reload()
    assert expanded_words(page) == live
