"""A listener always stops when cancelled, even when the channel layer drops the cancellation.

redis-py sends each command through ``asyncio.wait_for`` when a socket timeout is set, and
Python 3.11's ``wait_for`` drops a cancellation that arrives as the send completes (CPython
gh-86296). A control listener cancelled while it joined its group went on into BZPOPMIN for
ever: CI hung twice in an event loop's shutdown (pytest-timeout at 60 s and 300 s)."""

from __future__ import annotations

import asyncio
import os
from collections.abc import Iterator
from typing import Any

import pytest
from channels.layers import InMemoryChannelLayer, channel_layers

from agents.outlet import realtime


class DroppingLayer(InMemoryChannelLayer):
    """An in-memory layer whose ``group_add`` drops one cancellation, as redis-py's send
    does on Python 3.11 when the cancel and the send's completion meet."""

    joining = asyncio.Event  # replaced per instance

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.joining = asyncio.Event()

    async def group_add(self, group: str, channel: str) -> None:
        await super().group_add(group, channel)
        self.joining.set()
        try:
            await asyncio.sleep(1)
        except asyncio.CancelledError:
            pass  # dropped: the send "had completed"


def use_layer(settings: Any, config: dict[str, Any]) -> None:
    settings.CHANNEL_LAYERS = {"default": config}
    channel_layers.backends.clear()


@pytest.fixture
def dropping_layer(settings: Any) -> Iterator[None]:
    use_layer(settings, {"BACKEND": f"{__name__}.DroppingLayer"})
    yield
    channel_layers.backends.clear()


async def test_a_listener_whose_cancel_the_layer_drops_still_stops(dropping_layer: None
                                                                    ) -> None:
    realtime.ensure_control_listener()
    (task,) = realtime.listener_tasks()
    layer = channel_layers["default"]
    await asyncio.wait_for(layer.joining.wait(), 5)
    task.cancel()  # lands in group_add, which drops it
    done, _ = await asyncio.wait({task}, timeout=3)
    assert done == {task}, "the listener went on listening after it was cancelled"
    assert task.cancelled()
    await realtime.listeners_stop()


@pytest.mark.skipif(not os.environ.get("REDIS_URL"), reason="needs Redis (channels-redis)")
@pytest.mark.parametrize("ticks", range(12))
async def test_a_redis_listener_cancelled_at_any_moment_stops(settings: Any, ticks: int
                                                               ) -> None:
    """Cancelled 0..11 loop ticks after it started (joining its group, or reading): it ends
    within 3 s every time. Before the fix most of these went on reading."""
    use_layer(settings, {"BACKEND": "channels_redis.core.RedisChannelLayer",
                         "CONFIG": {"hosts": [{"address": os.environ["REDIS_URL"],
                                               "socket_timeout": 30}]}})
    try:
        realtime.ensure_control_listener()
        (task,) = realtime.listener_tasks()
        for _ in range(ticks):
            await asyncio.sleep(0)
        task.cancel()
        done, _ = await asyncio.wait({task}, timeout=3)
        assert done == {task}, f"still listening 3 s after a cancel {ticks} ticks in"
        await realtime.listeners_stop()
    finally:
        channel_layers.backends.clear()
