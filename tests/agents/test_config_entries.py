"""Every section of a config document checks its entries with one rule
(``agents.services.entries``): an entry is a mapping that names its row, with no unknown
field, and the import says which entry is wrong in the same words whatever the section."""

from __future__ import annotations

import pytest

from agents.kernel.exceptions import InvalidRequest
from agents.models import Agent, KnowledgeBase, McpServer, Provider, Team
from agents.services.config import agents_import

SECTIONS = [("providers", "name"), ("knowledge_bases", "slug"), ("mcp_servers", "name"),
            ("agents", "slug"), ("teams", "slug")]


def refusal(doc: dict) -> str:
    with pytest.raises(InvalidRequest) as caught:
        agents_import(data=doc)
    return caught.value.message


@pytest.mark.django_db
@pytest.mark.parametrize(("section", "key"), SECTIONS)
def test_every_section_refuses_an_entry_without_its_name(section: str, key: str) -> None:
    for entry in ({}, {key: ""}, "just-a-string"):
        assert refusal({section: [entry]}) == f"{section}[0] needs a {key}."


@pytest.mark.django_db
@pytest.mark.parametrize(("section", "key"), SECTIONS)
def test_every_section_refuses_unknown_fields_and_writes_nothing(section: str, key: str) -> None:
    doc = {section: [{key: "x", "colour": "red", "aroma": 1}]}
    assert refusal(doc) == f"{section}[0] (x): unknown fields ['aroma', 'colour']."
    for model in (Provider, KnowledgeBase, McpServer, Agent, Team):
        assert not model.objects.exists()
