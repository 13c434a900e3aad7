"""A process's first call to an OpenAI-kind provider holds no one (issue 35, the class).

aiohttp loads the default TLS certificates when it is imported (about 1.2 s), and the backend
of a provider kind was imported on its first use: on the event loop, every client waiting.
The server now imports the backends of the kinds in use on a thread before it serves
(gaia_site.lifespan). The first chat to such an agent runs while the independent poller of
test_memory_stalls.py keeps ``/health`` and a bystander chat under 250 ms.
"""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from tests.poller import polled


@pytest.mark.django_db(transaction=True)
def test_the_first_call_to_an_openai_provider_holds_no_one(
        gaia_server_factory: Any, make_agent: Any, api_key: str) -> None:
    from tests.fakes import Reply
    from tests.fakes.openai_upstream import FakeOpenAIUpstream

    make_agent(slug="bystander", provider__options={"reply": "Here."})
    with FakeOpenAIUpstream(tokens=2) as upstream:
        upstream.script(Reply(text="First."))
        make_agent(slug="remote", provider__kind="openai", provider__base_url=upstream.base_url,
                   provider__name="remote-upstream")
        server = gaia_server_factory()
        with polled(server, api_key):
            reply = httpx.post(server.v1 + "/chat/completions", timeout=120,
                               headers={"Authorization": f"Bearer {api_key}"},
                               json={"model": "remote", "messages": [
                                   {"role": "user", "content": "Hello?"}]})
    assert reply.status_code == 200, reply.text[:300]
    assert reply.json()["choices"][0]["message"]["content"] == "First."
