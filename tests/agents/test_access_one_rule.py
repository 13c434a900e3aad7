""""May this key use this agent" is one rule (agents.selectors.api_key_may_use), asked by /v1's
authorization, operator actions, the model list and delegation (issue 38). A key read without
its cached agent list (straight from the database) is still limited to its agents."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from agents import selectors
from agents.models import ApiKey
from agents.tools.base import ToolContext
from agents.turns.delegate import delegate

pytestmark = pytest.mark.django_db(transaction=True)


def test_a_keys_list_limits_it_wherever_the_key_was_read(make_agent: Any, make_key: Any) -> None:
    mine, other = make_agent(slug="mine"), make_agent(slug="other", provider__name="p2")
    limited, _ = make_key("limited", agents=[mine])
    everyone, _ = make_key("everyone")
    fresh = ApiKey.objects.get(pk=limited.pk)  # no cached list on it
    assert not hasattr(fresh, "allowed_agent_ids")
    assert selectors.api_key_may_use(api_key=fresh, agent=mine)
    assert not selectors.api_key_may_use(api_key=fresh, agent=other)
    assert selectors.api_key_may_use(api_key=ApiKey.objects.get(pk=everyone.pk), agent=other)
    assert selectors.api_key_may_use(api_key=None, agent=other)  # a staff session


def test_delegation_asks_the_same_rule_for_a_key_read_without_its_list(
        make_agent: Any, make_key: Any) -> None:
    """Delegation read the key's cached list and took a missing one for "every agent"."""
    caller = make_agent(slug="caller", tools=["agent:other"])
    make_agent(slug="other", provider__name="p2")
    limited, _ = make_key("limited", agents=[caller])
    ctx = ToolContext(agent=caller, api_key=ApiKey.objects.get(pk=limited.pk), user=None)
    result = asyncio.run(delegate("other", "say hi", ctx))
    assert result.is_error
    assert result.text == "agent__other: this conversation's key may not use it"
