"""Spend in Chromium: the usage block charts cost and names the end users; the budgets page
makes a budget (its errors next to their fields), shows what each spent as a bar, changes
a limit and deletes one after asking; a key's page sets its tokens a minute."""

from __future__ import annotations

from datetime import UTC, datetime

import httpx
import pytest

from agents.models import ApiKey, AuditEvent, Budget, ModelPrice
from tests.pages.conftest import screenshot
from tests.pages.test_browser import expect

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]


def test_cost_is_charted_and_budgets_are_managed_on_their_page(page, gaia_server, make_agent,
                                                              make_key):
    agent = make_agent(slug="helper", provider__options={"reply": "glad to help you"},
                       max_output_tokens=20, instructions="")
    Budget.objects.create(name="helper-day", scope="agent", agent=agent, unit="tokens",
                          limit=200, period="day", soft_percent=5,
                          period_start=datetime(1970, 1, 1, tzinfo=UTC))
    ModelPrice.objects.create(provider=agent.provider, model="", input_per_mtok=3000,
                              output_per_mtok=15000)  # dear, so a few turns show cents
    key, secret = make_key("client", scopes=["chat"])
    for i, user in enumerate(("alice", "alice", "bob")):
        assert httpx.post(f"{gaia_server.v1}/chat/completions", timeout=30,
                          headers={"Authorization": f"Bearer {secret}"},
                          json={"model": "helper", "user": user, "messages": [
                              {"role": "user", "content": f"hi {i}"}]}).status_code == 200

    page.goto("/")
    expect()(page.locator('[data-usage-chart="cost"] svg')).to_be_visible()
    cost = page.locator('[data-usage-total="cost"] .value')
    expect()(cost).to_contain_text("$0.")
    assert cost.inner_text() != "$0.00"  # three priced turns
    expect()(page.locator('[data-usage-row="user"]')).to_have_count(2)
    expect()(page.locator('[data-usage-row="user"]').first).to_contain_text("alice")

    page.click("nav >> text=Budgets")
    row = page.locator('tr[data-budget="helper-day"]')
    expect()(row).to_be_visible()
    expect()(row.locator(".progress")).to_have_attribute("data-status", "cancelled")  # past 5 %
    assert 0 < int(row.locator(".progress").get_attribute("aria-valuenow")) < 100
    screenshot(page, "budgets")

    # a budget made on the page: a bad limit is said next to its field, then it is made
    page.click("#new-budget summary")
    page.fill("#budget-form input[name=name]", "client-month")
    page.select_option("#budget-form select[name=scope]", "key")
    page.select_option("#budget-form select[name=key]", key.prefix)
    page.fill("#budget-form input[name=limit]", "-5")
    page.click("#budget-submit")
    expect()(page.locator('#budget-form .field-error[data-for="limit"]')).to_be_visible()
    page.fill("#budget-form input[name=limit]", "12.50")
    page.select_option("#budget-form select[name=period]", "month")
    page.click("#budget-submit")
    made = page.locator('tr[data-budget="client-month"]')
    expect()(made).to_contain_text("of 12.500000000 USD")
    # its limit changed in place, then deleted after the question
    made.locator("input[name=limit]").fill("20")
    made.locator("button", has_text="Set limit").click()
    expect()(page.locator('tr[data-budget="client-month"]')).to_contain_text("of 20.000000000")
    page.locator('tr[data-budget="client-month"] button.danger').click()
    page.click("#confirm-yes")
    expect()(page.locator('tr[data-budget="client-month"]')).to_have_count(0)
    assert [e.action for e in AuditEvent.objects.filter(target="budget:client-month")
            .order_by("pk")] == ["budget_create", "budget_update", "budget_delete"]

    # a key's tokens a minute, on its page
    page.goto(f"/keys/{key.pk}/")
    page.fill("#key-edit input[name=tokens_per_minute]", "5000")
    page.click("#key-save")
    expect()(page.locator("#key-limits")).to_contain_text("5000 tokens")
    assert ApiKey.objects.get(pk=key.pk).tokens_per_minute == 5000


def test_a_providers_page_shows_and_sets_its_models_prices(page, gaia_server, make_agent):
    agent = make_agent(slug="helper", upstream_model="gpt-4o-mini", provider__name="oai",
                       provider__kind="openai", provider__base_url="https://api.openai.com/v1")
    make_agent(slug="odd", provider=agent.provider, upstream_model="odd-model-7b")
    page.goto("/providers/oai/")
    shipped = page.locator('tr[data-price="gpt-4o-mini"]')
    expect()(shipped).to_contain_text("genai-prices: openai/")
    expect()(page.locator('tr[data-price="odd-model-7b"]')).to_contain_text("unknown")
    page.fill("#price-form input[name=model]", "odd-model-7b")
    page.fill("#price-form input[name=input_per_mtok]", "abc")
    page.fill("#price-form input[name=output_per_mtok]", "2")
    page.click("#price-save")
    expect()(page.locator('#price-form .field-error[data-for="input_per_mtok"]')).to_be_visible()
    page.fill("#price-form input[name=input_per_mtok]", "0.5")
    page.click("#price-save")
    odd = page.locator('tr[data-price="odd-model-7b"]')
    expect()(odd).to_contain_text("admin")
    expect()(odd).to_contain_text("0.5")
    assert ModelPrice.objects.get(model="odd-model-7b").output_per_mtok == 2
