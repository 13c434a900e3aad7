"""The operator API against real server processes: inject's reply arriving after the 202, a
kill stopping a running stream (in the same process, and from another process over Redis),
pause answering /v1 with 503, the ASGI body guard, the access log, the docs' static files."""

from __future__ import annotations

import json
import os
import re
import threading
import time
from typing import Any

import httpx
import pytest

from agents.models import Message, Thread

pytestmark = pytest.mark.django_db(transaction=True)

SLOW_REPLY = " ".join(f"word{i}" for i in range(60))


def wait_for(check: Any, timeout: float = 15.0, what: str = "condition") -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = check()
        if value:
            return value
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


@pytest.fixture
def slow_agent(make_agent: Any) -> Any:
    return make_agent(slug="slow", provider__name="slow-provider",
                      provider__options={"reply": SLOW_REPLY, "delay_ms": 150})


@pytest.fixture
def keys(make_key: Any) -> dict[str, str]:
    return {"operator": make_key("ops", scopes=["operator"])[1],
            "chat": make_key("client", scopes=["chat"])[1]}


def ops_post(server: Any, key: str, path: str, body: Any = None) -> httpx.Response:
    return httpx.post(f"{server.url}/api/v1/{path}", json=body, timeout=30,
                      headers={"Authorization": f"Bearer {key}"})


def ops_get(server: Any, key: str, path: str, **params: Any) -> httpx.Response:
    return httpx.get(f"{server.url}/api/v1/{path}", params=params, timeout=30,
                     headers={"Authorization": f"Bearer {key}"})


def chat(server: Any, key: str, model: str, text: str) -> httpx.Response:
    return httpx.post(f"{server.v1}/chat/completions", timeout=30,
                      headers={"Authorization": f"Bearer {key}"},
                      json={"model": model, "messages": [{"role": "user", "content": text}]})


class StreamReader(threading.Thread):
    """Reads a /v1 chat stream in the background, recording its frames as they come."""

    def __init__(self, server: Any, key: str, model: str) -> None:
        super().__init__(daemon=True)
        self.server, self.key, self.model = server, key, model
        self.frames: list[Any] = []
        self.thread_id: str | None = None
        self.done = threading.Event()

    def run(self) -> None:
        body = {"model": self.model, "stream": True,
                "messages": [{"role": "user", "content": "talk slowly"}]}
        with httpx.stream("POST", f"{self.server.v1}/chat/completions", json=body, timeout=60,
                          headers={"Authorization": f"Bearer {self.key}"}) as r:
            self.thread_id = r.headers.get("x-gaia-thread-id")
            for line in r.iter_lines():
                if line.startswith("data: ") and line != "data: [DONE]":
                    self.frames.append(json.loads(line[6:]))
        self.done.set()

    def text(self) -> str:
        return "".join(f["choices"][0]["delta"].get("content") or ""
                       for f in self.frames if f.get("choices"))


def kill_running_stream(stream_server: Any, kill_server: Any, keys: dict[str, str]) -> None:
    reader = StreamReader(stream_server, keys["chat"], "slow")
    reader.start()
    wait_for(lambda: len(reader.frames) >= 4, what="the first tokens")
    assert reader.thread_id
    r = ops_post(kill_server, keys["operator"], f"threads/{reader.thread_id}/kill")
    assert r.status_code == 202
    assert r.json() == {"thread_id": reader.thread_id, "status": "killed", "was_running": True}
    assert reader.done.wait(10), "the stream did not stop"
    errors = [f["error"] for f in reader.frames if "error" in f]
    assert [e["code"] for e in errors] == ["turn_killed"]
    partial = reader.text()
    assert partial
    assert len(partial) < len(SLOW_REPLY)

    def stored() -> Any:
        return Message.objects.filter(thread_id=reader.thread_id, role="assistant").first()

    reply = wait_for(stored, what="the partial reply")
    assert reply.finish_reason == "killed"
    assert reply.content
    assert SLOW_REPLY.startswith(reply.content)
    assert len(reply.content) < len(SLOW_REPLY)
    thread = Thread.objects.get(pk=reader.thread_id)
    assert thread.status == "killed"
    assert thread.lock_expires_at is None  # the turn released its lease
    listed = ops_get(kill_server, keys["operator"], f"threads/{reader.thread_id}").json()
    assert listed["status"] == "killed"
    assert listed["messages"][-1]["finish_reason"] == "killed"


def test_kill_stops_a_running_stream(gaia_server, slow_agent, keys):
    kill_running_stream(gaia_server, gaia_server, keys)


@pytest.mark.skipif(not os.environ.get("REDIS_URL"), reason="two processes need Redis")
def test_kill_sent_to_one_process_stops_a_stream_served_by_another(
        gaia_server_factory, slow_agent, keys):
    serving, other = gaia_server_factory(), gaia_server_factory()
    # Each process's control listener starts with its first turn: warm up the killing one.
    assert chat(other, keys["chat"], "slow", "warm up").status_code == 200
    kill_running_stream(serving, other, keys)


def test_inject_stores_at_once_and_the_reply_arrives(gaia_server, make_agent, keys):
    make_agent(slug="responder", provider__name="responder-provider",
               provider__options={"reply": "pong from the agent", "delay_ms": 100,
                                  "ttft_ms": 300})
    r = ops_post(gaia_server, keys["operator"], "inject",
                 {"to": "responder", "payload": {"text": "ping"}})
    assert r.status_code == 202, r.text
    body = r.json()
    assert set(body) == {"thread_id", "message_id"}
    stored = Message.objects.get(pk=body["message_id"])  # stored before the 202
    assert (stored.role, stored.content, str(stored.thread_id)) == ("user", "ping",
                                                                    body["thread_id"])
    assert not Message.objects.filter(thread_id=body["thread_id"], role="assistant").exists()

    def reply() -> Any:
        detail = ops_get(gaia_server, keys["operator"], f"threads/{body['thread_id']}").json()
        return detail if detail["status"] == "completed" else None

    detail = wait_for(reply, what="the injected turn's reply")
    sender = detail["messages"][0]["from"]  # the operator who sent it, not the client
    assert sender.startswith("operator key:ops (gaia_"), sender
    assert [(m["from"], m["to"], m["payload"]["content"]) for m in detail["messages"]] == [
        (sender, "responder", "ping"), ("responder", "ops", "pong from the agent")]
    assert detail["messages"][1]["finish_reason"] == "stop"
    assert detail["messages"][1]["dialect"] == "operator"

    # A second inject continues the thread.
    r = ops_post(gaia_server, keys["operator"], "inject",
                 {"to": "responder", "payload": "again", "thread_id": body["thread_id"]})
    assert r.status_code == 202, r.text
    assert r.json()["thread_id"] == body["thread_id"]
    wait_for(lambda: Thread.objects.get(pk=body["thread_id"]).message_count == 4
             and Thread.objects.get(pk=body["thread_id"]).status == "completed",
             what="the second reply")


def test_inject_on_a_busy_thread_is_409(gaia_server, slow_agent, keys):
    reader = StreamReader(gaia_server, keys["chat"], "slow")
    reader.start()
    wait_for(lambda: reader.frames, what="the stream")
    thread = Thread.objects.get(pk=reader.thread_id)
    r = ops_post(gaia_server, keys["operator"], "inject",
                 {"to": "slow", "payload": "interrupt", "thread_id": str(thread.pk)})
    assert r.status_code == 409
    assert r.json()["code"] == "thread_busy"
    ops_post(gaia_server, keys["operator"], f"threads/{thread.pk}/kill")
    assert reader.done.wait(10)


def test_pause_answers_v1_with_503_and_resume_restores_it(gaia_server, echo_agent, keys):
    assert chat(gaia_server, keys["chat"], "echo", "before").status_code == 200
    assert ops_post(gaia_server, keys["operator"], "agents/echo/pause").json()["state"] == "paused"
    r = chat(gaia_server, keys["chat"], "echo", "while paused")
    assert r.status_code == 503
    assert r.headers["retry-after"] == "30"
    assert r.json()["error"]["code"] == "agent_paused"
    assert "paused" in r.json()["error"]["message"]
    assert ops_get(gaia_server, keys["operator"], "agents/echo").json()["state"] == "paused"
    assert ops_post(gaia_server, keys["operator"], "agents/echo/resume").json()["state"] == "idle"
    r = chat(gaia_server, keys["chat"], "echo", "after")
    assert r.status_code == 200
    assert r.json()["choices"][0]["message"]["content"] == "after"


def test_oversized_body_is_413_json_before_it_is_read(gaia_server, keys):
    r = httpx.post(f"{gaia_server.url}/api/v1/inject", content=b"x" * (21 * 1024 * 1024),
                   timeout=30, headers={"Authorization": f"Bearer {keys['operator']}",
                                        "Content-Type": "application/json"})
    assert r.status_code == 413
    assert r.json()["code"] == "request_too_large"


def test_unknown_api_route_and_errors_are_json_on_the_server(gaia_server, keys):
    r = httpx.get(f"{gaia_server.url}/api/v1/no/such/thing", headers={"Accept": "text/html"})
    assert r.status_code == 404
    assert r.json()["code"] == "unknown_route"
    r = httpx.post(f"{gaia_server.url}/api/v1/inject", content=b"{oops", timeout=10,
                   headers={"Authorization": f"Bearer {keys['operator']}",
                            "Content-Type": "application/json"})
    assert r.status_code == 400
    assert r.json()["code"] == "parse_error"


def access_lines(log: str) -> list[str]:
    return [line for line in log.splitlines() if "gaia.access" in line or '"gaia.access"' in line]


def test_one_access_line_per_request(gaia_server, echo_agent, keys):
    r = chat(gaia_server, keys["chat"], "echo", "log me")
    thread_id = r.headers["x-gaia-thread-id"]
    prefix = keys["chat"][:13]
    with httpx.stream("POST", f"{gaia_server.v1}/chat/completions", timeout=30,
                      headers={"Authorization": f"Bearer {keys['chat']}"},
                      json={"model": "echo", "stream": True,
                            "messages": [{"role": "user", "content": "stream me"}]}) as s:
        streamed_thread = s.headers["x-gaia-thread-id"]
        s.read()
    ops_get(gaia_server, keys["operator"], f"threads/{thread_id}")

    def lines() -> list[str]:
        found = [line for line in access_lines(gaia_server.log())
                 if thread_id in line or streamed_thread in line]
        return found if len(found) >= 3 else []

    json_line, stream_line, api_line = wait_for(lines, what="three access lines")
    pattern = (rf"POST /v1/chat/completions 200 key_prefix={prefix} user=- agent=echo "
               rf"thread_id={thread_id} thread_found=new/hash ttft_ms=\d+ input_tokens=\d+ "
               rf"output_tokens=2 duration_ms=[\d.]+")
    assert re.search(pattern, json_line), json_line
    assert re.search(rf"thread_id={streamed_thread} thread_found=new/hash ttft_ms=\d+ "
                     r"input_tokens=\d+ output_tokens=2", stream_line), stream_line
    assert re.search(rf"GET /api/v1/threads/{thread_id} 200 key_prefix={keys['operator'][:13]}"
                     rf" user=- agent=echo thread_id={thread_id}", api_line), api_line
    assert keys["chat"] not in gaia_server.log()
    assert keys["operator"] not in gaia_server.log()


def test_access_lines_in_json(gaia_server_factory, echo_agent, keys):
    server = gaia_server_factory(GAIA_LOG_FORMAT="json")
    r = chat(server, keys["chat"], "echo", "json please")
    thread_id = r.headers["x-gaia-thread-id"]
    httpx.get(f"{server.url}/api/v1/agents")  # 401

    def records() -> list[dict[str, Any]]:
        out = []
        for line in server.log().splitlines():
            if line.startswith("{") and '"gaia.access"' in line:
                out.append(json.loads(line))
        return out if len(out) >= 2 else []

    chat_record, denied = wait_for(records, what="two JSON access lines")
    assert chat_record["logger"] == "gaia.access"
    assert chat_record["method"] == "POST"
    assert chat_record["path"] == "/v1/chat/completions"
    assert chat_record["status"] == 200
    assert chat_record["key_prefix"] == keys["chat"][:13]
    assert chat_record["agent"] == "echo"
    assert chat_record["thread_id"] == thread_id
    assert chat_record["thread_found"] == "new/hash"
    assert chat_record["output_tokens"] == 2
    assert isinstance(chat_record["ttft_ms"], int)
    assert chat_record["duration_ms"] > 0
    assert (denied["path"], denied["status"], denied["key_prefix"]) == ("/api/v1/agents", 401,
                                                                        None)


def test_a_stream_that_fails_mid_reply_says_so_in_its_line_and_metrics(
        gaia_server, make_agent, make_key, keys):
    """A stream whose provider fails after two tokens was sent as a 200 with the error
    in-band: its access line says it streamed, the model asked for, how the turn finished,
    the error's kind and the status the client effectively got (502); Prometheus counts it
    under that status."""
    from tests.test_metrics import scrape, value

    make_agent(slug="flaky", provider__options={
        "reply": "one two three four", "fail": "after", "fail_after": 2})
    metrics_key = make_key("prom", scopes=["metrics"])[1]
    route = "v1/chat/completions"
    before = value(scrape(gaia_server, metrics_key), "gaia_requests_total", route=route,
                   agent="flaky", status="502")
    body = {"model": "flaky", "stream": True, "messages": [{"role": "user", "content": "go"}]}
    with httpx.stream("POST", f"{gaia_server.v1}/chat/completions", json=body, timeout=30,
                      headers={"Authorization": f"Bearer {keys['chat']}"}) as r:
        assert r.status_code == 200
        thread_id = r.headers["x-gaia-thread-id"]
        sent = r.read().decode()
    assert '"error"' in sent  # told in-band
    line = wait_for(lambda: next((x for x in access_lines(gaia_server.log())
                                  if f"thread_id={thread_id}" in x), None),
                    what="the failed stream's access line")
    assert "POST /v1/chat/completions 200" in line
    assert re.search(r"streamed=true model=flaky finish=error error_kind=upstream "
                     r"effective_status=502", line), line
    after = value(scrape(gaia_server, metrics_key), "gaia_requests_total", route=route,
                  agent="flaky", status="502")
    assert after == before + 1
    assert ops_get(gaia_server, keys["operator"], "agents").status_code == 200
    plain = wait_for(lambda: next((x for x in access_lines(gaia_server.log())
                                   if "GET /api/v1/agents 200" in x), None), what="an API line")
    assert "streamed=false model=- finish=- error_kind=- effective_status=200" in plain


@pytest.mark.parametrize("page", ["docs", "redoc"])
def test_docs_load_only_our_static_files(gaia_server, page):
    html = httpx.get(f"{gaia_server.url}/api/{page}").text
    assets = re.findall(r'(?:src|href)="([^"]+)"', html)
    assert assets
    for asset in assets:
        assert asset.startswith("/"), asset  # nothing from another host
        r = httpx.get(gaia_server.url + asset)
        assert r.status_code == 200, asset
    assert re.search(r"/static/drf_spectacular_sidecar/(swagger-ui-dist|redoc)/", html)
    schema = httpx.get(f"{gaia_server.url}/api/schema", params={"format": "json"}).json()
    assert "/api/v1/inject" in schema["paths"]


def test_a_stream_the_client_leaves_still_gets_its_access_line(gaia_server, slow_agent, keys):
    body = {"model": "slow", "stream": True, "messages": [{"role": "user", "content": "bye"}]}
    with httpx.stream("POST", f"{gaia_server.v1}/chat/completions", json=body, timeout=30,
                      headers={"Authorization": f"Bearer {keys['chat']}"}) as r:
        thread_id = r.headers["x-gaia-thread-id"]
        for line in r.iter_lines():
            if line.startswith("data: "):
                break  # leave after the first frame
    line = wait_for(lambda: next((x for x in access_lines(gaia_server.log())
                                  if f"thread_id={thread_id}" in x), None),
                    what="the access line of the abandoned stream")
    assert "POST /v1/chat/completions 200" in line
    assert "agent=slow" in line
    reply = wait_for(lambda: Message.objects.filter(thread_id=thread_id,
                                                    role="assistant").first(),
                     what="the partial reply")
    assert reply.finish_reason == "client_disconnected"


def test_kill_answers_a_waiting_json_request_with_403(gaia_server, slow_agent, keys):
    result: dict[str, httpx.Response] = {}
    worker = threading.Thread(target=lambda: result.setdefault(
        "r", chat(gaia_server, keys["chat"], "slow", "json and slow")), daemon=True)
    worker.start()
    thread = wait_for(lambda: Thread.objects.filter(agent__slug="slow",
                                                    lock_expires_at__isnull=False).first(),
                      what="the running turn")
    time.sleep(0.5)  # a few tokens in
    assert ops_post(gaia_server, keys["operator"], f"threads/{thread.pk}/kill").json()[
        "was_running"] is True
    worker.join(10)
    r = result["r"]
    assert r.status_code == 403
    assert r.json()["error"]["code"] == "turn_killed"
    reply = wait_for(lambda: Message.objects.filter(thread=thread, role="assistant").first(),
                     what="the partial reply")
    assert reply.finish_reason == "killed"
    assert SLOW_REPLY.startswith(reply.content)
