"""Structured output and hosted tools over real HTTP, driven by the official OpenAI and
Anthropic SDKs: a JSON schema asked for over each dialect (Chat ``response_format``,
Responses ``text.format``, Messages ``output_config.format`` and the older ``output_format``)
constrains the embedded model, reaches an OpenAI-compatible upstream as ``response_format``
and an Anthropic one as ``output_config.format``; an ``mcp`` tool is not a hosted tool, and an
Anthropic-defined client tool is refused naming it."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import anthropic
import jsonschema
import openai
import pytest
import yaml

from agents.services import agents_import
from tests.fakes import Reply
from tests.fakes.anthropic_upstream import FakeAnthropicUpstream
from tests.fakes.openai_upstream import FakeOpenAIUpstream

DEFAULTS = Path(__file__).resolve().parents[2] / "agents" / "defaults.yaml"

SCHEMA = {"type": "object",
          "properties": {"city": {"type": "string", "maxLength": 24},
                         "country": {"type": "string", "maxLength": 24}},
          "required": ["city", "country"], "additionalProperties": False}
QUESTION = "Name the capital of France and its country, as JSON."
pytestmark = pytest.mark.django_db(transaction=True)

DIALECTS = ["chat", "responses", "messages", "messages-output_format"]


def ask(server: Any, key: str, model: str, dialect: str) -> str:
    """The reply's text when ``dialect``'s official client asks ``model`` for SCHEMA."""
    if dialect in ("chat", "responses"):
        client = openai.OpenAI(base_url=server.v1, api_key=key, max_retries=0, timeout=180)
        if dialect == "chat":
            done = client.chat.completions.create(
                model=model, max_tokens=80, temperature=0,
                messages=[{"role": "user", "content": QUESTION}],
                response_format={"type": "json_schema", "json_schema": {
                    "name": "place", "schema": SCHEMA, "strict": True}})
            return done.choices[0].message.content or ""
        reply = client.responses.create(
            model=model, max_output_tokens=80, temperature=0, input=QUESTION,
            text={"format": {"type": "json_schema", "name": "place", "schema": SCHEMA,
                             "strict": True}})
        return reply.output_text
    claude = anthropic.Anthropic(base_url=server.url, api_key=key, max_retries=0, timeout=180)
    fmt = {"type": "json_schema", "schema": SCHEMA}
    fields: dict[str, Any] = ({"output_config": {"format": fmt}} if dialect == "messages" else
                              {"extra_body": {"output_format": fmt}})  # the older spelling
    message = claude.messages.create(model=model, max_tokens=80, **fields,
                                     messages=[{"role": "user", "content": QUESTION}])
    return "".join(b.text for b in message.content if b.type == "text")


@pytest.fixture
def default_agents(transactional_db: Any) -> None:
    agents_import(data=yaml.safe_load(DEFAULTS.read_text()))


@pytest.mark.parametrize("dialect", DIALECTS)
def test_the_embedded_model_answers_schema_valid_json(gaia_server, default_agents, api_key,
                                                      dialect):
    text = ask(gaia_server, api_key, "gaia", dialect)
    jsonschema.validate(json.loads(text), SCHEMA)


@pytest.mark.parametrize("dialect", DIALECTS)
def test_the_schema_reaches_an_openai_compatible_upstream(gaia_server, make_agent, api_key,
                                                          dialect):
    answer = {"city": "Paris", "country": "France"}
    with FakeOpenAIUpstream() as up:
        up.script(Reply(text=json.dumps(answer)))
        make_agent(slug="fwd", provider__kind="openai", provider__base_url=up.base_url,
                   provider__options={})
        text = ask(gaia_server, api_key, "fwd", dialect)
        sent = up.last.body
    assert sent["response_format"]["type"] == "json_schema"
    assert sent["response_format"]["json_schema"]["schema"] == SCHEMA
    jsonschema.validate(json.loads(text), SCHEMA)
    assert json.loads(text) == answer


@pytest.mark.parametrize("dialect", DIALECTS)
def test_the_schema_reaches_an_anthropic_upstream_as_output_config(gaia_server, make_agent,
                                                                   api_key, dialect):
    with FakeAnthropicUpstream() as up:
        up.script(Reply(text='{"city": "Paris", "country": "France"}'))
        make_agent(slug="claude-up", provider__kind="anthropic",
                   provider__base_url=up.base_url, provider__options={})
        text = ask(gaia_server, api_key, "claude-up", dialect)
        sent = up.last.body
    assert sent["output_config"]["format"] == {"type": "json_schema", "schema": SCHEMA}
    assert "response_format" not in sent
    jsonschema.validate(json.loads(text), SCHEMA)


def test_an_anthropic_provider_refuses_schemaless_json_naming_the_field(gaia_server,
                                                                         make_agent, api_key):
    make_agent(slug="claude-up", provider__kind="anthropic",
               provider__base_url="http://127.0.0.1:9", provider__options={})
    client = openai.OpenAI(base_url=gaia_server.v1, api_key=api_key, max_retries=0)
    with pytest.raises(openai.BadRequestError) as err:
        client.chat.completions.create(model="claude-up", response_format={"type": "json_object"},
                                       messages=[{"role": "user", "content": "x"}])
    assert err.value.body["param"] == "response_format"
    assert "json_schema" in err.value.body["message"]


@pytest.mark.parametrize("fmt", [{"type": "xml"}, {"type": "json_schema"}])
def test_a_bad_messages_output_format_is_400(gaia_server, echo_agent, api_key, fmt):
    claude = anthropic.Anthropic(base_url=gaia_server.url, api_key=api_key, max_retries=0)
    with pytest.raises(anthropic.BadRequestError) as err:
        claude.messages.create(model="echo", max_tokens=10, messages=[
            {"role": "user", "content": "x"}], extra_body={"output_config": {"format": fmt}})
    assert "output_config.format" in err.value.body["error"]["message"]


# -- hosted tools ---------------------------------------------------------------------------

# Hosted tools by policy (dropped, refused, provided): tests/openai_api/test_hosted_tools.py.


def test_an_mcp_tool_is_not_a_hosted_tool(gaia_server, echo_agent, api_key):
    """Gaia calls a Responses ``mcp`` tool itself: it is checked as one (a server the
    operator has not allowed is refused for that reason), not refused as hosted."""
    client = openai.OpenAI(base_url=gaia_server.v1, api_key=api_key, max_retries=0)
    with pytest.raises(openai.BadRequestError) as err:
        client.responses.create(model="echo", input="x", tools=[
            {"type": "mcp", "server_label": "x", "server_url": "https://mcp.example/mcp",
             "require_approval": "never"}])
    assert err.value.body["code"] == "mcp_server_not_allowed"
    assert err.value.body["param"] == "tools[0].server_url"


def test_an_anthropic_defined_client_tool_is_400_naming_it(gaia_server, echo_agent, api_key):
    claude = anthropic.Anthropic(base_url=gaia_server.url, api_key=api_key, max_retries=0)
    with pytest.raises(anthropic.BadRequestError) as err:
        claude.messages.create(model="echo", max_tokens=10, messages=[
            {"role": "user", "content": "x"}], tools=[{"type": "bash_20250124", "name": "bash"}])
    assert "'bash_20250124'" in err.value.body["error"]["message"]
