"""The site's kept threads (gaia_site.site_handler): a request takes a free thread, and when
every one is taken waits for the first one freed, first come first served, not behind one
particular request (a provider's connection test can hold its thread for seconds)."""

from __future__ import annotations

import asyncio

import pytest

from gaia_site import site_handler


@pytest.fixture
def two_threads(settings, monkeypatch):
    settings.GAIA_SITE_THREADS = 2
    monkeypatch.setattr(site_handler, "_executors", [])
    monkeypatch.setattr(site_handler, "_free", [])
    monkeypatch.setattr(site_handler, "_waiting", site_handler.deque())
    yield
    for executor in site_handler._executors:
        executor.shutdown(wait=False)


def test_a_request_waits_for_the_first_thread_freed_in_arrival_order(two_threads):
    async def scenario():
        slow = await site_handler._acquire()  # held, as by a request waiting on the network
        quick = await site_handler._acquire()
        assert {slow, quick} == {0, 1}
        third = asyncio.ensure_future(site_handler._acquire())
        fourth = asyncio.ensure_future(site_handler._acquire())
        await asyncio.sleep(0.05)
        assert not third.done()  # both taken: they wait
        assert not fourth.done()
        site_handler._release(quick)  # the quick one ends; the slow one still runs
        assert await asyncio.wait_for(third, 5) == quick  # the first to wait gets it
        assert not fourth.done()
        site_handler._release(third.result())
        assert await asyncio.wait_for(fourth, 5) == quick
        site_handler._release(fourth.result())
        site_handler._release(slow)
        assert sorted(site_handler._free) == [0, 1]

    asyncio.run(scenario())


def test_a_request_cancelled_while_it_waits_gives_back_what_it_was_handed(two_threads):
    async def scenario():
        held = [await site_handler._acquire(), await site_handler._acquire()]
        gone = asyncio.ensure_future(site_handler._acquire())
        await asyncio.sleep(0.05)
        gone.cancel()  # the client went away before a thread was free
        with pytest.raises(asyncio.CancelledError):
            await gone
        site_handler._release(held.pop())
        later = await asyncio.wait_for(site_handler._acquire(), 5)  # not lost to the cancelled
        held.append(later)
        # Handed a thread in the same moment it is cancelled: the thread comes back too.
        racing = asyncio.ensure_future(site_handler._acquire())
        await asyncio.sleep(0.05)
        site_handler._release(held.pop())  # schedules the hand-over on the loop
        racing.cancel()
        with pytest.raises(asyncio.CancelledError):
            await racing
        await asyncio.sleep(0.05)
        assert len(site_handler._free) == 1  # the one it was handed came back, not lost
        site_handler._release(held.pop())
        assert sorted(site_handler._free) == [0, 1]

    asyncio.run(scenario())
