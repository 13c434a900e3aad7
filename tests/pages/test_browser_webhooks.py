"""Webhooks in Chromium, against a live receiver that verifies each signature with
``standardwebhooks`` (tests/agents/test_webhooks_live.py): an endpoint made on the page (a
refused URL's rule said next to the field), its secret shown once and gone after a reload; an
event delivered and seen in its log with its status and a human time; a redelivery sent from
the page and its attempt seen; events changed, disabled, deleted after asking; on a phone
without sideways scrolling, and in the dark."""

from __future__ import annotations

import re
from typing import Any

import pytest

from agents import services
from agents.models import AuditEvent, WebhookDelivery, WebhookEndpoint
from tests.agents.test_webhooks_live import (  # noqa: F401 - receiver, webhook_sender: fixtures
    RETRY,
    TIMEOUT,
    Receiver,
    receiver,
    wait_for,
    webhook_sender,
)
from tests.pages.conftest import RAW_TIME, no_raw_times, screenshot
from tests.pages.test_browser import expect

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]

PHONE = {"width": 390, "height": 844}


@pytest.fixture
def hooks_server(gaia_server: Any, gaia_server_factory: Any,
                 receiver: Receiver, webhook_sender: str) -> Any:  # noqa: F811 - imported
    """A live server that allows the receiver's URLs (the API checks them, and without Redis
    its embedded worker sends the redeliveries it is asked for), sharing the logged-in page's
    secret key so the page's session is valid there."""
    secret = (gaia_server.log_path.parent / "secret_key").read_text().strip()
    return gaia_server_factory(SECRET_KEY=secret,
                               GAIA_WEBHOOK_ALLOWED_URLS=f"{receiver.url}/*",
                               GAIA_WEBHOOK_RETRY_SECONDS=RETRY,
                               GAIA_WEBHOOK_TIMEOUT_SECONDS=TIMEOUT)


def _fits_a_phone(page: Any) -> None:
    page.set_viewport_size(PHONE)
    page.wait_for_load_state("networkidle")
    width = page.evaluate("document.documentElement.scrollWidth")
    assert width <= PHONE["width"], f"{page.url} is {width} px wide on a phone"


def test_webhooks_are_managed_and_their_deliveries_followed_on_their_page(
        page: Any, hooks_server: Any, receiver: Receiver) -> None:  # noqa: F811
    page.context.grant_permissions(["clipboard-read", "clipboard-write"],
                                   origin=hooks_server.url)
    page.goto(f"{hooks_server.url}/")
    page.click("nav >> text=Webhooks")
    expect()(page.locator('nav a[aria-current="page"]')).to_have_text("Webhooks")
    expect()(page.locator("#webhook-rows")).to_contain_text("No endpoint yet")

    # a URL the allow-list does not hold: the API's rule, next to the field
    page.fill("#webhook-form input[name=url]", "http://10.1.2.3/hooks")
    page.check('#webhook-form input[value="run.finished"]')
    page.click("#webhook-submit")
    refused = page.locator('#webhook-form .field-error[data-for="url"]')
    expect()(refused).to_be_visible()
    expect()(refused).to_contain_text("GAIA_WEBHOOK_ALLOWED_URLS does not list it")
    expect()(page.locator("#webhook-form input[name=url]")).to_have_attribute(
        "aria-invalid", "true")
    # no event: said next to the events
    page.fill("#webhook-form input[name=url]", f"{receiver.url}/ok/console")
    page.uncheck('#webhook-form input[value="run.finished"]')
    page.click("#webhook-submit")
    expect()(page.locator('#webhook-form .field-error[data-for="events"]')).to_contain_text(
        "one event type or more")
    expect()(refused).to_be_hidden()
    assert not WebhookEndpoint.objects.exists()

    # made: the secret shown once, copied, the row drawn by the server
    page.check('#webhook-form input[value="run.finished"]')
    page.check('#webhook-form input[value="approval.decided"]')
    page.fill("#webhook-form input[name=description]", "from the console")
    page.click("#webhook-submit")
    box = page.locator("#webhook-secret")
    expect()(box).to_be_visible()
    expect()(box).to_contain_text("You will not see it again")
    secret = page.locator("#webhook-secret-value").inner_text()
    assert secret.startswith("whsec_")
    endpoint = WebhookEndpoint.objects.get()
    assert endpoint.secret == secret
    assert endpoint.events == ["approval.decided", "run.finished"]  # the list's order
    receiver.secrets["/ok/console"] = secret
    row = page.locator(f'tr[data-webhook="{endpoint.pk}"]')
    expect()(row).to_contain_text("approval.decided, run.finished")
    expect()(row).to_contain_text("none yet")
    expect()(page.locator("#webhook-table .pager")).to_contain_text("(1 endpoints)")
    expect()(page.locator("#webhook-form input[name=url]")).to_have_value("")  # reset
    page.click("#webhook-copy")
    expect()(page.locator("#webhook-copied")).to_be_visible()
    assert page.evaluate("navigator.clipboard.readText()") == secret
    screenshot(page, "webhooks-secret")
    page.reload()
    expect()(page.locator("#webhook-secret")).to_be_hidden()
    assert secret not in page.content()
    expect()(page.locator("#webhook-secret-value")).to_have_text("")

    # an event: delivered, signed, and in the log with its status and a human time
    services.webhook_event_send(type="run.finished", data={"run_id": 7, "status": "succeeded"})
    delivery = wait_for(lambda: WebhookDelivery.objects.filter(
        endpoint=endpoint, state="succeeded").first(), "the event was delivered")
    page.reload()
    expect()(row.locator(".badge.delivery-succeeded")).to_have_text("succeeded")
    expect()(row).to_contain_text("200")
    row.locator("a", has_text="/ok/console").click()
    page.wait_for_url(re.compile(rf"/webhooks/{endpoint.pk}/$"))
    logged = page.locator(f'tr[data-delivery="{delivery.pk}"]')
    expect()(logged).to_have_attribute("data-state", "succeeded")
    for shown in ("run.finished", delivery.event_id, "200", "ms", "answer 1"):
        expect()(logged).to_contain_text(shown)
    expect()(logged.locator("[data-attempts]")).to_have_text("1")
    when = logged.locator("td time").first
    assert RAW_TIME.match(when.get_attribute("datetime"))
    no_raw_times(page)  # "just now", the full time on hover, as elsewhere in the console
    screenshot(page, "webhook-deliveries")

    # redelivered from the page: the same event id once more, its attempt in the log
    logged.locator("button", has_text="Redeliver").click()
    expect()(logged.locator("[data-attempts]")).to_have_text("2", timeout=30_000)
    expect()(logged).to_have_attribute("data-state", "succeeded")
    logged.locator("details.attempts summary").click()
    expect()(logged.locator('li[data-attempt="2"]')).to_contain_text("redelivery")
    expect()(logged.locator('li[data-attempt="2"]')).to_contain_text("answer 2")
    no_raw_times(page)
    got = receiver.of("/ok/console")
    assert len(got) == 2
    assert all(g["verified"] for g in got)
    assert {g["headers"]["webhook-id"] for g in got} == {delivery.event_id}

    # on a phone, nothing wider than the screen; in the dark, dark
    _fits_a_phone(page)
    screenshot(page, "phone-webhook")
    page.emulate_media(color_scheme="dark")
    background = page.evaluate("getComputedStyle(document.body).backgroundColor")
    r, g, b = (int(x) for x in re.findall(r"\d+", background)[:3])
    assert r + g + b < 3 * 80, background
    screenshot(page, "dark-webhook")
    page.emulate_media(color_scheme="light")
    page.set_viewport_size({"width": 1280, "height": 900})

    # its events changed (none: the API says so next to them), then disabled
    for value in endpoint.events:
        page.uncheck(f'#webhook-edit-form input[value="{value}"]')
    page.click("#webhook-save")
    expect()(page.locator('#webhook-edit-form .field-error[data-for="events"]')).to_be_visible()
    page.check('#webhook-edit-form input[value="budget.exceeded"]')
    page.click("#webhook-save")
    expect()(page.locator('#webhook-edit-form input[value="budget.exceeded"]')).to_be_checked()
    expect()(page.locator('#webhook-edit-form input[value="run.finished"]')).not_to_be_checked()
    page.locator("#webhook-toggle button").click()
    expect()(page.locator("#webhook-enabled")).to_have_text("disabled")
    endpoint.refresh_from_db()
    assert (endpoint.events, endpoint.enabled) == (["budget.exceeded"], False)
    # a disabled endpoint's delivery is not redelivered: the API's answer, on the page
    logged.locator("button", has_text="Redeliver").click()
    expect()(logged.locator(".form-error")).to_contain_text("enable it first")

    # the list, on a phone; then deleted after the question
    page.click("text=All endpoints")
    _fits_a_phone(page)
    screenshot(page, "phone-webhooks")
    page.set_viewport_size({"width": 1280, "height": 900})
    page.locator(f'tr[data-webhook="{endpoint.pk}"] button.danger').click()
    expect()(page.locator("#confirm-text")).to_contain_text("Delete the endpoint")
    page.click("#confirm-no")
    assert WebhookEndpoint.objects.filter(pk=endpoint.pk).exists()
    page.locator(f'tr[data-webhook="{endpoint.pk}"] button.danger').click()
    page.click("#confirm-yes")
    expect()(page.locator(f'tr[data-webhook="{endpoint.pk}"]')).to_have_count(0)
    assert not WebhookEndpoint.objects.exists()
    trail = AuditEvent.objects.filter(target=f"webhook:{endpoint.pk}").order_by("pk")
    assert [e.action for e in trail] == ["webhook_create", "webhook_redeliver",
                                         "webhook_update", "webhook_update", "webhook_delete"]
    # the API's, saying it came from the console
    assert {(e.actor, e.channel) for e in trail} == {("user:operator", "page")}
