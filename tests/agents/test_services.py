"""Keys, declarative config and thread reconciliation, at the service layer."""

from __future__ import annotations

import io

import pytest
import yaml

from agents.kernel import llm
from agents.kernel.exceptions import AuthenticationFailed, InvalidRequest, NotFound
from agents.models import Agent, ApiKey, Message, Provider, Thread
from agents.services import (
    TurnResult,
    agents_export,
    agents_import,
    api_key_authenticate,
    api_key_create,
    api_key_revoke,
    session_key_fallback,
    thread_turn_begin,
    thread_turn_finish,
)

pytestmark = pytest.mark.django_db


def test_api_key_is_stored_hashed_and_shown_once(make_agent):
    key, secret = api_key_create(name="ci")
    stored = ApiKey.objects.get(pk=key.pk)
    assert secret.startswith(stored.prefix + "_")
    assert secret not in str(stored.__dict__)
    assert len(stored.hashed_secret) == 64
    assert api_key_authenticate(raw=secret).pk == key.pk


def test_api_key_rejects_wrong_secret_same_prefix():
    key, secret = api_key_create(name="ci")
    with pytest.raises(AuthenticationFailed):
        api_key_authenticate(raw=secret[:-1] + ("A" if secret[-1] != "A" else "B"))
    api_key_revoke(key=key)
    with pytest.raises(AuthenticationFailed, match="revoked"):
        api_key_authenticate(raw=secret)


CONFIG = """
providers:
  - {name: echo, kind: fake, options: {reply: "Hello!", delay_ms: 0}}
  - {name: up, kind: openai, base_url: "https://llm.example/v1", api_key: "sk-secret-123"}
agents:
  - {slug: helper, display_name: Helper, description: "Helps.", provider: echo,
     instructions: "Be kind.", max_output_tokens: 512}
"""


def test_agents_import_is_idempotent_and_export_hides_secrets():
    data = yaml.safe_load(CONFIG)
    first = agents_import(data=data)
    assert sorted(first.created) == ["agent:helper", "provider:echo", "provider:up"]
    second = agents_import(data=data)
    assert second.created == []
    assert second.updated == []
    assert len(second.unchanged) == 3
    data["agents"][0]["max_output_tokens"] = 256
    third = agents_import(data=data)
    assert third.updated == ["agent:helper"]
    assert Agent.objects.get(slug="helper").max_output_tokens == 256
    assert Provider.objects.get(name="up").api_key_secret == "sk-secret-123"
    exported = agents_export()
    assert "sk-secret-123" not in yaml.safe_dump(exported)
    assert {a["slug"] for a in exported["agents"]} == {"helper"}
    # Export round-trips through import unchanged.
    again = agents_import(data=exported)
    assert again.created == []
    assert again.updated == []


@pytest.mark.parametrize(("doc", "message"), [
    ({"agents": [{"slug": "x", "provider": "nope"}]}, "unknown provider"),
    ({"agents": [{"slug": "x"}]}, "needs a provider"),
    ({"providers": [{"name": "p", "kind": "fake", "colour": "red"}]}, "unknown fields"),
    ({"providers": [{"name": "p", "kind": "warp-drive"}]}, "kind"),
    ([1, 2], "mapping"),
])
def test_agents_import_rejects_bad_documents_and_writes_nothing(doc, message):
    with pytest.raises(InvalidRequest, match=message):
        agents_import(data=doc)
    assert not Provider.objects.exists()


def msgs(*pairs):
    return [llm.Message(role, (llm.TextPart(text),)) for role, text in pairs]


def begin(agent, key, incoming, session="s", thread_id=None, exclusive=True):
    return thread_turn_begin(agent=agent, api_key=key, session_key=session, thread_id=thread_id,
                             user=None, incoming=incoming, workspace_root=None, dialect="chat",
                             lease_seconds=60, exclusive=exclusive)


def finish(start, text):
    thread_turn_finish(start=start, result=TurnResult(text=text), dialect="chat")


def test_thread_lease_blocks_a_second_turn_until_released(make_agent):
    agent = make_agent()
    key, _ = api_key_create(name="k")
    first = begin(agent, key, msgs(("user", "a")))
    assert first is not None
    assert begin(agent, key, msgs(("user", "a"), ("assistant", "a"), ("user", "b"))) is None
    finish(first, "a")
    second = begin(agent, key, msgs(("user", "a"), ("assistant", "a"), ("user", "b")))
    assert second is not None
    assert second.thread_id == first.thread_id
    assert [m.text for m in second.history] == ["a", "a", "b"]


def test_derived_session_busy_gets_its_own_thread(make_agent):
    agent = make_agent()
    first = begin(agent, None, msgs(("user", "hi")), exclusive=False)
    other = begin(agent, None, msgs(("user", "hi")), exclusive=False)
    assert other is not None
    assert other.thread_id != first.thread_id


def test_explicit_thread_of_another_key_is_not_found(make_agent):
    agent = make_agent()
    k1, _ = api_key_create(name="1")
    k2, _ = api_key_create(name="2")
    start = begin(agent, k1, msgs(("user", "a")))
    finish(start, "a")
    with pytest.raises(NotFound):
        begin(agent, k2, msgs(("user", "b")), thread_id=str(start.thread_id))


def test_failed_empty_reply_is_recorded_but_not_replayed(make_agent):
    agent = make_agent()
    start = begin(agent, None, msgs(("user", "a")))
    thread_turn_finish(start=start, dialect="chat",
                       result=TurnResult(finish_reason="error", error="boom"))
    thread = Thread.objects.get(pk=start.thread_id)
    assert thread.status == Thread.Status.ERROR
    assert thread.messages.count() == 2
    again = begin(agent, None, msgs(("user", "b")), thread_id=str(start.thread_id))
    assert [m.role for m in again.history] == ["user", "user"]


def test_a_stateful_thread_gives_back_images_tool_calls_and_results_as_they_were_said(
        make_agent):
    """The stored conversation is read as plain columns (issue 27): what comes back is what
    each row's ``to_llm`` gives, inner work left out."""
    agent = make_agent()
    said = [
        llm.Message("user", (llm.TextPart("what is this?"),
                             llm.ImagePart(url="https://example.com/a.png"))),
        llm.Message("assistant", (), tool_calls=(llm.ToolCall("c1", "look", '{"q": 1}'),)),
        llm.Message("tool", (llm.TextPart("a cat"),), tool_call_id="c1"),
    ]
    start = begin(agent, None, said)
    finish(start, "A cat.")
    Message.objects.create(thread_id=start.thread_id, seq=99, role="assistant",
                           content="inner work", internal=True)
    again = begin(agent, None, msgs(("user", "sure?")), thread_id=str(start.thread_id))
    rows = Message.objects.filter(thread_id=start.thread_id, internal=False).order_by("seq")
    assert again.history == [r.to_llm() for r in rows]  # the new message stored too
    assert again.history[:3] == said
    assert again.history[3].text == "A cat."


def test_a_kept_conversation_reads_what_others_stored_since_and_rereads_when_rows_go(
        make_agent):
    """Each process keeps the conversations it read (agents.selectors.history) and reads only
    the rows stored since: turns served by another process, failed replies, rows deleted."""
    from agents.selectors.history import thread_history

    agent = make_agent()
    start = begin(agent, None, msgs(("user", "one")))
    finish(start, "1")
    thread_id = str(start.thread_id)
    second = begin(agent, None, msgs(("user", "two")), thread_id=thread_id)
    finish(second, "2")
    assert [m.text for m in thread_history(start.thread_id)] == ["one", "1", "two", "2"]
    # another process's turns: a reply, and a failed one that said nothing (not replayed)
    Message.objects.create(thread_id=start.thread_id, seq=4, role="user", content="three")
    Message.objects.create(thread_id=start.thread_id, seq=5, role="assistant", content="",
                           finish_reason="error")
    Thread.objects.filter(pk=start.thread_id).update(message_count=6)
    third = begin(agent, None, msgs(("user", "four")), thread_id=thread_id)
    assert [m.text for m in third.history] == ["one", "1", "two", "2", "three", "four"]
    thread_turn_finish(start=third, result=TurnResult(text="4"), dialect="chat")
    Message.objects.filter(thread_id=start.thread_id, seq__in=[0, 1]).delete()
    fourth = begin(agent, None, msgs(("user", "five")), thread_id=thread_id)
    assert [m.text for m in fourth.history] == ["two", "2", "three", "four", "4", "five"]


def test_session_fallback_is_deterministic_and_distinguishes_users():
    m = msgs(("user", "hello"))
    assert session_key_fallback(model="a", user=None, messages=m) == session_key_fallback(
        model="a", user=None, messages=m)
    assert session_key_fallback(model="a", user="u1", messages=m) != session_key_fallback(
        model="a", user="u2", messages=m)
    assert session_key_fallback(model="a", user=None, messages=m) != session_key_fallback(
        model="b", user=None, messages=m)


def test_setup_defaults_never_undo_an_admins_changes():
    from django.core.management import call_command

    call_command("gaia_setup", "--no-key")
    agent = Agent.objects.get(slug="gaia")
    upstream = Provider.objects.create(name="strong", kind="openai",
                                       base_url="https://llm.example/v1")
    agent.provider = upstream
    agent.instructions = "Custom."
    agent.save()
    call_command("gaia_setup", "--no-key")
    agent.refresh_from_db()
    assert agent.provider == upstream
    assert agent.instructions == "Custom."
    assert Agent.objects.filter(slug__startswith="mesh-").count() == 4


def _agent_states(monkeypatch, django_capture_on_commit_callbacks, run):
    from agents.outlet import realtime

    sent = []
    monkeypatch.setattr(realtime, "send_event", sent.append)
    with django_capture_on_commit_callbacks(execute=True):
        run()
    return [e for e in sent if e["event"] == "agent_state"]


def test_a_turns_end_says_whether_its_agent_is_still_at_work(
        make_agent, monkeypatch, django_capture_on_commit_callbacks):
    agent = make_agent()
    first = begin(agent, None, msgs(("user", "one")), session="a")
    second = begin(agent, None, msgs(("user", "two")), session="b")
    # Asked of the database: the other thread still holds its lease.
    [state] = _agent_states(monkeypatch, django_capture_on_commit_callbacks,
                            lambda: finish(first, "1"))
    assert (state["state"], state["current_thread"]) == ("processing", str(second.thread_id))
    [state] = _agent_states(monkeypatch, django_capture_on_commit_callbacks,
                            lambda: finish(second, "2"))
    assert (state["state"], state["current_thread"]) == ("idle", None)


def test_a_turns_end_takes_the_callers_word_for_the_agents_other_work(
        make_agent, monkeypatch, django_capture_on_commit_callbacks):
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    agent = make_agent()
    start = begin(agent, None, msgs(("user", "one")))
    with CaptureQueriesContext(connection) as queries:
        [state] = _agent_states(
            monkeypatch, django_capture_on_commit_callbacks,
            lambda: thread_turn_finish(start=start, result=TurnResult(text="1"),
                                       dialect="chat", busy_with="elsewhere"))
    assert (state["state"], state["current_thread"]) == ("processing", "elsewhere")
    assert not any("lock_expires_at\" >" in q["sql"] for q in queries.captured_queries)


def test_the_development_key_setup_makes_is_in_the_audit_trail():
    """``./run``'s first start makes a key from the command line: the trail says so, as it
    does for ``gaia keys create`` (issue 43: keys made from the CLI were missing)."""
    from django.core.management import call_command

    from agents.models import ApiKey, AuditEvent

    call_command("gaia_setup", stdout=io.StringIO())
    key = ApiKey.objects.get(name="development")
    (event,) = AuditEvent.objects.filter(action="key_create")
    assert (event.target, event.actor, event.channel) == (f"key:{key.prefix}", "cli", "cli")
