"""Every console page on a phone (390 px) and in the dark: nothing wider than the screen
(``document.documentElement.scrollWidth``), the navigation folded behind its button, the
content reachable from the keyboard; the system's dark setting followed."""

from __future__ import annotations

import re
from typing import Any

import pytest

from tests.pages.conftest import screenshot

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]

PHONE = {"width": 390, "height": 844}


def expect() -> Any:
    from playwright.sync_api import expect as pw_expect

    return pw_expect


@pytest.fixture
def world(make_agent: Any, bench_suite: Any) -> dict[str, Any]:
    from agents import services
    from agents.models import Message, Thread
    from benchmarks.models import BenchmarkRun

    agent = make_agent(slug="support-with-a-rather-long-name")
    thread = Thread.objects.create(agent=agent, session_key="s", status="completed",
                                   title="A conversation whose title goes on and on " * 3,
                                   history_digest="d", message_count=2)
    Message.objects.create(thread=thread, seq=0, role="user", content="word " * 200)
    Message.objects.create(thread=thread, seq=1, role="assistant",
                           content="https://example.invalid/" + "x" * 300, finish_reason="stop",
                           output_tokens=3, input_tokens=5, ttft_ms=12)
    run = BenchmarkRun.objects.create(
        suite=bench_suite, protocol="json", tools={"retriever": "deterministic"},
        question_indexes=[0, 1], status="succeeded", questions_total=2, questions_done=2,
        summary={"mean_exact_match": 0.5, "mean_f1": 0.5})
    key, _ = services.api_key_create(name="a-key-for-the-phone", scopes=["chat", "operator"])
    return {"agent": agent.slug, "thread": str(thread.pk), "run": run.pk, "key": key.pk,
            "provider": agent.provider.name, "suite": bench_suite.pk}


def pages(world: dict[str, Any]) -> list[tuple[str, str]]:
    return [
        ("dashboard", "/"), ("agents", "/agents/"), ("agent", f"/agents/{world['agent']}/"),
        ("threads", "/threads/"), ("thread", f"/threads/{world['thread']}/"),
        ("runs", "/runs/"), ("run", f"/runs/{world['run']}/"), ("run-new", "/runs/new/"),
        ("compare", f"/runs/compare/?runs={world['run']}"), ("suites", "/runs/suites/"),
        ("suite", f"/runs/suites/{world['suite']}/"), ("keys", "/keys/"),
        ("key", f"/keys/{world['key']}/"), ("providers", "/providers/"),
        ("provider", f"/providers/{world['provider']}/"), ("webhooks", "/webhooks/"),
        ("audit", "/audit/"),
        ("not-found", "/no/such/page/")]


def test_every_page_fits_a_phone(page: Any, world: dict[str, Any]) -> None:
    page.set_viewport_size(PHONE)
    wide = []
    for name, path in pages(world):
        page.goto(path)
        page.wait_for_load_state("networkidle")
        width = page.evaluate("document.documentElement.scrollWidth")
        if width > PHONE["width"]:
            wide.append((path, width))
        if name in ("dashboard", "thread", "run", "keys", "compare"):
            screenshot(page, f"phone-{name}")
    assert not wide, f"pages wider than {PHONE['width']} px: {wide}"


def test_the_navigation_folds_and_opens_on_a_phone(page: Any, world: dict[str, Any]) -> None:
    page.set_viewport_size(PHONE)
    page.goto("/")
    nav = page.locator("#main-nav")
    expect()(nav).to_be_hidden()
    page.click("#nav-toggle")
    expect()(nav).to_be_visible()
    expect()(page.locator("#nav-toggle")).to_have_attribute("aria-expanded", "true")
    screenshot(page, "phone-menu")
    nav.locator("text=Threads").click()
    page.wait_for_url(re.compile(r"/threads/$"))
    page.set_viewport_size({"width": 1440, "height": 900})
    expect()(page.locator("#main-nav")).to_be_visible()  # wide: always shown
    expect()(page.locator("#nav-toggle")).to_be_hidden()


def test_the_keyboard_reaches_the_content_first(page: Any, world: dict[str, Any]) -> None:
    page.goto("/threads/")
    page.keyboard.press("Tab")
    skip = page.locator(".skip-link")
    expect()(skip).to_be_focused()
    page.keyboard.press("Enter")
    expect()(page.locator("main")).to_be_focused()
    page.keyboard.press("Tab")  # the first control of the page itself, not the navigation
    inside = page.evaluate("document.querySelector('main').contains(document.activeElement)")
    assert inside


def test_dark_mode_follows_the_system(browser: Any, gaia_server: Any, staff_user: Any,
                                      world: dict[str, Any]) -> None:
    from tests.pages.conftest import STAFF_PASSWORD

    context = browser.new_context(base_url=gaia_server.url, color_scheme="dark",
                                  viewport={"width": 1440, "height": 900})
    page = context.new_page()
    page.goto("/login/")
    page.fill("input[name=username]", "operator")
    page.fill("input[name=password]", STAFF_PASSWORD)
    page.click("button[type=submit]")
    page.wait_for_url(re.compile(r"/$"))
    page.goto(f"/threads/{world['thread']}/")
    background = page.evaluate("getComputedStyle(document.body).backgroundColor")
    card = page.evaluate("getComputedStyle(document.querySelector('.card, .msg')).backgroundColor")
    screenshot(page, "dark-thread")
    context.close()
    for color in (background, card):
        r, g, b = (int(x) for x in re.findall(r"\d+", color)[:3])
        assert r + g + b < 3 * 80, color  # dark, not the light theme's near-white
