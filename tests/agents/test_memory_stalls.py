"""An agent's memory is finite and its recall holds no one (issue 35, the class "nothing a
client sends may hold the event loop", after items 1 and 2).

A user fills their own memory (the remember tool), and every turn of an agent with memory
ranks it. On 026b68b a scope kept up to 2,000 facts of 2,000 characters and each turn indexed
them all on the database thread (5.5 s a turn, every other request's database work waiting).
Now a scope keeps its newest ``GAIA_MEMORY_MAX_FACTS`` facts of at most
``GAIA_MEMORY_MAX_FACT_CHARS`` characters, a recall reads no more, and the index is built and
ranked on a worker thread. The attack runs against a real server while an independent poller
(`tests/poller.py`) asks
``/health`` and another agent's chat every 50 ms: both stay under 250 ms.
"""

from __future__ import annotations

import asyncio
import random
from typing import Any

import httpx
import pytest
from django.test import override_settings

from agents import selectors, services
from agents.kernel.exceptions import InvalidRequest
from agents.models import Memory
from agents.selectors.memory import memory_facts
from tests.poller import polled, repeat_for

VOCABULARY = [f"{a}{b}{c}" for a in ("bri", "cal", "dun", "fer", "gol", "hav", "kir", "lom")
              for b in ("ad", "en", "ix", "or", "ul", "ym") for c in ("bek", "dor", "fip",
                                                                       "gan", "lut", "mor")]


def fact(chars: int, seed: int) -> str:
    """A fact of ``chars`` characters of :data:`VOCABULARY`'s words."""
    rng = random.Random(seed)
    return " ".join(rng.choice(VOCABULARY) for _ in range(chars // 6 + 1))[:chars].strip()


@pytest.mark.django_db(transaction=True)
def test_a_full_memory_holds_no_one(gaia_server_factory: Any, make_agent: Any,
                                    make_key: Any) -> None:
    """A key's memory holding 2,000 facts of 2,000 characters (what a user could store
    before the caps; a scope at today's cap is a tenth of it, read within it), and a new
    fact before each turn so that every turn indexes the scope anew: each turn is given its
    facts, and no one waits."""
    make_agent(slug="bystander", provider__options={"reply": "Here."})
    agent = make_agent(slug="elephant", memory="per_key",
                       provider__options={"echo": "system"})
    key, secret = make_key("attacker")
    scope = f"key:{key.pk}"
    Memory.objects.bulk_create(Memory(agent=agent, scope=scope, text=fact(2000, seed))
                               for seed in range(2000))
    Memory.objects.create(agent=agent, scope=scope, text="The user's cat is called Zorblax.")
    server = gaia_server_factory()
    added = iter(range(10_000, 20_000))

    def attack() -> str:
        Memory.objects.create(agent=agent, scope=scope, text=fact(2000, next(added)))
        reply = httpx.post(server.v1 + "/chat/completions", timeout=120,
                           headers={"Authorization": f"Bearer {secret}"},
                           json={"model": "elephant", "messages": [
                               {"role": "user", "content": "What is my cat called?"}]})
        assert reply.status_code == 200, reply.text[:500]
        return str(reply.json()["choices"][0]["message"]["content"])

    with polled(server, secret):
        replies = repeat_for(1.0, attack)
    remembered = replies[-1].split("What you remember from earlier conversations:\n")[1]
    # the fact the question finds (the only one sharing a word with it)
    assert remembered == "- The user's cat is called Zorblax."
    assert len(replies) >= 2  # each a turn after a new fact: the scope indexed anew


# -- the caps, without a server --------------------------------------------------------------


@pytest.mark.django_db
@override_settings(GAIA_MEMORY_MAX_FACTS=5)
def test_a_scope_keeps_its_newest_facts(make_agent: Any) -> None:
    """A new fact past the cap forgets the scope's oldest (another scope's stay), and says
    so; the same fact again is stored once and forgets nothing."""
    agent = make_agent(slug="elephant", memory="per_key")
    services.memory_remember(agent=agent, scope="key:2", text="another key's fact")
    rows = [services.memory_remember(agent=agent, scope="key:1", text=f"fact {n}")
            for n in range(7)]
    assert [r.forgotten for r in rows] == [0, 0, 0, 0, 0, 1, 1]
    assert list(selectors.memory_list(agent_id=agent.pk, scope="key:1")
                .values_list("text", flat=True)) == [f"fact {n}" for n in (6, 5, 4, 3, 2)]
    assert services.memory_remember(agent=agent, scope="key:1", text="fact 6").forgotten == 0
    assert Memory.objects.filter(scope="key:1").count() == 5
    assert Memory.objects.filter(scope="key:2").count() == 1


@pytest.mark.django_db
def test_a_fact_is_at_most_its_length() -> None:
    """``GAIA_MEMORY_MAX_FACT_CHARS`` (500 by default) characters once its spaces are folded;
    a longer fact is refused (the model can say it shorter), not cut."""
    from tests.factories import AgentFactory

    agent = AgentFactory(slug="elephant", memory="per_key")
    assert len(services.memory_remember(agent=agent, scope="key:1",
                                        text="x" * 500 + "   ").text) == 500
    with pytest.raises(InvalidRequest) as refused:
        services.memory_remember(agent=agent, scope="key:1", text="y" * 501)
    assert refused.value.code == "fact_too_long"
    assert "at most 500 characters (this one has 501)" in refused.value.message
    assert Memory.objects.count() == 1


@pytest.mark.django_db(transaction=True)
def test_the_remember_tool_says_what_the_caps_did(make_agent: Any) -> None:
    """The model is told when a fact is too long, and when storing one forgot the oldest."""
    from agents.tools.base import ToolContext
    from agents.tools.builtins import BUILTINS

    agent = make_agent(slug="elephant", memory="per_key")
    ctx = ToolContext(agent=agent, api_key=None, user=None, memory_scope="key:1")
    remember = BUILTINS["remember"].run
    long = asyncio.run(remember({"fact": "z" * 600}, ctx))
    assert long.is_error
    assert "remember: A fact is at most 500 characters (this one has 600)" in long.text
    with override_settings(GAIA_MEMORY_MAX_FACTS=1):
        assert asyncio.run(remember({"fact": "first"}, ctx)).text == "Remembered."
        assert asyncio.run(remember({"fact": "second"}, ctx)).text == (
            "Remembered (the oldest fact was forgotten: at most 1 are kept).")
    assert list(Memory.objects.values_list("text", flat=True)) == ["second"]


@pytest.mark.django_db
def test_a_recall_reads_within_the_caps(make_agent: Any) -> None:
    """A scope that grew past the caps before them (or an admin's lowered cap) is read by
    its newest ``GAIA_MEMORY_MAX_FACTS`` facts, each by its first
    ``GAIA_MEMORY_MAX_FACT_CHARS`` characters; the index is kept while they do not change."""
    agent = make_agent(slug="elephant", memory="per_key")
    Memory.objects.bulk_create(Memory(agent=agent, scope="key:1", text=f"old{seed} "
                                      + fact(1990, seed)) for seed in range(300))
    facts = memory_facts(agent_id=agent.pk, scope="key:1")
    assert len(facts.texts) == 200
    assert all(len(t) <= 500 for t in facts.texts)
    assert facts.texts[0].startswith("old299 ")
    assert facts.texts[-1].startswith("old100 ")
    assert selectors.memory_recall(agent_id=agent.pk, scope="key:1", query="old5",
                                   limit=1)[0].startswith("old299 ")  # too old: not read
    assert selectors.memory_recall(agent_id=agent.pk, scope="key:1", query="old150",
                                   limit=1)[0].startswith("old150 ")
    again = memory_facts(agent_id=agent.pk, scope="key:1")
    assert again is facts
    assert again._index is not None
    Memory.objects.filter(text__startswith="old299 ").delete()
    changed = memory_facts(agent_id=agent.pk, scope="key:1")
    assert changed is not facts
    assert changed.texts[0].startswith("old298 ")
