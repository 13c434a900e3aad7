"""The Django admin: agent previews, write-only credentials, keys shown once, read-only threads."""

from __future__ import annotations

import pytest
from django.urls import reverse

from agents.models import Agent, ApiKey, Provider, Thread

pytestmark = pytest.mark.django_db


@pytest.fixture
def staff(admin_client):
    return admin_client


def test_agent_change_page_previews_models_entry(staff, make_agent):
    agent = make_agent(slug="preview-me", display_name="Preview Me")
    page = staff.get(reverse("admin:agents_agent_change", args=[agent.pk]))
    assert page.status_code == 200
    html = page.content.decode()
    assert "GET /v1/models entry" in html
    assert "&quot;id&quot;: &quot;preview-me&quot;" in html


def test_agent_list_search_filter_and_disable_action(staff, make_agent):
    a = make_agent(slug="findable")
    make_agent(slug="other")
    page = staff.get(reverse("admin:agents_agent_changelist") + "?q=findable")
    assert b"findable" in page.content
    assert b"/other/" not in page.content
    staff.post(reverse("admin:agents_agent_changelist"),
               {"action": "disable_agents", "_selected_action": [a.pk]})
    a.refresh_from_db()
    assert not a.enabled


def test_provider_credentials_are_never_shown_back(staff):
    provider = Provider.objects.create(name="up", kind="openai", base_url="https://x.example/v1",
                                       api_key_secret="sk-very-secret-value")
    page = staff.get(reverse("admin:agents_provider_change", args=[provider.pk]))
    assert page.status_code == 200
    assert b"sk-very-secret-value" not in page.content
    listing = staff.get(reverse("admin:agents_provider_changelist"))
    assert b"sk-very-secret-value" not in listing.content
    assert b"stored (hidden)" in listing.content
    # Saving the form with the secret left blank keeps it.
    data = {"name": "up", "kind": "openai", "base_url": "https://x.example/v1",
            "api_key_env": "", "api_key_secret": "", "default_model": "m",
            "timeout_seconds": "30", "max_concurrency": "4", "options": "{}"}
    staff.post(reverse("admin:agents_provider_change", args=[provider.pk]), data)
    provider.refresh_from_db()
    assert provider.api_key_secret == "sk-very-secret-value"
    assert provider.default_model == "m"


def test_api_key_secret_is_shown_once_on_creation(staff):
    response = staff.post(reverse("admin:agents_apikey_add"), {
        "name": "from-admin", "scopes": ["chat"], "requests_per_minute": "0",
    }, follow=True)
    html = response.content.decode()
    key = ApiKey.objects.get(name="from-admin")
    assert "shown once" in html
    secret = html.split("<code>")[1].split("</code>")[0]
    assert secret.startswith(key.prefix)
    assert key.hashed_secret != secret
    later = staff.get(reverse("admin:agents_apikey_change", args=[key.pk])).content.decode()
    assert secret not in later


def test_a_key_is_trusted_across_keys_in_the_admin_and_the_change_is_audited(staff):
    from agents.models import AuditEvent

    staff.post(reverse("admin:agents_apikey_add"), {
        "name": "crm", "scopes": ["chat"], "requests_per_minute": "0", "hosted_tools": "drop",
        "users_across_keys": "on"})
    key = ApiKey.objects.get(name="crm")
    assert key.users_across_keys
    made = AuditEvent.objects.get(action="key_create")
    assert made.detail["users_across_keys"] is True
    staff.post(reverse("admin:agents_apikey_change", args=[key.pk]), {
        "name": "crm", "scopes": ["chat"], "requests_per_minute": "0", "hosted_tools": "drop"})
    key.refresh_from_db()
    assert not key.users_across_keys
    changed = AuditEvent.objects.get(action="key_update")
    assert (changed.channel, changed.target, changed.detail) == (
        "admin", f"key:{key.prefix}", {"fields": ["users_across_keys"]})


def test_revoke_action(staff):
    from agents.services import api_key_create

    key, _ = api_key_create(name="doomed")
    staff.post(reverse("admin:agents_apikey_changelist"),
               {"action": "revoke_keys", "_selected_action": [key.pk]})
    key.refresh_from_db()
    assert key.revoked_at is not None


def test_threads_are_read_only_with_messages_inline(staff, make_agent):
    agent = make_agent()
    thread = Thread.objects.create(agent=agent, session_key="s", history_digest="d",
                                   title="A talk")
    thread.messages.create(seq=0, role="user", content="hello inline")
    page = staff.get(reverse("admin:agents_thread_change", args=[thread.pk]))
    assert page.status_code == 200
    assert b"hello inline" in page.content
    assert staff.get(reverse("admin:agents_thread_add")).status_code == 403
    staff.post(reverse("admin:agents_thread_change", args=[thread.pk]), {"title": "changed"})
    thread.refresh_from_db()
    assert thread.title == "A talk"
    assert Agent.objects.count() == 1


def test_provider_header_values_are_write_only(staff):
    provider = Provider.objects.create(
        name="hdr", kind="openai", base_url="https://x.example/v1",
        options={"extra_headers": {"X-Token": "tok-very-secret"}, "images": False})
    page = staff.get(reverse("admin:agents_provider_change", args=[provider.pk]))
    assert page.status_code == 200
    assert b"tok-very-secret" not in page.content
    assert b"[hidden]" in page.content
    data = {"name": "hdr", "kind": "openai", "base_url": "https://x.example/v1",
            "api_key_env": "", "api_key_secret": "", "default_model": "m",
            "timeout_seconds": "30", "max_concurrency": "4",
            "options": '{"extra_headers": {"X-Token": "[hidden]", "X-New": "v"}, '
                       '"images": false}'}
    staff.post(reverse("admin:agents_provider_change", args=[provider.pk]), data)
    provider.refresh_from_db()
    assert provider.options["extra_headers"] == {"X-Token": "tok-very-secret", "X-New": "v"}


def test_thread_page_shows_messages_a_page_at_a_time(staff, make_agent):
    from agents.models import Message

    agent = make_agent()
    thread = Thread.objects.create(agent=agent, session_key="s", history_digest="d",
                                   title="Long", message_count=250)
    Message.objects.bulk_create(
        Message(thread=thread, seq=i, role="user", content=f"message-{i:04d}")
        for i in range(250))
    url = reverse("admin:agents_thread_change", args=[thread.pk])
    first = staff.get(url).content.decode()
    assert "message-0000" in first
    assert "message-0099" in first
    assert "message-0100" not in first
    assert "Messages 1–100 of 250" in first
    last = staff.get(url + "?messages_page=3").content.decode()
    assert "message-0249" in last
    assert "message-0199" not in last
    assert staff.get(url + "?messages_page=nonsense").status_code == 200


def test_agent_listed_and_context_overflow_are_edited_in_the_admin(staff, make_agent):
    agent = make_agent(slug="switches")
    url = reverse("admin:agents_agent_change", args=[agent.pk])
    html = staff.get(url).content.decode()
    assert 'name="listed"' in html
    assert 'name="context_overflow"' in html
    page = staff.get(reverse("admin:agents_agent_changelist") + "?listed__exact=0")
    assert b"switches" not in page.content
    Agent.objects.filter(pk=agent.pk).update(listed=False)
    page = staff.get(reverse("admin:agents_agent_changelist") + "?listed__exact=0")
    assert b"switches" in page.content


def test_agent_admin_saves_listed_and_context_overflow(staff, make_agent):
    agent = make_agent(slug="saved", provider__options={})
    url = reverse("admin:agents_agent_change", args=[agent.pk])
    form = staff.get(url).context["adminform"].form
    # what the browser sends back: each field's value as its widget renders it (JSON as text)
    data = {k: form.fields[k].prepare_value(v) for k, v in form.initial.items()
            if v is not None and k != "listed" and k in form.fields}
    data.update({"provider": agent.provider_id, "context_overflow": "trim_oldest",
                 "fallbacks-TOTAL_FORMS": "0", "fallbacks-INITIAL_FORMS": "0"})
    r = staff.post(url, data)
    assert r.status_code == 302, r.context["adminform"].form.errors if r.context else r
    agent.refresh_from_db()
    assert agent.listed is False  # an unticked box
    assert agent.context_overflow == "trim_oldest"


def test_thread_list_finds_by_id_session_key_or_text_through_the_indexes(staff, make_agent):
    """The admin's thread search (issue 27): an exact id or session key, or text in a title
    or a message (the text indexes, as the console's search); a substring of a session key
    is not a match any more (that read every thread)."""
    agent = make_agent()
    first = Thread.objects.create(agent=agent, session_key="team:alpha", history_digest="a",
                                  title="Budget talk")
    second = Thread.objects.create(agent=agent, session_key="team:beta", history_digest="b",
                                   title="Other")
    second.messages.create(seq=0, role="user", content="where is the quasar report?")
    Thread.objects.create(agent=agent, session_key="team:gamma", history_digest="c",
                          title="Unrelated")
    url = reverse("admin:agents_thread_changelist")

    def found(term):
        page = staff.get(url, {"q": term})
        assert page.status_code == 200
        return {t.pk for t in page.context["cl"].result_list}

    assert found("team:alpha") == {first.pk}
    assert found(str(second.pk)) == {second.pk}
    assert found("QUASAR") == {second.pk}
    assert found("budget") == {first.pk}
    assert found("team:") == set()
    assert len(found("")) == 3
