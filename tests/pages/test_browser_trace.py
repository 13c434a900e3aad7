"""A turn's trace on the thread page, in a real browser (Debian's Chromium through Playwright)
against a live Gaia process: the "Trace" toggle of a turn with a tool call and a delegation
draws its tree with timing bars, a tool's arguments and result open on demand, the delegation
leads to the child thread, and the child thread leads back to its caller."""

from __future__ import annotations

import httpx
import pytest

from tests.pages.conftest import screenshot

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]

SCRIPT = [{"tool_calls": [{"name": "calculator", "arguments": {"expression": "6 * 7"}}]},
          {"tool_calls": [{"name": "agent__helper", "arguments": {"task": "Say hi"}}]},
          {"reply": "Done: {results}"}]
WAIT = 15_000  # ms


def expect():
    from playwright.sync_api import expect as pw_expect

    return pw_expect


def test_trace_toggle_follows_a_delegation_and_back(page, gaia_server, make_agent, api_key):
    make_agent(slug="tracer", tools=["calculator", "agent:helper"],
               provider__options={"script": SCRIPT})
    make_agent(slug="helper", provider__options={"reply": "hi from the helper"})
    r = httpx.post(gaia_server.v1 + "/chat/completions", timeout=60, json={
        "model": "tracer", "messages": [{"role": "user", "content": "Compute, then ask."}]},
        headers={"Authorization": f"Bearer {api_key}"})
    assert r.json()["choices"][0]["message"]["content"] == "Done: hi from the helper"
    thread_id = r.headers["x-gaia-thread-id"]

    page.goto(f"/threads/{thread_id}/")
    expect()(page.locator("#feed-status")).to_have_attribute("data-state", "live")
    page.wait_for_function("window.gaiaFeed.lastResync === 'connect'")
    toggles = page.locator("details.turn-trace")
    expect()(toggles).to_have_count(1)  # one turn, on its final reply
    expect()(page.locator("#called-by")).to_have_count(0)  # nobody called this one
    toggles.first.locator("summary").click()
    tree = toggles.first.locator(".trace-tree")
    expect()(tree).to_be_visible(timeout=WAIT)
    expect()(tree.locator(":scope > li > ul > li")).to_have_count(5)
    kinds = tree.locator(":scope > li > ul > li").evaluate_all(
        "nodes => nodes.map(n => n.dataset.kind)")
    assert kinds == ["model_call", "tool_call", "model_call", "tool_call", "model_call"]
    # every step with stored times has its bar on the turn's axis, within it
    bars = tree.locator("svg.trace-bar rect.span")
    assert bars.count() == 7  # the turn, five steps, the delegation
    for x, w in bars.evaluate_all("rs => rs.map(r => [r.x.baseVal.value, r.width.baseVal.value])"):
        assert x >= 0, (x, w)
        assert x + w <= 1000.5, (x, w)
    calc = tree.locator("li[data-kind=tool_call]").first
    expect()(calc.locator(".tool-name")).to_have_text("calculator")
    result = calc.locator(":scope > details.trace-result")
    expect()(result.locator("pre")).not_to_be_visible()
    result.locator("summary").click()
    expect()(result.locator("pre")).to_have_text("42")
    args = calc.locator(":scope > details.trace-args")
    args.locator("summary").click()
    expect()(args.locator("pre")).to_have_text('{"expression": "6 * 7"}')
    delegation = tree.locator("li[data-kind=delegation]")
    expect()(delegation).to_have_attribute("data-status", "completed")
    # one time axis: every bar's track starts at the same x, whatever its depth
    lefts = tree.locator("svg.trace-bar").evaluate_all(
        "ss => ss.map(s => Math.round(s.getBoundingClientRect().left))")
    assert len(set(lefts)) == 1, lefts
    screenshot(page, "turn-trace")

    delegation.locator("a.delegation-link").click()
    page.wait_for_url("**/threads/*/")
    assert thread_id not in page.url
    back = page.locator("#called-by")
    expect()(back).to_contain_text("called by tracer in thread")
    child_toggle = page.locator("details.turn-trace")
    child_toggle.locator("summary").click()
    expect()(child_toggle.locator(".trace-tree li[data-kind=model_call]")).to_have_count(1,
                                                                                        timeout=WAIT)
    back.locator("a.parent-thread").click()
    page.wait_for_url(f"**/threads/{thread_id}/")
    expect()(page.locator("details.turn-trace")).to_have_count(1)
    # the trace's own page, useful without the toggle, links back the same way
    page.goto(f"/threads/{thread_id}/turns/0/")
    expect()(page.locator(".trace-tree li[data-kind=delegation]")).to_have_count(1)
    assert page.goto(f"/threads/{thread_id}/turns/7/").status == 404
