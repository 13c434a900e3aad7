"""Whose facts an agent remembers (issue 35, "a user named by a client is scoped by the key that
named it"): against a live server over ``/v1``, a key naming the same user as another key
(in the body's ``user`` or LibreChat's user header) neither reads, recalls nor writes the other
key's facts; a key the admin trusts to speak for users across keys reads every key's facts
about its user; a delegated turn remembers for the caller's user and key. And the migration
that moves the facts stored before (agents/migrations/0027_key_scoped_memory.py)."""

from __future__ import annotations

import importlib
from typing import Any

import openai
import pytest
from django.apps import apps
from django.utils import timezone

from agents import services
from agents.models import Agent, Memory, Message, Provider, Thread

pytestmark = pytest.mark.django_db(transaction=True)


def remember(fact: str) -> dict[str, Any]:
    """A model that remembers ``fact``, then answers with the prompt it was given."""
    return {"script": [{"tool_calls": [{"name": "remember", "arguments": {"fact": fact}}]},
                       {"reply": "SYSTEM<{system}>"}]}


RECALL = {"script": [{"tool_calls": [{"name": "recall", "arguments": {"query": "cat"}}]},
                     {"reply": "SYSTEM<{system}> RECALLED<{results}>"}]}


def model_does(agent: Agent, options: dict[str, Any]) -> None:
    """The agent's (fake) model does this from the next request on."""
    Provider.objects.filter(pk=agent.provider_id).update(options=options,
                                                         updated_at=timezone.now())
    services.config_changed()


def ask(server: Any, key: str, *, user: str | None = None, header: str | None = None,
        model: str = "elephant") -> str:
    extra: dict[str, Any] = {"user": user} if user else {}
    if header:
        extra["extra_headers"] = {"X-LibreChat-User-Id": header}
    client = openai.OpenAI(base_url=server.v1, api_key=key, max_retries=0)
    return client.chat.completions.create(
        model=model, messages=[{"role": "user", "content": "What is my cat called?"}],
        **extra).choices[0].message.content


def test_a_user_named_by_a_key_is_that_keys_user(gaia_server: Any, make_key: Any,
                                                 make_agent: Any) -> None:
    agent = make_agent(slug="elephant", memory="per_user", tools=["recall"],
                       provider__options=remember("Alice's cat is called Tom"))
    a, key_a = make_key("a")
    b, key_b = make_key("b")
    ask(gaia_server, key_a, user="alice")
    assert "called Tom" in ask(gaia_server, key_a, user="alice")  # A's alice: given the fact

    # B names alice too (in the body, or in LibreChat's header): not given A's facts, and
    # its recall finds none
    model_does(agent, RECALL)
    for named in ({"user": "alice"}, {"header": "alice"}):
        answer = ask(gaia_server, key_b, **named)
        assert "Tom" not in answer, named
        assert "RECALLED<Nothing remembered.>" in answer, named
    # what B makes its alice remember stays B's: A's alice is not told it
    model_does(agent, remember("Alice's cat is called Rex"))
    ask(gaia_server, key_b, user="alice")
    model_does(agent, RECALL)
    seen_by_a = ask(gaia_server, key_a, user="alice")
    assert "Tom" in seen_by_a.split("RECALLED<")[0]
    assert "Tom" in seen_by_a.split("RECALLED<")[1]
    assert "Rex" not in seen_by_a
    seen_by_b = ask(gaia_server, key_b, header="alice")
    assert "Rex" in seen_by_b
    assert "Tom" not in seen_by_b
    assert sorted(Memory.objects.values_list("scope", "user", "text")) == [
        (f"key:{a.pk}/user:alice", "alice", "Alice's cat is called Tom"),
        (f"key:{b.pk}/user:alice", "alice", "Alice's cat is called Rex")]


def test_a_key_trusted_across_keys_speaks_for_the_user_of_every_key(
        gaia_server: Any, make_key: Any, make_agent: Any) -> None:
    agent = make_agent(slug="elephant", memory="per_user", tools=["recall"],
                       provider__options=remember("Alice's cat is called Tom"))
    a, key_a = make_key("a")
    _, trusted = make_key("crm", users_across_keys=True)
    _, also_trusted = make_key("helpdesk", users_across_keys=True)
    ask(gaia_server, key_a, user="alice")
    # the trusted key's alice is alice of every key: it is given and recalls A's facts
    model_does(agent, RECALL)
    answer = ask(gaia_server, trusted, user="alice")
    assert "Tom" in answer.split("RECALLED<")[0]
    assert "Tom" in answer.split("RECALLED<")[1]
    assert "Tom" not in ask(gaia_server, trusted, user="bob")
    # what it remembers is shared by the trusted keys, and not shown to an untrusted key
    model_does(agent, remember("Alice's cat likes tea"))
    ask(gaia_server, trusted, user="alice")
    model_does(agent, RECALL)
    assert "likes tea" in ask(gaia_server, also_trusted, user="alice")
    assert "tea" not in ask(gaia_server, key_a, user="alice")
    assert Memory.objects.get(text="Alice's cat likes tea").scope == "user:alice"
    assert Memory.objects.get(text="Alice's cat is called Tom").scope == (
        f"key:{a.pk}/user:alice")


def test_a_delegated_turn_remembers_for_the_callers_user_and_key(
        gaia_server: Any, make_key: Any, make_agent: Any) -> None:
    make_agent(slug="manager", tools=["agent:scribe"], provider__options={"script": [
        {"tool_calls": [{"name": "agent__scribe", "arguments": {"task": "Note the cat"}}]},
        {"reply": "M: {results}"}]})
    make_agent(slug="scribe", memory="per_user", provider__options=remember("The cat is Tom"))
    a, key_a = make_key("a")
    _, key_b = make_key("b")
    first = ask(gaia_server, key_a, user="alice", model="manager")
    assert first.startswith("M: SYSTEM<")
    assert "Tom" not in first
    assert list(Memory.objects.values_list("scope", "user")) == [
        (f"key:{a.pk}/user:alice", "alice")]  # not user:manager, shared by every user
    # the same user through the same key is given it in the next call; nobody else is
    assert "The cat is Tom" in ask(gaia_server, key_a, user="alice", model="manager")
    assert "Tom" not in ask(gaia_server, key_a, user="bob", model="manager")
    assert "Tom" not in ask(gaia_server, key_b, user="alice", model="manager")
    # no user named: the callee keeps no memory (it is not offered its remember tool)
    before = Memory.objects.count()
    ask(gaia_server, key_a, model="manager")
    assert Memory.objects.count() == before
    child = Thread.objects.filter(agent__slug="scribe", parent_message__thread__user="")
    assert child.count() == 1
    assert not Message.objects.filter(thread__in=child, role="tool").exists()
    # the child thread's client is still the calling agent (reference 003's from/to)
    assert set(Thread.objects.filter(agent__slug="scribe").values_list("user", flat=True)) == {
        "manager"}


def test_the_migration_moves_each_fact_to_the_key_that_learnt_it(make_agent: Any,
                                                                 make_key: Any) -> None:
    migration = importlib.import_module("agents.migrations.0027_key_scoped_memory")
    elephant, manager = make_agent(slug="elephant"), make_agent(slug="manager")
    scribe = make_agent(slug="scribe")
    a, _ = make_key("a")

    def thread(agent: Agent, user: str, *, key: Any = a, parent: Thread | None = None
               ) -> Thread:
        call = None
        if parent is not None:
            call = Message.objects.create(thread=parent, seq=1, role="assistant")
        return Thread.objects.create(agent=agent, api_key=key, user=user, parent_message=call)

    alice = thread(elephant, "alice")
    bob = thread(manager, "bob")
    nobody = thread(manager, "")
    old = {
        "direct": (elephant, "user:alice", alice),
        "delegated": (scribe, "user:manager", thread(scribe, "manager", parent=bob)),
        "twice": (scribe, "user:bob", thread(scribe, "bob")),  # the same fact, same new scope
        "no user": (scribe, "user:manager", thread(scribe, "manager", parent=nobody)),
        "anonymous": (elephant, "user:dave", thread(elephant, "dave", key=None)),
        "other name": (elephant, "user:zed", alice),
        "lost thread": (elephant, "user:carol", None),
        "per key": (elephant, f"key:{a.pk}", alice),
    }
    rows = {name: Memory.objects.create(
        agent=agent, scope=scope, thread=learnt,
        text="Likes tea" if name in ("delegated", "twice") else name)
        for name, (agent, scope, learnt) in old.items()}
    migration.key_scoped(apps, None)
    now = {name: Memory.objects.filter(pk=row.pk).values_list("scope", "user").first()
           for name, row in rows.items()}
    assert now == {
        "direct": (f"key:{a.pk}/user:alice", "alice"),
        "delegated": (f"key:{a.pk}/user:bob", "bob"),  # the caller's user, its key
        "twice": None,  # stored once
        "no user": ("user:manager", "manager"),  # origin not known: trusted keys only
        "anonymous": ("user:dave", "dave"),
        "other name": ("user:zed", "zed"),
        "lost thread": ("user:carol", "carol"),
        "per key": (f"key:{a.pk}", ""),
    }
    migration.unscoped(apps, None)
    assert Memory.objects.get(pk=rows["direct"].pk).scope == "user:alice"
    assert Memory.objects.get(pk=rows["delegated"].pk).scope == "user:bob"
    assert Memory.objects.get(pk=rows["per key"].pk).scope == f"key:{a.pk}"


def test_each_scope_as_the_rule_names_it(make_agent: Any, make_key: Any) -> None:
    from agents import selectors

    per_user, per_key = make_agent(memory="per_user"), make_agent(memory="per_key")
    key, _ = make_key("k")
    trusted, _ = make_key("t", users_across_keys=True)
    assert selectors.memory_scope(agent=per_key, api_key=key, user="ann") == f"key:{key.pk}"
    assert selectors.memory_scope(agent=per_key, api_key=None, user="ann") is None
    assert selectors.memory_scope(agent=per_user, api_key=key, user="ann") == (
        f"key:{key.pk}/user:ann")
    assert selectors.memory_scope(agent=per_user, api_key=trusted, user="ann") == "user:ann"
    assert selectors.memory_scope(agent=per_user, api_key=None, user="ann") == (
        "anonymous/user:ann")
    assert selectors.memory_scope(agent=per_user, api_key=key, user=None) is None
    assert selectors.memory_scope(agent=make_agent(), api_key=key, user="ann") is None
    long = selectors.memory_scope(agent=per_user, api_key=key, user="u" * 5000)
    assert long == f"key:{key.pk}/user:{'u' * 300}"  # as Thread.user keeps it
    # a trusted key reads its user's facts of every key, not those named without a key
    for scope in (f"key:{key.pk}/user:ann", "anonymous/user:ann", "user:ann",
                  f"key:{key.pk}/user:bob", f"key:{key.pk}", long):
        services.memory_remember(agent=per_user, scope=scope, text=f"cat fact {scope}")
    assert sorted(selectors.memory_recall(agent_id=per_user.pk, scope="user:ann", query="cat",
                                          limit=10)) == [
        f"cat fact key:{key.pk}/user:ann", "cat fact user:ann"]
    assert selectors.memory_recall(agent_id=per_user.pk, scope=f"key:{key.pk}/user:ann",
                                   query="cat") == [f"cat fact key:{key.pk}/user:ann"]
    assert Memory.objects.get(scope=long).user == "u" * 300
