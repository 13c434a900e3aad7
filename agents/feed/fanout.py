"""The feed's fan-out in each process, beside the consumer (:mod:`agents.feed.consumers`) it
serves.

One channel in :data:`agents.outlet.realtime.FEED_GROUP` per event loop, however many sockets
listen. A channel per socket would cost, per batch and socket, a copy of the batch (in-memory
layer), a channel-layer read and Channels' dispatch with its thread hop (close_old_connections):
with 100 sockets that halved /v1's throughput (scripts/perf/feed.py). Each event is also
serialised once here, not once per socket.

Two kinds of subscriber. An *immediate* one (a socket sending one event per message) gets each
:class:`FeedBatch` as it reaches the process. A *paced* one (a socket sending arrays of events)
gets at most one :class:`FeedChunk` per interval (:func:`feed_batch_interval`): what reached the
process meanwhile, its texts laid out once with slots for the sockets' own ``seq`` numbers, so
that 100 such sockets cost one join and one send each, not a Python step per event per socket.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from agents.outlet import realtime

log = logging.getLogger("gaia.realtime")

# A paced subscriber's chunks: at most one per interval (seconds), at most this many events.
FEED_BATCH_INTERVAL = 0.1
FEED_BATCH_MAX = 500
# Events waiting for paced subscribers that leave at once, interval or not (two full chunks:
# what a socket's default queue, GAIA_FEED_QUEUE_MAX, holds). Lower cost /v1 a measurable
# share more messages at full load (scripts/perf/feed.py --side-by-side, medians of 6: the
# feed cost /v1 10.5 % at 500, 9.6 % at 1,000).
FEED_BATCH_FLOOD = 2 * FEED_BATCH_MAX

# ASCII (\u escapes): one non-ASCII character (a title's "…") made a whole message a wide
# string, which uvicorn's UTF-8 encode then walked a character at a time: 75 µs for a
# 150-event message against 1.3 µs, per socket (scripts/perf/feed.py).
_dumps = json.JSONEncoder(ensure_ascii=True, separators=(",", ":")).encode


def open_text(event: dict[str, Any]) -> str:
    """``event``'s JSON text without its closing brace: a socket appends its own ``seq``."""
    return _dumps(event)[:-1]


@dataclass
class FeedBatch:
    """Feed events as they reached this process, and each one's :func:`open_text` (made
    once per process, however many sockets send it)."""

    events: list[dict[str, Any]]
    texts: list[str]


# A socket's seq numbers written into a FeedChunk's text: numbers below 10,000 come from
# SEQ_SMALL, larger ones are str(seq // 10,000) followed by SEQ_LOW[seq % 10,000] (built on
# first use; 20,000 short strings). Formatting them per event per socket (str(), or a
# %-template, which copies its text a character at a time) was most of what a batch socket
# cost; looked up, a 150-event message takes 7 µs instead of 50 (scripts/perf/feed.py).
_SEQ_SPAN = 10_000
_seq_tables: tuple[list[str], list[str]] | None = None


def _seq_parts(first: int, n: int) -> tuple[list[str], list[str]] | None:
    """The high and low parts of seq ``first`` .. ``first + n - 1``, or None when they cross a
    multiple of 10,000 (then the caller writes them out)."""
    global _seq_tables
    high, low = divmod(first, _SEQ_SPAN)
    if low + n > _SEQ_SPAN:
        return None
    if _seq_tables is None:
        _seq_tables = ([str(i) for i in range(_SEQ_SPAN)],
                       [f"{i:04d}" for i in range(_SEQ_SPAN)])
    small, padded = _seq_tables
    if high:
        return [str(high)] * n, padded[low:low + n]
    return [""] * n, small[low:low + n]


class FeedChunk(FeedBatch):
    """Up to :data:`FEED_BATCH_MAX` feed events for paced subscribers, the same for all of
    them. :meth:`array` is a socket's message: the events as a JSON array, numbered from the
    socket's next ``seq``."""

    def __init__(self, events: list[dict[str, Any]], texts: list[str], *,
                 whole: FeedBatch | None = None) -> None:
        super().__init__(events, texts)
        # The interval's events before _coalesced (on its first chunk only): what a socket
        # with a subscription filter picks from, since whether an event is superseded can
        # depend on another it does not take.
        self.whole = whole
        # Every event's open text, three slots apart: a socket fills the two slots after
        # each (its seq's high and low parts) and joins the list.
        self._frame: list[str] | None = None

    def _fill(self, first: int, opening: str, closing: str) -> str:
        frame = self._frame
        n = len(self.texts)
        if frame is None:
            frame = self._frame = [""] * (3 * n + 1)
            frame[0::3] = [("}," if i else "") + text + ',"seq":'
                           for i, text in enumerate(self.texts)] + ["}"]
        parts = frame.copy()
        parts[0] = opening + parts[0]
        parts[-1] += closing
        seq = _seq_parts(first, n)
        if seq is None:
            parts[2::3] = map(str, range(first, first + n))
        else:
            parts[1::3], parts[2::3] = seq
        return "".join(parts)

    def array(self, first: int) -> str:
        """``[event, ...]`` with seq ``first``, ``first + 1``..."""
        return self._fill(first, "[", "]")

    def items(self, first: int) -> str:
        """The events, comma-separated, without the brackets (for an array that holds more)."""
        return self._fill(first, "", "")


FeedSubscriber = Callable[[FeedBatch], None]


@dataclass
class _Fanout:
    """One event loop's feed subscribers, and the events waiting for its paced ones."""

    immediate: list[FeedSubscriber] = field(default_factory=list)
    paced: list[FeedSubscriber] = field(default_factory=list)
    events: list[dict[str, Any]] = field(default_factory=list)
    texts: list[str] = field(default_factory=list)
    last: float = float("-inf")  # when the paced ones were last handed a chunk
    timer: asyncio.TimerHandle | None = None


_fanouts: dict[asyncio.AbstractEventLoop, _Fanout] = {}
# Callbacks told (on their loop) when a ``config_changed`` event reaches this process: a feed
# socket authenticated by a key reads its key again (revoked, expired, scopes changed).
_config_watchers: dict[asyncio.AbstractEventLoop, list[Callable[[], None]]] = {}


_config_pollers: dict[asyncio.AbstractEventLoop, asyncio.Task[None]] = {}
# Callbacks not yet confirmed by a stamp read that began after they joined: a change that
# committed between a socket's key check and the poller's next read would otherwise be the
# poller's baseline, never a change (a key revoked right after its socket connected stayed
# open: CI, SQLite, a busy machine).
_config_unconfirmed: dict[asyncio.AbstractEventLoop, list[Callable[[], None]]] = {}


def feed_on_config_changed(callback: Callable[[], None]) -> None:
    """Call ``callback`` (on this loop, inline: it must not block) whenever the feed carries
    a ``config_changed`` event, looked for once per process, not once per socket; and when
    the configuration stamp, read every ``GAIA_FEED_KEY_CHECK_SECONDS`` by one task per loop
    while there are callbacks, has changed (the event does not cross processes without
    Redis, and one can be lost)."""
    loop = asyncio.get_running_loop()
    _config_watchers.setdefault(loop, []).append(callback)
    _config_unconfirmed.setdefault(loop, []).append(callback)
    poller = _config_pollers.get(loop)
    if poller is None or poller.done():
        _config_pollers[loop] = loop.create_task(_config_poll(loop), name="gaia-config-poll")


def _config_notify(loop: asyncio.AbstractEventLoop,
                   only: list[Callable[[], None]] | None = None) -> None:
    watchers = list(_config_watchers.get(loop) or ())
    for watcher in watchers if only is None else [w for w in only if w in watchers]:
        try:
            watcher()
        except Exception:
            log.exception("config watcher failed")


async def _config_poll(loop: asyncio.AbstractEventLoop) -> None:
    from django.conf import settings

    from agents import selectors
    from agents.infra.database import run_db

    seen: Any = ...
    while _config_watchers.get(loop):
        joined = _config_unconfirmed.pop(loop, [])
        try:
            version = await run_db(selectors.config_version)
        except Exception:  # the database is away: try again next time
            log.debug("config stamp unreadable", exc_info=True)
            _config_unconfirmed.setdefault(loop, [])[:0] = joined
        else:
            if seen is not ... and version != seen:
                _config_notify(loop)
            else:  # those that joined before this read check their key once more
                _config_notify(loop, only=joined)
            seen = version
        await asyncio.sleep(settings.GAIA_FEED_KEY_CHECK_SECONDS)
    _config_pollers.pop(loop, None)


def feed_off_config_changed(callback: Callable[[], None]) -> None:
    with contextlib.suppress(ValueError, KeyError):
        _config_watchers[asyncio.get_running_loop()].remove(callback)
    with contextlib.suppress(ValueError, KeyError):
        _config_unconfirmed[asyncio.get_running_loop()].remove(callback)


async def feed_join(subscriber: FeedSubscriber, *, paced: bool = False) -> None:
    """Call ``subscriber`` (on this loop) with the feed's events from now on: every
    :class:`FeedBatch` as it arrives, or, if ``paced``, a :class:`FeedChunk` at most every
    :func:`feed_batch_interval` (the first at once, a flood sooner). Returns once this
    process's listener has joined the feed group (nothing committed after this returns is
    missed). ``subscriber`` must not block: it runs inline."""
    loop = asyncio.get_running_loop()
    for gone in [lp for lp in _fanouts if lp.is_closed()]:
        del _fanouts[gone]
    fanout = _fanouts.setdefault(loop, _Fanout())
    (fanout.paced if paced else fanout.immediate).append(subscriber)
    await realtime.listen(realtime.FEED_GROUP, _handle_feed)


def feed_leave(subscriber: FeedSubscriber) -> None:
    """Stop calling ``subscriber``; idempotent."""
    fanout = _fanouts.get(asyncio.get_running_loop())
    if fanout is None:
        return
    for subscribers in (fanout.immediate, fanout.paced):
        with contextlib.suppress(ValueError):
            subscribers.remove(subscriber)


def _call_each(subscribers: list[FeedSubscriber], batch: FeedBatch) -> None:
    for subscriber in list(subscribers):
        try:
            subscriber(batch)
        except Exception:
            log.exception("feed subscriber failed")


async def _handle_feed(message: dict[str, Any]) -> None:
    loop = asyncio.get_running_loop()
    fanout = _fanouts.get(loop)
    if fanout is None or message.get("type") != realtime.FEED_MESSAGE:
        return
    if not (fanout.immediate or fanout.paced):
        return
    events = message["events"]
    if _config_watchers.get(loop) and any(e.get("event") == "config_changed" for e in events):
        _config_notify(loop)
    texts = [open_text(event) for event in events]
    if fanout.immediate:
        _call_each(fanout.immediate, FeedBatch(events, texts))
    if fanout.paced:
        fanout.events += events
        fanout.texts += texts
        if len(fanout.events) >= FEED_BATCH_FLOOD:
            # A flood leaves now: it would otherwise reach each socket as one heap per
            # interval, past its queue's bound (lagged) though it keeps up.
            if fanout.timer is not None:
                fanout.timer.cancel()
            _pace(fanout)
        elif fanout.timer is None:
            wait = max(0.0, fanout.last + feed_batch_interval(len(fanout.paced)) - loop.time())
            fanout.timer = loop.call_later(wait, _pace, fanout)


def feed_batch_interval(paced: int) -> float:
    """The time between two chunks for ``paced`` subscribers: :data:`FEED_BATCH_INTERVAL`, or
    longer when that would send them more than ``GAIA_FEED_BATCH_RATE`` messages a second in
    all (a message costs the server about as much as the events in it: scripts/perf/feed.py)."""
    from django.conf import settings

    return max(FEED_BATCH_INTERVAL, paced / settings.GAIA_FEED_BATCH_RATE)


def _coalesced(events: list[dict[str, Any]], texts: list[str]
               ) -> tuple[list[dict[str, Any]], list[str]]:
    """An interval's events less those a later one in it supersedes, for paced subscribers
    that take every event (who asked for the state at most every interval, not every
    step; a socket with a subscription filter picks from every event): of an agent's
    ``agent_state`` events the last, of a thread's ``thread_updated`` the last, and no
    ``message_delta`` of a reply whose stored ``message`` is in the same interval (it holds
    the whole text). Everything else is kept, in order."""
    last: dict[tuple[str, Any], int] = {}
    states = 0
    replied: set[Any] = set()
    for i, event in enumerate(events):
        kind = event["event"]
        if kind == "agent_state":
            last["agent", event["agent"]] = i
            states += 1
        elif kind == "thread_updated":
            last["thread", event["thread_id"]] = i
            states += 1
        elif kind == "message" and event["message"].get("role") == "assistant":
            replied.add(event["message"].get("response_id"))
    if len(last) == states and not replied:  # nothing superseded
        return events, texts
    keep_events, keep_texts = [], []
    for i, (event, text) in enumerate(zip(events, texts, strict=True)):
        kind = event["event"]
        if ((kind == "agent_state" and last["agent", event["agent"]] != i)
                or (kind == "thread_updated" and last["thread", event["thread_id"]] != i)
                or (kind == "message_delta" and event["response_id"] in replied)):
            continue
        keep_events.append(event)
        keep_texts.append(text)
    return keep_events, keep_texts


def _pace(fanout: _Fanout) -> None:
    """Hand the paced subscribers what gathered since the last time, in chunks of at most
    :data:`FEED_BATCH_MAX` events."""
    fanout.timer = None
    fanout.last = asyncio.get_running_loop().time()
    whole = FeedBatch(fanout.events, fanout.texts)
    fanout.events, fanout.texts = [], []
    events, texts = _coalesced(whole.events, whole.texts)
    for at in range(0, len(events), FEED_BATCH_MAX):
        _call_each(fanout.paced, FeedChunk(events[at:at + FEED_BATCH_MAX],
                                           texts[at:at + FEED_BATCH_MAX],
                                           whole=None if at else whole))
