"""Webhook deliveries to a live receiver (issue 42): a real HTTP server in this process that
verifies each signature with ``standardwebhooks`` and fails the first two deliveries; sent by a
real Celery worker process with Redis (PostgreSQL + Redis), by the embedded worker of this
process without (SQLite). Retries back off as configured, every attempt is logged, a
redelivery keeps the event id, and a receiver that hangs fails its attempt at the delivery
timeout without holding the worker."""

from __future__ import annotations

import os
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
from rest_framework.test import APIClient
from standardwebhooks import Webhook

from agents import services
from agents.models import Approval, Thread, WebhookDelivery
from tests.conftest import celery_worker_process

pytestmark = pytest.mark.django_db(transaction=True)

RETRY = "1,2,1,1,1"  # seconds: fast, so a test sees the whole schedule
TIMEOUT = "2"


class Receiver:
    """A webhook receiver: ``/fail2/...`` answers 500 twice then 204, ``/ok/...`` 200,
    ``/hang/...`` answers only when the test ends. Each request is kept with whether its
    signature verified (``secrets[path]``)."""

    def __init__(self) -> None:
        self.secrets: dict[str, str] = {}
        self.seen: list[dict[str, Any]] = []
        self.release = threading.Event()
        self.lock = threading.Lock()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 - http.server's name
                body = self.rfile.read(int(self.headers.get("content-length") or 0))
                try:
                    event = Webhook(receiver.secrets[self.path]).verify(
                        body, dict(self.headers.items()))
                    verified = True
                except Exception as exc:  # noqa: BLE001 - the test asserts on it
                    event, verified = repr(exc), False
                with receiver.lock:
                    receiver.seen.append({"path": self.path, "at": time.monotonic(),
                                          "verified": verified, "event": event,
                                          "headers": dict(self.headers.items())})
                    count = sum(1 for s in receiver.seen if s["path"] == self.path)
                if self.path.startswith("/hang"):
                    receiver.release.wait(60)
                    status = 200
                elif self.path.startswith("/fail2"):
                    status = 500 if count <= 2 else 204
                else:
                    status = 200
                self.send_response(status)
                answer = b"" if status == 204 else f"answer {count}".encode()
                self.send_header("content-length", str(len(answer)))
                self.end_headers()
                self.wfile.write(answer)

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def of(self, path: str) -> list[dict[str, Any]]:
        with self.lock:
            return [s for s in self.seen if s["path"] == path]

    def stop(self) -> None:
        self.release.set()
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    found = Receiver()
    yield found
    found.stop()


@pytest.fixture
def webhook_sender(receiver: Receiver, settings: Any, django_db_setup: Any,
                   tmp_path: Any) -> Iterator[str]:
    """What sends deliveries, configured for ``receiver``: with Redis a Celery worker process
    (one, solo: a hanging receiver would hold it), without this process's embedded worker."""
    env = {"GAIA_WEBHOOK_ALLOWED_URLS": f"{receiver.url}/*",
           "GAIA_WEBHOOK_RETRY_SECONDS": RETRY, "GAIA_WEBHOOK_TIMEOUT_SECONDS": TIMEOUT}
    settings.GAIA_WEBHOOK_ALLOWED_URLS = [env["GAIA_WEBHOOK_ALLOWED_URLS"]]
    settings.GAIA_WEBHOOK_RETRY_SECONDS = [float(s) for s in RETRY.split(",")]
    settings.GAIA_WEBHOOK_TIMEOUT_SECONDS = float(TIMEOUT)
    url = os.environ.get("REDIS_URL")
    if not url:
        yield "embedded"
        return
    with celery_worker_process(tmp_path / "celery.log", **env):
        yield "celery"


def wait_for(check: Callable[[], Any], what: str, seconds: float = 60) -> Any:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        found = check()
        if found:
            return found
        time.sleep(0.1)
    raise AssertionError(f"never happened: {what}")


@pytest.fixture
def staff(django_user_model: Any) -> APIClient:
    user = django_user_model.objects.create_user("ann", password="pw-12345678", is_staff=True)
    client = APIClient()
    client.force_login(user)
    return client


def _register(staff: APIClient, receiver: Receiver, path: str, events: list[str]) -> int:
    made = staff.post("/api/v1/webhooks", {"url": receiver.url + path, "events": events},
                      format="json")
    assert made.status_code == 201, made.content
    receiver.secrets[path] = made.json()["secret"]
    return made.json()["id"]


def test_a_decision_is_delivered_signed_after_two_failures_with_backoff_and_logged(
        staff: APIClient, receiver: Receiver, webhook_sender: str, make_agent: Any) -> None:
    endpoint = _register(staff, receiver, "/fail2/hooks", ["approval.decided"])
    _register(staff, receiver, "/ok/other", ["run.finished"])  # not subscribed: nothing
    agent = make_agent(slug="hooked")
    thread = Thread.objects.create(agent=agent, session_key="s")
    approval = services.approval_request(
        approval_id=uuid.uuid4(), thread_id=thread.pk, agent=agent, response_id="r",
        call_id="c1", tool="calculator", server="gaia", arguments="{}", timeout=600)
    r = staff.post(f"/api/v1/approvals/{approval.pk}", {"decision": "approve"}, format="json")
    assert r.status_code == 200, r.content
    assert Approval.objects.get(pk=approval.pk).status == "approved"

    delivery = wait_for(lambda: WebhookDelivery.objects.filter(
        endpoint_id=endpoint, state="succeeded").first(), "the delivery succeeded")
    got = receiver.of("/fail2/hooks")
    assert len(got) == 3, got
    assert all(g["verified"] for g in got), got
    assert {g["headers"]["webhook-id"] for g in got} == {delivery.event_id}
    event = got[-1]["event"]
    assert (event["id"], event["type"]) == (delivery.event_id, "approval.decided")
    assert set(event) == {"id", "type", "created_at", "data"}
    assert (event["data"]["approval_id"], event["data"]["status"]) == (str(approval.pk),
                                                                       "approved")
    # backed off as configured: at least 1 s, then at least 2 s, between the attempts
    gaps = [b["at"] - a["at"] for a, b in zip(got, got[1:], strict=False)]
    assert gaps[0] >= 0.9, gaps
    assert gaps[1] >= 1.9, gaps
    assert receiver.of("/ok/other") == []

    log = staff.get(f"/api/v1/webhooks/{endpoint}/deliveries").json()
    assert log["count"] == 1
    shown = log["results"][0]
    assert (shown["state"], shown["attempts"], shown["status_code"], shown["error"]) == (
        "succeeded", 3, 204, None)
    assert [a["status_code"] for a in shown["attempt_log"]] == [500, 500, 204]
    assert [a["number"] for a in shown["attempt_log"]] == [1, 2, 3]
    assert [a["response"] for a in shown["attempt_log"]] == ["answer 1", "answer 2", ""]
    assert [a["error"] for a in shown["attempt_log"]] == [
        "the receiver answered 500", "the receiver answered 500", None]
    assert not any(a["manual"] for a in shown["attempt_log"])
    assert shown["next_attempt_at"] is None

    # a redelivery: the same event id again, one attempt, logged as an operator's
    r = staff.post(f"/api/v1/webhooks/{endpoint}/deliveries/{delivery.pk}/redeliver")
    assert r.status_code == 202, r.content
    wait_for(lambda: len(receiver.of("/fail2/hooks")) == 4, "the redelivery arrived")
    again = receiver.of("/fail2/hooks")[-1]
    assert again["verified"]
    assert again["headers"]["webhook-id"] == delivery.event_id
    shown = wait_for(lambda: (lambda d: d if d["state"] == "succeeded" and d["attempts"] == 4
                              else None)(staff.get(f"/api/v1/webhooks/{endpoint}/deliveries/"
                                                   f"{delivery.pk}").json()),
                     "the redelivery was logged")
    assert shown["attempt_log"][-1]["manual"] is True
    assert shown["attempt_log"][-1]["status_code"] == 204


def test_a_receiver_that_hangs_fails_at_the_timeout_and_the_worker_goes_on(
        staff: APIClient, receiver: Receiver, webhook_sender: str) -> None:
    hang = _register(staff, receiver, "/hang/x", ["run.finished"])
    ok = _register(staff, receiver, "/ok/y", ["run.finished"])
    services.webhook_event_send(type="run.finished", data={"run_id": 1, "status": "succeeded"})
    # the hanging one is sent first (a solo Celery worker holds one task at a time)
    good = wait_for(lambda: WebhookDelivery.objects.filter(
        endpoint_id=ok, state="succeeded").first(), "the other endpoint was served")
    wait_for(lambda: WebhookDelivery.objects.get(endpoint_id=hang).attempts >= 1
             and WebhookDelivery.objects.get(endpoint_id=hang).state != "sending",
             "the hanging attempt ended")
    hung = staff.get(f"/api/v1/webhooks/{hang}/deliveries").json()["results"][0]
    first = hung["attempt_log"][0]
    assert first["status_code"] is None
    assert "timed out" in first["error"]
    assert "GAIA_WEBHOOK_TIMEOUT_SECONDS" in first["error"]
    assert first["latency_ms"] < 30_000  # the receiver would have held it a minute
    assert hung["state"] in ("pending", "sending", "failed")
    assert receiver.of("/hang/x")[0]["verified"]
    # disabled, it is not sent again: its next attempt ends it
    r = staff.patch(f"/api/v1/webhooks/{hang}", {"enabled": False}, format="json")
    assert r.status_code == 200
    ended = wait_for(lambda: WebhookDelivery.objects.filter(endpoint_id=hang,
                                                            state="failed").first(),
                     "the disabled endpoint's delivery failed")
    assert ended.error == "the endpoint is disabled: not sent"
    assert len(receiver.of("/hang/x")) == ended.attempts - 1
    assert good.status_code == 200
    assert receiver.of("/ok/y")[0]["event"]["data"] == {"run_id": 1, "status": "succeeded"}
