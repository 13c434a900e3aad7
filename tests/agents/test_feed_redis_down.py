"""Redis down: a feed socket is told so and closed (1013, with a reason), not left open and
silent; once Redis is back, the same server's feed works again (issue 26 item 5). A real
``redis-server`` started and stopped on a port of the test's own."""

from __future__ import annotations

import json
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from websockets.exceptions import ConnectionClosed
from websockets.sync.client import connect

from agents.models import ApiKey
from tests.conftest import free_port

pytestmark = pytest.mark.django_db(transaction=True)

REDIS_SERVER = "/usr/bin/redis-server"


class Redis:
    def __init__(self, tmp: Path) -> None:
        self.port, self.tmp, self.proc = free_port(), tmp, None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> None:
        self.proc = subprocess.Popen(
            [REDIS_SERVER, "--port", str(self.port), "--save", "", "--appendonly", "no",
             "--dir", str(self.tmp)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 20
        while subprocess.run(["redis-cli", "-p", str(self.port), "ping"], capture_output=True,
                             text=True).stdout.strip() != "PONG":
            assert time.monotonic() < deadline, "redis-server did not start"
            time.sleep(0.1)

    def stop(self) -> None:
        if self.proc is not None:
            self.proc.terminate()
            self.proc.wait(10)
            self.proc = None


@pytest.fixture
def redis(tmp_path: Path) -> Iterator[Redis]:
    if not Path(REDIS_SERVER).exists():
        pytest.fail("redis-server is missing: apt-get install -y redis-server")
    server = Redis(tmp_path)
    yield server
    server.stop()


def feed(server: Any, key: str) -> tuple[str, Any]:
    """``("connected", None)``, or ``("closed", close frame)``, within a generous bound."""
    url = server.url.replace("http://", "ws://") + "/ws"
    with connect(url, additional_headers={"Authorization": f"Bearer {key}"},
                 open_timeout=10) as sock:
        try:
            event = json.loads(sock.recv(timeout=30))
        except ConnectionClosed as exc:
            return "closed", exc.rcvd
        return event["event"], None


def test_the_feed_says_when_redis_is_down_and_works_when_it_is_back(
        gaia_server_factory: Any, make_key: Any, redis: Redis) -> None:
    _, key = make_key("ops", scopes=[ApiKey.Scope.OPERATOR])
    server = gaia_server_factory(REDIS_URL=redis.url, GAIA_FEED_JOIN_SECONDS="2")
    state, frame = feed(server, key)
    assert state == "closed"
    assert frame is not None
    assert frame.code == 1013
    assert "Redis" in frame.reason
    redis.start()
    deadline = time.monotonic() + 60  # the listener rejoins with a backoff of at most 5 s
    while (state := feed(server, key)[0]) != "connected":
        assert time.monotonic() < deadline, "the feed did not come back with Redis"
        time.sleep(0.5)
    # and an open socket is closed with the same code when Redis goes away under it
    url = server.url.replace("http://", "ws://") + "/ws"
    with connect(url, additional_headers={"Authorization": f"Bearer {key}"},
                 open_timeout=10) as sock:
        assert json.loads(sock.recv(timeout=10))["event"] == "connected"
        redis.stop()
        frame = None
        deadline = time.monotonic() + 60
        while frame is None and time.monotonic() < deadline:
            try:
                sock.recv(timeout=deadline - time.monotonic())
            except ConnectionClosed as exc:
                frame = exc.rcvd
                break
    assert frame is not None
    assert frame.code == 1013
    # a traceback when a listener loses Redis, then a line per retry (not a traceback each)
    lines = server.log().splitlines()
    retries = [i for i, line in enumerate(lines)
               if "lost its channel layer" in line and "(try 1)" not in line]
    assert retries
    assert all(not lines[i + 1].startswith("Traceback") for i in retries if i + 1 < len(lines))
