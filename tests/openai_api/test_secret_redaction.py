"""A configured secret value (the provider's API key, every ``extra_headers`` value) never
appears in a reply, a stored error, an API response, a page or a feed event, whatever the
upstream says (issue 26 item 2): an upstream that echoes the request's headers in its error,
in an in-stream error or in its reply text."""

from __future__ import annotations

import contextlib
import json
import threading
from typing import Any

import httpx
import pytest
from django.contrib.auth import get_user_model
from websockets.exceptions import ConnectionClosed
from websockets.sync.client import connect

from agents.models import Message, Thread
from tests.fakes import Fail, Reply
from tests.fakes.openai_upstream import FakeOpenAIUpstream

pytestmark = pytest.mark.django_db(transaction=True)

API_KEY = "sk-live-SECRET-aaaa1111"
HEADER = "azure-HEADER-bbbb2222"
SECRETS = (API_KEY, HEADER)
ECHO = (f"Bad request. You sent headers: authorization: Bearer {API_KEY}; api-key: {HEADER}; "
        f"(the key again, split by nothing: {API_KEY}{HEADER})")

SAYS = {
    "http_400": Fail(status=400, message=ECHO),
    "http_500": Fail(status=500, message=ECHO),
    "http_429": Fail(status=429, message=ECHO),
    "in_stream_error": Fail(status=500, message=ECHO, after_tokens=3),
    "reply_text": Reply(text=ECHO),
}


@pytest.fixture
def upstream(make_agent: Any) -> Any:
    with FakeOpenAIUpstream(tokens=4, api_key=API_KEY) as up:
        make_agent(slug="azure", provider__kind="openai", provider__base_url=up.base_url,
                   provider__name="azure-like", provider__api_key_secret=API_KEY,
                   provider__options={"extra_headers": {"api-key": HEADER}})
        yield up


class Feed:
    """Every text the feed sends while the test runs (a real /ws socket, staff session)."""

    def __init__(self, server: Any, cookie: str) -> None:
        self.texts: list[str] = []
        self.stack = contextlib.ExitStack()
        self.sock = self.stack.enter_context(connect(
            server.url.replace("http://", "ws://") + "/ws", open_timeout=10,
            additional_headers={"Cookie": f"sessionid={cookie}"}))
        assert json.loads(self.sock.recv(timeout=10))["event"] == "connected"
        self.thread = threading.Thread(target=self._read, daemon=True)
        self.thread.start()

    def _read(self) -> None:
        try:
            while True:
                self.texts.append(self.sock.recv())
        except ConnectionClosed:
            pass

    def close(self) -> list[str]:
        self.stack.close()
        self.thread.join(10)
        return self.texts


def staff_session(server: Any) -> httpx.Client:
    get_user_model().objects.create_user("boss", password="pw-boss-123", is_staff=True,
                                         is_superuser=True)
    client = httpx.Client(base_url=server.url, timeout=30)
    client.get("/login/")
    client.post("/login/", data={"username": "boss", "password": "pw-boss-123",
                                 "csrfmiddlewaretoken": client.cookies["csrftoken"]})
    assert "sessionid" in client.cookies
    return client


def leaks(text: str) -> list[str]:
    return [secret for secret in SECRETS if secret in text]


@pytest.mark.parametrize("stream", [False, True], ids=["json", "sse"])
@pytest.mark.parametrize("says", SAYS.values(), ids=SAYS.keys())
def test_a_configured_secret_never_leaves_gaia(gaia_server: Any, api_key: str, upstream: Any,
                                               says: Any, stream: bool) -> None:
    staff = staff_session(gaia_server)
    feed = Feed(gaia_server, staff.cookies["sessionid"])
    upstream.script(says)
    r = httpx.post(f"{gaia_server.v1}/chat/completions", timeout=30,
                   headers={"Authorization": f"Bearer {api_key}"},
                   json={"model": "azure", "stream": stream,
                         "messages": [{"role": "user", "content": "hi"}]})
    # the upstream was asked with the real values (so there was something to leak)
    sent = upstream.requests[-1].headers
    assert (sent["authorization"], sent["api-key"]) == (f"Bearer {API_KEY}", HEADER)
    assert leaks(r.text) == [], r.text
    assert "[redacted]" in r.text  # what the upstream said is there, less the secrets
    thread = Thread.objects.get()
    reply = Message.objects.get(thread=thread, role="assistant")
    assert leaks(reply.error) == leaks(reply.content) == leaks(thread.last_error) == []
    shown = [
        staff.get("/api/v1/threads").text,
        staff.get(f"/api/v1/threads/{thread.pk}").text,
        staff.get(f"/api/v1/threads/{thread.pk}/messages").text,
        staff.get("/api/v1/messages").text,
        staff.get(f"/threads/{thread.pk}/").text,
        staff.get(f"/admin/agents/thread/{thread.pk}/change/").text,
    ]
    for text in shown:
        assert leaks(text) == []
    assert "[redacted]" in "".join(shown)
    events = feed.close()
    assert events  # the turn was on the feed
    assert leaks("".join(events)) == []
