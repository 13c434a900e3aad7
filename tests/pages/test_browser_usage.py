"""Usage over time in Chromium: the dashboard and an agent page draw the usage charts from
/api/v1/usage, the range picker redraws them for its range, and auto-refresh picks up a turn
served after the page loaded."""

from __future__ import annotations

import random
from datetime import timedelta

import pytest
from django.utils import timezone

from agents import services
from tests.pages.conftest import screenshot
from tests.pages.test_browser import chat, expect

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]

CHARTS = ("requests", "errors", "tokens", "ttft", "duration")


def history(agents, key, hours=20):
    """A day of earlier turns, written to the roll-up as finished turns write it."""
    rng = random.Random(7)
    now = timezone.now()
    turns = []
    for minutes in range(90, hours * 60, 4):
        agent = rng.choice(agents)
        failed = rng.random() < 0.08
        turns.append(services.UsageTurn(
            at=now - timedelta(minutes=minutes), agent_id=agent.pk, key_id=key.pk,
            model=agent.model_name, error_kind=rng.choice(["error", "killed"]) if failed else "",
            input_tokens=rng.randint(50, 900), output_tokens=rng.randint(10, 400),
            ttft_ms=int(rng.lognormvariate(5.5, 0.5)), latency_ms=int(rng.lognormvariate(7, 0.6))))
    services.usage_record_many(turns=turns)
    return len(turns)


def total(page, name):
    return page.locator(f'[data-usage-total="{name}"] .value')


def chart(page, name):
    return page.locator(f'[data-usage-chart="{name}"] svg')


def test_dashboard_and_agent_page_chart_usage(page, gaia_server, make_agent, make_key):
    helper = make_agent(slug="helper", provider__options={"reply": "glad to help", "ttft_ms": 20})
    other = make_agent(slug="other", upstream_model="fake-large",
                       provider__options={"reply": "fine"})
    key, secret = make_key("client", scopes=["chat"])
    earlier = history([helper, other], key)
    for i in range(3):
        assert chat(gaia_server, secret, "helper", f"hi {i}", session=f"u{i}").status_code == 200

    page.goto("/")
    usage = page.locator("[data-usage]")
    for name in CHARTS:
        expect()(chart(page, name)).to_be_visible()
    expect()(total(page, "requests")).to_have_text(str(earlier + 3))
    expect()(chart(page, "requests")).to_have_attribute("data-points", "97")  # 15-min buckets
    assert usage.get_attribute("data-bucket") == "900"
    assert page.locator('[data-usage-row="agent"]').count() == 2
    expect()(page.locator('[data-usage-row="model"]', has_text="fake-large")).to_be_visible()
    screenshot(page, "usage-dashboard")

    # The range picker: the last hour holds only the three turns just served, by minute.
    page.select_option("[data-usage-range]", "1h")
    expect()(total(page, "requests")).to_have_text("3")
    expect()(usage).to_have_attribute("data-bucket", "60")
    points = int(chart(page, "tokens").get_attribute("data-points"))
    assert points in (60, 61)
    page.select_option("[data-usage-range]", "7d")
    expect()(usage).to_have_attribute("data-bucket", "3600")
    expect()(total(page, "requests")).to_have_text(str(earlier + 3))
    # A custom window from two hours back: the turns of the last two hours only.
    page.select_option("[data-usage-range]", "custom")
    since = (timezone.localtime() - timedelta(hours=2)).strftime("%Y-%m-%dT%H:%M")
    page.fill("[data-usage-since]", since)
    page.click("[data-usage-apply]")
    expect()(usage).to_have_attribute("data-bucket", "60")
    custom = int(total(page, "requests").inner_text())
    assert 3 < custom < earlier + 3

    # Auto-refresh: back on the last hour, a turn served now shows without a reload.
    page.select_option("[data-usage-range]", "1h")
    expect()(total(page, "requests")).to_have_text("3")
    assert chat(gaia_server, secret, "other", "one more", session="late").status_code == 200
    expect()(total(page, "requests")).to_have_text("4", timeout=40_000)
    expect()(page.locator('[data-usage-row="agent"]', has_text="other")).to_be_visible()

    # The agent page: the same charts, for that agent only.
    page.goto("/agents/helper/")
    for name in CHARTS:
        expect()(chart(page, name)).to_be_visible()
    helper_total = int(total(page, "requests").inner_text())
    assert 3 <= helper_total < earlier + 4
    assert page.locator('[data-usage-row="agent"]').count() == 1
    expect()(page.locator('[data-usage-row="agent"]')).to_contain_text("helper")
    screenshot(page, "usage-agent")
    page.select_option("[data-usage-range]", "1h")
    expect()(total(page, "requests")).to_have_text("3")
