"""The console's keys, providers and audit trail in a real browser (Debian's Chromium through
Playwright) against a live Gaia process: a key made (its secret shown once, copied), used over
/v1, revoked after a confirmation; the API's field errors next to their field; a provider added
and its connection tested against a real upstream on loopback, its secret never on a page; the
audit trail of all of it; an action while offline says so."""

from __future__ import annotations

import re
from typing import Any

import httpx
import pytest

from tests.pages.conftest import screenshot

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]


def expect() -> Any:
    from playwright.sync_api import expect as pw_expect

    return pw_expect


def test_a_key_made_copied_used_and_revoked_with_a_confirmation(page: Any, gaia_server: Any,
                                                                 make_agent: Any) -> None:
    make_agent(slug="support")
    make_agent(slug="other")
    page.context.grant_permissions(["clipboard-read", "clipboard-write"])
    page.click("header.top nav >> text=Keys")
    expect()(page.locator("#key-rows tr.empty")).to_have_count(1)
    form = page.locator("#key-form")
    form.locator("input[name=name]").fill("webui")
    form.locator('input[name=scopes][value="operator"]').check()
    form.locator("select[name=agents]").select_option(["support"])
    form.locator("input[name=requests_per_minute]").fill("120")
    page.click("#key-submit")
    secret_box = page.locator("#key-secret-value")
    expect()(secret_box).to_have_text(re.compile(r"^gaia_[0-9a-f]{8}_\S+$"))
    secret = secret_box.text_content()
    page.click("#key-copy")
    expect()(page.locator("#key-copied")).to_be_visible()
    assert page.evaluate("navigator.clipboard.readText()") == secret
    made = page.locator("#key-rows tr").first  # listed at once, without its secret
    expect()(made).to_contain_text("webui")
    expect()(made.locator("time").last).to_have_text("just now")
    screenshot(page, "console-key-made")

    headers = {"Authorization": f"Bearer {secret}"}
    body = {"model": "support", "messages": [{"role": "user", "content": "hi"}]}
    assert httpx.post(f"{gaia_server.url}/v1/chat/completions", json=body, headers=headers,
                      timeout=10).status_code == 200
    assert httpx.post(f"{gaia_server.url}/v1/chat/completions", headers=headers, timeout=10,
                      json={**body, "model": "other"}).status_code == 403

    page.reload()  # shown once: never again
    assert secret not in page.content()
    row = page.locator("#key-rows tr").first
    expect()(row).to_contain_text("webui")
    expect()(row).to_contain_text("chat, operator")
    expect()(row).to_contain_text("120/min")
    expect()(row.locator("time").last).to_have_text("just now")
    row.locator("a").click()

    # its page charts its own usage: the turn it was used for above
    expect()(page.locator(".usage")).to_have_count(1)
    expect()(page.locator('.usage [data-usage-total="requests"] .value')).to_have_text("1")

    # revoking asks first: "Cancel" leaves the key working
    page.click("#revoke")
    dialog = page.locator("#confirm-dialog")
    expect()(dialog).to_be_visible()
    expect()(dialog).to_contain_text("Revoke webui?")
    screenshot(page, "console-confirm-revoke")
    page.click("#confirm-no")
    expect()(dialog).to_be_hidden()
    expect()(page.locator("#key-state")).to_have_text("active")
    assert httpx.post(f"{gaia_server.url}/v1/chat/completions", json=body, headers=headers,
                      timeout=10).status_code == 200
    page.click("#revoke")
    page.click("#confirm-yes")
    expect()(page.locator("#key-state")).to_have_text("revoked")
    assert httpx.post(f"{gaia_server.url}/v1/chat/completions", json=body, headers=headers,
                      timeout=10).status_code == 401

    page.click("header.top nav >> text=Audit")
    rows = page.locator("table.audit tbody tr")
    expect()(rows).to_have_count(2)
    expect()(rows.nth(0)).to_contain_text("key_revoke")
    expect()(rows.nth(1)).to_contain_text("key_create")
    expect()(rows.nth(0)).to_contain_text("user:operator")
    assert secret not in page.content()
    from agents.models import AuditEvent  # made on the console's pages: said so

    assert sorted(AuditEvent.objects.values_list("action", "channel")) == [
        ("key_create", "page"), ("key_revoke", "page")]


def test_a_keys_trust_across_keys_is_shown_set_and_cleared(page: Any) -> None:
    """``users_across_keys`` on the console: ticked when the key is made, shown in the list
    and on its page, cleared with the page's form (the unticked box sends false)."""
    from agents.models import ApiKey

    page.goto("/keys/")
    form = page.locator("#key-form")
    form.locator("input[name=name]").fill("crm")
    form.locator("input[name=users_across_keys]").check()
    page.click("#key-submit")
    expect()(page.locator("#key-secret-value")).to_have_text(re.compile(r"^gaia_"))
    assert ApiKey.objects.get(name="crm").users_across_keys
    page.reload()
    row = page.locator("#key-rows tr").first
    expect()(row).to_contain_text("users across keys")
    row.locator("a").click()
    expect()(page.locator("#key-users")).to_contain_text("trusted to speak for users")
    box = page.locator("#key-edit input[name=users_across_keys]")
    expect()(box).to_be_checked()
    box.uncheck()
    page.click("#key-save")
    expect()(page.locator("#key-users")).to_contain_text("its own")
    assert not ApiKey.objects.get(name="crm").users_across_keys
    expect()(page.locator("#key-edit input[name=users_across_keys]")).not_to_be_checked()


def test_field_errors_show_next_to_their_field(page: Any, make_agent: Any) -> None:
    page.goto("/keys/")
    form = page.locator("#key-form")
    form.locator("input[name=name]").fill("nothing-allowed")
    form.locator('input[name=scopes][value="chat"]').uncheck()  # the API wants one at least
    page.click("#key-submit")
    slot = form.locator('.field-error[data-for="scopes"]')
    expect()(slot).to_be_visible()
    expect()(slot).to_contain_text("scopes")
    expect()(form.locator(".form-error")).to_be_hidden()
    expect()(page.locator("#key-secret")).to_be_hidden()
    screenshot(page, "console-field-error")


def test_a_provider_added_tested_and_never_shown(page: Any) -> None:
    from tests.fakes.openai_upstream import FakeOpenAIUpstream

    with FakeOpenAIUpstream(tokens=2, api_key="sk-upstream-7") as up:
        page.goto("/providers/")
        page.click("#new-provider summary")
        form = page.locator("#provider-form")
        form.locator("input[name=name]").fill("corp")
        form.locator("select[name=kind]").select_option("openai")
        form.locator("input[name=base_url]").fill(up.base_url)
        form.locator("input[name=default_model]").fill("gpt-x")
        form.locator("input[name=api_key]").fill("sk-upstream-7")
        form.locator("textarea[name=options]").fill('{"extra_headers": {"api-key": "hdr-99"}}')
        page.click("#provider-save")
        page.wait_for_url(re.compile(r"/providers/corp/$"))
        expect()(page.locator("#provider-credentials")).to_have_text("stored (hidden)")
        html = page.content()
        assert "sk-upstream-7" not in html
        assert "hdr-99" not in html

        page.click("#test-connection")
        expect()(page.locator("#probe-result")).to_contain_text("Answered in")
        assert up.requests[-1].headers["api-key"] == "hdr-99"
        screenshot(page, "console-provider")

        # the connection test while offline: the page says so, the server hears nothing
        count = len(up.requests)
        page.context.set_offline(True)
        page.click("#test-connection")
        expect()(page.locator("#notice")).to_contain_text("offline")
        page.context.set_offline(False)
        assert len(up.requests) == count

        # bad JSON in the options: the message sits by the field, nothing is sent
        edit = page.locator("#provider-form")
        edit.locator("textarea[name=options]").fill("{nope")
        page.click("#provider-save")
        expect()(edit.locator('.field-error[data-for="options"]')).to_contain_text("JSON")

    page.goto("/audit/?target=provider:corp")
    expect()(page.locator("table.audit tbody tr")).to_have_count(2)
    expect()(page.locator("table.audit tbody tr").first).to_contain_text("provider_test")
    screenshot(page, "console-audit")
