"""What the feed's consumer (:mod:`agents.feed.consumers`) sends: its bounded queue, the
sender task that writes it to the socket (one event a message, or JSON arrays with
``?batch=1``), replies to commands, and the subscription filter over the fan-out's batches.

A slow client never slows anyone else: the fan-out's handler (:meth:`FeedSending._feed_batch`)
only filters and appends, and the sender task writes. Past ``GAIA_FEED_QUEUE_MAX`` queued
events new ones are dropped and counted, and the client is told where the gap is
(``{"event": "lagged", "missed": N}``)."""

from __future__ import annotations

import asyncio
import collections
import logging
from typing import Any

from agents.feed import fanout
from agents.feed.input import error_code, event_agents, event_thread
from agents.kernel.exceptions import GaiaError
from agents.outlet import realtime

log = logging.getLogger("gaia.feed")

_WITH_SEQ = '{},"seq":{}}}'.format  # an open JSON text (fanout.open_text) and its seq


class FeedSending:
    """The outgoing half of :class:`agents.feed.consumers.FeedConsumer` (which holds the state
    annotated here and the websocket's ``send``)."""

    closed: bool
    batch: bool
    threads: frozenset[str]
    agents: frozenset[str]
    events: frozenset[str]
    _out: collections.deque[str | fanout.FeedChunk]
    _queued: int
    _wake: asyncio.Event
    _missed: int
    _seq: int
    _max: int

    def _lagged(self) -> None:
        self._out.append(fanout.open_text({"event": "lagged", "timestamp": realtime.now_iso(),
                                             "missed": self._missed}))
        self._queued += 1
        self._missed = 0

    def _queue(self, item: dict[str, Any], text: str | None = None, *,
               always: bool = False) -> None:
        """Queue ``item`` (with its open JSON ``text`` if already made) for the client; a feed
        event is dropped (and counted) when the queue is full. Replies to the client's
        commands (``always``) are never dropped."""
        if not always and self._queued >= self._max:
            self._missed += 1
            return
        if self._missed:
            self._lagged()  # where the gap is
        self._out.append(text if text is not None else fanout.open_text(item))
        self._queued += 1
        self._wake.set()

    def _take_one(self) -> str:
        """The next queued event (one event per message), closed with its ``seq``."""
        text = self._out.popleft()
        assert isinstance(text, str)  # chunks go to batch sockets only
        self._queued -= 1
        self._seq += 1
        return _WITH_SEQ(text, self._seq)

    def _take_array(self) -> str:
        """What is queued, up to ``FEED_BATCH_MAX`` events (at least one item), as one JSON
        array, each event with its ``seq``."""
        out = self._out
        head = out[0]
        if isinstance(head, fanout.FeedChunk) and len(out) == 1:  # the usual case
            out.popleft()
            message = head.array(self._seq + 1)
            self._seq += len(head.texts)
            self._queued = 0
            return message
        parts: list[str] = []
        taken = 0
        while out:
            item = out[0]
            n = len(item.texts) if isinstance(item, fanout.FeedChunk) else 1
            if taken and taken + n > fanout.FEED_BATCH_MAX:
                break
            out.popleft()
            first = self._seq + 1
            self._seq += n
            taken += n
            parts.append(item.items(first) if isinstance(item, fanout.FeedChunk)
                         else _WITH_SEQ(item, first))
        self._queued -= taken
        return f"[{','.join(parts)}]"

    async def _send_loop(self) -> None:
        take = self._take_array if self.batch else self._take_one
        try:
            while True:
                if not self._out:
                    if self._missed:
                        self._lagged()
                        continue
                    self._wake.clear()
                    await self._wake.wait()
                    continue
                # Batch mode needs no pacing here: realtime hands this socket one chunk per
                # FEED_BATCH_INTERVAL, and what queues while a send waits joins the next one.
                await self.send(text_data=take())
        except asyncio.CancelledError:
            raise
        except Exception:  # the socket is gone; websocket_disconnect cleans up
            log.debug("feed sender stopped", exc_info=True)

    def _reply(self, content: dict[str, Any], **fields: Any) -> None:
        self._queue({"event": "ack", "timestamp": realtime.now_iso(), "id": content.get("id"),
                     "cmd": content.get("cmd"), **fields}, always=True)

    def _error(self, cmd_id: Any, error: GaiaError) -> None:
        """A command's refusal: the code, field and HTTP status the REST API would answer
        (``retry_after`` too when it would send ``Retry-After``)."""
        answer = {"event": "error", "timestamp": realtime.now_iso(), "id": cmd_id,
                  "code": error_code(error), "param": error.param, "error": error.message,
                  "status": error.status}
        if error.retry_after is not None:
            answer["retry_after"] = error.retry_after
        self._queue(answer, always=True)

    def _feed_batch(self, batch: fanout.FeedBatch) -> None:
        """A batch of feed events (agents.feed.fanout.feed_join)."""
        if self.closed:
            return
        n = len(batch.texts)
        filtered = bool(self.events or self.threads or self.agents)
        if not filtered and not self._missed and self._queued + n <= self._max:
            # The common case, without a call per event.
            if isinstance(batch, fanout.FeedChunk):
                self._out.append(batch)
            else:
                self._out.extend(batch.texts)
            self._queued += n
            self._wake.set()
            return
        if filtered and isinstance(batch, fanout.FeedChunk):
            if batch.whole is None:  # a later chunk of an interval: the first had them all
                return
            batch = batch.whole
        for event, text in zip(batch.events, batch.texts, strict=True):
            if self._wants(event):
                self._queue(event, text)

    def _wants(self, event: dict[str, Any]) -> bool:
        """The subscription: each non-empty list must match. An event about no thread
        (``agent_state``, ``config_changed``...) is not filtered by ``threads``, one about no
        agent not by ``agents``; ``events`` filters every type."""
        if self.events and event["event"] not in self.events:
            return False
        if self.threads:
            thread = event_thread(event)
            if thread is not None and thread not in self.threads:
                return False
        if self.agents:
            agents = event_agents(event)
            if agents and not self.agents.intersection(agents):
                return False
        return True
