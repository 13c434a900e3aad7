"""A Gaia agent asks a remote A2A agent (``a2a:<name>`` in its tools): two Gaia processes on two
ports, the first's agent delegating over A2A, through the ``a2a-sdk`` client, to the second's
(issue 39)."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

pytestmark = pytest.mark.django_db(transaction=True)


def _ask(server: Any, key: str, model: str, text: str) -> dict[str, Any]:
    r = httpx.post(f"{server.v1}/chat/completions", timeout=120,
                   headers={"Authorization": f"Bearer {key}"},
                   json={"model": model, "messages": [{"role": "user", "content": text}]})
    assert r.status_code == 200, r.text
    return r.json()


def _delegator(make_agent: Any, slug: str, tool: str) -> Any:
    return make_agent(slug=slug, tools=[f"a2a:{tool}"], provider__options={"script": [
        {"tool_calls": [{"name": f"a2a__{tool}", "arguments": {"task": "Say hello."}}]},
        {"reply": "Peer said: {results}"}]})


def test_an_agent_delegates_to_a_remote_a2a_agent(
        gaia_server: Any, gaia_server_factory: Any, make_agent: Any, make_key: Any) -> None:
    from a2a_api.models import Task
    from agents.models import A2aAgent, Message

    remote = make_agent(slug="remote-helper", provider__options={"reply": "Hello from afar."})
    _, remote_key = make_key("peer-access", agents=[remote])
    A2aAgent.objects.create(name="peer", url=f"{gaia_server.url}/a2a/remote-helper",
                            headers_env={"Authorization": "PEER_AUTH"})
    caller = gaia_server_factory(PEER_AUTH=f"Bearer {remote_key}")
    _delegator(make_agent, "delegator", "peer")
    _, key = make_key("caller")

    answer = _ask(caller, key, "delegator", "Ask the peer.")
    assert answer["choices"][0]["message"]["content"] == "Peer said: Hello from afar."

    (task,) = Task.objects.filter(agent__slug="remote-helper")  # a task on the other server
    assert (task.state, task.api_key.name) == ("completed", "peer-access")
    assert task.text == "Say hello."
    call = Message.objects.get(thread__agent__slug="delegator", role="tool")
    assert call.content == "Hello from afar."


def test_a_remote_agent_that_refuses_or_points_elsewhere_is_an_error_result(
        gaia_server: Any, gaia_server_factory: Any, make_agent: Any, make_key: Any) -> None:
    from agents.models import A2aAgent, Message

    make_agent(slug="remote-helper", provider__options={"reply": "Hello from afar."})
    # no key for it: its card is refused (401)
    A2aAgent.objects.create(name="locked", url=f"{gaia_server.url}/a2a/remote-helper")
    # a server whose card names another address (its public URL): Gaia does not follow it
    # there with the credentials the admin gave for the declared URL
    masked = gaia_server_factory(GAIA_PUBLIC_URL="http://gaia.example.invalid")
    A2aAgent.objects.create(name="elsewhere", url=f"{masked.url}/a2a/remote-helper",
                            headers_env={"Authorization": "PEER_AUTH"})
    _, remote_key = make_key("peer-access")
    caller = gaia_server_factory(PEER_AUTH=f"Bearer {remote_key}")
    _delegator(make_agent, "locked-out", "locked")
    _delegator(make_agent, "misdirected", "elsewhere")
    _, key = make_key("caller")

    _ask(caller, key, "locked-out", "Ask.")
    refused = Message.objects.get(thread__agent__slug="locked-out", role="tool").content
    assert "a2a__locked: its agent card could not be read" in refused, refused
    _ask(caller, key, "misdirected", "Ask.")
    elsewhere = Message.objects.get(thread__agent__slug="misdirected", role="tool").content
    assert "names an address Gaia may not call (http://gaia.example.invalid/a2a/remote-helper)" \
        in elsewhere, elsewhere
