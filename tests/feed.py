"""Watch the operator feed from a test: a real channel-layer subscription to
``agents.feed`` in Redis, on a loop of its own, seeing what live Gaia processes publish.

Needs ``REDIS_URL`` (the servers the tests start inherit it): without Redis every process
has its own in-memory layer and nothing crosses processes, so the ``feed_listener`` fixture
(tests/conftest.py) skips.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable
from typing import Any


class FeedListener:
    def __init__(self, url: str) -> None:
        self.url = url
        self.events: list[dict[str, Any]] = []
        self._ready = threading.Event()
        self._lock = threading.Lock()
        self._loop = asyncio.new_event_loop()
        self._stop: asyncio.Event | None = None
        self._thread = threading.Thread(target=self._run, name="feed-listener", daemon=True)

    def start(self) -> FeedListener:
        self._thread.start()
        if not self._ready.wait(10):
            raise RuntimeError("the feed listener did not join its group")
        return self

    def _run(self) -> None:
        try:
            self._loop.run_until_complete(self._listen())
        finally:
            self._loop.close()

    async def _listen(self) -> None:
        from channels_redis.core import RedisChannelLayer

        from agents.outlet.realtime import FEED_GROUP

        layer = RedisChannelLayer(hosts=[self.url])
        channel = await layer.new_channel()
        await layer.group_add(FEED_GROUP, channel)
        self._stop = asyncio.Event()
        self._ready.set()
        stop = asyncio.ensure_future(self._stop.wait())
        try:
            while not self._stop.is_set():
                receive = asyncio.ensure_future(layer.receive(channel))
                await asyncio.wait({receive, stop}, return_when=asyncio.FIRST_COMPLETED)
                if not receive.done():
                    receive.cancel()
                    break
                message = receive.result()
                with self._lock:
                    self.events.extend(message.get("events", []))
        finally:
            await layer.group_discard(FEED_GROUP, channel)
            await layer.close_pools()

    def stop(self) -> None:
        if self._stop is not None:
            self._loop.call_soon_threadsafe(self._stop.set)
        self._thread.join(10)

    def named(self, name: str) -> list[dict[str, Any]]:
        with self._lock:
            return [e for e in self.events if e.get("event") == name]

    def wait_for(self, predicate: Callable[[dict[str, Any]], bool], timeout: float = 10
                 ) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            with self._lock:
                for e in self.events:
                    if predicate(e):
                        return e
            time.sleep(0.02)
        raise AssertionError(f"no such feed event within {timeout} s; saw "
                             f"{[e.get('event') for e in self.events]}")
