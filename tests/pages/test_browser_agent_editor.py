"""The agent editor in Chromium: an agent made on the agents page (a slug that exists is said
next to its field), its instructions and tools changed on its page (a bad approval rule said
next to its field), then used over ``/v1/chat/completions`` and deleted after asking; every
change in the audit trail. The one rule is :func:`agents.services.agent_save`."""

from __future__ import annotations

import httpx
import pytest

from agents.models import Agent, AuditEvent
from tests.pages.conftest import SCREENSHOTS
from tests.pages.test_browser import expect

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]


def test_an_agent_made_edited_used_and_deleted_in_the_console(page, gaia_server, make_agent,
                                                             make_key):
    make_agent(slug="existing", provider__name="fakeprov",
               provider__options={"reply": "made in the console"})
    _, secret = make_key("client", scopes=["chat"])

    page.goto("/agents/")
    page.click("#new-agent summary")
    form = page.locator("#new-agent #agent-form")
    form.locator("input[name=slug]").fill("existing")
    form.locator("select[name=provider]").select_option("fakeprov")
    form.locator("textarea[name=instructions]").fill("Answer briefly.")
    form.locator('input[name=tools][value="calculator"]').check()
    form.locator("#agent-save").click()
    slug_error = form.locator('.field-error[data-for="slug"]')
    expect()(slug_error).to_be_visible()
    expect()(slug_error).to_contain_text("exists")
    form.locator("input[name=slug]").fill("console-bot")
    form.locator("input[name=max_output_tokens]").fill("64")
    form.locator("#agent-save").click()
    page.wait_for_url("**/agents/console-bot/")
    made = Agent.objects.get(slug="console-bot")
    assert (made.provider.name, made.instructions, made.tools, made.max_output_tokens) == (
        "fakeprov", "Answer briefly.", ["calculator"], 64)

    # changed on its page: a bad approval rule is said next to its field, then saved
    page.click("#edit")
    editor = page.locator("#agent-edit #agent-form")
    expect()(editor).to_be_visible()
    expect()(editor.locator("input[name=slug]")).to_have_count(0)  # made once
    editor.locator("textarea[name=instructions]").fill("Answer in one word.")
    editor.locator('input[name=tools][value="agent:existing"]').check()
    editor.locator('input[name=tools][value="calculator"]').uncheck()
    editor.locator("textarea[name=require_approval]").fill('"sometimes"')
    editor.locator("#agent-save").click()
    rule_error = editor.locator('.field-error[data-for="require_approval"]')
    expect()(rule_error).to_be_visible()
    assert Agent.objects.get(slug="console-bot").instructions == "Answer briefly."
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)  # the editor itself, its error shown
    page.locator("#agent-edit").screenshot(path=str(SCREENSHOTS / "agent-editor.png"))
    editor.locator("textarea[name=require_approval]").fill('["agent__existing"]')
    editor.locator("#agent-save").click()
    page.wait_for_load_state("load")
    expect()(page.locator("pre.text")).to_contain_text("Answer in one word.")
    edited = Agent.objects.get(slug="console-bot")
    assert (edited.instructions, edited.tools, edited.require_approval) == (
        "Answer in one word.", ["agent:existing"], ["agent__existing"])
    expect()(page.locator("main")).to_contain_text("agent_update")  # its trail on its page

    # used over /v1 as any agent
    r = httpx.post(f"{gaia_server.v1}/chat/completions", timeout=30,
                   headers={"Authorization": f"Bearer {secret}"},
                   json={"model": "console-bot",
                         "messages": [{"role": "user", "content": "hi"}]})
    assert r.status_code == 200, r.text
    assert r.json()["choices"][0]["message"]["content"] == "made in the console"

    # deleted after the question
    page.click("#delete")
    expect()(page.locator("#confirm-yes")).to_contain_text("Delete the agent")
    page.click("#confirm-yes")
    page.wait_for_url("**/agents/")
    expect()(page.locator("main")).not_to_contain_text("console-bot")
    assert not Agent.objects.filter(slug="console-bot").exists()
    assert [e.action for e in AuditEvent.objects.filter(target="agent:console-bot")
            .order_by("pk")] == ["agent_create", "agent_update", "agent_delete"]
