"""The independent poller of the stall tests (issue 35: "nothing a client sends may hold the
event loop"): ``/health`` and a bystander agent's chat, one after the other every 50 ms, on a
thread of the test process with its own connection, keeping the worst latency of each. An
attack passes when both stay under 250 ms (the issue's generous bound) while it runs."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import httpx

BOUND_MS = 250.0
POLL_SECONDS = 0.05


class Poller:
    """``/health`` and a bystander's chat, again and again, on a thread of its own."""

    def __init__(self, server: Any, key: str, model: str) -> None:
        self.server, self.key, self.model = server, key, model
        self.worst = {"health": 0.0, "chat": 0.0}
        self.polls = 0
        self.failures: list[str] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        with httpx.Client(base_url=self.server.url, timeout=60) as client:
            while not self._stop.is_set():
                t0 = time.perf_counter()
                health = client.get("/health")
                t1 = time.perf_counter()
                chat = client.post("/v1/chat/completions",
                                   headers={"Authorization": f"Bearer {self.key}"},
                                   json={"model": self.model, "messages": [
                                       {"role": "user", "content": "Are you there?"}]})
                t2 = time.perf_counter()
                if health.status_code != 200 or chat.status_code != 200:
                    self.failures.append(f"health {health.status_code}, chat "
                                         f"{chat.status_code}: {chat.text[:200]}")
                self.worst["health"] = max(self.worst["health"], (t1 - t0) * 1000)
                self.worst["chat"] = max(self.worst["chat"], (t2 - t1) * 1000)
                self.polls += 1
                self._stop.wait(POLL_SECONDS)

    def reset(self) -> None:
        self.worst = {"health": 0.0, "chat": 0.0}
        self.polls = 0
        self.failures.clear()

    def __enter__(self) -> Poller:
        self._thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._stop.set()
        self._thread.join(120)


@contextmanager
def polled(server: Any, key: str) -> Iterator[Poller]:
    """A poller running around the block, and its verdict after it: every poll answered,
    none slower than :data:`BOUND_MS`."""
    poller = Poller(server, key, "bystander")
    with poller:
        # a few polls before the attack, not counted: the server's caches and the poller's
        # connection are warm
        while poller.polls < 5:
            time.sleep(POLL_SECONDS)
        poller.reset()
        yield poller
        time.sleep(0.2)
    assert not poller.failures, poller.failures
    assert poller.polls >= 3  # it overlapped the attack (each poll waits 50 ms after the last)
    assert poller.worst["health"] < BOUND_MS, poller.worst
    assert poller.worst["chat"] < BOUND_MS, poller.worst


def repeat_for(seconds: float, attack: Callable[[], Any]) -> list[Any]:
    """``attack`` again and again for ``seconds`` (at least once): a quick refusal is tried
    for as long as the poller needs to see the server at work."""
    results = [attack()]
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        results.append(attack())
    return results
