"""What a stopped server leaves of a streaming reply, against real server processes: after
``kill -9`` the turn is recorded interrupted with the text streamed up to its last checkpoint
(agents/turns/checkpoint.py), and on SIGTERM a stream still running when the graceful period
ends gets its dialect's error frame and end of stream before the server stops
(gaia_site/lifespan.py), its turn recorded interrupted with the text the client read."""

from __future__ import annotations

import json
import signal

import httpx
import pytest

from agents.models import Message, Thread
from tests.agents.test_leases import wait_for

pytestmark = pytest.mark.django_db(transaction=True)

# A lease short enough that a dead process's turn is swept soon after a restart; checkpoints
# often enough that one is written within the first words.
SETTINGS = {"GAIA_THREAD_LOCK_SECONDS": "1.5", "GAIA_THREAD_WAIT_SECONDS": "20",
            "GAIA_REPLY_CHECKPOINT_SECONDS": "0.2"}
WORDS = " ".join(f"w{i}" for i in range(120))  # 12 s at 100 ms a word: longer than any wait

PATHS = {"chat": "/chat/completions", "responses": "/responses", "messages": "/messages"}


def body(dialect: str) -> dict:
    if dialect == "responses":
        return {"model": "slow", "input": "go", "stream": True}
    if dialect == "messages":
        return {"model": "slow", "max_tokens": 1024, "stream": True,
                "messages": [{"role": "user", "content": "go"}]}
    return {"model": "slow", "stream": True, "messages": [{"role": "user", "content": "go"}]}


def text_of(dialect: str, event: str, data: dict) -> str:
    """The reply text one SSE frame carries in ``dialect`` ("" for any other frame)."""
    if dialect == "chat":
        choices = data.get("choices") or [{}]
        return choices[0].get("delta", {}).get("content") or ""
    if dialect == "responses":
        return data.get("delta", "") if event == "response.output_text.delta" else ""
    delta = data.get("delta") or {}
    return delta.get("text", "") if delta.get("type") == "text_delta" else ""


class Stream:
    """A streamed turn read frame by frame: its text so far and every frame as
    ``(event, data)`` (``data`` parsed where it is JSON)."""

    def __init__(self, server, key: str, dialect: str, session: str) -> None:
        self.dialect = dialect
        self.client = httpx.Client(timeout=30)
        request = self.client.build_request(
            "POST", server.v1 + PATHS[dialect], json=body(dialect),
            headers={"Authorization": f"Bearer {key}", "X-Session-Id": session,
                     "anthropic-version": "2023-06-01"})
        self.response = self.client.send(request, stream=True)
        assert self.response.status_code == 200, self.response.read()
        self.thread_id = self.response.headers["x-gaia-thread-id"]
        self.lines = self.response.iter_lines()
        self.frames: list[tuple[str, object]] = []
        self.text = ""
        self.cut = False  # the connection ended without the response's end
        self._event = ""

    def read_until(self, predicate) -> None:
        while not predicate():
            line = next(self.lines)
            if line.startswith("event: "):
                self._event = line[7:]
            elif line.startswith("data: "):
                raw = line[6:]
                data = raw if raw == "[DONE]" else json.loads(raw)
                self.frames.append((self._event, data))
                if isinstance(data, dict):
                    self.text += text_of(self.dialect, self._event, data)
                self._event = ""

    def read_to_end(self) -> None:
        try:
            self.read_until(lambda: False)
        except StopIteration:
            pass
        except httpx.HTTPError:
            self.cut = True

    def close(self) -> None:
        self.response.close()
        self.client.close()


def checkpoint_of(thread_id: str) -> str | None:
    """The reply text kept on the thread so far, if any."""
    return Thread.objects.filter(pk=thread_id).values().get().get("partial_reply")


def test_kill_9_mid_stream_leaves_the_streamed_text_to_the_sweep(
        gaia_server_factory, make_agent, api_key):
    make_agent(slug="slow", provider__options={"reply": WORDS, "delay_ms": 100})
    server = gaia_server_factory(**SETTINGS)
    stream = Stream(server, api_key, "chat", session="K")
    try:
        stream.read_until(lambda: len(stream.text.split()) >= 5)
        checkpoint = wait_for(lambda: checkpoint_of(stream.thread_id))
        assert checkpoint, "no checkpoint while the reply streamed"
        server.process.send_signal(signal.SIGKILL)
        server.process.wait(10)
        stream.read_to_end()
    finally:
        stream.close()
    assert stream.cut
    gaia_server_factory(**SETTINGS)  # sweeps the dead process's turn a lease after it starts
    thread = wait_for(lambda: Thread.objects.filter(pk=stream.thread_id, lock_token="").first())
    assert thread is not None
    reply = Message.objects.get(thread_id=stream.thread_id, role="assistant")
    assert reply.finish_reason == "interrupted"
    assert reply.content.startswith(checkpoint)  # what was kept before the kill, or more
    assert stream.text.startswith(reply.content)  # and no more than the client read
    assert thread.partial_reply == ""
    assert thread.status == Thread.Status.ERROR


def test_kill_9_mid_stream_leaves_the_streamed_text_to_the_next_turn(
        gaia_server_factory, make_agent, api_key):
    agent = make_agent(slug="slow", provider__options={"reply": WORDS, "delay_ms": 100})
    server = gaia_server_factory(**SETTINGS)
    stream = Stream(server, api_key, "chat", session="N")
    try:
        stream.read_until(lambda: len(stream.text.split()) >= 5)
        assert wait_for(lambda: checkpoint_of(stream.thread_id)), "no checkpoint"
        server.process.send_signal(signal.SIGKILL)
        server.process.wait(10)
        stream.read_to_end()
    finally:
        stream.close()
    agent.provider.options = {"reply": "back again"}
    agent.provider.save()
    # A lease later the next turn on the thread finds it abandoned and records it first.
    restarted = gaia_server_factory(**{**SETTINGS, "GAIA_THREAD_LOCK_SECONDS": "30"})
    r = httpx.post(restarted.v1 + "/chat/completions", timeout=30,
                   json={"model": "slow", "messages": [{"role": "user", "content": "go"}]},
                   headers={"Authorization": f"Bearer {api_key}", "X-Session-Id": "N"})
    assert r.status_code == 200, r.text
    assert r.headers["x-gaia-thread-id"] == stream.thread_id
    rows = list(Message.objects.filter(thread_id=stream.thread_id).order_by("seq"))
    assert [(m.role, m.finish_reason) for m in rows] == [
        ("user", ""), ("assistant", "interrupted"), ("assistant", "stop")]
    assert rows[1].content
    assert stream.text.startswith(rows[1].content)
    assert Thread.objects.get(pk=stream.thread_id).partial_reply == ""


@pytest.mark.parametrize("dialect", ["chat", "responses", "messages"])
def test_sigterm_gives_a_stream_still_running_its_dialects_error_frame(
        gaia_server_factory, make_agent, api_key, dialect):
    make_agent(slug="slow", provider__options={"reply": WORDS, "delay_ms": 100})
    # uvicorn's graceful period is 2 s (tests/conftest.py); the reply takes 12.
    server = gaia_server_factory(**SETTINGS)
    stream = Stream(server, api_key, dialect, session="T-" + dialect)
    try:
        stream.read_until(lambda: len(stream.text.split()) >= 3)
        server.process.send_signal(signal.SIGTERM)
        stream.read_to_end()
    finally:
        stream.close()
    assert server.process.wait(20) is not None
    assert not stream.cut, "the stream was cut without its end"
    if dialect == "chat":
        (_, error), (_, done) = stream.frames[-2:]
        assert error["error"]["code"] == "turn_interrupted"
        assert "interrupted" in error["error"]["message"]
        assert done == "[DONE]"
    elif dialect == "responses":
        (event, failed), (_, done) = stream.frames[-2:]
        assert event == "response.failed"
        assert failed["response"]["status"] == "failed"
        assert failed["response"]["error"]["code"] == "server_error"  # the SDK's closed list
        assert failed["response"]["error"]["type"] == "turn_interrupted"
        assert done == "[DONE]"
    else:
        ((event, error),) = stream.frames[-1:]
        assert event == "error"
        assert error["type"] == "error"
        assert error["error"]["type"] == "overloaded_error"
        assert "interrupted" in error["error"]["message"]
    reply = Message.objects.get(thread_id=stream.thread_id, role="assistant")
    assert reply.finish_reason == "interrupted"
    assert 3 <= len(reply.content.split()) < 120
    assert reply.content == stream.text  # exactly what the client read
    thread = Thread.objects.get(pk=stream.thread_id)
    assert thread.lock_token == ""
    assert thread.partial_reply == ""
