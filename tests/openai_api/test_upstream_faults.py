"""What a provider sends that Gaia cannot use is a 502, and a reply is stored whatever the
provider put in it; a failure to store it frees the thread (issue 17 items 3, 10 and 11)."""

from __future__ import annotations

import json

import httpx
import pytest

from agents.models import Message, Thread
from tests.fakes import Fail, Raw, Reply
from tests.fakes.openai_upstream import FakeOpenAIUpstream

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def upstream(make_agent):
    with FakeOpenAIUpstream(tokens=4) as up:
        make_agent(slug="up", provider__kind="openai", provider__base_url=up.base_url,
                   provider__name="faulty-upstream")
        yield up


def chat(server, key, text="hi", stream=False, session=None):
    headers = {"Authorization": f"Bearer {key}"}
    if session:
        headers["X-Session-Id"] = session
    return httpx.post(server.v1 + "/chat/completions", timeout=30, headers=headers,
                      json={"model": "up", "stream": stream,
                            "messages": [{"role": "user", "content": text}]})


def chunk(payload):
    return b"data: " + json.dumps(payload).encode() + b"\n\n"


GARBAGE = {
    "choice_is_a_string": chunk({"choices": ["x"]}) + b"data: [DONE]\n\n",
    "usage_is_a_list": chunk({"choices": [{"delta": {"content": "a"}, "finish_reason": "stop"}],
                              "usage": [1, 2]}) + b"data: [DONE]\n\n",
    "a_3_mb_line": b"data: " + b"x" * 3_000_000 + b"\n\n",
}


@pytest.mark.parametrize("garbage", GARBAGE.values(), ids=GARBAGE.keys())
def test_upstream_garbage_is_a_502_and_the_thread_is_free(gaia_server, api_key, upstream,
                                                          garbage):
    upstream.script(Raw(garbage))
    r = chat(gaia_server, api_key, session="garbage")
    assert r.status_code == 502, r.text
    assert r.json()["error"]["type"] == "server_error"
    assert r.json()["error"]["code"] == "upstream_error"
    thread = Thread.objects.get(pk=r.headers.get("x-gaia-thread-id") or
                                Thread.objects.get().pk)
    assert thread.lock_token == ""
    assert thread.status == Thread.Status.ERROR
    upstream.script(Reply(text="fine"))
    assert chat(gaia_server, api_key, session="garbage").status_code == 200


@pytest.mark.parametrize("usage", [(-5, -5), (10**11, 10**11), (3, -1)])
@pytest.mark.parametrize("stream", [False, True], ids=["json", "sse"])
def test_absurd_usage_is_clamped_and_the_reply_stored(gaia_server, api_key, upstream, usage,
                                                      stream):
    upstream.script(Reply(text="counted oddly", usage=usage))
    r = chat(gaia_server, api_key, stream=stream)
    assert r.status_code == 200
    if stream:
        assert "Internal error" not in r.text
        assert '"error"' not in r.text
    reply = Message.objects.get(role="assistant")
    assert reply.content == "counted oddly"
    assert reply.finish_reason == "stop"
    assert 0 <= reply.output_tokens <= 2**31 - 1
    assert 0 <= reply.input_tokens <= 2**31 - 1
    assert Thread.objects.get().lock_token == ""


@pytest.mark.parametrize("stream", [False, True], ids=["json", "sse"])
def test_a_nul_in_the_reply_is_stored_without_it(gaia_server, api_key, upstream, stream):
    upstream.script(Reply(text="before\x00after"))
    r = chat(gaia_server, api_key, stream=stream)
    assert r.status_code == 200
    assert "Internal error" not in r.text
    reply = Message.objects.get(role="assistant")
    assert reply.content == "beforeafter"
    assert reply.finish_reason == "stop"
    assert Thread.objects.get().lock_token == ""


@pytest.fixture
def poisoned_replies():
    """The database itself refuses an assistant message whose text is ``poison`` (a
    trigger), as it refuses what it cannot store."""
    from django.db import connection

    with connection.cursor() as cursor:
        if connection.vendor == "sqlite":
            cursor.execute(
                "CREATE TRIGGER poison BEFORE INSERT ON agents_message "
                "WHEN NEW.content = 'poison' BEGIN SELECT RAISE(ABORT, 'refused'); END")
        else:
            cursor.execute(
                "CREATE FUNCTION poison() RETURNS trigger AS $$ BEGIN "
                "IF NEW.content = 'poison' THEN RAISE EXCEPTION 'refused'; END IF; "
                "RETURN NEW; END $$ LANGUAGE plpgsql")
            cursor.execute("CREATE TRIGGER poison BEFORE INSERT ON agents_message "
                           "FOR EACH ROW EXECUTE FUNCTION poison()")
    yield
    with connection.cursor() as cursor:
        if connection.vendor == "sqlite":
            cursor.execute("DROP TRIGGER poison")
        else:
            cursor.execute("DROP TRIGGER poison ON agents_message")
            cursor.execute("DROP FUNCTION poison()")


@pytest.mark.parametrize("stream", [False, True], ids=["json", "sse"])
def test_a_reply_the_database_refuses_frees_the_thread_and_is_recorded(
        gaia_server, api_key, upstream, poisoned_replies, stream):
    upstream.script(Reply(text="poison"))
    r = chat(gaia_server, api_key, stream=stream, session="poisoned")
    assert r.status_code == 200  # the client got its reply; only storing it failed
    thread = Thread.objects.get()
    assert thread.lock_token == ""
    assert thread.status == Thread.Status.ERROR
    assert "could not be stored" in thread.last_error
    reply = Message.objects.get(role="assistant")
    assert reply.finish_reason == "error"
    upstream.script(Reply(text="fine"))
    assert chat(gaia_server, api_key, session="poisoned").status_code == 200


def test_a_responses_detail_shows_its_own_outcome(gaia_server, api_key, upstream):
    headers = {"Authorization": f"Bearer {api_key}", "X-Session-Id": "r"}
    upstream.script(Reply(text="first answer"), Fail(500, message="second broke"))
    first = httpx.post(gaia_server.v1 + "/responses", headers=headers, timeout=30,
                       json={"model": "up", "input": "one"})
    assert first.status_code == 200
    second = httpx.post(gaia_server.v1 + "/responses", headers=headers, timeout=30,
                        json={"model": "up", "input": [
                            {"role": "user", "content": "one"},
                            {"role": "assistant", "content": "first answer"},
                            {"role": "user", "content": "two"}]})
    assert second.status_code == 502
    r1 = httpx.get(gaia_server.v1 + "/responses/" + first.json()["id"], headers=headers)
    assert r1.status_code == 200
    assert r1.json()["status"] == "completed"
    assert r1.json()["error"] is None
