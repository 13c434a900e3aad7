"""Background responses (``background: true`` on ``/v1/responses``) with the official OpenAI
SDK against a live Gaia and a real worker: a Celery worker process with Redis, the server's
embedded worker thread without (as ``./run`` does)."""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterator
from datetime import timedelta
from typing import Any

import openai
import pytest
from django.utils import timezone

from agents import services
from agents.models import BackgroundResponse, Message, Thread
from tests.conftest import celery_worker_process

pytestmark = pytest.mark.django_db(transaction=True)

WORDS = " ".join(f"w{i}" for i in range(40))


@pytest.fixture
def background_worker(django_db_setup: Any, tmp_path: Any) -> Iterator[str]:
    """Who runs background responses: with Redis, a real Celery worker process on the test
    database; without, the embedded worker thread of the process that dispatches."""
    url = os.environ.get("REDIS_URL")
    if not url:
        yield "embedded"
        return
    with celery_worker_process(tmp_path / "celery.log", GAIA_BENCH_REAP_SECONDS="3600"):
        yield "celery"


@pytest.fixture
def client(gaia_server, api_key, background_worker):
    return openai.OpenAI(base_url=gaia_server.v1, api_key=api_key, max_retries=0, timeout=30)


def wait_for(check: Callable[[], Any], what: str, within: float = 60) -> Any:
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        got = check()
        if got:
            return got
        time.sleep(0.1)
    raise AssertionError(f"never happened: {what}")


def test_background_create_then_poll_to_completed(client, make_agent):
    make_agent(slug="bg", provider__options={"reply": "done in the background"})
    created = client.responses.create(model="bg", input="work on this", background=True)
    assert created.status == "queued"
    assert created.background is True
    assert created.id.startswith("resp_")
    assert created.output == []

    final = wait_for(lambda: (r := client.responses.retrieve(created.id)).status == "completed"
                     and r, "the response completed")
    assert final.output_text == "done in the background"
    assert final.background is True
    assert final.usage.output_tokens == 4

    row = BackgroundResponse.objects.get(pk=created.id)
    assert (row.status, row.attempts, row.error) == ("completed", 1, "")
    assert row.started_at is not None
    assert row.finished_at is not None
    # the turn ran as any other: its thread holds the question and the answer
    assert [(m.role, m.content) for m in row.thread.messages.order_by("seq")] == [
        ("user", "work on this"), ("assistant", "done in the background")]
    assert Message.objects.get(response_id=created.id).thread_id == row.thread_id


def test_background_cancel_a_running_turn_kills_it(client, make_agent):
    make_agent(slug="slow", provider__options={"reply": WORDS, "delay_ms": 250})
    created = client.responses.create(model="slow", input="take your time", background=True)
    row = wait_for(lambda: BackgroundResponse.objects.filter(
        pk=created.id, thread__isnull=False).first(), "the turn started on its thread")
    assert row.status == "in_progress"
    assert client.responses.retrieve(created.id).status == "in_progress"

    cancelled = client.responses.cancel(created.id)
    assert cancelled.status == "cancelled"
    assert cancelled.id == created.id

    # its thread shows the kill, the partial reply stored as killed
    thread = wait_for(lambda: Thread.objects.filter(pk=row.thread_id,
                                                    status="killed").first(),
                      "the thread was killed")
    reply = thread.messages.filter(role="assistant").get()
    assert reply.finish_reason == "killed"
    assert len(reply.content.split()) < 40
    final = wait_for(lambda: BackgroundResponse.objects.filter(
        pk=created.id, response__isnull=False).first(), "the worker recorded the end")
    assert final.status == "cancelled"
    assert client.responses.retrieve(created.id).status == "cancelled"
    # cancelling again is harmless
    assert client.responses.cancel(created.id).status == "cancelled"


def test_background_cancel_a_queued_response_never_runs(client, make_agent, make_key):
    key, raw = make_key("queued")
    make_agent(slug="bgq", provider__options={"reply": "never"})
    BackgroundResponse.objects.create(id="resp_queued1", api_key=key, model="bgq",
                                      request={"model": "bgq", "input": "x",
                                               "background": True})
    own = openai.OpenAI(base_url=client.base_url, api_key=raw, max_retries=0, timeout=30)
    assert own.responses.retrieve("resp_queued1").status == "queued"
    assert own.responses.cancel("resp_queued1").status == "cancelled"
    assert services.background_response_claim(response_id="resp_queued1", worker="t") is None
    assert own.responses.retrieve("resp_queued1").status == "cancelled"
    assert not Message.objects.filter(response_id="resp_queued1").exists()


def test_background_cancel_finished_is_400_and_unknown_is_404(client, make_agent):
    make_agent(slug="bg", provider__options={"reply": "quick"})
    created = client.responses.create(model="bg", input="hi", background=True)
    wait_for(lambda: client.responses.retrieve(created.id).status == "completed", "done")
    with pytest.raises(openai.BadRequestError) as exc:
        client.responses.cancel(created.id)
    assert exc.value.body["code"] == "response_already_finished"
    assert exc.value.body["param"] == "response_id"

    for call in (client.responses.retrieve, client.responses.cancel):
        with pytest.raises(openai.NotFoundError) as missing:
            call("resp_nosuch")
        assert missing.value.body["code"] == "response_not_found"
        assert missing.value.status_code == 404

    # a response that did not run in the background cannot be cancelled
    plain = client.responses.create(model="bg", input="now")
    with pytest.raises(openai.BadRequestError):
        client.responses.cancel(plain.id)


def test_background_response_is_the_keys_own(client, make_agent, make_key, gaia_server):
    make_agent(slug="bg", provider__options={"reply": "mine"})
    created = client.responses.create(model="bg", input="hi", background=True)
    other = openai.OpenAI(base_url=gaia_server.v1, api_key=make_key("other")[1],
                          max_retries=0, timeout=30)
    for call in (other.responses.retrieve, other.responses.cancel):
        with pytest.raises(openai.NotFoundError) as exc:
            call(created.id)
        assert exc.value.body["code"] == "response_not_found"
    wait_for(lambda: client.responses.retrieve(created.id).status == "completed", "done")


def test_background_store_false_is_refused(client, make_agent):
    make_agent(slug="bg", provider__options={"reply": "x"})
    with pytest.raises(openai.BadRequestError) as exc:
        client.responses.create(model="bg", input="hi", background=True, store=False)
    assert exc.value.body["param"] == "store"


def test_background_stream_resumes_after_a_dropped_connection(client, make_agent):
    make_agent(slug="streamy", provider__options={"reply": "one two three four five six "
                                                           "seven eight", "delay_ms": 100})
    stream = client.responses.create(model="streamy", input="go", background=True,
                                      stream=True)
    seen = []
    for event in stream:
        seen.append(event)
        if len(seen) == 5:
            break
    stream.close()  # the connection drops midway
    response_id = seen[0].response.id
    assert [e.sequence_number for e in seen] == [0, 1, 2, 3, 4]
    assert seen[0].type == "response.created"
    assert seen[0].response.background is True

    resumed = list(client.responses.retrieve(response_id, stream=True, starting_after=4))
    assert resumed[0].sequence_number == 5
    assert [e.sequence_number for e in resumed] == list(range(5, 5 + len(resumed)))
    assert resumed[-1].type == "response.completed"
    assert resumed[-1].response.output_text == "one two three four five six seven eight"

    # the whole stream again, from anywhere: the same events
    whole = list(client.responses.retrieve(response_id, stream=True))
    assert [e.model_dump() for e in whole] == [e.model_dump() for e in seen + resumed]
    deltas = "".join(e.delta for e in whole if e.type == "response.output_text.delta")
    assert deltas == "one two three four five six seven eight"
    assert client.responses.retrieve(response_id).status == "completed"


def test_background_stream_of_a_response_not_streamed_is_400(client, make_agent):
    make_agent(slug="bg", provider__options={"reply": "x"})
    created = client.responses.create(model="bg", input="hi", background=True)
    with pytest.raises(openai.BadRequestError) as exc:
        list(client.responses.retrieve(created.id, stream=True))
    assert exc.value.body["param"] == "stream"


def test_background_worker_that_died_is_queued_again_and_runs(client, make_agent, make_key):
    key, raw = make_key("died")
    make_agent(slug="bg", provider__options={"reply": "second time lucky"})
    long_ago = timezone.now() - timedelta(minutes=5)
    BackgroundResponse.objects.create(
        id="resp_orphan1", api_key=key, model="bg", status="in_progress", attempts=1,
        worker="gone:1", heartbeat_at=long_ago, started_at=long_ago,
        request={"model": "bg", "input": "again", "background": True})
    assert services.background_responses_recover_stale() == ["resp_orphan1"]
    own = openai.OpenAI(base_url=client.base_url, api_key=raw, max_retries=0, timeout=30)
    final = wait_for(lambda: (r := own.responses.retrieve("resp_orphan1")).status
                     == "completed" and r, "the response ran again")
    assert final.output_text == "second time lucky"
    assert BackgroundResponse.objects.get(pk="resp_orphan1").attempts == 2

    # past its last attempt it fails, saying why
    BackgroundResponse.objects.create(
        id="resp_orphan2", api_key=key, model="bg", status="in_progress", attempts=2,
        worker="gone:1", heartbeat_at=long_ago, request={"model": "bg", "input": "x"})
    assert services.background_responses_recover_stale() == []
    failed = own.responses.retrieve("resp_orphan2")
    assert failed.status == "failed"
    assert "worker stopped" in failed.error.message


def test_background_turn_outlives_its_web_process(client, make_agent, api_key,
                                                  gaia_server_factory):
    """The web process that took the request dies (SIGKILL) while the turn runs: with Celery
    the worker goes on; with the embedded worker the next web process's stale check queues
    the response again and runs it. Either way the client gets its answer."""
    make_agent(slug="long", provider__options={"reply": WORDS, "delay_ms": 60})
    env = {"GAIA_BACKGROUND_STALE_SECONDS": "2"}
    first = gaia_server_factory(**env)
    via_first = openai.OpenAI(base_url=first.v1, api_key=api_key, max_retries=0, timeout=30)
    created = via_first.responses.create(model="long", input="go", background=True)
    wait_for(lambda: BackgroundResponse.objects.filter(pk=created.id, thread__isnull=False)
             .exists(), "the turn started")
    first.process.kill()
    first.process.wait(10)

    second = gaia_server_factory(**env)
    via_second = openai.OpenAI(base_url=second.v1, api_key=api_key, max_retries=0, timeout=30)
    final = wait_for(lambda: (r := via_second.responses.retrieve(created.id)).status
                     in ("completed", "failed") and r, "the response ended", within=90)
    assert final.status == "completed"
    assert final.output_text == WORDS
    # the Celery worker never stopped; the embedded one died with its process and ran again
    row = BackgroundResponse.objects.get(pk=created.id)
    assert row.attempts == (1 if os.environ.get("REDIS_URL") else 2)
